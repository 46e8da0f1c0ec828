//! The `reproject` stage (blocking): `GDALWarp` (through [`crate::gdal`]),
//! with the options of the `gdalwarp` command, warping to an in-memory
//! dataset (or, for an output over the memory budget, to a GTiff on disk:
//! see `disk.rs`).
//!
//! Everything that changes pixels is an explicit setting with gdalwarp's
//! default: the resampling method, the transformer error threshold (`-et`,
//! 0.125 px) and the warp memory (`-wm`, 64 MiB), which decides how the warp
//! is chunked. So an output is reproduced exactly by `gdalwarp` with the
//! arguments the settings map onto (see `args.rs`), and never depends on
//! memory pressure. The output size comes from `GDALSuggestedWarpOutput2`
//! before warping, to charge the `memory` limiter and check `max_pixels`.
//! Where the source and the target share their datum, every tile's
//! transformers get one area of interest, so GDAL's cache of coordinate
//! transformations serves them all (the same operation and the same pixels
//! as gdalwarp's per-tile area, without PROJ searching its database for
//! each tile).

use gdal::Dataset;
use gdal_sys as sys;
use warpline_engine::{
    BlockingStage, Handler, Item, Outcome, Payload, Problem, Settings, StageError,
};

use crate::gdal::{
    dtype_size, init, kernel_warp, one_area, pixel_bytes, shared_area, source_refusal,
    suggested_output, vrt_view, warp, KernelPlan, OneArea, Raster, Suggested, Took, WarpError,
    WarpOptions,
};

mod args;
mod disk;

use args::Kernel;
#[cfg(test)]
use args::DEFAULT_WARP_MEMORY;
pub use args::RESAMPLING;

/// The reproject stage.
#[derive(Debug)]
pub struct Reproject {
    args: Vec<String>,
    transformer: Vec<String>,
    target_wkt: String,
    resolution: Option<(f64, f64)>,
    size: Option<(u32, u32)>,
    extent: Option<[f64; 4]>,
    dtype: Option<sys::GDALDataType::Type>,
    bands: Option<Vec<usize>>,
    max_pixels: u64,
    warp_memory: u64,
    /// Whether the output gets an alpha band (`dst_alpha`).
    dst_alpha: bool,
    /// By source CRS (WKT): whether one area of interest serves every
    /// tile warped to the target, and why (`gdal::one_area`).
    one_area: std::sync::Mutex<std::collections::HashMap<String, OneArea>>,
    /// Whether an output is warped in memory or on disk (`warp_to`).
    disk: disk::Disk,
    /// Whose resampling loop may warp (`kernel`).
    kernel: Kernel,
}

pub(crate) fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    init();
    let p = args::parse(s)?;
    let dst_alpha = p.args.iter().any(|a| a == "-dstalpha");
    Ok(Handler::from_blocking(Reproject {
        args: p.args,
        transformer: p.transformer,
        target_wkt: p.target_wkt,
        resolution: p.resolution,
        size: p.size,
        extent: p.extent,
        dtype: p.dtype,
        bands: p.bands,
        dst_alpha,
        max_pixels: p.max_pixels,
        warp_memory: p.warp_memory,
        one_area: Default::default(),
        disk: disk::Disk::new(p.warp_to, p.scratch, s),
        kernel: p.kernel,
    }))
}

