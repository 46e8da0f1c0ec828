//! The steps of a run before the source is driven: the failures file, the
//! source opened, the state the run's tasks share, the shutdown deadline,
//! and every stage's workers spawned.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_channel::{Receiver, Sender};
use tokio_util::task::TaskTracker;

use super::ledger::Shared;
use super::worker::Worker;
use super::{guarded, Ledger, RunControl, RunError, RunOptions, StageStats};
use crate::adapt::Gates;
use crate::item::Item;
use crate::observe::Emitter;
use crate::pipeline::Pipeline;
use crate::stage::{Handler, Source};

/// Creates `--failures FILE`, if asked for, before anything runs.
pub(super) fn open_failures_file(
    options: &RunOptions,
) -> Result<Option<Mutex<std::io::BufWriter<std::fs::File>>>, RunError> {
    match &options.failures {
        None => Ok(None),
        Some(path) => Ok(Some(Mutex::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|error| RunError::Failures {
                path: path.clone(),
                error,
            })?,
        )))),
    }
}

/// Opens the pipeline's source; a panic in it is an error too.
pub(super) fn open_source(pipeline: &Pipeline) -> Result<Box<dyn Source>, RunError> {
    let opened = guarded(|| pipeline.source.open())
        .unwrap_or_else(|text| Err(format!("panicked: {text}").into()));
    opened.map_err(|message| RunError::Source {
        kind: pipeline.source.kind.clone(),
        message: message.to_string(),
    })
}

/// The state every task of the run shares.
pub(super) fn share(
    pipeline: &Pipeline,
    control: &RunControl,
    options: &RunOptions,
    failures_file: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
) -> Arc<Shared> {
    Arc::new(Shared {
        ledger: Ledger::default(),
        failures_file,
        stats: pipeline
            .stages
            .iter()
            .map(|_| StageStats::default())
            .collect(),
        names: pipeline.stages.iter().map(|s| s.name.clone()).collect(),
        control: control.clone(),
        on_error: pipeline.on_error,
        aborted_on_error: AtomicBool::new(false),
        aborted: Arc::new(AtomicBool::new(false)),
        events: Emitter::new(options.events.clone()),
        hosts: Mutex::new(HashMap::new()),
        requeued: Mutex::new(VecDeque::new()),
        moved: tokio::sync::Notify::new(),
        label: options
            .metrics_label
            .clone()
            .unwrap_or_else(|| pipeline.name.clone()),
    })
}

/// Each stage's bounded mailbox.
pub(super) fn mailboxes(pipeline: &Pipeline) -> Vec<(Sender<Item>, Receiver<Item>)> {
    pipeline
        .stages
        .iter()
        .map(|s| async_channel::bounded(s.mailbox as usize))
        .collect()
}

/// The deadline: once stopped, the run may drain this long. Then (or on
/// an abort) raise the flag that hot paths check.
pub(super) fn spawn_deadline(
    pipeline: &Pipeline,
    control: &RunControl,
    shared: &Shared,
) -> tokio::task::JoinHandle<()> {
    let (stop, abort) = (control.stop.clone(), control.abort.clone());
    let aborted = Arc::clone(&shared.aborted);
    let deadline = pipeline.shutdown_deadline;
    tokio::spawn(async move {
        stop.cancelled().await;
        tokio::select! {
            _ = abort.cancelled() => {}
            _ = tokio::time::sleep(deadline) => {
                tracing::warn!("shutdown deadline of {deadline:?} passed: aborting what is left");
                abort.cancel();
            }
        }
        aborted.store(true, Ordering::Release);
    })
}

/// One set of adaptive host gates per stage that makes requests, learnt
/// afresh each run, told the fastest rate bucket the stage draws on.
pub(super) fn adaptive_gates(pipeline: &Pipeline) -> Vec<Option<Arc<Gates>>> {
    pipeline
        .stages
        .iter()
        .map(|s| {
            let bucket = s
                .limits
                .iter()
                .filter_map(|l| l.per_second())
                .reduce(f64::max);
            s.adaptive.map(|a| Arc::new(Gates::new(a, bucket)))
        })
        .collect()
}

/// Spawns every stage's workers: tokio tasks for an async stage, OS threads
/// of its own for a blocking one. Each worker holds a token of the tracker
/// returned, closed: it is empty once every worker has finished. A thread
/// that cannot be spawned stops the spawning.
pub(super) fn spawn_workers(
    pipeline: &Pipeline,
    mailboxes: &[(Sender<Item>, Receiver<Item>)],
    shared: &Arc<Shared>,
    gates: &[Option<Arc<Gates>>],
) -> (TaskTracker, Option<RunError>) {
    let alive = TaskTracker::new();
    let error = spawn_each(pipeline, mailboxes, shared, gates, &alive);
    alive.close();
    (alive, error)
}

fn spawn_each(
    pipeline: &Pipeline,
    mailboxes: &[(Sender<Item>, Receiver<Item>)],
    shared: &Arc<Shared>,
    gates: &[Option<Arc<Gates>>],
    alive: &TaskTracker,
) -> Option<RunError> {
    let runtime = tokio::runtime::Handle::current();
    let skip_checks: Arc<[Handler]> = pipeline.stages.iter().map(|s| s.handler.clone()).collect();
    for (index, plan) in pipeline.stages.iter().enumerate() {
        for n in 0..plan.workers {
            let worker = Worker {
                index,
                plan: plan.clone(),
                skip_checks: (index == 0).then(|| Arc::clone(&skip_checks)),
                rx: mailboxes[index].1.clone(),
                tx: mailboxes.get(index + 1).map(|(tx, _)| tx.clone()),
                shared: Arc::clone(shared),
                gates: gates[index].clone(),
                _alive: alive.token(),
            };
            if plan.handler.is_blocking() {
                let rt = runtime.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("{}-{n}", plan.name))
                    .spawn(move || rt.block_on(worker.run()));
                if let Err(error) = spawned {
                    return Some(RunError::Spawn {
                        stage: plan.name.clone(),
                        error,
                    });
                }
            } else {
                tokio::spawn(worker.run());
            }
        }
    }
    None
}
