//! The `decode` stage (blocking): fetched bytes to pixels.
//!
//! The bytes are opened from a `/vsimem/` file the engine made over the
//! buffer it owns (never a name built from input), with a driver allowlist
//! (`GTiff` by default), so a payload that is VRT XML or `MEM:::` text is
//! refused rather than followed. The header comes first: size, bands,
//! types, geotransform, CRS, nodata. The decoded size is checked against
//! the hard caps (`max_pixels`, `max_decoded_bytes`) and charged to the
//! `memory` limiter before a single pixel is read, and the band buffers
//! are allocated fallibly. A missing geotransform is an error; a missing
//! CRS is an error unless `assume_crs` is set.

use gdal::spatial_ref::SpatialRef;
use gdal::{Dataset, DatasetOptions, GdalOpenFlags};
use gdal_sys as sys;
use serde::Deserialize;
use warpline_engine::limit::LimiterKind;
use warpline_engine::units::SizeValue;
use warpline_engine::{
    BlockingStage, ErrorKind, Handler, Item, Outcome, Problem, Settings, StageError,
};

use crate::fetch::Fetched;
use crate::gdal::{
    dtype_size, init, last_error, mem_dataset_over, reset_error, BandSpec, MemFile, Raster,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeSettings {
    drivers: Option<Vec<String>>,
    assume_crs: Option<String>,
    max_pixels: Option<u64>,
    max_decoded_bytes: Option<SizeValue>,
}

/// The decode stage.
#[derive(Debug)]
pub struct Decode {
    drivers: Vec<String>,
    assume_crs: Option<String>,
    max_pixels: u64,
    max_decoded_bytes: u64,
}

const DEFAULT_MAX_PIXELS: u64 = 1 << 28; // 16384 x 16384
const DEFAULT_MAX_DECODED: u64 = 2 << 30; // 2 GiB

/// Turns a CRS as a user writes it (EPSG code, WKT, PROJ string) into WKT,
/// or says why PROJ does not understand it.
pub(crate) fn crs_to_wkt(text: &str) -> Result<String, String> {
    init();
    reset_error();
    SpatialRef::from_definition(text)
        .and_then(|srs| srs.to_wkt())
        .map_err(|_| {
            format!(
                "PROJ does not understand the CRS {text:?}: {}",
                last_error("unknown CRS")
            )
        })
}

pub(crate) fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    init();
    let d: DecodeSettings = s.parse()?;
    let mut problems = Vec::new();
    let drivers = d.drivers.unwrap_or_else(|| vec!["GTiff".to_owned()]);
    for (i, name) in drivers.iter().enumerate() {
        if gdal::DriverManager::get_driver_by_name(name).is_err() {
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
        crs_to_wkt(text)
            .map_err(|m| problems.push(s.env_problem("assume_crs", m)))
            .ok()
    });
    let max_decoded_bytes = match &d.max_decoded_bytes {
        None => DEFAULT_MAX_DECODED,
        Some(v) => v.bytes().unwrap_or_else(|m| {
            problems.push(s.problem("max_decoded_bytes", m));
            DEFAULT_MAX_DECODED
        }),
    };
    if let Some(m) = s
        .stage_limits()
        .iter()
        .find(|l| l.kind() == LimiterKind::Bytes)
    {
        // GDAL's block cache holds a second copy of what it decodes: size
        // it from the budget (an eighth, within 16 MiB .. 512 MiB).
        crate::gdal::request_cache((m.capacity() / 8).clamp(16 << 20, 512 << 20));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Handler::from_blocking(Decode {
        drivers,
        assume_crs,
        max_pixels: d.max_pixels.unwrap_or(DEFAULT_MAX_PIXELS),
        max_decoded_bytes,
    }))
}

/// GDAL's message about the bytes, with the input's id where GDAL names
/// its in-memory file (a name the user never gave).
fn named(message: &str, file: &MemFile, id: &str) -> String {
    let message = message.trim();
    message
        .strip_prefix(&format!("{}: ", file.path()))
        .unwrap_or(message)
        .replace(file.path(), id)
}

