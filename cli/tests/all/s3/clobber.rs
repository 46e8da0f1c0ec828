//! Writes that never clobber (issue 39, item 4): two workers that both
//! finished one item (a reclaim) write its output to the bucket; the
//! second's completion is refused (`If-None-Match: *`), the first's object
//! and its STAC item stay, and both count the item done.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::Ordering;

use sha2::{Digest, Sha256};

use super::server::{items, s3, S3};
use crate::common;

#[test]
fn two_writers_of_one_item_leave_one_object_and_both_count_it_done() {
    let _serial = super::server::serial();
    let Some(s3) = s3("clobber") else { return };
    // S3 completes an upload with `POST KEY?uploadId=ID` (its parts are
    // `?partNumber=N&uploadId=ID`).
    two_writers(&s3, b"?uploadId=", true);
}

/// `conditional_create = false` completes as before the condition was
/// sent: the second writer's object replaces the first's (with its own
/// item), for a server that refuses the header.
#[test]
fn without_conditional_create_the_second_writer_replaces_the_first() {
    let _serial = super::server::serial();
    let Some(s3) = s3("clobber-off") else { return };
    two_writers(&s3, b"?uploadId=", false);
}

/// The `conditional_create = false` example of docs/pipeline.md, with this
/// server and bucket: it writes every output, and a rerun skips them.
#[test]
fn the_reference_example_without_conditional_create_runs() {
    let _serial = super::server::serial();
    let Some(s3) = s3("clobber-docs") else { return };
    let block = &crate::binary::reference_example(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"write\"]\n\n[source]\nkind = \"glob\"\npattern = \"s3://my-bucket/scenes/",
        "the conditional_create example in docs/pipeline.md",
    );
    assert!(block.contains("\nconditional_create = false\n"), "{block}");
    let toml = block
        .replace("http://127.0.0.1:9000", &s3.endpoint)
        .replace("s3://my-bucket/scenes", &s3.url("scenes"))
        .replace("s3://my-bucket/copies", &s3.url("copies"));
    assert!(!toml.contains("my-bucket"), "{toml}");
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let mut names = Vec::new();
    for t in &tiles {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        s3.put(&format!("scenes/{name}"), std::fs::read(t).unwrap());
        names.push(name);
    }
    names.sort();
    let n = tiles.len() as u64;
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");
    assert_eq!(s3.list("copies"), names);
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
    assert_eq!(items(&report), [n, 0, n, 0], "{text}");
}

/// `conditional_create` is an object store's: with a local `dir` it is a
/// configuration error naming the key.
#[test]
fn conditional_create_with_a_local_dir_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("pipeline.toml");
    let write = "dir = \"out\"\nconditional_create = false";
    let toml = super::server::pipeline("kind = \"inline\"\ninputs = [\"a.tif\"]", write, "");
    std::fs::write(&file, toml).unwrap();
    let out = super::server::warpline()
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    let text = crate::binary::said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("conditional_create") && text.contains("only with dir = \"s3://"),
        "{text}"
    );
}

/// The pipeline of one worker: the tile `input` to `s3`'s `out/` as a COG
/// (with its STAC item unless `extra` says `stac = false`), compressed
/// with `compress` (the two workers' bytes differ, so whose object stands
/// is seen), through `endpoint`; `extra` ends the write stage.
fn worker(s3: &S3, input: &Path, compress: &str, endpoint: &str, extra: &str) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "write"]
[source]
kind = "inline"
inputs = {inputs}
[stages.fetch]
kind = "fetch"
[stages.decode]
kind = "decode"
[stages.write]
kind = "write"
format = "COG"
creation_options = {{ COMPRESS = "{compress}" }}
dir = "{dir}"
endpoint = "{endpoint}"
staging = "staging"
{extra}
"#,
        inputs = common::toml_list(&[input.display().to_string()]),
        dir = s3.url("out"),
    )
}

