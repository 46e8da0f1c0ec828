//! The test server: a client of its bucket with the test credentials, and
//! the `warpline` binary run against it. The same for Azurite (`az://`,
//! see ../azure/), with `scheme` "az", and fake-gcs-server (`gs://`, see
//! ../gcs/), with `scheme` "gs".

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::common;

pub struct S3 {
    /// "s3", "az" for Azurite, "gs" for fake-gcs-server.
    pub scheme: &'static str,
    /// The server (Azurite: the account's URL).
    pub endpoint: String,
    pub key: String,
    pub secret: String,
    pub bucket: String,
    pub prefix: String,
    pub store: Arc<dyn ObjectStore>,
    pub rt: tokio::runtime::Runtime,
}

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The test server, with a prefix of the test's own; `None` (and a message)
/// when `WARPLINE_TEST_S3` is not set.
pub fn s3(test: &str) -> Option<S3> {
    let Ok(endpoint) = std::env::var("WARPLINE_TEST_S3") else {
        eprintln!("WARPLINE_TEST_S3 is not set: the S3 tests are skipped");
        return None;
    };
    let (key, secret) = (
        var("WARPLINE_TEST_S3_KEY", "warpline-test"),
        var("WARPLINE_TEST_S3_SECRET", "warpline-test-secret"),
    );
    let bucket = var("WARPLINE_TEST_S3_BUCKET", "warpline-test");
    let store = AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(&bucket)
        .with_access_key_id(&key)
        .with_secret_access_key(&secret)
        .with_retry(retry())
        .build()
        .unwrap();
    S3 {
        scheme: "s3",
        endpoint,
        key,
        secret,
        bucket,
        prefix: prefix(test),
        store: Arc::new(store),
        rt: common::runtime(),
    }
    .answering("WARPLINE_TEST_S3")
}

/// Asked again 3 times (about 1 s), not object_store's 10 (about a
/// minute): a server that is not there fails the tests soon.
pub fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 3,
        ..Default::default()
    }
}

/// A prefix of `test`'s own, in this run.
pub fn prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{test}-{}-{nanos}", std::process::id())
}

impl S3 {
    /// The server, which must answer (`var` names where it was given).
    pub fn answering(self, var: &str) -> Option<Self> {
        // A server that does not answer after a few tries is not there.
        let answer = self.rt.block_on(async {
            use futures::StreamExt;
            self.store.list(None).next().await.transpose()
        });
        if let Err(e) = answer {
            panic!(
                "{var}={} is set but bucket {} does not answer: {e}",
                self.endpoint, self.bucket
            );
        }
        Some(self)
    }

    pub fn key_of(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    pub fn url(&self, name: &str) -> String {
        format!("{}://{}/{}", self.scheme, self.bucket, self.key_of(name))
    }

    pub fn put(&self, name: &str, bytes: Vec<u8>) {
        if self.scheme == "gs" {
            // The emulator does not take object_store's uploads.
            return crate::gcs::put(self, &self.key_of(name), &bytes);
        }
        let path = ObjectPath::from(self.key_of(name));
        self.rt
            .block_on(self.store.put(&path, PutPayload::from(bytes)))
            .unwrap();
    }

    /// The object `name`'s bytes.
    pub fn get(&self, name: &str) -> Vec<u8> {
        let path = ObjectPath::from(self.key_of(name));
        let bytes = self
            .rt
            .block_on(async { self.store.get(&path).await?.bytes().await });
        bytes.unwrap_or_else(|e| panic!("{name}: {e}")).to_vec()
    }

    /// Removes the object `name`.
    pub fn delete(&self, name: &str) {
        let path = ObjectPath::from(self.key_of(name));
        self.rt.block_on(self.store.delete(&path)).unwrap();
    }

    /// The keys under `name/`, relative to it.
    pub fn list(&self, name: &str) -> Vec<String> {
        use futures::TryStreamExt;
        let dir = ObjectPath::from(self.key_of(name));
        let mut keys: Vec<String> = self
            .rt
            .block_on(self.store.list(Some(&dir)).try_collect::<Vec<_>>())
            .unwrap()
            .into_iter()
            .map(|m| m.location.as_ref()[dir.as_ref().len() + 1..].to_owned())
            .collect();
        keys.sort();
        keys
    }

    /// Downloads every object under `name/` into `to`.
    pub fn download(&self, name: &str, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for key in self.list(name) {
            let path = ObjectPath::from(self.key_of(&format!("{name}/{key}")));
            let bytes = self
                .rt
                .block_on(async { self.store.get(&path).await?.bytes().await })
                .unwrap();
            std::fs::write(to.join(&key), bytes).unwrap();
        }
    }

    /// The `warpline` binary with these credentials and no others.
    pub fn warpline(&self, secret: &str) -> Command {
        let mut c = warpline();
        if self.scheme == "az" {
            c.env("AZURE_STORAGE_ACCOUNT_NAME", &self.key)
                .env("AZURE_STORAGE_ACCOUNT_KEY", secret);
        } else if self.scheme == "gs" {
            // The service account key, its private key `secret`.
            let key = crate::gcs::key_json(&self.endpoint, secret);
            c.env("GOOGLE_SERVICE_ACCOUNT_KEY", key);
        } else {
            c.env("AWS_ACCESS_KEY_ID", &self.key)
                .env("AWS_SECRET_ACCESS_KEY", secret)
                .env("AWS_REGION", "us-east-1");
        }
        c
    }

    /// Runs `toml` (in `work`) and returns its report, with stdout and
    /// stderr; the exit code must be `code`.
    pub fn run(
        &self,
        work: &Path,
        toml: &str,
        secret: &str,
        code: i32,
    ) -> (serde_json::Value, String) {
        run_with(self.warpline(secret), work, toml, code)
    }
}

/// The `warpline` binary with no S3, Azure or GCS credentials.
pub fn warpline() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_warpline"));
    for (k, _) in std::env::vars() {
        let store = ["AWS_", "AZURE_", "AZURITE_", "GOOGLE_"];
        if store.iter().any(|p| k.starts_with(p)) || k == "SERVICE_ACCOUNT" {
            c.env_remove(k);
        }
    }
    c.env_remove("WARPLINE_LOG");
    c
}

