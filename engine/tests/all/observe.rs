//! The report and events: invariants that must hold for any run, a
//! diagnosis that names the limiter a pipeline was built to be bound by, and
//! events that agree with the report.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use warpline_engine::limit::LimiterKind;
use warpline_engine::report::RunOutcome;
use warpline_engine::{
    Event, EventKind, Input, Pipeline, Registry, RunControl, RunOptions, RunReport, Source,
    SourceError, SourceSpec,
};

fn run(toml: &str, registry: &Registry) -> (RunReport, Vec<Event>) {
    let pipeline = Pipeline::from_toml_str(toml, registry).unwrap_or_else(|e| panic!("{e}"));
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let options = RunOptions {
        events: Some(Arc::new(move |e: &Event| {
            sink.lock().unwrap().push(e.clone())
        })),
        sample: Some(Duration::from_millis(5)),
        ..RunOptions::default()
    };
    let report = common::runtime()
        .block_on(pipeline.run_with_options(&RunControl::new(), &options))
        .unwrap();
    let events = events.lock().unwrap().clone();
    (report, events)
}

fn assert_invariants(r: &RunReport) {
    let i = r.items;
    assert_eq!(i.done + i.skipped + i.failed, i.total, "{r}");
    for l in &r.limiters {
        if l.kind != LimiterKind::Rate {
            assert!(
                l.peak_in_use.unwrap() <= l.capacity,
                "{}: peak over capacity",
                l.name
            );
        }
        assert!((0.0..=1.0).contains(&l.share_at_capacity), "{}", l.name);
        assert!(l.p95_wait_s <= l.wait_s.max(l.p95_wait_s), "{}", l.name);
    }
    for s in &r.stages {
        assert!(s.busy_s >= 0.0 && s.starved_s >= 0.0 && s.blocked_s >= 0.0);
        assert!(s.utilisation <= 1.05, "{}: {}", s.name, s.utilisation);
        if let Some(cpu) = s.cpu_s {
            // A thread's CPU time cannot exceed the wall time it ran for
            // (the synthetic stages' `demand` is free).
            assert!(
                cpu <= s.busy_s + 0.05,
                "{}: cpu {cpu} busy {}",
                s.name,
                s.busy_s
            );
        }
    }
    let first = &r.stages[0];
    assert!(
        first.processed
            <= i.total
                + r.failures
                    .iter()
                    .map(|f| u64::from(f.attempts))
                    .sum::<u64>()
    );
    assert!(!r.diagnosis.is_empty());
    let t = r.timeline.as_ref().expect("sampled");
    for s in &t.samples {
        assert_eq!(s.working.len(), r.stages.len());
        for (v, (name, cap)) in s.in_use.iter().zip(&t.limiters) {
            assert!(v <= cap, "{name} sampled over capacity");
        }
    }
}

const MIXED: &str = r#"
[pipeline]
flow = ["io", "cpu_work", "sink"]
[source]
kind = "generate"
count = 300
sizes = ["10KiB", "200KiB", "1MiB"]
[limits.api]
per_second = 2000
burst = 20
[limits.memory]
budget = "2MiB"
[limits.cpu]
permits = 2
[stages.io]
kind = "hold"
duration = "1ms"
workers = 8
limits = ["api"]
[stages.cpu_work]
kind = "hold"
mode = "spin"
duration = "100us"
workers = 3
limits = ["memory", "cpu"]
fail_every = 17
[stages.sink]
kind = "discard"
"#;

