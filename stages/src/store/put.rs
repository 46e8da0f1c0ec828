//! Uploading the write stage's outputs: `dir = "s3://BUCKET/PREFIX"` or
//! `"az://CONTAINER/PREFIX"`.
//!
//! The file GDAL wrote (under a temporary name, in a local staging
//! directory) is sent with a multipart upload, parts of 8 MiB (larger for a
//! file over 78 GiB: S3 takes at most 10,000 parts), up to 32 MiB of them in
//! flight: the store shows the object only when the upload is completed,
//! so no partial object is ever under the final key. On Azure the parts
//! are staged blocks (Put Block) and completing commits their list (Put
//! Block List); until then the blob does not exist.
//!
//! An upload that fails is aborted; one a killed run left is aborted by the
//! next run (see [`journal`](super::journal)). On S3 aborting drops the
//! parts sent. Azure has no call that drops staged blocks: `object_store`'s
//! abort does nothing, and the server drops uncommitted blocks itself a
//! week after the last one was staged, or when the next upload of the same
//! blob commits its own list; nothing is visible meanwhile.
//! `exists = "skip"` asks with a HEAD request.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use object_store::multipart::PartId;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use tokio::io::AsyncReadExt;
use warpline_engine::StageError;

use super::journal::{self, Record};
use super::{block_on, stage_error, Client, Config, ObjectUrl, Stores};

/// The size of each uploaded part, for a file of at most
/// `PART * MAX_PARTS` bytes (78 GiB).
const PART: u64 = 8 << 20;

/// S3's limits on a multipart upload: at most 10,000 parts, each at most
/// 5 GiB (and at least 5 MiB but for the last, which `PART` is over).
const MAX_PARTS: u64 = 10_000;
const MAX_PART: u64 = 5 << 30;

/// The bytes of parts in flight at once, per upload (at least one part).
const IN_FLIGHT_BYTES: u64 = 32 << 20;

/// The part size for a file of `len` bytes: `PART`, or for a larger file
/// the least whole number of MiB that makes it at most `MAX_PARTS` parts.
fn part_size(len: u64) -> Result<u64, String> {
    let least = len.div_ceil(MAX_PARTS).div_ceil(1 << 20) << 20;
    let part = PART.max(least);
    if part > MAX_PART {
        return Err(format!(
            "{len} bytes is over S3's largest object in {MAX_PARTS} parts of 5 GiB"
        ));
    }
    Ok(part)
}

/// How many parts of `part` bytes are sent at once: `IN_FLIGHT_BYTES` of
/// them, or no more than `share` (the byte budget the item holds) when it
/// has one; at least one part.
fn parts_in_flight(part: u64, share: Option<u64>) -> usize {
    let room = share.map_or(IN_FLIGHT_BYTES, |s| s.min(IN_FLIGHT_BYTES));
    (room / part).max(1) as usize
}

/// Where outputs are uploaded.
#[derive(Debug)]
pub(crate) struct Output {
    /// The bucket, with the prefix as its key.
    bucket: ObjectUrl,
    stores: Arc<Stores>,
    /// The server uploads go to (the `endpoint` setting, else
    /// `AWS_ENDPOINT_URL` / `AZURE_STORAGE_ENDPOINT`; `None`: the cloud's),
    /// kept in each upload's record.
    endpoint: Option<String>,
    /// Clients of the servers that uploads a dead process left were begun
    /// at, when not `endpoint`.
    elsewhere: std::sync::Mutex<std::collections::HashMap<String, Arc<Stores>>>,
    /// Where the records of uploads in progress are.
    journal: PathBuf,
    /// The uploads dead processes left are aborted once, before the first.
    swept: Once,
}

