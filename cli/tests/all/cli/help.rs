//! Each subcommand's help lists the flags it takes, and says what they
//! default to there.

use super::warpline;

fn help(command: &str) -> String {
    let out = warpline().args([command, "--help"]).output().unwrap();
    assert!(out.status.success(), "{command} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const WORKER_ONLY: [&str; 4] = [
    "--consumer",
    "--max-deliveries",
    "--reclaim-after",
    "--redis-timeout",
];

#[test]
fn commands_that_are_not_workers_do_not_list_worker_flags() {
    for command in ["enqueue", "status", "dead", "requeue"] {
        let text = help(command);
        for flag in WORKER_ONLY {
            assert!(
                !text.contains(flag),
                "{command} --help lists {flag}:\n{text}"
            );
        }
        assert!(!text.contains("`run` only"), "{text}");
    }
    let run = help("run");
    for flag in WORKER_ONLY {
        assert!(run.contains(flag), "run --help lacks {flag}:\n{run}");
    }
}

#[test]
fn run_defaults_to_the_pipelines_name_only_where_there_is_a_pipeline() {
    for command in ["run", "enqueue"] {
        let text = help(command);
        assert!(text.contains("default: the pipeline's name"), "{text}");
    }
    for command in ["status", "dead", "requeue"] {
        let text = help(command);
        // Required, as the usage line says; no default claimed.
        assert!(
            text.contains("--coordinator <redis://HOST:PORT> --run <NAME>"),
            "{text}"
        );
        assert!(!text.contains("default: the pipeline's name"), "{text}");
    }
}

#[test]
fn status_without_run_is_a_usage_error_naming_it() {
    let out = warpline()
        .args(["status", "--coordinator", "redis://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--run <NAME>"), "{err}");
}
