//! Bytes Rust owns, seen by GDAL as files in a private `/vsimem/`
//! directory: one directory per item, named by the engine
//! (`/vsimem/warpline/<pid>-<n>/`), holding the input under its own file
//! name (made safe by the stages' `names`) and the siblings fetched with it,
//! so GDAL finds what it would find beside the file on disk (a `.msk`, an
//! `.ovr`, a world file) and drivers that read the name (SRTM `.hgt`) work.
//! Nothing in a path here can reach the file system or the network: the
//! directory is the engine's, and each name is one safe path component.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};

use gdal_sys as sys;

use super::last_error;

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

/// One file of a [`MemDir`]. Unlinked before the bytes are freed.
#[derive(Debug)]
struct MemFile {
    path: CString,
    // Kept alive (and never moved out or reallocated) until Drop has
    // unlinked the name: GDAL reads from this heap buffer.
    data: Vec<u8>,
}

impl MemFile {
    fn new(path: CString, mut data: Vec<u8>) -> Result<Self, String> {
        let len = data.len() as u64;
        // SAFETY: `data` is a live heap buffer of `len` bytes; with
        // bTakeOwnership = 0 GDAL never frees it, and `Drop` unlinks the
        // name before the buffer is freed. The handle returned is closed at
        // once (the file stays registered until unlinked).
        let fp = unsafe { sys::VSIFileFromMemBuffer(path.as_ptr(), data.as_mut_ptr(), len, 0) };
        if fp.is_null() {
            return Err(last_error("cannot register the bytes with GDAL"));
        }
        // SAFETY: `fp` is the valid handle just returned.
        unsafe { sys::VSIFCloseL(fp) };
        Ok(MemFile { path, data })
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        // SAFETY: unlinks the name registered in `new`; GDAL then no longer
        // refers to the buffer, which is freed after this.
        unsafe { sys::VSIUnlink(self.path.as_ptr()) };
    }
}

/// A private `/vsimem/` directory of named files over bytes Rust owns.
/// Dropped, it removes what GDAL itself wrote there too (a PAM
/// `.aux.xml`, a `.properties` file).
#[derive(Debug)]
pub struct MemDir {
    dir: String,
    files: Vec<MemFile>,
}

impl Drop for MemDir {
    fn drop(&mut self) {
        // The files are unlinked first (their own Drop), then the rest.
        self.files.clear();
        if let Ok(c) = CString::new(self.dir.as_str()) {
            // SAFETY: a valid C string naming this item's own directory.
            unsafe { sys::VSIRmdirRecursive(c.as_ptr()) };
        }
    }
}

impl Default for MemDir {
    fn default() -> Self {
        Self::new()
    }
}

impl MemDir {
    /// A new, empty directory with a name no other item has.
    pub fn new() -> Self {
        let n = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
        MemDir {
            dir: format!("/vsimem/warpline/{}-{n}", std::process::id()),
            files: Vec::new(),
        }
    }

    /// Adds `data` as the file `name` (one safe path component, see
    /// `warpline_stages::names::safe_file_name`) and returns its GDAL path.
    pub fn add(&mut self, name: &str, data: Vec<u8>) -> Result<String, crate::Error> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
            return Err(crate::Error::Input(format!(
                "{name:?} is not a plain file name"
            )));
        }
        if data.is_empty() {
            return Err(crate::Error::Input(format!("{name}: empty (0 bytes)")));
        }
        let path = format!("{}/{name}", self.dir);
        let c = CString::new(path.as_str()).map_err(|e| crate::Error::Input(e.to_string()))?;
        self.files
            .push(MemFile::new(c, data).map_err(crate::Error::Gdal)?);
        Ok(path)
    }

    /// Bytes held by every file.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.data.len() as u64).sum()
    }

    /// Every byte of the file `index` (0: the input itself).
    pub fn bytes_of(&self, index: usize) -> &[u8] {
        self.files
            .get(index)
            .map(|f| f.data.as_slice())
            .unwrap_or_default()
    }

    /// The first bytes of the file `index` (0: the input itself).
    pub fn head(&self, index: usize, n: usize) -> &[u8] {
        self.files
            .get(index)
            .map(|f| &f.data[..n.min(f.data.len())])
            .unwrap_or_default()
    }
}

/// The first `n` bytes (or fewer) of a GDAL path, if it can be opened.
pub fn vsi_head(path: &str, n: usize) -> Option<Vec<u8>> {
    let c = CString::new(path).ok()?;
    // SAFETY: valid C strings; the handle is closed below.
    let fp = unsafe { sys::VSIFOpenL(c.as_ptr(), c"rb".as_ptr()) };
    if fp.is_null() {
        return None;
    }
    let mut buf = vec![0u8; n];
    // SAFETY: `buf` has room for `n` bytes; `fp` is open.
    let read = unsafe { sys::VSIFReadL(buf.as_mut_ptr().cast(), 1, n, fp) };
    // SAFETY: `fp` is the handle opened above, closed once.
    unsafe { sys::VSIFCloseL(fp) };
    buf.truncate(read);
    Some(buf)
}

/// The regular files inside an archive GDAL opened as a directory (a
/// `/vsizip/` or `/vstar/` path), at most `max`, by their path inside it.
pub fn archive_files(archive: &str, max: usize) -> Result<Vec<String>, String> {
    let c = CString::new(archive).map_err(|e| e.to_string())?;
    // SAFETY: `c` is a valid C string; the list returned is ours to free
    // with CSLDestroy (below), NULL when the archive cannot be listed.
    let list = unsafe { sys::VSIReadDirRecursive(c.as_ptr()) };
    if list.is_null() {
        return Err(last_error("cannot list the archive"));
    }
    let mut names = Vec::new();
    let mut i = 0;
    loop {
        // SAFETY: `list` is a NULL-terminated array of C strings; `i`
        // stops at the terminator.
        let entry = unsafe { *list.add(i) };
        if entry.is_null() {
            break;
        }
        i += 1;
        // SAFETY: a valid C string of the list, copied at once.
        let name = unsafe { CStr::from_ptr(entry) }
            .to_string_lossy()
            .into_owned();
        names.push(name);
    }
    // SAFETY: the list came from VSIReadDirRecursive and is freed once.
    unsafe { sys::CSLDestroy(list) };
    // Directories: named with a slash, or the start of another's path.
    let dirs: std::collections::HashSet<String> = names
        .iter()
        .filter_map(|n| n.rsplit_once('/').map(|(d, _)| d.to_owned()))
        .collect();
    names.retain(|n| !n.ends_with('/') && !dirs.contains(n.as_str()));
    names.truncate(max);
    Ok(names)
}

/// Whether `head` starts as a TIFF or BigTIFF does (either byte order).
pub fn is_tiff(head: &[u8]) -> bool {
    [b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"]
        .iter()
        .any(|m| head.starts_with(*m))
}
