//! Azure Blob Storage (issue 22): `az://` inputs and outputs against
//! Azurite, the official Azure Storage emulator, on loopback (it checks
//! Shared Key signatures). The S3 tests' helpers (../s3/server.rs) with
//! `scheme = "az"`.
//!
//! Needs `WARPLINE_TEST_AZURE=http://127.0.0.1:PORT` (`scripts/test.sh`
//! starts Azurite), the account in `WARPLINE_TEST_AZURE_ACCOUNT` and
//! `WARPLINE_TEST_AZURE_KEY` (defaults: Azurite's well-known
//! `devstoreaccount1` and its key, public constants of the emulator) and a
//! container in `WARPLINE_TEST_AZURE_CONTAINER` (default `warpline-test`),
//! which the tests create. Without the variable these tests say they are
//! skipped; with it, a server that does not answer fails them.

use std::io::{Read, Write};

use base64::Engine;
use object_store::azure::{MicrosoftAzure, MicrosoftAzureBuilder};

use crate::common;
use crate::s3::server::{self, files, items, pipeline, serial, S3};

/// Azurite's account and key: public constants of the emulator.
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// Azurite, with a prefix of the test's own in the test container (made
/// if missing); `None` (and a message) when `WARPLINE_TEST_AZURE` is not
/// set.
fn azure(test: &str) -> Option<S3> {
    let Ok(server) = std::env::var("WARPLINE_TEST_AZURE") else {
        eprintln!("WARPLINE_TEST_AZURE is not set: the Azure tests are skipped");
        return None;
    };
    let server = server.trim_end_matches('/').to_owned();
    let account = var("WARPLINE_TEST_AZURE_ACCOUNT", ACCOUNT);
    let key = var("WARPLINE_TEST_AZURE_KEY", KEY);
    let container = var("WARPLINE_TEST_AZURE_CONTAINER", "warpline-test");
    create_container(&server, &account, &key, &container);
    // The account's URL, as a user's `endpoint` setting names it.
    let endpoint = format!("{server}/{account}");
    let store = client(&endpoint, &account, &key, &container);
    S3 {
        scheme: "az",
        endpoint,
        key: account,
        secret: key,
        bucket: container,
        prefix: server::prefix(test),
        store: std::sync::Arc::new(store),
        rt: common::runtime(),
    }
    .answering("WARPLINE_TEST_AZURE")
}

/// A client of `container` at the account URL `endpoint`.
fn client(endpoint: &str, account: &str, key: &str, container: &str) -> MicrosoftAzure {
    MicrosoftAzureBuilder::new()
        .with_account(account)
        .with_access_key(key)
        .with_endpoint(endpoint.to_owned())
        .with_allow_http(true)
        .with_container_name(container)
        .with_retry(server::retry())
        .build()
        .unwrap()
}

/// Creates `container` (Create Container, signed with the account's Shared
/// Key: object_store has no call for it); one that exists is fine.
fn create_container(server: &str, account: &str, key: &str, container: &str) {
    let host = server.trim_start_matches("http://");
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let version = "2021-08-06";
    // The string to sign of a request with no body: its verb, 11 empty
    // standard headers, the x-ms- headers, the resource and its query.
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n\
         /{account}/{account}/{container}\nrestype:container"
    );
    let secret = base64::engine::general_purpose::STANDARD
        .decode(key)
        .unwrap();
    let mac = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret),
        to_sign.as_bytes(),
    );
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.as_ref());
    let mut stream = std::net::TcpStream::connect(host).unwrap_or_else(|e| {
        panic!("WARPLINE_TEST_AZURE=http://{host} is set but does not answer: {e}")
    });
    write!(
        stream,
        "PUT /{account}/{container}?restype=container HTTP/1.1\r\nHost: {host}\r\n\
         x-ms-date: {date}\r\nx-ms-version: {version}\r\n\
         Authorization: SharedKey {account}:{signature}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap_or_default();
    assert!(
        status == "201" || status == "409",
        "cannot create container {container} at {server}: {answer}"
    );
}

#[test]
fn a_container_to_container_run_equals_the_local_run_and_a_rerun_skips() {
    let _serial = serial();
    let Some(az) = azure("roundtrip") else { return };
    crate::s3::round_trip(&az);
}

#[test]
fn a_run_killed_during_an_upload_leaves_no_blob_and_resumes() {
    let _serial = serial();
    let Some(az) = azure("killed") else { return };
    // A part is a staged block: `?comp=block&blockid=...`.
    crate::s3::faults::killed_and_resumed(&az, b"comp=block&");
}

#[test]
fn two_writers_of_one_item_leave_one_blob_and_both_count_it_done() {
    let _serial = serial();
    let Some(az) = azure("clobber") else { return };
    // The blob appears when its block list is committed.
    crate::s3::clobber::two_writers(&az, b"comp=blocklist", true);
}

/// What warpline's uploads rely on (docs/pipeline.md, "Object stores"):
/// a staged block that is never committed (a killed run's) is no blob, and
/// the next upload of the same blob commits its own blocks only; an abort
/// is accepted (Azure drops uncommitted blocks itself).
#[test]
fn uncommitted_blocks_are_no_blob_and_the_next_upload_replaces_them() {
    use object_store::multipart::MultipartStore;
    use object_store::ObjectStoreExt;
    let _serial = serial();
    let Some(az) = azure("blocks") else { return };
    let store = client(&az.endpoint, &az.key, &az.secret, &az.bucket);
    let path = object_store::path::Path::from(az.key_of("out/a.tif"));
    let part = |bytes: &'static [u8]| object_store::PutPayload::from_static(bytes);
    az.rt.block_on(async {
        let killed = store.create_multipart(&path).await.unwrap();
        store
            .put_part(&path, &killed, 0, part(b"partial"))
            .await
            .unwrap();
        let head = store.head(&path).await;
        assert!(
            matches!(head, Err(object_store::Error::NotFound { .. })),
            "a staged block is a blob: {head:?}"
        );
        store.abort_multipart(&path, &killed).await.unwrap();
        let next = store.create_multipart(&path).await.unwrap();
        let a = store
            .put_part(&path, &next, 0, part(b"whole "))
            .await
            .unwrap();
        let b = store
            .put_part(&path, &next, 1, part(b"output"))
            .await
            .unwrap();
        store
            .complete_multipart(&path, &next, vec![a, b])
            .await
            .unwrap();
        let got = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"whole output");
    });
}

