//! The hook between `GDALWarpOperation` and warpline's loop: GDAL's
//! pre-warp chunk processor (`GDALWarpOptions::pfnPreWarpChunkProcessor`),
//! called for each chunk once GDAL has read the source window, built the
//! validity masks and initialised the destination, right before
//! `GDALWarpKernel::PerformWarp`. Where warpline's loop is proven equal to
//! the kernel GDAL would pick, it warps the chunk and leaves GDAL nothing
//! to do; everywhere else it touches nothing and GDAL warps as always.
//!
//! The chunk comes as a `GDALWarpKernel`, a C++ class: [`WarpKernel`]
//! mirrors its layout in GDAL 3.6 (gdalwarper.h), and is read only when
//! the running library is 3.6 ([`layout_known`]).

use std::ffi::c_void;

use gdal_sys as sys;

use super::bilinear::{Chunk, Sample, Sampler, Transform};
use super::downsample::Filter;

/// The fields of `GDALWarpKernel` (gdalwarper.h) the hook reads, field
/// for field, as GDAL 3.6 and 3.12 lay them out. In 3.6 they follow the
/// vtable pointer of its virtual destructor; in 3.12 the destructor is
/// not virtual and they start the object ([`fields_offset`]). 3.12 adds
/// fields after `vertical_shift_factor`, which the hook never reads.
#[repr(C)]
pub(super) struct WarpKernel {
    options: *mut *mut std::ffi::c_char,
    resample: sys::GDALResampleAlg::Type,
    working_type: sys::GDALDataType::Type,
    bands: i32,
    src_x_size: i32,
    src_y_size: i32,
    src_x_extra: f64,
    src_y_extra: f64,
    src_image: *mut *mut u8,
    band_src_valid: *mut *mut u32,
    unified_src_valid: *mut u32,
    unified_src_density: *mut f32,
    dst_x_size: i32,
    dst_y_size: i32,
    dst_image: *mut *mut u8,
    dst_valid: *mut u32,
    dst_density: *mut f32,
    x_scale: f64,
    y_scale: f64,
    x_filter: f64,
    y_filter: f64,
    x_radius: i32,
    y_radius: i32,
    filt_init_x: i32,
    filt_init_y: i32,
    src_x_off: i32,
    src_y_off: i32,
    dst_x_off: i32,
    dst_y_off: i32,
    transformer: sys::GDALTransformerFunc,
    transformer_arg: *mut c_void,
    progress: sys::GDALProgressFunc,
    progress_arg: *mut c_void,
    progress_base: f64,
    progress_scale: f64,
    dst_nodata: *mut f64,
    thread_data: *mut c_void,
    apply_vertical_shift: bool,
    vertical_shift_factor: f64,
}

/// Where [`WarpKernel`]'s fields start in a `GDALWarpKernel` of the GDAL
/// this process runs, for the versions it mirrors and warpline's loops
/// were proven against (3.6: after the vtable pointer; 3.12: at the
/// start); `None` for any other version.
pub(super) fn fields_offset() -> Option<usize> {
    let v = warpline_gdal::versions().gdal;
    match (v.major, v.minor) {
        (3, 6) => Some(std::mem::size_of::<*const c_void>()),
        (3, 12) => Some(0),
        _ => None,
    }
}

/// Whether [`fields_offset`] knows this GDAL.
pub(super) fn layout_known() -> bool {
    fields_offset().is_some()
}

/// Whether the GDAL this process runs is 3.6, the one every path of the
/// replica was proven against.
fn gdal_3_6() -> bool {
    fields_offset() == Some(std::mem::size_of::<*const c_void>())
}

/// Whether `GWKOverlayDensity` composes the destination density in
/// `f32`: GDAL 3.12 does (`1.0f - (1.0f - float(dfDensity)) * (1.0f -
/// pafDstDensity[i])`, 3.12.1 alg/gdalwarpkernel.cpp:1393-1402); 3.6
/// computes in `double` and rounds once. An alpha band is written from
/// that density, truncated (`GDALWarpDstAlphaMasker`), so the last bit
/// shows.
fn overlay_in_f32() -> bool {
    !gdal_3_6()
}

/// Whether GDAL's loops take a valid neighbour of an invalid source
/// pixel on the edge of the validity area (`edge.rs`): 3.12 does, 3.6
/// does not.
fn edge_neighbours() -> bool {
    !gdal_3_6()
}

