//! Where inputs come from:
//!
//! - `list`: a text file, one URL or path per line; blank lines and lines
//!   starting with `#` are ignored; a line with an unsupported scheme is a
//!   failed item (named `FILE:LINE`), not a silent drop;
//! - `inline`: `inputs = [...]` in the pipeline file (checked when the
//!   pipeline is compiled);
//! - `glob`: local files matching `pattern`, sorted; or, for an
//!   `s3://BUCKET/PREFIX/*.tif`, `az://CONTAINER/PREFIX/*.tif` or
//!   `gs://BUCKET/PREFIX/*.tif` pattern, the objects of a bucket's listing
//!   (see [`crate::store`]);
//! - `mosaic`: many inputs warped into one output;
//! - `stac`: the assets of STAC items, from an ItemCollection, a STAC API
//!   search or a static catalog.
//!
//! Accepted: `http://`, `https://`, `s3://`, `az://`, `gs://`, `file://` and
//! plain local paths (the `schemes` setting narrows this). Anything else
//! (`ftp://`, `/vsicurl/...`, ...) is refused: warpline never hands an input's name to
//! GDAL, so GDAL cannot be made to open URLs or files of its own.
//!
//! Each input's id is its file name without the extension, made safe for
//! file names ([`safe_id`]: letters, digits, `-`, `_`, `.`). Ids are unique
//! in a run: when a name was already given, the input gets `NAME~2`,
//! `NAME~3`, ... in input order. A name made safe never holds a `~`, so a
//! de-duplicated id can be no other input's name, earlier or later (the
//! inputs are a stream read lazily: nothing can be looked ahead at).

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use warpline_engine::redact::redact;
use warpline_engine::{Input, Problem, Registry, Settings, Source, SourceError, SourceSpec};

mod mosaic;
mod stac;

pub(crate) fn register(r: &mut Registry) {
    r.register_source("list", list);
    r.register_source("inline", inline);
    r.register_source("glob", glob_source);
    r.register_source("mosaic", mosaic::mosaic);
    r.register_source("stac", stac::stac);
}

/// The schemes an input may use.
#[derive(Debug, Clone)]
struct Schemes {
    allowed: Vec<String>,
}

const KNOWN_SCHEMES: &[&str] = &["http", "https", "s3", "az", "gs", "file"];

impl Schemes {
    fn parse(s: &Settings, given: Option<Vec<String>>) -> Result<Self, Problem> {
        let allowed =
            given.unwrap_or_else(|| KNOWN_SCHEMES.iter().map(|s| s.to_string()).collect());
        for (i, scheme) in allowed.iter().enumerate() {
            if !KNOWN_SCHEMES.contains(&scheme.as_str()) {
                return Err(s.problem(
                    &format!("schemes[{i}]"),
                    format!("unknown scheme {scheme:?}; warpline fetches \"http\", \"https\", \"s3\", \"az\" and \"file\" (local paths)"),
                ));
            }
        }
        Ok(Schemes { allowed })
    }

    /// Checks one input; returns it as the fetch stage will read it.
    fn check(&self, text: &str) -> Result<String, String> {
        // Errors quote the input without its secrets: it may be a URL that
        // does not parse, with a password or a signature in it.
        let shown = redact(text);
        let scheme = scheme_of(text);
        let name = scheme.unwrap_or("file");
        if !KNOWN_SCHEMES.contains(&name) {
            return Err(format!(
                "unsupported input {shown:?}: only http://, https://, s3://, az://, gs://, file:// and local paths are read"
            ));
        }
        if !self.allowed.iter().any(|a| a == name) {
            return Err(format!(
                "input {shown:?} uses {name}, which this pipeline does not allow (schemes = {:?})",
                self.allowed
            ));
        }
        if scheme.is_none() && text.starts_with("/vsi") {
            return Err(format!(
                "unsupported input {shown:?}: GDAL virtual file names are not inputs; give the URL or path itself"
            ));
        }
        if crate::store::is_store(text) {
            crate::store::ObjectUrl::parse(text)?;
        } else if let Some(s) = scheme {
            if s != "file" {
                url::Url::parse(text).map_err(|e| format!("malformed URL {shown:?}: {e}"))?;
            }
        }
        Ok(text.to_owned())
    }
}

/// The scheme of `text` if it looks like `scheme:...` (and not a Windows
/// drive letter).
fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once(':')?;
    let ok = scheme.len() > 1
        && scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    ok.then_some(scheme)
}

use crate::ids::Ids;
pub use crate::ids::{file_name_id, safe_id, DEDUP_MARK};