impl Output {
    /// Parses `s3://BUCKET[/PREFIX]` or `az://CONTAINER[/PREFIX]` (a
    /// store that is not written, `gs://`, is refused);
    /// `endpoint` as the stage sets it;
    /// `staging` the local directory files are written in before upload.
    pub(crate) fn parse(
        dir: &str,
        endpoint: Option<String>,
        staging: &Path,
    ) -> Result<Self, String> {
        let url = ObjectUrl::parse(dir)?;
        url.scheme.writes()?;
        let prefix = url.key.trim_matches('/').to_owned();
        let config = Config {
            endpoint,
            // A part, a HEAD are asked again a few times: the stage
            // itself is not tried again by default.
            retries: 3,
            // For a part of 8 MiB: 28 KiB/s at least.
            timeout: Some(std::time::Duration::from_secs(300)),
            ..Config::default()
        };
        // The server the client will talk to, as its builder resolves it.
        let effective = super::endpoint_of(&config, &url);
        Ok(Output {
            bucket: url.with_key(prefix),
            endpoint: effective,
            elsewhere: Default::default(),
            stores: Arc::new(Stores::new(config)),
            journal: journal::dir(staging),
            swept: Once::new(),
        })
    }

    /// The output's key: the prefix, then `name` (a relative path).
    fn url(&self, name: &str) -> ObjectUrl {
        let prefix = &self.bucket.key;
        if prefix.is_empty() {
            self.bucket.with_key(name)
        } else {
            self.bucket.with_key(format!("{prefix}/{name}"))
        }
    }

    /// The output's URL, for messages and the item's payload.
    pub(crate) fn shown(&self, name: &str) -> String {
        self.url(name).to_string()
    }

