//! Files GDAL writes beside an output: PAM metadata (`.aux.xml`, what the
//! format cannot hold itself), an external mask (`.msk`), and a world file
//! (`.tfw` or `.wld` with `TFW=YES` / `WORLDFILE=YES`, named after the
//! file's stem). An output is the file and these, so they are written under
//! the temporary name with it and renamed with it (before it: a final name
//! appears last), and a failed write removes them with it.

use std::path::{Path, PathBuf};

/// The suffixes of the files GDAL may write beside `NAME`: `NAME.aux.xml`,
/// `NAME.msk`, and the COG driver's temporary `NAME.ovr.tmp`.
const BESIDE: &[&str] = &[".aux.xml", ".msk"];

/// World files, named after the stem (`NAME.tif` -> `NAME.tfw`).
const WORLD: &[&str] = &["tfw", "wld"];

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Every side file of `path`: appended suffixes, then world files.
fn side_files(path: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    BESIDE
        .iter()
        .map(move |s| with_suffix(path, s))
        .chain(WORLD.iter().map(move |e| path.with_extension(e)))
}

/// Removes `tmp`'s side files (a failed or abandoned write).
pub(super) fn remove_beside(tmp: &Path) {
    for p in side_files(tmp).chain([with_suffix(tmp, ".ovr.tmp")]) {
        let _ = std::fs::remove_file(p);
    }
}

/// Renames `tmp`'s side files to `path`'s, synced; removes side files an
/// earlier output left at `path` that this one does not have.
pub(super) fn rename_beside(tmp: &Path, path: &Path) -> std::io::Result<()> {
    for (from, to) in side_files(tmp).zip(side_files(path)) {
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
    side_files(path).filter(|p| p.exists())
}

/// The side files `tmp` has, each with its name beside `name` (an
/// output's file name in a bucket), for an upload.
pub(super) fn beside_name<'a>(
    tmp: &'a Path,
    name: &'a Path,
) -> impl Iterator<Item = (PathBuf, PathBuf)> + 'a {
    side_files(tmp)
        .zip(side_files(name))
        .filter(|(from, _)| from.exists())
}
