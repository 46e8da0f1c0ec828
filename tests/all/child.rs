//! A pipeline run in a process of its own: this test binary again, running
//! only [`run`]. Its peak resident memory is then its own, not that of
//! every test of this binary, and its environment (credentials) its own.

use std::path::Path;
use std::process::Command;

use crate::common;

/// Names the pipeline file the child process runs.
const PIPELINE: &str = "WARPLINE_TEST_CHILD";

/// In a child process started by [`run_alone`]: runs the pipeline in
/// `$WARPLINE_TEST_CHILD` and writes its report beside it as JSON.
/// Started on its own (`--ignored` without the variable) it does nothing.
#[test]
#[ignore = "run by its parent test, in a process of its own"]
fn run() {
    let Some(path) = std::env::var_os(PIPELINE) else {
        return;
    };
    let report = common::run(&std::fs::read_to_string(&path).unwrap());
    let json = serde_json::to_string(&report).unwrap();
    std::fs::write(Path::new(&path).with_extension("json"), json).unwrap();
}

/// Runs `toml` (written as `pipeline.toml` in `dir`) in a process of its
/// own, with `envs` added to its environment: its report.
pub fn run_alone(toml: &str, dir: &Path, envs: &[(&str, &str)]) -> serde_json::Value {
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child::run", "--ignored", "--test-threads=1"])
        .env(PIPELINE, &path)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child run failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    common::read_json(path.with_extension("json"))
}
