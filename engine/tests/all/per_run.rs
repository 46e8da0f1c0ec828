//! What a report says is this run's own: a limiter shared with an earlier,
//! busier run reports this run's peak and waits; and inputs a stopped run
//! never admitted are counted, in the report, its event and `Progress`;
//! an embedder sees each stage's items in its workers and the rate.

use crate::common;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use warpline_engine::limit::{Limiter, Limits};
use warpline_engine::report::RunOutcome;
use warpline_engine::{Event, EventKind, Loader, Registry, RunOptions, RunWatch};

fn with_shared(toml: &str, shared: &Limits) -> warpline_engine::Pipeline {
    Loader::from_toml_str(toml)
        .with_limits(shared)
        .load(&Registry::with_builtins())
        .unwrap()
}

fn job(count: u64, workers: u32) -> String {
    common::generated(
        &["fetch"],
        count,
        &format!(
            r#"
        [limits.connections]
        shared = true
        [stages.fetch]
        kind = "hold"
        duration = "10ms"
        workers = {workers}
        limits = ["connections"]
        "#
        ),
    )
}

/// `count` generated items through one `discard` stage, `a`.
fn discarded(count: u64) -> warpline_engine::Pipeline {
    Loader::from_toml_str(&common::generated(
        &["a"],
        count,
        "[stages.a]\nkind = \"discard\"\n",
    ))
    .load(&Registry::with_builtins())
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_quiet_run_after_a_busy_one_on_a_shared_limiter_reports_its_own_figures() {
    let mut shared = Limits::new();
    shared
        .add(Limiter::count("connections", NonZeroU32::new(4).unwrap()))
        .unwrap();

    // 16 workers on 4 shared connections: always at capacity.
    let busy = with_shared(&job(200, 16), &shared).run().await.unwrap();
    let b = busy.limiter("connections").unwrap();
    assert_eq!(b.peak_in_use, Some(4), "{busy}");
    assert!(b.share_at_capacity > 0.9, "{busy}");
    assert!(b.wait_s > 0.0, "{busy}");

    // One worker, 10 items: never more than 1 held, nobody waits.
    let quiet = with_shared(&job(10, 1), &shared).run().await.unwrap();
    assert_eq!(quiet.items.done, 10);
    let q = quiet.limiter("connections").unwrap();
    assert_eq!(q.peak_in_use, Some(1), "{quiet}");
    assert_eq!(q.wait_s, 0.0, "{quiet}");
    assert_eq!(q.p95_wait_s, 0.0, "{quiet}");
    assert_eq!(q.share_at_capacity, 0.0, "{quiet}");
    assert!(
        !quiet.diagnosis.contains("`connections` was at capacity"),
        "{}",
        quiet.diagnosis
    );
    assert!(!quiet.diagnosis.contains("may help"), "{}", quiet.diagnosis);
    assert!(!quiet.to_string().contains("at capacity 100%"), "{quiet}");
}

#[tokio::test(start_paused = true)]
async fn inputs_a_stopped_run_never_admitted_are_counted() {
    let pipeline = Loader::from_toml_str(&common::generated(
        &["slow"],
        100,
        r#"
        [stages.slow]
        kind = "hold"
        duration = "10ms"
        workers = 1
        mailbox = 1
        "#,
    ))
    .load(&Registry::with_builtins())
    .unwrap();
    // Stop once 5 inputs were admitted, from inside the run's own events.
    let watch: Arc<OnceLock<RunWatch>> = Arc::new(OnceLock::new());
    let admitted = Arc::new(AtomicU64::new(0));
    let finished: Arc<OnceLock<EventKind>> = Arc::new(OnceLock::new());
    let sink = {
        let (watch, admitted, finished) = (watch.clone(), admitted.clone(), finished.clone());
        move |e: &Event| match &e.kind {
            EventKind::Admitted { .. } if admitted.fetch_add(1, Ordering::AcqRel) + 1 == 5 => {
                watch.get().expect("set before the run's task runs").stop();
            }
            EventKind::RunFinished { .. } => {
                let _ = finished.set(e.kind.clone());
            }
            _ => {}
        }
    };
    // A current-thread runtime: the run's task starts only once this test
    // awaits, after the watch is set.
    let handle = pipeline.spawn(RunOptions {
        events: Some(Arc::new(sink)),
        ..RunOptions::default()
    });
    let _ = watch.set(handle.watch());
    let progress_watch = handle.watch();
    let report = handle.report().await.unwrap();

    assert_eq!(report.outcome, RunOutcome::Stopped);
    let i = report.items;
    let not_admitted = i.not_admitted.expect("the source knows its length");
    assert!(not_admitted > 0, "{report}");
    assert_eq!(i.total + not_admitted, 100, "{report}");
    let progress = progress_watch.progress();
    assert_eq!(progress.total, Some(i.total + not_admitted));
    assert_eq!(progress.not_admitted, Some(not_admitted));
    assert!(
        report.to_string().contains(&format!(
            "not admitted: {not_admitted} of the source's 100 inputs"
        )),
        "{report}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["items"]["not_admitted"], not_admitted);
    match finished.get() {
        Some(EventKind::RunFinished {
            admitted,
            not_admitted: n,
            ..
        }) => {
            assert_eq!(*admitted, i.total);
            assert_eq!(*n, Some(not_admitted));
        }
        other => panic!("no run_finished event: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_that_admits_every_input_has_none_left() {
    let pipeline = discarded(7);
    let report = pipeline.run().await.unwrap();
    assert_eq!(report.items.total, 7);
    assert_eq!(report.items.not_admitted, Some(0));
    assert!(!report.to_string().contains("not admitted"), "{report}");
}

#[tokio::test]
async fn a_watch_shows_each_stages_items_in_workers_and_the_rate() {
    let (gate, handle) = common::spawn_held_then_sink(
        10,
        r#"
        [stages.held]
        kind = "gate"
        workers = 3
        [stages.sink]
        kind = "discard"
        "#,
    );
    let watch = handle.watch();
    assert_eq!(watch.rate_per_s(), 0.0);
    // Three workers inside the gate: three items in `held`'s workers.
    gate.wait_entered(3).await;
    let stages = watch.stages();
    assert_eq!(
        stages
            .iter()
            .map(|s| (s.name.as_str(), s.working))
            .collect::<Vec<_>>(),
        [("held", 3), ("sink", 0)]
    );
    gate.open();
    let report = handle.report().await.unwrap();
    assert_eq!(report.items.done, 10);
    assert!(watch.stages().iter().all(|s| s.working == 0));
    assert!(watch.rate_per_s() > 0.0);
}

#[tokio::test(start_paused = true)]
async fn one_item_is_said_in_the_singular() {
    let pipeline = discarded(1);
    let text = pipeline.run().await.unwrap().to_string();
    assert!(
        text.contains(": 1 item, 1 done, 0 skipped, 0 failed"),
        "{text}"
    );
}
