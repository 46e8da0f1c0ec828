//! A CRS as a user writes it (EPSG code, WKT, PROJ string), checked with
//! PROJ and turned into WKT.

use gdal::spatial_ref::SpatialRef;

/// PROJ does not understand a CRS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PROJ does not understand the CRS {text:?}: {why}")]
pub struct CrsError {
    /// The CRS as given.
    pub text: String,
    /// PROJ's (or GDAL's) message.
    pub why: String,
}

/// `text` as WKT, or why PROJ does not understand it.
pub fn crs_to_wkt(text: &str) -> Result<String, CrsError> {
    crate::init();
    crate::reset_error();
    SpatialRef::from_definition(text)
        .and_then(|srs| srs.to_wkt())
        .map_err(|_| CrsError {
            text: text.to_owned(),
            why: crate::last_error("unknown CRS"),
        })
}

/// How a catalog names a CRS given as WKT (STAC's `proj:code` or
/// `proj:wkt2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrsName {
    /// Its authority and code, as its WKT carries them at its root
    /// (`EPSG:3857`): never guessed from the definition.
    Code(String),
    /// No code at its root: the definition as WKT2 (2019).
    Wkt2(String),
}

/// `wkt`'s name for a catalog: its code, else its WKT2; `None` when PROJ
/// cannot read it (an empty WKT: no CRS).
pub fn crs_name(wkt: &str) -> Option<CrsName> {
    crate::init();
    if wkt.trim().is_empty() {
        return None;
    }
    let srs = SpatialRef::from_wkt(wkt).ok()?;
    if let Ok(code) = srs.authority() {
        return Some(CrsName::Code(code));
    }
    wkt2(&srs).map(CrsName::Wkt2)
}

/// `srs` as WKT2 (2019), multi-line off.
fn wkt2(srs: &SpatialRef) -> Option<String> {
    let options = crate::string_list(&["FORMAT=WKT2_2019", "MULTILINE=NO"]).ok()?;
    let mut out: *mut std::ffi::c_char = std::ptr::null_mut();
    // SAFETY: a valid SRS handle, a NULL-terminated option list that
    // outlives the call, and an out-pointer GDAL fills with a string it
    // allocated (freed below with VSIFree, as GDAL asks).
    let err =
        unsafe { gdal_sys::OSRExportToWktEx(srs.to_c_hsrs(), &mut out, options.as_ptr().cast()) };
    if out.is_null() {
        return None;
    }
    // SAFETY: GDAL returned a NUL-terminated string; copied before it is freed.
    let text = unsafe { std::ffi::CStr::from_ptr(out) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `out` was allocated by GDAL for us and is not used after.
    unsafe { gdal_sys::VSIFree(out.cast()) };
    (err == gdal_sys::OGRErr::OGRERR_NONE && !text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crs_is_named_by_its_code_else_by_wkt2() {
        let mercator = crs_to_wkt("EPSG:3857").unwrap();
        assert_eq!(crs_name(&mercator), Some(CrsName::Code("EPSG:3857".into())));
        let custom = crs_to_wkt("+proj=utm +zone=31 +ellps=GRS80 +units=m +no_defs").unwrap();
        match crs_name(&custom) {
            Some(CrsName::Wkt2(w)) => assert!(w.starts_with("PROJCRS["), "{w}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(crs_name(""), None);
    }
}
