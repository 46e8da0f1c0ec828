//! Faults: a server that cannot be reached, a run killed during an upload.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use super::server::{files, items, s3, uploads_in_progress};
use crate::common;

/// A server that cannot be reached fails an item as `transient`, tried
/// again by the stage's retry policy. Needs no server: nothing listens.
#[test]
fn an_unreachable_server_is_a_transient_failure_tried_again() {
    let _serial = super::server::serial();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let work = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[pipeline]
flow = ["fetch"]
[source]
kind = "inline"
inputs = ["s3://warpline-test/a.tif"]
[stages.fetch]
kind = "fetch"
endpoint = "http://127.0.0.1:{port}"
retry = {{ attempts = 3, base_delay = "10ms", max_delay = "20ms" }}
"#
    );
    let file = work.path().join("pipeline.toml");
    std::fs::write(&file, toml).unwrap();
    let report = work.path().join("report.json");
    let mut c = Command::new(env!("CARGO_BIN_EXE_warpline"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            c.env_remove(k);
        }
    }
    let out = c
        .env("AWS_ACCESS_KEY_ID", "k")
        .env("AWS_SECRET_ACCESS_KEY", "qqv-unused-secret")
        .arg("run")
        .arg(&file)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{text}");
    let json: serde_json::Value = common::read_json(report);
    let f = &json["failures"][0];
    assert_eq!(f["kind"], "transient", "{f}");
    assert_eq!(f["attempts"], 3, "{f}");
    let message = f["message"].as_str().unwrap();
    assert!(
        message.starts_with("s3://warpline-test/a.tif: cannot connect"),
        "{message}"
    );
    assert!(!text.contains("qqv-unused-secret"));
}

/// A proxy to the server that holds every request uploading a part
/// (`needle` in its request line: S3's `partNumber=`, Azure's
/// `comp=block&`): it is never answered. Its endpoint (with the path of
/// `upstream`'s), and how many requests it holds.
fn stalling_proxy(
    rt: &tokio::runtime::Runtime,
    upstream: &str,
    needle: &'static [u8],
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    rt.block_on(warpline_testkit::watching_proxy(
        upstream,
        needle,
        warpline_testkit::OnNeedle::Hold,
    ))
}

/// A run killed (SIGKILL) while it uploads leaves no object under the final
/// key; the next run aborts the upload it left (no upload is left at the
/// server), removes its staged file, and writes every output once.
#[test]
fn a_run_killed_during_an_upload_leaves_no_partial_object_and_resumes() {
    let _serial = super::server::serial();
    let Some(s3) = s3("killed") else { return };
    killed_and_resumed(&s3, b"partNumber=");
}

/// The run killed during an upload, then run again (also for Azurite: its
/// parts, staged blocks, are `comp=block&` requests).
pub(crate) fn killed_and_resumed(s3: &super::server::S3, part_request: &'static [u8]) {
    use std::sync::atomic::Ordering;
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let inputs: Vec<String> = tiles.iter().map(|t| t.display().to_string()).collect();
    let staging = work.path().join("staging");
    let (proxy, held) = stalling_proxy(&s3.rt, &s3.endpoint, part_request);
    let toml = |endpoint: &str| {
        format!(
            r#"
[pipeline]
flow = ["fetch", "decode", "write"]
[source]
kind = "inline"
inputs = {}
[stages.fetch]
kind = "fetch"
[stages.decode]
kind = "decode"
[stages.write]
kind = "write"
workers = 1
dir = "{}"
endpoint = "{endpoint}"
staging = "{}"
"#,
            common::toml_list(&inputs),
            s3.url("out"),
            staging.display()
        )
    };
    let file = work.path().join("killed.toml");
    std::fs::write(&file, toml(&proxy)).unwrap();
    // s3s-fs's uploads in progress (Azure has no such thing: see ../azure/).
    let before = uploads_in_progress().filter(|_| s3.scheme == "s3");
    let mut child = s3
        .warpline(&s3.secret)
        .arg("run")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until the first part is held: at most 60 s.
    let mut polls = 0;
    while held.load(Ordering::SeqCst) == 0 {
        assert!(polls < 1200, "no part was uploaded in 60 s");
        assert!(child.try_wait().unwrap().is_none(), "the run ended");
        std::thread::sleep(std::time::Duration::from_millis(50));
        polls += 1;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(s3.list("out"), Vec::<String>::new(), "a partial object");
    let left = files(&staging);
    assert_eq!(
        left.len(),
        2,
        "the staged file and the upload's record: {left:?}"
    );
    if let (Some(before), Some(after)) = (&before, uploads_in_progress()) {
        assert_eq!(after.len(), before.len() + 1, "the killed upload");
    }

    let (report, text) = s3.run(work.path(), &toml(&s3.endpoint), &s3.secret, 0);
    let n = tiles.len() as u64;
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");
    assert_eq!(s3.list("out").len(), tiles.len());
    assert_eq!(files(&staging), Vec::<PathBuf>::new(), "{text}");
    match (before, uploads_in_progress()) {
        (Some(before), Some(after)) => assert_eq!(before, after, "an upload is left"),
        _ => eprintln!("WARPLINE_TEST_S3_ROOT is not set: the server's uploads are not looked at"),
    }
    let (report, text) = s3.run(work.path(), &toml(&s3.endpoint), &s3.secret, 0);
    assert_eq!(items(&report), [n, 0, n, 0], "{text}");
}
