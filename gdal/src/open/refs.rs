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

use crate::files::{archive_files, is_tiff, vsi_head};
use crate::Error;

/// Refuses `ds` if its metadata names other datasets GDAL would open.
pub(super) fn refuse_references(ds: &Dataset) -> Result<(), Error> {
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
            return Err(Error::Input(format!(
                "its metadata ({domain}: {}) names {what}, which GDAL would open by \
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

/// Archives with more files than this are refused (each is looked at).
const MAX_FILES: usize = 10_000;

/// Refuses an archive holding a mask, overview or `.aux` file (beside the
/// member or anywhere in it: an overview's own overviews are found by
/// name too) that is not what it claims to be, or a TIFF one whose
/// metadata names other files (see [`refuse_references`]). `path` is the
/// member's GDAL path, `/vsizip/{...}/member` or `/vstar/{...}/member`.
pub(super) fn refuse_archive_siblings(path: &str) -> Result<(), Error> {
    let Some(end) = path.find('}') else {
        return Ok(());
    };
    let root = &path[..=end];
    let files = archive_files(root, MAX_FILES + 1)
        .map_err(|m| Error::Input(format!("not a readable archive: {m}")))?;
    if files.len() > MAX_FILES {
        return Err(Error::Input(format!(
            "an archive of more than {MAX_FILES} files is not opened"
        )));
    }
    for file in files {
        let lower = file.to_ascii_lowercase();
        let aux = lower.ends_with(".aux");
        if !(aux || lower.ends_with(".ovr") || lower.ends_with(".msk")) {
            continue;
        }
        let at = format!("{root}/{file}");
        let head = vsi_head(&at, 16).unwrap_or_default();
        let ok = if aux {
            head.starts_with(b"EHFA_HEADER_TAG")
        } else {
            is_tiff(&head) && tiff_names_nothing(&at)?
        };
        if !ok {
            let kind = if aux { "HFA" } else { "TIFF" };
            return Err(Error::Input(format!(
                "{file} in the archive is not a {kind} file; warpline does not read it"
            )));
        }
    }
    Ok(())
}

/// Refuses an input whose mask or overview file beside it (a local file's
/// siblings, already checked to be TIFF by fetch) names other files in
/// its own metadata.
pub(super) fn refuse_sibling_references(path: &str) -> Result<(), Error> {
    for suffix in [".ovr", ".msk", ".OVR", ".MSK"] {
        let at = format!("{path}{suffix}");
        if vsi_head(&at, 4).is_some() && !tiff_names_nothing(&at)? {
            let name = at.rsplit('/').next().unwrap_or(&at);
            return Err(Error::Input(format!(
                "{name} is not a readable TIFF; warpline does not read it"
            )));
        }
    }
    Ok(())
}

/// Whether the TIFF at `path` opens as one (GTiff only) and its metadata
/// names no other file; an error if it does.
fn tiff_names_nothing(path: &str) -> Result<bool, Error> {
    let options = gdal::DatasetOptions {
        open_flags: gdal::GdalOpenFlags::GDAL_OF_RASTER | gdal::GdalOpenFlags::GDAL_OF_READONLY,
        allowed_drivers: Some(&["GTiff"]),
        open_options: None,
        sibling_files: None,
    };
    match Dataset::open_ex(path, options) {
        Ok(ds) => refuse_references(&ds).map(|()| true),
        Err(_) => Ok(false),
    }
}
