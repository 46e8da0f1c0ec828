//! The `reproject` stage (blocking): `GDALWarp` through `gdal-sys`, with
//! the options of the `gdalwarp` command, warping to an in-memory dataset.
//!
//! Everything that changes pixels is an explicit setting with gdalwarp's
//! default: the resampling method, the transformer error threshold (`-et`,
//! 0.125 px) and the warp memory (`-wm`, 64 MiB), which decides how the warp
//! is chunked. So an output is reproduced exactly by `gdalwarp` with the
//! arguments [`Reproject::gdalwarp_args`] returns, and never depends on
//! memory pressure. The output size comes from `GDALSuggestedWarpOutput2`
//! before warping, to charge the `memory` limiter and check `max_pixels`.
//! Where the source and the target share their datum, every tile's
//! transformers get one area of interest, so GDAL's cache of coordinate
//! transformations serves them all (the same operation and the same pixels
//! as gdalwarp's per-tile area, without PROJ searching its database for
//! each tile).

use std::collections::BTreeMap;
use std::ptr;

use gdal::Dataset;
use gdal_sys as sys;
use serde::Deserialize;
use warpline_engine::units::SizeValue;
use warpline_engine::{BlockingStage, Handler, Item, Outcome, Problem, Settings, StageError};

use crate::decode::crs_to_wkt;
use crate::gdal::{
    dtype_by_name, dtype_size, init, last_error, mem_dataset_over, reset_error, BandSpec,
    CStringList, Raster, WarpOptions,
};

/// The resampling methods, by gdalwarp's names.
pub const RESAMPLING: &[&str] = &[
    "near",
    "bilinear",
    "cubic",
    "cubicspline",
    "lanczos",
    "average",
    "rms",
    "mode",
    "max",
    "min",
    "med",
    "q1",
    "q3",
    "sum",
];

/// A number or a pair of numbers.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "expected one number or [x, y]")]
enum OneOrTwo {
    One(f64),
    Two(Vec<f64>),
}

/// A nodata value: a number, or a word such as "nan" or "None".
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a number, or a word such as \"nan\" or \"None\""
)]
enum NoData {
    Number(f64),
    Text(String),
}