#[test]
fn report_invariants_hold_and_events_agree_with_the_report() {
    let (r, events) = run(MIXED, &Registry::with_builtins());
    assert_invariants(&r);
    assert_eq!(r.items.failed, 300 / 17);
    let stage = |name: &str| r.stages.iter().find(|s| s.name == name).unwrap();
    // CPU time is the blocking stage's own; an async stage shares the
    // runtime's threads, so it has none to report.
    assert!(stage("cpu_work").cpu_s.is_some_and(|c| c > 0.0), "{r}");
    assert_eq!(stage("io").cpu_s, None);
    let mut count: HashMap<&str, u64> = HashMap::new();
    let mut finished: HashMap<String, u64> = HashMap::new();
    let mut admitted = std::collections::HashSet::new();
    for e in &events {
        let name = match &e.kind {
            EventKind::RunStarted { total, .. } => {
                assert_eq!(*total, Some(300));
                "run_started"
            }
            EventKind::Admitted { item } => {
                assert!(admitted.insert(item.clone()), "{item} admitted twice");
                "admitted"
            }
            EventKind::StageStarted { .. } => "stage_started",
            EventKind::StageFinished { stage, .. } => {
                *finished.entry(stage.clone()).or_default() += 1;
                "stage_finished"
            }
            EventKind::Done { .. } => "done",
            EventKind::Skipped { .. } => "skipped",
            EventKind::Failed { .. } => "failed",
            EventKind::RunFinished { outcome, .. } => {
                assert_eq!(*outcome, RunOutcome::Completed);
                "run_finished"
            }
            _ => "other",
        };
        *count.entry(name).or_default() += 1;
        // Every event serialises to one JSON object with its kind.
        let json = serde_json::to_value(e).unwrap();
        assert!(json["event"].is_string() && json["at_ms"].is_u64());
    }
    assert_eq!(count["admitted"], r.items.total);
    assert_eq!(count["done"], r.items.done);
    assert_eq!(count.get("failed").copied().unwrap_or(0), r.items.failed);
    assert_eq!(count["stage_started"], count["stage_finished"]);
    for s in &r.stages {
        assert_eq!(finished[&s.name], s.processed, "stage {}", s.name);
    }
    assert_eq!((count["run_started"], count["run_finished"]), (1, 1));
    let last = events.last().unwrap();
    assert!(matches!(last.kind, EventKind::RunFinished { .. }));
}

/// Two spinning stages with more workers than cores (`"cores+3"` each),
/// sharing a `cpu` limiter of `permits`.
fn cpu_bound(permits: &str) -> RunReport {
    let (r, _) = run(
        &common::generated(
            &["decode", "warp"],
            120,
            &format!(
                r#"
        [limits.cpu]
        permits = {permits}
        [stages.decode]
        kind = "hold"
        mode = "spin"
        duration = "1ms"
        workers = "cores+3"
        limits = ["cpu"]
        [stages.warp]
        kind = "hold"
        mode = "spin"
        duration = "1ms"
        workers = "cores+3"
        limits = ["cpu"]
        "#
            ),
        ),
        &Registry::with_builtins(),
    );
    assert_invariants(&r);
    r
}

#[test]
fn a_cpu_bound_pipeline_names_cpu() {
    let r = cpu_bound("1");
    assert!(
        r.diagnosis.contains("`cpu` was at capacity"),
        "{}",
        r.diagnosis
    );
    assert!(
        r.diagnosis
            .contains("`decode` and `warp` are the bottleneck"),
        "{}",
        r.diagnosis
    );
    if warpline_engine::units::cores() > 1 {
        assert!(
            r.diagnosis.contains("raising `cpu` (now 1) may help"),
            "{}",
            r.diagnosis
        );
    }
}

#[test]
fn a_cpu_limiter_at_the_core_count_is_told_one_more_permit_helps_and_no_more() {
    let r = cpu_bound("\"cores\"");
    assert!(
        r.diagnosis.contains("`cpu` was at capacity")
            && r.diagnosis.contains("one more (\"cores+1\")"),
        "{}",
        r.diagnosis
    );
    let r = cpu_bound("\"cores+1\"");
    assert!(
        r.diagnosis.contains("`cpu` was at capacity")
            && r.diagnosis
                .contains("above the core count: raising it will not help"),
        "{}",
        r.diagnosis
    );
}

/// The diagnosis of a run of `flow` over `count` generated inputs (then
/// `rest`) with the built-in kinds, whose report holds its invariants.
fn diagnosis(flow: &[&str], count: u64, rest: &str) -> String {
    let (r, _) = run(
        &common::generated(flow, count, rest),
        &Registry::with_builtins(),
    );
    assert_invariants(&r);
    r.diagnosis
}

#[test]
fn a_rate_bound_pipeline_names_the_rate() {
    let d = diagnosis(
        &["fetch"],
        40,
        r#"
        [limits.api]
        per_second = 200
        [stages.fetch]
        kind = "hold"
        workers = 8
        limits = ["api"]
        "#,
    );
    assert!(d.contains("`api` was at capacity"), "{d}");
    assert!(d.contains("sets the pace"), "{d}");
}

#[test]
fn a_memory_bound_pipeline_names_memory() {
    let d = diagnosis(
        &["work"],
        80,
        r#"
        size = "1MiB"
        [limits.memory]
        budget = "1MiB"
        [stages.work]
        kind = "hold"
        duration = "2ms"
        workers = 8
        limits = ["memory"]
        "#,
    );
    assert!(d.contains("`memory` was at capacity"), "{d}");
}

