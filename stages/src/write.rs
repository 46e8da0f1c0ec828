//! The `write` stage (blocking): GeoTIFF or COG files.
//!
//! - Creation options are checked against the driver's own list before the
//!   run: an unknown option or value is a configuration error (GDAL would
//!   only warn and go on).
//! - The output path comes from a template (`{id}.tif` by default) in `dir`.
//!   The id is made file-name safe, and the path must stay inside `dir`.
//! - A file is written to a temporary name in the same directory, synced,
//!   and renamed into place: a file at the final path is always complete.
//!   An existing output is skipped (resume), overwritten, or an error, per
//!   `exists`.
//! - `dir = "s3://BUCKET/PREFIX"` or `"az://CONTAINER/PREFIX"` uploads each output (see
//!   [`crate::store`]): the file is written as above in a local staging
//!   directory (`staging`), then sent with a multipart upload, so the object
//!   appears only when complete; `exists` asks with a HEAD request. An
//!   output that was not there is created only if it still is not
//!   (`conditional_create`): another writer's is never replaced, and
//!   counts done once complete (`make`).
//!   `gs://` is read, not written (see `store::Scheme::writes`).
//! - BIGTIFF is chosen from the uncompressed size (GDAL's `IF_NEEDED`
//!   cannot know the compressed size); INTERLEAVE is passed explicitly.
//! - `stac = true` (the default for COG): a STAC item beside each output,
//!   the run's collection, and the provenance in the GeoTIFF (`publish`).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use warpline_engine::{
    BlockingStage, Handler, Item, Outcome, Payload, Problem, Settings, StageError,
};

use warpline_gdal::{init, Raster};

use crate::ids::file_name_id;
use crate::space::{failed, io_full, SpaceWatch};
use crate::store::{Output, Put};
use crate::temps::{temporary_name, Sweeper};

mod claims;
mod collection;
mod make;
mod options;
mod publish;
mod sidecars;
mod stac;

use claims::Claims;
use options::{check_option, declared_options};
use publish::{CollectionSettings, Publish, Publishing};

pub use crate::payloads::Written;

/// What to do when the output already exists: `exists = "skip"` (the
/// default), `"overwrite"` or `"error"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum Exists {
    /// Count the item skipped (an earlier run finished it).
    #[default]
    Skip,
    /// Replace it.
    Overwrite,
    /// Fail the item.
    Error,
}

warpline_engine::word_setting!(Exists, "\"skip\", \"overwrite\" or \"error\"", {
    "skip" => Exists::Skip,
    "overwrite" => Exists::Overwrite,
    "error" => Exists::Error,
});

/// The file format written: `format = "GTiff"` (the default) or `"COG"`,
/// by the GDAL driver of that name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
enum Format {
    #[default]
    GTiff,
    Cog,
}

impl Format {
    /// The GDAL driver's name.
    fn driver(self) -> &'static str {
        match self {
            Format::GTiff => "GTiff",
            Format::Cog => "COG",
        }
    }
}

warpline_engine::word_setting!(Format, "\"GTiff\" or \"COG\"", {
    "GTiff" => Format::GTiff,
    "COG" => Format::Cog,
});

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteSettings {
    dir: Option<String>,
    name: Option<String>,
    format: Option<Format>,
    creation_options: Option<BTreeMap<String, String>>,
    exists: Option<Exists>,
    endpoint: Option<String>,
    staging: Option<String>,
    conditional_create: Option<bool>,
    stac: Option<bool>,
    collection: Option<CollectionSettings>,
}

/// The write stage.
#[derive(Debug)]
pub struct Write {
    dir: PathBuf,
    name: String,
    driver: String,
    options: Vec<(String, String)>,
    exists: Exists,
    temps: Sweeper,
    claims: Claims,
    /// Where outputs are uploaded (`dir = "s3://..."`); `dir` is then the
    /// local staging directory.
    remote: Option<Arc<Output>>,
    /// An output that was not there is uploaded only if it still is not
    /// (`conditional_create`, see [`crate::store::Put`]).
    conditional: bool,
    /// The STAC items, collection and provenance (`stac`).
    publish: Option<Publish>,
}

/// Checks a name template: relative, no `..`, and it names `{id}`.
fn check_template(name: &str) -> Result<(), String> {
    if !name.contains("{id}") {
        return Err("must contain {id}, or every item would write the same file".to_owned());
    }
    let path = Path::new(name);
    if path.is_absolute()
        || path
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(format!(
            "{name:?} must be a relative path without `..` or `.`"
        ));
    }
    let rest = name.replace("{id}", "");
    if rest.contains('{') || rest.contains('}') {
        return Err(format!("{name:?}: the only placeholder is {{id}}"));
    }
    Ok(())
}

