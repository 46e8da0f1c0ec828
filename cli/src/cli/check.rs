//! `warpline validate` and `warpline plan`.

use std::io::Write;
use std::path::{Path, PathBuf};

use warpline::engine::Tier;
use warpline::Problem;

use super::{load_with, loader, not_connected, Format, EXIT_ERROR, EXIT_INVALID, EXIT_OK};

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Schema => "schema",
        Tier::Graph => "graph",
        Tier::Environment => "environment",
    }
}

/// One file's result.
struct Checked {
    path: PathBuf,
    problems: Vec<Problem>,
    not_checked: Vec<String>,
    bound: Option<u64>,
}

/// `warpline validate`: every file in tiers; what the pipelines reach over
/// the network (buckets, ...) only when `online`, so that a check never
/// surprises its user with network traffic.
pub(super) fn validate(paths: &[PathBuf], sets: &[String], format: Format, online: bool) -> u8 {
    let registry = warpline::registry();
    let mut files = Vec::new();
    for path in paths {
        let loaded = match loader(path, sets) {
            Err(usage) => {
                say_err!("error: {usage}");
                return EXIT_INVALID;
            }
            // A `scope = "global"` rate is checked like any other; its
            // coordinator is reached only when the pipeline runs.
            // Every tier in one pass: this machine is checked for every
            // stage that compiles, whatever else is wrong.
            Ok(l) => {
                let l = l
                    .with_global_rates(not_connected())
                    .with_environment_checks();
                let l = if online { l.with_online_checks() } else { l };
                l.load(&registry)
            }
        };
        files.push(match loaded {
            Ok(p) => Checked {
                path: path.clone(),
                problems: Vec::new(),
                not_checked: Vec::new(),
                bound: Some(p.admission_bound()),
            },
            Err(e) => Checked {
                path: path.clone(),
                problems: e.problems,
                not_checked: e.not_checked,
                bound: None,
            },
        });
    }
    let all_valid = files.iter().all(|f| f.problems.is_empty());
    match format {
        Format::Json => print_json(&files, all_valid),
        Format::Text => print_text(&files),
    }
    if all_valid {
        EXIT_OK
    } else {
        EXIT_INVALID
    }
}

/// `validate --format json`: every file, valid or not, in one document.
fn print_json(files: &[Checked], all_valid: bool) {
    let json = serde_json::json!({
        "valid": all_valid,
        "files": files.iter().map(|f| serde_json::json!({
            "path": f.path.display().to_string(),
            "valid": f.problems.is_empty(),
            "admission_bound": f.bound,
            "problems": f.problems,
            "not_checked": f.not_checked,
        })).collect::<Vec<_>>(),
    });
    say!(
        "{}",
        serde_json::to_string_pretty(&json).unwrap_or_default()
    );
}

/// `validate`: each file's problems, by tier, and what was not checked.
fn print_text(files: &[Checked]) {
    for f in files {
        if f.problems.is_empty() {
            say!(
                "{}: valid (admission bound {} items)",
                f.path.display(),
                f.bound.unwrap_or_default()
            );
            continue;
        }
        let n = f.problems.len();
        say!(
            "{}: {n} problem{}",
            f.path.display(),
            if n == 1 { "" } else { "s" }
        );
        let mut sorted: Vec<&Problem> = f.problems.iter().collect();
        sorted.sort_by_key(|p| p.tier);
        for p in sorted {
            say!("  - [{}] {}: {}", tier_name(p.tier), p.path, p.message);
        }
        for n in &f.not_checked {
            say!("  (not checked: {n})");
        }
    }
}

pub(super) fn plan(path: &Path, sets: &[String], format: Format, sample: usize) -> u8 {
    let pipeline = match load_with(path, sets, Some(not_connected())) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let plan = warpline_cli::plan::Plan::of(&pipeline);
    let plan = match (sample, super::runtime()) {
        (0, _) => plan,
        (n, Ok(rt)) => rt.block_on(plan.sized(&pipeline, n)),
        (_, Err(e)) => {
            say_err!("error: {e:#}");
            return EXIT_ERROR;
        }
    };
    match format {
        Format::Json => say!(
            "{}",
            serde_json::to_string_pretty(&plan).unwrap_or_default()
        ),
        Format::Text => {
            let _ = write!(std::io::stdout().lock(), "{plan}");
        }
    }
    EXIT_OK
}
