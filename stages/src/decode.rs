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

use std::ptr;

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
        crate::gdal::request_cache(crate::gdal::cache_for_budget(m.capacity()));
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
    window: Window,
}

/// At most this many bytes of pixels (all bands) are decoded at a time,
/// unless one block is larger.
const WINDOW_BYTES: u64 = 4 << 20;

/// How the pixels are decoded: a window of whole blocks at a time, every
/// band, then the blocks are dropped from GDAL's block cache.
///
/// GDAL decodes through its block cache, which keeps every block it read
/// until the dataset closes or the cache is full. Read band after band,
/// a raster filled the whole cache (64 MiB at a 512 MiB budget) with small
/// blocks on the heap, which glibc then kept as free memory in every
/// arena; with pixel-interleaved tiles each tile was also decompressed again
/// for every band once the cache overflowed. Reading every band of a window
/// of whole blocks, then flushing them, decompresses each block once and
/// keeps at most one window's blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    /// Columns and rows per window: whole blocks (the last window of a row
    /// or column may be cut by the raster's edge).
    cols: usize,
    rows: usize,
    /// Bytes one window's blocks take in the cache.
    cache_bytes: u64,
}

impl Window {
    /// `width` and `height` are at least 1 (an empty raster is refused
    /// before this).
    fn new(width: usize, height: usize, pixel_bytes: u64, block: (usize, usize)) -> Self {
        let (bw, bh) = (block.0.clamp(1, width), block.1.clamp(1, height));
        let block_bytes = (bw as u64 * bh as u64).saturating_mul(pixel_bytes).max(1);
        let fit = usize::try_from(WINDOW_BYTES / block_bytes)
            .unwrap_or(usize::MAX)
            .max(1);
        let across = width.div_ceil(bw);
        // A whole row of blocks if it fits, then as many rows as fit; else
        // as many blocks of one row as fit.
        let (bx, by) = if fit >= across {
            (across, (fit / across).min(height.div_ceil(bh)))
        } else {
            (fit, 1)
        };
        Window {
            cols: (bx * bw).min(width),
            rows: (by * bh).min(height),
            cache_bytes: (bx * by) as u64 * block_bytes,
        }
    }
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
        let pixel_bytes: u64 = types.iter().map(|t| u64::from(dtype_size(*t))).sum();
        let decoded_bytes = pixels.saturating_mul(pixel_bytes);
        let block = ds
            .rasterband(1)
            .map(|b| b.block_size())
            .unwrap_or((width, 1));
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
            window: Window::new(width, height, pixel_bytes, block),
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
        self.read_windows(file, src, h, &mut buffers, id)?;
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

impl Decode {
    /// Reads every band into `buffers`, one window of whole blocks at a
    /// time (see [`Window`]), dropping each window's blocks from GDAL's
    /// cache before the next.
    fn read_windows(
        &self,
        file: &MemFile,
        src: &Dataset,
        h: &Header,
        buffers: &mut [Vec<u8>],
        id: &str,
    ) -> Result<(), StageError> {
        let bands = (1..=h.types.len())
            .map(|i| src.rasterband(i))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StageError::permanent(format!("{id}: {e}")))?;
        let w = h.window;
        for y in (0..h.height).step_by(w.rows) {
            let rows = w.rows.min(h.height - y);
            for x in (0..h.width).step_by(w.cols) {
                let cols = w.cols.min(h.width - x);
                for (i, ((band, buf), t)) in bands
                    .iter()
                    .zip(buffers.iter_mut())
                    .zip(&h.types)
                    .enumerate()
                {
                    let size = dtype_size(*t) as usize;
                    // The window's first pixel to just after its last: in
                    // the buffer, as y + rows <= height and x + cols <= width.
                    let span =
                        (y * h.width + x) * size..((y + rows - 1) * h.width + x + cols) * size;
                    let out = &mut buf[span];
                    reset_error();
                    // SAFETY: `out` spans the window's rows in the band's
                    // buffer (width x height pixels of type `t`): `rows`
                    // lines of `cols` pixels, `width` pixels apart, and the
                    // window lies inside the band.
                    let err = unsafe {
                        sys::GDALRasterIOEx(
                            band.c_rasterband(),
                            sys::GDALRWFlag::GF_Read,
                            x as i32,
                            y as i32,
                            cols as i32,
                            rows as i32,
                            out.as_mut_ptr().cast(),
                            cols as i32,
                            rows as i32,
                            *t,
                            size as sys::GSpacing,
                            (h.width * size) as sys::GSpacing,
                            ptr::null_mut(),
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
                for band in &bands {
                    // SAFETY: a valid band of an open, read-only dataset:
                    // its blocks are dropped from the cache (none is dirty).
                    unsafe { sys::GDALFlushRasterCache(band.c_rasterband()) };
                }
            }
        }
        Ok(())
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
        // The compressed bytes, the decoded pixels, and the blocks of one
        // window in GDAL's block cache.
        let h = &opened.header;
        let bytes = opened.file.len() + h.decoded_bytes + h.window.cache_bytes;
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
        let decoded = opened.header.decoded_bytes;
        drop(opened);
        crate::gdal::trim_heap_after(decoded);
        item.set_payload(raster);
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warpline_engine::Input;

    #[test]
    fn windows_are_whole_blocks_within_the_window_bytes() {
        // A normal tile, in strips of 5 rows: one window, the whole tile.
        let w = Window::new(512, 512, 3, (512, 5));
        assert_eq!((w.cols, w.rows), (512, 512));
        // 5120 px tiled by 256: one row of blocks (3.75 MiB) at a time.
        let w = Window::new(5120, 5120, 3, (256, 256));
        assert_eq!(
            (w.cols, w.rows, w.cache_bytes),
            (5120, 256, 20 * 256 * 256 * 3)
        );
        // Wider than the window bytes allow: part of a row of blocks.
        let w = Window::new(20000, 300, 3, (256, 256));
        assert_eq!((w.cols, w.rows), (21 * 256, 256));
        assert!(w.cache_bytes <= WINDOW_BYTES);
        // One block larger than the window bytes: that block.
        let w = Window::new(5120, 5120, 3, (5120, 5120));
        assert_eq!(
            (w.cols, w.rows, w.cache_bytes),
            (5120, 5120, 5120 * 5120 * 3)
        );
    }

    /// A 3-band Byte GeoTIFF, tiled and compressed, `w` x `h`, with every
    /// pixel distinct enough to catch a window in the wrong place.
    fn tiled(w: usize, h: usize) -> Vec<u8> {
        init();
        let mem = gdal::DriverManager::get_driver_by_name("MEM").unwrap();
        let mut ds = mem.create_with_band_type::<u8, _>("", w, h, 3).unwrap();
        ds.set_geo_transform(&[500_000.0, 30.0, 0.0, 4_500_000.0, 0.0, -30.0])
            .unwrap();
        ds.set_projection(&crs_to_wkt("EPSG:32618").unwrap())
            .unwrap();
        for b in 1..=3 {
            let data: Vec<u8> = (0..w * h)
                .map(|p| ((p % w) * 7 + (p / w) * 13 + b * 101) as u8)
                .collect();
            let mut buf = gdal::raster::Buffer::new((w, h), data);
            ds.rasterband(b)
                .unwrap()
                .write((0, 0), (w, h), &mut buf)
                .unwrap();
        }
        let path = format!("/vsimem/decode-test-{w}x{h}.tif");
        let gtiff = gdal::DriverManager::get_driver_by_name("GTiff").unwrap();
        let opts = gdal::cpl::CslStringList::from_iter(["TILED=YES", "COMPRESS=DEFLATE"]);
        ds.create_copy(&gtiff, &path, &opts).unwrap();
        gdal::vsi::get_vsi_mem_file_bytes_owned(&path).unwrap()
    }

    #[test]
    fn a_raster_read_by_windows_has_every_pixel_where_gdal_puts_it() {
        // 6000 px wide: 24 blocks across, more than one window holds, so the
        // windows split rows and columns; 700 rows: three block rows.
        let (w, h) = (6000, 700);
        let bytes = tiled(w, h);
        let decode = Decode {
            drivers: vec!["GTiff".to_owned()],
            assume_crs: None,
            max_pixels: DEFAULT_MAX_PIXELS,
            max_decoded_bytes: DEFAULT_MAX_DECODED,
        };
        let mut item = Item::new(Input {
            id: "t".to_owned(),
            source: "test".to_owned(),
            size_hint: None,
        });
        item.set_payload(Fetched {
            bytes: bytes.clone(),
        });
        let charged = decode.demand(&mut item).unwrap();
        assert!(charged < bytes.len() as u64 + (w * h * 3) as u64 + WINDOW_BYTES + 1);
        decode.process(&mut item).unwrap();
        let raster = item.take_payload::<Raster>().unwrap();
        let file = MemFile::new(bytes).unwrap();
        let src = Dataset::open(file.path()).unwrap();
        for b in 1..=3 {
            let want = src
                .rasterband(b)
                .unwrap()
                .read_as::<u8>((0, 0), (w, h), (w, h), None)
                .unwrap();
            assert!(want.data() == &raster.buffers[b - 1][..], "band {b}");
        }
    }
}
