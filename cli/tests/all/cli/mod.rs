//! The `warpline` binary: validate, run, the report file, exit codes, and an
//! interrupt that drains; one test binary, by concern: `check` (validate,
//! plan), `run` (exit codes, flags, interrupts) and `outputs` (what a run
//! leaves: files, logs, metrics).

mod check;
mod help;
mod outputs;
mod run;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use warpline_testkit::pipelines::generated;

/// The binary, run from the workspace's root.
fn warpline() -> Command {
    let mut c = crate::binary::warpline();
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

/// `warpline run PIPELINE ARGS`, from the workspace's root, finished.
fn run(pipeline: &Path, args: &[&OsStr]) -> Output {
    warpline()
        .arg("run")
        .arg(pipeline)
        .args(args)
        .output()
        .unwrap()
}

/// The standard output of a run that must have succeeded (else both
/// outputs are shown).
fn succeeded(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// [`small`] with every 7th item failing (7 of 50), written as `f.toml`
/// in `dir`.
fn write_failing(dir: &Path) -> PathBuf {
    write(
        dir,
        "f.toml",
        &small().replace("workers = 2", "fail_every = 7"),
    )
}

/// 50 generated items held by one stage of two workers.
fn small() -> String {
    generated(
        &["work"],
        50,
        "[stages.work]\nkind = \"hold\"\nworkers = 2\n",
    )
}
