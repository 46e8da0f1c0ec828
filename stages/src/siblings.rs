//! The files beside a local raster that GDAL reads with it: an external
//! mask (`.msk`), external overviews (`.ovr`), PAM metadata (`.aux.xml`),
//! a world file (`.tfw`, `.tifw`, `.wld`, ...) and a `.prj`. Fetch reads
//! them with the raster (each at most `max_bytes`, all charged to the
//! byte budget with it) and decode puts them beside its in-memory copy.
//!
//! A mask or overview file is read only if it is a TIFF: GDAL opens it
//! with every driver, and a sibling is not trusted with formats (VRT)
//! that can name other files or URLs.

use std::path::{Path, PathBuf};

use crate::names::{is_tiff, sibling_candidates, APPENDED};
use crate::payloads::Sibling;

/// A sibling found on disk: its path, suffix and size.
#[derive(Debug)]
pub(crate) struct Found {
    path: PathBuf,
    suffix: String,
    len: u64,
}

impl Found {
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// The siblings of `path` that exist, one per kind (the lower-case name
/// first), each at most `max_bytes` (a larger one is passed over, with a
/// warning).
pub(crate) async fn find(path: &Path, max_bytes: u64) -> Vec<Found> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let mut found: Vec<Found> = Vec::new();
    for (candidate, suffix) in sibling_candidates(name) {
        if found.iter().any(|f| f.suffix.eq_ignore_ascii_case(&suffix)) {
            continue;
        }
        let at = dir.join(&candidate);
        let Ok(meta) = tokio::fs::metadata(&at).await else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if meta.len() > max_bytes {
            tracing::warn!(
                "{}: {} bytes, over max_bytes ({max_bytes}): not read with {}",
                at.display(),
                meta.len(),
                path.display()
            );
            continue;
        }
        found.push(Found {
            path: at,
            suffix,
            len: meta.len(),
        });
    }
    found
}

/// Reads what [`find`] found; a mask or overview file that is not a TIFF
/// is passed over with a warning, as is one that went away.
pub(crate) async fn read(path: &Path, found: Vec<Found>) -> Vec<Sibling> {
    let mut out = Vec::with_capacity(found.len());
    for f in found {
        let bytes = match tokio::fs::read(&f.path).await {
            Ok(b) if !b.is_empty() => b,
            _ => continue,
        };
        if !acceptable(
            &f.suffix,
            &bytes,
            &f.path.display().to_string(),
            &path.display().to_string(),
        ) {
            continue;
        }
        out.push(Sibling {
            suffix: f.suffix,
            bytes,
        });
    }
    out
}

/// Whether a sibling's bytes may be read with the input: a mask or
/// overview file must be a TIFF (else a warning says it was passed over).
pub(crate) fn acceptable(suffix: &str, bytes: &[u8], shown: &str, input: &str) -> bool {
    let needs_tiff = APPENDED[..2].iter().any(|s| s.eq_ignore_ascii_case(suffix));
    if needs_tiff && !is_tiff(bytes) {
        tracing::warn!("{shown}: not a TIFF, so not read as the mask or overviews of {input}");
        return false;
    }
    true
}
