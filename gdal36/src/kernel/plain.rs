//! gdalwarp's transformer behind warpline's own function pointer, so that
//! GDAL does not look for the poles.
//!
//! Each `GDALWarpOperation` (GDAL 3.6.2, alg/gdalwarpoperation.cpp,
//! `Initialize`) transforms the two poles (longitude 0, latitude
//! ±89.9999) to the output, and samples a chunk's source window on a grid
//! when one of them lands inside it. For a projected source it makes a
//! coordinate transformation from the source's geographic CRS to the
//! source CRS for each pole
//! (`GDALTransformLonLatToDestGenImgProjTransformer`) and deletes it
//! without handing it to GDAL's cache of transformations. For a CRS PROJ
//! looks for by its name in its database (a GeoTIFF's own "UTM Zone 18,
//! Northern Hemisphere", on a datum without a code) each of the two takes
//! a database search: 15 ms a pole on this machine, about half of what
//! the reproject stage spends on such a tile.
//!
//! GDAL does that only when the approximating transformer's base is
//! `GDALGenImgProjTransform`. [`Plain`] is another base: [`transform`]
//! passes every batch on to gdalwarp's transformer unchanged, so every
//! point comes out as before. It is used only where the other things GDAL
//! reads from the base's type come out as they would:
//!
//! - the poles: warpline transforms them itself, with the same
//!   transformation (which GDAL's cache keeps between warps), and uses
//!   `Plain` only when both lie more than a pixel outside the output (or
//!   neither can be transformed: then GDAL adds neither either, but
//!   `Plain` is not used);
//! - a translation by whole pixels (GDAL's copy without resampling) and
//!   an affine transformer without rotation: never with a reprojection,
//!   and `Plain` is used only for a projected source in a CRS not the
//!   target's, so GDAL's transformer reprojects;
//! - a chunk's source window retried with `CHECK_WITH_INVERT_PROJ`, which
//!   GDAL does when every sample lands and one lands more than a million
//!   pixels off the raster: the retry would refresh GDAL's transformer but
//!   not `Plain`. `Plain` is not used when the transformer already checks
//!   each point (the output's edges did not round trip), and it notes any
//!   point it gives that far; a warp that met one is done again with
//!   GDAL's base (the approximating transformer's points lie between
//!   points its base gave, so no sample lands farther than those);
//! - several warp threads clone the transformer, which GDAL cannot do for
//!   this one: `Plain` is not used then;
//! - warpline's pole transformation comes from GDAL's cache, whose key
//!   leaves out options a transformation reads when it is made
//!   (`THRESHOLD`, `OGR_CT_OP_SELECTION`, `OSR_USE_APPROX_TMERC`): `Plain`
//!   is not used when one is set.
//!
//! A test warps web mercator's top band to polar stereographic, where the
//! north pole lies inside the output: over `Plain` without the pole test
//! 100 of its pixels would differ from gdalwarp's.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use gdal::spatial_ref::{AxisMappingStrategy, SpatialRef};
use gdal::Dataset;
use gdal_sys as sys;

use super::{default_config, string_list, Plan, Transformer};

/// How far outside the output a pole must land (pixels): far above the
/// rounding of warpline's path to it against GDAL's.
const POLE_MARGIN: f64 = 1.0;
/// How far off the source raster a source point makes GDAL retry a
/// chunk's window with the check (pixels), as GDAL 3.6 writes it.
const FAR: f64 = 1e6;

#[cfg(test)]
thread_local! {
    /// Warps that took [`Plain`] on this thread.
    pub(super) static TOOK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// How far off the raster a point counts as far in new [`Plain`]s.
    pub(super) static FAR_AT: std::cell::Cell<f64> = const { std::cell::Cell::new(FAR) };
}

/// gdalwarp's transformer as the approximating transformer's base.
pub(super) struct Plain {
    gen: Transformer,
    /// The source raster's size in pixels and lines, and how far off it
    /// a point counts as far ([`FAR`]; less in tests).
    size: (f64, f64),
    far_at: f64,
    /// Whether any point landed [`FAR`] off the source raster.
    far: AtomicBool,
}