/// What the header says, read before any pixel.
#[derive(Debug)]
struct Header {
    width: usize,
    height: usize,
    types: Vec<sys::GDALDataType::Type>,
    decoded_bytes: u64,
}

impl Decode {
    fn open(&self, file: &MemFile, id: &str) -> Result<Dataset, StageError> {
        let drivers: Vec<&str> = self.drivers.iter().map(String::as_str).collect();
        reset_error();
        Dataset::open_ex(
            file.path(),
            DatasetOptions {
                open_flags: GdalOpenFlags::GDAL_OF_RASTER
                    | GdalOpenFlags::GDAL_OF_READONLY
                    | GdalOpenFlags::GDAL_OF_VERBOSE_ERROR,
                allowed_drivers: Some(&drivers),
                open_options: None,
                sibling_files: None,
            },
        )
        .map_err(|e| {
            // The gdal crate takes GDAL's message into its error and resets
            // GDAL's own, so it is read from the error. It names the
            // in-memory file: the item's id says more.
            let why = match e {
                gdal::errors::GdalError::NullPointer { msg, .. } if !msg.trim().is_empty() => {
                    named(&msg, file, id)
                }
                _ => "unrecognised format".to_owned(),
            };
            StageError::permanent(format!(
                "{id}: not a readable raster for the allowed drivers ({}): {why}",
                self.drivers.join(", "),
            ))
        })
    }

    fn header(&self, ds: &Dataset, id: &str) -> Result<Header, StageError> {
        let (width, height) = ds.raster_size();
        let count = ds.raster_count();
        if width == 0 || height == 0 || count == 0 {
            return Err(StageError::permanent(format!(
                "{id}: empty raster ({width} x {height}, {count} bands)"
            )));
        }
        let mut types = Vec::with_capacity(count);
        for i in 1..=count {
            let band = ds
                .rasterband(i)
                .map_err(|e| StageError::permanent(format!("{id}: band {i}: {e}")))?;
            types.push(band.band_type() as sys::GDALDataType::Type);
        }
        let pixels = (width as u64).saturating_mul(height as u64);
        let decoded_bytes = types
            .iter()
            .map(|t| pixels.saturating_mul(u64::from(dtype_size(*t))))
            .fold(0u64, u64::saturating_add);
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
        Ok(Header {
            width,
            height,
            types,
            decoded_bytes,
        })
    }

