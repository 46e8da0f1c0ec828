//! Object stores (issue 22): `s3://` inputs (list lines, a glob over a
//! listing) and outputs (multipart uploads), against a real S3-compatible
//! server on loopback that checks SigV4 signatures (`s3s-fs`).
//!
//! Needs `WARPLINE_TEST_S3=http://127.0.0.1:PORT` (`scripts/test.sh` starts
//! the server), its credentials in `WARPLINE_TEST_S3_KEY` and
//! `WARPLINE_TEST_S3_SECRET` and a bucket in `WARPLINE_TEST_S3_BUCKET`
//! (defaults: `warpline-test`, `warpline-test-secret`, `warpline-test`).
//! Without the variable these tests say they are skipped; with it, a server
//! that does not answer fails them. The pipelines run in the `warpline`
//! binary, each with its own credentials in its environment; each test
//! works under a prefix of its own.

use crate::common;
pub(crate) mod clobber;
mod credentials;
pub(crate) mod faults;
pub(crate) mod server;
mod stac;
pub(crate) mod stac_api;
pub(crate) mod verify;

use std::path::PathBuf;
use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use server::{files, items, pipeline, s3};

#[test]
fn a_bucket_to_bucket_run_equals_the_local_run_and_a_rerun_skips() {
    let _serial = server::serial();
    let Some(s3) = s3("roundtrip") else { return };
    round_trip(&s3);
}

