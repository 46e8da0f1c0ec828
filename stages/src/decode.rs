//! The `decode` stage (blocking): fetched bytes opened as a raster.
//!
//! The bytes become files in a private `/vsimem/` directory the engine
//! names (see [`crate::gdal`]): the input under its own file name made
//! safe, with the siblings fetch read beside a local file (external mask,
//! overviews, `.aux.xml`, world file). An archive (`.zip`, `.gz`, `.tar`)
//! is opened through GDAL's `/vsizip/`, `/vsigzip/` or `/vstar/` on those
//! bytes: its only raster, or the member named as `archive.zip!/member`.
//! Only the allowed drivers (`GTiff` by default) may open the input, so
//! a payload that is VRT XML or `MEM:::` text is refused rather than
//! followed.
//!
//! Decode reads the header only: size, bands, types, georeferencing. The
//! decoded size is checked against the hard caps (`max_pixels`,
//! `max_decoded_bytes`) before a single pixel is read. Pixels are read by
//! the stage that uses them (the warp reads only the overview level and
//! the window it needs, as gdalwarp does; write copies them), so the
//! raster keeps everything GDAL sees in the file: masks, alpha, overviews,
//! metadata. A raster with neither a geotransform nor GCPs, RPCs or
//! geolocation arrays is an error; one without a CRS is an error unless
//! `assume_crs` is set (then it is a VRT view with that CRS, as
//! `gdal_translate -a_srs` makes).

use std::collections::BTreeMap;

use serde::Deserialize;
use warpline_engine::limit::LimiterKind;
use warpline_engine::units::Size;
use warpline_engine::{
    BlockingStage, Handler, Item, Outcome, Payload, Problem, Settings, StageError,
};

use warpline_gdal::files::archive_files;
use warpline_gdal::open::{open, Opened};
use warpline_gdal::{init, MemDir, Raster, RemoteFile};

use crate::names::{self, Archive, APPENDED};
use crate::payloads::Fetched;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeSettings {
    drivers: Option<Vec<String>>,
    assume_crs: Option<String>,
    open_options: Option<BTreeMap<String, String>>,
    max_pixels: Option<u64>,
    max_decoded_bytes: Option<Size>,
}

/// The decode stage.
#[derive(Debug)]
pub struct Decode {
    drivers: Vec<String>,
    assume_crs: Option<String>,
    open_options: Vec<String>,
    max_pixels: u64,
    max_decoded_bytes: u64,
    /// The settings that decide which pixels are read, as recorded in an
    /// output's provenance.
    recorded: serde_json::Value,
}

const DEFAULT_MAX_PIXELS: u64 = 1 << 28; // 16384 x 16384
const DEFAULT_MAX_DECODED: u64 = 2 << 30; // 2 GiB

/// Zips with more entries than this are refused (listing one costs GDAL
/// time and memory outside the budget).
const MAX_MEMBERS_LISTED: usize = 10_000;

pub(crate) fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    init();
    let mut problems = Vec::new();
    let Some(d) = s.read::<DecodeSettings>(&mut problems) else {
        return Err(problems);
    };
    let drivers = d.drivers.unwrap_or_else(|| vec!["GTiff".to_owned()]);
    for (i, name) in drivers.iter().enumerate() {
        if !warpline_gdal::driver_exists(name) {
            problems.push(s.problem(
                &format!("drivers[{i}]"),
                format!("GDAL has no driver {name:?}"),
            ));
        }
        if matches!(
            name.as_str(),
            "VRT" | "MEM" | "GDAL_WMS" | "WMTS" | "DERIVED"
        ) {
            problems.push(s.problem(
                &format!("drivers[{i}]"),
                format!("driver {name:?} can make GDAL open other files or URLs; it is not allowed for untrusted bytes"),
            ));
        }
    }
    let assume_crs = d.assume_crs.as_deref().and_then(|text| {
        warpline_gdal::crs_to_wkt(text)
            .map_err(|e| problems.push(s.env_problem("assume_crs", e.to_string())))
            .ok()
    });
    let max_decoded_bytes = d.max_decoded_bytes.map_or(DEFAULT_MAX_DECODED, |b| b.0);
    if let Some(m) = s
        .stage_limits()
        .iter()
        .find(|l| l.kind() == LimiterKind::Bytes)
    {
        warpline_gdal::request_cache(warpline_gdal::cache_for_budget(m.capacity()));
    }
    let open_options: Vec<String> = d
        .open_options
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    let recorded = serde_json::json!({
        "drivers": &drivers,
        "assume_crs": d.assume_crs,
        "open_options": d.open_options,
    });
    let recorded = crate::provenance::settings_json(&recorded, &[]);
    Ok(Handler::from_blocking(Decode {
        recorded,
        drivers,
        assume_crs,
        open_options,
        max_pixels: d.max_pixels.unwrap_or(DEFAULT_MAX_PIXELS),
        max_decoded_bytes,
    }))
}

