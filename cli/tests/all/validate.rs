//! `warpline validate` in one pass: every independent problem of a file
//! at once (schema, graph and this machine), and none that follows only from
//! another.

use crate::binary::{said, warpline};

use std::path::{Path, PathBuf};

use warpline_testkit::pipelines::generated;

/// Four independent mistakes: a bad value in fetch, a wait against the
/// declaration order in decode (it holds the `memory` fetch charges while
/// waiting for `cpu`, declared before it), no workers in write, and an
/// output directory that cannot be made. Write's `release` is right.
fn four() -> String {
    generated(
        &["fetch", "decode", "write"],
        3,
        r#"[limits.cpu]
permits = 2
[limits.memory]
budget = "64MiB"
[stages.fetch]
kind = "fetch"
memory = "memory"
timeout = "soon"
[stages.decode]
kind = "decode"
limits = ["cpu"]
[stages.write]
kind = "write"
release = ["memory"]
dir = "/proc/warpline-no-such-dir/out"
workers = 0
"#,
    )
}

fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn validate(path: &Path) -> (Option<i32>, serde_json::Value) {
    let out = warpline()
        .args(["validate", "--format", "json"])
        .arg(path)
        .output()
        .unwrap();
    let json =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(&out)));
    (out.status.code(), json)
}

fn paths(json: &serde_json::Value) -> Vec<(String, String)> {
    json["files"][0]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap().to_owned(),
                p["tier"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_independent_problem_is_reported_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (code, json) = validate(&file(dir.path(), "four.toml", &four()));
    assert_eq!(code, Some(2), "{json:#}");
    let found = paths(&json);
    let at: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    for want in [
        "stages.fetch.timeout",
        "stages.decode.limits",
        "stages.write.workers",
        "stages.write",
    ] {
        assert!(at.contains(&want), "{want} missing: {json:#}");
    }
    assert!(
        found
            .iter()
            .any(|(p, tier)| p == "stages.write" && tier == "environment"),
        "{json:#}"
    );
    // Write's release is right: fetch charges `memory`, and a bad timeout
    // does not change that.
    assert!(!at.iter().any(|p| p.contains("release")), "{json:#}");
    assert_eq!(found.len(), 4, "{json:#}");
}

#[test]
fn a_stage_that_cannot_be_read_hides_no_problem_and_makes_up_none() {
    let dir = tempfile::tempdir().unwrap();
    // fetch's table cannot be read (a misspelt key): what it charges is not
    // known, so write's `release = ["memory"]` is not called wrong, and the
    // report says what was not checked.
    let text = four().replace("timeout = \"soon\"", "timout = \"30s\"");
    let (code, json) = validate(&file(dir.path(), "misspelt.toml", &text));
    assert_eq!(code, Some(2), "{json:#}");
    let found = paths(&json);
    let at: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert!(at.contains(&"stages.fetch"), "{json:#}");
    assert!(at.contains(&"stages.write.workers"), "{json:#}");
    assert!(at.contains(&"stages.write"), "{json:#}");
    assert!(!at.iter().any(|p| p.contains("release")), "{json:#}");
    let not_checked = json["files"][0]["not_checked"].as_array().unwrap();
    assert!(
        not_checked
            .iter()
            .any(|n| n.as_str().unwrap().contains("after stage `fetch`")),
        "{json:#}"
    );
}

#[test]
fn a_flow_that_hands_write_fetched_bytes_fails_validation() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nflow = [\"fetch\", \"write\"]\n[source]\nkind = \"generate\"\ncount = 1\n\
         [stages.fetch]\nkind = \"fetch\"\n[stages.write]\nkind = \"write\"\ndir = {:?}\n",
        dir.path().join("out")
    );
    let (code, json) = validate(&file(dir.path(), "no_decode.toml", &text));
    assert_eq!(code, Some(2), "{json:#}");
    let problems = json["files"][0]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{json:#}");
    assert_eq!(problems[0]["path"], "pipeline.flow[1]", "{json:#}");
    let message = problems[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "stage `write` takes a raster (warpline_stages::gdal::Raster) but `fetch` hands on \
             fetched bytes (warpline_stages::fetch::Fetched)"
        ),
        "{json:#}"
    );
    // With decode between them, the flow is right.
    let fixed = text
        .replace("\"fetch\", \"write\"", "\"fetch\", \"decode\", \"write\"")
        .replace(
            "[stages.write]",
            "[stages.decode]\nkind = \"decode\"\n[stages.write]",
        );
    let (code, json) = validate(&file(dir.path(), "fixed.toml", &fixed));
    assert_eq!(code, Some(0), "{json:#}");
}

/// Issue 37's table: `workerz = 4` and `timeout = "soon"` in fetch, and a
/// second misspelt key: all three said at once, each at its key path and
/// with the nearest key, in text and in JSON.
#[test]
fn every_mistake_of_a_stage_table_is_said_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = generated(
        &["fetch"],
        1,
        "[stages.fetch]\nkind = \"fetch\"\nworkerz = 4\ntimeout = \"soon\"\nmax_redirect = 2\n",
    );
    let path = file(dir.path(), "three.toml", &text);
    let (code, json) = validate(&path);
    assert_eq!(code, Some(2), "{json:#}");
    let problems = json["files"][0]["problems"].as_array().unwrap();
    let found: Vec<(&str, &str)> = problems
        .iter()
        .map(|p| (p["path"].as_str().unwrap(), p["message"].as_str().unwrap()))
        .collect();
    assert_eq!(found.len(), 3, "{json:#}");
    assert_eq!(found[0].0, "stages.fetch", "{json:#}");
    assert!(
        found[0]
            .1
            .starts_with("unknown field `workerz` (did you mean `workers`?)"),
        "{json:#}"
    );
    assert_eq!(found[1].0, "stages.fetch.timeout", "{json:#}");
    assert!(found[1].1.contains("soon"), "{json:#}");
    assert_eq!(found[2].0, "stages.fetch", "{json:#}");
    assert!(
        found[2]
            .1
            .starts_with("unknown field `max_redirect` (did you mean `max_redirects`?)"),
        "{json:#}"
    );
    let out = warpline().arg("validate").arg(&path).output().unwrap();
    let text = said(&out);
    assert!(text.contains("three.toml: 3 problems"), "{text}");
    for line in [
        "  - [schema] stages.fetch: unknown field `workerz` (did you mean `workers`?)",
        "  - [schema] stages.fetch.timeout: ",
        "  - [schema] stages.fetch: unknown field `max_redirect` (did you mean `max_redirects`?)",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
}
