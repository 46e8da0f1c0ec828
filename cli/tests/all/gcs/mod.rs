//! Google Cloud Storage (issue 22): `gs://` inputs against fake-gcs-server,
//! the GCS emulator, on loopback. The S3 tests' helpers (../s3/server.rs)
//! with `scheme = "gs"`.
//!
//! Needs `WARPLINE_TEST_GCS=http://127.0.0.1:PORT` (`scripts/test.sh` starts
//! the emulator with `-public-host 127.0.0.1:PORT`, without which it does
//! not route the XML API `object_store` uses) and a bucket in
//! `WARPLINE_TEST_GCS_BUCKET` (default `warpline-test`), which the tests
//! create. Without the variable these tests say they are skipped; with it,
//! a server that does not answer fails them.
//!
//! The emulator checks no credentials: any bearer token, or none, is
//! accepted. So there is no wrong-credentials test here; a missing bucket
//! failing permanently and naming the bucket stands in for it, and the
//! service account key warpline is given (`GOOGLE_SERVICE_ACCOUNT_KEY`, a
//! JSON with `gcs_base_url` and `disable_oauth`, as object_store's own CI
//! configures it) carries a private key that must never be printed.
//!
//! `gs://` is read, not written: fake-gcs-server 1.54 does not take the
//! XML API uploads `object_store` makes (a PUT of the object, a multipart
//! upload), so warpline refuses `gs://` outputs (docs/pipeline.md). The
//! test of that answer fails the day the emulator takes them, to say that
//! writes can then be tested and allowed.

use std::io::{Read, Write};
use std::path::Path;

use object_store::gcp::{GoogleCloudStorage, GoogleCloudStorageBuilder};

use crate::common;
use crate::s3::server::{self, files, items, pipeline, serial, S3};

/// The private key of the tests' service account key: not a key (the
/// emulator asks for none), but a secret that must never be shown.
const PRIVATE_KEY: &str =
    "-----BEGIN PRIVATE KEY-----\nqqv-gcs-test-key\n-----END PRIVATE KEY-----\n";

/// A service account key for the emulator at `server`: OAuth disabled, the
/// server named as the base URL, `private_key` its secret.
pub fn key_json(server: &str, private_key: &str) -> String {
    serde_json::json!({
        "type": "service_account",
        "client_email": "warpline-test@warpline-test.iam.gserviceaccount.com",
        "private_key_id": "warpline-test-key-id",
        "private_key": private_key,
        "gcs_base_url": server,
        "disable_oauth": true,
    })
    .to_string()
}

/// The emulator, with a prefix of the test's own in the test bucket (made
/// if missing); `None` (and a message) when `WARPLINE_TEST_GCS` is not
/// set.
fn gcs(test: &str) -> Option<S3> {
    let Ok(server) = std::env::var("WARPLINE_TEST_GCS") else {
        eprintln!("WARPLINE_TEST_GCS is not set: the GCS tests are skipped");
        return None;
    };
    let server = server.trim_end_matches('/').to_owned();
    let bucket =
        std::env::var("WARPLINE_TEST_GCS_BUCKET").unwrap_or_else(|_| "warpline-test".to_owned());
    create_bucket(&server, &bucket);
    let store = client(&server, &bucket);
    S3 {
        scheme: "gs",
        endpoint: server,
        key: String::new(),
        secret: PRIVATE_KEY.to_owned(),
        bucket,
        prefix: server::prefix(test),
        store: std::sync::Arc::new(store),
        rt: common::runtime(),
    }
    .answering("WARPLINE_TEST_GCS")
}

/// A client of `bucket` at the emulator `server`.
fn client(server: &str, bucket: &str) -> GoogleCloudStorage {
    GoogleCloudStorageBuilder::new()
        .with_service_account_key(key_json(server, PRIVATE_KEY))
        .with_bucket_name(bucket)
        .with_retry(server::retry())
        .build()
        .unwrap()
}

