//! Uploading the write stage's outputs: `dir = "s3://BUCKET/PREFIX"`.
//!
//! The file GDAL wrote (under a temporary name, in a local staging
//! directory) is sent with a multipart upload, parts of 8 MiB, up to 4 in
//! flight: S3 shows the object only when the upload is completed, so no
//! partial object is ever under the final key. An upload that fails is
//! aborted (the parts sent are dropped by the server); one a killed run
//! left is aborted by the next run (see [`journal`](super::journal)).
//! `exists = "skip"` asks with a HEAD request.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use object_store::aws::AmazonS3;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::AsyncReadExt;
use warpline_engine::StageError;

use super::journal::{self, Record};
use super::{block_on, stage_error, Config, S3Url, Stores};

/// The size of each uploaded part (S3's least is 5 MiB, but for the last).
const PART: usize = 8 << 20;

/// Parts in flight at once, per upload.
const PARTS_IN_FLIGHT: usize = 4;

/// Where outputs are uploaded.
#[derive(Debug)]
pub(crate) struct Output {
    bucket: String,
    prefix: String,
    stores: Stores,
    /// Where the records of uploads in progress are.
    journal: PathBuf,
    /// The uploads dead processes left are aborted once, before the first.
    swept: Once,
}

impl Output {
    /// Parses `s3://BUCKET[/PREFIX]`; `endpoint` as the stage sets it;
    /// `staging` the local directory files are written in before upload.
    pub(crate) fn parse(
        dir: &str,
        endpoint: Option<String>,
        staging: &Path,
    ) -> Result<Self, String> {
        let url = S3Url::parse(dir)?;
        let prefix = url.key.trim_matches('/').to_owned();
        Ok(Output {
            bucket: url.bucket,
            prefix,
            stores: Stores::new(Config {
                endpoint,
                // A part, a HEAD are asked again a few times: the stage
                // itself is not tried again by default.
                retries: 3,
                // For a part of 8 MiB: 28 KiB/s at least.
                timeout: Some(std::time::Duration::from_secs(300)),
                ..Config::default()
            }),
            journal: journal::dir(staging),
            swept: Once::new(),
        })
    }

    /// The output's key: the prefix, then `name` (a relative path).
    fn url(&self, name: &str) -> S3Url {
        let key = if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}/{name}", self.prefix)
        };
        S3Url {
            bucket: self.bucket.clone(),
            key,
        }
    }

    /// The output's URL, for messages and the item's payload.
    pub(crate) fn shown(&self, name: &str) -> String {
        self.url(name).to_string()
    }

    fn target(&self, name: &str) -> Result<(Arc<AmazonS3>, ObjectPath, String), StageError> {
        let url = self.url(name);
        Ok((
            self.stores.bucket(&url.bucket)?,
            url.path()?,
            url.to_string(),
        ))
    }

    /// Whether the output is there (HEAD).
    pub(crate) fn exists(&self, name: &str) -> Result<bool, StageError> {
        let (store, path, shown) = self.target(name)?;
        block_on(async move {
            match store.head(&path).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(stage_error(&shown, &e)),
            }
        })
    }

    /// Uploads the staged `file` as the output `name`; the bytes sent.
    pub(crate) fn upload(&self, file: &Path, name: &str) -> Result<u64, StageError> {
        self.swept.call_once(|| self.abort_left());
        let (store, path, shown) = self.target(name)?;
        let (file, journal) = (file.to_owned(), self.journal.clone());
        block_on(async move { upload(store, path, file, shown, journal).await })
    }

    /// Aborts the uploads that dead processes left.
    fn abort_left(&self) {
        let mut aborted = 0;
        for left in journal::left(&self.journal) {
            let result = S3Url::parse(&left.url)
                .map_err(StageError::permanent)
                .and_then(|url| Ok((self.stores.bucket(&url.bucket)?, url.path()?)))
                .and_then(|(store, path)| {
                    let (url, id) = (left.url.clone(), left.id.clone());
                    block_on(async move {
                        match store.abort_multipart(&path, &id).await {
                            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                            Err(e) => Err(stage_error(&url, &e)),
                        }
                    })
                });
            match result {
                Ok(()) => {
                    let _ = std::fs::remove_file(&left.record);
                    aborted += 1;
                }
                Err(e) => tracing::warn!(
                    "cannot abort the upload a dead process left ({}): {}",
                    left.record.display(),
                    e.message
                ),
            }
        }
        if aborted > 0 {
            tracing::info!("aborted {aborted} upload(s) left by processes that died");
        }
    }

    /// Checks before a run that the bucket answers with these credentials
    /// (a listing of at most one page under the prefix).
    pub(crate) fn check(&self) -> Vec<String> {
        let (store, prefix) = match self.stores.bucket(&self.bucket) {
            Ok(s) => (s, ObjectPath::from(self.prefix.as_str())),
            Err(e) => return vec![e.message],
        };
        let shown = self.shown("");
        let result = block_on(async move {
            match store.list(Some(&prefix)).next().await {
                Some(Err(e)) => Err(stage_error(&shown, &e)),
                _ => Ok(()),
            }
        });
        match result {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!("output bucket cannot be listed: {}", e.message)],
        }
    }
}

