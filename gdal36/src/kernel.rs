//! warpline's own resampling loop inside GDAL's warp.
//!
//! `gdalwarp` (GDAL 3.6.2, apps/gdalwarp_lib.cpp) is a series of C API
//! calls: suggest the output grid, create the output, set up the warp
//! options (bands, nodata, `INIT_DEST`, `SKIP_NOSOURCE`), wrap the
//! transformer in the approximating one, and let `GDALWarpOperation`
//! chunk the output, read each source window and build its masks. [`warp`]
//! makes the same calls in the same order, for the settings and inputs
//! [`Plan::from_spec`] and [`source_refusal`] accept, and adds two things.
//! One is a pre-warp chunk processor (`hook.rs`) where warpline's loops
//! (`bilinear.rs` with its 4-sample formula in `four.rs`, `downsample.rs`,
//! `cubic.rs`, `nearest.rs`, `average.rs`) warp the chunks they are
//! proven equal on. Everything else falls back: the stage then calls
//! `GDALWarp` as before. The other: the approximating transformer's base
//! is gdalwarp's transformer behind a function of warpline's, where that
//! saves GDAL work and provably changes nothing: `plain.rs` (GDAL then
//! does not transform the poles for each warp), `limb.rs` (the inverse
//! check, skipped where it passes).
//!
//! Proven means: every tile of the mixed real corpus and randomized
//! grids, CRS pairs and nodata patterns equal `gdalwarp` to the bit
//! (tests/all/fidelity/mixed.rs, `tests` here).

use std::ffi::CString;
use std::ptr;

use gdal::raster::GdalDataType;
use gdal::spatial_ref::SpatialRef;
use gdal::Dataset;
use gdal_sys as sys;

use warpline_gdal::ffi::{classify, last_error, reset_error, string_list};
use warpline_gdal::{Resampling, WarpError, WarpSpec};

mod average;
mod bilinear;
mod cubic;
mod downsample;
mod edge;
mod four;
mod hook;
mod limb;
#[cfg(test)]
pub(crate) use hook::checked_warps_mirrored;
pub(crate) use limb::Checks;
mod nearest;
mod plain;
mod sample;
#[cfg(test)]
pub(crate) mod tests;

/// What the reproject stage's settings ask of a warp, when the loop can
/// take it: `gdalwarp -t_srs S -r near|bilinear|cubic|average -et E -wm M
/// [-to AOI]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) dst_srs: String,
    /// `GRA_Bilinear`, `GRA_NearestNeighbour`, `GRA_Cubic` or `GRA_Average`.
    pub(crate) method: sys::GDALResampleAlg::Type,
    pub(crate) aoi: Option<String>,
    pub(crate) error_threshold: f64,
    pub(crate) warp_memory: f64,
}

impl Plan {
    /// The plan for a warp spec, or None when it asks for anything this
    /// replica of gdalwarp does not make (an extent, nodata, alpha, a
    /// cutline, another method...): every field but the target, the
    /// method, the error threshold, the warp memory and the shared area
    /// of interest must be gdalwarp's default.
    pub(crate) fn from_spec(s: &WarpSpec) -> Option<Plan> {
        let only_these = WarpSpec {
            resampling: s.resampling,
            error_threshold: s.error_threshold,
            warp_memory: s.warp_memory,
            area_of_interest: s.area_of_interest.clone(),
            ..WarpSpec::new(s.dst_crs.clone())
        };
        if *s != only_these {
            return None;
        }
        let et = s.error_threshold;
        // gdalwarp writes ERROR_THRESHOLD=%.16g: exact for these.
        let digits = format!("{et:e}")
            .split('e')
            .next()?
            .replace(['.', '-'], "")
            .len();
        let method = match s.resampling {
            Resampling::Bilinear => sys::GDALResampleAlg::GRA_Bilinear,
            Resampling::Near => sys::GDALResampleAlg::GRA_NearestNeighbour,
            Resampling::Cubic => sys::GDALResampleAlg::GRA_Cubic,
            Resampling::Average => sys::GDALResampleAlg::GRA_Average,
            _ => return None,
        };
        if et.is_nan() || et <= 0.0 || digits > 15 {
            return None;
        }
        Some(Plan {
            dst_srs: s.dst_crs.clone(),
            method,
            aoi: s.area_of_interest.clone(),
            error_threshold: et,
            warp_memory: s.warp_memory as f64,
        })
    }