/// Whether a coordinate transformation returns FALSE when any point of a
/// batch fails, not only when every one does: GDAL 3.12 does ("FALSE if
/// some or all points fail", 3.12.1 ogr/ogr_spatialref.h:814, each
/// `bRet = FALSE` of ogr/ogrct.cpp 2478-2863 beside a point set to
/// `HUGE_VAL`, and `GDALGenImgProjTransform` passes it on,
/// alg/gdaltransformer.cpp 3098-3181); 3.6 returns TRUE if some point
/// transforms. The limb shortcut returns what the checked transformer
/// would.
pub(super) fn fails_with_any_point() -> bool {
    !gdal_3_6()
}

/// Whether the replica's setup of a warp whose output edges do not round
/// trip (gdalwarp's inverse check, `limb.rs`) is this GDAL's: proven on
/// 3.6 and 3.12 (every geostationary tile of the mixed corpus, and the
/// limb tests, equal gdalwarp on each).
pub(crate) fn checked_warps_mirrored() -> bool {
    layout_known()
}

/// Whether the average loop keeps a weighted incremental mean of the
/// samples of positive weight, skips a footprint that misses the source
/// window and tests a footprint across the antimeridian at the pixel's
/// middle: GDAL 3.12 does (3.12.1 alg/gdalwarpkernel.cpp:7596-7640,
/// 6596-6680; `average.rs`), 3.6 sums and divides once.
fn mean_incremental() -> bool {
    !gdal_3_6()
}

/// What the hook did with a warp's chunks, and what it needs to know.
#[derive(Debug, Default)]
pub(super) struct Hook {
    /// The warp's band count and output size, to check that the kernel
    /// read through [`WarpKernel`] is the one meant.
    pub(super) bands: i32,
    pub(super) output: (i32, i32),
    /// Chunks warpline warped.
    pub(super) ours: u32,
    /// Chunks left to GDAL, and why (the last reason).
    pub(super) theirs: u32,
    pub(super) why: Option<&'static str>,
    /// A failure of warpline's loop (a bug: it panicked), said in the
    /// item's error instead of unwinding into GDAL.
    pub(super) failed: Option<String>,
}

#[cfg(test)]
thread_local! {
    /// Makes warpline's loop panic on this thread (for the test that a
    /// panic is an item's error, not an unwind through GDAL).
    pub(super) static PANIC_IN_LOOP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The pre-warp chunk processor. Never unwinds into GDAL.
pub(super) unsafe extern "C" fn pre_chunk(
    kernel: *mut c_void,
    arg: *mut c_void,
) -> sys::CPLErr::Type {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `arg` is our own `Hook`, alive for the whole warp (see
        // `super::warp`) and used by no one else during the call.
        let hook = unsafe { &mut *(arg as *mut Hook) };
        let Some(offset) = fields_offset() else {
            // Not installed on such a GDAL (`super::source_refusal`):
            // touch nothing of the kernel, GDAL warps.
            hook.theirs += 1;
            hook.why = Some("GDAL version");
            return;
        };
        // SAFETY: GDAL passes the `GDALWarpKernel` of the chunk (alive and
        // not used by anyone else during the call), whose fields the GDAL
        // running lays out as `WarpKernel` from `offset` (`fields_offset`).
        let wk = unsafe { &mut *(kernel.byte_add(offset) as *mut WarpKernel) };
        match refusal(wk, hook) {
            Some(why) => {
                hook.theirs += 1;
                hook.why = Some(why);
            }
            None => {
                #[cfg(test)]
                if PANIC_IN_LOOP.with(std::cell::Cell::get) {
                    panic!("a panic the test asked for");
                }
                // SAFETY: `refusal` checked the type and the buffers.
                unsafe { run(wk) };
                // GDAL's own "empty source window" case: PerformWarp
                // returns at once, the buffers are freed as usual.
                wk.src_x_size = 0;
                hook.ours += 1;
            }
        }
    }));
    match outcome {
        Ok(()) => sys::CPLErr::CE_None,
        Err(panic) => {
            // SAFETY: as above; the closure that held the reference is gone.
            let hook = unsafe { &mut *(arg as *mut Hook) };
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            hook.failed = Some(what);
            sys::CPLErr::CE_Failure
        }
    }
}

