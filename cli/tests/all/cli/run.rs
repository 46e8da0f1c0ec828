//! `warpline run`: the report, exit codes, usage errors, overrides, and an
//! interrupt that drains.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use super::{run, small, succeeded, warpline, write, write_failing};

#[test]
fn run_prints_the_report_writes_json_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = warpline()
        .args([
            "run",
            "pipelines/synthetic.toml",
            "--set",
            "source.count=300",
            "--report",
        ])
        .arg(&report)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("300 done"), "{stdout}");
    let json: serde_json::Value = common::read_json(&report);
    assert_eq!(json["items"]["total"], 300);
    assert_eq!(json["items"]["done"], 300);
    assert_eq!(json["outcome"], "completed");
    assert!(json["elapsed_s"].as_f64().unwrap() > 0.0);
    let stages = json["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 3);
    for s in stages {
        for key in ["name", "workers", "mailbox", "processed", "busy_s"] {
            assert!(!s[key].is_null(), "stage field {key} missing: {s}");
        }
        assert_eq!(s["processed"], 300);
    }
    for l in json["limiters"].as_array().unwrap() {
        for key in ["name", "kind", "capacity", "peak_in_use"] {
            assert!(l.get(key).is_some(), "limiter field {key} missing: {l}");
        }
        if let Some(peak) = l["peak_in_use"].as_u64() {
            assert!(peak <= l["capacity"].as_u64().unwrap(), "{l}");
        }
    }
}

#[test]
fn environment_overrides_reach_the_binary() {
    let out = warpline()
        .args([
            "run",
            "pipelines/synthetic.toml",
            "--set",
            "source.count=20",
        ])
        .env("WARPLINE__STAGES__CRUNCH__WORKERS", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let crunch = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("crunch"))
        .unwrap();
    assert!(crunch.contains("workers   1"), "{crunch}");
}

#[test]
fn failed_items_exit_3_and_abort_on_error_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let failing = write_failing(dir.path());
    let out = run(&failing, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("7 failed"), "{stdout}");

    let out = run(
        &failing,
        &["--set".as_ref(), "pipeline.on_error=abort".as_ref()],
    );
    common::assert_exit(&out, 4);
}

#[test]
fn usage_errors_and_bad_pipelines_exit_2() {
    let out = warpline()
        .args(["run", "does-not-exist.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does-not-exist.toml"));
    let out = warpline()
        .args(["run", "pipelines/synthetic.toml", "--set", "novalue"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=VALUE"));
    let out = warpline().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // The demo makes its own inputs: it takes no coordinator.
    let out = warpline()
        .args(["demo", "--coordinator", "redis://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A coordinated run's workers share one queue: a shard or a retry list
    // would leave the inputs they filter out unacknowledged (the run hung).
    for (flag, value) in [("--shard", "1/2"), ("--retry-failed", "failed.jsonl")] {
        let out = warpline()
            .args(["run", "pipelines/synthetic.toml"])
            .args(["--coordinator", "redis://127.0.0.1:1", flag, value])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{flag} cannot be used with --coordinator")),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn set_values_are_read_as_in_the_file_quoted_or_not() {
    let validate = |sets: &[&str]| {
        let mut cmd = warpline();
        cmd.args(["validate", "pipelines/demo.toml"]);
        for s in sets {
            cmd.args(["--set", s]);
        }
        cmd.output().unwrap()
    };
    // The reference's examples: quoted TOML, an inline table, plain text.
    let out = validate(&[
        "stages.reproject.crs=\"EPSG:4326\"",
        "stages.write.creation_options={ COMPRESS = \"LZW\" }",
        "limits.cpu.permits=cores",
        "stages.reproject.crs=EPSG:4326",
    ]);
    common::assert_exit(&out, 0);
    let out = validate(&["stages.reproject.crs=\"EPSG:999999\""]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("the CRS \"EPSG:999999\":"),
        "the CRS is named without the shell's quotes: {stdout}"
    );
}

#[test]
fn a_report_path_that_cannot_be_written_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write(dir.path(), "p.toml", &small());
    for flag in ["--report", "--report-html"] {
        let report = dir.path().join("missing-dir/report");
        let out = run(&pipeline, &[flag.as_ref(), report.as_ref()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{flag}: {stderr}");
        assert!(stderr.contains("missing-dir/report"), "{flag}: {stderr}");
        assert!(
            !stdout.contains("completed"),
            "{flag}: the run went ahead: {stdout}"
        );
    }
}

#[test]
fn help_names_the_commands_and_exit_codes() {
    let out = warpline().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["run", "validate", "Exit codes", "docs/pipeline.md"] {
        assert!(text.contains(word), "{word} missing from --help:\n{text}");
    }
}

#[cfg(unix)]
#[test]
fn an_interrupt_drains_the_run_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that it cannot finish on its own before the signal.
    let slow = write(
        dir.path(),
        "slow.toml",
        &small()
            .replace("count = 50", "count = 100000")
            .replace("workers = 2", "workers = 2\nduration = \"50ms\""),
    );
    let report = dir.path().join("r.json");
    let mut child = warpline()
        .arg("run")
        .arg(&slow)
        .arg("--report")
        .arg(&report)
        .env("WARPLINE_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the run to start (a log line), not for a guessed time.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("run starting") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no start line");
    }
    assert_eq!(common::interrupt(&mut child).code(), Some(130));
    let json: serde_json::Value = common::read_json(&report);
    assert_eq!(json["outcome"], "stopped");
    let i = &json["items"];
    assert_eq!(i["failed"], 0, "a drained stop fails nothing: {json}");
    assert!(i["total"].as_u64().unwrap() < 100000);
    assert_eq!(i["done"], i["total"]);
}