impl Plain {
    /// `gen` (gdalwarp's transformer, with the output's geotransform) as a
    /// plain base for the output of `output` pixels and lines, or `gen`
    /// back when GDAL's own base could warp otherwise (module docs).
    pub(super) fn new(
        src: &Dataset,
        plan: &Plan,
        gen: Transformer,
        output: (i32, i32),
        checked: bool,
    ) -> Result<Box<Plain>, Transformer> {
        // The options `default_config` reads are ones a transformation
        // reads when made and GDAL's cache key leaves out: a pole
        // transformation kept from an earlier warp could differ.
        if checked
            || !default_config()
            || !src
                .spatial_ref()
                .is_ok_and(|srs| reprojects(&srs, plan) && poles_outside(src, &srs, &gen, output))
        {
            return Err(gen);
        }
        let (w, h) = src.raster_size();
        #[cfg(test)]
        TOOK.with(|n| n.set(n.get() + 1));
        Ok(Box::new(Plain {
            gen,
            size: (w as f64, h as f64),
            #[cfg(not(test))]
            far_at: FAR,
            #[cfg(test)]
            far_at: FAR_AT.with(std::cell::Cell::get),
            far: AtomicBool::new(false),
        }))
    }

    /// Whether the warp met a point that could make GDAL retry a source
    /// window with the check: then it must be done again with GDAL's base.
    pub(super) fn met_far(&self) -> bool {
        self.far.load(Relaxed)
    }
}

/// Whether the source CRS is projected and not the target's: GDAL's
/// transformer then reprojects. GDAL compares the two with their axis
/// orders; ignoring them here can only find more pairs the same.
fn reprojects(s: &SpatialRef, plan: &Plan) -> bool {
    let Ok(d) = SpatialRef::from_definition(&plan.dst_srs) else {
        return false;
    };
    if !s.is_projected() {
        return false;
    }
    let Ok(options) = string_list(&["IGNORE_DATA_AXIS_TO_SRS_AXIS_MAPPING=YES"]) else {
        return false;
    };
    // SAFETY: two valid SRS handles and a NULL-terminated list, only read.
    unsafe {
        sys::OSRIsSameEx(
            s.to_c_hsrs(),
            d.to_c_hsrs(),
            options.as_ptr() as *const *const std::ffi::c_char,
        ) == 0
    }
}

/// Whether both poles land more than [`POLE_MARGIN`] outside the output,
/// transformed as GDAL transforms them: from the source's geographic CRS
/// (traditional axis order) to the source CRS, made with
/// `CHECK_WITH_INVERT_PROJ` on, then by the reprojection to the output's
/// pixels (here through the source's pixels, which GDAL skips).
fn poles_outside(src: &Dataset, srs: &SpatialRef, gen: &Transformer, (w, h): (i32, i32)) -> bool {
    let Ok(mut geog) = srs.geog_cs() else {
        return false;
    };
    geog.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
    let Ok(gt) = src.geo_transform() else {
        return false;
    };
    let mut inv = [0f64; 6];
    let mut gt_c = gt;
    // SAFETY: six doubles in, six out.
    if unsafe { sys::GDALInvGeoTransform(gt_c.as_mut_ptr(), inv.as_mut_ptr()) } == 0 {
        return false;
    }
    let _quiet = Quiet::new();
    let ct = {
        let _check = Check::on();
        // SAFETY: two valid SRS handles, only read; the transformation
        // made is destroyed by `Ct`'s drop (into GDAL's cache).
        Ct(unsafe { sys::OCTNewCoordinateTransformation(geog.to_c_hsrs(), srs.to_c_hsrs()) })
    };
    if ct.0.is_null() {
        return false;
    }
    let (w, h) = (f64::from(w), f64::from(h));
    [-89.9999f64, 89.9999].iter().all(|&lat| {
        let (mut x, mut y) = (0.0f64, lat);
        // SAFETY: a valid transformation; one point, no z.
        if unsafe { sys::OCTTransform(ct.0, 1, &mut x, &mut y, std::ptr::null_mut()) } == 0 {
            return false;
        }
        let mut px = inv[0] + x * inv[1] + y * inv[2];
        let mut py = inv[3] + x * inv[4] + y * inv[5];
        if !gen.point(false, &mut px, &mut py) || !px.is_finite() || !py.is_finite() {
            return false;
        }
        let m = POLE_MARGIN;
        px < -m || px > w + m || py < -m || py > h + m
    })
}

