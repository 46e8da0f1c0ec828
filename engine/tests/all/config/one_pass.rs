//! Every mistake of a table in one pass: unknown keys, wrong types and
//! values that do not read, in the engine's keys and the kind's alike,
//! each at its key path, whatever their order.

use crate::common::{assert_problem, errors};

use super::with;

/// The problems of `e` at or under `table`, as (path, message).
fn under<'a>(e: &'a warpline_engine::ConfigErrors, table: &str) -> Vec<(&'a str, &'a str)> {
    e.problems
        .iter()
        .filter(|p| p.path == table || p.path.starts_with(&format!("{table}.")))
        .map(|p| (p.path.as_str(), p.message.as_str()))
        .collect()
}

/// Two unknown keys and a bad value of one stage table: three problems at
/// once, the first unknown key before the bad value or after it.
#[test]
fn two_unknown_keys_and_a_bad_value_are_three_problems_at_once() {
    for lines in [
        "workerz = 4\nmode = \"nap\"\ndurashun = \"2ms\"",
        "mode = \"nap\"\ndurashun = \"2ms\"\nworkerz = 4",
    ] {
        let e = errors(&with(
            "duration = \"1ms\"",
            &format!("duration = \"1ms\"\n{lines}"),
        ));
        let found = under(&e, "stages.work");
        assert_eq!(found.len(), 3, "{e}");
        assert_problem(
            &e,
            "stages.work",
            "unknown field `workerz` (did you mean `workers`?)",
        );
        assert_problem(
            &e,
            "stages.work",
            "unknown field `durashun` (did you mean `duration`?)",
        );
        assert_problem(&e, "stages.work.mode", "nap");
    }
}

/// A wrong type in the engine's keys (`workers`) and a mistake in a table
/// within them (`retry`) do not hide the kind's own mistakes, nor a wrong
/// kind: each table says all of its mistakes.
#[test]
fn the_engines_keys_and_the_kinds_are_read_in_the_same_pass() {
    let e = errors(&with(
        "duration = \"1ms\"",
        "duration = \"soon\"\nworkers = [2]\nmailbox = \"lots\"\nretry = { atempts = 2 }\nzebra = 1",
    ));
    let found = under(&e, "stages.work");
    assert_eq!(found.len(), 5, "{e}");
    assert_problem(&e, "stages.work.mailbox", "lots");
    assert_problem(&e, "stages.work.workers", "expected");
    assert_problem(&e, "stages.work.retry", "unknown field `atempts`");
    assert_problem(&e, "stages.work.duration", "soon");
    assert_problem(&e, "stages.work", "unknown field `zebra`");

    // The source: its engine keys, its kind's keys.
    let e = errors(&with(
        "count = 10",
        "count = \"ten\"\nlimits = \"cpu\"\nprefx = \"a\"",
    ));
    let found = under(&e, "source");
    assert_eq!(found.len(), 3, "{e}");
    assert_problem(&e, "source.limits", "expected");
    assert_problem(&e, "source.count", "ten");
    assert_problem(
        &e,
        "source",
        "unknown field `prefx` (did you mean `prefix`?)",
    );
}

/// A limiter's and `[pipeline]`'s mistakes, all of them, and no check
/// that would follow only from one (a limiter is not also said to lack
/// what it limits).
#[test]
fn limiters_and_the_pipeline_table_say_every_mistake_too() {
    let e = errors(&with(
        "permits = 2",
        "permits = \"two\"\noversize = \"maybe\"\npermitz = 3\nshraed = true",
    ));
    let found = under(&e, "limits.cpu");
    assert_eq!(found.len(), 4, "{e}");
    assert_problem(&e, "limits.cpu.permits", "two");
    assert_problem(&e, "limits.cpu.oversize", "maybe");
    assert!(!e.to_string().contains("exactly one of"), "{e}");
    let e = errors(&with(
        "flow = [\"work\", \"sink\"]",
        "flow = [\"work\", \"sink\"]\non_eror = \"abort\"\nshutdown_deadline = \"soon\"\nnam = \"x\"",
    ));
    let found = under(&e, "pipeline");
    assert_eq!(found.len(), 3, "{e}");
    // The good `flow` was read: the stages are in it.
    assert!(!e.to_string().contains("not in pipeline.flow"), "{e}");
}
