//! What a run keeps count of: every item's end (the [`Ledger`]), each
//! stage's and each host's figures, and the state the workers and the
//! source share ([`Shared`]): ending, failing and sending back items.

use super::*;
use crate::report::Ended;

pub(super) fn add_ns(counter: &AtomicU64, since: Instant) {
    let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    counter.fetch_add(ns, Ordering::Relaxed);
}

pub(super) struct Shared {
    pub(super) ledger: Ledger,
    /// Failure records, one JSON line each.
    pub(super) failures_file: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
    pub(super) stats: Vec<StageStats>,
    /// The stages' names, in the order of `stats`.
    pub(super) names: Vec<String>,
    pub(super) control: RunControl,
    pub(super) on_error: OnError,
    pub(super) aborted_on_error: AtomicBool,
    /// Set once the abort token is cancelled: a cheap check for hot paths.
    pub(super) aborted: Arc<AtomicBool>,
    pub(super) events: Emitter,
    pub(super) hosts: Mutex<HashMap<String, HostStats>>,
    /// Items a byte budget sent back to the start of the flow, for the
    /// source loop to admit again before any new input.
    pub(super) requeued: Mutex<VecDeque<Item>>,
    /// Told whenever an item ends or is sent back.
    pub(super) moved: tokio::sync::Notify,
    /// The `pipeline` label of the run's metrics.
    pub(super) label: String,
}

impl Shared {
    pub(super) fn bytes(&self, item: &Item) {
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

    /// Counts an item that ended `outcome` (in `count`, with its bytes and
    /// its footprint) and tells those waiting for items to end.
    fn ended(&self, item: &Item, count: &AtomicU64, outcome: Ended) {
        self.bytes(item);
        self.ledger.place(&item.id, outcome, item.footprint);
        let outcome = outcome.as_str();
        count.fetch_add(1, Ordering::AcqRel);
        self.moved.notify_waiters();
        metrics::counter!("warpline_items_total", "pipeline" => self.label.clone(), "outcome" => outcome)
            .increment(1);
    }

    pub(super) fn done(&self, item: &Item) {
        self.ended(item, &self.ledger.done, Ended::Done);
        self.events.emit(|| EventKind::Done {
            item: item.id.clone(),
        });
    }

    pub(super) fn skipped(&self, item: &Item, stage: &str, reason: &str) {
        tracing::debug!(item = %item.id, stage, reason, "skipped");
        self.ended(item, &self.ledger.skipped, Ended::Skipped);
        self.events.emit(|| EventKind::Skipped {
            item: item.id.clone(),
            stage: stage.to_owned(),
            reason: reason.to_owned(),
        });
    }

    /// Counts `item` failed at `stage`: [`Shared::failed`] with the
    /// item's footprint kept for the report's map.
    pub(super) fn fail(&self, item: &Item, stage: &str, error: StageError) {
        self.ledger.place(&item.id, Ended::Failed, item.footprint);
        self.failed(&item.id, &item.source, stage, item.attempts, error);
    }

    pub(super) fn failed(
        &self,
        id: &str,
        source: &str,
        stage: &str,
        attempts: u32,
        error: StageError,
    ) {
        let source = redact(source);
        // The message may quote the source, or a URL it led to.
        let mut error = error;
        error.message = redact_text(&error.message);
        let stops_run = error.stops_run.then(|| error.message.clone());
        metrics::counter!("warpline_items_total", "pipeline" => self.label.clone(), "outcome" => "failed")
            .increment(1);
        self.events.emit(|| EventKind::Failed {
            item: id.to_owned(),
            stage: stage.to_owned(),
            kind: error.kind,
            message: error.message.clone(),
        });
        // Inside a worker, the `item` span names the item and the stage:
        // the line says them once.
        let in_item_span = tracing::Span::current()
            .metadata()
            .is_some_and(|m| m.name() == "item");
        match (error.kind == ErrorKind::Interrupted, in_item_span) {
            (true, true) => tracing::debug!("interrupted: {}", error.message),
            (true, false) => tracing::debug!(item = %id, stage, "interrupted: {}", error.message),
            (false, true) => {
                tracing::warn!(source, kind = %error.kind, "failed: {}", error.message)
            }
            (false, false) => tracing::warn!(
                item = %id, source, stage, kind = %error.kind, "failed: {}", error.message
            ),
        }
        self.ledger.failed.fetch_add(1, Ordering::AcqRel);
        let at = self.names.iter().position(|n| n == stage);
        if let Some(s) = at.and_then(|i| self.stats.get(i)) {
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
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
            self.write_failure(&record);
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

    /// Appends a failure record to `--failures FILE`, if asked for.
    fn write_failure(&self, record: &Failure) {
        let Some(file) = &self.failures_file else {
            return;
        };
        let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let written = serde_json::to_writer(&mut *file, record)
            .map_err(std::io::Error::from)
            .and_then(|_| file.write_all(b"\n"))
            .and_then(|_| file.flush());
        if let Err(e) = written {
            tracing::error!("cannot write a failure record: {e}");
        }
    }

    /// Sends `item` back to the start of the flow, holding nothing: the
    /// byte budget `limiter` needed its bytes for an item deeper in the flow
    /// (see [`limit`](crate::limit)'s budget: this is what keeps it from
    /// deadlocking).
    pub(super) fn requeue(&self, mut item: Item, stage: &str, limiter: &Limiter) {
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

    /// Says that back-pressure from `host` lowered its adaptive limits.
    pub(super) fn host_limits_lowered(&self, host: &str, limits: &crate::adapt::HostLimits) {
        let reason = limits.last_decrease.clone().unwrap_or_default();
        tracing::info!(
            host, concurrency = limits.concurrency, rate_per_s = ?limits.rate_per_s,
            "the host pushed back ({reason}): its adaptive limits were lowered"
        );
        let labels = [("pipeline", self.label.clone()), ("host", host.to_owned())];
        metrics::gauge!("warpline_host_concurrency_limit", &labels).set(limits.concurrency);
        if let Some(rate) = limits.rate_per_s {
            metrics::gauge!("warpline_host_rate_limit", &labels).set(rate);
        }
        self.events.emit(|| EventKind::HostLimits {
            host: host.to_owned(),
            concurrency: limits.concurrency,
            rate_per_s: limits.rate_per_s,
            reason,
        });
    }

    pub(super) fn take_requeued(&self) -> Option<Item> {
        self.requeued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    pub(super) fn interrupted(&self, item: Item, stage: &str, when: &str) {
        self.fail(
            &item,
            stage,
            StageError::new(ErrorKind::Interrupted, format!("run aborted {when}")),
        );
    }
}