/// One request to the emulator's JSON API (object_store speaks only the
/// XML API, whose bucket creation and uploads the emulator lacks): its
/// status and body.
fn request(server: &str, head: &str, content_type: &str, body: &[u8]) -> (String, String) {
    let host = server.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).unwrap_or_else(|e| {
        panic!("WARPLINE_TEST_GCS=http://{host} is set but does not answer: {e}")
    });
    write!(
        stream,
        "{head} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap_or_default().to_owned();
    (status, answer)
}

/// Creates `bucket`; one that exists is fine.
fn create_bucket(server: &str, bucket: &str) {
    let body = serde_json::json!({ "name": bucket }).to_string();
    let (status, answer) = request(
        server,
        "POST /storage/v1/b",
        "application/json",
        body.as_bytes(),
    );
    assert!(
        status == "200" || status == "409",
        "cannot create bucket {bucket} at {server}: {answer}"
    );
}

/// Puts `bytes` as the object `key` of the test's bucket, by the JSON
/// API's media upload.
pub fn put(gs: &S3, key: &str, bytes: &[u8]) {
    // Percent-encoded but for letters, digits and `-._~`.
    let name: String = key
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let head = format!(
        "POST /upload/storage/v1/b/{}/o?uploadType=media&name={name}",
        gs.bucket
    );
    let (status, answer) = request(&gs.endpoint, &head, "application/octet-stream", bytes);
    assert_eq!(status, "200", "cannot upload {key}: {answer}");
}

/// `n` sample tiles (one per CRS and `n`), in the bucket under `in/` and
/// locally under `work/tiles`.
fn tiles_in_bucket(gs: &S3, work: &Path, size: usize) -> Vec<std::path::PathBuf> {
    let tiles = common::sample_files(&work.join("tiles"), 1, size);
    for t in &tiles {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        gs.put(&format!("in/{name}"), std::fs::read(t).unwrap());
    }
    tiles
}

