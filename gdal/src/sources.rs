//! [`Sources`]: the datasets one item warps (its raster, a mosaic's other
//! inputs, or views of their selected bands), sized and warped as gdalwarp
//! does. The reproject stage decides what to ask and what to charge; this
//! file asks GDAL (or the active accelerator, [`crate::accel`]).

use std::path::Path;

use gdal::Dataset;

use crate::accel::{self, Took};
use crate::spec::WarpSpec;
use crate::warp::{suggested_output, warp, warp_into, Suggested, WarpError, WarpOptions};
use crate::{pixel_bytes, vrt_view, DataType, Error, Raster, ScratchFile};

/// Which loop made a warp's output, for the item's trace (`took`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarpedBy {
    /// The accelerator's own loops, every chunk.
    Accelerator,
    /// GDAL's loop, in memory.
    Gdal,
}

impl WarpedBy {
    /// The name the item's trace gives the path.
    pub fn label(self) -> &'static str {
        match self {
            WarpedBy::Accelerator => "warpline-kernel",
            WarpedBy::Gdal => "memory",
        }
    }
}

/// The datasets one item warps, in order: the raster's own (or its view of
/// `bands`), then a mosaic's others'. Never empty.
#[derive(Debug)]
pub struct Sources<'r> {
    rasters: Vec<&'r Raster>,
    views: Vec<Option<Dataset>>,
}

impl<'r> Sources<'r> {
    /// The sources of `raster`; with `bands`, a view of those bands of each
    /// (`gdal_translate -of VRT -b ...`: no pixel copied; the mask and the
    /// overviews kept).
    pub fn new(raster: &'r Raster, bands: Option<&[usize]>) -> Result<Self, Error> {
        let rasters: Vec<&Raster> = std::iter::once(raster).chain(&raster.others).collect();
        let views = rasters
            .iter()
            .map(|r| view(r, bands))
            .collect::<Result<_, _>>()?;
        Ok(Sources { rasters, views })
    }

    /// The datasets, each the view if there is one.
    fn datasets(&self) -> Vec<&Dataset> {
        self.rasters
            .iter()
            .zip(&self.views)
            .map(|(r, v)| v.as_ref().unwrap_or(&r.ds))
            .collect()
    }

    /// Bytes of the sources' pixels at full resolution, decoded.
    pub fn pixel_bytes(&self) -> u64 {
        self.datasets().iter().map(|d| pixel_bytes(d)).sum()
    }

    /// The area of interest every tile's transformer may share, if the
    /// active accelerator proves it harmless for these sources.
    pub fn area_of_interest(&self, spec: &WarpSpec) -> Option<String> {
        if spec.promotes_to_3d() {
            // A 3D promotion is not among the cases the argument covers.
            return None;
        }
        accel::active()?.area_of_interest(&self.datasets(), spec)
    }

    /// The output's size as `GDALSuggestedWarpOutput2` sees it, adjusted for
    /// `size`, `resolution` and `extent` as gdalwarp does. `target_wkt` is
    /// the target CRS as WKT, `src_crs_wkt` the `src_crs` override's.
    pub fn output_size(
        &self,
        spec: &WarpSpec,
        target_wkt: &str,
        src_crs_wkt: Option<&str>,
    ) -> Result<(u64, u64), Error> {
        let mut items = spec.transformer_items(src_crs_wkt);
        items.push(format!("DST_SRS={target_wkt}"));
        items.extend(spec.area_of_interest.clone());
        let mut all: Option<Suggested> = None;
        for src in self.datasets() {
            let next = suggested_output(src, &items)?;
            all = Some(match all {
                None => next,
                Some(a) => union(a, next),
            });
        }
        let all = all.ok_or_else(|| Error::Gdal("no input to warp".to_owned()))?;
        // In another CRS, the extent in the target's is GDAL's to work out.
        let given = spec.extent.filter(|_| spec.extent_crs.is_none());
        Ok(adjusted_size(all, given, spec.size, spec.resolution))
    }

    /// Bytes per output pixel: one value of the output type (`dtype`, else
    /// each source band's own) per band of the first source, and one more
    /// band with `dst_alpha`.
    pub fn output_pixel_bytes(&self, dtype: Option<DataType>, dst_alpha: bool) -> u64 {
        let src = self.datasets()[0];
        let size = |b: &gdal::raster::RasterBand| {
            dtype
                .unwrap_or_else(|| DataType::of_gdal(b.band_type() as u32))
                .size_bytes()
        };
        let bands: u64 = (1..=src.raster_count())
            .filter_map(|i| src.rasterband(i).ok())
            .map(|b| size(&b))
            .sum();
        let alpha = match src.rasterband(1) {
            Ok(b) if dst_alpha => size(&b),
            _ => 0,
        };
        bands + alpha
    }

