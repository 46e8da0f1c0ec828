//! Security boundaries: outputs stay in their directory, only the allowed
//! schemes are fetched, credentials never leak, GDAL opens nothing of its
//! own, and a decompression bomb fails before allocating.

use crate::binary::{run_reporting, warpline};
use crate::common;
// Every file under a folder, recursively: the object-store tests' helper.
use crate::s3::server::files;

use common::{list_pipeline, runtime, tiles};
use warpline_testkit::{Faults, TileServer};

#[test]
fn no_input_can_place_an_output_outside_the_output_directory() {
    let work = tempfile::tempdir().unwrap();
    let tile = tiles(1, 64).remove(0).1;
    let long = format!("{}.tif", "a".repeat(300));
    let names = [
        "..%2F..%2Fescaped.tif",
        "%2e%2e%2f%2e%2e%2fescaped2.tif",
        "..%5C..%5Cwin.tif",
        "....tif",
        long.as_str(),
    ];
    // A local file with an absolute path, too.
    let abs = work.path().join("abs").join("absolute.tif");
    std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
    std::fs::write(&abs, &tile).unwrap();
    let out = work.path().join("jail").join("out");
    let rt = runtime();
    let report = rt.block_on(async {
        let server = TileServer::start(names.iter().map(|n| (n.to_string(), tile.clone())))
            .await
            .unwrap();
        let mut inputs: Vec<String> = names.iter().map(|n| server.url(n)).collect();
        inputs.push(abs.display().to_string());
        let list = work.path().join("list.txt");
        std::fs::write(&list, inputs.join("\n")).unwrap();
        let toml = list_pipeline(&list, &out, "");
        common::run_async(&toml).await
    });
    assert_eq!(report.items.done, 6, "{report}");
    let written = files(work.path().join("jail").as_path());
    assert_eq!(written.len(), 6, "{written:?}");
    for p in &written {
        assert_eq!(
            p.parent(),
            Some(out.as_path()),
            "{} is outside {}",
            p.display(),
            out.display()
        );
        assert!(p.file_name().unwrap().len() <= 130, "{}", p.display());
    }
    // Nothing appeared anywhere else in the work tree.
    let elsewhere: Vec<_> = files(work.path())
        .into_iter()
        .filter(|p| {
            !p.starts_with(work.path().join("jail")) && !p.starts_with(work.path().join("abs"))
        })
        .filter(|p| p.file_name().is_some_and(|n| n != "list.txt"))
        .collect();
    assert!(elsewhere.is_empty(), "{elsewhere:?}");
}

#[test]
fn only_the_configured_schemes_are_fetched_and_redirects_cannot_switch_scheme() {
    let work = tempfile::tempdir().unwrap();
    let secret = work.path().join("secret.tif");
    std::fs::write(&secret, tiles(1, 64).remove(0).1).unwrap();
    let rt = runtime();
    let (report, requests) = rt.block_on(async {
        let faults = Faults {
            redirects: vec![
                ("to-file.tif".into(), format!("file://{}", secret.display())),
                ("to-ftp.tif".into(), "ftp://127.0.0.1/x.tif".into()),
            ],
            ..Faults::default()
        };
        let server = TileServer::start_with(Vec::<(String, Vec<u8>)>::new(), faults)
            .await
            .unwrap();
        let list = work.path().join("list.txt");
        let inputs = [
            server.url("to-file.tif"),
            server.url("to-ftp.tif"),
            secret.display().to_string(), // a local path: refused by `schemes`
            format!("file://{}", secret.display()),
        ];
        std::fs::write(&list, inputs.join("\n")).unwrap();
        let toml = list_pipeline(&list, &work.path().join("out"), "retry = { attempts = 1 }")
            .replace(
                "kind = \"list\"",
                "kind = \"list\"\nschemes = [\"http\", \"https\"]",
            );
        let report = common::run_async(&toml).await;
        (report, server.requests())
    });
    assert_eq!(report.items.done, 0, "{report}");
    assert_eq!(report.items.failed, 4, "{report}");
    assert_eq!(requests, 2, "only the two http inputs reached the server");
    let redirected: Vec<_> = report
        .failures
        .iter()
        .filter(|f| f.stage == "fetch")
        .collect();
    assert_eq!(redirected.len(), 2, "{report}");
    for f in redirected {
        assert!(f.message.contains("redirect"), "{f:?}");
    }
    assert_eq!(
        report
            .failures
            .iter()
            .filter(|f| f.stage == "source")
            .count(),
        2
    );
    assert!(files(&work.path().join("out")).is_empty());
}

