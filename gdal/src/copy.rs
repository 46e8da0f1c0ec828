//! A dataset copied to a file by a driver (`GDALCreateCopy`, as
//! `gdal_translate -of <driver>` writes it): how `write` makes its
//! outputs.

use std::path::Path;

use gdal::{Dataset, Metadata};
use gdal_sys as sys;

use super::{last_error, reset_error, string_list};
use crate::{Error, Raster};

/// Whether this GDAL has a driver called `name`.
pub fn driver_exists(name: &str) -> bool {
    crate::init();
    gdal::DriverManager::get_driver_by_name(name).is_ok()
}

/// The creation options driver `name` declares: its
/// `DMD_CREATIONOPTIONLIST` XML.
pub fn creation_option_list(name: &str) -> Result<String, Error> {
    crate::init();
    let driver = gdal::DriverManager::get_driver_by_name(name)
        .map_err(|e| Error::Gdal(format!("no driver {name}: {e}")))?;
    driver
        .metadata_item("DMD_CREATIONOPTIONLIST", "")
        .ok_or_else(|| Error::Gdal(format!("driver {name} lists no creation options")))
}

/// Writes `raster` to `path` with the driver named `driver` and its
/// creation `options` (`NAME=VALUE`), and closes the new file (which
/// flushes it). The error is GDAL's last message.
pub fn create_copy(
    driver: &str,
    raster: &Raster,
    path: &Path,
    options: &[String],
) -> Result<(), Error> {
    let src = raster.dataset();
    let driver = gdal::DriverManager::get_driver_by_name(driver)
        .map_err(|e| Error::Gdal(format!("no driver {driver}: {e}")))?;
    let options = string_list(options)?;
    let c_path = std::ffi::CString::new(path.to_string_lossy().as_bytes())
        .map_err(|_| Error::Input("the output path has a NUL byte".to_owned()))?;
    reset_error();
    // SAFETY: valid driver, path, source dataset and option list (only
    // read); the new dataset is closed right below.
    let out = unsafe {
        sys::GDALCreateCopy(
            driver.c_driver(),
            c_path.as_ptr(),
            src.c_dataset(),
            0,
            options.as_ptr(),
            None,
            std::ptr::null_mut(),
        )
    };
    if out.is_null() {
        return Err(Error::Gdal(last_error("GDALCreateCopy failed")));
    }
    // SAFETY: `out` is the dataset just created; closing flushes it.
    unsafe { sys::GDALClose(out) };
    // SAFETY: reads this thread's last error class.
    let class = unsafe { sys::CPLGetLastErrorType() };
    if class == sys::CPLErr::CE_Failure || class == sys::CPLErr::CE_Fatal {
        return Err(Error::Gdal(last_error("write failed")));
    }
    Ok(())
}

/// Writes the blocks of `ds` still in GDAL's cache to its file; GDAL's
/// message if one failed (GDAL 3.6's `GDALFlushCache` returns nothing, so
/// the last error is read after it).
pub(crate) fn flush(ds: &mut Dataset) -> Result<(), String> {
    reset_error();
    ds.flush_cache().map_err(|e| e.to_string())?;
    // SAFETY: reads this thread's last error class, right after the flush.
    let class = unsafe { sys::CPLGetLastErrorType() };
    if class == sys::CPLErr::CE_Failure || class == sys::CPLErr::CE_Fatal {
        return Err(last_error("writing the cached blocks failed"));
    }
    Ok(())
}
