//! A record of each multipart upload in progress, so that one a killed run
//! left is aborted by the next.
//!
//! The record is `STAGING/.warpline-uploads/TEMPORARY.upload`, where
//! TEMPORARY is the staged file's temporary name (which says which process
//! writes it, see [`crate::temps`]); it holds the object's URL and the
//! upload's id. It is written once the upload is created, before any part
//! is sent, and removed once the upload is completed or aborted. The first
//! upload of a run aborts the uploads whose records a dead process of this
//! machine left (their parts are dropped by the server; the object never
//! appeared), and removes the records.

use std::path::{Path, PathBuf};

use crate::temps::left_by_the_dead;

/// The directory of the records, in the staging directory.
pub(crate) fn dir(staging: &Path) -> PathBuf {
    staging.join(".warpline-uploads")
}

/// The record of one upload in progress.
#[derive(Debug)]
pub(crate) struct Record {
    path: PathBuf,
}

impl Record {
    /// Records that the object `url` is being uploaded as `id`, from the
    /// staged file `staged`.
    pub(crate) fn begin(dir: &Path, staged: &Path, url: &str, id: &str) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let name = staged
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = dir.join(format!("{name}.upload"));
        std::fs::write(&path, format!("{url}\n{id}\n"))?;
        Ok(Record { path })
    }

    /// The upload is completed or aborted.
    pub(crate) fn end(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An upload a dead process left: its record, object URL and upload id.
#[derive(Debug)]
pub(crate) struct Left {
    pub(crate) record: PathBuf,
    pub(crate) url: String,
    pub(crate) id: String,
}

/// The uploads that dead processes of this machine left in `dir`.
pub(crate) fn left(dir: &Path) -> Vec<Left> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".upload") && left_by_the_dead(&name)
        })
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            let mut lines = text.lines();
            let (url, id) = (lines.next()?.to_owned(), lines.next()?.to_owned());
            Some(Left {
                record: e.path(),
                url,
                id,
            })
        })
        .collect()
}

/// The staging directory when the pipeline names none: this user's own,
/// `$XDG_CACHE_HOME/warpline/staging` (or `~/.cache/...`, else the
/// temporary directory with the user id in its name), made private (0700).
/// One that exists and belongs to another user, or that others may write
/// in, is refused: a file staged there could be swapped before its upload.
pub(crate) fn default_staging() -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let uid = rustix::process::getuid().as_raw();
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
        .map(|cache| cache.join("warpline").join("staging"))
        .unwrap_or_else(|| std::env::temp_dir().join(format!("warpline-staging-{uid}")));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create the staging directory {}: {e}", dir.display()))?;
    let meta = std::fs::metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "the staging directory {} belongs to another user or others may write in it: \
             set `staging` to a directory of your own",
            dir.display()
        ));
    }
    Ok(dir)
}
