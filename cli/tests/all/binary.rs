//! The `warpline` binary as the tests start it: one constructor, the run
//! most tests make (a pipeline and its report file), and what it printed.

use std::path::Path;
use std::process::{Command, Output};

/// The `warpline` binary with `WARPLINE_LOG` unset: it logs as a user's
/// run would, whatever the test runner's environment says.
pub fn warpline() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_warpline"));
    c.env_remove("WARPLINE_LOG");
    c
}

/// `warpline run PIPELINE --report REPORT`, finished.
pub fn run_reporting(pipeline: &Path, report: &Path) -> Output {
    warpline()
        .arg("run")
        .arg(pipeline)
        .arg("--report")
        .arg(report)
        .output()
        .unwrap()
}

/// What a finished command printed: its standard output, then its
/// standard error.
pub fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The TOML example of docs/pipeline.md that begins with `start` (the text
/// after its opening fence), without its fences; `what` names it when the
/// reference has no such example.
pub fn reference_example(start: &str, what: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/pipeline.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let at = doc
        .find(&format!("```toml\n{start}"))
        .unwrap_or_else(|| panic!("{what} in docs/pipeline.md"));
    let block = &doc[at + "```toml\n".len()..];
    block[..block.find("```").unwrap()].to_owned()
}
