//! Uploading the write stage's outputs: `dir = "s3://BUCKET/PREFIX"`.
//!
//! The file GDAL wrote (under a temporary name, in a local staging
//! directory) is sent with a multipart upload, parts of 8 MiB, up to 4 in
//! flight: S3 shows the object only when the upload is completed, so no
//! partial object is ever under the final key. An upload that fails is
//! aborted (the parts sent are dropped by the server). `exists = "skip"`
//! asks with a HEAD request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::aws::AmazonS3;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio::io::AsyncReadExt;
use warpline_engine::StageError;

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
}

impl Output {
    /// Parses `s3://BUCKET[/PREFIX]`; `endpoint` as the stage sets it.
    pub(crate) fn parse(dir: &str, endpoint: Option<String>) -> Result<Self, String> {
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

    /// Uploads `file` as the output `name`; the bytes sent.
    pub(crate) fn upload(&self, file: &Path, name: &str) -> Result<u64, StageError> {
        let (store, path, shown) = self.target(name)?;
        let file = file.to_owned();
        block_on(async move { upload(store, path, file, shown).await })
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
            use futures::StreamExt;
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
) -> Result<u64, StageError> {
    let local = |e: std::io::Error| {
        StageError::permanent(format!("{shown}: cannot read {}: {e}", file.display()))
    };
    let mut f = tokio::fs::File::open(&file).await.map_err(local)?;
    let upload = store
        .put_multipart(&path)
        .await
        .map_err(|e| stage_error(&shown, &e))?;
    let mut parts = WriteMultipart::new_with_chunk_size(upload, PART);
    let mut buf = vec![0u8; 1 << 20];
    let mut sent = 0u64;
    let failed = loop {
        let n = match f.read(&mut buf).await {
            Ok(0) => break None,
            Ok(n) => n,
            Err(e) => break Some(local(e)),
        };
        if let Err(e) = parts.wait_for_capacity(PARTS_IN_FLIGHT).await {
            break Some(stage_error(&shown, &e));
        }
        parts.write(&buf[..n]);
        sent += n as u64;
    };
    if let Some(error) = failed {
        // The parts sent are dropped by the server; the object never
        // appears. An abort that fails leaves them to the bucket's
        // lifecycle rule (AbortIncompleteMultipartUpload).
        let aborted = parts.abort().await.map_err(|e| stage_error(&shown, &e));
        return Err(match aborted {
            Ok(()) => error,
            Err(a) => StageError::new(
                error.kind,
                format!(
                    "{}; the upload could not be aborted: {}",
                    error.message, a.message
                ),
            ),
        });
    }
    parts.finish().await.map_err(|e| stage_error(&shown, &e))?;
    Ok(sent)
}

#[cfg(test)]
mod tests {
    //! Uploads against the test server (`WARPLINE_TEST_S3`, see tests/s3.rs);
    //! skipped without it.

    use super::*;
    use crate::store::testing;

    /// An output under a prefix of its own on the test server, with the
    /// test credentials (not the environment's).
    fn output(test: &str) -> Option<Output> {
        let server = testing::server("the upload tests are")?;
        let dir = format!("s3://{}/{}", server.bucket, testing::unique(test));
        let output = Output::parse(&dir, Some(server.endpoint.clone())).unwrap();
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