impl Reproject {
    /// The output's size as `GDALSuggestedWarpOutput2` sees it, adjusted
    /// for `size`, `resolution` and `extent` as gdalwarp does.
    fn suggested_size(
        &self,
        srcs: &[&Dataset],
        aoi: Option<&str>,
        id: &str,
    ) -> Result<(u64, u64), StageError> {
        let mut items = self.transformer.clone();
        items.push(format!("DST_SRS={}", self.target_wkt));
        items.extend(aoi.map(str::to_owned));
        let mut each = srcs.iter().map(|src| {
            suggested_output(src, &items).map_err(|m| StageError::permanent(format!("{id}: {m}")))
        });
        let mut all = match each.next() {
            Some(first) => first?,
            None => return Err(StageError::permanent(format!("{id}: no input to warp"))),
        };
        for next in each {
            all = union(all, next?);
        }
        let Suggested {
            geo_transform: gt,
            pixels: px,
            lines: ln,
            extent,
        } = all;
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

    /// GDAL gives each transformer the source's footprint as its area of
    /// interest, and keys its cache of coordinate transformations on it,
    /// so each tile makes PROJ build its transformation again (0.3-18 ms).
    /// Where the area cannot change PROJ's choice (`gdal::one_area`: the
    /// same datum on both sides, or a CRS PROJ knows only by its PROJ
    /// string), one area for all tiles lets the cache serve them.
    ///
    /// A mosaic's inputs each need it (they may be in different CRSs).
    fn area_of_interest(&self, srcs: &[&Dataset]) -> Option<&'static str> {
        // A 3D promotion is not among the cases the argument covers.
        if self
            .transformer
            .iter()
            .any(|t| t.to_ascii_uppercase().starts_with("PROMOTE_TO_3D="))
        {
            return None;
        }
        srcs.iter()
            .all(|src| self.one_area_for(src).holds())
            .then(shared_area)
    }

    /// Why one area may serve `src`'s CRS (the transformer's `SRC_SRS`
    /// when one is given, read as GDAL reads it; else the dataset's own
    /// CRS object, which GDAL's transformer takes), found once per CRS.
    fn one_area_for(&self, src: &Dataset) -> OneArea {
        use gdal::spatial_ref::SpatialRef;
        let srs = match self
            .transformer
            .iter()
            .find_map(|t| t.strip_prefix("SRC_SRS="))
        {
            Some(text) => SpatialRef::from_definition(text),
            None => src.spatial_ref(),
        };
        let Ok(srs) = srs else {
            return OneArea::No;
        };
        // The key holds all a WKT2 can say (a WKT1 loses epochs, say).
        let Some(key) = crate::gdal::wkt2(&srs) else {
            return OneArea::No;
        };
        let mut known = self.one_area.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = known.get(&key) {
            return *why;
        }
        let why =
            SpatialRef::from_wkt(&self.target_wkt).map_or(OneArea::No, |t| one_area(&srs, &t));
        if known.len() >= 64 {
            known.clear();
        }
        known.insert(key, why);
        why
    }

    /// The dataset to warp: the decoded one, or a view of the selected
    /// bands (`gdal_translate -of VRT -b ...`: no pixel copied; the mask
    /// and the overviews kept).
    fn source_views(&self, raster: &Raster, id: &str) -> Result<Vec<Option<Dataset>>, StageError> {
        std::iter::once(raster)
            .chain(&raster.others)
            .map(|r| self.source_view(r, id))
            .collect()
    }

    fn source_view(&self, raster: &Raster, id: &str) -> Result<Option<Dataset>, StageError> {
        let Some(bands) = &self.bands else {
            return Ok(None);
        };
        let count = raster.ds.raster_count();
        if let Some(bad) = bands.iter().find(|b| **b > count) {
            return Err(StageError::permanent(format!(
                "{id}: band {bad} selected, but the raster has {count} bands"
            )));
        }
        let args: Vec<String> = bands
            .iter()
            .flat_map(|b| ["-b".to_owned(), b.to_string()])
            .collect();
        vrt_view(&raster.ds, &args)
            .map(Some)
            .map_err(|m| StageError::permanent(format!("{id}: cannot select bands: {m}")))
    }
}

/// The output of warping several inputs into one, as gdalwarp works it
/// out: the union of their extents at the finest of their resolutions.
fn union(a: Suggested, b: Suggested) -> Suggested {
    let e = [
        a.extent[0].min(b.extent[0]),
        a.extent[1].min(b.extent[1]),
        a.extent[2].max(b.extent[2]),
        a.extent[3].max(b.extent[3]),
    ];
    let rx = a.geo_transform[1].abs().min(b.geo_transform[1].abs());
    let ry = a.geo_transform[5].abs().min(b.geo_transform[5].abs());
    Suggested {
        geo_transform: [e[0], rx, 0.0, e[3], 0.0, -ry],
        pixels: ((e[2] - e[0]) / rx + 0.5) as i32,
        lines: ((e[3] - e[1]) / ry + 0.5) as i32,
        extent: e,
    }
}

