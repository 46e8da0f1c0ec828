//! Accounting and shutdown: every admitted item ends done, skipped or
//! failed; a stop drains, a deadline aborts, `on_error = "abort"` aborts, and
//! a panicking stage fails its item without taking the run down.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::Gate;
use warpline_engine::report::RunOutcome;
use warpline_engine::{
    AsyncStage, BlockingStage, ErrorKind, Event, EventKind, Handler, Input, Item, Outcome,
    Pipeline, Registry, RunControl, RunOptions, Source, SourceError, SourceSpec, StageError,
};

fn gated(deadline: &str) -> (Arc<Pipeline>, Gate, Registry) {
    let (_, gate, _, registry) = common::kinds(u64::MAX);
    let pipeline = Pipeline::from_toml_str(
        &format!(
            r#"
            [pipeline]
            flow = ["first", "blocked"]
            shutdown_deadline = "{deadline}"
            [source]
            kind = "generate"
            count = 500
            [limits.cpu]
            permits = 2
            [stages.first]
            kind = "hold"
            workers = 2
            [stages.blocked]
            kind = "gate"
            workers = 2
            mailbox = 3
            limits = ["cpu"]
            "#
        ),
        &registry,
    )
    .unwrap();
    (Arc::new(pipeline), gate, registry)
}

fn assert_accounted(report: &warpline_engine::RunReport) {
    let i = report.items;
    assert_eq!(i.done + i.skipped + i.failed, i.total, "{i:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stop_drains_what_was_admitted_and_admits_nothing_more() {
    let (pipeline, gate, _registry) = gated("1h");
    let (control, run) = common::spawn_run(&pipeline);
    gate.wait_entered(2).await;
    tokio::time::sleep(Duration::from_secs(1)).await; // quiescent: the pipeline is full
    control.stop();
    gate.open();
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.outcome, RunOutcome::Stopped);
    assert_accounted(&report);
    assert_eq!(report.items.failed, 0, "a drained stop fails nothing");
    assert_eq!(
        report.items.total,
        pipeline.admission_bound(),
        "nothing admitted after the stop"
    );
}

#[tokio::test(start_paused = true)]
async fn past_the_shutdown_deadline_what_is_left_is_aborted() {
    let (pipeline, gate, _registry) = gated("5s");
    let (control, run) = common::spawn_run(&pipeline);
    gate.wait_entered(2).await;
    let stopped_at = tokio::time::Instant::now();
    control.stop(); // the gate never opens: only the deadline ends the run
    let report = run.await.unwrap().unwrap();
    assert_eq!(stopped_at.elapsed(), Duration::from_secs(5));
    assert_eq!(report.outcome, RunOutcome::Aborted);
    assert_accounted(&report);
    assert_eq!(report.items.done, 0);
    assert_eq!(report.items.failed, report.items.total);
    assert!(report
        .failures
        .iter()
        .all(|f| f.kind == ErrorKind::Interrupted));
    for l in pipeline.limits().iter() {
        assert_eq!(l.available(), l.capacity());
    }
}

#[tokio::test]
async fn on_error_abort_stops_the_run_at_the_first_failure() {
    let pipeline = Pipeline::from_toml_str(
        r#"
        [pipeline]
        flow = ["work"]
        on_error = "abort"
        [source]
        kind = "generate"
        count = 10000
        [stages.work]
        kind = "hold"
        fail_every = 10
        "#,
        &Registry::with_builtins(),
    )
    .unwrap();
    let report = pipeline.run().await.unwrap();
    assert_eq!(report.outcome, RunOutcome::AbortedOnError);
    assert_accounted(&report);
    assert!(report.items.total < 10000);
    assert_eq!(
        report
            .failures
            .iter()
            .filter(|f| f.kind == ErrorKind::Permanent)
            .count(),
        1,
        "one real failure, the rest interrupted"
    );
}

