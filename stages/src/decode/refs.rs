//! Inputs that would make GDAL open other files. The input's bytes are
//! opened only by the allowed drivers, but some metadata names another
//! dataset that GDAL then opens with *every* driver, by whatever path it
//! says (a local file, `/vsicurl/`, a VRT): an overview file named in the
//! `OVERVIEWS` domain (from the TIFF's own metadata tag or a `.aux.xml`),
//! and geolocation arrays (`X_DATASET`, `Y_DATASET`). Such inputs are
//! refused. Inside an archive, the mask, overview and `.aux` files GDAL
//! looks for beside the member are read only if they are what they claim
//! (TIFF, or HFA for `.aux`), as fetch checks a local file's siblings.

use gdal::{Dataset, Metadata};
use warpline_engine::StageError;

use crate::gdal::vsi_head;
use crate::names::is_tiff;

/// Refuses `ds` if its metadata names other datasets GDAL would open.
pub(super) fn refuse_references(ds: &Dataset, id: &str) -> Result<(), StageError> {
    for (domain, what) in [
        ("OVERVIEWS", "an overview file"),
        ("GEOLOCATION", "geolocation arrays in other datasets"),
    ] {
        if let Some(items) = ds.metadata_domain(domain).filter(|m| !m.is_empty()) {
            let named: Vec<&str> = items
                .iter()
                .filter(|i| i.contains("_FILE=") || i.contains("_DATASET="))
                .map(|i| i.split('=').next().unwrap_or(i))
                .collect();
            return Err(StageError::permanent(format!(
                "{id}: its metadata ({domain}: {}) names {what}, which GDAL would open by \
                 whatever path it gives; warpline does not let an input open other files",
                if named.is_empty() {
                    items.join(", ")
                } else {
                    named.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// Refuses a member of an archive whose mask, overview or `.aux` file
/// beside it is not what it claims to be.
pub(super) fn refuse_archive_siblings(member_path: &str, id: &str) -> Result<(), StageError> {
    for suffix in [".ovr", ".msk", ".aux", ".OVR", ".MSK", ".AUX"] {
        let path = format!("{member_path}{suffix}");
        let Some(head) = vsi_head(&path, 16) else {
            continue;
        };
        let ok = if suffix.eq_ignore_ascii_case(".aux") {
            head.starts_with(b"EHFA_HEADER_TAG")
        } else {
            is_tiff(&head)
        };
        if !ok {
            let name = path.rsplit('/').next().unwrap_or(&path);
            return Err(StageError::permanent(format!(
                "{id}: {name} in the archive is not a {} file; warpline does not read it",
                if suffix.eq_ignore_ascii_case(".aux") {
                    "HFA"
                } else {
                    "TIFF"
                }
            )));
        }
    }
    Ok(())
}
