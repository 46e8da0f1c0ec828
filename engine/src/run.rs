//! Running a pipeline: the source loop, the stage workers, shutdown.
//!
//! Each stage has one bounded mailbox (`async-channel`) and `workers`
//! workers. Async stages' workers are tokio tasks; blocking stages' workers
//! are OS threads owned by the stage, each driving the same worker loop with
//! `Handle::block_on`, so a blocking call only ever blocks its own thread.
//! A worker hands a finished item on with a send that waits while the next
//! mailbox is full: a slow stage fills its mailbox, upstream workers wait, and
//! the wait reaches the source, which pulls an input only after its previous
//! item was accepted.
//!
//! Shutdown follows vector's topology: [`RunControl::stop`] stops the source;
//! each stage drains as its mailbox closes (a mailbox closes when every
//! upstream worker has finished). After the pipeline's `shutdown_deadline`,
//! or on [`RunControl::abort`], every wait is cancelled and what is left is
//! counted failed as `interrupted`. Tickets release on drop, so no permit
//! outlives the run either way.
//!
//! Its rooms, in the order a run meets them: `start` (the failures file,
//! the source opened, the shared state, the deadline, the workers spawned),
//! `admit` (admission tickets, the source loop, items a byte budget sent
//! back), `worker` (a stage's worker: limiters, the stage's code, retries,
//! the hand-off), `ledger` (every item's end, the figures, the state they
//! share), `watch` (the stall watchdog and the sampler), and `end` (what an
//! abort left, the outcome, the report).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use async_channel::{Receiver, Sender, TrySendError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::item::{ErrorKind, Item, Outcome, StageError};
use crate::limit::{Charged, LimitError, Limiter, LimiterKind, Priority, RateKey, Ticket};
use crate::observe::{Emitter, EventKind, EventSink, Sample, Timeline, TryOutcome};
use crate::pipeline::OnError;
use crate::pipeline::{Pipeline, StagePlan};
use crate::redact::redact_text;
use crate::report::{redact, Failure, RunReport};
use crate::stage::{Handler, Source, SourceError};
use tracing::Instrument;

pub(crate) use crate::guard::{guarded, guarded_async};

mod admit;
mod end;
mod ledger;
mod start;
mod watch;
mod worker;

use crate::live::{LimiterSnapshot, Probe, Snapshot, StageSnapshot};
pub(crate) use crate::report::{HostStats, Ledger, StageStats};
use admit::{drive_source, forward};
use ledger::{add_ns, Shared};
use watch::{watch_stalls, Sampler};

/// How many failures the report lists one by one; the rest are counted.
pub const REPORTED_FAILURES: usize = 1000;

/// The most item footprints a report lists
/// ([`RunReport::footprints`](crate::RunReport::footprints)).
pub const REPORTED_FOOTPRINTS: usize = 10_000;

/// Stops or aborts a running pipeline. Clones control the same run.
#[derive(Debug, Clone)]
pub struct RunControl {
    abort: CancellationToken,
    stop: CancellationToken,
}

impl Default for RunControl {
    fn default() -> Self {
        Self::new()
    }
}

impl RunControl {
    /// A control that has not been used.
    pub fn new() -> Self {
        let abort = CancellationToken::new();
        // Aborting also stops.
        let stop = abort.child_token();
        RunControl { abort, stop }
    }

    /// Stops admitting inputs; items already in the pipeline finish, until
    /// the shutdown deadline passes.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Aborts at once: every wait is cancelled, items in flight are counted
    /// failed as `interrupted`. A blocking call already running finishes
    /// first; its item is then counted interrupted too.
    pub fn abort(&self) {
        self.abort.cancel();
    }

    /// Whether [`stop`](Self::stop) or [`abort`](Self::abort) was called.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// A token whose cancellation aborts the run.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.abort.clone()
    }

    /// Whether [`abort`](Self::abort) was called (or the deadline passed).
    pub fn is_aborted(&self) -> bool {
        self.abort.is_cancelled()
    }
}