    /// Reads every band into buffers Rust owns and puts a MEM dataset
    /// with the source's georeferencing over them.
    fn read(
        &self,
        file: &MemFile,
        src: &Dataset,
        h: &Header,
        wkt: &str,
        gt: [f64; 6],
        id: &str,
    ) -> Result<Raster, StageError> {
        let pixels = h.width * h.height;
        let mut buffers = Vec::with_capacity(h.types.len());
        for t in &h.types {
            let len = pixels * dtype_size(*t) as usize;
            let mut buf: Vec<u8> = Vec::new();
            buf.try_reserve_exact(len).map_err(|_| {
                StageError::new(
                    ErrorKind::OverBudget,
                    format!("{id}: cannot allocate {len} bytes"),
                )
            })?;
            buf.resize(len, 0);
            buffers.push(buf);
        }
        for (i, (buf, t)) in buffers.iter_mut().zip(&h.types).enumerate() {
            let band = src
                .rasterband(i + 1)
                .map_err(|e| StageError::permanent(format!("{id}: band {}: {e}", i + 1)))?;
            reset_error();
            // SAFETY: `buf` holds exactly width x height pixels of type `t`
            // (allocated above), and the window is the whole band.
            let err = unsafe {
                sys::GDALRasterIO(
                    band.c_rasterband(),
                    sys::GDALRWFlag::GF_Read,
                    0,
                    0,
                    h.width as i32,
                    h.height as i32,
                    buf.as_mut_ptr().cast(),
                    h.width as i32,
                    h.height as i32,
                    *t,
                    0,
                    0,
                )
            };
            if err != sys::CPLErr::CE_None {
                return Err(StageError::permanent(format!(
                    "{id}: corrupt or truncated pixel data in band {}: {}",
                    i + 1,
                    named(&last_error("read failed"), file, id)
                )));
            }
        }
        let specs: Vec<BandSpec> = buffers
            .iter_mut()
            .zip(&h.types)
            .map(|(b, t)| BandSpec {
                dtype: *t,
                data: b.as_mut_ptr(),
            })
            .collect();
        // SAFETY: each buffer is width x height pixels of its type, owned by
        // the `Raster` built below, which drops the dataset first.
        let mut ds = unsafe { mem_dataset_over(h.width, h.height, &specs) }
            .map_err(|m| StageError::permanent(format!("{id}: {m}")))?;
        ds.set_geo_transform(&gt)
            .and_then(|_| ds.set_projection(wkt))
            .map_err(|e| StageError::permanent(format!("{id}: {e}")))?;
        for i in 1..=h.types.len() {
            let (from, mut to) = match (src.rasterband(i), ds.rasterband(i)) {
                (Ok(a), Ok(b)) => (a, b),
                _ => continue,
            };
            if let Some(nodata) = from.no_data_value() {
                let _ = to.set_no_data_value(Some(nodata));
            }
            let _ = to.set_color_interpretation(from.color_interpretation());
            let table = from.color_table();
            if let Some(t) = &table {
                to.set_color_table(t);
            }
            drop(table);
        }
        Ok(Raster { ds, buffers })
    }
}

/// Fetched bytes opened as a raster, header read, no pixel yet.
struct Opened {
    // Declared before `file`: the dataset is closed before the bytes go.
    ds: Dataset,
    header: Header,
    wkt: String,
    gt: [f64; 6],
    file: MemFile,
}

// SAFETY: moved between the `demand` and `process` of one worker, never
// shared; `Dataset` is `Send` and `MemFile` owns plain bytes.
unsafe impl Send for Opened {}

impl Decode {
    fn open_header(&self, item: &mut Item) -> Result<Opened, StageError> {
        let id = item.id.clone();
        let Some(fetched) = item.take_payload::<Fetched>() else {
            return Err(StageError::permanent(format!(
                "{id}: decode needs fetched bytes: put a `fetch` stage before `decode`"
            )));
        };
        let file =
            MemFile::new(fetched.bytes).map_err(|m| StageError::permanent(format!("{id}: {m}")))?;
        let ds = self.open(&file, &id)?;
        let header = self.header(&ds, &id)?;
        let gt = ds.geo_transform().map_err(|_| {
            StageError::permanent(format!(
                "{id}: has no geotransform: it cannot be placed on the map"
            ))
        })?;
        let wkt = match (ds.projection(), &self.assume_crs) {
            (p, _) if !p.is_empty() => p,
            (_, Some(assumed)) => assumed.clone(),
            (_, None) => {
                return Err(StageError::permanent(format!(
                    "{id}: has no CRS; set `assume_crs` on the decode stage if you know it"
                )))
            }
        };
        Ok(Opened {
            ds,
            header,
            wkt,
            gt,
            file,
        })
    }
}

impl BlockingStage for Decode {
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        let opened = self.open_header(item)?;
        // The compressed bytes, the decoded pixels, and the second copy of
        // those GDAL's block cache keeps while reading (at most the cache).
        let decoded = opened.header.decoded_bytes;
        let bytes = opened.file.len() + decoded + decoded.min(crate::gdal::cache_max());
        item.set_payload(opened);
        Ok(bytes)
    }

    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let opened = match item.take_payload::<Opened>() {
            Some(o) => o,
            None => self.open_header(item)?,
        };
        let raster = self.read(
            &opened.file,
            &opened.ds,
            &opened.header,
            &opened.wkt,
            opened.gt,
            &item.id,
        )?;
        drop(opened);
        item.set_payload(raster);
        Ok(Outcome::Continue)
    }
}
