//! The warp (`GDALWarp` to a MEM dataset, as `gdalwarp -of MEM` runs it),
//! the output size GDAL suggests for it (`GDALSuggestedWarpOutput2`), and
//! whether two CRSs share their geographic CRS (`OSRIsSameGeogCS`). The
//! `reproject` stage decides what to ask; this file only asks GDAL.

use std::ptr;

use gdal::Dataset;
use gdal_sys as sys;

use super::{last_error, reset_error, string_list};

/// GDAL's error number for a failed allocation (`CPLE_OutOfMemory`).
const CPLE_OUT_OF_MEMORY: sys::CPLErrorNum = 2;

/// `GDALWarpAppOptions`, freed on drop.
#[derive(Debug)]
pub struct WarpOptions(*mut sys::GDALWarpAppOptions);

impl WarpOptions {
    /// Options from `gdalwarp` arguments, warping to a MEM dataset.
    pub fn new(args: &[String]) -> Result<Self, crate::Error> {
        Self::with_format(args, "MEM")
    }

    /// Options from `gdalwarp` arguments, warping to a dataset of `format`
    /// (`GTiff`: a file, chunked by `-wm` as the command does).
    pub fn with_format(args: &[String], format: &str) -> Result<Self, crate::Error> {
        let mut argv: Vec<String> = args.to_vec();
        argv.extend(["-of".to_owned(), format.to_owned()]);
        let list = string_list(&argv)?;
        reset_error();
        // SAFETY: `list` is a NULL-terminated argument list alive for the
        // call; GDAL only reads it and copies what it needs.
        let options = unsafe { sys::GDALWarpAppOptionsNew(list.as_ptr(), ptr::null_mut()) };
        if options.is_null() {
            return Err(crate::Error::Input(last_error("invalid warp options")));
        }
        Ok(WarpOptions(options))
    }
}

impl Drop for WarpOptions {
    fn drop(&mut self) {
        // SAFETY: created by GDALWarpAppOptionsNew, freed once.
        unsafe { sys::GDALWarpAppOptionsFree(self.0) };
    }
}

/// What `GDALSuggestedWarpOutput2` says of a warp: the output's
/// geotransform, size in pixels and lines, and extent.
#[derive(Debug, Clone, Copy)]
pub struct Suggested {
    pub geo_transform: [f64; 6],
    pub pixels: i32,
    pub lines: i32,
    pub extent: [f64; 4],
}

/// The output GDAL suggests for warping `src` with a general image
/// projection transformer made with `options` (`NAME=VALUE` items such as
/// `DST_SRS=...`). The error says which step failed, with GDAL's message.
pub fn suggested_output(src: &Dataset, options: &[String]) -> Result<Suggested, crate::Error> {
    let options = string_list(options)?;
    reset_error();
    // SAFETY: `src` is a valid dataset; `options` a NULL-terminated list
    // alive for the call, only read. The transformer is destroyed below.
    let transformer = unsafe {
        sys::GDALCreateGenImgProjTransformer2(src.c_dataset(), ptr::null_mut(), options.as_ptr())
    };
    if transformer.is_null() {
        return Err(crate::Error::Gdal(format!(
            "cannot transform to the target CRS: {}",
            last_error("no transformation")
        )));
    }
    let mut geo_transform = [0f64; 6];
    let mut extent = [0f64; 4];
    let (mut pixels, mut lines) = (0i32, 0i32);
    // SAFETY: all out-pointers are to locals of the right sizes; the
    // transformer was made for this source.
    let err = unsafe {
        sys::GDALSuggestedWarpOutput2(
            src.c_dataset(),
            Some(sys::GDALGenImgProjTransform),
            transformer,
            geo_transform.as_mut_ptr(),
            &mut pixels,
            &mut lines,
            extent.as_mut_ptr(),
            0,
        )
    };
    // SAFETY: made by GDALCreateGenImgProjTransformer2, destroyed once.
    unsafe { sys::GDALDestroyGenImgProjTransformer(transformer) };
    if err != sys::CPLErr::CE_None {
        return Err(crate::Error::Gdal(format!(
            "cannot work out the output of the warp: {}",
            last_error("no suggestion")
        )));
    }
    Ok(Suggested {
        geo_transform,
        pixels,
        lines,
        extent,
    })
}

/// Why a warp gave no usable output, with GDAL's message.
#[derive(Debug)]
pub enum WarpError {
    /// GDAL ran out of memory: not the input's fault.
    OutOfMemory(String),
    /// An output came back, but GDAL failed reading the source's pixels.
    Unreadable(String),
    /// No output at all.
    Failed(String),
}

impl From<crate::Error> for WarpError {
    fn from(e: crate::Error) -> Self {
        WarpError::Failed(e.to_string())
    }
}

/// `gdalwarp` of `srcs` (one, or a mosaic's inputs in order) with
/// `options`, to a new MEM dataset. GDAL's last error is read right after
/// the warp.
pub fn warp(srcs: &[&Dataset], options: &WarpOptions) -> Result<Dataset, WarpError> {
    warp_into(srcs, options, c"")
}

/// As [`warp`], to a new dataset at `dest` (a file for a file format).
pub fn warp_into(
    srcs: &[&Dataset],
    options: &WarpOptions,
    dest: &std::ffi::CStr,
) -> Result<Dataset, WarpError> {
    let mut sources: Vec<sys::GDALDatasetH> = srcs.iter().map(|s| s.c_dataset()).collect();
    let count = i32::try_from(sources.len()).unwrap_or(i32::MAX);
    let mut usage_error = 0;
    reset_error();
    // SAFETY: `count` valid source datasets (alive for the call); valid
    // options; `dest` names the new output ("" for MEM), which GDALWarp
    // creates and we own (wrapped at once).
    let out = unsafe {
        sys::GDALWarp(
            dest.as_ptr(),
            ptr::null_mut(),
            count,
            sources.as_mut_ptr(),
            options.0,
            &mut usage_error,
        )
    };
    // SAFETY: reads this thread's last error, right after the warp.
    let number = unsafe { sys::CPLGetLastErrorNo() };
    if !out.is_null() {
        // As the gdalwarp command: a dataset back is a warp done. GDAL may
        // have said errors on the way that did not stop it (PROJ failing
        // for points off the target's domain); they are in the log.
        // SAFETY: a new dataset GDALWarp handed to us; closed on drop.
        return Ok(unsafe { Dataset::from_c_dataset(out) });
    }
    Err(classify(number, last_error("GDALWarp returned nothing")))
}

/// A failed warp's error, by GDAL's error number and message.
pub fn classify(number: sys::CPLErrorNum, message: String) -> WarpError {
    if number == CPLE_OUT_OF_MEMORY {
        WarpError::OutOfMemory(message)
    } else if message.contains("ReadBlock") || message.contains("TIFFRead") {
        WarpError::Unreadable(message)
    } else {
        WarpError::Failed(message)
    }
}
