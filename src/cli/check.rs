//! `warpline validate` and `warpline plan`.

use std::io::Write;
use std::path::{Path, PathBuf};

use warpline::engine::Tier;
use warpline::Problem;

use super::{load_with, loader, not_connected, Format, EXIT_INVALID, EXIT_OK};

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Schema => "schema",
        Tier::Graph => "graph",
        Tier::Environment => "environment",
    }
}

pub(super) fn validate(paths: &[PathBuf], sets: &[String], format: Format) -> u8 {
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
            Ok(l) => l.with_global_rates(not_connected()).load(&registry),
        };
        let (problems, bound): (Vec<Problem>, Option<u64>) = match loaded {
            Ok(p) => (p.check_environment(), Some(p.admission_bound())),
            Err(e) => (e.problems, None),
        };
        files.push((path.clone(), problems, bound));
    }
    let all_valid = files.iter().all(|(_, p, _)| p.is_empty());
    match format {
        Format::Json => {
            let json = serde_json::json!({
                "valid": all_valid,
                "files": files.iter().map(|(path, problems, bound)| serde_json::json!({
                    "path": path.display().to_string(),
                    "valid": problems.is_empty(),
                    "admission_bound": bound,
                    "problems": problems,
                })).collect::<Vec<_>>(),
            });
            say!(
                "{}",
                serde_json::to_string_pretty(&json).unwrap_or_default()
            );
        }
        Format::Text => {
            for (path, problems, bound) in &files {
                if problems.is_empty() {
                    say!(
                        "{}: valid (admission bound {} items)",
                        path.display(),
                        bound.unwrap_or_default()
                    );
                    continue;
                }
                let n = problems.len();
                say!(
                    "{}: {n} problem{}",
                    path.display(),
                    if n == 1 { "" } else { "s" }
                );
                let mut sorted: Vec<&Problem> = problems.iter().collect();
                sorted.sort_by_key(|p| p.tier);
                for p in sorted {
                    say!("  - [{}] {}: {}", tier_name(p.tier), p.path, p.message);
                }
            }
        }
    }
    if all_valid {
        EXIT_OK
    } else {
        EXIT_INVALID
    }
}

pub(super) fn plan(path: &Path, sets: &[String], format: Format) -> u8 {
    let pipeline = match load_with(path, sets, Some(not_connected())) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let plan = warpline::plan::Plan::of(&pipeline);
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