/// Why warpline's loop does not take this chunk (None: it does). Each
/// check is a condition under which `PerformWarp` would not run
/// `GWKRealCaseThread` (bilinear, cubic), one of its templated nearest
/// loops (`GWKNearestThread<T>`) or `GWKAverageOrModeThread` (average),
/// with masks.
fn refusal(wk: &WarpKernel, hook: &Hook) -> Option<&'static str> {
    use sys::GDALDataType::{
        GDT_Byte as BYTE, GDT_Float32 as F32, GDT_Float64 as F64, GDT_Int16 as I16,
        GDT_UInt16 as U16,
    };
    if !layout_matches(wk, hook) {
        return Some("unexpected kernel");
    }
    let near = wk.resample == sys::GDALResampleAlg::GRA_NearestNeighbour;
    let cubic = wk.resample == sys::GDALResampleAlg::GRA_Cubic;
    let average = wk.resample == sys::GDALResampleAlg::GRA_Average;
    if !near && !cubic && !average && wk.resample != sys::GDALResampleAlg::GRA_Bilinear {
        return Some("resampling");
    }
    let (xs, ys) = scales(wk);
    // GDAL's templated nearest loops take Byte, UInt16, Int16 and Float32;
    // its real case Float64 (for nearest too).
    let types_ok = matches!(wk.working_type, BYTE | U16 | I16 | F32 | F64);
    if !types_ok {
        return Some("data type");
    }
    if wk.band_src_valid.is_null()
        && wk.unified_src_valid.is_null()
        && wk.unified_src_density.is_null()
        && wk.dst_valid.is_null()
    {
        // GDAL's own fast path (no masks): left to it.
        return Some("no masks");
    }
    // GDAL's bilinear loop samples single-row windows as nearest.
    let small = if near || average { 1 } else { 2 };
    if wk.src_x_size < small || wk.src_y_size < small || wk.dst_x_size < 1 || wk.dst_y_size < 1 {
        return Some("window too small");
    }
    if wk.apply_vertical_shift {
        return Some("vertical shift");
    }
    for key in [
        "NUM_THREADS",
        "USE_GENERAL_CASE",
        "SRC_COORD_PRECISION",
        "XSCALE",
        "YSCALE",
        "USE_OPENCL",
        // GDAL 3.8+: values to skip as nodata, and the share of nodata
        // sources above which an average is nodata.
        "EXCLUDED_VALUES",
        "NODATA_VALUES_PCT_THRESHOLD",
    ] {
        if option(wk, key) {
            return Some("warp option");
        }
    }
    // Nearest takes no scale into account; the bilinear and cubic 4-sample
    // formulas apply from 0.95 up, their filter windows below
    // (`downsample.rs`); a scale from grid sampling is GDAL's to work out.
    if !near && ys / xs > 100.0 {
        return Some("scale from grid sampling");
    }
    if wk.transformer.is_none() {
        return Some("no transformer");
    }
    None
}

/// Whether what [`WarpKernel`] reads is the chunk of this warp: its band
/// count, buffers, the warp options (which name the `ERROR_THRESHOLD`
/// that `super::output` put there), a destination chunk inside the
/// output, and a known resampling method. A layout other than GDAL
/// 3.6's would fail these long before anything is written.
fn layout_matches(wk: &WarpKernel, hook: &Hook) -> bool {
    let (w, h) = hook.output;
    wk.bands == hook.bands
        && wk.bands >= 1
        && !wk.src_image.is_null()
        && !wk.dst_image.is_null()
        && !wk.options.is_null()
        && option(wk, "ERROR_THRESHOLD")
        && wk.dst_x_off >= 0
        && wk.dst_y_off >= 0
        && wk.dst_x_size >= 0
        && wk.dst_y_size >= 0
        && i64::from(wk.dst_x_off) + i64::from(wk.dst_x_size) <= i64::from(w)
        && i64::from(wk.dst_y_off) + i64::from(wk.dst_y_size) <= i64::from(h)
        && wk.src_x_off >= 0
        && wk.src_y_off >= 0
        && wk.resample <= sys::GDALResampleAlg::GRA_Sum
}

/// Whether the warp options name `key`.
fn option(wk: &WarpKernel, key: &str) -> bool {
    let Ok(k) = std::ffi::CString::new(key) else {
        return false;
    };
    // SAFETY: `options` is GDAL's NULL-terminated list (or NULL) for the
    // chunk; CSLFetchNameValue only reads it.
    !unsafe { sys::CSLFetchNameValue(wk.options, k.as_ptr()) }.is_null()
}