/// What a run does besides running: where failure records go, and which
/// inputs to admit.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Write each failed item as one JSON line to this file (created or
    /// truncated at the start; each line is flushed as it is written, so the
    /// file survives a crash).
    pub failures: Option<PathBuf>,
    /// Admit only inputs with these ids (`--retry-failed`); the others are
    /// not counted at all.
    pub only_ids: Option<HashSet<String>>,
    /// Where the run's [`Event`](crate::observe::Event)s go.
    pub events: Option<Arc<dyn EventSink>>,
    /// Admit only the inputs of this shard (`--shard i/N`). Like
    /// `only_ids`, not for a source that hands out work from a shared queue
    /// (the coordinator's): the inputs it filters out would never be
    /// acknowledged.
    pub shard: Option<crate::shard::Shard>,
    /// Sample the pipeline this often: the report then has a
    /// [`Timeline`], and `metrics` gauges (queue depth, limiter use and
    /// waiters) are kept up to date.
    pub sample: Option<Duration>,
    /// The value of the `pipeline` label on this run's metrics; the
    /// pipeline's name when `None`. A service that runs the same pipeline
    /// for several jobs at once gives each its own (a job id), so that
    /// their series stay apart.
    pub metrics_label: Option<String>,
    /// Reads live snapshots ([`Snapshot`]) of the run (its
    /// mailboxes, workers and limiters) while it lasts.
    pub probe: Option<crate::live::Probe>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("failures", &self.failures)
            .field("only_ids", &self.only_ids.as_ref().map(HashSet::len))
            .field("events", &self.events.is_some())
            .field("sample", &self.sample)
            .field("shard", &self.shard)
            .field("metrics_label", &self.metrics_label)
            .field("probe", &self.probe.is_some())
            .finish()
    }
}

/// What is wrong with a failures file given to `--retry-failed`.
#[derive(Debug, thiserror::Error)]
pub enum FailuresFileError {
    /// It cannot be read.
    #[error("cannot read failures file {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why not.
        error: std::io::Error,
    },
    /// A line is not JSON.
    #[error("{path}:{line}: not a failure record: {error}")]
    NotARecord {
        /// The file.
        path: String,
        /// The line, from 1.
        line: usize,
        /// What the JSON parser said.
        error: serde_json::Error,
    },
    /// A record without an id.
    #[error("{path}:{line}: a failure record has no \"id\"")]
    NoId {
        /// The file.
        path: String,
        /// The line, from 1.
        line: usize,
    },
}

impl RunOptions {
    /// The ids in a failures file written by an earlier run.
    pub fn ids_from_failures(path: &Path) -> Result<HashSet<String>, FailuresFileError> {
        let file = || path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| FailuresFileError::Read {
            path: file(),
            error,
        })?;
        let mut ids = HashSet::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(line).map_err(|error| FailuresFileError::NotARecord {
                    path: file(),
                    line: n + 1,
                    error,
                })?;
            let id = value.get("id").and_then(|v| v.as_str()).ok_or_else(|| {
                FailuresFileError::NoId {
                    path: file(),
                    line: n + 1,
                }
            })?;
            ids.insert(id.to_owned());
        }
        Ok(ids)
    }
}

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The source could not be opened.
    #[error("cannot open source `{kind}`: {message}")]
    Source {
        /// The source kind.
        kind: String,
        /// What went wrong.
        message: String,
    },
    /// The source panicked while reading its next input. The items it had
    /// given were finished (or failed) as usual; the rest were not read.
    #[error(
        "source `{kind}` panicked after {admitted} inputs: {message} (the items admitted \
         before were finished; the inputs after them were not read: fix the source and run \
         again, finished outputs are skipped)"
    )]
    SourcePanicked {
        /// The source kind.
        kind: String,
        /// Inputs admitted before the panic.
        admitted: u64,
        /// The panic's message.
        message: String,
    },
    /// The run's task panicked or was cancelled from outside.
    #[error("the run ended abnormally: {0}")]
    Panicked(String),
    /// The failures file could not be created.
    #[error("cannot create the failures file {path}: {error}")]
    Failures {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The operating system refused a worker thread.
    #[error("cannot start a worker thread for stage `{stage}`: {error}")]
    Spawn {
        /// The stage.
        stage: String,
        /// The OS error.
        error: std::io::Error,
    },
}

/// The remote host of a URL source, as its origin (`scheme://host:port`,
/// the port left out when it is the scheme's default): the key of rate
/// limiters with one bucket per host, and of the report's hosts. Two
/// servers on one address but different ports are two hosts. An object
/// store's URL (`s3://BUCKET/KEY`) has no origin: its host is the bucket,
/// `s3://BUCKET`.
pub fn host_of(source: &str) -> Option<String> {
    let url = url::Url::parse(source).ok()?;
    let host = url.host_str()?;
    let origin = url.origin();
    Some(if origin.is_tuple() {
        origin.ascii_serialization()
    } else {
        format!("{}://{host}", url.scheme())
    })
}

/// A panic in a stage's code, as the error of the item it was working on.
fn panicked(id: &str, text: &str) -> StageError {
    StageError::new(ErrorKind::Panicked, format!("{id}: stage panicked: {text}"))
}

