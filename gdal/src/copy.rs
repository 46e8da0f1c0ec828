//! A dataset copied to a file by a driver (`GDALCreateCopy`, as
//! `gdal_translate -of <driver>` writes it): how `write` makes its
//! outputs.

use std::path::Path;

use gdal::{Dataset, Metadata};
use gdal_sys as sys;

use super::{last_error, reset_error, string_list};
use crate::{Error, Raster};

/// The creation option that tells `GDALCreateCopy` the path is new, so it
/// need not look for an existing dataset there to delete (it asks every
/// driver: ~0.35 ms). GDAL 3.7 renamed it to a hidden `@` option; the old
/// name on a newer GDAL is an unknown option (a warning) and is ignored.
pub fn new_path_option() -> &'static str {
    let gdal = crate::versions().gdal;
    if (gdal.major, gdal.minor) >= (3, 7) {
        "@QUIET_DELETE_ON_CREATE_COPY=NO"
    } else {
        "QUIET_DELETE_ON_CREATE_COPY=NO"
    }
}

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

#[cfg(test)]
mod tests {
    use crate::{MessageWatch, Raster};

    /// The option for a new path is one this GDAL knows: a COG written
    /// with it draws no "does not support creation option" warning (GDAL
    /// 3.12 warned on the pre-3.7 name, on every output).
    #[test]
    fn the_new_path_option_is_known_to_this_gdal() {
        crate::init();
        let mem = gdal::DriverManager::get_driver_by_name("MEM").unwrap();
        let ds = mem.create_with_band_type::<u8, _>("", 16, 16, 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tif");
        let watch = MessageWatch::start(|m| m.contains("does not support"));
        let made = super::create_copy(
            "COG",
            &Raster::in_memory(ds),
            &path,
            &[super::new_path_option().to_owned()],
        );
        assert!(
            !watch.matched(),
            "GDAL warned about {}",
            super::new_path_option()
        );
        made.unwrap();
        assert!(path.exists());
    }
}