/// Where GDAL opens the input: its file, or the member of the archive it is.
fn open_path(
    dir: &MemDir,
    file: &str,
    member: Option<&str>,
    id: &str,
) -> Result<String, StageError> {
    let fail = |m: String| StageError::permanent(format!("{id}: {m}"));
    let name = file.rsplit('/').next().unwrap_or(file);
    let Some(archive) = Archive::of(name, dir.head(0, 512)) else {
        if member.is_some() {
            return Err(fail(format!(
                "a member is named (`!/`), but {name} is not a zip, gzip or tar archive"
            )));
        }
        return Ok(file.to_owned());
    };
    if archive == Archive::Gzip {
        return match member {
            Some(_) => Err(fail(format!(
                "{name} is one gzipped file: it has no members"
            ))),
            None => Ok(format!("{}{file}", archive.prefix())),
        };
    }
    // In braces: GDAL finds the archive's end by them, whatever its name.
    let whole = format!("{}{{{file}}}", archive.prefix());
    if archive == Archive::Zip {
        let entries = names::zip_entries(dir.bytes_of(0));
        if entries.is_none_or(|n| n > MAX_MEMBERS_LISTED) {
            return Err(fail(format!(
                "{name}: a zip of more than {MAX_MEMBERS_LISTED} entries (or an unreadable directory) is not opened"
            )));
        }
    }
    if let Some(member) = member {
        names::check_member(member).map_err(|e| fail(e.to_string()))?;
        return Ok(format!("{whole}/{member}"));
    }
    let mut files = archive_files(&whole, MAX_MEMBERS_LISTED)
        .map_err(|m| fail(format!("{name}: not a readable archive: {}", m)))?;
    // Files that go with a raster (metadata, world files, notes) are not
    // candidates for the one to open.
    let rasters: Vec<String> = files
        .iter()
        .filter(|f| !names::is_companion(f))
        .cloned()
        .collect();
    if rasters.len() == 1 {
        files = rasters;
    }
    match files.as_slice() {
        [one] => Ok(format!("{whole}/{one}")),
        [] => Err(fail(format!("{name}: the archive holds no file"))),
        many => Err(fail(format!(
            "{name} holds {} files ({}{}): name one as `<source>!/<member>`",
            many.len(),
            many.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            if many.len() > 5 { ", ..." } else { "" }
        ))),
    }
}

/// The in-memory files of an input: the bytes under their safe name,
/// the siblings beside them. Returns the directory and the input's path.
fn files_of(fetched: Fetched, source: &str, id: &str) -> Result<(MemDir, String), StageError> {
    let fail = |m: String| StageError::permanent(format!("{id}: {m}"));
    let name = names::safe_file_name(names::last_component(source));
    let stem = name
        .rsplit_once('.')
        .map_or(name.as_str(), |(s, _)| s)
        .to_owned();
    let mut dir = MemDir::new();
    let path = dir
        .add(&name, fetched.bytes)
        .map_err(|e| fail(e.to_string()))?;
    for sibling in fetched.siblings {
        let appended = APPENDED
            .iter()
            .any(|s| s.eq_ignore_ascii_case(&sibling.suffix));
        let base = if appended { &name } else { &stem };
        // The suffix made safe on its own: `base` is already safe, and a
        // long one must not be cut again (GDAL looks for `base` + suffix).
        let sibling_name = format!("{base}.{}", names::safe_file_name(&sibling.suffix));
        dir.add(&sibling_name, sibling.bytes)
            .map_err(|e| fail(e.to_string()))?;
    }
    Ok((dir, path))
}