    fn transformer_options(&self) -> Vec<String> {
        let mut to = vec![format!("DST_SRS={}", self.dst_srs)];
        to.extend(
            self.aoi
                .iter()
                .map(|a| a.trim_start_matches("-to ").to_owned()),
        );
        to
    }
}

/// Which loop warped an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Took {
    /// warpline's, every chunk.
    Ours,
    /// GDAL's (for some chunk), and why.
    Theirs(&'static str),
}

/// Why an input is not one [`warp`] replicates gdalwarp for (None: it
/// is). gdalwarp picks an overview, an alpha band, GCPs, RPCs or a
/// vertical shift for such inputs.
pub(crate) fn source_refusal(src: &Dataset, plan: &Plan) -> Option<&'static str> {
    if !hook::layout_known() {
        return Some("GDAL version");
    }
    let count = src.raster_count();
    let band = src.rasterband(1).ok()?;
    // SAFETY: a valid dataset handle, only read.
    let (gcps, rpc) = unsafe {
        (
            sys::GDALGetGCPCount(src.c_dataset()),
            sys::GDALGetMetadata(src.c_dataset() as sys::GDALMajorObjectH, c"RPC".as_ptr()),
        )
    };
    if count < 1 || src.geo_transform().is_err() || gcps > 0 {
        return Some("georeferencing");
    }
    if !rpc.is_null() {
        return Some("RPC");
    }
    if band.overview_count().unwrap_or(1) > 0 {
        return Some("overviews");
    }
    if has_alpha(src) && count < 2 {
        return Some("alpha band alone");
    }
    // Nothing invalid (no nodata, no mask, no alpha): GDAL warps with its
    // fast path, which this replica would only reach the long way.
    let all_valid = (1..=count).all(|i| {
        src.rasterband(i).is_ok_and(|b| {
            b.no_data_value().is_none() && b.mask_flags().is_ok_and(|f| f.is_all_valid())
        })
    });
    if all_valid && !has_alpha(src) {
        return Some("no invalid pixels");
    }
    // SAFETY: a valid band handle; the RAT (if any) stays GDAL's.
    if !unsafe { sys::GDALGetDefaultRAT(band.c_rasterband()) }.is_null() {
        return Some("attribute table");
    }
    let vertical = |s: &SpatialRef| {
        // SAFETY: a valid SRS handle, only read.
        s.is_compound() || unsafe { sys::OSRIsVertical(s.to_c_hsrs()) } != 0
    };
    match (
        src.spatial_ref(),
        SpatialRef::from_definition(&plan.dst_srs),
    ) {
        (Ok(a), Ok(b)) if !vertical(&a) && !vertical(&b) => None,
        _ => Some("CRS"),
    }
}

/// Whether the last band is an alpha band, which gdalwarp then takes as
/// the source's alpha (and gives the output one).
fn has_alpha(src: &Dataset) -> bool {
    src.rasterband(src.raster_count())
        .is_ok_and(|b| b.color_interpretation() == gdal::raster::ColorInterpretation::AlphaBand)
}

/// The source's bands as gdalwarp counts them: all of them, the ones it
/// warps (all but an alpha band), and whether the last is alpha (then
/// the source's and the output's alpha band is the last).
#[derive(Debug, Clone, Copy)]
struct Bands {
    count: usize,
    warped: usize,
    alpha: bool,
}

impl Bands {
    fn of(src: &Dataset) -> Bands {
        let count = src.raster_count();
        let alpha = has_alpha(src);
        Bands {
            count,
            warped: if alpha { count - 1 } else { count },
            alpha,
        }
    }
}