// --- list -----------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListSettings {
    path: Option<String>,
    schemes: Option<Vec<String>>,
}

#[derive(Debug)]
struct List {
    path: PathBuf,
    schemes: Schemes,
}

fn list(s: &Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> {
    let l: ListSettings = s.parse()?;
    let schemes = Schemes::parse(s, l.schemes).map_err(|p| vec![p])?;
    let Some(path) = l.path else {
        return Err(vec![s.problem(
            "path",
            "missing: the text file listing one URL or path per line",
        )]);
    };
    Ok(Arc::new(List {
        path: PathBuf::from(path),
        schemes,
    }))
}

impl SourceSpec for List {
    /// The list is a local file; its lines are not read here.
    fn opens_offline(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        let open = || {
            std::fs::File::open(&self.path)
                .map_err(|e| format!("cannot read the input list {}: {e}", self.path.display()))
        };
        // One pass to count the inputs (for progress), then the real read.
        let len = std::io::BufReader::new(open()?)
            .lines()
            .map_while(Result::ok)
            .filter(|l| {
                let t = l.trim();
                !t.is_empty() && !t.starts_with('#')
            })
            .count() as u64;
        Ok(Box::new(ListRun {
            len,
            name: self.path.display().to_string(),
            lines: std::io::BufReader::new(open()?).lines(),
            line_no: 0,
            schemes: self.schemes.clone(),
            ids: Ids::default(),
        }))
    }
}

struct ListRun {
    len: u64,
    name: String,
    lines: std::io::Lines<std::io::BufReader<std::fs::File>>,
    line_no: u64,
    schemes: Schemes,
    ids: Ids,
}

#[async_trait]
impl Source for ListRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        // One line at a time, read when the pipeline has room: a small,
        // blocking read of a local file.
        loop {
            let line = self.lines.next()?;
            self.line_no += 1;
            let where_ = format!("{}:{}", self.name, self.line_no);
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    return Some(Err(SourceError {
                        id: where_,
                        message: format!("unreadable line: {e}"),
                    }))
                }
            };
            let text = line.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            return Some(match self.schemes.check(text) {
                Ok(source) => Ok(Input {
                    id: self.ids.next(&redact(&source)),
                    source,
                    size_hint: None,
                    meta: Default::default(),
                }),
                Err(message) => Err(SourceError {
                    id: where_,
                    message,
                }),
            });
        }
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.len)
    }
}

// --- inline ---------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InlineSettings {
    inputs: Option<Vec<String>>,
    schemes: Option<Vec<String>>,
}

#[derive(Debug)]
struct Inline {
    inputs: Vec<String>,
}

fn inline(s: &Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> {
    let l: InlineSettings = s.parse()?;
    let schemes = Schemes::parse(s, l.schemes).map_err(|p| vec![p])?;
    let Some(inputs) = l.inputs else {
        return Err(vec![s.problem("inputs", "missing: a list of URLs or paths")]);
    };
    let problems: Vec<Problem> = inputs
        .iter()
        .enumerate()
        .filter_map(|(i, text)| {
            schemes
                .check(text.trim())
                .err()
                .map(|m| s.problem(&format!("inputs[{i}]"), m))
        })
        .collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Arc::new(Inline {
        inputs: inputs.iter().map(|s| s.trim().to_owned()).collect(),
    }))
}

impl SourceSpec for Inline {
    fn opens_offline(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        Ok(Box::new(VecRun::new(self.inputs.clone())))
    }
}

/// Inputs known up front.
struct VecRun {
    inputs: std::vec::IntoIter<String>,
    len: u64,
    ids: Ids,
}

impl VecRun {
    fn new(inputs: Vec<String>) -> Self {
        VecRun {
            len: inputs.len() as u64,
            inputs: inputs.into_iter(),
            ids: Ids::default(),
        }
    }
}

#[async_trait]
impl Source for VecRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        let source = self.inputs.next()?;
        Some(Ok(Input {
            id: self.ids.next(&redact(&source)),
            source,
            size_hint: None,
            meta: Default::default(),
        }))
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.len)
    }
}

// --- glob -----------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobSettings {
    pattern: Option<String>,
    endpoint: Option<String>,
}

#[derive(Debug)]
struct Glob {
    pattern: String,
}

