//! Files GDAL writes beside an output: PAM metadata (`.aux.xml`, what the
//! format cannot hold itself) and an external mask (`.msk`). An output is
//! the file and these, so they are written under the temporary name with
//! it and renamed with it (before it: a final name appears last), and a
//! failed write removes them with it.

use std::path::{Path, PathBuf};

/// The suffixes of the files GDAL may write beside `NAME`: `NAME.aux.xml`,
/// `NAME.msk`, and the COG driver's temporary `NAME.ovr.tmp`.
const BESIDE: &[&str] = &[".aux.xml", ".msk"];

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Removes `tmp`'s side files (a failed or abandoned write).
pub(super) fn remove_beside(tmp: &Path) {
    for suffix in BESIDE.iter().chain(&[".ovr.tmp"]) {
        let _ = std::fs::remove_file(with_suffix(tmp, suffix));
    }
}

/// Renames `tmp`'s side files to `path`'s, synced; removes side files an
/// earlier output left at `path` that this one does not have.
pub(super) fn rename_beside(tmp: &Path, path: &Path) -> std::io::Result<()> {
    for suffix in BESIDE {
        let (from, to) = (with_suffix(tmp, suffix), with_suffix(path, suffix));
        if from.exists() {
            std::fs::File::open(&from).and_then(|f| f.sync_all())?;
            std::fs::rename(&from, &to)?;
        } else if to.exists() {
            std::fs::remove_file(&to)?;
        }
    }
    Ok(())
}

/// The output's side files that exist (for the bytes written).
pub(super) fn existing(path: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    BESIDE
        .iter()
        .map(|s| with_suffix(path, s))
        .filter(|p| p.exists())
}