impl NoData {
    fn arg(&self) -> String {
        match self {
            NoData::Number(n) => format!("{n}"),
            NoData::Text(t) => t.clone(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReprojectSettings {
    crs: Option<String>,
    resampling: Option<String>,
    resolution: Option<OneOrTwo>,
    size: Option<Vec<u32>>,
    extent: Option<Vec<f64>>,
    extent_crs: Option<String>,
    tap: Option<bool>,
    src_nodata: Option<NoData>,
    dst_nodata: Option<NoData>,
    dtype: Option<String>,
    bands: Option<Vec<u32>>,
    error_threshold: Option<f64>,
    warp_memory: Option<SizeValue>,
    warp_options: Option<BTreeMap<String, String>>,
    max_pixels: Option<u64>,
}

/// The reproject stage.
#[derive(Debug)]
pub struct Reproject {
    args: Vec<String>,
    target_wkt: String,
    resolution: Option<(f64, f64)>,
    size: Option<(u32, u32)>,
    extent: Option<[f64; 4]>,
    dtype: Option<sys::GDALDataType::Type>,
    bands: Option<Vec<usize>>,
    max_pixels: u64,
    warp_memory: u64,
    /// By source CRS (WKT): whether it shares its geographic CRS with the
    /// target, so that one area of interest serves every tile.
    same_datum: std::sync::Mutex<std::collections::HashMap<String, bool>>,
}

/// The area of interest given to GDAL's transformers when the source and
/// the target share their datum (see [`Reproject::area_of_interest`]).
const WHOLE_WORLD: &str = "AREA_OF_INTEREST=-180,-90,180,90";

const DEFAULT_WARP_MEMORY: u64 = 64 << 20;

pub(crate) fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    init();
    let r: ReprojectSettings = s.parse()?;
    let mut problems = Vec::new();
    let mut args: Vec<String> = Vec::new();

    let target_wkt = match &r.crs {
        None => {
            problems.push(s.problem(
                "crs",
                "missing: the target CRS, e.g. \"EPSG:3857\", a WKT or a PROJ string",
            ));
            String::new()
        }
        Some(text) => crs_to_wkt(text).unwrap_or_else(|m| {
            problems.push(s.env_problem("crs", m));
            String::new()
        }),
    };
    if let Some(text) = &r.crs {
        args.extend(["-t_srs".to_owned(), text.clone()]);
    }
    let resampling = r.resampling.clone().unwrap_or_else(|| "near".to_owned());
    if !RESAMPLING.contains(&resampling.to_ascii_lowercase().as_str()) {
        problems.push(s.problem(
            "resampling",
            format!(
                "unknown method {resampling:?}; one of {}",
                RESAMPLING.join(", ")
            ),
        ));
    }
    args.extend(["-r".to_owned(), resampling]);

    let resolution = match &r.resolution {
        None => None,
        Some(OneOrTwo::One(x)) => Some((*x, *x)),
        Some(OneOrTwo::Two(v)) if v.len() == 2 => Some((v[0], v[1])),
        Some(OneOrTwo::Two(_)) => {
            problems.push(s.problem("resolution", "give one number or [x, y]"));
            None
        }
    };
    if let Some((x, y)) = resolution {
        if !(x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite()) {
            problems.push(s.problem("resolution", "must be positive"));
        }
        args.extend(["-tr".to_owned(), format!("{x}"), format!("{y}")]);
    }
    let size = match &r.size {
        None => None,
        Some(v) if v.len() == 2 && (v[0] > 0 || v[1] > 0) => Some((v[0], v[1])),
        Some(_) => {
            problems.push(s.problem(
                "size",
                "give [width, height] in pixels (one of them may be 0: kept in proportion)",
            ));
            None
        }
    };
    if let Some((w, h)) = size {
        if resolution.is_some() {
            problems.push(s.problem("size", "give `resolution` or `size`, not both"));
        }
        args.extend(["-ts".to_owned(), w.to_string(), h.to_string()]);
    }
    let extent = match &r.extent {
        None => None,
        Some(v) if v.len() == 4 && v[0] < v[2] && v[1] < v[3] => Some([v[0], v[1], v[2], v[3]]),
        Some(_) => {
            problems.push(s.problem(
                "extent",
                "give [xmin, ymin, xmax, ymax] with xmin < xmax and ymin < ymax",
            ));
            None
        }
    };
    if let Some(e) = extent {
        args.push("-te".to_owned());
        args.extend(e.iter().map(|v| format!("{v}")));
    }
    if let Some(text) = &r.extent_crs {
        if extent.is_none() {
            problems.push(s.problem("extent_crs", "only applies with `extent`"));
        }
        if let Err(m) = crs_to_wkt(text) {
            problems.push(s.env_problem("extent_crs", m));
        }
        args.extend(["-te_srs".to_owned(), text.clone()]);
    }
    if r.tap == Some(true) {
        if resolution.is_none() {
            problems.push(s.problem("tap", "needs `resolution` (as gdalwarp's -tap needs -tr)"));
        }
        args.push("-tap".to_owned());
    }
    if let Some(v) = &r.src_nodata {
        args.extend(["-srcnodata".to_owned(), v.arg()]);
    }
    if let Some(v) = &r.dst_nodata {
        args.extend(["-dstnodata".to_owned(), v.arg()]);
    }
    let dtype = r.dtype.as_deref().and_then(|name| {
        let t = dtype_by_name(name);
        if t.is_none() {
            problems.push(s.problem(
                "dtype",
                format!("unknown data type {name:?}; e.g. Byte, UInt16, Int16, UInt32, Int32, Float32, Float64"),
            ));
        }
        t
    });
    if let Some(name) = &r.dtype {
        args.extend(["-ot".to_owned(), name.clone()]);
    }
    let bands = r.bands.as_ref().map(|b| {
        if b.is_empty() || b.contains(&0) {
            problems.push(s.problem("bands", "give band numbers counted from 1, e.g. [1, 2, 3]"));
        }
        b.iter().map(|n| *n as usize).collect::<Vec<_>>()
    });
    let et = r.error_threshold.unwrap_or(0.125);
    if !(et >= 0.0 && et.is_finite()) {
        problems.push(s.problem(
            "error_threshold",
            "must be 0 (exact) or a positive number of pixels",
        ));
    }
    args.extend(["-et".to_owned(), format!("{et}")]);
    let wm = match &r.warp_memory {
        None => DEFAULT_WARP_MEMORY,
        Some(v) => match v.bytes() {
            Ok(b) if b >= 1 << 20 => b,
            Ok(_) => {
                problems.push(s.problem("warp_memory", "must be at least 1MiB"));
                DEFAULT_WARP_MEMORY
            }
            Err(m) => {
                problems.push(s.problem("warp_memory", m));
                DEFAULT_WARP_MEMORY
            }
        },
    };
    // gdalwarp reads values of 10000 or more as bytes.
    args.extend(["-wm".to_owned(), wm.to_string()]);
    for (k, v) in r.warp_options.iter().flatten() {
        args.extend(["-wo".to_owned(), format!("{k}={v}")]);
    }
    // The options must be accepted by GDALWarp itself.
    if problems.is_empty() {
        if let Err(m) = WarpOptions::new(&args) {
            problems.push(s.problem("", format!("GDALWarp refuses these settings: {m}")));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Handler::from_blocking(Reproject {
        args,
        target_wkt,
        resolution,
        size,
        extent: extent.filter(|_| r.extent_crs.is_none()),
        dtype,
        bands,
        max_pixels: r.max_pixels.unwrap_or(1 << 28),
        warp_memory: wm,
        same_datum: Default::default(),
    }))
}

impl Reproject {
    /// The arguments of `gdalwarp` that reproduce this stage's output (add
    /// the source and destination files, and `-of` for the format).
    pub fn gdalwarp_args(&self) -> &[String] {
        &self.args
    }

    /// The output's size as `GDALSuggestedWarpOutput2` sees it, adjusted
    /// for `size`, `resolution` and `extent` as gdalwarp does.
    fn suggested_size(
        &self,
        src: &Dataset,
        aoi: Option<&str>,
        id: &str,
    ) -> Result<(u64, u64), StageError> {
        let mut items = vec![format!("DST_SRS={}", self.target_wkt)];
        items.extend(aoi.map(str::to_owned));
        let mut options =
            CStringList::new(&items).map_err(|m| StageError::permanent(format!("{id}: {m}")))?;
        reset_error();
        // SAFETY: `src` is a valid dataset; `options` a NULL-terminated list
        // alive for the call. The transformer is destroyed below.
        let transformer = unsafe {
            sys::GDALCreateGenImgProjTransformer2(
                src.c_dataset(),
                ptr::null_mut(),
                options.as_ptr(),
            )
        };
        if transformer.is_null() {
            return Err(StageError::permanent(format!(
                "{id}: cannot transform to the target CRS: {}",
                last_error("no transformation")
            )));
        }
        let mut gt = [0f64; 6];
        let mut extent = [0f64; 4];
        let (mut px, mut ln) = (0i32, 0i32);
        // SAFETY: all out-pointers are to locals of the right sizes; the
        // transformer was made for this source.
        let err = unsafe {
            sys::GDALSuggestedWarpOutput2(
                src.c_dataset(),
                Some(sys::GDALGenImgProjTransform),
                transformer,
                gt.as_mut_ptr(),
                &mut px,
                &mut ln,
                extent.as_mut_ptr(),
                0,
            )
        };
        // SAFETY: made by GDALCreateGenImgProjTransformer2, destroyed once.
        unsafe { sys::GDALDestroyGenImgProjTransformer(transformer) };
        if err != sys::CPLErr::CE_None {
            return Err(StageError::permanent(format!(
                "{id}: cannot work out the output of the warp: {}",
                last_error("no suggestion")
            )));
        }
        let ext = self.extent.unwrap_or(extent);
        let (w, h) = match (self.size, self.resolution) {
            (Some((w, h)), _) => {
                let aspect = (ext[2] - ext[0]) / (ext[3] - ext[1]).max(f64::MIN_POSITIVE);
                match (w, h) {
                    (0, h) => ((f64::from(h) * aspect).ceil(), f64::from(h)),
                    (w, 0) => (f64::from(w), (f64::from(w) / aspect).ceil()),
                    (w, h) => (f64::from(w), f64::from(h)),
                }
            }
            (None, Some((xr, yr))) => (
                ((ext[2] - ext[0]) / xr).ceil() + 1.0,
                ((ext[3] - ext[1]) / yr).ceil() + 1.0,
            ),
            (None, None) if self.extent.is_some() => (
                ((ext[2] - ext[0]) / gt[1].abs()).ceil(),
                ((ext[3] - ext[1]) / gt[5].abs()).ceil(),
            ),
            (None, None) => (f64::from(px), f64::from(ln)),
        };
        Ok((w.max(1.0) as u64, h.max(1.0) as u64))
    }

    /// GDAL gives each transformer the source's extent as its area of
    /// interest, so PROJ can pick the best datum transformation there; it
    /// also keys GDAL's cache of coordinate transformations, so each tile
    /// (a new extent) makes PROJ search its database again (~1.5 ms). When
    /// the source and the target share their geographic CRS, no datum
    /// transformation is involved and every area gives the same
    /// operation: one area for all tiles then lets the cache serve them.
    fn area_of_interest(&self, src: &Dataset) -> Option<&'static str> {
        let wkt = src.projection();
        let mut known = self.same_datum.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(same) = known.get(&wkt) {
            return same.then_some(WHOLE_WORLD);
        }
        let same = match (
            gdal::spatial_ref::SpatialRef::from_wkt(&wkt),
            gdal::spatial_ref::SpatialRef::from_wkt(&self.target_wkt),
        ) {
            (Ok(a), Ok(b)) if !a.is_compound() && !b.is_compound() => {
                // SAFETY: both handles are valid for the call (owned by
                // `a` and `b`); OSRIsSameGeogCS only reads them.
                unsafe { sys::OSRIsSameGeogCS(a.to_c_hsrs(), b.to_c_hsrs()) != 0 }
            }
            _ => false,
        };
        if known.len() >= 64 {
            known.clear();
        }
        known.insert(wkt, same);
        same.then_some(WHOLE_WORLD)
    }

    /// The dataset to warp: the decoded one, or a view of the selected
    /// bands over the same buffers (no copy).
    fn source_view(&self, raster: &Raster, id: &str) -> Result<Option<Dataset>, StageError> {
        let Some(bands) = &self.bands else {
            return Ok(None);
        };
        let count = raster.ds.raster_count();
        if let Some(bad) = bands
            .iter()
            .find(|b| **b > count || raster.buffers.len() < count)
        {
            return Err(StageError::permanent(format!(
                "{id}: band {bad} selected, but the raster has {count} bands"
            )));
        }
        let (w, h) = raster.ds.raster_size();
        let mut specs = Vec::with_capacity(bands.len());
        for b in bands {
            let band = raster
                .ds
                .rasterband(*b)
                .map_err(|e| StageError::permanent(format!("{id}: {e}")))?;
            specs.push(BandSpec {
                dtype: band.band_type() as sys::GDALDataType::Type,
                // Read-only use by the warp; the buffer lives in `raster`,
                // which outlives the view (both live in `process`).
                data: raster.buffers[b - 1].as_ptr().cast_mut(),
            });
        }
        // SAFETY: each pointer is a whole band buffer of `raster`, of the
        // band's type and size, alive for as long as the view (dropped
        // before `raster` in `process`).
        let mut view = unsafe { mem_dataset_over(w, h, &specs) }
            .map_err(|m| StageError::permanent(format!("{id}: {m}")))?;
        if let Ok(gt) = raster.ds.geo_transform() {
            let _ = view.set_geo_transform(&gt);
        }
        let _ = view.set_projection(&raster.ds.projection());
        for (i, b) in bands.iter().enumerate() {
            if let (Ok(from), Ok(mut to)) = (raster.ds.rasterband(*b), view.rasterband(i + 1)) {
                if let Some(v) = from.no_data_value() {
                    let _ = to.set_no_data_value(Some(v));
                }
                let _ = to.set_color_interpretation(from.color_interpretation());
            }
        }
        Ok(Some(view))
    }
}

impl Reproject {
    /// Bytes the warp's output will take, checked against `max_pixels`.
    fn output_bytes(&self, src: &Dataset, aoi: Option<&str>, id: &str) -> Result<u64, StageError> {
        let (w, h) = self.suggested_size(src, aoi, id)?;
        let pixels = w.saturating_mul(h);
        if pixels > self.max_pixels {
            return Err(StageError::permanent(format!(
                "{id}: the warped output would be {w} x {h} = {pixels} pixels, over max_pixels ({})",
                self.max_pixels
            )));
        }
        let band_bytes: u64 = (1..=src.raster_count())
            .filter_map(|i| src.rasterband(i).ok())
            .map(|b| {
                u64::from(dtype_size(
                    self.dtype
                        .unwrap_or(b.band_type() as sys::GDALDataType::Type),
                ))
            })
            .sum();
        Ok(pixels.saturating_mul(band_bytes))
    }

    fn take_raster(item: &mut Item) -> Result<Raster, StageError> {
        item.take_payload::<Raster>().ok_or_else(|| {
            StageError::permanent(format!(
                "{}: reproject needs a decoded raster: put a `decode` stage before `reproject`",
                item.id
            ))
        })
    }
}

/// A raster whose warp output was sized (and found under `max_pixels`) in
/// `demand`, with the area of interest its transformers get.
struct Checked {
    raster: Raster,
    aoi: Option<&'static str>,
}

impl BlockingStage for Reproject {
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        let id = item.id.clone();
        let raster = Self::take_raster(item)?;
        let view = self.source_view(&raster, &id)?;
        let src = view.as_ref().unwrap_or(&raster.ds);
        let aoi = self.area_of_interest(src);
        let out = self.output_bytes(src, aoi, &id);
        let input = raster.pixel_bytes();
        drop(view);
        // `process` need not ask GDAL for the output size again.
        item.set_payload(Checked { raster, aoi });
        // The input and the output live side by side during the warp, and
        // the warp's own chunk buffers take up to `warp_memory` more.
        let out = out?;
        Ok(input + out + (input + out).min(self.warp_memory))
    }

    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let id = item.id.clone();
        let (raster, checked) = match item.take_payload::<Checked>() {
            Some(Checked { raster, aoi }) => (raster, Some(aoi)),
            None => (Self::take_raster(item)?, None),
        };
        let view = self.source_view(&raster, &id)?;
        let src = view.as_ref().unwrap_or(&raster.ds);
        let aoi = match checked {
            Some(aoi) => aoi,
            None => {
                let aoi = self.area_of_interest(src);
                self.output_bytes(src, aoi, &id)?;
                aoi
            }
        };

        let mut args = self.args.clone();
        if let Some(aoi) = aoi {
            args.extend(["-to".to_owned(), aoi.to_owned()]);
        }
        let options =
            WarpOptions::new(&args).map_err(|m| StageError::permanent(format!("{id}: {m}")))?;
        let mut sources = [src.c_dataset()];
        let mut usage_error = 0;
        reset_error();
        // SAFETY: one valid source dataset; valid options; "" names the MEM
        // output, which GDALWarp creates and we own (wrapped at once).
        let out = unsafe {
            sys::GDALWarp(
                c"".as_ptr(),
                ptr::null_mut(),
                1,
                sources.as_mut_ptr(),
                options.0,
                &mut usage_error,
            )
        };
        if out.is_null() {
            return Err(StageError::permanent(format!(
                "{id}: warp failed: {}",
                last_error("GDALWarp returned nothing")
            )));
        }
        // SAFETY: a new dataset GDALWarp handed to us; closed on drop.
        let out = unsafe { Dataset::from_c_dataset(out) };
        // The MEM route drops colour interpretation: copy it across.
        for i in 1..=out.raster_count() {
            if let (Ok(from), Ok(mut to)) = (src.rasterband(i), out.rasterband(i)) {
                let _ = to.set_color_interpretation(from.color_interpretation());
            }
        }
        drop(view);
        let input = raster.pixel_bytes();
        drop(raster);
        crate::gdal::trim_heap_after(input);
        item.set_payload(Raster {
            ds: out,
            buffers: Vec::new(),
        });
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests;
