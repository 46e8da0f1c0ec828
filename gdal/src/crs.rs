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