/// The real rasters from the bucket to the bucket equal the same pipeline
/// on local files; a rerun skips every output (also for Azurite).
pub(crate) fn round_trip(s3: &server::S3) {
    let Some(rasters) = common::real_rasters() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let local_in = work.path().join("in");
    std::fs::create_dir_all(&local_in).unwrap();
    for r in &rasters {
        let name = r.file_name().unwrap().to_string_lossy().into_owned();
        std::fs::copy(r, local_in.join(&name)).unwrap();
        s3.put(&format!("in/{name}"), std::fs::read(r).unwrap());
    }
    // A key the pattern does not match (another extension, a deeper level).
    s3.put("in/notes.txt", b"not a raster".to_vec());
    s3.put("in/deeper/x.tif", b"not matched".to_vec());

    // The same pipeline on local files: the oracle.
    let local_out = work.path().join("local-out");
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}/*.tif\"",
        local_in.display()
    );
    let write = format!("dir = \"{}\"", local_out.display());
    let (report, text) = s3.run(
        work.path(),
        &pipeline(&glob, &write, &s3.endpoint),
        &s3.secret,
        0,
    );
    assert_eq!(items(&report), [4, 4, 0, 0], "{text}");

    let staging = work.path().join("staging");
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}\"\nendpoint = \"{}\"",
        s3.url("in/*.tif"),
        s3.endpoint
    );
    let write = format!(
        "dir = \"{}\"\nendpoint = \"{}\"\nstaging = \"{}\"",
        s3.url("out"),
        s3.endpoint,
        staging.display()
    );
    let toml = pipeline(&glob, &write, &s3.endpoint);
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
    assert_eq!(items(&report), [4, 4, 0, 0], "{text}");
    assert!(!text.contains(&s3.secret), "the secret was printed: {text}");
    assert_eq!(
        files(&staging),
        Vec::<PathBuf>::new(),
        "the staged files are removed once uploaded"
    );
    let uploaded = work.path().join("uploaded");
    s3.download("out", &uploaded);
    let mut names: Vec<String> = s3.list("out");
    names.sort();
    let mut want: Vec<String> = files(&local_out)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    want.sort();
    assert_eq!(names, want, "one object per input, nothing else");
    for name in &want {
        common::assert_same_raster(&uploaded.join(name), &local_out.join(name), name);
    }

    // Again: every output is there (HEAD), so every item is skipped.
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
    assert_eq!(items(&report), [4, 0, 4, 0], "{text}");
}

#[test]
fn s3_lines_in_a_list_file_are_fetched_and_missing_objects_fail_clearly() {
    let _serial = server::serial();
    let Some(s3) = s3("list") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let name = tiles[0].file_name().unwrap().to_string_lossy().into_owned();
    s3.put(&format!("in/{name}"), std::fs::read(&tiles[0]).unwrap());
    let lines = [
        s3.url(&format!("in/{name}")),
        s3.url("in/missing.tif"),
        "s3://warpline-no-such-bucket/a.tif".to_owned(),
    ];
    std::fs::write(work.path().join("list.txt"), lines.join("\n")).unwrap();
    let out = work.path().join("out");
    let source = "kind = \"list\"\npath = \"list.txt\"";
    let write = format!("dir = \"{}\"", out.display());
    let (report, text) = s3.run(
        work.path(),
        &pipeline(source, &write, &s3.endpoint),
        &s3.secret,
        3,
    );
    assert_eq!(items(&report), [3, 1, 0, 2], "{text}");
    assert!(out.join(tiles[0].file_name().unwrap()).is_file());
    // Per-host limits and the report take a bucket as a host.
    let mut hosts: Vec<&str> = report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap())
        .collect();
    hosts.sort();
    let ours = format!("s3://{}", s3.bucket);
    let mut want = ["s3://warpline-no-such-bucket", ours.as_str()];
    want.sort();
    assert_eq!(hosts, want, "{report}");
    let failures = &report["failures"];
    for (id, says) in [
        ("missing", "s3://".to_owned() + &s3.bucket),
        ("a", "warpline-no-such-bucket".to_owned()),
    ] {
        let f = failures
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("no failure for {id}: {report}"));
        let message = f["message"].as_str().unwrap();
        assert!(message.contains("not found"), "{message}");
        assert!(message.contains(&says), "{message}");
        assert_eq!(f["kind"], "permanent", "{f}");
        assert_eq!(f["attempts"], 1, "a missing object is not tried again: {f}");
    }
}

#[test]
fn wrong_credentials_fail_each_item_once_naming_the_bucket() {
    let _serial = server::serial();
    let Some(s3) = s3("creds") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let mut lines = Vec::new();
    for t in &tiles[..3] {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        s3.put(&format!("in/{name}"), std::fs::read(t).unwrap());
        lines.push(s3.url(&format!("in/{name}")));
    }
    std::fs::write(work.path().join("list.txt"), lines.join("\n")).unwrap();
    let wrong = "qqv-wrong-secret-qqv";
    let write = format!(
        "dir = \"{}\"\nendpoint = \"{}\"",
        s3.url("out"),
        s3.endpoint
    );
    let source = "kind = \"list\"\npath = \"list.txt\"";
    let (report, text) = s3.run(
        work.path(),
        &pipeline(source, &write, &s3.endpoint),
        wrong,
        3,
    );
    assert_eq!(items(&report), [3, 0, 0, 3], "{text}");
    let failures = std::fs::read_to_string(work.path().join("failures.jsonl")).unwrap();
    assert_eq!(failures.lines().count(), 3, "{failures}");
    for line in failures.lines() {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        let message = f["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("access denied to bucket \"{}\"", s3.bucket)),
            "{message}"
        );
        assert_eq!(f["kind"], "permanent", "{f}");
        // No retry loop: fetch would try a transient error 6 times.
        assert_eq!(f["attempts"], 1, "{f}");
        assert_eq!(f["status"], 403, "{f}");
    }
    for shown in [&text, &failures, &report.to_string()] {
        assert!(!shown.contains(wrong), "the secret was printed: {shown}");
    }
    assert!(s3.list("out").is_empty());

    // A glob with the wrong secret: its listing fails once, naming it.
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}\"\nendpoint = \"{}\"",
        s3.url("in/*.tif"),
        s3.endpoint
    );
    let (report, text) = s3.run(
        work.path(),
        &pipeline(&glob, &write, &s3.endpoint),
        wrong,
        3,
    );
    assert_eq!(items(&report), [1, 0, 0, 1], "{text}");
    let message = report["failures"][0]["message"].as_str().unwrap();
    assert!(message.contains("access denied to bucket"), "{message}");
}

#[test]
fn a_body_over_max_bytes_fails_before_it_is_read() {
    let _serial = server::serial();
    let Some(s3) = s3("maxbytes") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let size = std::fs::metadata(&tiles[0]).unwrap().len();
    s3.put("in/t.tif", std::fs::read(&tiles[0]).unwrap());
    let source = format!("kind = \"inline\"\ninputs = [\"{}\"]", s3.url("in/t.tif"));
    let write = format!("dir = \"{}\"", work.path().join("out").display());
    let toml = pipeline(&source, &write, &s3.endpoint).replace(
        "memory = \"memory\"\nendpoint",
        "memory = \"memory\"\nmax_bytes = 100\nendpoint",
    );
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 3);
    assert_eq!(items(&report), [1, 0, 0, 1], "{text}");
    let message = report["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{size} bytes is over max_bytes (100 bytes)")),
        "{message}"
    );
}

/// The S3 example of docs/pipeline.md, with this server and bucket.
#[test]
fn the_reference_s3_example_runs() {
    let _serial = server::serial();
    let Some(s3) = s3("docs") else { return };
    let block = &crate::binary::reference_example(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"reproject\", \"write\"]\n\n[source]\nkind = \"glob\"\npattern = \"s3://",
        "the S3 example in docs/pipeline.md",
    );
    let toml = block
        .replace("http://127.0.0.1:9000", &s3.endpoint)
        .replace("s3://my-bucket/scenes", &s3.url("scenes"))
        .replace("s3://my-bucket/warped", &s3.url("warped"));
    assert!(!toml.contains("my-bucket"), "{toml}");
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    for t in &tiles {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        s3.put(&format!("scenes/{name}"), std::fs::read(t).unwrap());
    }
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
    let n = tiles.len() as u64;
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");
    let got = work.path().join("got");
    s3.download("warped", &got);
    // A COG each, published in the bucket with its STAC item, and the
    // run's collection: as a reader of the prefix finds them.
    assert_eq!(files(&got).len(), 2 * tiles.len() + 1);
    assert_eq!(crate::stac::check_published(&got), tiles.len());
    crate::stac::check_with_python(&got);
    for f in files(&got)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "tif"))
    {
        let ds = gdal::Dataset::open(&f).unwrap();
        use gdal::Metadata;
        assert_eq!(
            ds.metadata_item("LAYOUT", "IMAGE_STRUCTURE").as_deref(),
            Some("COG"),
            "{}",
            f.display()
        );
    }
}

/// A listing of 2,500 objects (three pages of at most 1,000 keys), of which
/// the pattern matches 2,000: every match is an input, and nothing else.
#[test]
fn a_large_listing_is_read_page_by_page() {
    let _serial = server::serial();
    let Some(s3) = s3("many") else { return };
    use futures::StreamExt;
    let names: Vec<String> = (0..2500)
        .map(|i| {
            let ext = if i % 5 == 4 { "txt" } else { "tif" };
            format!("many/o{i:05}.{ext}")
        })
        .collect();
    s3.rt.block_on(async {
        futures::stream::iter(&names)
            .map(|n| {
                let path = ObjectPath::from(s3.key_of(n));
                let store = Arc::clone(&s3.store);
                async move { store.put(&path, PutPayload::from_static(b"x")).await }
            })
            .buffer_unordered(16)
            .for_each(|r| async move {
                r.unwrap();
            })
            .await
    });
    let work = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[pipeline]
flow = ["sink"]
[source]
kind = "glob"
pattern = "{}"
endpoint = "{}"
[stages.sink]
kind = "discard"
"#,
        s3.url("many/*.tif"),
        s3.endpoint
    );
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
    assert_eq!(items(&report), [2000, 2000, 0, 0], "{text}");
}

/// The files GDAL writes beside an output (a world file, PAM metadata)
/// go up with it, under the output's name.
#[test]
fn side_files_are_uploaded_beside_the_output() {
    let _serial = server::serial();
    let Some(s3) = s3("sides") else { return };
    let Some(rasters) = common::real_rasters() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = format!(
        "kind = \"inline\"\ninputs = [{:?}]",
        rasters[0].display().to_string()
    );
    let write = format!(
        "dir = \"{}\"\nendpoint = \"{}\"\nstaging = \"{}\"",
        s3.url("out"),
        s3.endpoint,
        work.path().join("staging").display()
    );
    let toml = pipeline(&source, &write, &s3.endpoint).replace(
        "creation_options = { COMPRESS = \"DEFLATE\" }",
        "creation_options = { PROFILE = \"GeoTIFF\", TFW = \"YES\" }",
    );
    let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "{text}");
    let stem = rasters[0]
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut keys = s3.list("out");
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("{stem}.tfw"),
            format!("{stem}.tif"),
            format!("{stem}.tif.aux.xml")
        ],
        "{text}"
    );
}

/// An object's siblings (here an external mask, `.msk`) are read with it,
/// as GDAL's /vsis3/ reads them: the output equals the local run's, which
/// reads the mask beside the local file.
#[test]
fn an_objects_mask_beside_it_is_read_as_a_local_files_is() {
    let _serial = server::serial();
    let Some(s3) = s3("siblings") else { return };
    let Some(rasters) = common::real_rasters() else {
        return;
    };
    let dir = rasters[0].parent().unwrap();
    let work = tempfile::tempdir().unwrap();
    for name in ["RGB2.byte.tif", "RGB2.byte.tif.msk"] {
        s3.put(
            &format!("in/{name}"),
            std::fs::read(dir.join(name)).unwrap(),
        );
    }
    let local_out = work.path().join("local-out");
    let inline = |input: String| format!("kind = \"inline\"\ninputs = [{input:?}]");
    let local = pipeline(
        &inline(dir.join("RGB2.byte.tif").display().to_string()),
        &format!("dir = \"{}\"", local_out.display()),
        &s3.endpoint,
    );
    let (report, text) = s3.run(work.path(), &local, &s3.secret, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "{text}");
    let remote_out = work.path().join("remote-out");
    let remote = pipeline(
        &inline(s3.url("in/RGB2.byte.tif")),
        &format!("dir = \"{}\"", remote_out.display()),
        &s3.endpoint,
    );
    let (report, text) = s3.run(work.path(), &remote, &s3.secret, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "{text}");
    let name = "RGB2.byte.tif";
    common::assert_same_raster(&remote_out.join(name), &local_out.join(name), name);
    // Without the mask the pixels differ: the comparison can fail.
    let alone = work.path().join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::copy(dir.join(name), alone.join(name)).unwrap();
    let unmasked_out = work.path().join("unmasked-out");
    let unmasked = pipeline(
        &inline(alone.join(name).display().to_string()),
        &format!("dir = \"{}\"", unmasked_out.display()),
        &s3.endpoint,
    );
    let (report, text) = s3.run(work.path(), &unmasked, &s3.secret, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "{text}");
    let band = |p: PathBuf| {
        let ds = gdal::Dataset::open(p).unwrap();
        let (w, h) = ds.raster_size();
        let b = ds.rasterband(1).unwrap();
        b.read_as::<u8>((0, 0), (w, h), (w, h), None)
            .unwrap()
            .data()
            .to_vec()
    };
    assert_ne!(
        band(remote_out.join(name)),
        band(unmasked_out.join(name)),
        "the mask changes pixels"
    );
}

/// Credentials from a profile of the AWS shared files (`AWS_PROFILE`),
/// with none in the environment: the object is read, the secret never
/// shown; a profile that is in neither file fails naming it.
#[test]
fn credentials_are_read_from_an_aws_profile() {
    let _serial = server::serial();
    let Some(s3) = s3("profile") else { return };
    let work = tempfile::tempdir().unwrap();
    let tile = &common::sample_files(&work.path().join("tiles"), 1, 64)[0];
    let name = tile.file_name().unwrap().to_string_lossy().into_owned();
    s3.put(&format!("in/{name}"), std::fs::read(tile).unwrap());
    std::fs::write(work.path().join("list.txt"), s3.url(&format!("in/{name}"))).unwrap();
    let home = work.path().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        format!(
            "[default]\naws_access_key_id = nobody\naws_secret_access_key = wrong\n\
             [warpline]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            s3.key, s3.secret
        ),
    )
    .unwrap();
    std::fs::write(
        home.join(".aws/config"),
        "[profile warpline]\nregion = us-east-1\n",
    )
    .unwrap();
    let out = work.path().join("out");
    let toml = pipeline(
        "kind = \"list\"\npath = \"list.txt\"",
        &format!("dir = \"{}\"", out.display()),
        &s3.endpoint,
    );
    let with_profile = |profile: &str| {
        let mut c = server::warpline();
        c.env("HOME", &home).env("AWS_PROFILE", profile);
        c
    };
    let (report, text) = server::run_with(with_profile("warpline"), work.path(), &toml, 0);
    assert_eq!(items(&report), [1, 1, 0, 0], "{text}");
    assert!(!text.contains(&s3.secret), "the secret was printed: {text}");

    std::fs::remove_dir_all(&out).unwrap();
    let (report, text) = server::run_with(with_profile("nope"), work.path(), &toml, 3);
    assert_eq!(items(&report), [1, 0, 0, 1], "{text}");
    let message = report["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("AWS profile \"nope\" is in neither"),
        "{message}"
    );
    assert!(!format!("{text}{report}").contains(&s3.secret));
}
