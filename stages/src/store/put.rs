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
//!
//! With `Put::Create` the completion carries `If-None-Match: *` (see
//! [`create`](super::create)): an upload whose name another writer took
//! meanwhile is refused and aborted, and the other's object stays.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use futures::StreamExt;
use object_store::multipart::PartId;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use warpline_engine::StageError;

use super::create::complete_if_absent;
use super::journal::{self, Record};
use super::parts::{part_size, send};
use super::{block_on, stage_error, Client, Config, ObjectUrl, Put, Stores, Uploaded};

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

    /// Uploads the staged `file` as the output `name`, replacing what is
    /// there or, with `Put::Create`, only if nothing is. The parts in
    /// flight stay within `share`, the byte budget the item holds (at
    /// least one part), when it holds one.
    pub(crate) fn upload(
        &self,
        file: &Path,
        name: &str,
        share: Option<u64>,
        put: Put,
    ) -> Result<Uploaded, StageError> {
        self.swept.call_once(|| self.abort_left());
        let (store, path, shown) = self.target(name)?;
        let creating = match put {
            Put::Overwrite => None,
            Put::Create => Some(self.stores.creating(&self.url(name))?),
        };
        let (file, journal) = (file.to_owned(), self.journal.clone());
        let endpoint = self.endpoint.clone();
        block_on(async move {
            let to = Target {
                store,
                creating,
                path,
                shown,
            };
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

/// Where an upload goes: the bucket's client, and with `Put::Create` the
/// one that completes it only if no object has the name.
struct Target {
    store: Arc<dyn Client>,
    creating: Option<Arc<dyn Client>>,
    path: ObjectPath,
    shown: String,
}

async fn upload(
    to: Target,
    file: PathBuf,
    share: Option<u64>,
    (journal, endpoint): (PathBuf, Option<String>),
) -> Result<Uploaded, StageError> {
    let Target {
        store, path, shown, ..
    } = &to;
    let local = |e: std::io::Error| {
        StageError::permanent(format!("{shown}: cannot read {}: {e}", file.display()))
    };
    let mut f = tokio::fs::File::open(&file).await.map_err(local)?;
    let len = f.metadata().await.map_err(local)?.len();
    let part = part_size(len).map_err(|m| StageError::permanent(format!("{shown}: {m}")))?;
    let id = store
        .create_multipart(path)
        .await
        .map_err(|e| stage_error(shown, &e))?;
    let record = Record::begin(&journal, &file, shown, endpoint.as_deref(), &id).await;
    let result = match &record {
        Err(e) => Err(StageError::permanent(format!(
            "{shown}: cannot record the upload in {}: {e}",
            journal.display()
        ))),
        Ok(_) => {
            let file = (&mut f, part, len, share);
            match send(&**store, path, &id, file, shown, &local).await {
                Ok((parts, sent)) => complete(&to, &id, parts, sent).await,
                Err(e) => Err(e),
            }
        }
    };
    if let Ok(Uploaded::Created(_)) = result {
        if let Ok(r) = record {
            r.end().await;
        }
        return result;
    }
    // Failed, or refused (another writer's object has the name): the parts
    // sent are dropped by the server; this upload's object never appears.
    let aborted = store.abort_multipart(path, &id).await;
    if let (Ok(()), Ok(r)) = (&aborted, record) {
        r.end().await;
    }
    // Else the record stays: the next run tries again.
    let not_aborted = |a| {
        let a = stage_error(shown, &a).message;
        format!("the upload could not be aborted (the next run tries again): {a}")
    };
    match (result, aborted) {
        (result, Ok(())) => result,
        (Ok(refused), Err(a)) => {
            tracing::warn!("{shown} was refused; {}", not_aborted(a));
            Ok(refused)
        }
        (Err(error), Err(a)) => Err(StageError::new(
            error.kind,
            format!("{}; {}", error.message, not_aborted(a)),
        )),
    }
}

/// Completes the upload `id` of `sent` bytes: whatever is there is
/// replaced, or with a client that creates, only if nothing is.
async fn complete(
    to: &Target,
    id: &String,
    parts: Vec<PartId>,
    sent: u64,
) -> Result<Uploaded, StageError> {
    let Some(creating) = &to.creating else {
        return to
            .store
            .complete_multipart(&to.path, id, parts)
            .await
            .map(|_| Uploaded::Created(sent))
            .map_err(|e| stage_error(&to.shown, &e));
    };
    let created =
        complete_if_absent(&**creating, &*to.store, (&to.path, id, parts), &to.shown).await?;
    Ok(if created {
        Uploaded::Created(sent)
    } else {
        Uploaded::Refused
    })
}

#[cfg(test)]
mod tests {
    //! Uploads against the test server (`WARPLINE_TEST_S3`, see cli/tests/all/s3/);
    //! skipped without it.

    use object_store::multipart::MultipartStore;

    use super::*;
    use crate::store::parts::PART;
    use crate::store::testing;

    /// An output under a prefix of its own on the test server, with the
    /// test credentials (not the environment's), and its staging
    /// directory (removed when dropped).
    fn output(test: &str) -> Option<(Output, tempfile::TempDir)> {
        let server = testing::server("the upload tests are")?;
        let dir = format!("s3://{}/{}", server.bucket, testing::unique(test));
        let staging = tempfile::tempdir().unwrap();
        let output = Output::parse(&dir, Some(server.endpoint.clone()), staging.path()).unwrap();
        let s3 = super::super::Scheme::S3;
        let store = server.client(&server.endpoint);
        output.stores.insert(s3, &server.bucket, store);
        let creating = server.creating_client(&server.endpoint);
        output.stores.insert_creating(s3, &server.bucket, creating);
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
        // A share of 16 MiB: two parts in flight at most. Created only if
        // absent: the condition rides on the completion of three parts.
        let sent = output.upload(&file, "big.tif", Some(16 << 20), Put::Create);
        assert_eq!(sent.unwrap(), Uploaded::Created(bytes.len() as u64));
        assert!(output.exists("big.tif").unwrap());
        assert!(
            read(&output, "big.tif") == bytes,
            "the object is not the file"
        );
    }

    /// The object `name`'s bytes.
    fn read(output: &Output, name: &str) -> Vec<u8> {
        let (store, path, _) = output.target(name).unwrap();
        let got = block_on(async move {
            let got = store.get(&path).await.map_err(|e| stage_error("", &e))?;
            got.bytes().await.map_err(|e| stage_error("", &e))
        });
        got.unwrap().to_vec()
    }

    /// A second create of one name is refused (If-None-Match: * on the
    /// completion, which s3s-fs honours): the first writer's object stays,
    /// and the refused upload is aborted. `Put::Overwrite` replaces it.
    #[test]
    fn a_second_create_is_refused_and_leaves_the_first_object() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let Some((output, _staging)) = output("create") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("first"), dir.path().join("second"));
        std::fs::write(&first, b"the first writer's").unwrap();
        std::fs::write(&second, b"the second writer's, longer").unwrap();
        let put = |file: &Path, mode| output.upload(file, "a.tif", None, mode).unwrap();
        assert_eq!(put(&first, Put::Create), Uploaded::Created(18));
        let before = uploads_in_progress();
        assert_eq!(put(&second, Put::Create), Uploaded::Refused);
        assert_eq!(read(&output, "a.tif"), b"the first writer's");
        if let (Some(before), Some(after)) = (before, uploads_in_progress()) {
            assert_eq!(before, after, "the refused upload was not aborted");
        }
        let records = std::fs::read_dir(&output.journal).unwrap().count();
        assert_eq!(records, 0, "the refused upload's record stays");
        assert_eq!(put(&second, Put::Overwrite), Uploaded::Created(27));
        assert_eq!(read(&output, "a.tif"), b"the second writer's, longer");
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
        let error = output
            .upload(dir.path(), "a.tif", None, Put::Create)
            .unwrap_err();
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
        let part = rt.block_on(client.put_part(
            &path,
            &id,
            0,
            object_store::PutPayload::from_static(b"x"),
        ));
        assert!(part.is_err(), "the upload is still open at the server");
    }
}
