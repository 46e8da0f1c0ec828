//! The output dataset and the warp options, as gdalwarp 3.6.2 sets them up
//! for one source with no nodata, alpha or metadata arguments
//! (`GDALWarpCreateOutput`, `ProcessMetadata`, `SetupNoData`,
//! `SetupSkipNoSource` in apps/gdalwarp_lib.cpp).

use std::ffi::{c_char, CStr};
use std::ptr;

use gdal::spatial_ref::{AxisMappingStrategy, SpatialRef};
use gdal::Dataset;
use gdal_sys as sys;

use super::hook::{pre_chunk, Hook};
use super::{band_type, c_string, Bands, Plan, Transformer};
use warpline_gdal::ffi::{last_error, reset_error};
use warpline_gdal::WarpError;

/// gdalwarp's placeholder source nodata for a band that has none while
/// another band has one.
const NO_NODATA: f64 = -123456.789;

/// A new MEM dataset of the output grid, with what gdalwarp gives it:
/// band 1's type, the target CRS (as `SetFromUserInput` reads it, in GIS
/// axis order), the geotransform, band 1's colour table, each band's
/// scale and offset, and the source's metadata.
pub(super) fn create_output(
    src: &Dataset,
    plan: &Plan,
    gt: [f64; 6],
    (pixels, lines): (i32, i32),
    bands: Bands,
) -> Result<Dataset, WarpError> {
    let count = bands.count;
    let mem = c_string("MEM")?;
    reset_error();
    // SAFETY: a driver lookup; NULL checked.
    let driver = unsafe { sys::GDALGetDriverByName(mem.as_ptr()) };
    if driver.is_null() {
        return Err(WarpError::Failed("no MEM driver".into()));
    }
    let n = i32::try_from(count).unwrap_or(0);
    // SAFETY: valid driver, an empty name, no options; NULL checked, and
    // the new dataset is wrapped at once (closed on drop).
    let mut dst = unsafe {
        let h = sys::GDALCreate(
            driver,
            c"".as_ptr(),
            pixels,
            lines,
            n,
            band_type(src),
            ptr::null_mut(),
        );
        if h.is_null() {
            return Err(WarpError::Failed(last_error("cannot create the output")));
        }
        Dataset::from_c_dataset(h)
    };
    let mut srs = SpatialRef::from_definition(&plan.dst_srs)
        .map_err(|e| WarpError::Failed(warpline_gdal::ffi::error_message(e, "bad target CRS")))?;
    srs.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
    // SAFETY: valid SRS handles, only read (the source's may be NULL).
    unsafe {
        if sys::OSRIsDynamic(srs.to_c_hsrs()) != 0 {
            let s = sys::GDALGetSpatialRef(src.c_dataset());
            let epoch = if s.is_null() {
                0.0
            } else {
                sys::OSRGetCoordinateEpoch(s)
            };
            if epoch > 0.0 {
                sys::OSRSetCoordinateEpoch(srs.to_c_hsrs(), epoch);
            }
        }
    }
    let failed = |e| {
        WarpError::Failed(warpline_gdal::ffi::error_message(
            e,
            "cannot set up the output",
        ))
    };
    dst.set_spatial_ref(&srs).map_err(failed)?;
    dst.set_geo_transform(&gt).map_err(failed)?;
    copy_band_info(src, &mut dst, bands);
    if bands.alpha {
        if let Ok(mut b) = dst.rasterband(count) {
            let _ = b.set_color_interpretation(gdal::raster::ColorInterpretation::AlphaBand);
        }
    }
    // An output with an alpha band keeps no NODATA_VALUES.
    let skip: &[&str] = if bands.alpha {
        &["CACHE_PATH=", "NODATA_VALUES="]
    } else {
        &["CACHE_PATH="]
    };
    copy_metadata(
        src.c_dataset() as sys::GDALMajorObjectH,
        dst.c_dataset() as sys::GDALMajorObjectH,
        skip,
    );
    Ok(dst)
}