    /// The client, path and shown URL of the output `name`.
    pub(crate) fn target(
        &self,
        name: &str,
    ) -> Result<(Arc<dyn Client>, ObjectPath, String), StageError> {
        let url = self.url(name);
        Ok((self.stores.bucket(&url)?, url.path()?, url.to_string()))
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

    /// Uploads the staged `file` as the output `name`; the bytes sent. The
    /// parts in flight stay within `share`, the byte budget the item holds
    /// (at least one part), when it holds one.
    pub(crate) fn upload(
        &self,
        file: &Path,
        name: &str,
        share: Option<u64>,
    ) -> Result<u64, StageError> {
        self.swept.call_once(|| self.abort_left());
        let (store, path, shown) = self.target(name)?;
        let (file, journal) = (file.to_owned(), self.journal.clone());
        let endpoint = self.endpoint.clone();
        block_on(async move {
            let to = Target { store, path, shown };
            upload(to, file, share, (journal, endpoint)).await
        })
    }

    /// Aborts the uploads that dead processes left.
    fn abort_left(&self) {
        let mut aborted = 0;
        for left in journal::left(&self.journal) {
            let result = ObjectUrl::parse(&left.url)
                .map_err(StageError::permanent)
                .and_then(|url| {
                    let stores = self.stores_at(left.endpoint.as_deref());
                    Ok((stores.bucket(&url)?, url.path()?))
                })
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

    /// The clients of the server at `endpoint` (the output's own when it is
    /// that server, or when a record does not say).
    fn stores_at(&self, endpoint: Option<&str>) -> Arc<Stores> {
        let Some(endpoint) = endpoint.filter(|e| Some(*e) != self.endpoint.as_deref()) else {
            return Arc::clone(&self.stores);
        };
        // A poisoned map is still a valid map (one insert at a time).
        let mut map = self.elsewhere.lock().unwrap_or_else(|p| p.into_inner());
        let stores = map.entry(endpoint.to_owned()).or_insert_with(|| {
            Arc::new(Stores::new(Config {
                endpoint: Some(endpoint.to_owned()),
                retries: 3,
                ..Config::default()
            }))
        });
        Arc::clone(stores)
    }

    /// Checks before a run that the bucket answers with these credentials
    /// (a listing of at most one page under the prefix).
    pub(crate) fn check(&self) -> Vec<String> {
        let (store, prefix) = match self.stores.bucket(&self.bucket) {
            Ok(s) => (s, ObjectPath::from(self.bucket.key.as_str())),
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
            Err(e) => vec![format!(
                "output {} cannot be listed: {}",
                self.bucket.scheme.bucket_word(),
                e.message
            )],
        }
    }
}

/// Where an upload goes.
struct Target {
    store: Arc<dyn Client>,
    path: ObjectPath,
    shown: String,
}

async fn upload(
    Target { store, path, shown }: Target,
    file: PathBuf,
    share: Option<u64>,
    (journal, endpoint): (PathBuf, Option<String>),
) -> Result<u64, StageError> {
    let local = |e: std::io::Error| {
        StageError::permanent(format!("{shown}: cannot read {}: {e}", file.display()))
    };
    let mut f = tokio::fs::File::open(&file).await.map_err(local)?;
    let len = f.metadata().await.map_err(local)?.len();
    let part = part_size(len).map_err(|m| StageError::permanent(format!("{shown}: {m}")))?;
    let id = store
        .create_multipart(&path)
        .await
        .map_err(|e| stage_error(&shown, &e))?;
    let record = Record::begin(&journal, &file, &shown, endpoint.as_deref(), &id).await;
    let result = match &record {
        Err(e) => Err(StageError::permanent(format!(
            "{shown}: cannot record the upload in {}: {e}",
            journal.display()
        ))),
        Ok(_) => match send(
            &*store,
            &path,
            &id,
            (&mut f, part, len, share),
            &shown,
            &local,
        )
        .await
        {
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
            if let Ok(r) = record {
                r.end().await;
            }
            return Ok(sent);
        }
        Err(error) => error,
    };
    // The parts sent are dropped by the server; the object never appears.
    match store.abort_multipart(&path, &id).await {
        Ok(()) => {
            if let Ok(r) = record {
                r.end().await;
            }
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

/// Sends the file's parts of `part` bytes, [`parts_in_flight`] at a time;
/// their ids in order, and the bytes sent.
async fn send(
    store: &dyn Client,
    path: &ObjectPath,
    id: &String,
    (f, part, len, share): (&mut tokio::fs::File, u64, u64, Option<u64>),
    shown: &str,
    local: &impl Fn(std::io::Error) -> StageError,
) -> Result<(Vec<PartId>, u64), StageError> {
    let mut in_flight = FuturesUnordered::new();
    let mut parts: Vec<Option<PartId>> = Vec::new();
    let mut sent = 0u64;
    let at_once = parts_in_flight(part, share);
    loop {
        // No more room than the part needs (a small file's one part is
        // small). A part is at most 5 GiB (`part_size`): it fits a usize on
        // the 64-bit targets warpline builds for; else `read_to_end` grows
        // the buffer all the same.
        let room = part.min(len.saturating_sub(sent));
        let mut chunk = Vec::with_capacity(usize::try_from(room).unwrap_or(0));
        (&mut *f)
            .take(part)
            .read_to_end(&mut chunk)
            .await
            .map_err(local)?;
        let last = (chunk.len() as u64) < part;
        // An empty file is one empty part; else no part is empty.
        if !chunk.is_empty() || parts.is_empty() {
            let idx = parts.len();
            parts.push(None);
            sent += chunk.len() as u64;
            let payload = PutPayload::from(chunk);
            in_flight.push(async move { (idx, store.put_part(path, id, idx, payload).await) });
        }
        while in_flight.len() >= at_once || (last && !in_flight.is_empty()) {
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

    use object_store::multipart::MultipartStore;

    use super::*;
    use crate::store::testing;

    /// An output under a prefix of its own on the test server, with the
    /// test credentials (not the environment's), and its staging
    /// directory (removed when dropped).
    fn output(test: &str) -> Option<(Output, tempfile::TempDir)> {
        let server = testing::server("the upload tests are")?;
        let dir = format!("s3://{}/{}", server.bucket, testing::unique(test));
        let staging = tempfile::tempdir().unwrap();
        let output = Output::parse(&dir, Some(server.endpoint.clone()), staging.path()).unwrap();
        let store = server.client(&server.endpoint);
        output
            .stores
            .insert(super::super::Scheme::S3, &server.bucket, store);
        Some((output, staging))
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

    /// S3 takes at most 10,000 parts of at least 5 MiB (but the last) and
    /// at most 5 GiB: with 8 MiB parts, a file over 78 GiB could not be
    /// sent.
    #[test]
    fn parts_are_sized_from_the_file_within_s3s_limits() {
        for len in [0, 1, PART, 78 << 30, 100 << 30, 1 << 40, 5 << 40] {
            let part = part_size(len).unwrap();
            assert!((5 << 20..=MAX_PART).contains(&part), "{len}: {part}");
            assert!(len.div_ceil(part) <= MAX_PARTS, "{len}: {part}");
            assert_eq!(part % (1 << 20), 0);
            assert!(parts_in_flight(part, None) as u64 * part <= IN_FLIGHT_BYTES.max(part));
        }
        assert_eq!(part_size(PART * MAX_PARTS).unwrap(), PART);
        assert_eq!(part_size(PART * MAX_PARTS + 1).unwrap(), PART + (1 << 20));
        assert_eq!(parts_in_flight(PART, None), 4);
        // Within the item's share of the budget, at least one part.
        assert_eq!(parts_in_flight(PART, Some(20 << 20)), 2);
        assert_eq!(parts_in_flight(PART, Some(1 << 20)), 1);
        assert_eq!(parts_in_flight(PART, Some(1 << 30)), 4);
        assert!(part_size(MAX_PART * MAX_PARTS + 1).is_err());
    }

    #[test]
    fn a_large_file_is_sent_in_parts_and_appears_whole() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let Some((output, _staging)) = output("parts") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.tif");
        // 2.5 parts of bytes that differ from part to part.
        let bytes: Vec<u8> = (0..PART as usize * 5 / 2)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&file, &bytes).unwrap();
        assert!(!output.exists("big.tif").unwrap());
        // A share of 16 MiB: two parts in flight at most.
        let sent = output.upload(&file, "big.tif", Some(16 << 20)).unwrap();
        assert_eq!(sent, bytes.len() as u64);
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
        let Some((output, _staging)) = output("abort") else {
            return;
        };
        let before = uploads_in_progress();
        // A directory opens but cannot be read: the upload is begun, then
        // its first read fails.
        let dir = tempfile::tempdir().unwrap();
        let error = output.upload(dir.path(), "a.tif", None).unwrap_err();
        assert!(error.message.contains("cannot read"), "{}", error.message);
        assert!(error.message.contains("/a.tif"), "{}", error.message);
        assert!(!output.exists("a.tif").unwrap(), "no object appears");
        if let (Some(before), Some(after)) = (before, uploads_in_progress()) {
            assert_eq!(before, after, "the upload was not aborted");
        } else {
            eprintln!("WARPLINE_TEST_S3_ROOT is not set: the server's uploads are not looked at");
        }
    }

    /// An upload a dead process left at another server than this run's
    /// `endpoint` is aborted at the server its record names.
    #[test]
    fn an_upload_left_is_aborted_at_the_server_it_was_begun_at() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let Some(server) = testing::server("the upload tests are") else {
            return;
        };
        let staging = tempfile::tempdir().unwrap();
        let dir = format!("s3://{}/{}", server.bucket, testing::unique("left"));
        // This run's own server is not the one the upload was begun at.
        let output =
            Output::parse(&dir, Some("http://127.0.0.1:9".into()), staging.path()).unwrap();
        let there = Stores::default();
        there.insert(
            super::super::Scheme::S3,
            &server.bucket,
            server.client(&server.endpoint),
        );
        output
            .elsewhere
            .lock()
            .unwrap()
            .insert(server.endpoint.clone(), Arc::new(there));
        // The test's own client, on its own runtime (a client's pooled
        // connections belong to the runtime that made them).
        let client = server.client(&server.endpoint);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = output.url("a.tif");
        let path = url.path().unwrap();
        let staged = crate::temps::temporary_name(&staging.path().join("a.tif"), 4_000_000);
        let id = rt
            .block_on(async {
                let id = client
                    .create_multipart(&path)
                    .await
                    .map_err(|e| stage_error("", &e))?;
                let shown = url.to_string();
                Record::begin(
                    &output.journal,
                    &staged,
                    &shown,
                    Some(&server.endpoint),
                    &id,
                )
                .await
                .map_err(|e| StageError::permanent(e.to_string()))?;
                Ok::<_, StageError>(id)
            })
            .unwrap();
        assert_eq!(journal::left(&output.journal).len(), 1);
        output.abort_left();
        assert!(
            journal::left(&output.journal).is_empty(),
            "the record stays"
        );
        let part = rt.block_on(client.put_part(&path, &id, 0, PutPayload::from_static(b"x")));
        assert!(part.is_err(), "the upload is still open at the server");
    }
}