fn glob_source(s: &Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> {
    let g: GlobSettings = s.parse()?;
    let Some(pattern) = g.pattern else {
        return Err(vec![
            s.problem("pattern", "missing: a pattern such as \"data/*.tif\"")
        ]);
    };
    if crate::store::is_store(&pattern) {
        return crate::store::glob_source(s, &pattern, g.endpoint);
    }
    if g.endpoint.is_some() {
        return Err(vec![s.problem(
            "endpoint",
            "only for an s3://, az:// or gs:// pattern: a local glob asks no server",
        )]);
    }
    if let Err(e) = glob::Pattern::new(&pattern) {
        return Err(vec![
            s.problem("pattern", format!("invalid pattern {pattern:?}: {e}"))
        ]);
    }
    Ok(Arc::new(Glob { pattern }))
}

impl SourceSpec for Glob {
    /// A local pattern (a bucket's is another source kind).
    fn opens_offline(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        let paths = glob::glob(&self.pattern)
            .map_err(|e| format!("invalid pattern {:?}: {e}", self.pattern))?;
        let mut inputs = Vec::new();
        for p in paths {
            let p = p.map_err(|e| format!("cannot list {}: {e}", self.pattern))?;
            if p.is_file() {
                inputs.push(p.display().to_string());
            }
        }
        inputs.sort();
        Ok(Box::new(VecRun::new(inputs)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_safe_and_unique() {
        let mut ids = Ids::default();
        assert_eq!(ids.next("https://h/tiles/12/a.tif?sig=1"), "a");
        assert_eq!(ids.next("/data/other/a.tif"), "a~2");
        assert_eq!(
            ids.next("https://h/x/..%2F..%2Fetc%2Fpasswd.tif"),
            "_.._etc_passwd"
        );
        assert_eq!(safe_id("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe_id("..."), "_");
        assert_eq!(safe_id(""), "_");
        assert_eq!(safe_id(&"x".repeat(500)).len(), 120);
    }

    /// Issue 16, item 5: `t000030-2` was given twice (to the second
    /// `t000030` and to a file really named `t000030-2`).
    #[test]
    fn a_de_duplicated_id_is_no_other_inputs_name() {
        let mut ids = Ids::default();
        let given: Vec<String> = [
            "tiles/t000030.tif",
            "skewed/t000030.tif",
            "crafted/t000030-2.tif",
            "crafted/t000030~2.tif",
            "more/t000030.tif",
            "x/t000030_2.tif",
        ]
        .iter()
        .map(|s| ids.next(s))
        .collect();
        assert_eq!(
            given,
            [
                "t000030",
                "t000030~2",
                "t000030-2",
                "t000030_2",
                "t000030~3",
                "t000030_2~2"
            ]
        );
        let files: std::collections::HashSet<String> =
            given.iter().map(|id| file_name_id(id)).collect();
        assert_eq!(files.len(), given.len(), "two ids name one file: {given:?}");
    }

    #[test]
    fn file_names_keep_every_id_a_source_makes() {
        let long = "x".repeat(500);
        let mut ids = Ids::default();
        let first = ids.next(&format!("/a/{long}.tif"));
        let second = ids.next(&format!("/b/{long}.tif"));
        assert_eq!(file_name_id(&first), first);
        assert_eq!(file_name_id(&second), second);
        assert_ne!(file_name_id(&first), file_name_id(&second));
        assert_eq!(file_name_id("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(file_name_id("~2"), "2");
        assert_eq!(file_name_id("..."), "_");
        assert_eq!(file_name_id(&long).len(), 160);
    }

    #[test]
    fn schemes_are_checked() {
        let s = Schemes {
            allowed: KNOWN_SCHEMES.iter().map(|s| s.to_string()).collect(),
        };
        assert!(s.check("https://example.com/a.tif").is_ok());
        assert!(s.check("file:///data/a.tif").is_ok());
        assert!(s.check("/data/a.tif").is_ok());
        assert!(s.check("data/a.tif").is_ok());
        assert!(s.check("ftp://example.com/a.tif").is_err());
        assert!(s.check("s3://bucket/a.tif").is_ok());
        assert!(s.check("s3://Bucket_/a.tif").is_err());
        assert!(s.check("az://container/a.tif").is_ok());
        assert!(s.check("az://Bad_Container/a.tif").is_err());
        assert!(s.check("gs://bucket/a.tif").is_ok());
        assert!(s.check("gs://my_bucket.example/a.tif").is_ok());
        assert!(s.check("gs://Bad/a.tif").is_err());
        assert!(s.check("/vsicurl/http://127.0.0.1:1/x").is_err());
        let only_https = Schemes {
            allowed: vec!["https".into()],
        };
        assert!(only_https.check("http://example.com/a.tif").is_err());
        assert!(only_https.check("/data/a.tif").is_err());
    }
}
