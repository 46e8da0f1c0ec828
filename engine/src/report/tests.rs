//! The diagnosis, on reports made by hand.

use super::*;
use crate::{Pipeline, Registry};

/// The pipeline of `flow` over `count` generated inputs with the limiter
/// and stage tables in `rest`, on the built-in kinds.
fn pipeline(flow: &[&str], count: u64, rest: &str) -> Pipeline {
    let toml = warpline_testkit::pipelines::generated(flow, count, rest);
    Pipeline::from_toml_str(&toml, &Registry::with_builtins()).unwrap()
}

fn report(stages: Vec<StageReport>) -> RunReport {
    RunReport {
        pipeline: "p".into(),
        outcome: RunOutcome::Completed,
        elapsed_s: 10.0,
        throughput_per_s: 1.0,
        bytes_in: 0,
        bytes_out: 0,
        diagnosis: String::new(),
        items: ItemCounts {
            total: 10,
            done: 10,
            skipped: 0,
            failed: 0,
            requeued: 0,
            not_admitted: None,
        },
        stages,
        limiters: Vec::new(),
        hosts: Vec::new(),
        failures: Vec::new(),
        failures_not_listed: 0,
        peak_rss_bytes: None,
        timeline: None,
        stalls: Vec::new(),
        footprints: Vec::new(),
    }
}

fn stage(name: &str, workers: u32, busy_s: f64, cpu_s: f64) -> StageReport {
    StageReport {
        name: name.into(),
        kind: "hold".into(),
        workers,
        mailbox: workers,
        processed: 10,
        busy_s,
        starved_s: 0.0,
        blocked_s: 0.0,
        utilisation: busy_s / (f64::from(workers) * 10.0),
        cpu_s: Some(cpu_s),
        paths: Default::default(),
        notes: Vec::new(),
    }
}

#[test]
fn busy_stages_on_saturated_cores_are_a_cpu_bound_run_not_a_call_for_workers() {
    let cores = crate::units::cores();
    let spin = format!("kind = \"hold\"\nmode = \"spin\"\nworkers = {cores}\n");
    let p = pipeline(
        &["a", "b"],
        10,
        &format!("[stages.a]\n{spin}[stages.b]\n{spin}"),
    );
    let c = f64::from(cores);
    // `b` busy 85% of its workers' time; both stages together used
    // every core 90% of the run.
    let saturated = report(vec![
        stage("a", cores, 0.3 * c * 10.0, 0.3 * c * 10.0),
        stage("b", cores, 0.85 * c * 10.0, 0.6 * c * 10.0),
    ]);
    let d = diagnose(&p, &saturated);
    assert!(d.starts_with("the CPU is the bottleneck"), "{d}");
    assert!(d.contains("more workers will not help"), "{d}");
    // The same busy time spent mostly waiting (for a disk, say): the
    // cores were not the limit, the stage's workers were.
    let waiting = report(vec![
        stage("a", cores, 0.3 * c * 10.0, 0.1 * c * 10.0),
        stage("b", cores, 0.85 * c * 10.0, 0.2 * c * 10.0),
    ]);
    let d = diagnose(&p, &waiting);
    assert!(d.starts_with("`b` is the bottleneck"), "{d}");
    assert!(d.contains("more workers"), "{d}");
}

#[test]
fn a_run_with_no_input_says_whether_the_source_gave_none_or_it_was_stopped() {
    let p = pipeline(&["a"], 0, "[stages.a]\nkind = \"discard\"\n");
    let mut r = report(Vec::new());
    r.items = ItemCounts::default();
    assert!(diagnose(&p, &r).starts_with("the source gave no input"));
    r.outcome = RunOutcome::Stopped;
    assert!(diagnose(&p, &r).contains("before the run was stopped"));
}

#[test]
fn a_bucket_paused_by_429s_is_not_credited_with_the_pace() {
    let p = pipeline(
        &["a"],
        1,
        "[limits.api]\nper_second = 20\n[stages.a]\nkind = \"hold\"\nlimits = [\"api\"]\n",
    );
    let mut r = report(vec![stage("a", 1, 1.0, 0.0)]);
    r.limiters.push(LimiterReport {
        name: "api".into(),
        kind: LimiterKind::Rate,
        capacity: 1,
        peak_in_use: None,
        per_second: Some(20.0),
        wait_s: 50.0,
        p95_wait_s: 1.0,
        share_at_capacity: 0.9,
    });
    r.hosts.push(HostReport {
        host: "http://127.0.0.1:8931".into(),
        requests: 100,
        achieved_per_s: 10.0,
        throttled_429: 0,
        retries: 0,
        adaptive: None,
    });
    assert!(diagnose(&p, &r).contains("as intended"));
    r.hosts[0].throttled_429 = 7;
    let d = diagnose(&p, &r);
    assert!(d.contains("answered 429 7 times"), "{d}");
    assert!(!d.contains("as intended"), "{d}");
}

#[test]
fn a_busy_stage_with_one_worker_is_said_in_the_singular() {
    let p = pipeline(&["a"], 1, "[stages.a]\nkind = \"hold\"\n");
    let r = report(vec![stage("a", 1, 9.0, 0.0)]);
    let d = diagnose(&p, &r);
    assert!(d.contains("its 1 worker was busy 90%"), "{d}");
}
