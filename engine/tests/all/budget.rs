//! A byte budget cannot deadlock (issue 16): items that grow from stage to
//! stage, a skewed stream (a few items 40x the rest) against a budget that
//! each item fits alone, and random flows, sizes, charges and budgets: every
//! run completes, every item is done once, and the budget is whole again.
//!
//! Time is paused: a run that stalls has nothing left to wake it, tokio
//! jumps to the timeout at once, and the test fails instead of hanging.

use std::time::Duration;

use proptest::prelude::*;
use serde::Deserialize;
use serde_json::json;
use warpline_engine::{
    async_trait, AsyncStage, Handler, Item, Outcome, Pipeline, PipelineBuilder, Registry,
    RunReport, StageError,
};

/// Charges `factor` x the item's size on the stage's byte budget, then
/// works for a millisecond.
struct Grow {
    factor: u64,
}

#[derive(Deserialize)]
struct GrowSettings {
    factor: u64,
}

impl warpline_engine::Stage for Grow {
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        Ok(item.size_hint.unwrap_or(0) * self.factor)
    }
}

#[async_trait]
impl AsyncStage for Grow {
    async fn process(&self, _item: &mut Item) -> Result<Outcome, StageError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(Outcome::Continue)
    }
}

fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    r.register_stage("grow", |s| {
        let g: GrowSettings = s.parse()?;
        Ok(Handler::from_async(Grow { factor: g.factor }))
    });
    r
}

/// One stage of a test flow.
#[derive(Debug, Clone)]
struct Step {
    factor: u64,
    workers: u32,
    mailbox: u32,
    cpu: bool,
}

fn pipeline(budget_kib: u64, cpu: u32, sizes_kib: &[u64], count: u64, steps: &[Step]) -> Pipeline {
    let sizes: Vec<u64> = sizes_kib.iter().map(|k| k * 1024).collect();
    let mut b = PipelineBuilder::new("budget")
        .source("generate", json!({ "count": count, "sizes": sizes }))
        .limit("memory", json!({ "budget": format!("{budget_kib}KiB") }));
    if steps.iter().any(|s| s.cpu) {
        b = b.limit("cpu", json!({ "permits": cpu }));
    }
    for (i, s) in steps.iter().enumerate() {
        let limits = if s.cpu {
            json!(["memory", "cpu"])
        } else {
            json!(["memory"])
        };
        // `release` as pipelines written before resizing said it: the stage
        // charges the budget again either way.
        let release = if i == 0 { json!([]) } else { json!(["memory"]) };
        b = b.stage(
            &format!("s{i}"),
            "grow",
            json!({
                "factor": s.factor,
                "workers": s.workers,
                "mailbox": s.mailbox,
                "limits": limits,
                "release": release,
                "carry": ["memory"],
            }),
        );
    }
    b.stage("sink", "discard", json!({}))
        .build(&registry())
        .expect("valid test pipeline")
}

/// Runs on a paused clock; a stall fails after a day of (skipped) time.
fn run_to_the_end(pipeline: &Pipeline) -> RunReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(async {
        match tokio::time::timeout(Duration::from_secs(86_400), pipeline.run()).await {
            Ok(report) => report.expect("the run starts"),
            Err(_) => {
                let memory = pipeline.limits().get("memory").expect("declared");
                panic!(
                    "the run stalled: `memory` {} of {} bytes in use, {} waiting; {:?}",
                    memory.in_use(),
                    memory.capacity(),
                    memory.waiters(),
                    pipeline.limits()
                )
            }
        }
    })
}

fn assert_complete(pipeline: &Pipeline, report: &RunReport, count: u64) {
    assert_eq!(report.items.done, count, "{report}");
    assert_eq!(report.items.failed, 0, "{report}");
    for l in pipeline.limits().iter() {
        assert_eq!(l.available(), l.capacity(), "`{}` leaked", l.name());
    }
}

/// The shape issue 16 measured: a fetch-like charge, then two stages that
/// charge 3x and 6x it, one item in ten 40x the others, every item fitting
/// the budget alone (the largest charge is 240 of 256 KiB). With a plain
/// semaphore (each stage giving back what the item carried, then waiting
/// for its whole charge) this run stalls for good: items parked in the
/// mailboxes hold the budget that the stages' workers wait for.
#[test]
fn a_skewed_stream_against_a_small_budget_completes() {
    let step = |factor| Step {
        factor,
        workers: 4,
        mailbox: 4,
        cpu: factor > 1,
    };
    let sizes = [1, 1, 1, 1, 1, 1, 1, 1, 1, 40];
    let p = pipeline(256, 2, &sizes, 300, &[step(1), step(3), step(6)]);
    let report = run_to_the_end(&p);
    assert_complete(&p, &report, 300);
}

/// Items that all fit alone but never two at a time: the budget serves
/// them one by one, sending back those that were admitted too early.
#[test]
fn items_that_fit_only_alone_are_served_one_by_one() {
    let step = |factor| Step {
        factor,
        workers: 3,
        mailbox: 2,
        cpu: false,
    };
    let p = pipeline(100, 1, &[25, 20], 40, &[step(1), step(2), step(4)]);
    let report = run_to_the_end(&p);
    assert_complete(&p, &report, 40);
    assert!(report.items.requeued > 0, "{report}");
}

/// Found by the property test: a stage that gives back its items' whole
/// share (charge 0) feeds one that charges again. Its waiters hold nothing,
/// yet they keep the workers that the items parked above them need: they
/// are sent back too while the first waiter is stuck.
#[test]
fn waiters_that_hold_nothing_cannot_block_the_items_parked_above_them() {
    let step = |factor, workers, mailbox| Step {
        factor,
        workers,
        mailbox,
        cpu: false,
    };
    let steps = [step(1, 2, 1), step(0, 1, 2), step(3, 1, 1), step(6, 1, 1)];
    let p = pipeline(8, 1, &[1], 20, &steps);
    let report = run_to_the_end(&p);
    assert_complete(&p, &report, 20);
}

fn step() -> impl Strategy<Value = Step> {
    (0u64..=6, 1u32..=4, 1u32..=4, any::<bool>()).prop_map(|(factor, workers, mailbox, cpu)| Step {
        factor,
        workers,
        mailbox,
        cpu,
    })
}

fn flow() -> impl Strategy<Value = (u64, u32, Vec<u64>, u64, Vec<Step>)> {
    (
        8u64..=256,
        1u32..=3,
        prop::collection::vec(1u64..=100, 1..=12),
        20u64..=80,
        prop::collection::vec(step(), 1..=6),
    )
        .prop_map(|(budget, cpu, weights, count, steps)| {
            // Sizes (in KiB) such that every item's largest charge fits the
            // budget alone: weight% of budget / the largest factor.
            let top = steps.iter().map(|s| s.factor).max().unwrap_or(1).max(1);
            let sizes = weights
                .iter()
                .map(|w| (budget * w / 100 / top).max(1))
                .collect();
            (budget, cpu, sizes, count, steps)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the flow, the sizes, the charges and the budget, as long as
    /// each item fits alone, the run completes with every item done.
    #[test]
    fn every_flow_whose_items_fit_alone_completes((budget, cpu, sizes, count, steps) in flow()) {
        let p = pipeline(budget, cpu, &sizes, count, &steps);
        let report = run_to_the_end(&p);
        assert_complete(&p, &report, count);
    }
}