/// A worker's run of `toml`, in a folder `dir` of its own, started.
fn start(s3: &S3, dir: &Path, toml: &str) -> Killed {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("pipeline.toml"), toml).unwrap();
    let child = s3
        .warpline(&s3.secret)
        .current_dir(dir)
        .args(["run", "pipeline.toml", "--report", "report.json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Killed(Some(child))
}

/// Until `came` (a proxy's count) is not 0, while `run` runs: at most 60 s.
fn until_it_came(run: &mut Killed, came: impl Fn() -> usize, what: &str) {
    let mut polls = 0;
    while came() == 0 {
        assert!(polls < 1200, "{what} did not come in 60 s");
        let ended = run.running().try_wait().unwrap();
        assert!(ended.is_none(), "the run ended before {what} came");
        std::thread::sleep(std::time::Duration::from_millis(50));
        polls += 1;
    }
}

/// The run's end: its report, and what it said; its exit code must be
/// `code`.
fn finish(mut run: Killed, dir: &Path, code: i32) -> (serde_json::Value, String) {
    let out = run.take().wait_with_output().unwrap();
    let text = crate::binary::said(&out);
    assert_eq!(out.status.code(), Some(code), "{text}");
    (common::read_json(dir.join("report.json")), text)
}

/// Worker B passes the `exists` check and sends its parts, its completion
/// (`complete_request` in the request line) held by a proxy; worker A then
/// writes the same item whole; B's completion is let through. The order
/// is the reclaim's: each finished the item, A completed first. Without
/// `conditional` (both workers), B's object replaces A's.
pub(crate) fn two_writers(s3: &S3, complete_request: &'static [u8], conditional: bool) {
    let work = tempfile::tempdir().unwrap();
    let tile = common::sample_files(&work.path().join("tiles"), 1, 64).remove(0);
    let stem = tile.file_stem().unwrap().to_string_lossy().into_owned();
    let (proxy, gate) = s3.rt.block_on(warpline_testkit::gated_proxy(
        &s3.endpoint,
        complete_request,
    ));
    let extra = format!("conditional_create = {conditional}");
    let dir_b = work.path().join("b");
    let mut b = start(s3, &dir_b, &worker(s3, &tile, "NONE", &proxy, &extra));
    until_it_came(&mut b, || gate.came(), "B's completion");
    let dir_a = work.path().join("a");
    std::fs::create_dir_all(&dir_a).unwrap();
    let toml_a = worker(s3, &tile, "DEFLATE", &s3.endpoint, &extra);
    let (report, text) = s3.run(&dir_a, &toml_a, &s3.secret, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "A: {text}");
    let object = format!("out/{stem}.tif");
    let a_bytes = s3.get(&object);

    gate.open();
    let (report, text) = finish(b, &dir_b, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "B counts it done: {text}");

    assert_eq!(
        s3.list("out"),
        [
            "collection.json",
            &format!("{stem}.json"),
            &format!("{stem}.tif")
        ],
        "one object, its item and the collection"
    );
    let object_now = s3.get(&object);
    assert!(
        (object_now == a_bytes) == conditional,
        "conditional_create = {conditional}: the object's {} bytes, A's {}",
        object_now.len(),
        a_bytes.len()
    );
    let item: serde_json::Value =
        serde_json::from_slice(&s3.get(&format!("out/{stem}.json"))).expect("the STAC item");
    let asset = &item["assets"]["data"];
    assert_eq!(asset["file:size"], object_now.len(), "{item}");
    let checksum = format!("1220{:x}", Sha256::digest(&object_now));
    assert_eq!(
        asset["file:checksum"],
        checksum.as_str(),
        "the item is the object's"
    );
}

/// A refused writer counts another's output done only once it is
/// complete: A writes the object without a STAC item (`stac = false`), B
/// (with `stac`) is refused and waits for the item; the object is removed
/// meanwhile (as a writer that cannot publish its item removes its
/// output). B fails the item, saying so, and does not take the name
/// after all.
#[test]
fn a_refused_writer_does_not_count_an_output_removed_before_its_item() {
    let _serial = super::server::serial();
    let Some(s3) = s3("clobber-gone") else { return };
    let work = tempfile::tempdir().unwrap();
    let tile = common::sample_files(&work.path().join("tiles"), 1, 64).remove(0);
    let stem = tile.file_stem().unwrap().to_string_lossy().into_owned();
    assert_eq!(stem, "utm18n-000", "the needle below names its item");
    // B -> a proxy counting the requests for the item -> a proxy holding
    // B's completion -> the server.
    let (gated, gate) = s3
        .rt
        .block_on(warpline_testkit::gated_proxy(&s3.endpoint, b"?uploadId="));
    let (proxy, item_asked) = s3.rt.block_on(warpline_testkit::watching_proxy(
        &gated,
        b"/out/utm18n-000.json HTTP/1.1",
        warpline_testkit::OnNeedle::Count,
    ));
    let dir_b = work.path().join("b");
    let mut b = start(&s3, &dir_b, &worker(&s3, &tile, "NONE", &proxy, ""));
    until_it_came(&mut b, || gate.came(), "B's completion");
    let dir_a = work.path().join("a");
    std::fs::create_dir_all(&dir_a).unwrap();
    let toml_a = worker(&s3, &tile, "DEFLATE", &s3.endpoint, "stac = false");
    let (report, text) = s3.run(&dir_a, &toml_a, &s3.secret, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "A: {text}");
    assert_eq!(s3.list("out"), [format!("{stem}.tif")], "A wrote no item");

    let asked = item_asked.load(Ordering::SeqCst);
    assert_eq!(asked, 0, "B looked for the item before it was refused");
    gate.open();
    // B was refused, saw A's object, and looks for its item.
    until_it_came(
        &mut b,
        || item_asked.load(Ordering::SeqCst),
        "B's HEAD of the item",
    );
    s3.delete(&format!("out/{stem}.tif"));
    let (report, text) = finish(b, &dir_b, 3);
    assert_eq!(items(&report), [1, 0, 0, 1], "{text}");
    let failure = &report["failures"][0];
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("was created by another writer first, then removed before its STAC item"),
        "{message}"
    );
    assert_eq!(failure["kind"], "transient", "{failure}");
    assert!(
        !s3.list("out").contains(&format!("{stem}.tif")),
        "B took the name after all"
    );
}

/// A child process, killed if the test fails before it is waited for.
struct Killed(Option<std::process::Child>);

impl Killed {
    fn running(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("not taken")
    }

    /// The process, no longer killed when this is dropped.
    fn take(&mut self) -> std::process::Child {
        self.0.take().expect("not taken")
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
