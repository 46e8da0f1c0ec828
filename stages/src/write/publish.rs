//! The `stac` and `collection` keys of `write`: what it publishes beside
//! each output (a STAC item, see `stac`), the run's collection (see
//! `collection`), and the provenance record in the GeoTIFF itself.
//!
//! Order, so that an item never describes a file that is not complete:
//! the provenance goes into the raster's metadata before the file is
//! made; the old item (an `overwrite`) is removed before the new output
//! takes its name; the item is written (temporary name and rename, or one
//! PUT) after the output is in place; the collection is rebuilt from the
//! items present. An output without its item (a run killed between the
//! two) is not complete: `exists = "skip"` writes it again.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use warpline_engine::{Item, StageError};
use warpline_gdal::Raster;

use super::collection::{Collection, Describe, Place};
use super::stac::{self, Described, ItemFacts, Written};
use crate::store::Output;
use crate::temps::temporary_name;

/// The `collection` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CollectionSettings {
    id: Option<String>,
    title: Option<String>,
    description: Option<String>,
    license: Option<String>,
    /// Also write every item into one ItemCollection of this name.
    item_collection: Option<String>,
}

impl CollectionSettings {
    /// Checks the `item_collection` name: a `.json` file at the root of
    /// `dir` (its features' hrefs are made relative to the root), not the
    /// collection's.
    pub(crate) fn check(&self) -> Result<(), String> {
        let Some(name) = &self.item_collection else {
            return Ok(());
        };
        let ok = name.ends_with(".json")
            && !name.contains(['/', '\\'])
            && !name.starts_with('.')
            && name != super::collection::FILE;
        if ok {
            Ok(())
        } else {
            Err(format!(
                "item_collection = {name:?}: the name of a .json file at the root of dir \
                 (no folder, not hidden), other than collection.json"
            ))
        }
    }
}

/// What a write stage publishes with `stac = true`.
#[derive(Debug)]
pub(crate) struct Publish {
    collection: Collection,
    collection_id: String,
    /// When the stage's current run started, RFC 3339.
    run_started: std::sync::Mutex<String>,
    media_type: &'static str,
    remote: Option<std::sync::Arc<Output>>,
    dir: PathBuf,
}

/// The item's name for an output named `name` (`a.tif` -> `a.json`).
pub(crate) fn item_name(name: &str) -> String {
    let path = Path::new(name);
    match path.extension() {
        Some(_) => path.with_extension("json").to_string_lossy().into_owned(),
        None => format!("{name}.json"),
    }
}

