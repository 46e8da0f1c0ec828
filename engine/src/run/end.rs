//! The steps of a run after every worker has finished: what is left is
//! counted, the outcome named, and the report built.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_channel::Receiver;

use super::ledger::Shared;
use super::watch::Sampler;
use super::{RunControl, RunOptions};
use crate::adapt::Gates;
use crate::item::Item;
use crate::limit::Window;
use crate::observe::EventKind;
use crate::pipeline::Pipeline;
use crate::report::{RunEnd, RunOutcome, RunReport};

/// Flushes the failures file, and counts as interrupted what an abort left
/// in the mailboxes and among the items sent back to the source.
pub(super) fn settle(pipeline: &Pipeline, shared: &Shared, receivers: &[Receiver<Item>]) {
    if let Some(file) = &shared.failures_file {
        let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(e) = file.flush() {
            tracing::error!("cannot write the failures file: {e}");
        }
    }
    for (rx, plan) in receivers.iter().zip(&pipeline.stages) {
        while let Ok(item) = rx.try_recv() {
            shared.interrupted(item, &plan.name, "while the item waited in the mailbox");
        }
    }
    while let Some(item) = shared.take_requeued() {
        shared.interrupted(item, "source", "before the item was admitted again");
    }
}

/// How the run ended.
pub(super) fn outcome(shared: &Shared, control: &RunControl) -> RunOutcome {
    if shared.aborted_on_error.load(Ordering::Acquire) {
        RunOutcome::AbortedOnError
    } else if control.is_aborted() {
        RunOutcome::Aborted
    } else if control.is_stopped() {
        RunOutcome::Stopped
    } else {
        RunOutcome::Completed
    }
}

/// What the run watched while it went on, for its report.
pub(super) struct Watched {
    /// When it started, on tokio's clock.
    pub(super) started: tokio::time::Instant,
    /// This run's window on each limiter, in the pipeline's order.
    pub(super) windows: Vec<Window>,
    /// How many inputs the source said it holds.
    pub(super) length: Option<u64>,
    pub(super) sampler: Option<Sampler>,
    pub(super) stalls: crate::stall::Watchdog,
    pub(super) gates: Vec<Option<Arc<Gates>>>,
}

/// The run's report, announced as an event and in the log.
pub(super) async fn report(
    pipeline: &Pipeline,
    shared: &Shared,
    options: &RunOptions,
    outcome: RunOutcome,
    watched: Watched,
) -> RunReport {
    let timeline = match watched.sampler {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    let stalls = watched.stalls.finish().await;
    let hosts = shared
        .hosts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut report = RunReport::build(
        pipeline,
        &shared.ledger,
        &shared.stats,
        RunEnd {
            outcome,
            elapsed: watched.started.elapsed(),
            timeline,
            hosts: &hosts,
            windows: &watched.windows,
            length: watched
                .length
                .filter(|_| options.only_ids.is_none() && options.shard.is_none()),
        },
    );
    if let Some(first) = stalls.first() {
        report.diagnosis = format!(
            "no item moved for {:.0} s at {:.0} s into the run (see `stalls`: {}); {}",
            first.quiet_s, first.at_s, first.state, report.diagnosis
        );
    }
    report.stalls = stalls;
    for (host, limits) in watched.gates.iter().flatten().flat_map(|g| g.snapshot()) {
        if let Some(h) = report.hosts.iter_mut().find(|h| h.host == host) {
            h.adaptive = Some(limits);
        }
    }
    shared.events.emit(|| EventKind::RunFinished {
        outcome: report.outcome,
        admitted: report.items.total,
        not_admitted: report.items.not_admitted,
    });
    tracing::info!(
        pipeline = %pipeline.name,
        done = report.items.done,
        skipped = report.items.skipped,
        failed = report.items.failed,
        elapsed_s = report.elapsed_s,
        "run finished: {}", report.outcome
    );
    report
}
