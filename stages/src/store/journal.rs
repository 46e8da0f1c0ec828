//! A record of each multipart upload in progress, so that one a killed run
//! left is aborted by the next.
//!
//! The record is `STAGING/.warpline-uploads/TEMPORARY.upload`, where
//! TEMPORARY is the staged file's temporary name (which says which process
//! writes it, see [`crate::temps`]); it holds the object's URL, the
//! upload's id and the server's endpoint (empty for AWS or the
//! environment's), so that a later run aborts it at the server it was begun
//! at even when its own `endpoint` differs. It is written once the upload is created, before any part
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
    /// Records that the object `url` is being uploaded as `id` to the
    /// server at `endpoint`, from the staged file `staged` (written
    /// without blocking the upload's runtime).
    pub(crate) async fn begin(
        dir: &Path,
        staged: &Path,
        url: &str,
        endpoint: Option<&str>,
        id: &str,
    ) -> std::io::Result<Self> {
        tokio::fs::create_dir_all(dir).await?;
        let name = staged
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = dir.join(format!("{name}.upload"));
        let endpoint = endpoint.unwrap_or_default();
        tokio::fs::write(&path, format!("{url}\n{id}\n{endpoint}\n")).await?;
        Ok(Record { path })
    }

    /// The upload is completed or aborted.
    pub(crate) async fn end(self) {
        let _ = tokio::fs::remove_file(&self.path).await;
    }
}

/// An upload a dead process left: its record, object URL, upload id and
/// server (`None`: AWS, or a record from before endpoints were kept).
#[derive(Debug)]
pub(crate) struct Left {
    pub(crate) record: PathBuf,
    pub(crate) url: String,
    pub(crate) id: String,
    pub(crate) endpoint: Option<String>,
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
            let endpoint = lines.next().filter(|e| !e.is_empty()).map(str::to_owned);
            Some(Left {
                record: e.path(),
                url,
                id,
                endpoint,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A record names the server its upload was begun at; one a dead
    /// process left is found with it, one of a live process is not.
    #[test]
    fn a_record_keeps_the_uploads_server() {
        let dir = tempfile::tempdir().unwrap();
        let staged = crate::temps::temporary_name(&dir.path().join("a.tif"), std::process::id());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let record = rt
            .block_on(Record::begin(
                dir.path(),
                &staged,
                "s3://b/a.tif",
                Some("http://127.0.0.1:9"),
                "up-1",
            ))
            .unwrap();
        assert!(left(dir.path()).is_empty(), "this process is alive");
        // The same record as a dead process would have left it.
        let dead = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let name = dead.file_name().unwrap().to_string_lossy().into_owned();
        let pid = std::process::id().to_string();
        let renamed = dead.with_file_name(name.replace(&format!("-{pid}-"), "-4000000-"));
        std::fs::rename(&dead, &renamed).unwrap();
        let found = left(dir.path());
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].url.as_str(), found[0].id.as_str()),
            ("s3://b/a.tif", "up-1")
        );
        assert_eq!(found[0].endpoint.as_deref(), Some("http://127.0.0.1:9"));
        rt.block_on(record.end());
        // A record from before endpoints were kept: no endpoint.
        std::fs::write(&renamed, "s3://b/a.tif\nup-1\n").unwrap();
        assert_eq!(left(dir.path())[0].endpoint, None);
    }
}
