//! The pipeline file: one test per error class, each asserting the message
//! names the key; every error reported at once; overrides from the
//! environment and `--set`.

use crate::common::{assert_problem, errors};

use warpline_engine::{ConfigErrors, Loader, Pipeline, Registry};

const GOOD: &str = r#"
[pipeline]
flow = ["work", "sink"]
[source]
kind = "generate"
count = 10
[limits.cpu]
permits = 2
[limits.memory]
budget = "1MiB"
[limits.api]
per_second = 10
[stages.work]
kind = "hold"
duration = "1ms"
limits = ["cpu", "memory", "api"]
[stages.sink]
kind = "discard"
"#;

/// The errors for GOOD with `line` added to the `work` stage.
fn work_errors(line: &str) -> ConfigErrors {
    errors(&with(
        r#"duration = "1ms""#,
        &format!("duration = \"1ms\"\n{line}"),
    ))
}

fn with(replace: &str, by: &str) -> String {
    assert!(
        GOOD.contains(replace),
        "test setup: {replace:?} not in GOOD"
    );
    GOOD.replacen(replace, by, 1)
}

#[test]
fn the_reference_pipeline_is_valid() {
    let p = Pipeline::from_toml_str(GOOD, &Registry::with_builtins()).unwrap();
    assert_eq!(p.stages().len(), 2);
    assert_eq!(
        p.limits().len(),
        3 + 1,
        "declared, and the implicit unit budget"
    );
}

#[test]
fn unknown_limiter_names_the_stage_key() {
    let e = errors(&with(
        r#"limits = ["cpu", "memory", "api"]"#,
        r#"limits = ["cpu", "gpu"]"#,
    ));
    assert_problem(&e, "stages.work.limits[1]", "unknown limiter `gpu`");
    assert_problem(&e, "stages.work.limits[1]", "`cpu`, `memory`, `api`");
}