/// Tiles listed by a glob over the bucket and fetched from it equal the
/// same pipeline on the local files, pixel for pixel; keys the pattern
/// does not match are not read; a rerun skips every output; the service
/// account's private key is never printed.
#[test]
fn a_bucket_run_equals_the_local_run_and_a_rerun_skips() {
    let _serial = serial();
    let Some(gs) = gcs("roundtrip") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = tiles_in_bucket(&gs, work.path(), 256);
    gs.put("in/notes.txt", b"not a raster".to_vec());
    gs.put("in/deeper/x.tif", b"not matched".to_vec());
    let n = tiles.len() as u64;

    let local_out = work.path().join("local-out");
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}/*.tif\"",
        work.path().join("tiles").display()
    );
    let write = format!("dir = \"{}\"", local_out.display());
    let toml = pipeline(&glob, &write, &gs.endpoint);
    let (report, text) = gs.run(work.path(), &toml, &gs.secret, 0);
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");

    let out = work.path().join("out");
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}\"\nendpoint = \"{}\"",
        gs.url("in/*.tif"),
        gs.endpoint
    );
    let write = format!("dir = \"{}\"", out.display());
    let toml = pipeline(&glob, &write, &gs.endpoint);
    let (report, text) = gs.run(work.path(), &toml, &gs.secret, 0);
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");
    assert!(!text.contains("qqv"), "the private key was printed: {text}");
    assert!(!report.to_string().contains("qqv"), "{report}");
    let names = |dir: &Path| {
        let mut v: Vec<String> = files(dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&out), names(&local_out), "one output per input");
    for name in names(&local_out) {
        common::assert_same_raster(&out.join(&name), &local_out.join(&name), &name);
    }
    // Per-host limits and the report take the bucket as a host.
    let hosts = report["hosts"].to_string();
    assert!(hosts.contains(&format!("gs://{}", gs.bucket)), "{hosts}");

    let (report, text) = gs.run(work.path(), &toml, &gs.secret, 0);
    assert_eq!(items(&report), [n, 0, n, 0], "{text}");
}

/// `read = "window"` on `gs://` inputs: GDAL reads them by ranged GETs
/// through fetch, and the outputs equal those of whole reads.
#[test]
fn a_window_read_equals_the_whole_read() {
    let _serial = serial();
    let Some(gs) = gcs("window") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = tiles_in_bucket(&gs, work.path(), 256);
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}\"\nendpoint = \"{}\"",
        gs.url("in/*.tif"),
        gs.endpoint
    );
    server::window_equals_whole(work.path(), &glob, &gs.endpoint, &tiles, |toml| {
        gs.run(work.path(), toml, &gs.secret, 0)
    });
}

/// The emulator takes any credentials, so a missing bucket stands in for
/// wrong ones: each of its objects fails once, permanently, naming the
/// bucket; a missing key names the key; a glob over a missing bucket fails
/// once.
#[test]
fn a_missing_bucket_fails_each_item_once_naming_the_bucket() {
    let _serial = serial();
    let Some(gs) = gcs("missing") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = tiles_in_bucket(&gs, work.path(), 64);
    let name = tiles[0].file_name().unwrap().to_string_lossy().into_owned();
    let lines = [
        gs.url(&format!("in/{name}")),
        gs.url("in/missing.tif"),
        "gs://warpline-no-such-bucket/a.tif".to_owned(),
        "gs://warpline-no-such-bucket/b.tif".to_owned(),
    ];
    std::fs::write(work.path().join("list.txt"), lines.join("\n")).unwrap();
    let out = work.path().join("out");
    let source = "kind = \"list\"\npath = \"list.txt\"";
    let write = format!("dir = \"{}\"", out.display());
    let toml = pipeline(source, &write, &gs.endpoint);
    let (report, text) = gs.run(work.path(), &toml, &gs.secret, 3);
    assert_eq!(items(&report), [4, 1, 0, 3], "{text}");
    assert!(out.join(&name).is_file());
    let failures = std::fs::read_to_string(work.path().join("failures.jsonl")).unwrap();
    assert_eq!(failures.lines().count(), 3, "{failures}");
    for line in failures.lines() {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        let message = f["message"].as_str().unwrap();
        let bucket = if f["id"] == "missing" {
            gs.bucket.as_str()
        } else {
            "warpline-no-such-bucket"
        };
        assert!(message.contains("not found"), "{message}");
        assert!(
            message.contains(&format!("bucket \"{bucket}\"")),
            "{message}"
        );
        assert_eq!(f["kind"], "permanent", "{f}");
        assert_eq!(f["attempts"], 1, "not tried again: {f}");
    }

    let glob = format!(
        "kind = \"glob\"\npattern = \"gs://warpline-no-such-bucket/in/*.tif\"\nendpoint = \"{}\"",
        gs.endpoint
    );
    let (report, text) = gs.run(
        work.path(),
        &pipeline(&glob, &write, &gs.endpoint),
        &gs.secret,
        3,
    );
    assert_eq!(items(&report), [1, 0, 0, 1], "{text}");
    let message = report["failures"][0]["message"].as_str().unwrap();
    assert!(message.contains("warpline-no-such-bucket"), "{message}");
    assert_eq!(report["failures"][0]["kind"], "permanent", "{report}");
}

/// A `gs://` output is refused when the pipeline is checked, before any
/// input is read, saying why and where outputs may go.
#[test]
fn a_gs_output_is_refused_before_the_run() {
    let _serial = serial();
    let Some(gs) = gcs("refused") else { return };
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("pipeline.toml");
    let write = format!("dir = \"{}\"", gs.url("out"));
    let toml = pipeline(
        "kind = \"inline\"\ninputs = [\"a.tif\"]",
        &write,
        &gs.endpoint,
    );
    std::fs::write(&file, toml).unwrap();
    let out = gs
        .warpline(&gs.secret)
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    let text = crate::binary::said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("dir"), "{text}");
    assert!(text.contains("gs:// is read, not written"), "{text}");
    assert!(gs.list("out").is_empty());
}

/// Why `gs://` is not written: the emulator answers object_store's upload
/// of an object (an XML API PUT) and its multipart upload (POST `?uploads`)
/// with 400 "invalid uploadType". When it takes them, this test fails:
/// writes can then be tested, and allowed (`Scheme::writes`).
#[test]
fn the_emulator_does_not_take_object_stores_uploads() {
    use object_store::multipart::MultipartStore;
    use object_store::ObjectStoreExt;
    let _serial = serial();
    let Some(gs) = gcs("uploads") else { return };
    let store = client(&gs.endpoint, &gs.bucket);
    let path = object_store::path::Path::from(gs.key_of("a.tif"));
    gs.rt.block_on(async {
        let put = store
            .put(&path, object_store::PutPayload::from_static(b"x"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            put.contains("400") && put.contains("invalid uploadType"),
            "{put}"
        );
        let multipart = store.create_multipart(&path).await.unwrap_err().to_string();
        assert!(
            multipart.contains("400") && multipart.contains("invalid uploadType"),
            "{multipart}"
        );
    });
    assert!(gs.list("").is_empty(), "{:?}", gs.list(""));
}

/// A service account key given where its path belongs
/// (`GOOGLE_SERVICE_ACCOUNT`, a common slip) makes each item fail, and
/// the client's error quotes the "path": the private key and its id are
/// hidden in the failures, the report and the output.
#[test]
fn a_key_given_as_its_path_is_not_printed() {
    let _serial = serial();
    let Some(gs) = gcs("keypath") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = tiles_in_bucket(&gs, work.path(), 64);
    let name = tiles[0].file_name().unwrap().to_string_lossy().into_owned();
    std::fs::write(work.path().join("list.txt"), gs.url(&format!("in/{name}"))).unwrap();
    let source = "kind = \"list\"\npath = \"list.txt\"";
    let write = format!("dir = \"{}\"", work.path().join("out").display());
    let mut command = server::warpline();
    command.env(
        "GOOGLE_SERVICE_ACCOUNT",
        key_json(&gs.endpoint, PRIVATE_KEY),
    );
    let toml = pipeline(source, &write, &gs.endpoint);
    let (report, text) = server::run_with(command, work.path(), &toml, 3);
    assert_eq!(items(&report), [1, 0, 0, 1], "{text}");
    let failures = std::fs::read_to_string(work.path().join("failures.jsonl")).unwrap();
    let message = report["failures"][0]["message"].as_str().unwrap();
    assert!(message.contains("service account"), "{message}");
    assert!(
        message.contains(&format!("gs://{}", gs.bucket)),
        "{message}"
    );
    for shown in [&text, &failures, &report.to_string()] {
        assert!(
            !shown.contains("qqv"),
            "the private key was printed: {shown}"
        );
        assert!(!shown.contains("warpline-test-key-id"), "{shown}");
    }
}

/// The GCS example of docs/pipeline.md, with this server and bucket, its
/// credentials as the docs say: `GOOGLE_SERVICE_ACCOUNT`, a key file that
/// names the emulator.
#[test]
fn the_reference_gcs_example_runs() {
    let _serial = serial();
    let Some(gs) = gcs("docs") else { return };
    let block = &crate::binary::reference_example(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"reproject\", \"write\"]\n\n[source]\nkind = \"glob\"\npattern = \"gs://",
        "the GCS example in docs/pipeline.md",
    );
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("warped");
    let toml = block
        .replace("gs://my-bucket/scenes", &gs.url("scenes"))
        .replace("\"warped\"", &format!("{:?}", out.display().to_string()));
    assert!(!toml.contains("my-bucket"), "{toml}");
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    for t in &tiles {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        gs.put(&format!("scenes/{name}"), std::fs::read(t).unwrap());
    }
    let key = work.path().join("key.json");
    std::fs::write(&key, key_json(&gs.endpoint, PRIVATE_KEY)).unwrap();
    let mut command = server::warpline();
    command.env("GOOGLE_SERVICE_ACCOUNT", &key);
    let (report, text) = server::run_with(command, work.path(), &toml, 0);
    let n = tiles.len() as u64;
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");
    // A COG each with its STAC item, and the run's collection.
    assert_eq!(files(&out).len(), 2 * tiles.len() + 1);
    assert_eq!(crate::stac::check_published(&out), tiles.len());
}

/// Outputs a test uploaded to the emulator are verified from the prefix
/// and from the collection there, and an edited one is said different.
#[test]
fn outputs_in_a_bucket_are_verified() {
    let _serial = serial();
    let Some(gs) = gcs("verify") else { return };
    crate::s3::verify::verified_in_bucket(&gs, true);
}
