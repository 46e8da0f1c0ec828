//! What a run leaves besides its exit code: the demo's COGs, the failures
//! file and `--retry-failed`, the HTML report, JSON logs and Prometheus
//! metrics.

use crate::common;

use std::process::{Command, Stdio};

use super::{run, succeeded, warpline, write, write_failing};

#[test]
fn the_demo_runs_and_its_outputs_open_in_gdalinfo() {
    let dir = tempfile::tempdir().unwrap();
    let out = warpline()
        .current_dir(dir.path())
        .args(["demo", "--report", "report.json"])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    let expected = 4 * warpline_cli::demo::TILES_PER_CRS as u64;
    assert_eq!(json["items"]["done"], expected, "{stdout}");
    let all: Vec<_> = std::fs::read_dir(dir.path().join("out/demo/output"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // A COG, its STAC item (`name.json`) each, and the collection.
    assert_eq!(
        all.len() as u64,
        2 * expected + 1,
        "no temporary file is left: {all:?}"
    );
    let outputs: Vec<_> = all
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "tif"))
        .collect();
    assert_eq!(outputs.len() as u64, expected, "{outputs:?}");
    for p in &outputs {
        let info = Command::new("gdalinfo").arg(p).output().unwrap();
        let text = String::from_utf8_lossy(&info.stdout);
        assert!(info.status.success(), "{}", p.display());
        assert!(text.contains("Pseudo-Mercator"), "{}: {text}", p.display());
        assert!(text.contains("LAYOUT=COG"), "{}: not a COG", p.display());
    }
}

#[test]
fn failures_are_written_as_json_lines_and_retry_failed_reruns_only_them() {
    let dir = tempfile::tempdir().unwrap();
    let failing = write_failing(dir.path());
    let failures = dir.path().join("failures.jsonl");
    let out = run(&failing, &["--failures".as_ref(), failures.as_ref()]);
    assert_eq!(out.status.code(), Some(3));
    let text = std::fs::read_to_string(&failures).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 7);
    for r in &records {
        for key in [
            "id", "source", "stage", "kind", "message", "attempts", "status",
        ] {
            assert!(r.get(key).is_some(), "{key} missing from {r}");
        }
        assert_eq!(r["stage"], "work");
        assert_eq!(r["kind"], "permanent");
    }
    let ids: std::collections::BTreeSet<&str> =
        records.iter().map(|r| r["id"].as_str().unwrap()).collect();

    let report = dir.path().join("retry.json");
    let retry = ["--retry-failed".as_ref(), failures.as_ref()];
    let out = run(
        &failing,
        &[&retry[..], &["--report".as_ref(), report.as_ref()]].concat(),
    );
    common::assert_exit(&out, 3);
    let json: serde_json::Value = common::read_json(&report);
    assert_eq!(
        json["items"]["total"], 7,
        "only the failed ids were admitted: {json}"
    );
    assert_eq!(
        json["items"]["failed"], 1,
        "the 7th of 7 fails again: {json}"
    );
    let again = json["failures"][0]["id"].as_str().unwrap();
    assert!(ids.contains(again));

    let out = run(
        &failing,
        &[
            "--retry-failed".as_ref(),
            "/nonexistent/failures.jsonl".as_ref(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/failures.jsonl"));
}

#[test]
fn the_html_report_is_self_contained_and_has_the_timeline_chart() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let events = dir.path().join("events.jsonl");
    let out = warpline()
        .args([
            "run",
            "pipelines/synthetic.toml",
            "--set",
            "source.count=400",
            "--report-html",
        ])
        .arg(&html)
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>"));
    assert!(
        page.contains("<svg") && page.contains("<polyline"),
        "no chart"
    );
    assert!(page.contains("Items in flight per stage") && page.contains("Limiter use"));
    for stage in ["fetch", "crunch", "sink"] {
        assert!(page.contains(stage));
    }
    assert!(
        !page.contains("http://") && !page.contains("https://") && !page.contains("<script"),
        "fetches nothing"
    );
    // Every event line parses, and the run's outcome events bracket them.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.first().unwrap()["event"], "run_started");
    assert_eq!(lines.last().unwrap()["event"], "run_finished");
    assert_eq!(lines.iter().filter(|e| e["event"] == "done").count(), 400);
}

#[test]
fn json_logs_carry_the_item_and_stage_also_for_gdal_messages() {
    let dir = tempfile::tempdir().unwrap();
    let junk = write(dir.path(), "junk.tif", "{\"not\": \"a tiff\"}");
    let pipeline = write(
        dir.path(),
        "p.toml",
        &format!(
            r#"
[pipeline]
flow = ["fetch", "decode"]
[source]
kind = "inline"
inputs = [{:?}]
[stages.fetch]
kind = "fetch"
[stages.decode]
kind = "decode"
"#,
            junk.display().to_string()
        ),
    );
    let out = warpline()
        .args(["--log-format", "json", "run"])
        .arg(&pipeline)
        .env("WARPLINE_LOG", "gdal=debug,warpline_engine=warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let logs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let gdal = logs
        .iter()
        .find(|l| l["target"] == "gdal")
        .expect("a GDAL message");
    assert_eq!(gdal["span"]["id"], "junk", "{gdal}");
    assert_eq!(gdal["span"]["stage"], "decode", "{gdal}");
    let failed = logs
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("failed"))
        })
        .expect("a failure line");
    assert_eq!(failed["span"]["id"], "junk", "{failed}");
}

#[test]
fn metrics_are_served_in_prometheus_text_while_running() {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = warpline()
        .args([
            "run",
            "pipelines/synthetic.toml",
            "--set",
            "source.count=100000",
            "--metrics",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Scrape until the counters show up (a condition, not a guessed time;
    // the deadline only turns a hang into a failure).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let body = loop {
        assert!(std::time::Instant::now() < deadline, "no metrics");
        assert!(child.try_wait().unwrap().is_none(), "the run ended first");
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            if text.contains("warpline_items_total") && text.contains("warpline_stage_queue_depth")
            {
                break text;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    // Every series names its run (the pipeline's name), whatever the
    // labels' order; every metric has its help text.
    for (name, label) in [
        ("warpline_items_total", "outcome=\"done\""),
        ("warpline_stage_queue_depth", "stage=\"crunch\""),
        ("warpline_limiter_in_use", "limiter=\"cpu\""),
        ("warpline_limiter_capacity", "limiter=\"cpu\""),
        ("warpline_limiter_waiters", "limiter=\"cpu\""),
    ] {
        let found = body.lines().any(|l| {
            l.starts_with(&format!("{name}{{"))
                && l.contains(label)
                && l.contains("pipeline=\"synthetic\"")
        });
        assert!(found, "{name}{{{label}, pipeline}} missing:\n{body}");
        assert!(body.contains(&format!("# HELP {name} ")), "{name}:\n{body}");
    }
}