    /// `gdalwarp <spec> sources...` to a MEM dataset: the active
    /// accelerator's where it takes the warp (`accelerate`, one source),
    /// else `GDALWarp`'s. Band colour interpretation is copied across (the
    /// MEM route drops it; gdalwarp's output driver keeps it).
    pub fn warp(&self, spec: &WarpSpec, accelerate: bool) -> Result<(Raster, WarpedBy), WarpError> {
        let srcs = self.datasets();
        let accelerated = match accel::active() {
            Some(a) if accelerate && srcs.len() == 1 => a.warp(srcs[0], spec)?,
            _ => None,
        };
        let (out, by) = match accelerated {
            Some(done) => {
                if done.checks_skipped + done.checks_kept > 0 {
                    tracing::debug!(
                        "gdalwarp's inverse projection check proven to pass for {} points, run for {}",
                        done.checks_skipped,
                        done.checks_kept
                    );
                }
                match done.took {
                    Took::Accelerated => (done.output, WarpedBy::Accelerator),
                    Took::Gdal(why) => {
                        tracing::debug!("GDAL's resampling loop ({why})");
                        (done.output, WarpedBy::Gdal)
                    }
                }
            }
            None => {
                let options = WarpOptions::new(&spec.gdalwarp_args()).map_err(WarpError::from)?;
                (warp(&srcs, &options)?, WarpedBy::Gdal)
            }
        };
        let src = srcs[0];
        for i in 1..=out.raster_count().min(src.raster_count()) {
            if let (Ok(from), Ok(mut to)) = (src.rasterband(i), out.rasterband(i)) {
                let _ = to.set_color_interpretation(from.color_interpretation());
            }
        }
        Ok((Raster::in_memory(out), by))
    }

    /// `gdalwarp -of GTiff <spec> sources... FILE` to `file` on disk, in
    /// chunks of `warp_memory`; flushed, closed and opened again read-only
    /// as a raster that removes the file when dropped.
    pub fn warp_to_file(&self, spec: &WarpSpec, file: ScratchFile) -> Result<Raster, WarpError> {
        let c_path = std::ffi::CString::new(file.path().to_string_lossy().as_bytes())
            .map_err(|_| WarpError::Failed("the scratch path has a NUL byte".to_owned()))?;
        let options =
            WarpOptions::with_format(&spec.gdalwarp_args(), "GTiff").map_err(WarpError::from)?;
        let mut ds = warp_into(&self.datasets(), &options, c_path.as_c_str())?;
        // Blocks still in GDAL's cache are written now, so a full disk is
        // seen here, not when the raster is dropped.
        crate::flush(&mut ds).map_err(WarpError::Failed)?;
        drop(ds);
        let ds = reopen(file.path())
            .map_err(|e| WarpError::Failed(format!("cannot open the warped file again: {e}")))?;
        Ok(Raster::on_disk(ds, file))
    }
}

/// A warped GTiff opened again, read-only.
fn reopen(path: &Path) -> Result<Dataset, gdal::errors::GdalError> {
    Dataset::open_ex(
        path,
        gdal::DatasetOptions {
            open_flags: gdal::GdalOpenFlags::GDAL_OF_RASTER | gdal::GdalOpenFlags::GDAL_OF_READONLY,
            allowed_drivers: Some(&["GTiff"]),
            ..Default::default()
        },
    )
}

/// The view of `bands` of `raster`, if bands are selected.
fn view(raster: &Raster, bands: Option<&[usize]>) -> Result<Option<Dataset>, Error> {
    let Some(bands) = bands else {
        return Ok(None);
    };
    let count = raster.ds.raster_count();
    if let Some(bad) = bands.iter().find(|b| **b > count) {
        return Err(Error::Input(format!(
            "band {bad} selected, but the raster has {count} bands"
        )));
    }
    let args: Vec<String> = bands
        .iter()
        .flat_map(|b| ["-b".to_owned(), b.to_string()])
        .collect();
    vrt_view(&raster.ds, &args)
        .map(Some)
        .map_err(|m| Error::Gdal(format!("cannot select bands: {m}")))
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

/// The suggested output's size, adjusted for a given extent, size or
/// resolution as gdalwarp does.
fn adjusted_size(
    s: Suggested,
    extent: Option<[f64; 4]>,
    size: Option<(u32, u32)>,
    resolution: Option<(f64, f64)>,
) -> (u64, u64) {
    let gt = s.geo_transform;
    let ext = extent.unwrap_or(s.extent);
    let (w, h) = match (size, resolution) {
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
        (None, None) if extent.is_some() => (
            ((ext[2] - ext[0]) / gt[1].abs()).ceil(),
            ((ext[3] - ext[1]) / gt[5].abs()).ceil(),
        ),
        (None, None) => (f64::from(s.pixels), f64::from(s.lines)),
    };
    (w.max(1.0) as u64, h.max(1.0) as u64)
}