async fn upload(
    store: Arc<AmazonS3>,
    path: ObjectPath,
    file: PathBuf,
    shown: String,
    journal: PathBuf,
) -> Result<u64, StageError> {
    let local = |e: std::io::Error| {
        StageError::permanent(format!("{shown}: cannot read {}: {e}", file.display()))
    };
    let mut f = tokio::fs::File::open(&file).await.map_err(local)?;
    let id = store
        .create_multipart(&path)
        .await
        .map_err(|e| stage_error(&shown, &e))?;
    let record = Record::begin(&journal, &file, &shown, &id);
    let result = match &record {
        Err(e) => Err(StageError::permanent(format!(
            "{shown}: cannot record the upload in {}: {e}",
            journal.display()
        ))),
        Ok(_) => match send(&store, &path, &id, &mut f, &shown, &local).await {
            Ok((parts, sent)) => store
                .complete_multipart(&path, &id, parts)
                .await
                .map(|_| sent)
                .map_err(|e| stage_error(&shown, &e)),
            Err(e) => Err(e),
        },
    };
    let error = match result {
        Ok(sent) => {
            record.map(Record::end).ok();
            return Ok(sent);
        }
        Err(error) => error,
    };
    // The parts sent are dropped by the server; the object never appears.
    match store.abort_multipart(&path, &id).await {
        Ok(()) => {
            record.map(Record::end).ok();
            Err(error)
        }
        // The record stays: the next run tries again.
        Err(a) => Err(StageError::new(
            error.kind,
            format!(
                "{}; the upload could not be aborted (the next run tries again): {}",
                error.message,
                stage_error(&shown, &a).message
            ),
        )),
    }
}

/// Sends the file's parts, [`PARTS_IN_FLIGHT`] at a time; their ids in
/// order, and the bytes sent.
async fn send(
    store: &AmazonS3,
    path: &ObjectPath,
    id: &String,
    f: &mut tokio::fs::File,
    shown: &str,
    local: &impl Fn(std::io::Error) -> StageError,
) -> Result<(Vec<PartId>, u64), StageError> {
    let mut in_flight = FuturesUnordered::new();
    let mut parts: Vec<Option<PartId>> = Vec::new();
    let mut sent = 0u64;
    loop {
        let mut chunk = Vec::with_capacity(PART);
        (&mut *f)
            .take(PART as u64)
            .read_to_end(&mut chunk)
            .await
            .map_err(local)?;
        let last = chunk.len() < PART;
        // An empty file is one empty part; else no part is empty.
        if !chunk.is_empty() || parts.is_empty() {
            let idx = parts.len();
            parts.push(None);
            sent += chunk.len() as u64;
            let payload = PutPayload::from(chunk);
            in_flight.push(async move { (idx, store.put_part(path, id, idx, payload).await) });
        }
        while in_flight.len() >= PARTS_IN_FLIGHT || (last && !in_flight.is_empty()) {
            let Some((idx, result)) = in_flight.next().await else {
                break;
            };
            parts[idx] = Some(result.map_err(|e| stage_error(shown, &e))?);
        }
        if last {
            return Ok((parts.into_iter().flatten().collect(), sent));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Uploads against the test server (`WARPLINE_TEST_S3`, see cli/tests/all/s3/);
    //! skipped without it.

    use super::*;
    use crate::store::testing;

    /// An output under a prefix of its own on the test server, with the
    /// test credentials (not the environment's).
    fn output(test: &str) -> Option<Output> {
        let server = testing::server("the upload tests are")?;
        let dir = format!("s3://{}/{}", server.bucket, testing::unique(test));
        let staging = std::env::temp_dir().join(testing::unique("staging"));
        let output = Output::parse(&dir, Some(server.endpoint.clone()), &staging).unwrap();
        let store = server.client(&server.endpoint);
        output
            .stores
            .by_bucket
            .lock()
            .unwrap()
            .insert(server.bucket, store);
        Some(output)
    }

    /// The uploads in progress on the server, if the test says where its
    /// directory is (`WARPLINE_TEST_S3_ROOT`; s3s-fs keeps one
    /// `.upload-ID.json` per upload there).
    fn uploads_in_progress() -> Option<std::collections::BTreeSet<String>> {
        let root = std::env::var("WARPLINE_TEST_S3_ROOT").ok()?;
        Some(
            std::fs::read_dir(root)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".upload"))
                .collect(),
        )
    }

    /// One upload test at a time: the abort test counts the server's
    /// uploads in progress.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_large_file_is_sent_in_parts_and_appears_whole() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let Some(output) = output("parts") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.tif");
        // 2.5 parts of bytes that differ from part to part.
        let bytes: Vec<u8> = (0..PART * 5 / 2).map(|i| (i % 251) as u8).collect();
        std::fs::write(&file, &bytes).unwrap();
        assert!(!output.exists("big.tif").unwrap());
        assert_eq!(output.upload(&file, "big.tif").unwrap(), bytes.len() as u64);
        assert!(output.exists("big.tif").unwrap());
        let (store, path, _) = output.target("big.tif").unwrap();
        let got = block_on(async move {
            let got = store.get(&path).await.map_err(|e| stage_error("", &e))?;
            got.bytes().await.map_err(|e| stage_error("", &e))
        })
        .unwrap();
        assert!(got == bytes, "the object is not the file");
    }

    #[test]
    fn an_upload_that_fails_is_aborted_and_leaves_no_object() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let Some(output) = output("abort") else {
            return;
        };
        let before = uploads_in_progress();
        // A directory opens but cannot be read: the upload is begun, then
        // its first read fails.
        let dir = tempfile::tempdir().unwrap();
        let error = output.upload(dir.path(), "a.tif").unwrap_err();
        assert!(error.message.contains("cannot read"), "{}", error.message);
        assert!(error.message.contains("/a.tif"), "{}", error.message);
        assert!(!output.exists("a.tif").unwrap(), "no object appears");
        if let (Some(before), Some(after)) = (before, uploads_in_progress()) {
            assert_eq!(before, after, "the upload was not aborted");
        } else {
            eprintln!("WARPLINE_TEST_S3_ROOT is not set: the server's uploads are not looked at");
        }
    }
}