/// `CHECK_WITH_INVERT_PROJ` on in this thread while it lives, as GDAL
/// sets it around the poles' transformation (and clears it after, unless
/// it was on before).
struct Check {
    set: bool,
}

impl Check {
    fn on() -> Check {
        // As GDAL reads it (`GetCurrentCheckWithInvertPROJ`).
        // SAFETY: reads an option; CPLTestBool reads the string GDAL owns.
        let on =
            unsafe { sys::CPLTestBool(sys::CPLGetConfigOption(CHECK.as_ptr(), c"NO".as_ptr())) };
        if !on {
            // SAFETY: a thread-local option, cleared by drop.
            unsafe { sys::CPLSetThreadLocalConfigOption(CHECK.as_ptr(), c"YES".as_ptr()) };
        }
        Check { set: !on }
    }
}

impl Drop for Check {
    fn drop(&mut self) {
        if self.set {
            // SAFETY: clears the thread-local option `on` set.
            unsafe { sys::CPLSetThreadLocalConfigOption(CHECK.as_ptr(), std::ptr::null()) };
        }
    }
}

const CHECK: &std::ffi::CStr = c"CHECK_WITH_INVERT_PROJ";

/// A coordinate transformation of GDAL's, destroyed on drop (which hands
/// it to GDAL's cache, where the next warp's finds it).
struct Ct(sys::OGRCoordinateTransformationH);

impl Drop for Ct {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: made by OCTNewCoordinateTransformation, destroyed once.
            unsafe { sys::OCTDestroyCoordinateTransformation(self.0) };
        }
    }
}

/// GDAL's messages silenced on this thread while it lives (a pole that
/// does not transform is no news: GDAL's own try emits nothing either).
struct Quiet;

impl Quiet {
    fn new() -> Quiet {
        // SAFETY: pushes GDAL's own quiet handler; popped on drop.
        unsafe { sys::CPLPushErrorHandler(Some(sys::CPLQuietErrorHandler)) };
        Quiet
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        // SAFETY: pops the handler `new` pushed, on the same thread.
        unsafe { sys::CPLPopErrorHandler() };
    }
}

/// [`Plain`] as a `GDALTransformerFunc`: gdalwarp's transformer, and a
/// note of any source point [`FAR`] off the raster.
///
/// # Safety
/// `arg` is a live [`Plain`]; the arrays hold `n` elements each.
pub(super) unsafe extern "C" fn transform(
    arg: *mut c_void,
    dst_to_src: i32,
    n: i32,
    x: *mut f64,
    y: *mut f64,
    z: *mut f64,
    ok: *mut i32,
) -> i32 {
    // SAFETY: as the function's contract says.
    let p = unsafe { &*(arg as *const Plain) };
    // SAFETY: gdalwarp's transformer takes the same arguments.
    let r = unsafe { sys::GDALGenImgProjTransform(p.gen.0, dst_to_src, n, x, y, z, ok) };
    let len = usize::try_from(n).unwrap_or(0);
    if dst_to_src != 0 && len > 0 && !x.is_null() && !y.is_null() && !ok.is_null() {
        // SAFETY: three arrays of `n` elements, GDAL's for this call.
        let (x, y, ok) = unsafe {
            (
                std::slice::from_raw_parts(x, len),
                std::slice::from_raw_parts(y, len),
                std::slice::from_raw_parts(ok, len),
            )
        };
        let ((w, h), d) = (p.size, p.far_at);
        let far = (0..len)
            .any(|i| ok[i] != 0 && (x[i] < -d || y[i] < -d || x[i] > w + d || y[i] > h + d));
        if far {
            p.far.store(true, Relaxed);
        }
    }
    r
}

#[cfg(test)]
pub(super) mod tests;