#[tokio::test]
async fn on_error_continue_counts_failures_and_goes_on() {
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["work"],
            100,
            r#"
        [stages.work]
        kind = "hold"
        workers = 1
        fail_every = 10
        "#,
        ),
        &Registry::with_builtins(),
    )
    .unwrap();
    let report = pipeline.run().await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!((report.items.done, report.items.failed), (90, 10));
    let f = &report.failures[0];
    assert_eq!(
        (f.stage.as_str(), f.kind, f.attempts),
        ("work", ErrorKind::Permanent, 1)
    );
    // The failure names the item in `id`; the message says what went wrong
    // (a log line names the item once, in its span).
    assert_eq!(f.id, "item-010");
    assert!(f.message.starts_with("synthetic failure"), "{}", f.message);
}

struct Panics;

impl warpline_engine::Stage for Panics {}

#[async_trait]
impl AsyncStage for Panics {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        if item.id.ends_with('3') {
            panic!("boom on {}", item.id);
        }
        Ok(Outcome::Continue)
    }
}

struct Skips;

impl warpline_engine::Stage for Skips {}

#[async_trait]
impl AsyncStage for Skips {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        if item.id.ends_with('5') {
            return Ok(Outcome::Skip("already there".into()));
        }
        Ok(Outcome::Continue)
    }
}

#[tokio::test]
async fn a_panicking_stage_fails_its_item_and_the_run_goes_on() {
    let mut registry = Registry::with_builtins();
    registry.register_stage("panics", |_| Ok(Handler::from_async(Panics)));
    registry.register_stage("skips", |_| Ok(Handler::from_async(Skips)));
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["skip", "boom"],
            100,
            r#"
        [limits.cpu]
        permits = 1
        [stages.skip]
        kind = "skips"
        [stages.boom]
        kind = "panics"
        workers = 2
        limits = ["cpu"]
        "#,
        ),
        &registry,
    )
    .unwrap();
    let report = pipeline.run().await.unwrap();
    assert_accounted(&report);
    assert_eq!(report.items.skipped, 10);
    assert_eq!(report.items.failed, 10);
    assert_eq!(report.items.done, 80);
    assert!(report
        .failures
        .iter()
        .all(|f| f.kind == ErrorKind::Panicked && f.message.contains("boom")));
    assert_eq!(pipeline.limits().get("cpu").unwrap().available(), 1);
}

/// Panics in the hooks around `process`: sizing an item for a bytes
/// limiter (`demand`) and the admission-time skip check.
struct PanicsAround;

impl warpline_engine::Stage for PanicsAround {
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        if item.id.ends_with('7') {
            panic!("demand boom on {}", item.id);
        }
        Ok(1)
    }

    fn skip_check(&self, item: &Item) -> Option<String> {
        if item.id.ends_with('9') {
            panic!("skip_check boom on {}", item.id);
        }
        None
    }
}

impl BlockingStage for PanicsAround {
    fn process(&self, _item: &mut Item) -> Result<Outcome, StageError> {
        Ok(Outcome::Continue)
    }
}

#[tokio::test]
async fn a_panic_while_sizing_or_skip_checking_fails_the_item_and_the_run_goes_on() {
    let mut registry = Registry::with_builtins();
    registry.register_stage("around", |_| Ok(Handler::from_blocking(PanicsAround)));
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["boom"],
            100,
            r#"
        [limits.memory]
        budget = "1KiB"
        [stages.boom]
        kind = "around"
        workers = 2
        limits = ["memory"]
        "#,
        ),
        &registry,
    )
    .unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), pipeline.run())
        .await
        .expect("the run ends")
        .unwrap();
    assert_accounted(&report);
    assert_eq!(report.items.failed, 20, "{report}");
    assert_eq!(report.items.done, 80, "{report}");
    for f in &report.failures {
        assert_eq!(f.kind, ErrorKind::Panicked, "{f:?}");
        assert!(f.message.contains("boom"), "{f:?}");
        assert!(f.message.starts_with(&format!("{}:", f.id)), "{f:?}");
    }
    assert_eq!(pipeline.limits().get("memory").unwrap().available(), 1024);
}