impl Decode {
    /// Opens `path` with the allowed drivers, refusing references to
    /// other files (see `warpline_gdal::open`).
    fn open(&self, path: &str, id: &str) -> Result<Opened, StageError> {
        open(path, &self.drivers, &self.open_options)
            .map_err(|e| StageError::permanent(format!("{id}: {e}")))
    }

    /// The size checks, before any pixel is read.
    fn check_size(&self, ds: &Opened, id: &str) -> Result<(), StageError> {
        let h = ds
            .header()
            .map_err(|e| StageError::permanent(format!("{id}: {e}")))?;
        let (width, height, count) = (h.width, h.height, h.bands);
        if width == 0 || height == 0 || count == 0 {
            return Err(StageError::permanent(format!(
                "{id}: empty raster ({width} x {height}, {count} bands)"
            )));
        }
        let pixels = width.saturating_mul(height);
        let decoded_bytes = pixels.saturating_mul(h.pixel_bytes);
        if pixels > self.max_pixels {
            return Err(StageError::permanent(format!(
                "{id}: declares {width} x {height} = {pixels} pixels, over max_pixels ({})",
                self.max_pixels
            )));
        }
        if decoded_bytes > self.max_decoded_bytes {
            return Err(StageError::permanent(format!(
                "{id}: declares {width} x {height} x {count} bands = {decoded_bytes} bytes decoded, \
                 over max_decoded_bytes ({})",
                self.max_decoded_bytes
            )));
        }
        Ok(())
    }

    /// Opens the fetched bytes and checks the header; a mosaic's inputs
    /// each, the first carrying the others.
    fn open_header(&self, item: &mut Item) -> Result<Raster, StageError> {
        let id = item.id.clone();
        let Some(fetched) = item.take_payload::<Fetched>() else {
            return Err(StageError::permanent(format!(
                "{id}: decode needs fetched bytes: put a `fetch` stage before `decode`"
            )));
        };
        if fetched.parts.is_empty() {
            return self.open_one(fetched, &item.source, &id);
        }
        let mut rasters = fetched
            .parts
            .into_iter()
            .zip(item.source.lines())
            .map(|(part, line)| self.open_one(part, line, &id))
            .collect::<Result<Vec<_>, _>>()?;
        let first = rasters.remove(0);
        Ok(first.with_others(rasters))
    }

    /// Opens one input's bytes (`line`: its source) and checks its header.
    fn open_one(&self, mut fetched: Fetched, line: &str, id: &str) -> Result<Raster, StageError> {
        let id = id.to_owned();
        let (source, member) = names::split_member(line);
        let remote = fetched.remote.take();
        let (dir, path) = match &remote {
            // Read by ranges (fetch's `read = "window"`): no bytes here.
            Some(_) if member.is_some() => {
                return Err(StageError::permanent(format!(
                "{id}: a member of an archive is not read by windows: set fetch's read = \"whole\""
            )))
            }
            Some(r) => (MemDir::new(), r.path().to_owned()),
            None => {
                let (dir, file) = files_of(fetched, source, &id)?;
                let path = open_path(&dir, &file, member, &id)?;
                (dir, path)
            }
        };
        // A range read that failed (the server's fault, maybe for a
        // moment) is the error, whatever GDAL made of it; and one GDAL
        // tolerated is not left latched for the next stage (its reads would
        // all fail at once with it, untaken).
        let failed = || {
            remote
                .as_ref()
                .and_then(RemoteFile::take_failure)
                .map(|m| StageError::transient(format!("{id}: {m}")))
        };
        let ds = self.open(&path, &id).map_err(|e| failed().unwrap_or(e))?;
        self.check_size(&ds, &id)
            .map_err(|e| failed().unwrap_or(e))?;
        if let Some(e) = failed() {
            return Err(e);
        }
        ds.into_raster(dir, remote, self.assume_crs.as_deref())
            .map_err(|e| StageError::permanent(format!("{id}: {e}")))
    }
}

