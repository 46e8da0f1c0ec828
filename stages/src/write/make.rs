//! The write stage's making of a file: the driver's copy (or the move of
//! a warp already on disk), the upload of a finished file with its STAC
//! item, the provenance stamp, and the nodata rule GeoTIFF imposes.

use std::path::Path;
use std::time::{Duration, Instant};

use warpline_engine::{Item, Outcome, StageError};
use warpline_gdal::{Raster, ScratchFile};

use super::publish::{self, Publishing};
use super::{sidecars, stac, Write, Written};
use crate::store::{Output, Put, Uploaded};

/// How long an output another writer created first may be without its
/// STAC item before it is not counted done: its writer puts the item right
/// after the object, one small PUT (which `object_store` asks again for up
/// to a minute).
const ANOTHERS_ITEM: Duration = Duration::from_secs(120);

/// The bytes the item holds of byte limiters (`None`: it holds none).
fn byte_share(item: &Item) -> Option<u64> {
    let bytes = item
        .tickets()
        .iter()
        .filter(|t| t.limiter().kind() == warpline_engine::limit::LimiterKind::Bytes);
    bytes.map(|t| t.amount()).reduce(|a, b| a + b)
}

impl Write {
    /// Uploads the finished file at `tmp` (and its side files) as the
    /// item's output in the store: the side files first, the output last
    /// (its object appears last, as a final name does on disk), taking its
    /// name as `put` says. An output another writer created first (a
    /// refused `Put::Create`) is this item's too, once complete.
    pub(super) fn upload(
        &self,
        remote: &Output,
        item: &mut Item,
        tmp: &Path,
        stamped: Option<&publish::Stamped>,
        put: Put,
    ) -> Result<Outcome, StageError> {
        let name = self.file_name(&item.id);
        let publish = self.publish.as_ref().zip(stamped);
        if let Some((p, _)) = publish.filter(|_| put == Put::Overwrite) {
            // As on disk: the old output's item goes first. (A created
            // output has none, and another writer's must stay.)
            p.unpublish(&name)?;
        }
        // The raster is gone: the upload's parts stay within the byte
        // budget the item still holds.
        let share = byte_share(item);
        // A side file a killed run left must be replaceable: side files
        // are not created conditionally (two writers of one item make the
        // same ones).
        for (side, to) in sidecars::beside_name(tmp, Path::new(&name)) {
            if let Uploaded::Created(sent) =
                remote.upload(&side, &to.to_string_lossy(), share, Put::Overwrite)?
            {
                item.bytes_out += sent;
            }
        }
        let url = remote.shown(&name);
        match remote.upload(tmp, &name, share, put)? {
            Uploaded::Created(sent) => {
                item.bytes_out += sent;
                if let Some((p, stamped)) = publish {
                    // The staged file is the object's bytes (the guard
                    // removes it after).
                    p.publish(Publishing {
                        item,
                        stamped,
                        file_name: &name,
                        local: tmp,
                    })?;
                }
            }
            Uploaded::Refused => {
                tracing::info!("{url} was created by another writer first: it is this item's");
                self.made_by_another(remote, &item.id, &name, &url)?;
            }
        }
        item.set_payload(Written { path: url.into() });
        Ok(Outcome::Continue)
    }