/// A pipeline of one `hold` stage fed by a source of the test's own.
fn one_stage_from(
    kind: &'static str,
    spec: impl Fn() -> Arc<dyn SourceSpec> + Send + Sync + 'static,
) -> Pipeline {
    let mut registry = Registry::with_builtins();
    registry.register_source(kind, move |_| Ok(spec()));
    let toml = format!(
        "[pipeline]\nflow = [\"work\"]\n[source]\nkind = \"{kind}\"\n\
         [stages.work]\nkind = \"hold\"\nduration = \"1ms\"\n"
    );
    Pipeline::from_toml_str(&toml, &registry).unwrap()
}

/// A source that panics after three inputs.
struct PanickingSource;
struct PanickingRun(u32);

impl SourceSpec for PanickingSource {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        Ok(Box::new(PanickingRun(0)))
    }
}

#[async_trait]
impl Source for PanickingRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        self.0 += 1;
        if self.0 > 3 {
            panic!("source boom after {} inputs", self.0 - 1);
        }
        Some(Ok(Input {
            id: format!("s{}", self.0),
            source: "panicking".into(),
            size_hint: None,
            meta: Default::default(),
        }))
    }
}

#[tokio::test]
async fn a_panicking_source_ends_the_run_with_what_it_gave_and_says_why() {
    let pipeline = one_stage_from("panicking", || Arc::new(PanickingSource));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = Arc::clone(&done);
    let options = RunOptions {
        events: Some(Arc::new(move |e: &Event| {
            if matches!(e.kind, EventKind::Done { .. }) {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })),
        ..RunOptions::default()
    };
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        pipeline.run_with_options(&RunControl::new(), &options),
    )
    .await
    .expect("the run ends");
    let e = result.expect_err("a run whose source panicked is not a success");
    let text = e.to_string();
    assert!(
        text.contains("source `panicking` panicked after 3 inputs"),
        "{text}"
    );
    assert!(text.contains("source boom after 3 inputs"), "{text}");
    assert_eq!(
        done.load(std::sync::atomic::Ordering::Relaxed),
        3,
        "the inputs given before the panic were finished"
    );
}

struct PanicsOnOpen;

impl SourceSpec for PanicsOnOpen {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        panic!("cannot open: boom")
    }
}

#[tokio::test]
async fn a_source_that_panics_when_opened_is_an_error_not_a_crash() {
    let pipeline = one_stage_from("opens_badly", || Arc::new(PanicsOnOpen));
    let e = pipeline.run().await.expect_err("the source cannot open");
    assert!(
        e.to_string()
            .contains("cannot open source `opens_badly`: panicked: cannot open: boom"),
        "{e}"
    );
}

/// A stage that never returns: after `stall_warning` without movement the
/// run says once what waits for what, in the report (and the log).
#[tokio::test(start_paused = true)]
async fn a_run_where_nothing_moves_says_what_waits_for_what() {
    let (_, gate, _, registry) = common::kinds(u64::MAX);
    let pipeline = Arc::new(
        Pipeline::from_toml_str(
            r#"
            [pipeline]
            flow = ["blocked"]
            stall_warning = "2m"
            [source]
            kind = "generate"
            count = 3
            [limits.cpu]
            permits = 1
            [stages.blocked]
            kind = "gate"
            workers = 2
            limits = ["cpu"]
            "#,
            &registry,
        )
        .unwrap(),
    );
    let run = {
        let pipeline = Arc::clone(&pipeline);
        tokio::spawn(async move { pipeline.run().await })
    };
    tokio::time::sleep(Duration::from_secs(600)).await;
    gate.open();
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.items.done, 3);
    assert_eq!(report.stalls.len(), 1, "{report:?}");
    let stall = &report.stalls[0];
    assert!(stall.quiet_s >= 120.0, "{stall:?}");
    assert!(
        stall.state.contains("`blocked` 2 working, 1 queued"),
        "{stall:?}"
    );
    assert!(
        stall.state.contains("`cpu` 1 of 1 in use, 1 waiting"),
        "{stall:?}"
    );
    assert!(
        report.diagnosis.starts_with("no item moved"),
        "{}",
        report.diagnosis
    );
}