/// Runs a pipeline to its end, in named steps: start (the failures file,
/// the source, the shared state, the deadline, the workers), drive the
/// source, wait for every worker, then end (what is left, the outcome, the
/// report).
pub(crate) async fn run(
    pipeline: &Pipeline,
    control: &RunControl,
    options: &RunOptions,
) -> Result<RunReport, RunError> {
    // tokio's clock, as the limiters use: paused time in tests stays coherent.
    let started = tokio::time::Instant::now();
    let failures_file = start::open_failures_file(options)?;
    let source = start::open_source(pipeline)?;
    tracing::info!(pipeline = %pipeline.name, stages = pipeline.stages.len(), "run starting");
    // This run's figures of each limiter, even one shared with other runs.
    let windows: Vec<_> = pipeline.limits.iter().map(Limiter::window).collect();
    let shared = start::share(pipeline, control, options, failures_file);
    crate::observe::describe_metrics();
    let length = source.len_hint();
    shared.events.emit(|| EventKind::RunStarted {
        pipeline: pipeline.name.clone(),
        total: length,
    });
    let mailboxes = start::mailboxes(pipeline);
    let watchdog = start::spawn_deadline(pipeline, control, &shared);
    let gates = start::adaptive_gates(pipeline);
    for stage in &pipeline.stages {
        stage.handler.run_starting().await;
    }
    let (workers, spawn_error) = start::spawn_workers(pipeline, &mailboxes, &shared, &gates);
    // Only workers hold senders now (and the source, the first): a mailbox
    // closes when everything upstream of it has finished.
    let first = mailboxes.first().map(|(tx, _)| tx.clone());
    let receivers: Vec<Receiver<Item>> = mailboxes.into_iter().map(|(_, rx)| rx).collect();
    let sampler = options
        .sample
        .map(|every| Sampler::start(pipeline, &receivers, &shared, every));
    let stalls = watch_stalls(pipeline, &receivers, &shared);
    // Read until the run returns (the guard detaches the probe).
    let _probe = (options.probe.as_ref())
        .map(|p| watch::attach(p, pipeline, started, length, &receivers, &shared));

    let source_panic = match (&spawn_error, first) {
        (Some(_), _) => {
            control.abort();
            None
        }
        (None, Some(tx)) => {
            drive_source(
                pipeline,
                source,
                tx,
                &shared,
                options.only_ids.as_ref(),
                options.shard,
            )
            .await
        }
        (None, None) => None,
    };
    // Every worker has finished when the last one's token is dropped.
    workers.wait().await;
    watchdog.abort();
    let mut finished = Vec::with_capacity(pipeline.stages.len());
    for stage in &pipeline.stages {
        let notes = stage.handler.run_finished().await;
        for note in &notes {
            tracing::warn!(stage = %stage.name, "{note}");
        }
        finished.push(notes);
    }

    end::settle(pipeline, &shared, &receivers);
    if let Some(err) = spawn_error {
        return Err(err);
    }
    if let Some(message) = source_panic {
        return Err(RunError::SourcePanicked {
            kind: pipeline.source.kind.clone(),
            admitted: shared.ledger.total.load(Ordering::Acquire),
            message,
        });
    }
    let outcome = end::outcome(&shared, control);
    let watched = end::Watched {
        started,
        windows,
        length,
        sampler,
        stalls,
        gates,
    };
    let mut report = end::report(pipeline, &shared, options, outcome, watched).await;
    for (stage, notes) in report.stages.iter_mut().zip(finished) {
        stage.notes.extend(notes);
    }
    Ok(report)
}

impl Pipeline {
    /// Runs the pipeline to the end on the caller's tokio runtime.
    pub async fn run(&self) -> Result<RunReport, RunError> {
        self.run_with(&RunControl::new()).await
    }

    /// Runs the pipeline, stopping or aborting when `control` says so.
    pub async fn run_with(&self, control: &RunControl) -> Result<RunReport, RunError> {
        crate::run::run(self, control, &RunOptions::default()).await
    }

    /// Runs the pipeline with `options` (a failures file, only some ids).
    pub async fn run_with_options(
        &self,
        control: &RunControl,
        options: &RunOptions,
    ) -> Result<RunReport, RunError> {
        crate::run::run(self, control, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn a_host_is_its_scheme_name_and_port() {
        assert_eq!(
            host_of("http://127.0.0.1:8931/a.tif").as_deref(),
            Some("http://127.0.0.1:8931")
        );
        assert_ne!(
            host_of("http://127.0.0.1:8931/a.tif"),
            host_of("http://127.0.0.1:8932/a.tif")
        );
        assert_eq!(
            host_of("https://user:pw@example.com/a.tif?x=1").as_deref(),
            Some("https://example.com")
        );
        assert_eq!(host_of("/data/a.tif"), None);
        assert_eq!(host_of("file:///data/a.tif"), None);
        assert_eq!(
            host_of("s3://my-bucket/a/b.tif").as_deref(),
            Some("s3://my-bucket")
        );
        assert_ne!(host_of("s3://one/a.tif"), host_of("s3://two/a.tif"));
    }
}