impl Publish {
    /// `dir` is the output directory (for an upload, `remote` is where the
    /// outputs go), `template` the output name template, `driver` the format.
    pub(crate) fn new(
        dir: &Path,
        remote: Option<std::sync::Arc<Output>>,
        template: &str,
        driver: &str,
        settings: CollectionSettings,
    ) -> Result<Self, String> {
        let item_template = item_name(template);
        let place: Box<dyn Place> = match &remote {
            Some(out) => Box::new(Remote(std::sync::Arc::clone(out))),
            None => Box::new(Local(dir.to_owned())),
        };
        let default_id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "warpline".to_owned());
        let remote_id = remote.as_ref().map(|r| {
            let shown = r.shown("");
            let trimmed = shown.trim_end_matches('/');
            trimmed.rsplit('/').next().unwrap_or(trimmed).to_owned()
        });
        let id = settings.id.or(remote_id).unwrap_or(default_id);
        let describe = Describe {
            id: id.clone(),
            title: settings.title,
            description: settings
                .description
                .unwrap_or_else(|| "Outputs written by warpline".to_owned()),
            license: settings.license.unwrap_or_else(|| "proprietary".to_owned()),
        };
        let collection =
            Collection::new(place, &item_template, describe, settings.item_collection)?;
        Ok(Publish {
            collection,
            collection_id: id,
            run_started: std::sync::Mutex::new(crate::provenance::rfc3339(
                std::time::SystemTime::now(),
            )),
            media_type: if driver == "COG" {
                "image/tiff; application=geotiff; profile=cloud-optimized"
            } else {
                "image/tiff; application=geotiff"
            },
            remote,
            dir: dir.to_owned(),
        })
    }

    /// Notes the run's start (the date of an item with no other).
    pub(crate) fn run_starting(&self) {
        let now = crate::provenance::rfc3339(std::time::SystemTime::now());
        *self.run_started.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }

    /// The item's name for the output `file_name`.
    pub(crate) fn item_of(&self, file_name: &str) -> String {
        item_name(file_name)
    }

    /// Whether the item of output `file_name` is there.
    pub(crate) fn item_exists(&self, file_name: &str) -> Result<bool, StageError> {
        let name = self.item_of(file_name);
        match &self.remote {
            Some(r) => r.exists(&name),
            None => Ok(self.dir.join(&name).exists()),
        }
    }

    /// Puts the provenance record in the raster's XMP packet (see
    /// `provenance`), to be written with it, and reads
    /// what the item will say of the raster.
    pub(crate) fn stamp(
        &self,
        item: &Item,
        raster: &mut Raster,
        written: &Written<'_>,
    ) -> Result<Stamped, StageError> {
        let record = stac::record(item, written);
        let packet = crate::provenance::xmp_packet(&record.to_string());
        raster
            .set_xml_metadata(crate::provenance::XMP_DOMAIN, &packet)
            .map_err(|e| {
                StageError::permanent(format!("{}: cannot record provenance: {e}", item.id))
            })?;
        Ok(Stamped {
            record,
            described: stac::describe(raster),
        })
    }

    /// Removes the item of an output about to be replaced.
    pub(crate) fn unpublish(&self, file_name: &str) -> Result<(), StageError> {
        let name = self.item_of(file_name);
        let result = match &self.remote {
            Some(r) => r.remove_small(&name),
            None => match std::fs::remove_file(self.dir.join(&name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
                _ => Ok(()),
            },
        };
        result.map_err(|m| StageError::transient(format!("cannot remove the old item {name}: {m}")))
    }

    /// Writes the item of the output `file_name`, whose bytes are at
    /// `local` (complete, in place or about to be uploaded); then the
    /// collection, if it is due.
    pub(crate) fn publish(&self, p: Publishing<'_>) -> Result<(), StageError> {
        let id = &p.item.id;
        let name = self.item_of(p.file_name);
        let leaf = Path::new(p.file_name).file_name().map_or_else(
            || p.file_name.to_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        let file = stac::file_facts(p.local, format!("./{leaf}")).map_err(|e| {
            StageError::permanent(format!("{id}: cannot read {} back: {e}", p.local.display()))
        })?;
        let run_started = self
            .run_started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let facts = ItemFacts {
            id: crate::ids::file_name_id(id),
            collection: &self.collection_id,
            collection_href: Collection::href_from(&name),
            run_started: &run_started,
            created: crate::provenance::rfc3339(std::time::SystemTime::now()),
            media_type: self.media_type,
        };
        let doc = stac::item_json(
            p.item,
            &p.stamped.described,
            &facts,
            &file,
            &p.stamped.record,
        );
        let mut bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        bytes.push(b'\n');
        let written = match &self.remote {
            _ if self.collection.is_item_collection(&name) => Err(StageError::permanent(format!(
                "{id}: its STAC item {name} would take the name of the run's \
                 ItemCollection (collection.item_collection)"
            ))),
            Some(r) => r.write_small(&name, &bytes).map_err(|m| {
                StageError::transient(format!("{id}: cannot write its STAC item {name}: {m}"))
            }),
            None => Local(self.dir.clone())
                .write_io(&name, &bytes)
                .map_err(|e| {
                    let what = format!("cannot write its STAC item {name}: {e}");
                    let at = self.dir.join(&name);
                    let dir = at.parent().unwrap_or(&self.dir);
                    crate::space::failed(id, dir, 0, what, crate::space::io_full(&e))
                }),
        };
        if let Err(e) = written {
            // An output without its item is not complete: it goes too, as
            // a failed write's files do.
            let removed = match &self.remote {
                Some(r) => r.remove_small(p.file_name),
                None => std::fs::remove_file(self.dir.join(p.file_name)).map_err(|e| e.to_string()),
            };
            if let Err(m) = removed {
                tracing::warn!("{id}: its output stays without its item: {m}");
            }
            return Err(e);
        }
        if let Err(m) = self.collection.item_written() {
            tracing::warn!("the STAC collection is not up to date yet: {m}");
        }
        Ok(())
    }

    /// At the run's end: the collection equal to the items present.
    pub(crate) fn finish(&self) -> Vec<String> {
        match self.collection.finish() {
            Ok(()) => Vec::new(),
            Err(m) => vec![format!(
                "the STAC collection could not be brought up to date: {m}"
            )],
        }
    }
}

/// What [`Publish::stamp`] recorded and read of a raster.
#[derive(Debug)]
pub(crate) struct Stamped {
    pub(crate) record: Value,
    pub(crate) described: Described,
}

/// What [`Publish::publish`] is given.
#[derive(Debug)]
pub(crate) struct Publishing<'a> {
    pub(crate) item: &'a Item,
    pub(crate) stamped: &'a Stamped,
    pub(crate) file_name: &'a str,
    /// The output's bytes, complete.
    pub(crate) local: &'a Path,
}

/// The raster's footprint in EPSG:4326, `[west, south, east, north]`
/// (`west > east` across the antimeridian).
pub(crate) fn bounds(raster: &Raster) -> Option<[f64; 4]> {
    raster
        .bounds_4326()
        .map(|b| [b.west, b.south, b.east, b.north])
}

/// A local output directory.
#[derive(Debug)]
struct Local(PathBuf);

impl Place for Local {
    fn list(&self, pattern: &glob::Pattern) -> Result<Vec<(String, String)>, String> {
        let root = glob::Pattern::escape(&self.0.to_string_lossy());
        let full = if root.is_empty() {
            pattern.as_str().to_owned()
        } else {
            format!("{root}/{}", pattern.as_str())
        };
        let found = glob::glob(&full).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for path in found.flatten() {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue; // gone since listed
            };
            let Ok(rel) = path.strip_prefix(&self.0) else {
                continue;
            };
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            let name = rel.to_string_lossy().replace('\\', "/");
            out.push((name, format!("{} {modified}", meta.len())));
        }
        Ok(out)
    }

    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        match std::fs::read(self.0.join(name)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", self.0.join(name).display())),
        }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        self.write_io(name, bytes)
            .map_err(|e| format!("{}: {e}", self.0.join(name).display()))
    }
}

impl Local {
    /// Writes `name` whole: a temporary name, synced, renamed into place.
    fn write_io(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.0.join(name);
        let tmp = temporary_name(&path, std::process::id());
        let done = std::fs::write(&tmp, bytes)
            .and_then(|_| std::fs::File::open(&tmp).and_then(|f| f.sync_all()))
            .and_then(|_| std::fs::rename(&tmp, &path));
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        done
    }
}

/// A bucket's prefix.
#[derive(Debug)]
struct Remote(std::sync::Arc<Output>);

impl Place for Remote {
    fn list(&self, pattern: &glob::Pattern) -> Result<Vec<(String, String)>, String> {
        let pattern = pattern.clone();
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        self.0
            .list_names(move |name| pattern.matches_with(name, options))
    }

    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        self.0.read_small(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        self.0.write_small(name, bytes)
    }
}