impl warpline_engine::Stage for Decode {
    fn takes(&self) -> Payload {
        crate::payloads::fetched()
    }

    fn hands_on(&self) -> Payload {
        crate::payloads::raster()
    }

    /// Its work is reading a header: `plan` may do it.
    fn dry_run(&self, _item: &Item) -> bool {
        true
    }

    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        let raster = self.open_header(item)?;
        // Where the input lies, for the report's map until write says where
        // the output does (a failed item is drawn where its input is).
        item.footprint = raster.bounds_4326().map(crate::payloads::footprint);
        // The input's bytes (and siblings), as fetched: no pixel is read
        // here; the stage that reads them charges for what it reads.
        let bytes = raster.file_bytes();
        item.set_payload(raster);
        Ok(bytes)
    }
}

/// Decode's work is all in `demand`, which the engine runs before every
/// `process`: the raster is opened, checked and left in the payload there.
impl BlockingStage for Decode {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        // What an output made of it records (`provenance`): these settings,
        // and the input's own date.
        let datetime = item
            .payload::<Raster>()
            .and_then(|r| r.metadata_item("TIFFTAG_DATETIME", ""))
            .and_then(|d| crate::provenance::tiff_datetime(&d));
        match datetime {
            Some(d) => item
                .meta
                .insert(crate::provenance::INPUT_DATETIME.to_owned(), d.into()),
            None => item.meta.remove(crate::provenance::INPUT_DATETIME),
        };
        let settings = self.recorded.clone();
        crate::provenance::record_stage(item, "decode", settings, serde_json::Map::new());
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;
    use warpline_gdal::RangeRead;

    /// A small GTiff read by ranges, whose reads all succeed but that says
    /// once that an earlier read failed (one GDAL tolerated).
    struct Tolerated {
        bytes: Vec<u8>,
        failed: AtomicBool,
    }

    impl RangeRead for Tolerated {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, String> {
            let from = usize::try_from(offset).unwrap().min(self.bytes.len());
            let n = buf.len().min(self.bytes.len() - from);
            buf[..n].copy_from_slice(&self.bytes[from..from + n]);
            Ok(n)
        }

        fn take_failure(&self) -> Option<String> {
            self.failed
                .swap(false, Ordering::Relaxed)
                .then(|| "https://h/a.tif: reading bytes 0-9 failed".to_owned())
        }
    }

    /// A read that failed while decode opened the input fails the item as
    /// the server's fault, even when GDAL opened it anyway: the failure is
    /// not left for reproject's reads.
    #[test]
    fn a_range_read_failure_gdal_tolerated_fails_decode() {
        let file = Arc::new(Tolerated {
            bytes: warpline_gdal::samples::sample_tiles(1, 64)
                .unwrap()
                .remove(0)
                .bytes,
            failed: AtomicBool::new(true),
        });
        let decode = Decode {
            drivers: vec!["GTiff".to_owned()],
            assume_crs: None,
            open_options: Vec::new(),
            max_pixels: DEFAULT_MAX_PIXELS,
            max_decoded_bytes: u64::MAX,
            recorded: serde_json::Value::Null,
        };
        let fetched = Fetched {
            remote: Some(RemoteFile::new(
                "a.tif",
                Arc::clone(&file) as Arc<dyn RangeRead>,
            )),
            ..Fetched::default()
        };
        let e = decode
            .open_one(fetched, "https://h/a.tif", "a")
            .unwrap_err();
        assert_eq!(
            e.kind,
            warpline_engine::ErrorKind::Transient,
            "{}",
            e.message
        );
        assert!(
            e.message.contains("reading bytes 0-9 failed"),
            "{}",
            e.message
        );
        // Taken: the same input opens now.
        let fetched = Fetched {
            remote: Some(RemoteFile::new("a.tif", file)),
            ..Fetched::default()
        };
        assert!(decode.open_one(fetched, "https://h/a.tif", "a").is_ok());
    }
}