pub(crate) fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    init();
    let mut problems = Vec::new();
    let Some(w) = s.read::<WriteSettings>(&mut problems) else {
        return Err(problems);
    };
    let dir = match w.dir {
        Some(d) if !d.trim().is_empty() => d,
        _ => {
            problems.push(s.problem("dir", "missing: the directory outputs are written to"));
            String::new()
        }
    };
    if w.conditional_create.is_some() && !crate::store::is_store(&dir) {
        problems.push(s.problem(
            "conditional_create",
            "only with dir = \"s3://BUCKET/PREFIX\" or \"az://CONTAINER/PREFIX\"",
        ));
    }
    let (dir, remote) = match remote_output(&dir, w.endpoint, w.staging) {
        Ok(chosen) => chosen,
        Err((key, m)) => {
            problems.push(s.problem(key, m));
            (PathBuf::new(), None)
        }
    };
    let name = w.name.unwrap_or_else(|| "{id}.tif".to_owned());
    if let Err(m) = check_template(&name) {
        problems.push(s.problem("name", m));
    }
    let driver = w.format.unwrap_or_default().driver().to_owned();
    let options: Vec<(String, String)> =
        w.creation_options.unwrap_or_default().into_iter().collect();
    match warpline_gdal::creation_option_list(&driver)
        .map_err(|e| e.to_string())
        .and_then(|xml| declared_options(&xml))
    {
        Err(m) => problems.push(s.problem("format", m)),
        Ok(declared) => {
            for (k, v) in &options {
                if let Err(m) = check_option(&declared, k, v) {
                    problems.push(s.env_problem(&format!("creation_options.{k}"), m));
                }
            }
        }
    }
    let exists = w.exists.unwrap_or_default();
    if !problems.is_empty() {
        return Err(problems);
    }
    let remote = remote.map(Arc::new);
    let stac = w.stac.unwrap_or(driver == "COG");
    let publish = match (stac, w.collection) {
        (false, Some(_)) => {
            return Err(vec![s.problem(
                "collection",
                "describes the STAC collection, which is written only with stac = true",
            )])
        }
        (false, None) => None,
        (true, table) => {
            let settings = table.unwrap_or_default();
            if let Err(m) = settings.check() {
                return Err(vec![s.problem("collection", m)]);
            }
            match Publish::new(&dir, remote.clone(), &name, &driver, settings) {
                Ok(p) => Some(p),
                Err(m) => return Err(vec![s.problem("name", m)]),
            }
        }
    };
    Ok(Handler::from_blocking(Write {
        dir,
        name,
        driver,
        options,
        exists,
        temps: Sweeper::default(),
        claims: Claims::default(),
        remote,
        conditional: w.conditional_create.unwrap_or(true),
        publish,
    }))
}

/// The local directory GDAL writes in, and the bucket it is uploaded to
/// when `dir` is an `s3://` or `az://` URL (else `endpoint` and `staging`
/// are errors; a `gs://` one is refused: see `Scheme::writes`).
fn remote_output(
    dir: &str,
    endpoint: Option<String>,
    staging: Option<String>,
) -> Result<(PathBuf, Option<Output>), (&'static str, String)> {
    if !crate::store::is_store(dir) {
        if endpoint.is_some() || staging.is_some() {
            let key = if endpoint.is_some() {
                "endpoint"
            } else {
                "staging"
            };
            return Err((
                key,
                "only with dir = \"s3://BUCKET/PREFIX\" or \"az://CONTAINER/PREFIX\"".to_owned(),
            ));
        }
        return Ok((PathBuf::from(dir), None));
    }
    crate::store::ObjectUrl::parse(dir)
        .and_then(|url| url.scheme.writes())
        .map_err(|m| ("dir", m))?;
    let staging = match staging {
        Some(s) => PathBuf::from(s),
        None => crate::store::default_staging().map_err(|m| ("staging", m))?,
    };
    let output = Output::parse(dir, endpoint, &staging).map_err(|m| ("dir", m))?;
    Ok((staging, Some(output)))
}

/// Removes a temporary output (and GDAL's own side files) unless kept.
struct TempGuard {
    path: PathBuf,
    keep: bool,
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
            sidecars::remove_beside(&self.path);
        }
    }
}

impl Write {
    /// Where the item's output goes; always inside `dir`.
    pub fn output_path(&self, id: &str) -> PathBuf {
        self.dir.join(self.file_name(id))
    }