/// `PerformWarp`'s resampling scales (before its grid-sampling case).
fn scales(wk: &WarpKernel) -> (f64, f64) {
    let one = |dst: i32, src: i32, extra: f64| {
        let mut s = f64::from(dst) / (f64::from(src) - extra);
        if src >= dst && f64::from(src) <= f64::from(dst) + extra {
            s = 1.0;
        }
        if s < 1.0 {
            let r = 1.0 / s;
            let n = (r + 0.5) as i32;
            if (r - f64::from(n)).abs() < 0.05 {
                s = 1.0 / f64::from(n);
            }
        }
        s
    };
    (
        one(wk.dst_x_size, wk.src_x_size, wk.src_x_extra),
        one(wk.dst_y_size, wk.src_y_size, wk.src_y_extra),
    )
}

/// The kernel's transformer, called as GWK calls it.
struct KernelTransform {
    f: unsafe extern "C" fn(*mut c_void, i32, i32, *mut f64, *mut f64, *mut f64, *mut i32) -> i32,
    arg: *mut c_void,
}

impl Transform for KernelTransform {
    fn transform(&mut self, x: &mut [f64], y: &mut [f64], z: &mut [f64], ok: &mut [i32]) {
        let n = i32::try_from(x.len()).unwrap_or(i32::MAX);
        // SAFETY: four arrays of at least `n` elements, as GDAL's kernel
        // passes them; the transformer and its argument are the warp's.
        unsafe {
            (self.f)(
                self.arg,
                1,
                n,
                x.as_mut_ptr(),
                y.as_mut_ptr(),
                z.as_mut_ptr(),
                ok.as_mut_ptr(),
            )
        };
    }

    fn forward(&mut self, mut x: f64, mut y: f64) -> bool {
        let (mut z, mut ok) = (0f64, 0i32);
        // SAFETY: one point, out-pointers to locals; the transformer and
        // its argument are the warp's.
        unsafe { (self.f)(self.arg, 0, 1, &mut x, &mut y, &mut z, &mut ok) };
        ok != 0
    }
}

/// Warps the chunk with warpline's loop, for the kernel's working type.
///
/// # Safety
/// `wk` is a chunk GDAL prepared, accepted by [`refusal`].
unsafe fn run(wk: &mut WarpKernel) {
    use sys::GDALDataType::{
        GDT_Byte as BYTE, GDT_Float64 as F64, GDT_Int16 as I16, GDT_UInt16 as U16,
    };
    let mut tr = match wk.transformer {
        Some(f) => KernelTransform {
            f,
            arg: wk.transformer_arg,
        },
        None => return,
    };
    let (xs, ys) = scales(wk);
    if wk.resample == sys::GDALResampleAlg::GRA_Average {
        // SAFETY (each arm): as for `chunk`.
        match wk.working_type {
            BYTE => unsafe { chunk::<u8>(wk) }.run_average(&mut tr, (xs, ys)),
            U16 => unsafe { chunk::<u16>(wk) }.run_average(&mut tr, (xs, ys)),
            I16 => unsafe { chunk::<i16>(wk) }.run_average(&mut tr, (xs, ys)),
            F64 => unsafe { chunk::<f64>(wk) }.run_average(&mut tr, (xs, ys)),
            _ => unsafe { chunk::<f32>(wk) }.run_average(&mut tr, (xs, ys)),
        }
        return;
    }
    if wk.resample == sys::GDALResampleAlg::GRA_NearestNeighbour && wk.working_type == F64 {
        // GDAL's real case: no templated nearest loop for Float64.
        // SAFETY: as for `chunk`.
        unsafe { chunk::<f64>(wk) }.run(&mut tr);
        return;
    }
    if wk.resample == sys::GDALResampleAlg::GRA_NearestNeighbour {
        // SAFETY (each arm): as for `chunk`; GDAL's nearest loop reads
        // UInt16 as Int16 (GWKNearestShort), and so does this.
        match wk.working_type {
            BYTE => unsafe { chunk::<u8>(wk) }.run_nearest(&mut tr),
            U16 | I16 => unsafe { chunk::<i16>(wk) }.run_nearest(&mut tr),
            _ => unsafe { chunk::<f32>(wk) }.run_nearest(&mut tr),
        }
        return;
    }
    if xs >= 0.95 && ys >= 0.95 {
        // SAFETY (each arm): as for `chunk`.
        match wk.working_type {
            BYTE => unsafe { chunk::<u8>(wk) }.run(&mut tr),
            U16 => unsafe { chunk::<u16>(wk) }.run(&mut tr),
            I16 => unsafe { chunk::<i16>(wk) }.run(&mut tr),
            F64 => unsafe { chunk::<f64>(wk) }.run(&mut tr),
            _ => unsafe { chunk::<f32>(wk) }.run(&mut tr),
        }
        return;
    }
    let f = Filter::new((xs, ys), wk.resample == sys::GDALResampleAlg::GRA_Cubic);
    // SAFETY (each arm): as for `chunk`.
    match wk.working_type {
        BYTE => unsafe { chunk::<u8>(wk) }.run_scaled(&mut tr, f),
        U16 => unsafe { chunk::<u16>(wk) }.run_scaled(&mut tr, f),
        I16 => unsafe { chunk::<i16>(wk) }.run_scaled(&mut tr, f),
        F64 => unsafe { chunk::<f64>(wk) }.run_scaled(&mut tr, f),
        _ => unsafe { chunk::<f32>(wk) }.run_scaled(&mut tr, f),
    }
}