/// Colour table (band 1), scale, offset, band metadata, description
/// and unit, as gdalwarp copies them.
fn copy_band_info(src: &Dataset, dst: &mut Dataset, bands: Bands) {
    for i in 1..=bands.count {
        let (Ok(from), Ok(mut to)) = (src.rasterband(i), dst.rasterband(i)) else {
            continue;
        };
        if i == 1 {
            if let Some(ct) = from.color_table() {
                to.set_color_table(&ct);
            }
        }
        // Not onto the output's alpha band.
        if i <= bands.warped {
            if let Some(s) = from.scale() {
                let _ = to.set_scale(s);
            }
            if let Some(o) = from.offset() {
                let _ = to.set_offset(o);
            }
        }
        // SAFETY: valid band handles; GDAL copies what it is given.
        unsafe {
            let (f, t) = (from.c_rasterband(), to.c_rasterband());
            copy_metadata(
                f as sys::GDALMajorObjectH,
                t as sys::GDALMajorObjectH,
                &["STATISTICS_"],
            );
            let d = CStr::from_ptr(sys::GDALGetDescription(f as sys::GDALMajorObjectH));
            if !d.is_empty() {
                sys::GDALSetDescription(t as sys::GDALMajorObjectH, d.as_ptr());
            }
            let u = sys::GDALGetRasterUnitType(f);
            if !u.is_null() && !CStr::from_ptr(u).is_empty() {
                sys::GDALSetRasterUnitType(t, u);
            }
        }
    }
}

/// The default metadata domain of `from` onto `to`, without the items
/// starting with `skip` (gdalwarp's `CACHE_PATH=` for datasets,
/// `STATISTICS_` for bands); nothing when there is nothing to copy.
fn copy_metadata(from: sys::GDALMajorObjectH, to: sys::GDALMajorObjectH, skip: &[&str]) {
    // SAFETY: valid object handles; the list GDAL returns is read before
    // any other call on `from`, and GDAL copies the new list.
    unsafe {
        let mut list: *mut *mut c_char = ptr::null_mut();
        let mut p = sys::GDALGetMetadata(from, ptr::null());
        while !p.is_null() && !(*p).is_null() {
            let item = CStr::from_ptr(*p);
            if !skip
                .iter()
                .any(|k| item.to_bytes().starts_with(k.as_bytes()))
            {
                list = sys::CSLAddString(list, item.as_ptr());
            }
            p = p.add(1);
        }
        if !list.is_null() {
            sys::GDALSetMetadata(to, list, ptr::null());
            sys::CSLDestroy(list);
        }
    }
}

/// gdalwarp's nodata set-up with no `-srcnodata`/`-dstnodata`: when any
/// source band has nodata, every band's (or the placeholder) becomes the
/// source and destination nodata, set on the output's bands.
/// With an alpha band the source's nodata still marks invalid pixels,
/// but the output takes none.
pub(super) fn setup_nodata(src: &Dataset, dst: &Dataset, bands: Bands) -> Nodata {
    let values: Vec<Option<f64>> = (1..=bands.warped)
        .map(|i| src.rasterband(i).ok().and_then(|b| b.no_data_value()))
        .collect();
    if values.iter().all(Option::is_none) {
        return Nodata::default();
    }
    let values: Vec<f64> = values.iter().map(|v| v.unwrap_or(NO_NODATA)).collect();
    if bands.alpha {
        return Nodata {
            src: Some(values),
            dst: None,
        };
    }
    for (i, v) in values.iter().enumerate() {
        if let Ok(mut b) = dst.rasterband(i + 1) {
            let _ = b.set_no_data_value(Some(*v));
        }
    }
    Nodata {
        src: Some(values.clone()),
        dst: Some(values),
    }
}

/// The warp's source and destination nodata values, by warped band.
#[derive(Debug, Default)]
pub(super) struct Nodata {
    pub(super) src: Option<Vec<f64>>,
    pub(super) dst: Option<Vec<f64>>,
}