    fn file_name(&self, id: &str) -> String {
        self.name.replace("{id}", &file_name_id(id))
    }

    /// The output as messages name it: its path, or its URL when uploaded.
    fn shown(&self, id: &str, path: &Path) -> String {
        match &self.remote {
            Some(remote) => remote.shown(&self.file_name(id)),
            None => path.display().to_string(),
        }
    }

    /// Whether the output is there: on disk, or in the bucket (HEAD).
    fn output_exists(&self, id: &str, path: &Path) -> Result<bool, StageError> {
        match &self.remote {
            Some(remote) => remote.exists(&self.file_name(id)),
            None => Ok(path.exists()),
        }
    }

    /// Whether the output is there and complete: with `stac`, its item
    /// too (an output without one was left by a run killed between the
    /// two, and is made again).
    fn output_complete(&self, id: &str, path: &Path) -> Result<bool, StageError> {
        if !self.output_exists(id, path)? {
            return Ok(false);
        }
        match &self.publish {
            Some(p) => p.item_exists(&self.file_name(id)),
            None => Ok(true),
        }
    }

    fn creation_options(&self, raster: &Raster) -> Vec<String> {
        let has = |k: &str| {
            self.options
                .iter()
                .any(|(key, _)| key.eq_ignore_ascii_case(k))
        };
        let mut out: Vec<String> = self
            .options
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !has("BIGTIFF") && raster.pixel_bytes() > 4_000_000_000 - (64 << 20) {
            out.push("BIGTIFF=YES".to_owned());
        }
        if self.driver == "GTiff" && !has("INTERLEAVE") && raster.band_count() > 1 {
            out.push("INTERLEAVE=PIXEL".to_owned());
        }
        out
    }
}

impl Write {
    /// What `exists` says of the output: `Err(outcome)` when it is already
    /// there, else how it takes its name once written: created only if it
    /// still is not there when it was not (with `conditional_create`), else
    /// replacing it. Without its STAC item it is not complete, and is made
    /// again.
    fn already_there(&self, id: &str, path: &Path) -> Result<Result<Put, Outcome>, StageError> {
        let replace = Ok(Put::Overwrite);
        if self.exists == Exists::Overwrite {
            return Ok(replace);
        }
        if !self.output_exists(id, path)? {
            return Ok(Ok(if self.conditional {
                Put::Create
            } else {
                Put::Overwrite
            }));
        }
        let shown = self.shown(id, path);
        match self.exists {
            Exists::Skip if !self.output_complete(id, path)? => {
                tracing::info!("{shown} has no STAC item: it is made again");
                Ok(replace)
            }
            Exists::Skip => Ok(Err(Outcome::Skip(format!("{shown} exists")))),
            Exists::Error => Err(StageError::permanent(format!(
                "{id}: {shown} already exists"
            ))),
            Exists::Overwrite => Ok(replace),
        }
    }

    /// Syncs `tmp`, renames its side files and it to `path`, and syncs the
    /// directory (the rename is durable once it is).
    fn rename_into_place(tmp: &Path, path: &Path) -> std::io::Result<()> {
        let sync = |p: &Path| std::fs::File::open(p).and_then(|f| f.sync_all());
        sync(tmp)
            .and_then(|_| sidecars::rename_beside(tmp, path))
            .and_then(|_| std::fs::rename(tmp, path))?;
        if let Some(parent) = path.parent() {
            let _ = sync(parent);
        }
        Ok(())
    }
}

impl warpline_engine::Stage for Write {
    fn takes(&self) -> Payload {
        crate::payloads::raster()
    }

    fn hands_on(&self) -> Payload {
        crate::payloads::written()
    }