#[test]
fn a_stage_without_limits_that_is_always_busy_is_named() {
    let d = diagnosis(
        &["slow", "sink"],
        60,
        r#"
        [stages.slow]
        kind = "hold"
        duration = "3ms"
        workers = 1
        [stages.sink]
        kind = "discard"
        "#,
    );
    assert!(d.starts_with("`slow` is the bottleneck"), "{d}");
}

/// A source that takes its time: nothing inside the pipeline limits it.
struct Trickle(u64);
struct TrickleRun(u64);

impl SourceSpec for Trickle {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        Ok(Box::new(TrickleRun(self.0)))
    }
}

#[async_trait]
impl Source for TrickleRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        if self.0 == 0 {
            return None;
        }
        self.0 -= 1;
        tokio::time::sleep(Duration::from_millis(3)).await;
        Some(Ok(Input {
            id: format!("t{}", self.0),
            source: "trickle".into(),
            size_hint: None,
            meta: Default::default(),
        }))
    }
}

#[test]
fn when_nothing_inside_limits_the_run_the_diagnosis_says_so() {
    let mut registry = Registry::with_builtins();
    registry.register_source("trickle", |_| {
        Ok(Arc::new(Trickle(60)) as Arc<dyn SourceSpec>)
    });
    let (r, _) = run(
        r#"
        [pipeline]
        flow = ["work"]
        [source]
        kind = "trickle"
        [limits.cpu]
        permits = 4
        [stages.work]
        kind = "hold"
        duration = "100us"
        workers = 4
        limits = ["cpu"]
        "#,
        &registry,
    );
    assert_invariants(&r);
    assert!(
        r.diagnosis.starts_with("no limiter was at capacity"),
        "{}",
        r.diagnosis
    );
}

#[test]
fn a_subscriber_that_falls_behind_is_told_how_many_events_it_missed() {
    use futures::StreamExt;
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["sink"],
            3000,
            r#"
[stages.sink]
kind = "discard"
"#,
        ),
        &Registry::with_builtins(),
    )
    .unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = Arc::clone(&sent);
    let options = RunOptions {
        events: Some(Arc::new(move |_: &Event| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })),
        ..RunOptions::default()
    };
    // One thread: the run cannot start before the subscription, and the
    // subscriber reads nothing until the run has ended.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let received: Vec<Event> = rt.block_on(async {
        let handle = pipeline.spawn(options);
        let events = handle.events();
        handle.report().await.unwrap();
        events.collect().await
    });
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        sent > warpline_engine::handle::EVENT_BUFFER as u64,
        "{sent}"
    );
    let missed: Vec<u64> = received
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Missed { count } => Some(count),
            _ => None,
        })
        .collect();
    assert_eq!(missed.len(), 1, "one gap, told once");
    let others = received.len() as u64 - 1;
    assert_eq!(missed[0] + others, sent, "every event received or counted");
    assert!(matches!(received[0].kind, EventKind::Missed { .. }));
    assert!(matches!(
        received.last().unwrap().kind,
        EventKind::RunFinished { .. }
    ));
}

#[test]
fn a_panicking_event_sink_does_not_stop_the_run() {
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["work"],
            50,
            r#"
[stages.work]
kind = "hold"
mode = "spin"
duration = "100us"
workers = 2
"#,
        ),
        &Registry::with_builtins(),
    )
    .unwrap();
    let options = RunOptions {
        events: Some(Arc::new(|e: &Event| {
            if matches!(
                e.kind,
                EventKind::Done { .. } | EventKind::StageFinished { .. }
            ) {
                panic!("the sink cannot take it");
            }
        })),
        sample: Some(Duration::from_millis(5)),
        ..RunOptions::default()
    };
    let report = common::runtime()
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                pipeline.run_with_options(&RunControl::new(), &options),
            )
            .await
        })
        .expect("the run ends")
        .unwrap();
    assert_eq!(report.items.done, 50, "{report}");
    assert_invariants(&report);
}

#[tokio::test]
async fn a_run_nothing_held_back_says_so_with_its_busiest_stage() {
    let pipeline = warpline_engine::Pipeline::from_toml_str(
        "[pipeline]\nflow = [\"sink\"]\n[source]\nkind = \"generate\"\ncount = 20\n\
         [stages.sink]\nkind = \"discard\"\n",
        &warpline_engine::Registry::with_builtins(),
    )
    .unwrap();
    let r = pipeline.run().await.unwrap();
    assert!(
        r.diagnosis
            .contains("no stage's workers were busy 80% of it (the busiest, `sink`, "),
        "{}",
        r.diagnosis
    );
}