impl Reproject {
    /// Bytes the warp's output will take, checked against `max_pixels`.
    fn output_bytes(
        &self,
        srcs: &[&Dataset],
        aoi: Option<&str>,
        id: &str,
    ) -> Result<u64, StageError> {
        let (w, h) = self.suggested_size(srcs, aoi, id)?;
        let src = srcs[0];
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
        // `dst_alpha` adds a band of the output's type.
        let alpha = match src.rasterband(1) {
            Ok(b) if self.dst_alpha => u64::from(dtype_size(
                self.dtype
                    .unwrap_or(b.band_type() as sys::GDALDataType::Type),
            )),
            _ => 0,
        };
        Ok(pixels.saturating_mul(band_bytes + alpha))
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
/// `demand`, with the area of interest its transformers get, its output's
/// bytes, and whether it is warped to disk.
struct Checked {
    raster: Raster,
    aoi: Option<&'static str>,
    out: u64,
    to_disk: bool,
}

/// The datasets to warp: each input's own, or its view (`bands`). Never
/// empty (the first input is always there), so `srcs[0]` below is safe.
fn datasets<'a>(raster: &'a Raster, views: &'a [Option<Dataset>]) -> Vec<&'a Dataset> {
    std::iter::once(raster)
        .chain(&raster.others)
        .zip(views)
        .map(|(r, v)| v.as_ref().unwrap_or(&r.ds))
        .collect()
}

impl warpline_engine::Stage for Reproject {
    fn takes(&self) -> Payload {
        crate::payloads::raster()
    }

    fn hands_on(&self) -> Payload {
        crate::payloads::raster()
    }

    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        let id = item.id.clone();
        let raster = Self::take_raster(item)?;
        let views = self.source_views(&raster, &id)?;
        let srcs = datasets(&raster, &views);
        let aoi = self.area_of_interest(&srcs);
        let planned = self.plan(&srcs, &raster, aoi, &id);
        drop(srcs);
        drop(views);
        let (charge, out, to_disk) = match planned {
            Ok(p) => p,
            Err(e) => {
                item.set_payload(raster);
                return Err(e);
            }
        };
        // `process` need not ask GDAL for the output size again.
        item.set_payload(Checked {
            raster,
            aoi,
            out,
            to_disk,
        });
        Ok(charge)
    }
}

impl BlockingStage for Reproject {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let id = item.id.clone();
        // The engine runs `demand` before every try, so the item is the
        // raster it checked and sized.
        let Some(Checked {
            raster,
            aoi,
            out,
            to_disk,
        }) = item.take_payload::<Checked>()
        else {
            return Err(StageError::permanent(format!(
                "{id}: reproject was handed an item its demand did not prepare (a stage before it must hand on a decoded raster)"
            )));
        };
        let views = self.source_views(&raster, &id)?;
        let srcs = datasets(&raster, &views);
        let out = if to_disk {
            item.took("disk");
            self.disk.warp(&srcs, &self.warp_args(aoi), &id, out)
        } else {
            self.warp(&srcs, aoi, &id).map(|(ds, path)| {
                item.took(path);
                Raster::in_memory(ds)
            })
        };
        // An input read by ranges that could not be read: the server's
        // fault (maybe for a moment), said as such.
        let out = out.map_err(|e| match raster.remote_failure() {
            Some(m) => StageError::transient(format!("{id}: {m}")),
            None => e,
        })?;
        let input: u64 = srcs.iter().map(|s| pixel_bytes(s)).sum();
        drop(srcs);
        drop(views);
        drop(raster);
        crate::gdal::trim_heap_after(input);
        item.set_payload(out);
        Ok(Outcome::Continue)
    }
}