/// `GDALWarpOptions`, filled as gdalwarp fills them, freed on drop.
pub(super) struct WarpSetup(pub(super) *mut sys::GDALWarpOptions);

impl Drop for WarpSetup {
    fn drop(&mut self) {
        // SAFETY: made by GDALCreateWarpOptions, freed once; it frees the
        // lists and arrays (all CPLMalloc'd) but not the transformer.
        unsafe { sys::GDALDestroyWarpOptions(self.0) };
    }
}

/// `n` doubles on GDAL's heap (freed by GDALDestroyWarpOptions).
unsafe fn gdal_array<T: Copy>(values: &[T]) -> *mut T {
    // SAFETY: CPLMalloc aborts rather than return NULL; `values.len()`
    // elements are written.
    unsafe {
        let p = sys::CPLMalloc(std::mem::size_of_val(values).max(1)) as *mut T;
        ptr::copy_nonoverlapping(values.as_ptr(), p, values.len());
        p
    }
}

impl WarpSetup {
    pub(super) fn new(
        src: &Dataset,
        dst: &Dataset,
        plan: &Plan,
        approx: &Transformer,
        shape: Bands,
        nodata: &Nodata,
        hook: &mut Hook,
    ) -> Result<WarpSetup, WarpError> {
        let init = if nodata.dst.is_some() { "NO_DATA" } else { "0" };
        let mut options = vec![
            format!("ERROR_THRESHOLD={}", plan.error_threshold),
            format!("INIT_DEST={init}"),
        ];
        // The MEM driver leaves new blocks at 0: gdalwarp skips what no
        // source covers only when the destination nodata is 0 (or none).
        if nodata
            .dst
            .as_ref()
            .is_none_or(|v| v.iter().all(|n| *n == 0.0))
        {
            options.push("SKIP_NOSOURCE=YES".into());
        }
        let bands: Vec<i32> = (1..=i32::try_from(shape.warped).unwrap_or(0)).collect();
        let alpha = i32::try_from(shape.count).unwrap_or(0);
        // SAFETY: a new options struct (freed by the guard whatever
        // happens next), filled with GDAL-allocated lists and arrays it
        // will free; the datasets, the transformer and the hook outlive
        // the warp (see `super::warp`).
        let setup = WarpSetup(unsafe { sys::GDALCreateWarpOptions() });
        let w = unsafe { &mut *setup.0 };
        for o in &options {
            let c = c_string(o)?;
            // SAFETY: a GDAL list (or NULL) and a C string it copies.
            w.papszWarpOptions = unsafe { sys::CSLAddString(w.papszWarpOptions, c.as_ptr()) };
        }
        w.eWorkingDataType = sys::GDALDataType::GDT_Unknown;
        w.eResampleAlg = plan.method;
        w.hSrcDS = src.c_dataset();
        w.hDstDS = dst.c_dataset();
        w.pfnProgress = Some(sys::GDALDummyProgress);
        w.dfWarpMemoryLimit = plan.warp_memory;
        w.nBandCount = bands.len() as i32;
        // SAFETY: arrays on GDAL's heap, owned by the options from here.
        unsafe {
            w.panSrcBands = gdal_array(&bands);
            w.panDstBands = gdal_array(&bands);
            if let Some(v) = &nodata.src {
                w.padfSrcNoDataReal = gdal_array(v);
            }
            if let Some(v) = &nodata.dst {
                w.padfDstNoDataReal = gdal_array(v);
            }
        }
        if shape.alpha {
            w.nSrcAlphaBand = alpha;
            w.nDstAlphaBand = alpha;
        }
        w.pfnTransformer = Some(sys::GDALApproxTransform);
        w.pTransformerArg = approx.0;
        w.pfnPreWarpChunkProcessor = Some(pre_chunk);
        w.pPreWarpProcessorArg = hook as *mut Hook as *mut std::ffi::c_void;
        Ok(setup)
    }
}
