//! A live snapshot of a running pipeline (items queued and in workers per
//! stage, limiter use and waiters), and the timeline's samples as the peak
//! of each interval, so a burst between two samples still shows.

use crate::common;

use std::time::Duration;

use warpline_engine::live::{LimiterSnapshot, StageSnapshot};
use warpline_engine::{LimiterKind, Pipeline, Registry, RunControl, RunOptions};

/// The first snapshot in which `held`'s mailbox holds 2 and one worker
/// waits for a `slots` permit: waited for by counts, not by time.
async fn full_mailbox_and_a_waiter(
    watch: &warpline_engine::RunWatch,
) -> warpline_engine::live::Snapshot {
    let mut last = None;
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            last = watch.snapshot();
            if let Some(s) = &last {
                let slots = s.limiters.iter().find(|l| l.name == "slots");
                if s.stages[0].queued == 2 && slots.is_some_and(|l| l.waiters == 1) {
                    return;
                }
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "the mailbox fills and a worker waits for a slot: {last:?}"
    );
    last.expect("read")
}

#[tokio::test]
async fn a_snapshot_shows_each_stages_mailbox_workers_and_limiters() {
    let (gate, handle) = common::spawn_held_then_sink(
        20,
        r#"
        [limits.slots]
        permits = 2
        [stages.held]
        kind = "gate"
        workers = 3
        mailbox = 2
        limits = ["slots"]
        [stages.sink]
        kind = "discard"
        "#,
    );
    let watch = handle.watch();
    // Two items inside the gate (the limiter's two slots), a third worker
    // waiting for a slot, and the mailbox full behind them: waited for by
    // counts, not by time.
    gate.wait_entered(2).await;
    let snapshot = full_mailbox_and_a_waiter(&watch).await;
    assert_eq!(
        snapshot.stages,
        [
            StageSnapshot {
                name: "held".into(),
                queued: 2,
                working: 3,
                passed: 0,
                failed: 0,
            },
            StageSnapshot {
                name: "sink".into(),
                ..StageSnapshot::default()
            }
        ]
    );
    // The built-in `descriptors` budget is there too.
    assert_eq!(
        snapshot.limiters.iter().find(|l| l.name == "slots"),
        Some(&LimiterSnapshot {
            name: "slots".into(),
            kind: LimiterKind::Count,
            in_use: 2,
            capacity: 2,
            waiters: 1,
        })
    );
    assert!(snapshot.admitted >= 5, "{snapshot:?}");
    assert_eq!(snapshot.total, Some(20));
    assert_eq!((snapshot.done, snapshot.failed), (0, 0));
    gate.open();
    let report = handle.report().await.unwrap();
    assert_eq!(report.items.done, 20);
    assert_eq!(watch.snapshot(), None, "nothing to read once the run ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_between_two_samples_shows_in_the_timeline() {
    // One sample at the start and one at the end (an hour apart at most):
    // every item came and went between them. Instants would show nothing;
    // peaks show the stage's workers and the limiter busy.
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["work"],
            8,
            r#"
        [limits.cpu]
        permits = 2
        [stages.work]
        kind = "hold"
        duration = "1ms"
        workers = 2
        limits = ["cpu"]
        "#,
        ),
        &Registry::with_builtins(),
    )
    .unwrap();
    let options = RunOptions {
        sample: Some(Duration::from_secs(3600)),
        ..RunOptions::default()
    };
    let report = pipeline
        .run_with_options(&RunControl::new(), &options)
        .await
        .unwrap();
    assert_eq!(report.items.done, 8);
    let t = report.timeline.expect("sampled");
    let last = t.samples.last().expect("a sample at the end");
    assert!(t.samples.len() >= 2, "{t:?}");
    assert!(last.working[0] >= 1, "{t:?}");
    let cpu = t.limiters.iter().position(|(n, _)| n == "cpu").unwrap();
    assert!(last.in_use[cpu] >= 1, "{t:?}");
}
