//! The `warpline` binary: validate, run, the report file, exit codes, and an
//! interrupt that drains.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn warpline() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_warpline"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c.env_remove("WARPLINE_LOG");
    c
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const SMALL: &str = r#"
[pipeline]
flow = ["work"]
[source]
kind = "generate"
count = 50
[stages.work]
kind = "hold"
workers = 2
"#;

#[test]
fn validate_accepts_every_shipped_pipeline() {
    let out = warpline()
        .args(["validate", "pipelines/synthetic.toml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("valid"), "{stdout}");
    assert!(stdout.contains("admission bound"), "{stdout}");
}

#[test]
fn validate_prints_every_error_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.toml",
        &SMALL
            .replace("workers = 2", "workers = 0\nlimits = [\"gpu\"]")
            .replace("count = 50", "count = 50\nsize = \"huge\""),
    );
    let good = write(dir.path(), "good.toml", SMALL);
    let out = warpline()
        .arg("validate")
        .args([&good, &bad])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("good.toml: valid"), "{stdout}");
    for key in [
        "stages.work.workers",
        "stages.work.limits[0]",
        "source.size",
    ] {
        assert!(stdout.contains(key), "{key} missing from:\n{stdout}");
    }
    assert!(stdout.contains("3 problems"), "{stdout}");
}

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
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("300 done"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
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
    let failing = write(
        dir.path(),
        "f.toml",
        &SMALL.replace("workers = 2", "fail_every = 7"),
    );
    let out = warpline().arg("run").arg(&failing).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("7 failed"), "{stdout}");

    let out = warpline()
        .arg("run")
        .arg(&failing)
        .args(["--set", "pipeline.on_error=abort"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
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
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
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
    let pipeline = write(dir.path(), "p.toml", SMALL);
    for flag in ["--report", "--report-html"] {
        let out = warpline()
            .arg("run")
            .arg(&pipeline)
            .arg(flag)
            .arg(dir.path().join("missing-dir/report"))
            .output()
            .unwrap();
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
        &SMALL
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
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["outcome"], "stopped");
    let i = &json["items"];
    assert_eq!(i["failed"], 0, "a drained stop fails nothing: {json}");
    assert!(i["total"].as_u64().unwrap() < 100000);
    assert_eq!(i["done"], i["total"]);
}

#[test]
fn the_demo_runs_and_its_outputs_open_in_gdalinfo() {
    let dir = tempfile::tempdir().unwrap();
    let out = warpline()
        .current_dir(dir.path())
        .args(["demo", "--report", "report.json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    let expected = 4 * warpline_cli::demo::TILES_PER_CRS as u64;
    assert_eq!(json["items"]["done"], expected, "{stdout}");
    let outputs: Vec<_> = std::fs::read_dir(dir.path().join("out/demo/output"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        outputs.len() as u64,
        expected,
        "no temporary file is left: {outputs:?}"
    );
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
    let failing = write(
        dir.path(),
        "f.toml",
        &SMALL.replace("workers = 2", "fail_every = 7"),
    );
    let failures = dir.path().join("failures.jsonl");
    let out = warpline()
        .arg("run")
        .arg(&failing)
        .arg("--failures")
        .arg(&failures)
        .output()
        .unwrap();
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
    let out = warpline()
        .arg("run")
        .arg(&failing)
        .arg("--retry-failed")
        .arg(&failures)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
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

    let out = warpline()
        .arg("run")
        .arg(&failing)
        .args(["--retry-failed", "/nonexistent/failures.jsonl"])
        .output()
        .unwrap();
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
fn validate_json_lists_every_problem_with_its_tier() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.toml",
        r#"
[pipeline]
flow = ["fetch", "decode", "reproject", "write"]
[source]
kind = "inline"
inputs = ["a.tif"]
[limits.memory]
budget = "lots"
[stages.fetch]
kind = "fetch"
limits = ["connections"]
[stages.decode]
kind = "decode"
[stages.reproject]
kind = "reproject"
crs = "EPSG:4000000"
[stages.write]
kind = "write"
dir = "out"
"#,
    );
    let out = warpline()
        .args(["validate", "--format", "json"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], false);
    let problems = json["files"][0]["problems"].as_array().unwrap();
    let found: Vec<(String, String)> = problems
        .iter()
        .map(|p| {
            (
                p["tier"].as_str().unwrap().to_owned(),
                p["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (tier, path) in [
        ("schema", "limits.memory.budget"),
        ("graph", "stages.fetch.limits[0]"),
        ("environment", "stages.reproject.crs"),
    ] {
        assert!(
            found.contains(&(tier.to_owned(), path.to_owned())),
            "{tier} {path} missing: {found:?}"
        );
    }
    assert_eq!(problems.len(), 3, "{found:?}");

    // The environment tier checks the output directory once the rest is valid.
    let blocked = dir.path().join("a-file");
    std::fs::write(&blocked, "x").unwrap();
    let fixed = std::fs::read_to_string(&bad)
        .unwrap()
        .replace("\"lots\"", "\"64MiB\"")
        .replace("limits = [\"connections\"]\n", "memory = \"memory\"\n")
        .replace("EPSG:4000000", "EPSG:3857")
        .replace(
            "dir = \"out\"",
            &format!("dir = {:?}", blocked.join("out").display().to_string()),
        );
    let fixed = write(dir.path(), "fixed.toml", &fixed);
    let out = warpline()
        .args(["validate", "--format", "json"])
        .arg(&fixed)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &json["files"][0]["problems"][0];
    assert_eq!(
        (p["tier"].as_str(), p["path"].as_str()),
        (Some("environment"), Some("stages.write")),
        "{json}"
    );
}

#[test]
fn plan_shows_resolved_numbers_and_the_admission_bound() {
    let out = warpline()
        .args(["plan", "pipelines/synthetic.toml", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pipeline = warpline::Pipeline::from_path(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines/synthetic.toml"),
        &warpline::registry(),
    )
    .unwrap();
    assert_eq!(plan["admission_bound"], pipeline.admission_bound());
    let cpu = plan["limiters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "cpu")
        .unwrap();
    assert_eq!(
        cpu["capacity"],
        u64::from(warpline::engine::units::cores()),
        "\"cores\" resolved"
    );
    assert!(plan["estimated_peak_memory_bytes"].as_u64().unwrap() > 8 << 20);
    let text = warpline()
        .args(["plan", "pipelines/demo.toml"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    for words in [
        "admission bound",
        "GDAL block cache",
        "estimated peak memory",
        "blocking workers",
    ] {
        assert!(text.contains(words), "{words} missing:\n{text}");
    }
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