/// Runs `toml` (in `work`) with `command` and returns its report, with
/// stdout and stderr; the exit code must be `code`.
pub fn run_with(
    mut command: Command,
    work: &Path,
    toml: &str,
    code: i32,
) -> (serde_json::Value, String) {
    let file = work.join("pipeline.toml");
    std::fs::write(&file, toml).unwrap();
    let report = work.join("report.json");
    let out = command
        .current_dir(work)
        .arg("run")
        .arg(&file)
        .arg("--report")
        .arg(&report)
        .arg("--failures")
        .arg(work.join("failures.jsonl"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(code), "{text}\n{toml}");
    let json = common::read_json(report);
    (json, text)
}

/// fetch -> decode -> reproject -> write, from `source` (a `[source]` body)
/// to `write` (the write stage's keys besides its kind), against `endpoint`.
pub fn pipeline(source: &str, write: &str, endpoint: &str) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "reproject", "write"]
[source]
{source}
[limits.memory]
budget = "256MiB"
[stages.fetch]
kind = "fetch"
workers = 4
memory = "memory"
endpoint = "{endpoint}"
{decode}{reproject}crs = "EPSG:3857"
resampling = "bilinear"
[stages.write]
kind = "write"
workers = 2
creation_options = {{ COMPRESS = "DEFLATE" }}
{write}
"#,
        decode = memory_stage("decode"),
        reproject = memory_stage("reproject"),
    )
}

/// A `[stages.KIND]` table for decode or reproject: two workers under the
/// `memory` limit, releasing the memory the item held and carrying the
/// memory it holds now (keys of its own may follow).
fn memory_stage(kind: &str) -> String {
    format!(
        r#"[stages.{kind}]
kind = "{kind}"
workers = 2
limits = ["memory"]
release = ["memory"]
carry = ["memory"]
"#
    )
}

pub fn items(report: &serde_json::Value) -> [u64; 4] {
    let n = |k: &str| report["items"][k].as_u64().unwrap();
    [n("total"), n("done"), n("skipped"), n("failed")]
}

pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The uploads in progress at the server, when the test says where its
/// directory is (`WARPLINE_TEST_S3_ROOT`: s3s-fs keeps `.upload-ID.json`
/// there for each).
pub fn uploads_in_progress() -> Option<std::collections::BTreeSet<String>> {
    let root = std::env::var("WARPLINE_TEST_S3_ROOT").ok()?;
    Some(
        std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".upload-"))
            .collect(),
    )
}

/// Holds every other test of this binary off while it lives: a test that
/// counts the uploads in progress at the server must not see another's.
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed holding it left nothing to protect.
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the pipeline over `glob` twice, with fetch's `read = "whole"` and
/// `"window"` (`run` runs a pipeline file's text against the store), and
/// asserts every tile was done both ways with the same pixels.
pub fn window_equals_whole(
    work: &Path,
    glob: &str,
    endpoint: &str,
    tiles: &[std::path::PathBuf],
    run: impl Fn(&str) -> (serde_json::Value, String),
) {
    let n = tiles.len() as u64;
    let mut outs = Vec::new();
    for read in ["whole", "window"] {
        let out = work.join(read);
        let write = format!("dir = \"{}\"", out.display());
        let toml = pipeline(glob, &write, endpoint).replace(
            "memory = \"memory\"\nendpoint",
            &format!("memory = \"memory\"\nread = \"{read}\"\nendpoint"),
        );
        assert!(toml.contains(&format!("read = \"{read}\"")), "{toml}");
        let (report, text) = run(&toml);
        assert_eq!(items(&report), [n, n, 0, 0], "{read}: {text}");
        outs.push(out);
    }
    for t in tiles {
        let name = t.file_name().unwrap();
        let what = name.to_string_lossy();
        crate::common::assert_same_raster(&outs[1].join(name), &outs[0].join(name), &what);
    }
}