    /// Waits until the output `name` another writer created is complete:
    /// with `stac`, its STAC item is there too (the writer puts it right
    /// after the object). An output that goes meanwhile (its writer could
    /// not publish it), or whose item does not come within
    /// [`ANOTHERS_ITEM`], is not counted done.
    fn made_by_another(
        &self,
        remote: &Output,
        id: &str,
        name: &str,
        url: &str,
    ) -> Result<(), StageError> {
        let Some(p) = &self.publish else {
            return Ok(());
        };
        let start = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            if p.item_exists(name)? {
                return Ok(());
            }
            if !remote.exists(name)? {
                return Err(StageError::transient(format!(
                    "{id}: {url} was created by another writer first, then removed before its \
                     STAC item was written: not counted done"
                )));
            }
            if start.elapsed() >= ANOTHERS_ITEM {
                return Err(StageError::transient(format!(
                    "{id}: {url} was created by another writer first, whose STAC item {} has \
                     not come in {} s: the output is not complete (a run with exists = \
                     \"skip\" makes it again)",
                    p.item_of(name),
                    ANOTHERS_ITEM.as_secs()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// With `stac`: the provenance in the raster's metadata, and what the
    /// item will say of it.
    pub(super) fn stamp(
        &self,
        item: &Item,
        raster: &mut Raster,
    ) -> Result<Option<publish::Stamped>, StageError> {
        let Some(p) = &self.publish else {
            return Ok(None);
        };
        let written = stac::Written {
            driver: &self.driver,
            options: &self.options,
        };
        p.stamp(item, raster, &written).map(Some)
    }

    /// GeoTIFF (and so COG) holds one nodata value for all bands: bands
    /// with different ones are refused, not collapsed to one (gdalwarp
    /// warns and keeps the last band's for all).
    pub(super) fn check_nodata(&self, raster: &Raster, id: &str) -> Result<(), StageError> {
        if !matches!(self.driver.as_str(), "GTiff" | "COG") {
            return Ok(());
        }
        let values = raster.nodata_values();
        let same = values.windows(2).all(|w| match (w[0], w[1]) {
            (Some(a), Some(b)) => a == b || (a.is_nan() && b.is_nan()),
            (a, b) => a.is_none() && b.is_none(),
        });
        if same {
            return Ok(());
        }
        let shown: Vec<String> = values
            .iter()
            .map(|v| v.map_or("none".to_owned(), |v| v.to_string()))
            .collect();
        Err(StageError::permanent(format!(
            "{id}: the bands have different nodata values ({}), but {} stores one for all bands: \
             give reproject one `dst_nodata`",
            shown.join(", "),
            self.driver
        )))
    }

    /// Makes the output at `tmp`. A warp made on disk (an output larger
    /// than the memory budget) is already the file a GTiff output without
    /// creation options is (`gdalwarp -of GTiff`), so it is moved there;
    /// anything else is copied by the driver.
    pub(super) fn make(&self, raster: Raster, tmp: &Path) -> Result<(), String> {
        if self.driver == "GTiff" && self.options.is_empty() && raster.is_on_disk() {
            if let Some(file) = raster.into_scratch() {
                return move_scratch(file, tmp);
            }
            return Err("the warped file is gone".to_owned());
        }
        // An input read by ranges (`read = "window"`) whose read failed
        // while GDAL copied it: that failure, not GDAL's words about a
        // short read.
        self.create_copy(&raster, tmp)
            .map_err(|e| raster.remote_failure().unwrap_or(e))
    }

    /// Writes `raster` to `tmp` with GDAL; GDAL's last message on failure.
    fn create_copy(&self, raster: &Raster, tmp: &Path) -> Result<(), String> {
        let mut options = self.creation_options(raster);
        // The temporary name is new: nothing there to delete first.
        options.push(warpline_gdal::new_path_option().to_owned());
        warpline_gdal::create_copy(&self.driver, raster, tmp, &options).map_err(|e| e.to_string())
    }
}

/// Moves a scratch file (and GDAL's side files of it) to `tmp`: a rename,
/// or a copy when they are on different file systems.
fn move_scratch(file: ScratchFile, tmp: &Path) -> Result<(), String> {
    let from = file.path().to_owned();
    let pairs = std::iter::once((from.clone(), tmp.to_owned())).chain(
        ScratchFile::side_files(&from)
            .into_iter()
            .zip(ScratchFile::side_files(tmp))
            .filter(|(side, _)| side.exists()),
    );
    for (a, b) in pairs {
        if let Err(e) = std::fs::rename(&a, &b) {
            if e.kind() != std::io::ErrorKind::CrossesDevices {
                return Err(format!("cannot move {}: {e}", a.display()));
            }
            std::fs::copy(&a, &b).map_err(|e| format!("cannot copy {}: {e}", a.display()))?;
        }
    }
    // Dropping `file` removes what is left under the scratch name (the
    // copies' sources).
    drop(file);
    Ok(())
}
