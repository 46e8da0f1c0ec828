//! Writes that never clobber (issue 39, item 4): two workers that both
//! finished one item (a reclaim) write its output to the bucket; the
//! second's completion is refused (`If-None-Match: *`), the first's object
//! and its STAC item stay, and both count the item done.

use std::path::Path;
use std::process::Stdio;

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
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/pipeline.md"))
            .unwrap();
    let start = doc
        .find("```toml\n[pipeline]\nflow = [\"fetch\", \"decode\", \"write\"]\n\n[source]\nkind = \"glob\"\npattern = \"s3://my-bucket/scenes/")
        .expect("the conditional_create example in docs/pipeline.md");
    let block = &doc[start + "```toml\n".len()..];
    let block = &block[..block.find("```").unwrap()];
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
/// with its STAC item, compressed with `compress` (the two workers' bytes
/// differ, so whose object stands is seen), through `endpoint`, with
/// `conditional_create`.
fn worker(
    s3: &S3,
    input: &Path,
    staging: &Path,
    compress: &str,
    endpoint: &str,
    conditional: bool,
) -> String {
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
staging = "{staging}"
conditional_create = {conditional}
"#,
        inputs = common::toml_list(&[input.display().to_string()]),
        dir = s3.url("out"),
        staging = staging.display(),
    )
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
    let dir_b = work.path().join("b");
    std::fs::create_dir_all(&dir_b).unwrap();
    let toml_b = worker(
        s3,
        &tile,
        &dir_b.join("staging"),
        "NONE",
        &proxy,
        conditional,
    );
    std::fs::write(dir_b.join("pipeline.toml"), &toml_b).unwrap();
    let mut b = s3
        .warpline(&s3.secret)
        .current_dir(&dir_b)
        .args(["run", "pipeline.toml", "--report", "report.json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(|c| Killed(Some(c)))
        .unwrap();
    // Until B's completion is held: at most 60 s.
    let mut polls = 0;
    while gate.came() == 0 {
        assert!(polls < 1200, "B sent no completion in 60 s");
        assert!(b.running().try_wait().unwrap().is_none(), "B ended first");
        std::thread::sleep(std::time::Duration::from_millis(50));
        polls += 1;
    }
    let dir_a = work.path().join("a");
    std::fs::create_dir_all(&dir_a).unwrap();
    let toml_a = worker(
        s3,
        &tile,
        &dir_a.join("staging"),
        "DEFLATE",
        &s3.endpoint,
        conditional,
    );
    let (report, text) = s3.run(&dir_a, &toml_a, &s3.secret, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "A: {text}");
    let object = format!("out/{stem}.tif");
    let a_bytes = s3.get(&object);

    gate.open();
    let out = b.take().wait_with_output().unwrap();
    let text = crate::binary::said(&out);
    assert_eq!(out.status.code(), Some(0), "B: {text}");
    let report = common::read_json(dir_b.join("report.json"));
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
