//! `warpline validate` and `warpline plan`: every problem, with its key
//! path and tier, and the pipeline as it will run.

use std::path::Path;

use super::{small, succeeded, warpline, write};

#[test]
fn validate_accepts_every_shipped_pipeline() {
    let out = warpline()
        .args(["validate", "pipelines/synthetic.toml"])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("valid"), "{stdout}");
    assert!(stdout.contains("admission bound"), "{stdout}");
}

#[test]
fn validate_prints_every_error_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.toml",
        &small()
            .replace("workers = 2", "workers = 0\nlimits = [\"gpu\"]")
            .replace("count = 50", "count = 50\nsize = \"huge\""),
    );
    let good = write(dir.path(), "good.toml", &small());
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

/// A pipeline with one problem of each tier: a schema one (the budget), a
/// graph one (an undeclared limiter) and an environment one (the CRS).
const BAD_IN_EVERY_TIER: &str = r#"
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
"#;

#[test]
fn validate_json_lists_every_problem_with_its_tier() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.toml", BAD_IN_EVERY_TIER);
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
    let cpu = crate::common::entry(&plan["limiters"], "name", "cpu");
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

/// Two fetch stages, one adapting with its own settings, one not: `plan`
/// shows each one's adaptive settings, in text and JSON; a stage that makes
/// no requests has none.
const TWO_FETCHES: &str = r#"
[pipeline]
flow = ["fetch", "again", "work"]
[source]
kind = "list"
path = "tiles.txt"
[stages.fetch]
kind = "fetch"
workers = 8
adaptive = { initial = 4, min = 2, max = 6, decrease = 0.7, latency = 2.5, max_throttled = 20 }
[stages.again]
kind = "fetch"
workers = 2
adaptive = false
[stages.work]
kind = "hold"
"#;

#[test]
fn plan_shows_each_fetch_stages_adaptive_settings() {
    let dir = tempfile::tempdir().unwrap();
    let toml = write(dir.path(), "two.toml", TWO_FETCHES);
    let plan = |format: &str| {
        let out = warpline()
            .arg("plan")
            .arg(&toml)
            .args(["--format", format])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json: serde_json::Value = serde_json::from_str(&plan("json")).unwrap();
    let stages = json["stages"].as_array().unwrap();
    assert_eq!(
        stages[0]["adaptive"],
        serde_json::json!({
            "on": true, "initial": 4, "min": 2, "max": 6,
            "decrease": 0.7, "latency": 2.5, "max_throttled": 20,
        })
    );
    assert_eq!(stages[1]["adaptive"], serde_json::json!({ "on": false }));
    assert!(stages[2].get("adaptive").is_none(), "{json}");
    let text = plan("text");
    for words in [
        "adaptive on: concurrency per host from 4 (min 2, max 6), decrease x0.7, latency x2.5, max_throttled 20",
        "adaptive off",
    ] {
        assert!(text.contains(words), "{words} missing:\n{text}");
    }
}