impl Reproject {
    /// What the item is charged, its output's bytes, and whether it is
    /// warped to disk. In memory, the input's bytes stay while the warp
    /// reads them, and the output lives beside its chunk buffers, which
    /// hold at most the source window and the output (full resolution, an
    /// upper bound when an overview is read) and never more than
    /// `warp_memory`; on disk, the output is not held.
    fn plan(
        &self,
        srcs: &[&Dataset],
        raster: &Raster,
        aoi: Option<&str>,
        id: &str,
    ) -> Result<(u64, u64, bool), StageError> {
        let out = self.output_bytes(srcs, aoi, id)?;
        let decoded: u64 = srcs.iter().map(|s| pixel_bytes(s)).sum();
        let files = raster.file_bytes();
        let buffers = (decoded + out).min(self.warp_memory);
        let (charge, to_disk) = self.disk.choose(files + out + buffers, files + buffers);
        if to_disk {
            self.disk.refuse(id, files, buffers)?;
            tracing::info!(
                "{id}: the output ({} MiB) is warped to disk in chunks of warp_memory",
                out >> 20
            );
        }
        Ok((charge, out, to_disk))
    }

    /// gdalwarp's arguments for a warp of sources sharing `aoi`.
    fn warp_args(&self, aoi: Option<&str>) -> Vec<String> {
        let mut args = self.args.clone();
        if let Some(aoi) = aoi {
            args.extend(["-to".to_owned(), aoi.to_owned()]);
        }
        args
    }

    /// `gdalwarp <args> srcs...` to a MEM dataset, and the path it took
    /// (`warpline-kernel`: warpline's resampling loop; `memory`: GDAL's).
    fn warp(
        &self,
        srcs: &[&Dataset],
        aoi: Option<&str>,
        id: &str,
    ) -> Result<(Dataset, &'static str), StageError> {
        let src = srcs[0];
        let args = self.warp_args(aoi);
        let (out, path) = match self.own_loop(srcs, &args, id)? {
            Some(done) => done,
            None => {
                let options = WarpOptions::new(&args)
                    .map_err(|m| StageError::permanent(format!("{id}: {m}")))?;
                (
                    warp(srcs, &options).map_err(|e| warp_failure(id, e))?,
                    "memory",
                )
            }
        };
        // The MEM route drops colour interpretation (gdalwarp's output
        // driver keeps it): copy it across.
        for i in 1..=out.raster_count().min(src.raster_count()) {
            if let (Ok(from), Ok(mut to)) = (src.rasterband(i), out.rasterband(i)) {
                let _ = to.set_color_interpretation(from.color_interpretation());
            }
        }
        Ok((out, path))
    }

    /// The warp through `gdal::kernel` (gdalwarp's own calls, with
    /// warpline's loop where it is proven equal), or None where that
    /// replica does not cover the settings or the input.
    fn own_loop(
        &self,
        srcs: &[&Dataset],
        args: &[String],
        id: &str,
    ) -> Result<Option<(Dataset, &'static str)>, StageError> {
        if self.kernel == Kernel::Gdal || srcs.len() != 1 {
            return Ok(None);
        }
        let Some(plan) = KernelPlan::from_args(args) else {
            return Ok(None);
        };
        if let Some(why) = source_refusal(srcs[0], &plan) {
            tracing::debug!("{id}: GDAL's warp ({why})");
            return Ok(None);
        }
        let (out, took, checks) = kernel_warp(srcs[0], &plan).map_err(|e| warp_failure(id, e))?;
        if checks.skipped + checks.kept > 0 {
            tracing::debug!(
                "{id}: gdalwarp's inverse projection check proven to pass for {} points, run for {}",
                checks.skipped,
                checks.kept
            );
        }
        Ok(Some(match took {
            Took::Ours => (out, "warpline-kernel"),
            Took::Theirs(why) => {
                tracing::debug!("{id}: GDAL's resampling loop ({why})");
                (out, "memory")
            }
        }))
    }
}

/// A failed warp, as the item's error.
fn warp_failure(id: &str, e: WarpError) -> StageError {
    match e {
        // Not this input's fault: the machine's, maybe for a moment.
        WarpError::OutOfMemory(m) => {
            StageError::transient(format!("{id}: the warp ran out of memory: {m}"))
        }
        WarpError::Unreadable(m) => {
            StageError::permanent(format!("{id}: corrupt or truncated pixel data: {m}"))
        }
        WarpError::Failed(m) => StageError::permanent(format!("{id}: warp failed: {m}")),
    }
}

#[cfg(test)]
mod tests;
