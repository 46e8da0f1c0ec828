//! The `mosaic` source: many inputs warped into one output, as
//! `gdalwarp a.tif b.tif c.tif out.tif` does. It makes one item, named by
//! `id`, whose source is its inputs one per line, in order (where inputs
//! overlap, a later one's valid pixels win, as in gdalwarp). Fetch reads
//! each, charging the byte budget as they arrive; decode opens each;
//! reproject warps them all into one output (`GDALWarp` with every input).

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use warpline_engine::{Input, Problem, Settings, Source, SourceError, SourceSpec};

use super::{safe_id, Schemes};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MosaicSettings {
    id: Option<String>,
    inputs: Option<Vec<String>>,
    pattern: Option<String>,
    schemes: Option<Vec<String>>,
}

#[derive(Debug)]
struct Mosaic {
    id: String,
    inputs: Vec<String>,
    pattern: Option<String>,
}

pub(super) fn mosaic(s: &Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> {
    let m: MosaicSettings = s.parse()?;
    let schemes = Schemes::parse(s, m.schemes).map_err(|p| vec![p])?;
    let mut problems = Vec::new();
    let id = m.id.unwrap_or_default();
    if safe_id(&id).is_empty() {
        problems.push(s.problem("id", "missing: the output's id, e.g. \"alps\""));
    }
    let inputs: Vec<String> = m.inputs.unwrap_or_default();
    for (i, text) in inputs.iter().enumerate() {
        if let Err(e) = schemes.check(text.trim()) {
            problems.push(s.problem(&format!("inputs[{i}]"), e));
        }
    }
    match (&m.pattern, inputs.is_empty()) {
        (None, true) => problems.push(s.problem(
            "inputs",
            "missing: the inputs to warp into one output (`inputs` or a local `pattern`)",
        )),
        (Some(_), false) => {
            problems.push(s.problem("pattern", "give `inputs` or `pattern`, not both"))
        }
        (Some(p), true) => {
            if let Err(e) = glob::Pattern::new(p) {
                problems.push(s.problem("pattern", format!("invalid pattern {p:?}: {e}")));
            }
        }
        (None, false) => {}
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Arc::new(Mosaic {
        id: safe_id(&id),
        inputs: inputs.iter().map(|t| t.trim().to_owned()).collect(),
        pattern: m.pattern,
    }))
}

impl SourceSpec for Mosaic {
    /// Its inputs are in the pipeline, or a local pattern's files.
    fn opens_offline(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        let inputs = match &self.pattern {
            None => self.inputs.clone(),
            Some(pattern) => {
                let mut found = Vec::new();
                for p in
                    glob::glob(pattern).map_err(|e| format!("invalid pattern {pattern:?}: {e}"))?
                {
                    let p = p.map_err(|e| format!("cannot list {pattern}: {e}"))?;
                    if p.is_file() {
                        found.push(p.display().to_string());
                    }
                }
                found.sort();
                found
            }
        };
        if let Some(bad) = inputs.iter().find(|i| i.contains('\n')) {
            return Err(format!("{bad:?}: an input's name has a line break").into());
        }
        Ok(Box::new(One {
            input: (!inputs.is_empty()).then(|| Input {
                id: self.id.clone(),
                source: inputs.join("\n"),
                size_hint: None,
                meta: Default::default(),
            }),
        }))
    }
}

/// The one item of a mosaic (none when a pattern matched nothing).
struct One {
    input: Option<Input>,
}

#[async_trait]
impl Source for One {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        self.input.take().map(Ok)
    }

    fn len_hint(&self) -> Option<u64> {
        Some(u64::from(self.input.is_some()))
    }
}