    fn check_environment(&self) -> Vec<String> {
        // The directory, or the nearest ancestor that exists (it would be
        // created there): a file can be made and removed in it.
        let mut at = if self.dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            self.dir.as_path()
        };
        while !at.exists() {
            at = at
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
        }
        let probe = at.join(format!(".warpline-probe-{}", std::process::id()));
        let result = if at.is_dir() {
            std::fs::write(&probe, b"probe").and_then(|_| std::fs::remove_file(&probe))
        } else {
            Err(std::io::Error::other(format!(
                "{} is not a directory",
                at.display()
            )))
        };
        let what = match self.remote {
            Some(_) => "staging directory",
            None => "output directory",
        };
        match result {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!(
                "{what} {} cannot be written: {e}",
                self.dir.display()
            )],
        }
    }

    fn check_online(&self) -> Vec<String> {
        // The bucket can be listed with the credentials at hand: a request
        // to the store, and to a metadata service when the environment
        // has no credentials.
        self.remote
            .as_deref()
            .map(Output::check)
            .unwrap_or_default()
    }

    fn run_starting(&self) {
        if let Some(p) = &self.publish {
            p.run_starting();
        }
    }

    fn run_finished(&self) -> Vec<String> {
        self.publish
            .as_ref()
            .map(Publish::finish)
            .unwrap_or_default()
    }

    fn skip_check(&self, item: &Item) -> Option<String> {
        if self.exists != Exists::Skip {
            return None;
        }
        let path = self.output_path(&item.id);
        // An output that cannot be looked at is looked at again by process.
        if !self.output_complete(&item.id, &path).unwrap_or(false) {
            return None;
        }
        // The output of another input of this run is not this item's: it
        // goes on, and its write fails naming both.
        self.claims.claim(&path, item).ok()?;
        Some(format!("{} exists", self.shown(&item.id, &path)))
    }
}

impl BlockingStage for Write {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let id = item.id.clone();
        let path = self.output_path(&id);
        self.claims.claim(&path, item)?;
        let put = match self.already_there(&id, &path)? {
            Ok(put) => put,
            Err(skipped) => return Ok(skipped),
        };
        let Some(mut raster) = item.take_payload::<Raster>() else {
            return Err(StageError::permanent(format!(
                "{id}: write needs a raster: put `decode` (and `reproject`) before `write`"
            )));
        };
        self.check_nodata(&raster, &id)?;
        let stamped = self.stamp(item, &mut raster)?;
        let parent = path.parent().unwrap_or(&self.dir).to_owned();
        // What the output may take on disk: its pixels uncompressed, twice
        // for COG (the driver writes a temporary GTiff first, and removes
        // it when it fails: GDAL 3.12 then says only that the file it
        // reads back is not a TIFF, so the free space must tell).
        let copies = if self.driver == "COG" { 2 } else { 1 };
        let needed = raster.pixel_bytes().saturating_mul(copies);
        let fail = |what: String, said_full: bool| failed(&id, &parent, needed, what, said_full);
        std::fs::create_dir_all(&parent).map_err(|e| {
            fail(
                format!("cannot create {}: {e}", parent.display()),
                io_full(&e),
            )
        })?;
        // Temporary files a killed run left here go before this one adds its own.
        self.temps.once(&parent);
        let tmp = temporary_name(&path, std::process::id());
        let mut guard = TempGuard {
            path: tmp.clone(),
            keep: false,
        };
        // GDAL's messages are watched for one that says the device is full,
        // and the free space is looked at before the guard removes what was
        // written.
        let watch = SpaceWatch::start();
        // Where the output lies (the report's map), read before the raster
        // is written away; the item's until then is its input's.
        let footprint = raster.bounds_4326().map(crate::payloads::footprint);
        let written = self.make(raster, &tmp);
        let said_full = watch.said_full();
        written.map_err(|m| fail(format!("cannot write {}: {m}", path.display()), said_full))?;
        if let Some(remote) = &self.remote {
            // The guard removes the local files once they are sent (or not).
            let uploaded = self.upload(remote, item, &tmp, stamped.as_ref(), put)?;
            item.footprint = footprint.or(item.footprint);
            return Ok(uploaded);
        }
        if let Some(p) = self.publish.as_ref().filter(|_| stamped.is_some()) {
            // The old output's item goes before the new output takes its
            // name: no item ever describes bytes that are not there.
            p.unpublish(&self.file_name(&id))?;
        }
        Self::rename_into_place(&tmp, &path).map_err(|e| {
            fail(
                format!("cannot finish {}: {e}", path.display()),
                io_full(&e),
            )
        })?;
        guard.keep = true;
        item.bytes_out += std::iter::once(path.clone())
            .chain(sidecars::existing(&path))
            .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .sum::<u64>();
        if let (Some(p), Some(stamped)) = (&self.publish, &stamped) {
            p.publish(Publishing {
                item,
                stamped,
                file_name: &self.file_name(&id),
                local: &path,
            })?;
        }
        item.footprint = footprint.or(item.footprint);
        item.set_payload(Written { path });
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_stay_inside_the_directory() {
        assert!(check_template("{id}.tif").is_ok());
        assert!(check_template("tiles/{id}.tif").is_ok());
        assert!(check_template("../{id}.tif").is_err());
        assert!(check_template("/tmp/{id}.tif").is_err());
        assert!(check_template("out.tif").is_err());
        assert!(check_template("{id}-{crs}.tif").is_err());
    }
}
