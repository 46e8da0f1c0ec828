//! In-memory VRT views of a dataset, made by `GDALTranslate` exactly as
//! `gdal_translate -of VRT` makes them: a selection of bands (`-b`), an
//! assumed CRS (`-a_srs`). The view reads through to the dataset (no
//! pixel is copied) and keeps its mask and overviews, so a warp of the
//! view equals `gdalwarp` of the same `gdal_translate -of VRT` file.
//!
//! The VRT is built here from a dataset already open, never parsed from
//! input, so it cannot make GDAL open other files or URLs.

use std::ptr;

use gdal::Dataset;
use gdal_sys as sys;

use super::{last_error, reset_error, string_list};

/// `gdal_translate -of VRT <args>` of `src`, in memory. The view refers to
/// `src`, which must outlive it.
pub fn vrt_view(src: &Dataset, args: &[String]) -> Result<Dataset, crate::Error> {
    let mut argv: Vec<String> = vec!["-of".to_owned(), "VRT".to_owned()];
    argv.extend(args.iter().cloned());
    let list = string_list(&argv)?;
    reset_error();
    // SAFETY: `list` is a NULL-terminated argument list alive for the
    // call; GDAL only reads it and copies what it needs. Freed below.
    let options = unsafe { sys::GDALTranslateOptionsNew(list.as_ptr(), ptr::null_mut()) };
    if options.is_null() {
        return Err(crate::Error::Input(last_error("invalid translate options")));
    }
    let mut usage_error = 0;
    // SAFETY: a valid source dataset and options; "" names an in-memory
    // VRT, which GDALTranslate creates and we own (wrapped at once).
    let out =
        unsafe { sys::GDALTranslate(c"".as_ptr(), src.c_dataset(), options, &mut usage_error) };
    // SAFETY: made by GDALTranslateOptionsNew, freed once.
    unsafe { sys::GDALTranslateOptionsFree(options) };
    if out.is_null() {
        return Err(crate::Error::Gdal(last_error(
            "GDALTranslate returned nothing",
        )));
    }
    // SAFETY: a new dataset GDALTranslate handed to us; closed on drop.
    Ok(unsafe { Dataset::from_c_dataset(out) })
}