#[test]
fn unknown_stage_kind_names_the_kind_key_and_lists_known_kinds() {
    let e = errors(&with(r#"kind = "discard""#, r#"kind = "blackhole""#));
    assert_problem(&e, "stages.sink.kind", "unknown stage kind \"blackhole\"");
    assert_problem(&e, "stages.sink.kind", "`discard`");
}

#[test]
fn unknown_source_kind_names_the_source_kind_key() {
    let e = errors(&with(r#"kind = "generate""#, r#"kind = "ftp""#));
    assert_problem(&e, "source.kind", "unknown source kind \"ftp\"");
}

#[test]
fn duplicate_names_are_errors() {
    // A stage twice in the flow.
    let e = errors(&with(
        r#"flow = ["work", "sink"]"#,
        r#"flow = ["work", "sink", "work"]"#,
    ));
    assert_problem(&e, "pipeline.flow[2]", "duplicate stage `work`");
    // A limiter twice in a stage.
    let e = errors(&with(
        r#"limits = ["cpu", "memory", "api"]"#,
        r#"limits = ["cpu", "cpu"]"#,
    ));
    assert_problem(&e, "stages.work.limits[1]", "duplicate limiter `cpu`");
    // A table declared twice (TOML refuses it; the message names the key).
    let e = errors(&format!("{GOOD}\n[limits.cpu]\npermits = 4\n"));
    assert!(e.to_string().contains("cpu"), "{e}");
    assert!(e.to_string().to_lowercase().contains("duplicate"), "{e}");
}

#[test]
fn zero_workers_mailbox_and_permits_are_errors() {
    let e = work_errors("workers = 0\nmailbox = 0");
    assert_problem(&e, "stages.work.workers", "at least 1");
    assert_problem(&e, "stages.work.mailbox", "at least 1");
    let e = errors(&with("permits = 2", "permits = 0"));
    assert_problem(&e, "limits.cpu.permits", "at least 1");
    let e = errors(&with("per_second = 10", "per_second = 10\nburst = 0"));
    assert_problem(&e, "limits.api.burst", "at least 1");
}

#[test]
fn malformed_sizes_are_errors() {
    let e = errors(&with(r#"budget = "1MiB""#, r#"budget = "1 parsec""#));
    assert_problem(&e, "limits.memory.budget", "\"1 parsec\"");
    let e = errors(&with(r#"budget = "1MiB""#, r#"budget = "0MiB""#));
    assert_problem(&e, "limits.memory.budget", "more than 0");
}

#[test]
fn a_value_of_the_wrong_type_is_said_in_the_files_terms() {
    let e = errors(&with("per_second = 10", r#"per_second = "fast""#));
    assert_problem(
        &e,
        "limits.api.per_second",
        r#"expected a number, got "fast""#,
    );
    let e = errors(&with("count = 10", "count = -1"));
    assert_problem(
        &e,
        "source.count",
        "expected a whole number (0 or more), got -1",
    );
    let e = errors(&with(
        r#"limits = ["cpu", "memory", "api"]"#,
        r#"limits = "cpu""#,
    ));
    assert_problem(&e, "stages.work.limits", r#"got "cpu""#);
    // No serde internals (`invalid type`, `64-bit integer`, `sequence`).
    for e in [&e, &errors(&with("count = 10", "count = -1"))] {
        let text = e.to_string();
        for internal in ["invalid type", "64-bit", "sequence", "floating point"] {
            assert!(!text.contains(internal), "{text}");
        }
    }
}

#[test]
fn a_bad_value_in_pipeline_does_not_hide_its_good_flow() {
    let e = errors(&with(
        r#"flow = ["work", "sink"]"#,
        "flow = [\"work\", \"sink\"]\nshutdown_deadline = [1]\non_error = 5",
    ));
    assert_problem(&e, "pipeline.shutdown_deadline", "got a list");
    assert_problem(&e, "pipeline.on_error", r#"got "5""#);
    // Only those two: the flow was read, nothing else follows from them.
    assert_eq!(e.problems.len(), 2, "{e}");
}

#[test]
fn malformed_durations_are_errors() {
    let e = errors(&with(r#"duration = "1ms""#, r#"duration = "a while""#));
    assert_problem(&e, "stages.work.duration", "\"a while\"");
    let e = errors(&with(
        r#"flow = ["work", "sink"]"#,
        "flow = [\"work\", \"sink\"]\nshutdown_deadline = \"soon\"",
    ));
    assert_problem(&e, "pipeline.shutdown_deadline", "\"soon\"");
}

#[test]
fn malformed_rates_are_errors() {
    let e = errors(&with("per_second = 10", "per_second = -3"));
    assert_problem(&e, "limits.api.per_second", "positive");
    let e = errors(&with("per_second = 10", "per_second = \"fast\""));
    assert_problem(&e, "limits.api.per_second", "fast");
    let e = errors(&with(
        "per_second = 10",
        "per_second = 10\nper = \"planet\"",
    ));
    assert_problem(&e, "limits.api.per", "\"planet\"");
    let e = errors(&with("per_second = 10", "per_second = 10\nmargin = 0.6"));
    assert_problem(&e, "limits.api.margin", "from 0 to 0.5");
    let e = errors(&with("per_second = 10", "per_second = 10\nmargin = -0.1"));
    assert_problem(&e, "limits.api.margin", "-0.1");
    let e = errors(&with("permits = 2", "permits = 2\nmargin = 0.1"));
    assert_problem(&e, "limits.cpu.margin", "does not apply");
}

/// The `[limits.NAME]` example of docs/pipeline.md loads as it is, its
/// `api` bucket pacing its `margin` under `per_second`, and a rate
/// without one pacing the default 2% under it.
#[test]
fn the_reference_s_limits_example_loads_with_its_margin() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/pipeline.md"))
        .expect("docs/pipeline.md");
    let section = doc
        .split("## `[limits.NAME]`")
        .nth(1)
        .expect("the limits section");
    let example = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its example");
    let p = Pipeline::from_toml_str(example, &Registry::with_builtins()).unwrap();
    let api = p.limits().get("api").expect("the example's api limiter");
    assert_eq!((api.per_second(), api.margin()), (Some(20.0), Some(0.05)));
    let p = Pipeline::from_toml_str(GOOD, &Registry::with_builtins()).unwrap();
    assert_eq!(p.limits().get("api").unwrap().margin(), Some(0.02));
}

#[test]
fn unknown_keys_are_errors_naming_their_table() {
    let e = errors(&with("permits = 2", "permits = 2\npermit = 3"));
    assert_problem(&e, "limits.cpu", "unknown field `permit`");
    let e = work_errors("durashun = \"2ms\"");
    assert_problem(&e, "stages.work", "unknown field `durashun`");
    let e = errors(&format!("{GOOD}\n[sinks.x]\nkind = \"a\"\n"));
    assert_problem(&e, "sinks", "unknown section");
}

#[test]
fn a_misspelt_key_is_told_the_nearest_one_the_engine_s_keys_included() {
    let e = errors(&with("permits = 2", "permits = 2\npermit = 3"));
    assert_problem(&e, "limits.cpu", "(did you mean `permits`?)");
    // `workers` is read by the engine, not by the `hold` kind: it is still
    // known, and nearest.
    let e = work_errors("workerz = 2");
    assert_problem(
        &e,
        "stages.work",
        "unknown field `workerz` (did you mean `workers`?)",
    );
    assert_problem(
        &e,
        "stages.work",
        "known keys: `kind`, `workers`, `mailbox`",
    );
    assert_problem(&e, "stages.work", "`duration`");
    let e = work_errors("durashun = \"2ms\"");
    assert_problem(&e, "stages.work", "(did you mean `duration`?)");
    // Nothing near: no guess, the list only.
    let e = work_errors("zebra = 1");
    assert_problem(&e, "stages.work", "unknown field `zebra`; known keys:");
    let e = errors(&with("count = 10", "count = 10\nlimit = [\"cpu\"]"));
    assert_problem(&e, "source", "(did you mean `limits`?)");
    // A kind with no keys of its own: the engine's are still listed.
    let e = errors(&with(
        "kind = \"discard\"",
        "kind = \"discard\"\nmailbx = 2",
    ));
    assert_problem(&e, "stages.sink", "(did you mean `mailbox`?)");
    let e = errors(&with("[limits.cpu]", "[limit.cpu]"));
    assert_problem(&e, "limit", "unknown section (did you mean `limits`?)");
    // In a table within a stage: its path, its own keys only.
    let e = work_errors("retry = { attempts = 2, base = \"1ms\" }");
    assert_problem(
        &e,
        "stages.work.retry",
        "unknown field `base` (did you mean `base_delay`?); known keys: `attempts`, `base_delay`, `max_delay`, `on`",
    );
    assert!(!e.to_string().contains("`retry`"), "{e}");
}

#[test]
fn a_limiter_must_say_what_it_limits() {
    let e = errors(&with("permits = 2", "permits = 2\nbudget = \"1MiB\""));
    assert_problem(&e, "limits.cpu", "exactly one of");
    let e = errors(&with("permits = 2", "oversize = \"fail\""));
    assert_problem(&e, "limits.cpu", "exactly one of");
}

#[test]
fn names_that_environment_overrides_cannot_reach_are_errors() {
    let e = errors(&with("[limits.cpu]", "[limits.Cpu]"));
    assert_problem(&e, "limits.Cpu", "lowercase");
}

#[test]
fn flow_must_name_every_stage_once() {
    let e = errors(&with(
        r#"flow = ["work", "sink"]"#,
        r#"flow = ["work", "snk"]"#,
    ));
    assert_problem(&e, "pipeline.flow[1]", "unknown stage `snk`");
    assert_problem(&e, "stages.sink", "not in pipeline.flow");
    let e = errors(&with(r#"flow = ["work", "sink"]"#, ""));
    assert_problem(&e, "pipeline.flow", "missing");
    assert_problem(&e, "pipeline.flow", r#"e.g. flow = ["work", "sink"]"#);
    // The stages' limiters are still taken by them: no error follows.
    assert_eq!(e.problems.len(), 1, "{e}");
    // Nothing declared: the example is not an empty flow.
    let e = errors("");
    assert_problem(&e, "pipeline.flow", "declare the stages");
    // A flow of the wrong type is said once, not also as missing.
    let e = errors(&with(r#"flow = ["work", "sink"]"#, r#"flow = "work""#));
    let at_flow: Vec<_> = e
        .problems
        .iter()
        .filter(|p| p.path == "pipeline.flow")
        .collect();
    assert_eq!(at_flow.len(), 1, "{e}");
    assert!(
        at_flow[0]
            .message
            .contains(r#"expected a list, e.g. ["a", "b"], got "work""#),
        "{e}"
    );
}

#[test]
fn carried_tickets_must_follow_the_global_order() {
    let toml = r#"
        [pipeline]
        flow = ["a", "b", "c"]
        [source]
        kind = "generate"
        count = 1
        [limits.cpu]
        permits = 2
        [limits.memory]
        budget = "1MiB"
        [stages.a]
        kind = "hold"
        limits = ["memory"]
        carry = ["memory", "cpu"]
        [stages.b]
        kind = "hold"
        limits = ["cpu"]
        release = ["disk"]
        [stages.c]
        kind = "hold"
        limits = ["memory"]
    "#;
    let e = errors(toml);
    assert_problem(&e, "stages.a.carry[1]", "not in this stage's `limits`");
    assert_problem(
        &e,
        "stages.b.limits",
        "declare [limits.memory] before [limits.cpu]",
    );
    assert_problem(&e, "stages.b.release[0]", "carry no `disk`");
    // Charging a carried byte budget again resizes the item's share (the
    // stage waits for the difference only): not a problem.
    assert!(
        !e.problems.iter().any(|p| p.path == "stages.c.limits"),
        "{e}"
    );
    // Releasing on entry resolves the rest: nothing is held while waiting.
    let fixed = toml
        .replace(r#"release = ["disk"]"#, r#"release = ["memory"]"#)
        .replace(r#"carry = ["memory", "cpu"]"#, r#"carry = ["memory"]"#);
    Pipeline::from_toml_str(&fixed, &Registry::with_builtins()).unwrap();
}

#[test]
fn a_file_with_three_errors_reports_all_three() {
    let toml = GOOD
        .replacen("permits = 2", "permits = 0", 1)
        .replacen(r#"budget = "1MiB""#, r#"budget = "lots""#, 1)
        .replacen(r#"kind = "discard""#, r#"kind = "nope""#, 1);
    let e = errors(&toml);
    assert_eq!(e.problems.len(), 3, "{e}");
    assert_problem(&e, "limits.cpu.permits", "at least 1");
    assert_problem(&e, "limits.memory.budget", "lots");
    assert_problem(&e, "stages.sink.kind", "nope");
    assert!(e.to_string().starts_with("<string>: 3 problems"), "{e}");
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let e = Pipeline::from_path("/nonexistent/pipe.toml", &Registry::with_builtins()).unwrap_err();
    assert!(
        e.to_string()
            .contains("/nonexistent/pipe.toml: no such file"),
        "{e}"
    );
    let dir = std::env::temp_dir();
    let e = Pipeline::from_path(&dir, &Registry::with_builtins()).unwrap_err();
    assert!(
        e.to_string().contains("a directory, not a pipeline file"),
        "{e}"
    );
}

#[test]
fn a_toml_syntax_error_is_a_clear_error() {
    let e = errors("[pipeline\nflow = 3");
    assert!(!e.problems.is_empty());
}

#[test]
fn set_overrides_apply_after_the_file() {
    let p = Loader::from_toml_str(GOOD)
        .set("stages.work.workers", "7")
        .set("limits.cpu.permits", "cores")
        .set("limits.memory.budget", "2MiB")
        .load(&Registry::with_builtins())
        .unwrap();
    assert_eq!(p.stages()[0].workers, 7);
    assert_eq!(
        p.limits().get("cpu").unwrap().capacity(),
        u64::from(warpline_engine::units::cores())
    );
    assert_eq!(p.limits().get("memory").unwrap().capacity(), 2 << 20);
    let e = Loader::from_toml_str(GOOD)
        .set("stages.work.workers", "zero")
        .load(&Registry::with_builtins())
        .unwrap_err();
    assert_problem(&e, "stages.work.workers", "zero");
}

#[test]
fn a_value_of_the_wrong_shape_is_told_what_is_expected() {
    let e = errors(&with(
        "duration = \"1ms\"",
        "duration = \"1ms\"\nworkers = [1, 2]",
    ));
    assert_problem(
        &e,
        "stages.work.workers",
        "expected a positive whole number",
    );
    let e = errors(&with("budget = \"1MiB\"", "budget = true"));
    assert_problem(&e, "limits.memory.budget", "expected a size");
}

#[test]
fn a_set_value_is_read_as_toml_when_it_is_toml_and_as_text_otherwise() {
    let p = Loader::from_toml_str(GOOD)
        .set("pipeline.name", "\"renamed\"")
        .set("stages.work.workers", "\"cores\"")
        .set("limits.memory.budget", "\"2MiB\"")
        .set("limits.cpu.permits", "3")
        .load(&Registry::with_builtins())
        .unwrap();
    assert_eq!(p.name(), "renamed", "a quoted string loses its quotes");
    assert_eq!(p.stages()[0].workers, warpline_engine::units::cores());
    assert_eq!(p.limits().get("memory").unwrap().capacity(), 2 << 20);
    assert_eq!(p.limits().get("cpu").unwrap().capacity(), 3);
    // An array is an array: the stage now takes `cpu` only, which leaves
    // `memory` and `api` to nothing.
    let e = Loader::from_toml_str(GOOD)
        .set("stages.work.limits", "[\"cpu\"]")
        .load(&Registry::with_builtins())
        .unwrap_err();
    assert_problem(&e, "limits.memory", "nothing takes it");
    assert_problem(&e, "limits.api", "nothing takes it");
    assert!(
        !e.problems.iter().any(|p| p.path.starts_with("stages.work")),
        "{e}"
    );
    // Not TOML: the text as given; TOML of the wrong type: the key's own error.
    let p = Loader::from_toml_str(GOOD)
        .set("pipeline.name", "plain-text")
        .load(&Registry::with_builtins())
        .unwrap();
    assert_eq!(p.name(), "plain-text");
    let e = Loader::from_toml_str(GOOD)
        .set("stages.work.workers", "[1, 2]")
        .load(&Registry::with_builtins())
        .unwrap_err();
    assert_problem(
        &e,
        "stages.work.workers",
        "expected a positive whole number",
    );
}

#[test]
fn environment_overrides_apply_when_asked_for() {
    // The only test in this binary that sets WARPLINE__ variables.
    std::env::set_var("WARPLINE__STAGES__WORK__WORKERS", "5");
    std::env::set_var("WARPLINE__LIMITS__CPU__PERMITS", "9");
    let with_env = Loader::from_toml_str(GOOD)
        .with_env()
        .load(&Registry::with_builtins())
        .unwrap();
    let without = Loader::from_toml_str(GOOD)
        .load(&Registry::with_builtins())
        .unwrap();
    // --set still wins over the environment.
    let set_wins = Loader::from_toml_str(GOOD)
        .with_env()
        .set("stages.work.workers", "6")
        .load(&Registry::with_builtins())
        .unwrap();
    std::env::remove_var("WARPLINE__STAGES__WORK__WORKERS");
    std::env::remove_var("WARPLINE__LIMITS__CPU__PERMITS");
    assert_eq!(with_env.stages()[0].workers, 5);
    assert_eq!(with_env.limits().get("cpu").unwrap().capacity(), 9);
    assert_eq!(without.stages()[0].workers, 1);
    assert_eq!(set_wins.stages()[0].workers, 6);
}

#[test]
fn declaration_order_is_the_acquisition_order() {
    let p = Pipeline::from_toml_str(GOOD, &Registry::with_builtins()).unwrap();
    let names: Vec<&str> = p.limits().iter().map(|l| l.name()).collect();
    // The implicit unit budget comes first: it is taken at admission.
    assert_eq!(names, ["descriptors", "cpu", "memory", "api"]);
}

#[test]
fn a_source_without_a_unit_budget_holds_an_implicit_descriptors_slot() {
    let p = Pipeline::from_toml_str(GOOD, &Registry::with_builtins()).unwrap();
    let held: Vec<&str> = p.source().limits.iter().map(|l| l.name()).collect();
    assert_eq!(held, ["descriptors"]);
    let d = p.limits().get("descriptors").unwrap();
    assert!(d.capacity() >= 1);
    // Declaring one (or a unit budget of the source's own) replaces it.
    let own = GOOD.replace(
        "[limits.cpu]",
        "[limits.descriptors]\npermits = 7\n[limits.cpu]",
    );
    let e = errors(&own);
    assert_problem(&e, "limits.descriptors", "nothing takes it");
    let named = own.replace("count = 10", "count = 10\nlimits = [\"descriptors\"]");
    let p = Pipeline::from_toml_str(&named, &Registry::with_builtins()).unwrap();
    assert_eq!(p.limits().get("descriptors").unwrap().capacity(), 7);
    let held: Vec<&str> = p.source().limits.iter().map(|l| l.name()).collect();
    assert_eq!(
        held,
        ["descriptors"],
        "its own, not an implicit one besides"
    );
    assert_eq!(p.limits().iter().count(), 4);
}

/// `PipelineBuilder::limit` declares limiters in acquisition order: the
/// order of the calls, not of the names.
#[test]
fn the_builder_keeps_the_order_limiters_are_declared_in() {
    let p = warpline_engine::PipelineBuilder::new("order")
        .source("generate", serde_json::json!({ "count": 1 }))
        .limit("memory", serde_json::json!({ "budget": "1MiB" }))
        .limit("cpu", serde_json::json!({ "permits": 1 }))
        .stage(
            "a",
            "hold",
            serde_json::json!({ "limits": ["memory", "cpu"] }),
        )
        .build(&Registry::with_builtins())
        .unwrap();
    assert!(p.limits().position("memory") < p.limits().position("cpu"));
}

/// A stage that fails to compile is one problem, not also a false one on
/// the stage after it (whose `release` names what the broken stage would
/// have carried).
#[test]
fn a_broken_stage_does_not_make_the_next_one_look_wrong() {
    let e = errors(
        r#"
        [pipeline]
        flow = ["a", "b"]
        [source]
        kind = "generate"
        count = 1
        [limits.memory]
        budget = "1MiB"
        [stages.a]
        kind = "hold"
        duration = "soon"
        limits = ["memory"]
        carry = ["memory"]
        [stages.b]
        kind = "hold"
        limits = ["memory"]
        release = ["memory"]
        "#,
    );
    assert!(
        e.problems.iter().any(|p| p.path.starts_with("stages.a")),
        "{e}"
    );
    assert!(
        !e.problems.iter().any(|p| p.path.starts_with("stages.b")),
        "{e}"
    );
}

#[path = "config/defaults.rs"]
mod defaults;
#[path = "config/named.rs"]
mod named;
#[path = "config/one_pass.rs"]
mod one_pass;
#[path = "config/payloads.rs"]
mod payloads;