/// `gdalwarp` of `src` with `plan` to a new MEM dataset, with warpline's
/// loop where it is proven; which loop ran is returned with it, and how
/// many points skipped gdalwarp's inverse check (`limb.rs`).
pub(crate) fn warp(src: &Dataset, plan: &Plan) -> Result<Warp, WarpError> {
    match warp_with(src, plan, true)? {
        Warp::Again => {}
        done => return Ok(done),
    }
    // A point far off the source raster: GDAL's own base could have
    // retried a source window (`plain.rs`), so warp with it.
    #[cfg(test)]
    AGAIN.with(|n| n.set(n.get() + 1));
    match warp_with(src, plan, false)? {
        Warp::Again => Err(WarpError::Failed(
            "the warp without the plain base asked for itself again".to_owned(),
        )),
        done => Ok(done),
    }
}

#[cfg(test)]
thread_local! {
    /// Warps done again with GDAL's base on this thread.
    pub(super) static AGAIN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// What a warp gives.
pub(crate) enum Warp {
    /// The output, which loop ran, the inverse checks.
    Done(Dataset, Took, Checks),
    /// To be done again without the plain base (never without
    /// `allow_plain`).
    Again,
    /// Not this replica's to do (why): GDAL's `GDALWarp` does it.
    Refused(&'static str),
}

#[cfg(test)]
impl Warp {
    /// The output of a warp that must have been done (`what` it was).
    pub(crate) fn done(self, what: &str) -> (Dataset, Took, Checks) {
        match self {
            Warp::Done(output, took, checks) => (output, took, checks),
            Warp::Again => panic!("{what}: asked for itself again"),
            Warp::Refused(why) => panic!("{what}: refused ({why})"),
        }
    }
}

/// [`warp`], with the plain base (`plain.rs`) where it applies if
/// `allow_plain`.
fn warp_with(src: &Dataset, plan: &Plan, allow_plain: bool) -> Result<Warp, WarpError> {
    let gen = Transformer::new(src, &plan.transformer_options())?;
    let (gt, pixels, lines, checked) = output_grid(src, &gen)?;
    if checked && !hook::checked_warps_mirrored() {
        // An output whose edges do not round trip (a geostationary
        // disk's limb), on a GDAL whose setup of it is not mirrored.
        return Ok(Warp::Refused("inverse check"));
    }
    let bands = Bands::of(src);
    let dst = create_output(src, plan, gt, (pixels, lines), bands)?;
    // SAFETY: `gen` is a GenImgProj transformer; `gt` six doubles.
    unsafe { sys::GDALSetGenImgProjTransformerDstGeoTransform(gen.0, gt.as_ptr()) };
    let grid = (gt, (pixels, lines));
    let (approx, base) = approximate(src, plan, gen, grid, checked, allow_plain)?;
    let nodata = setup_nodata(src, &dst, bands);
    let mut hook = hook::Hook {
        bands: i32::try_from(bands.warped).unwrap_or(0),
        output: (pixels, lines),
        ..hook::Hook::default()
    };
    let options = WarpSetup::new(src, &dst, plan, &approx, bands, &nodata, &mut hook)?;
    reset_error();
    // SAFETY: `options` is complete (bands, nodata, transformer, the
    // hook and its argument, alive until the operation is destroyed).
    let err = unsafe {
        let op = sys::GDALCreateWarpOperation(options.0);
        if op.is_null() {
            return Err(WarpError::Failed(last_error("cannot set up the warp")));
        }
        let err = sys::GDALChunkAndWarpImage(op, 0, 0, pixels, lines);
        sys::GDALDestroyWarpOperation(op);
        err
    };
    drop(options);
    drop(approx);
    if let Base::Plain(p) = &base {
        if p.met_far() {
            return Ok(Warp::Again);
        }
    }
    if let Some(what) = hook.failed.take() {
        return Err(WarpError::Failed(format!(
            "warpline's resampling loop failed ({what}); kernel = \"gdal\" warps with GDAL's"
        )));
    }
    if err != sys::CPLErr::CE_None {
        // SAFETY: reads this thread's last error number.
        let number = unsafe { sys::CPLGetLastErrorNo() };
        return Err(classify(number, last_error("the warp failed")));
    }
    let mut dst = dst;
    dst.flush_cache().map_err(|e| {
        WarpError::Failed(warpline_gdal::ffi::error_message(
            e,
            "cannot flush the output",
        ))
    })?;
    let took = match (hook.ours, hook.theirs) {
        (n, 0) if n > 0 => Took::Ours,
        _ => Took::Theirs(hook.why.unwrap_or("no chunk")),
    };
    let checks = match &base {
        Base::Limb(s) => s.counts(),
        _ => Checks::default(),
    };
    Ok(Warp::Done(dst, took, checks))
}

/// The approximating transformer's base, when it is not gdalwarp's
/// transformer itself: it must outlive the approximating transformer.
enum Base {
    Gdal,
    Limb(Box<limb::Shortcut>),
    Plain(Box<plain::Plain>),
}

/// The warp's approximating transformer over gdalwarp's (`gen`): when
/// `gen` checks each point with the inverse projection and [`limb`]
/// applies, over the shortcut that skips the check where it surely
/// passes; else, if `allow_plain` and where it applies, over
/// [`plain::Plain`].
fn approximate(
    src: &Dataset,
    plan: &Plan,
    gen: Transformer,
    (gt, size): ([f64; 6], (i32, i32)),
    checked: bool,
    allow_plain: bool,
) -> Result<(Transformer, Base), WarpError> {
    let geometry = checked.then(|| limb::Geometry::of(src, plan, gt)).flatten();
    let Some(geometry) = geometry else {
        let p = match allow_plain {
            true => plain::Plain::new(src, plan, gen, size, checked),
            false => Err(gen),
        };
        return match p {
            Ok(p) => {
                let arg = &*p as *const plain::Plain as *mut std::ffi::c_void;
                let a = over(plain::transform, arg, plan)?;
                Ok((a, Base::Plain(p)))
            }
            Err(gen) => Ok((gen.approximate(plan.error_threshold)?, Base::Gdal)),
        };
    };
    // Made as gdalwarp made `gen`, with the option now unset: no check.
    let plain = Transformer::new(src, &plan.transformer_options())?;
    // SAFETY: `plain` is a GenImgProj transformer; `gt` six doubles.
    unsafe { sys::GDALSetGenImgProjTransformerDstGeoTransform(plain.0, gt.as_ptr()) };
    let shortcut = Box::new(limb::Shortcut::new(gen, plain, geometry));
    if !shortcut.agrees(size) {
        let limb::Shortcut { checked, .. } = *shortcut;
        return Ok((checked.approximate(plan.error_threshold)?, Base::Gdal));
    }
    let arg = &*shortcut as *const limb::Shortcut as *mut std::ffi::c_void;
    Ok((over(limb::transform, arg, plan)?, Base::Limb(shortcut)))
}

/// A base transformer of warpline's.
type BaseFn = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    i32,
    i32,
    *mut f64,
    *mut f64,
    *mut f64,
    *mut i32,
) -> i32;

/// The approximating transformer over `f` and `arg`, which it does not
/// own: the caller keeps `arg` alive (boxed, its address fixed) as long.
fn over(f: BaseFn, arg: *mut std::ffi::c_void, plan: &Plan) -> Result<Transformer, WarpError> {
    // SAFETY: `f` takes `arg` as the caller promises; the approximating
    // transformer only calls it.
    let a = unsafe { sys::GDALCreateApproxTransformer(Some(f), arg, plan.error_threshold) };
    if a.is_null() {
        return Err(WarpError::Failed(last_error(
            "cannot approximate the transformer",
        )));
    }
    Ok(Transformer(a))
}

/// A configuration option as GDAL reads it (None: unset).
fn config(key: &str) -> Option<String> {
    let key = std::ffi::CString::new(key).ok()?;
    // SAFETY: reads an option; the pointer is GDAL's, copied at once.
    let p = unsafe { sys::CPLGetConfigOption(key.as_ptr(), std::ptr::null()) };
    // SAFETY: a NUL-terminated string GDAL owns, when not null.
    (!p.is_null()).then(|| {
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    })
}

/// Whether GDAL runs as warpline's own bases (`limb.rs`, `plain.rs`) are
/// proven for: in one warp thread (`GDAL_NUM_THREADS` unset or 1; several
/// would clone the transformer, which GDAL cannot do for a base of
/// warpline's), and with none of the options that change how a
/// transformation is made or checked set: `THRESHOLD`,
/// `OGR_CT_OP_SELECTION`, `OSR_USE_APPROX_TMERC` (each module says why
/// they matter to it).
fn default_config() -> bool {
    let unset = ["THRESHOLD", "OGR_CT_OP_SELECTION", "OSR_USE_APPROX_TMERC"];
    config("GDAL_NUM_THREADS").is_none_or(|n| n.trim() == "1")
        && unset.iter().all(|k| config(k).is_none())
}

/// A GDAL transformer, destroyed on drop.
struct Transformer(*mut std::ffi::c_void);

impl Drop for Transformer {
    fn drop(&mut self) {
        // SAFETY: made by GDAL, destroyed once.
        unsafe { sys::GDALDestroyTransformer(self.0) };
    }
}

impl Transformer {
    /// `GDALCreateGenImgProjTransformer2(src, NULL, to)`, as gdalwarp's
    /// output creation makes the one it then warps with.
    fn new(src: &Dataset, to: &[String]) -> Result<Self, WarpError> {
        let to = string_list(to).map_err(WarpError::from)?;
        reset_error();
        // SAFETY: valid dataset; a NULL-terminated list, only read.
        let t = unsafe {
            sys::GDALCreateGenImgProjTransformer2(src.c_dataset(), ptr::null_mut(), to.as_ptr())
        };
        if t.is_null() {
            return Err(WarpError::Failed(last_error(
                "no transformation to the target CRS",
            )));
        }
        Ok(Transformer(t))
    }

    /// The approximating transformer over this one (which it then owns).
    fn approximate(self, error: f64) -> Result<Transformer, WarpError> {
        // SAFETY: `self.0` is a GenImgProj transformer; the approximating
        // one takes ownership of it (OwnsSubtransformer), so `self` must
        // not destroy it again.
        let a = unsafe {
            sys::GDALCreateApproxTransformer(Some(sys::GDALGenImgProjTransform), self.0, error)
        };
        if a.is_null() {
            return Err(WarpError::Failed(last_error(
                "cannot approximate the transformer",
            )));
        }
        // SAFETY: `a` was just made over `self.0`.
        unsafe { sys::GDALApproxTransformerOwnsSubtransformer(a, 1) };
        std::mem::forget(self);
        Ok(Transformer(a))
    }

    /// One point through the GenImgProj transformer.
    fn point(&self, inverse: bool, x: &mut f64, y: &mut f64) -> bool {
        let (mut z, mut ok) = (0f64, 0i32);
        // SAFETY: one point, out-pointers to locals.
        let r = unsafe {
            sys::GDALGenImgProjTransform(self.0, i32::from(inverse), 1, x, y, &mut z, &mut ok)
        };
        r != 0 && ok != 0
    }

    fn suggest(&self, src: &Dataset) -> Result<([f64; 6], i32, i32, [f64; 4]), WarpError> {
        let (mut gt, mut ext) = ([0f64; 6], [0f64; 4]);
        let (mut px, mut ln) = (0, 0);
        // SAFETY: valid dataset and transformer; out-pointers to locals.
        let err = unsafe {
            sys::GDALSuggestedWarpOutput2(
                src.c_dataset(),
                Some(sys::GDALGenImgProjTransform),
                self.0,
                gt.as_mut_ptr(),
                &mut px,
                &mut ln,
                ext.as_mut_ptr(),
                0,
            )
        };
        if err != sys::CPLErr::CE_None {
            return Err(WarpError::Failed(last_error(
                "cannot work out the output of the warp",
            )));
        }
        Ok((gt, px, ln, ext))
    }
}

/// The output's geotransform and size, as `GDALWarpCreateOutput` works
/// them out for one source and no `-te`/`-tr`/`-ts`: the suggestion, again
/// with `CHECK_WITH_INVERT_PROJ` when the suggested edges do not round
/// trip (which leaves the option in the transformer the warp then uses:
/// the last value returned says so).
fn output_grid(src: &Dataset, gen: &Transformer) -> Result<([f64; 6], i32, i32, bool), WarpError> {
    let (mut gt, px, ln, mut ext) = gen.suggest(src)?;
    let key = c"CHECK_WITH_INVERT_PROJ";
    // SAFETY: reads a configuration option (a pointer GDAL owns).
    let set = !unsafe { sys::CPLGetConfigOption(key.as_ptr(), ptr::null()) }.is_null();
    let retry = !set && !round_trips(gen, ext, px, ln);
    if retry {
        // SAFETY: thread-local options, set and cleared around one call.
        unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), c"TRUE".as_ptr()) };
        let again = gen.suggest(src);
        // SAFETY: as above.
        unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), ptr::null()) };
        (gt, _, _, ext) = again?;
    }
    let (rx, ry) = (gt[1], gt[5].abs());
    let pixels = ((ext[2] - ext[0]) / rx + 0.5) as i32;
    let lines = ((ext[3] - ext[1]) / ry + 0.5) as i32;
    Ok(([ext[0], rx, 0.0, ext[3], 0.0, -ry], pixels, lines, retry))
}