#[test]
fn credentials_never_appear_in_logs_reports_or_failure_records() {
    let work = tempfile::tempdir().unwrap();
    let rt = runtime();
    let server = rt
        .block_on(TileServer::start(Vec::<(String, Vec<u8>)>::new()))
        .unwrap();
    let addr = server.addr();
    let list = work.path().join("list.txt");
    std::fs::write(
        &list,
        format!(
            "http://alice:hunter2secret@{addr}/tiles/missing.tif\nhttp://{addr}/tiles/gone.tif?token=hunter2secret&x=1\n"
        ),
    )
    .unwrap();
    let pipeline = work.path().join("p.toml");
    std::fs::write(
        &pipeline,
        list_pipeline(&list, &work.path().join("out"), ""),
    )
    .unwrap();
    let (report, failures) = (
        work.path().join("report.json"),
        work.path().join("failures.jsonl"),
    );
    let out = warpline()
        .arg("run")
        .arg(&pipeline)
        .arg("--report")
        .arg(&report)
        .arg("--failures")
        .arg(&failures)
        .env("WARPLINE_LOG", "trace")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let everything = [
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&report).unwrap(),
        std::fs::read_to_string(&failures).unwrap(),
    ];
    // The password travels as a Basic Authorization header: not that either.
    let basic = "YWxpY2U6aHVudGVyMnNlY3JldA"; // base64("alice:hunter2secret")
    for (what, text) in ["stdout", "stderr", "report", "failures"]
        .iter()
        .zip(&everything)
    {
        assert!(
            !text.contains("hunter2secret"),
            "{what} leaks the secret:\n{text}"
        );
        assert!(
            !text.contains(basic),
            "{what} leaks the Authorization header:\n{text}"
        );
    }
    assert!(
        everything[3].contains("***"),
        "the records still say where: {}",
        everything[3]
    );
    assert_eq!(everything[3].lines().count(), 2);
    drop(server);
}

#[test]
fn gdal_makes_no_request_and_opens_no_file_of_its_own() {
    let work = tempfile::tempdir().unwrap();
    let local = work.path().join("local.tif");
    std::fs::write(&local, tiles(1, 64).remove(0).1).unwrap();
    let rt = runtime();
    let (report, requests) = rt.block_on(async {
        // The bait: a second server that must never be contacted.
        let bait = TileServer::start(tiles(1, 64)).await.unwrap();
        let bait_url = bait.url("utm18n-000.tif");
        let vrt = format!(
            r#"<VRTDataset rasterXSize="64" rasterYSize="64"><VRTRasterBand dataType="Byte" band="1"><SimpleSource><SourceFilename relativeToVRT="0">/vsicurl/{bait_url}</SourceFilename></SimpleSource></VRTRasterBand></VRTDataset>"#
        );
        let vrt_local = format!(
            r#"<VRTDataset rasterXSize="64" rasterYSize="64"><VRTRasterBand dataType="Byte" band="1"><SimpleSource><SourceFilename relativeToVRT="0">{}</SourceFilename></SimpleSource></VRTRasterBand></VRTDataset>"#,
            local.display()
        );
        let server = TileServer::start(vec![
            ("vrt.tif".to_owned(), vrt.into_bytes()),
            ("vrt-local.tif".to_owned(), vrt_local.into_bytes()),
            ("mem.tif".to_owned(), b"MEM:::DATAPOINTER=0x1000,PIXELS=64,LINES=64,BANDS=1".to_vec()),
        ])
        .await
        .unwrap();
        let list = work.path().join("list.txt");
        let inputs = [
            format!("/vsicurl/{bait_url}"),
            server.url("vrt.tif"),
            server.url("vrt-local.tif"),
            server.url("mem.tif"),
        ];
        std::fs::write(&list, inputs.join("\n")).unwrap();
        let toml = list_pipeline(&list, &work.path().join("out"), "");
        let report = common::run_async(&toml).await;
        (report, bait.requests())
    });
    assert_eq!(report.items.failed, 4, "{report}");
    assert_eq!(requests, 0, "GDAL was made to contact the bait server");
    for f in &report.failures {
        match f.id.as_str() {
            id if id.ends_with(":1") => assert_eq!(f.stage, "source", "{f:?}"),
            _ => assert!(f.message.contains("not a readable raster"), "{f:?}"),
        }
    }
}

#[test]
fn a_tiny_tiff_declaring_a_huge_raster_fails_before_allocating() {
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("bomb.tif");
    common::write_bomb(&path);
    // Even with the pixel cap lifted, the 10 GB decode must not happen: the
    // byte cap and the memory budget refuse it first.
    let toml = common::one_raster_pipeline(
        &path,
        "crs = \"EPSG:4326\"",
        &work.path().join("out"),
        "max_pixels = 100000000000",
    );
    let pipeline = work.path().join("p.toml");
    std::fs::write(&pipeline, toml).unwrap();
    let report = work.path().join("r.json");
    let out = run_reporting(&pipeline, &report);
    common::assert_exit(&out, 3);
    let json: serde_json::Value = common::read_json(&report);
    let f = &json["failures"][0];
    assert_eq!(f["stage"], "decode", "{f}");
    assert!(
        f["message"].as_str().unwrap().contains("max_decoded_bytes"),
        "{f}"
    );
    let rss = json["peak_rss_bytes"].as_u64().unwrap();
    assert!(
        rss < 512 << 20,
        "peak RSS {rss} bytes is over the 512 MiB budget"
    );
}

