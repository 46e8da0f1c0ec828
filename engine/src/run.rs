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

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use async_channel::{Receiver, Sender, TrySendError};
use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::config::OnError;
use crate::item::{ErrorKind, Item, Outcome, StageError};
use crate::limit::{Charged, LimitError, Limiter, LimiterKind, Priority, RateKey, Ticket};
use crate::observe::{Emitter, EventKind, EventSink, Sample, Timeline};
use crate::pipeline::{Pipeline, StagePlan};
use crate::redact::redact_text;
use crate::report::{redact, Failure, RunOutcome, RunReport};
use crate::stage::{Handler, Source, SourceError};
use tracing::Instrument;

/// How many failures the report lists one by one; the rest are counted.
pub const REPORTED_FAILURES: usize = 1000;

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
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("failures", &self.failures)
            .field("only_ids", &self.only_ids.as_ref().map(HashSet::len))
            .field("events", &self.events.is_some())
            .field("sample", &self.sample)
            .field("shard", &self.shard)
            .finish()
    }
}

impl RunOptions {
    /// The ids in a failures file written by an earlier run.
    pub fn ids_from_failures(path: &Path) -> Result<HashSet<String>, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read failures file {}: {e}", path.display()))?;
        let mut ids = HashSet::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: not a failure record: {e}", path.display(), n + 1))?;
            let id = value.get("id").and_then(|v| v.as_str()).ok_or_else(|| {
                format!(
                    "{}:{}: a failure record has no \"id\"",
                    path.display(),
                    n + 1
                )
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

/// Per-stage counters.
#[derive(Debug, Default)]
pub(crate) struct StageStats {
    pub processed: AtomicU64,
    pub busy_ns: AtomicU64,
    /// CPU time of the stage's code on its own threads (blocking stages).
    pub cpu_ns: AtomicU64,
    /// Time workers waited for an item (the mailbox was empty).
    pub starved_ns: AtomicU64,
    /// Time workers waited to hand an item on (the next mailbox was full).
    pub blocked_ns: AtomicU64,
    /// Items in the stage's workers right now.
    pub working: AtomicU64,
}

fn add_ns(counter: &AtomicU64, since: Instant) {
    let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    counter.fetch_add(ns, Ordering::Relaxed);
}

/// Requests to one host.
#[derive(Debug, Default, Clone)]
pub(crate) struct HostStats {
    pub requests: u64,
    pub throttled: u64,
    pub retries: u64,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

/// Every item's end, counted once.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub total: AtomicU64,
    pub done: AtomicU64,
    pub skipped: AtomicU64,
    pub failed: AtomicU64,
    pub failures: Mutex<Vec<Failure>>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Items sent back to the start of the flow by a byte budget.
    pub requeued: AtomicU64,
}

impl Ledger {
    /// Items admitted that have not ended yet.
    fn in_flight(&self) -> u64 {
        let ended = self.done.load(Ordering::Acquire)
            + self.skipped.load(Ordering::Acquire)
            + self.failed.load(Ordering::Acquire);
        self.total.load(Ordering::Acquire).saturating_sub(ended)
    }
}

struct Shared {
    ledger: Ledger,
    /// Failure records, one JSON line each.
    failures_file: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
    stats: Vec<StageStats>,
    control: RunControl,
    on_error: OnError,
    aborted_on_error: AtomicBool,
    /// Set once the abort token is cancelled: a cheap check for hot paths.
    aborted: Arc<AtomicBool>,
    events: Emitter,
    hosts: Mutex<HashMap<String, HostStats>>,
    /// Items a byte budget sent back to the start of the flow, for the
    /// source loop to admit again before any new input.
    requeued: Mutex<VecDeque<Item>>,
    /// Told whenever an item ends or is sent back.
    moved: tokio::sync::Notify,
}

impl Shared {
    fn bytes(&self, item: &Item) {
        if item.bytes_in > 0 {
            self.ledger
                .bytes_in
                .fetch_add(item.bytes_in, Ordering::Relaxed);
        }
        if item.bytes_out > 0 {
            self.ledger
                .bytes_out
                .fetch_add(item.bytes_out, Ordering::Relaxed);
        }
    }

    fn done(&self, item: &Item) {
        self.bytes(item);
        self.ledger.done.fetch_add(1, Ordering::AcqRel);
        self.moved.notify_waiters();
        metrics::counter!("warpline_items_total", "outcome" => "done").increment(1);
        self.events.emit(|| EventKind::Done {
            item: item.id.clone(),
        });
    }

    fn skipped(&self, item: &Item, stage: &str, reason: &str) {
        tracing::debug!(item = %item.id, stage, reason, "skipped");
        self.bytes(item);
        self.ledger.skipped.fetch_add(1, Ordering::AcqRel);
        self.moved.notify_waiters();
        metrics::counter!("warpline_items_total", "outcome" => "skipped").increment(1);
        self.events.emit(|| EventKind::Skipped {
            item: item.id.clone(),
            stage: stage.to_owned(),
            reason: reason.to_owned(),
        });
    }

    fn failed(&self, id: &str, source: &str, stage: &str, attempts: u32, error: StageError) {
        let source = redact(source);
        // The message may quote the source, or a URL it led to.
        let mut error = error;
        error.message = redact_text(&error.message);
        let stops_run = error.stops_run.then(|| error.message.clone());
        metrics::counter!("warpline_items_total", "outcome" => "failed").increment(1);
        self.events.emit(|| EventKind::Failed {
            item: id.to_owned(),
            stage: stage.to_owned(),
            kind: error.kind,
            message: error.message.clone(),
        });
        if error.kind == ErrorKind::Interrupted {
            tracing::debug!(item = %id, stage, "interrupted: {}", error.message);
        } else {
            tracing::warn!(item = %id, source, stage, kind = %error.kind, "failed: {}", error.message);
        }
        self.ledger.failed.fetch_add(1, Ordering::AcqRel);
        self.moved.notify_waiters();
        {
            let mut failures = self
                .ledger
                .failures
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let record = Failure {
                id: id.to_owned(),
                source,
                stage: stage.to_owned(),
                kind: error.kind,
                message: error.message,
                attempts,
                status: error.status,
            };
            if let Some(file) = &self.failures_file {
                let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let written = serde_json::to_writer(&mut *file, &record)
                    .map_err(std::io::Error::from)
                    .and_then(|_| file.write_all(b"\n"))
                    .and_then(|_| file.flush());
                if let Err(e) = written {
                    tracing::error!("cannot write a failure record: {e}");
                }
            }
            if failures.len() < REPORTED_FAILURES {
                failures.push(record);
            }
        }
        if (self.on_error == OnError::Abort || stops_run.is_some())
            && error.kind != ErrorKind::Interrupted
            && !self.control.is_aborted()
        {
            self.aborted_on_error.store(true, Ordering::Release);
            match stops_run {
                Some(why) => tracing::error!(item = %id, stage, "aborting the run: {why}"),
                None => {
                    tracing::error!(item = %id, stage, "aborting the run: on_error = \"abort\"")
                }
            }
            self.control.abort();
        }
    }

    /// Sends `item` back to the start of the flow, holding nothing: the
    /// byte budget `limiter` needed its bytes for an item deeper in the flow
    /// (see [`limit`](crate::limit)'s budget: this is what keeps it from
    /// deadlocking).
    fn requeue(&self, mut item: Item, stage: &str, limiter: &Limiter) {
        tracing::info!(
            item = %item.id, stage,
            "gave back its `{}` and goes to the start of the flow again: an item deeper in the flow needed the room",
            limiter.name()
        );
        item.reset();
        self.ledger.requeued.fetch_add(1, Ordering::Relaxed);
        self.events.emit(|| EventKind::Requeued {
            item: item.id.clone(),
            stage: stage.to_owned(),
            limiter: limiter.name().to_owned(),
        });
        self.requeued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(item);
        self.moved.notify_waiters();
    }

    fn take_requeued(&self) -> Option<Item> {
        self.requeued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    fn interrupted(&self, item: Item, stage: &str, when: &str) {
        let attempts = item.attempts;
        self.failed(
            &item.id,
            &item.source,
            stage,
            attempts,
            StageError::new(ErrorKind::Interrupted, format!("run aborted {when}")),
        );
    }
}

/// The remote host of a URL source, as its origin (`scheme://host:port`,
/// the port left out when it is the scheme's default): the key of rate
/// limiters with one bucket per host, and of the report's hosts. Two
/// servers on one address but different ports are two hosts.
fn host_of(source: &str) -> Option<String> {
    let url = url::Url::parse(source).ok()?;
    url.host_str()?;
    Some(url.origin().ascii_serialization())
}

/// A panic in a stage's code, as the error of the item it was working on.
fn panicked(id: &str, text: &str) -> StageError {
    StageError::new(ErrorKind::Panicked, format!("{id}: stage panicked: {text}"))
}

/// Runs code that is not the engine's own (a stage's, a source's, an
/// event sink's): a panic in it comes back as what it said, and the worker
/// that called it goes on.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_text(p.as_ref()))
}

/// [`guarded`] for a future.
pub(crate) async fn guarded_async<T>(f: impl std::future::Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(f)
        .catch_unwind()
        .await
        .map_err(|p| panic_text(p.as_ref()))
}

/// What a panic said, if it said it as text.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}

/// What acquiring a stage's limiters came to.
enum Acquired {
    /// Everything the stage needs, to give back or carry after the call.
    Held(Vec<Ticket>),
    /// The item failed or the run was aborted; the item has been counted.
    Gone,
    /// A byte budget needed the item's share for an item deeper in the
    /// flow: the item goes back to the start.
    Evicted(Limiter),
}

struct Worker {
    index: usize,
    plan: StagePlan,
    /// For the first stage's workers: every stage, asked whether an item's
    /// work is already done before anything is spent on it.
    skip_checks: Option<Arc<[Handler]>>,
    rx: Receiver<Item>,
    tx: Option<Sender<Item>>,
    shared: Arc<Shared>,
    _alive: tokio::sync::mpsc::Sender<()>,
}

impl Worker {
    async fn run(self) {
        let abort = self.shared.control.abort.clone();
        loop {
            // Work first: when an item is waiting, the abort token (a lock)
            // is not touched at all.
            let starved = self.rx.is_empty().then(Instant::now);
            let mut item = tokio::select! {
                biased;
                received = self.rx.recv() => match received {
                    Ok(item) => item,
                    Err(_) => break, // closed and empty: upstream has finished
                },
                _ = abort.cancelled() => break,
            };
            item.set_parked(None);
            let stats = &self.shared.stats[self.index];
            if let Some(since) = starved {
                add_ns(&stats.starved_ns, since);
            }
            if self.shared.aborted.load(Ordering::Acquire) {
                self.shared.interrupted(
                    item,
                    &self.plan.name,
                    "while the item waited in the mailbox",
                );
                break;
            }
            stats.working.fetch_add(1, Ordering::Relaxed);
            // At ERROR level so the span is kept whatever level the filter lets
            // through: every line inside an item's work carries its id and stage.
            let span = tracing::error_span!("item", id = %item.id, stage = %self.plan.name);
            self.handle(item, &abort).instrument(span).await;
            stats.working.fetch_sub(1, Ordering::Relaxed);
        }
    }

    async fn handle(&self, mut item: Item, abort: &CancellationToken) {
        let stage = self.plan.name.as_str();
        let shared = &self.shared;
        if let Some(checks) = &self.skip_checks {
            // A stage's code: a panic fails the item, not the worker.
            match guarded(|| checks.iter().find_map(|h| h.skip_check(&item))) {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    shared.skipped(&item, stage, &reason);
                    return;
                }
                Err(text) => {
                    shared.failed(&item.id, &item.source, stage, 0, panicked(&item.id, &text));
                    return;
                }
            }
        }
        item.attempts = 0;
        let requests = self.plan.handler.counts_requests();
        let (result, held) = loop {
            item.attempts += 1;
            let (result, held) = match self.acquire(&mut item, abort).await {
                Ok(Acquired::Gone) => return, // failed or interrupted, and counted
                Ok(Acquired::Evicted(limiter)) => {
                    shared.requeue(item, stage, &limiter);
                    return;
                }
                Ok(Acquired::Held(held)) => (self.call(&mut item, abort).await, held),
                Err(error) => (Err(error), Vec::new()),
            };
            let retrying = matches!(&result, Err(e) if self.plan.retry.retries(e, item.attempts));
            if requests {
                self.count_request(&item, &result, retrying);
            }
            match result {
                Err(error) if retrying => {
                    drop(held); // nothing is held while waiting
                    let key = self.rate_key(&item);
                    if let Some(delay) = error.retry_after {
                        for l in &self.plan.limits {
                            l.pause_key(key.as_deref(), delay);
                        }
                    }
                    let delay = self
                        .plan
                        .retry
                        .backoff(item.attempts)
                        .max(error.retry_after.unwrap_or_default());
                    tracing::debug!(item = %item.id, stage, attempt = item.attempts, ?delay, "retrying: {}", redact_text(&error.message));
                    tokio::select! {
                        biased;
                        _ = abort.cancelled() => {
                            shared.interrupted(item, stage, "while waiting to retry");
                            return;
                        }
                        _ = tokio::time::sleep(delay) => continue,
                    }
                }
                result => break (result, held),
            }
        };

        // Tickets this stage carries travel on; the rest are given back now.
        for ticket in held {
            if self.plan.carry.iter().any(|c| c == ticket.limiter().name()) {
                item.keep(ticket);
            }
        }

        match result {
            Ok(Outcome::Continue) => match &self.tx {
                None => shared.done(&item),
                Some(tx) => {
                    let stats = &shared.stats[self.index];
                    let next = u32::try_from(self.index + 1).unwrap_or(u32::MAX);
                    forward(tx, item, next, shared, abort, stage, Some(stats)).await
                }
            },
            Ok(Outcome::Skip(reason)) => shared.skipped(&item, stage, &reason),
            Err(error) => {
                shared.failed(&item.id, &item.source, stage, item.attempts, error);
            }
        }
    }

    /// Counts one try of a request-making stage against the item's host.
    fn count_request(&self, item: &Item, result: &Result<Outcome, StageError>, retrying: bool) {
        let host = host_of(&item.source).unwrap_or_else(|| "(local)".to_owned());
        let now = Instant::now();
        let mut hosts = self.shared.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let h = hosts.entry(host).or_default();
        h.requests += 1;
        h.first.get_or_insert(now);
        h.last = Some(now);
        if matches!(result, Err(e) if e.status == Some(429)) {
            h.throttled += 1;
        }
        if retrying {
            h.retries += 1;
        }
    }

    /// The bucket key of the item for this stage's keyed rate limiters.
    fn rate_key(&self, item: &Item) -> Option<String> {
        self.plan
            .limits
            .iter()
            .any(|l| l.rate_key() == Some(RateKey::Host))
            .then(|| host_of(&item.source))
            .flatten()
    }

    /// Acquires the stage's limiters in the global order (the plan's limits
    /// are sorted). A byte budget the item already holds is resized: the
    /// stage waits only for the difference.
    async fn acquire(
        &self,
        item: &mut Item,
        abort: &CancellationToken,
    ) -> Result<Acquired, StageError> {
        // What the item carries of a limiter this stage takes again is given
        // back first (a count: nothing waits for a slot while holding one),
        // except a byte budget, whose share the stage resizes.
        for name in &self.plan.release {
            if !self.recharges(name) {
                item.release(name);
            }
        }
        let bytes = if self
            .plan
            .limits
            .iter()
            .any(|l| l.kind() == LimiterKind::Bytes)
        {
            let demand = || {
                guarded(|| self.plan.handler.demand(item))
                    .unwrap_or_else(|text| Err(panicked(&item.id, &text)))
            };
            self.on_stage_cpu(demand)?
        } else {
            0
        };
        let mut held = Vec::with_capacity(self.plan.limits.len());
        let key = self.rate_key(item);
        let mut waits = Vec::new();
        for limiter in &self.plan.limits {
            let started = self.shared.events.on().then(Instant::now);
            let acquired = tokio::select! {
                biased;
                r = self.take(limiter, item, bytes, key.as_deref()) => r,
                _ = abort.cancelled() => Err(LimitError::Closed(limiter.name().to_owned())),
            };
            if let Some(t) = started {
                waits.push((limiter.name().to_owned(), t.elapsed().as_secs_f64()));
            }
            match acquired {
                Ok(Some(Charged::Held(ticket))) => held.push(ticket),
                Ok(Some(Charged::Evicted)) => return Ok(Acquired::Evicted(limiter.clone())),
                Ok(None) => {}
                Err(e) => return self.limit_failed(item, e),
            }
        }
        self.shared.events.emit(|| EventKind::StageStarted {
            item: item.id.clone(),
            stage: self.plan.name.clone(),
            attempt: item.attempts,
            waits,
        });
        Ok(Acquired::Held(held))
    }

    /// Whether this stage charges the byte budget `name` again.
    fn recharges(&self, name: &str) -> bool {
        self.plan
            .limits
            .iter()
            .any(|l| l.name() == name && l.kind() == LimiterKind::Bytes)
    }

    /// Takes one limiter for `item`: a slot, a token, or its share of a
    /// byte budget resized to `bytes`. While this stage's request is first
    /// and stuck, the items parked in its mailbox go back to the start.
    async fn take(
        &self,
        limiter: &Limiter,
        item: &mut Item,
        bytes: u64,
        key: Option<&str>,
    ) -> Result<Option<Charged>, LimitError> {
        if limiter.kind() != LimiterKind::Bytes {
            return Ok(limiter.acquire(1, key).await?.map(Charged::Held));
        }
        let carried = item.take_ticket(limiter.name());
        let priority = Priority {
            depth: u32::try_from(self.index).unwrap_or(u32::MAX),
            seq: item.seq,
        };
        let evict = |parked: Item| self.shared.requeue(parked, &self.plan.name, limiter);
        let charged = limiter
            .charge(carried, bytes, priority, Some(&self.rx), evict)
            .await?;
        Ok(Some(charged))
    }

    /// Counts the item failed (over budget, or the run was aborted while it
    /// waited), or asks for another try (a global rate's backend failed).
    fn limit_failed(&self, item: &Item, e: LimitError) -> Result<Acquired, StageError> {
        let kind = match e {
            LimitError::OverBudget { .. } => ErrorKind::OverBudget,
            LimitError::Closed(_) => ErrorKind::Interrupted,
            // The engine's own requests are sent back, not failed; a
            // stage's code that sees this fails its try.
            LimitError::GaveBack(_) => ErrorKind::Transient,
            // Try again like any transient failure.
            LimitError::Backend { .. } => {
                return Err(StageError::transient(format!("{}: {e}", item.id)))
            }
        };
        let message = match kind {
            ErrorKind::Interrupted => "run aborted while waiting for a limiter".to_owned(),
            _ => format!("{}: {e}", item.id),
        };
        let error = StageError::new(kind, message);
        let stage = self.plan.name.as_str();
        self.shared
            .failed(&item.id, &item.source, stage, item.attempts, error);
        Ok(Acquired::Gone)
    }

    /// Runs `f`, the stage's own code, adding the CPU time it used to the
    /// stage's when the stage is blocking (its threads are its own, so
    /// their CPU time is the stage's).
    fn on_stage_cpu<T>(&self, f: impl FnOnce() -> T) -> T {
        if !self.plan.handler.is_blocking() {
            return f();
        }
        let before = crate::report::thread_cpu();
        let r = f();
        let used = crate::report::thread_cpu().saturating_sub(before);
        self.shared.stats[self.index].cpu_ns.fetch_add(
            u64::try_from(used.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        r
    }

    /// Runs the stage's code once, timing it and turning a panic into an
    /// error.
    async fn call(
        &self,
        item: &mut Item,
        abort: &CancellationToken,
    ) -> Result<Outcome, StageError> {
        let started = Instant::now();
        let result = match &self.plan.handler {
            Handler::Async(h) => {
                let id = item.id.clone();
                tokio::select! {
                    biased;
                    r = guarded_async(h.process(item)) => r.unwrap_or_else(|text| Err(panicked(&id, &text))),
                    _ = abort.cancelled() => Err(StageError::new(ErrorKind::Interrupted, "run aborted while the stage was working")),
                }
            }
            Handler::Blocking(h) => {
                // This is an OS thread of the stage's own, not a runtime
                // thread: blocking here blocks no other work.
                self.on_stage_cpu(|| {
                    guarded(|| h.process(item))
                        .unwrap_or_else(|text| Err(panicked(&item.id, &text)))
                })
            }
        };
        let stats = &self.shared.stats[self.index];
        stats.processed.fetch_add(1, Ordering::Relaxed);
        let busy = started.elapsed();
        stats.busy_ns.fetch_add(
            u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.shared.events.emit(|| EventKind::StageFinished {
            item: item.id.clone(),
            stage: self.plan.name.clone(),
            busy_s: busy.as_secs_f64(),
            outcome: match &result {
                Ok(Outcome::Continue) => "ok".to_owned(),
                Ok(Outcome::Skip(_)) => "skip".to_owned(),
                Err(e) => e.kind.to_string(),
            },
        });
        result
    }
}

/// Hands an item to the next mailbox, waiting while it is full (unless the
/// run is aborted).
async fn forward(
    tx: &Sender<Item>,
    mut item: Item,
    next: u32,
    shared: &Shared,
    abort: &CancellationToken,
    stage: &str,
    stats: Option<&StageStats>,
) {
    // From here until a worker of the next stage takes it, the item cannot
    // move on its own: a byte budget counts its share as parked there.
    item.set_parked(Some(next));
    let item = match tx.try_send(item) {
        Ok(()) => return,
        Err(TrySendError::Full(item)) => item,
        Err(TrySendError::Closed(item)) => {
            shared.interrupted(item, stage, "before the next stage could take the item");
            return;
        }
    };
    // The slow path keeps the names, as the send future owns the item.
    let (id, source, attempts) = (item.id.clone(), item.source.clone(), item.attempts);
    let blocked = Instant::now();
    tokio::select! {
        biased;
        _ = abort.cancelled() => shared.failed(
            &id, &source, stage, attempts,
            StageError::new(ErrorKind::Interrupted, "run aborted while handing the item on"),
        ),
        sent = tx.send(item) => if let Err(e) = sent {
            shared.interrupted(e.into_inner(), stage, "before the next stage could take the item");
        },
    }
    if let Some(s) = stats {
        add_ns(&s.blocked_ns, blocked);
    }
}

async fn drive_source(
    pipeline: &Pipeline,
    mut source: Box<dyn Source>,
    tx: Sender<Item>,
    shared: &Shared,
    only: Option<&HashSet<String>>,
    shard: Option<crate::shard::Shard>,
) -> Option<String> {
    let stop = shared.control.stop.clone();
    let abort = shared.control.abort.clone();
    'inputs: loop {
        // Admission tickets first: nothing is made for an input before its
        // unit of the admission budget is free.
        let Some(tickets) = admission_tickets(pipeline, &stop).await else {
            break 'inputs;
        };
        // An item sent back by a byte budget comes before any new input.
        if let Some(item) = shared.take_requeued() {
            admit(item, tickets, &tx, shared, &abort).await;
            continue;
        }
        let next = loop {
            let next = tokio::select! {
                biased;
                _ = stop.cancelled() => break 'inputs,
                // A source's code: a panic ends admission, not the run.
                next = guarded_async(source.next()) => match next {
                    Ok(next) => next,
                    Err(message) => {
                        tracing::error!("the source panicked; no more inputs are read: {message}");
                        return Some(message);
                    }
                },
            };
            let id = match &next {
                None => None,
                Some(Ok(input)) => Some(input.id.as_str()),
                Some(Err(e)) => Some(e.id.as_str()),
            };
            let wanted = match id {
                None => true,
                Some(id) => {
                    only.is_none_or(|ids| ids.contains(id)) && shard.is_none_or(|s| s.takes(id))
                }
            };
            if wanted {
                break next;
            }
        };
        let seq = shared.ledger.total.fetch_add(1, Ordering::AcqRel);
        let input = match next {
            None => {
                shared.ledger.total.fetch_sub(1, Ordering::AcqRel);
                break;
            }
            Some(Err(SourceError { id, message })) => {
                shared.failed(&id, &id, "source", 0, StageError::permanent(message));
                continue;
            }
            Some(Ok(input)) => input,
        };
        let mut item = Item::new(input);
        item.seq = seq;
        if abort.is_cancelled() {
            shared.interrupted(item, "source", "before the item was admitted");
            break;
        }
        shared.events.emit(|| EventKind::Admitted {
            item: item.id.clone(),
        });
        admit(item, tickets, &tx, shared, &abort).await;
    }
    readmit_until_settled(pipeline, &tx, shared).await;
    None
}

/// One ticket of each of the source's limiters (the admission budget);
/// `None` once the run is stopped.
async fn admission_tickets(pipeline: &Pipeline, stop: &CancellationToken) -> Option<Vec<Ticket>> {
    let mut tickets = Vec::with_capacity(pipeline.source.limits.len());
    for limiter in &pipeline.source.limits {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return None,
            r = limiter.acquire(1, None) => match r {
                Ok(Some(t)) => tickets.push(t),
                Ok(None) => {}
                Err(_) => return None,
            },
        }
    }
    Some(tickets)
}

/// Hands an admitted item, with its admission tickets, to the first stage.
async fn admit(
    mut item: Item,
    tickets: Vec<Ticket>,
    tx: &Sender<Item>,
    shared: &Shared,
    abort: &CancellationToken,
) {
    for t in tickets {
        item.keep(t);
    }
    forward(tx, item, 0, shared, abort, "source", None).await;
}

/// After the last input (or a stop): admits again the items a byte budget
/// sends back, until every admitted item has ended (or the run is
/// aborted). Until then the first mailbox stays open.
async fn readmit_until_settled(pipeline: &Pipeline, tx: &Sender<Item>, shared: &Shared) {
    let abort = shared.control.abort.clone();
    // A stop ends admission of new inputs, not of items already admitted.
    let never_stop = CancellationToken::new();
    loop {
        let moved = shared.moved.notified();
        tokio::pin!(moved);
        moved.as_mut().enable();
        if let Some(item) = shared.take_requeued() {
            let tickets = tokio::select! {
                biased;
                _ = abort.cancelled() => None,
                t = admission_tickets(pipeline, &never_stop) => t,
            };
            match tickets {
                Some(tickets) if !abort.is_cancelled() => {
                    admit(item, tickets, tx, shared, &abort).await
                }
                _ => {
                    shared.interrupted(item, "source", "before the item was admitted again");
                    return;
                }
            }
            continue;
        }
        if shared.ledger.in_flight() == 0 {
            return;
        }
        tokio::select! {
            biased;
            _ = abort.cancelled() => return,
            _ = &mut moved => {}
        }
    }
}

/// Starts the stall watchdog: movement is any item admitted, ended or sent
/// back, or any call a stage finished.
fn watch_stalls(
    pipeline: &Pipeline,
    receivers: &[Receiver<Item>],
    shared: &Arc<Shared>,
) -> crate::stall::Watchdog {
    let moved = {
        let shared = Arc::clone(shared);
        move || {
            let l = &shared.ledger;
            let calls: u64 = shared
                .stats
                .iter()
                .map(|s| s.processed.load(Ordering::Relaxed))
                .sum();
            [&l.total, &l.done, &l.skipped, &l.failed, &l.requeued]
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<u64>()
                + calls
        }
    };
    let describe = {
        let shared = Arc::clone(shared);
        let names: Vec<String> = pipeline.stages.iter().map(|s| s.name.clone()).collect();
        let receivers = receivers.to_vec();
        let limiters: Vec<Limiter> = pipeline.limits.iter().cloned().collect();
        move || {
            let mut parts: Vec<String> = names
                .iter()
                .zip(&receivers)
                .zip(&shared.stats)
                .map(|((name, rx), s)| {
                    let working = s.working.load(Ordering::Relaxed);
                    format!("`{name}` {working} working, {} queued", rx.len())
                })
                .collect();
            for l in limiters.iter().filter(|l| l.kind() != LimiterKind::Rate) {
                let shown = |n: u64| match l.kind() {
                    LimiterKind::Bytes => bytesize::ByteSize(n).display().iec().to_string(),
                    _ => n.to_string(),
                };
                parts.push(format!(
                    "`{}` {} of {} in use, {} waiting",
                    l.name(),
                    shown(l.in_use()),
                    shown(l.capacity()),
                    l.waiters()
                ));
            }
            parts.join("; ")
        }
    };
    crate::stall::Watchdog::start(pipeline.stall_warning, moved, describe)
}

/// Samples the pipeline every so often (see [`RunOptions::sample`]).
struct Sampler {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Timeline>,
}

impl Sampler {
    fn start(
        pipeline: &Pipeline,
        receivers: &[Receiver<Item>],
        shared: &Arc<Shared>,
        every: Duration,
    ) -> Self {
        let stop = CancellationToken::new();
        let names: Vec<String> = pipeline.stages.iter().map(|s| s.name.clone()).collect();
        let limiters: Vec<crate::limit::Limiter> = pipeline.limits.iter().cloned().collect();
        let receivers = receivers.to_vec();
        let shared = Arc::clone(shared);
        let started = tokio::time::Instant::now();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut timeline = Timeline {
                    interval_s: every.as_secs_f64(),
                    stages: names.clone(),
                    limiters: limiters
                        .iter()
                        .filter(|l| l.kind() != LimiterKind::Rate)
                        .map(|l| (l.name().to_owned(), l.capacity()))
                        .collect(),
                    samples: Vec::new(),
                };
                let mut interval = every;
                loop {
                    let working: Vec<u64> = shared
                        .stats
                        .iter()
                        .map(|s| s.working.load(Ordering::Relaxed))
                        .collect();
                    let queued: Vec<u64> = receivers.iter().map(|r| r.len() as u64).collect();
                    for (i, name) in names.iter().enumerate() {
                        metrics::gauge!("warpline_stage_queue_depth", "stage" => name.clone())
                            .set(queued[i] as f64);
                        metrics::gauge!("warpline_stage_working", "stage" => name.clone())
                            .set(working[i] as f64);
                    }
                    for l in &limiters {
                        let name = l.name().to_owned();
                        metrics::gauge!("warpline_limiter_in_use", "limiter" => name.clone())
                            .set(l.in_use() as f64);
                        metrics::gauge!("warpline_limiter_waiters", "limiter" => name)
                            .set(l.waiters() as f64);
                    }
                    let in_use = limiters
                        .iter()
                        .filter(|l| l.kind() != LimiterKind::Rate)
                        .map(|l| l.in_use())
                        .collect();
                    timeline.push(
                        Sample {
                            t_s: started.elapsed().as_secs_f64(),
                            working,
                            queued,
                            in_use,
                        },
                        &mut interval,
                    );
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(interval) => {}
                    }
                }
                timeline
            })
        };
        Sampler { stop, task }
    }

    async fn finish(self) -> Timeline {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

pub(crate) async fn run(
    pipeline: &Pipeline,
    control: &RunControl,
    options: &RunOptions,
) -> Result<RunReport, RunError> {
    // tokio's clock, as the limiters use: paused time in tests stays coherent.
    let started = tokio::time::Instant::now();
    let failures_file = match &options.failures {
        None => None,
        Some(path) => Some(Mutex::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|error| RunError::Failures {
                path: path.clone(),
                error,
            })?,
        ))),
    };
    let opened =
        guarded(|| pipeline.source.open()).unwrap_or_else(|text| Err(format!("panicked: {text}")));
    let source = opened.map_err(|message| RunError::Source {
        kind: pipeline.source.kind.clone(),
        message,
    })?;
    tracing::info!(pipeline = %pipeline.name, stages = pipeline.stages.len(), "run starting");

    let shared = Arc::new(Shared {
        ledger: Ledger::default(),
        failures_file,
        stats: pipeline
            .stages
            .iter()
            .map(|_| StageStats::default())
            .collect(),
        control: control.clone(),
        on_error: pipeline.on_error,
        aborted_on_error: AtomicBool::new(false),
        aborted: Arc::new(AtomicBool::new(false)),
        events: Emitter::new(options.events.clone()),
        hosts: Mutex::new(HashMap::new()),
        requeued: Mutex::new(VecDeque::new()),
        moved: tokio::sync::Notify::new(),
    });
    shared.events.emit(|| EventKind::RunStarted {
        pipeline: pipeline.name.clone(),
        total: source.len_hint(),
    });
    let mailboxes: Vec<(Sender<Item>, Receiver<Item>)> = pipeline
        .stages
        .iter()
        .map(|s| async_channel::bounded(s.mailbox as usize))
        .collect();
    let (alive_tx, mut alive_rx) = tokio::sync::mpsc::channel::<()>(1);
    let runtime = tokio::runtime::Handle::current();

    // The deadline: once stopped, the run may drain this long. Then (or on
    // an abort) raise the flag that hot paths check.
    let watchdog = {
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
    };

    let skip_checks: Arc<[Handler]> = pipeline.stages.iter().map(|s| s.handler.clone()).collect();
    let mut spawn_error = None;
    'spawn: for (index, plan) in pipeline.stages.iter().enumerate() {
        for n in 0..plan.workers {
            let worker = Worker {
                index,
                plan: plan.clone(),
                skip_checks: (index == 0).then(|| Arc::clone(&skip_checks)),
                rx: mailboxes[index].1.clone(),
                tx: mailboxes.get(index + 1).map(|(tx, _)| tx.clone()),
                shared: Arc::clone(&shared),
                _alive: alive_tx.clone(),
            };
            if plan.handler.is_blocking() {
                let rt = runtime.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("{}-{n}", plan.name))
                    .spawn(move || rt.block_on(worker.run()));
                if let Err(error) = spawned {
                    spawn_error = Some(RunError::Spawn {
                        stage: plan.name.clone(),
                        error,
                    });
                    break 'spawn;
                }
            } else {
                tokio::spawn(worker.run());
            }
        }
    }
    drop(alive_tx);
    // Only workers hold senders now (and the source, the first): a mailbox
    // closes when everything upstream of it has finished.
    let first = mailboxes.first().map(|(tx, _)| tx.clone());
    let receivers: Vec<Receiver<Item>> = mailboxes.into_iter().map(|(_, rx)| rx).collect();
    let sampler = options
        .sample
        .map(|every| Sampler::start(pipeline, &receivers, &shared, every));
    let stall_watch = watch_stalls(pipeline, &receivers, &shared);

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
    // Every worker has finished when the last `_alive` sender is dropped.
    let _ = alive_rx.recv().await;
    watchdog.abort();

    if let Some(file) = &shared.failures_file {
        let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(e) = file.flush() {
            tracing::error!("cannot write the failures file: {e}");
        }
    }
    // After an abort, items may still sit in mailboxes: count them.
    for (rx, plan) in receivers.iter().zip(&pipeline.stages) {
        while let Ok(item) = rx.try_recv() {
            shared.interrupted(item, &plan.name, "while the item waited in the mailbox");
        }
    }
    while let Some(item) = shared.take_requeued() {
        shared.interrupted(item, "source", "before the item was admitted again");
    }
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

    let outcome = if shared.aborted_on_error.load(Ordering::Acquire) {
        RunOutcome::AbortedOnError
    } else if control.is_aborted() {
        RunOutcome::Aborted
    } else if control.is_stopped() {
        RunOutcome::Stopped
    } else {
        RunOutcome::Completed
    };
    let timeline = match sampler {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    let stalls = stall_watch.finish().await;
    let hosts = shared
        .hosts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut report = RunReport::build(
        pipeline,
        &shared.ledger,
        &shared.stats,
        outcome,
        started.elapsed(),
        timeline,
        &hosts,
    );
    if let Some(first) = stalls.first() {
        report.diagnosis = format!(
            "no item moved for {:.0} s at {:.0} s into the run (see `stalls`: {}); {}",
            first.quiet_s, first.at_s, first.state, report.diagnosis
        );
    }
    report.stalls = stalls;
    shared.events.emit(|| EventKind::RunFinished {
        outcome: serde_json::to_value(report.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
    });
    tracing::info!(
        pipeline = %pipeline.name,
        done = report.items.done,
        skipped = report.items.skipped,
        failed = report.items.failed,
        elapsed_s = report.elapsed_s,
        "run finished: {}", report.outcome
    );
    Ok(report)
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
    }
}