/// gdalwarp's check that the suggested edges lie in the target
/// projection's domain: 21 x 21 points, target to source and back.
fn round_trips(gen: &Transformer, ext: [f64; 4], px: i32, ln: i32) -> bool {
    let [mut min_x, mut min_y, mut max_x, mut max_y] = ext;
    if min_x == -180.0 {
        min_x += 1e-6;
    }
    if max_x == 180.0 {
        max_x -= 1e-6;
    }
    if min_y == -90.0 {
        min_y += 1e-6;
    }
    if max_y == 90.0 {
        max_y -= 1e-6;
    }
    const STEPS: i32 = 20;
    for i in 0..=STEPS {
        for j in 0..=STEPS {
            let (ri, rj) = (
                f64::from(i) * 1.0 / f64::from(STEPS),
                f64::from(j) * 1.0 / f64::from(STEPS),
            );
            let ex = (1.0 - ri) * min_x + ri * max_x;
            let ey = (1.0 - rj) * min_y + rj * max_y;
            let (mut x, mut y) = (ex, ey);
            if !gen.point(true, &mut x, &mut y) || !gen.point(false, &mut x, &mut y) {
                return false;
            }
            if (x - ex).abs() > (max_x - min_x) / f64::from(px)
                || (y - ey).abs() > (max_y - min_y) / f64::from(ln)
            {
                return false;
            }
        }
    }
    true
}

mod output;
use output::{create_output, setup_nodata, WarpSetup};

/// The band type gdalwarp gives the output: band 1's.
fn band_type(src: &Dataset) -> sys::GDALDataType::Type {
    src.rasterband(1)
        .map(|b| b.band_type() as sys::GDALDataType::Type)
        .unwrap_or(GdalDataType::Unknown as sys::GDALDataType::Type)
}

/// A C string of `s`, or the warp's error.
fn c_string(s: &str) -> Result<CString, WarpError> {
    CString::new(s).map_err(|_| WarpError::Failed(format!("{s:?} contains a NUL byte")))
}