/// # Safety
/// `wk` is a chunk GDAL prepared whose working type is `T`: its buffers
/// have the sizes `GDALWarpOperation` allocates (source bands and source
/// masks with one extra element, bit masks rounded up to whole 32-bit
/// words), and nothing else reads or writes them during the call.
unsafe fn chunk<'a, T: Sample>(wk: &'a mut WarpKernel) -> Chunk<'a, T> {
    let (sw, sh) = (wk.src_x_size as usize, wk.src_y_size as usize);
    let (dw, dh) = (wk.dst_x_size as usize, wk.dst_y_size as usize);
    let bands = wk.bands as usize;
    let src_n = sw * sh + 1;
    let src_words = src_n.div_ceil(32);
    let dst_n = dw * dh;
    let dst_words = dst_n.div_ceil(32);
    // SAFETY: the sizes above are those GDAL allocated (CreateKernelMask,
    // WarpRegionToBuffer); every pointer is non-null where it is read.
    unsafe {
        let band_ptr = |p: *mut *mut u8, i: usize| *p.add(i);
        Chunk::<T> {
            src: (0..bands)
                .map(|i| std::slice::from_raw_parts(band_ptr(wk.src_image, i) as *const T, src_n))
                .collect(),
            band_valid: (!wk.band_src_valid.is_null()).then(|| {
                (0..bands)
                    .map(|i| {
                        let p = *wk.band_src_valid.add(i);
                        (!p.is_null())
                            .then(|| std::slice::from_raw_parts(p as *const u32, src_words))
                    })
                    .collect()
            }),
            unified_valid: (!wk.unified_src_valid.is_null())
                .then(|| std::slice::from_raw_parts(wk.unified_src_valid as *const u32, src_words)),
            unified_density: (!wk.unified_src_density.is_null())
                .then(|| std::slice::from_raw_parts(wk.unified_src_density as *const f32, src_n)),
            dst: (0..bands)
                .map(|i| std::slice::from_raw_parts_mut(band_ptr(wk.dst_image, i) as *mut T, dst_n))
                .collect(),
            dst_valid: (!wk.dst_valid.is_null())
                .then(|| std::slice::from_raw_parts_mut(wk.dst_valid, dst_words)),
            dst_density: (!wk.dst_density.is_null())
                .then(|| std::slice::from_raw_parts_mut(wk.dst_density, dst_n)),
            dst_nodata: (!wk.dst_nodata.is_null())
                .then(|| std::slice::from_raw_parts(wk.dst_nodata as *const f64, bands).to_vec()),
            overlay_f32: overlay_in_f32(),
            edge_neighbours: edge_neighbours(),
            edge: false,
            mean_incremental: mean_incremental(),
            src_size: (sw, sh),
            src_off: (wk.src_x_off, wk.src_y_off),
            dst_size: (dw, dh),
            dst_off: (wk.dst_x_off, wk.dst_y_off),
            sampler: match wk.resample {
                sys::GDALResampleAlg::GRA_Cubic => Sampler::Cubic,
                sys::GDALResampleAlg::GRA_NearestNeighbour => Sampler::Nearest,
                _ => Sampler::Bilinear,
            },
        }
    }
}