/// `warpline run` at `WARPLINE_LOG=debug`, writing every file it can:
/// report, HTML report, failures and events.
fn run_writing_everything(
    pipeline: &std::path::Path,
    files: &[std::path::PathBuf; 4],
) -> std::process::Output {
    warpline()
        .arg("run")
        .arg(pipeline)
        .arg("--report")
        .arg(&files[0])
        .arg("--report-html")
        .arg(&files[1])
        .arg("--failures")
        .arg(&files[2])
        .arg("--events")
        .arg(&files[3])
        .arg("--progress=off")
        .env("WARPLINE_LOG", "debug")
        .output()
        .unwrap()
}

/// Everything a run showed: its stdout and stderr, and the files it wrote
/// (report, HTML report, failures, events).
fn everything_shown(
    out: &std::process::Output,
    files: &[std::path::PathBuf; 4],
) -> Vec<(&'static str, String)> {
    let mut everything = vec![
        ("stdout", String::from_utf8_lossy(&out.stdout).into_owned()),
        ("stderr", String::from_utf8_lossy(&out.stderr).into_owned()),
    ];
    for (what, path) in ["report", "HTML report", "failures", "events"]
        .into_iter()
        .zip(files)
    {
        everything.push((what, std::fs::read_to_string(path).unwrap()));
    }
    everything
}

/// The query parameters of signed URLs (GCS, S3, Azure, tokens), each with
/// a secret value: every one holds `qqv`.
fn signed_parameters() -> Vec<String> {
    [
        "sig",
        "se",
        "sp",
        "sv",
        "X-Goog-Signature",
        "X-Goog-Credential",
        "refresh_token",
        "X-Amz-Security-Token",
        "X-Amz-Credential",
        "X-Amz-Signature",
        "AWSAccessKeyId",
        "Signature",
        "Policy",
        "Key-Pair-Id",
        "api_key",
        "access_token",
        "password",
        "TOKEN",
    ]
    .iter()
    .enumerate()
    .map(|(i, name)| format!("{name}=qqv{i}"))
    .collect()
}

/// Issue 16, item 6: a URL that does not parse (port out of range) was
/// quoted verbatim everywhere; signed-URL parameters of GCS, S3 and Azure
/// passed unredacted; and at `WARPLINE_LOG=debug` a redirect target's user
/// information showed in the HTTP client's logs.
#[test]
fn secrets_stay_hidden_in_urls_that_do_not_parse_and_in_debug_logs() {
    let work = tempfile::tempdir().unwrap();
    let rt = runtime();
    let target = rt
        .block_on(TileServer::start(Vec::<(String, Vec<u8>)>::new()))
        .unwrap();
    let target_addr = target.addr();
    let redirecting = rt
        .block_on(TileServer::start_with(
            Vec::<(String, Vec<u8>)>::new(),
            Faults {
                redirects: vec![(
                    "moved.tif".into(),
                    format!("http://bob:redirpw9@{target_addr}/tiles/gone.tif"),
                )],
                ..Faults::default()
            },
        ))
        .unwrap();
    let signed = signed_parameters();
    let lines = [
        "http://user:hunter2@127.0.0.1:99999/x.tif?token=S&X-Goog-Signature=abc".to_owned(),
        format!("https://127.0.0.1:99999/y.tif?a=1&{}", signed.join("&")),
        "ftp://carol:ftpqqv@h.example/z.tif?token=qqvftp".to_owned(),
        format!("http://dave:pathlessqqv@{target_addr}"),
        redirecting.url("moved.tif"),
    ];
    let list = work.path().join("list.txt");
    std::fs::write(&list, lines.join("\n")).unwrap();
    let pipeline = work.path().join("p.toml");
    std::fs::write(
        &pipeline,
        list_pipeline(&list, &work.path().join("out"), ""),
    )
    .unwrap();
    let files = [
        "report.json",
        "report.html",
        "failures.jsonl",
        "events.jsonl",
    ]
    .map(|name| work.path().join(name));
    let out = run_writing_everything(&pipeline, &files);
    let everything = everything_shown(&out, &files);
    assert_eq!(out.status.code(), Some(3), "{}", everything[1].1);
    // The work folder's random name is no secret, and could hold `abc`.
    let folder = work.path().display().to_string();
    for (what, text) in &everything {
        let text = text.replace(&folder, "WORK");
        for secret in [
            "hunter2",
            "token=S",
            "abc",
            "qqv",
            "redirpw9",
            "Ym9iOnJlZGlycHc5",
        ] {
            assert!(!text.contains(secret), "{what} shows {secret:?}:\n{text}");
        }
    }
    let failures = &everything[4].1;
    assert_eq!(failures.lines().count(), lines.len(), "{failures}");
    assert!(
        failures.contains("http://***@127.0.0.1:99999/x.tif?token=***&X-Goog-Signature=***"),
        "the records still say which input failed, and why: {failures}"
    );
    drop((target, redirecting));
}