/// `read = "window"` on `az://` inputs: GDAL reads them by ranged GETs
/// through fetch, and the outputs equal those of whole reads.
#[test]
fn a_window_read_equals_the_whole_read() {
    let _serial = serial();
    let Some(az) = azure("window") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 256);
    for t in &tiles {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        az.put(&format!("in/{name}"), std::fs::read(t).unwrap());
    }
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}\"\nendpoint = \"{}\"",
        az.url("in/*.tif"),
        az.endpoint
    );
    server::window_equals_whole(work.path(), &glob, &az.endpoint, &tiles, |toml| {
        az.run(work.path(), toml, &az.secret, 0)
    });
}

/// A wrong account key fails every item once, permanently, naming the
/// container; a glob's listing fails once; the key is never printed.
#[test]
fn a_wrong_account_key_fails_each_item_once_naming_the_container() {
    let _serial = serial();
    let Some(az) = azure("creds") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let mut lines = Vec::new();
    for t in &tiles[..2] {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        az.put(&format!("in/{name}"), std::fs::read(t).unwrap());
        lines.push(az.url(&format!("in/{name}")));
    }
    std::fs::write(work.path().join("list.txt"), lines.join("\n")).unwrap();
    // A key of the right form (base64 of 64 bytes), but not the account's.
    let wrong = base64::engine::general_purpose::STANDARD.encode([7u8; 64]);
    let write = format!("dir = \"{}\"", work.path().join("out").display());
    let source = "kind = \"list\"\npath = \"list.txt\"";
    let toml = pipeline(source, &write, &az.endpoint);
    let (report, text) = az.run(work.path(), &toml, &wrong, 3);
    assert_eq!(items(&report), [2, 0, 0, 2], "{text}");
    let failures = std::fs::read_to_string(work.path().join("failures.jsonl")).unwrap();
    for line in failures.lines() {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        let message = f["message"].as_str().unwrap();
        let named = format!("access denied to container \"{}\" (HTTP 403)", az.bucket);
        assert!(message.contains(&named), "{message}");
        assert!(message.contains("AZURE_STORAGE_ACCOUNT_KEY"), "{message}");
        assert_eq!(f["kind"], "permanent", "{f}");
        // No retry loop: fetch would try a transient error 6 times.
        assert_eq!(f["attempts"], 1, "{f}");
    }
    assert_eq!(failures.lines().count(), 2, "{failures}");

    // A glob, and an output in the container: the listing fails once.
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}\"\nendpoint = \"{}\"",
        az.url("in/*.tif"),
        az.endpoint
    );
    let write = format!(
        "dir = \"{}\"\nendpoint = \"{}\"\nstaging = \"{}\"",
        az.url("out"),
        az.endpoint,
        work.path().join("staging").display()
    );
    let (report, text2) = az.run(
        work.path(),
        &pipeline(&glob, &write, &az.endpoint),
        &wrong,
        3,
    );
    assert_eq!(items(&report), [1, 0, 0, 1], "{text2}");
    let message = report["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("access denied to container \"{}\"", az.bucket)),
        "{message}"
    );
    for shown in [&text, &text2, &failures, &report.to_string()] {
        assert!(!shown.contains(&wrong), "the key was printed: {shown}");
    }
    assert!(az.list("out").is_empty());
}

/// The Azure example of docs/pipeline.md, with this server and container,
/// its credentials from the environment variables it names.
#[test]
fn the_reference_azure_example_runs() {
    let _serial = serial();
    let Some(az) = azure("docs") else { return };
    let block = &crate::binary::reference_example(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"reproject\", \"write\"]\n\n[source]\nkind = \"glob\"\npattern = \"az://",
        "the Azure example in docs/pipeline.md",
    );
    let toml = block
        .replace("az://my-container/scenes", &az.url("scenes"))
        .replace("az://my-container/warped", &az.url("warped"));
    assert!(!toml.contains("my-container"), "{toml}");
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    for t in &tiles {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        az.put(&format!("scenes/{name}"), std::fs::read(t).unwrap());
    }
    // As the docs say: the emulator's variables, Azurite at its address.
    let mut command = az.warpline(&az.secret);
    command.env("AZURE_STORAGE_USE_EMULATOR", "true").env(
        "AZURITE_BLOB_STORAGE_URL",
        az.endpoint.trim_end_matches(&format!("/{}", az.key)),
    );
    let (report, text) = crate::s3::server::run_with(command, work.path(), &toml, 0);
    let n = tiles.len() as u64;
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");
    let got = work.path().join("got");
    az.download("warped", &got);
    // A COG each with its STAC item, and the run's collection.
    assert_eq!(files(&got).len(), 2 * tiles.len() + 1);
    assert_eq!(crate::stac::check_published(&got), tiles.len());
}

/// Outputs a run wrote to the container are verified from the prefix and
/// from the collection there, and an edited one is said different.
#[test]
fn outputs_in_a_container_are_verified() {
    let _serial = serial();
    let Some(az) = azure("verify") else { return };
    crate::s3::verify::verified_in_bucket(&az, false);
}
