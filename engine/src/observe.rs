//! Watching a run: [`Event`]s for each item's progress (to a file with
//! `--events`, to a progress bar, to an embedding service), and the
//! [`Timeline`] of items in flight per stage and limiter use over time
//! (for `--report-html` and metrics).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::item::ErrorKind;
use std::fmt;

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// Every input was admitted and ended.
    Completed,
    /// Stopped (Ctrl-C, SIGTERM, or [`RunControl::stop`](crate::RunControl::stop))
    /// and drained within the deadline: every admitted item ended.
    Stopped,
    /// Aborted (a second Ctrl-C, the shutdown deadline, or
    /// [`RunControl::abort`](crate::RunControl::abort)): items in flight were
    /// counted failed as `interrupted`.
    Aborted,
    /// Aborted because an item failed and `on_error = "abort"`.
    AbortedOnError,
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunOutcome::Completed => "completed",
            RunOutcome::Stopped => "stopped",
            RunOutcome::Aborted => "aborted",
            RunOutcome::AbortedOnError => "aborted on error",
        })
    }
}

/// How one try of a stage ended ([`EventKind::StageFinished`]); in JSON,
/// `"ok"`, `"skip"`, or the error kind (`"transient"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryOutcome {
    /// The item goes on to the next stage.
    Ok,
    /// The stage skipped the item.
    Skip,
    /// The try failed with this kind of error.
    Failed(ErrorKind),
}

impl Serialize for TryOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TryOutcome::Ok => s.serialize_str("ok"),
            TryOutcome::Skip => s.serialize_str("skip"),
            TryOutcome::Failed(kind) => kind.serialize(s),
        }
    }
}

impl std::fmt::Display for TryOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TryOutcome::Ok => f.write_str("ok"),
            TryOutcome::Skip => f.write_str("skip"),
            TryOutcome::Failed(kind) => kind.fmt(f),
        }
    }
}

/// Something that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Seconds since the run started.
    pub t_s: f64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// The run started; `total` is the number of inputs when the source
    /// knows it.
    RunStarted {
        /// The pipeline's name.
        pipeline: String,
        /// Inputs, if known.
        total: Option<u64>,
    },
    /// The source made an item and it entered the pipeline.
    Admitted {
        /// The item's id.
        item: String,
    },
    /// A stage took the item, after waiting for its limiters.
    StageStarted {
        /// The item's id.
        item: String,
        /// The stage.
        stage: String,
        /// The try, from 1.
        attempt: u32,
        /// Seconds spent waiting for each limiter, by name.
        waits: Vec<(String, f64)>,
    },
    /// A stage finished its work on the item (whatever the outcome).
    StageFinished {
        /// The item's id.
        item: String,
        /// The stage.
        stage: String,
        /// Seconds in the stage's code.
        busy_s: f64,
        /// How the try ended: `ok`, `skip`, or the error kind.
        outcome: TryOutcome,
    },
    /// The item passed every stage.
    Done {
        /// The item's id.
        item: String,
    },
    /// The item was skipped.
    Skipped {
        /// The item's id.
        item: String,
        /// The stage that skipped it.
        stage: String,
        /// Why.
        reason: String,
    },
    /// The item failed.
    Failed {
        /// The item's id.
        item: String,
        /// The stage that failed it.
        stage: String,
        /// The error kind.
        kind: ErrorKind,
        /// The message.
        message: String,
    },
    /// A byte budget needed the room the item held for an item deeper in
    /// the flow: the item gave back everything it held and goes to the start
    /// of the flow again (it will be fetched again). This is what keeps a
    /// byte budget from deadlocking; frequent ones say the budget is small
    /// for the inputs.
    Requeued {
        /// The item's id.
        item: String,
        /// The stage it was in (or waited for).
        stage: String,
        /// The byte budget.
        limiter: String,
    },
    /// Back-pressure from a host (a 429 or 503, or a slow answer) lowered
    /// its adaptive limits.
    HostLimits {
        /// The host (`scheme://name:port`).
        host: String,
        /// The concurrency limit now.
        concurrency: f64,
        /// The learnt rate now, requests per second.
        rate_per_s: Option<f64>,
        /// `429`, `refused` (a 503 or a 429 without `Retry-After`), or
        /// `latency`.
        reason: String,
    },
    /// Only in [`RunHandle::events`](crate::RunWatch::events): this
    /// subscriber fell more than
    /// [`EVENT_BUFFER`](crate::handle::EVENT_BUFFER) events behind and
    /// `count` events were dropped for it just before this one. The
    /// progress counts and the report stay exact.
    Missed {
        /// How many events this subscriber did not receive.
        count: u64,
    },
    /// The run ended.
    RunFinished {
        /// `completed`, `stopped`, `aborted` or `aborted_on_error`.
        outcome: RunOutcome,
        /// Inputs admitted (the report's `items.total`).
        admitted: u64,
        /// Inputs the source holds that were never admitted (the report's
        /// `items.not_admitted`): `None` when the source's length is not
        /// known, or the run takes a shard or a list of ids.
        not_admitted: Option<u64>,
    },
}

/// Receives a run's events, on whichever thread produced them: keep it
/// quick (buffer, count, or forward to a channel).
pub trait EventSink: Send + Sync + 'static {
    /// One event.
    fn event(&self, event: &Event);
}

impl<F: Fn(&Event) + Send + Sync + 'static> EventSink for F {
    fn event(&self, event: &Event) {
        self(event)
    }
}

/// The sink and the clock of a run.
#[derive(Clone)]
pub(crate) struct Emitter {
    sink: Option<Arc<dyn EventSink>>,
    started: std::time::Instant,
    /// The sink has panicked at least once (said once, in the log).
    sink_panicked: Arc<std::sync::atomic::AtomicBool>,
}

impl Emitter {
    pub(crate) fn new(sink: Option<Arc<dyn EventSink>>) -> Self {
        Emitter {
            sink,
            started: std::time::Instant::now(),
            sink_panicked: Arc::default(),
        }
    }

    pub(crate) fn on(&self) -> bool {
        self.sink.is_some()
    }

    /// Emits the event `make` builds, if anyone listens.
    pub(crate) fn emit(&self, make: impl FnOnce() -> EventKind) {
        if let Some(sink) = &self.sink {
            let at_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0);
            let event = Event {
                at_ms,
                t_s: self.started.elapsed().as_secs_f64(),
                kind: make(),
            };
            // The sink is the embedder's code, called on a worker: its
            // panic must not take the worker (and the item) with it.
            if crate::guard::guarded(|| sink.event(&event)).is_err()
                && !self
                    .sink_panicked
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::error!(
                    "the run's event sink panicked; the run goes on and the sink is still called \
                     (said once)"
                );
            }
        }
    }
}

/// Samples over time: items in flight per stage (working or queued), and
/// what each count or bytes limiter holds, as the peak of each interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timeline {
    /// Seconds between samples (it doubles as a long run goes on, so a
    /// timeline stays under about 1,000 samples).
    pub interval_s: f64,
    /// Stage names, in flow order.
    pub stages: Vec<String>,
    /// Limiter names, with their capacity.
    pub limiters: Vec<(String, u64)>,
    /// The samples.
    pub samples: Vec<Sample>,
}

/// One interval of a [`Timeline`], ending at `t_s`: each figure is the
/// most seen during the interval, so a burst shorter than an interval
/// still shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Per stage: the most items in its workers.
    pub working: Vec<u64>,
    /// Per stage: the most items in its mailbox.
    pub queued: Vec<u64>,
    /// Per limiter: the most slots or bytes held.
    pub in_use: Vec<u64>,
}

impl Sample {
    /// One sample for two consecutive intervals: the later time, the
    /// larger figures.
    fn merge(&self, later: &Sample) -> Sample {
        let max = |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(x, y)| *x.max(y)).collect();
        Sample {
            t_s: later.t_s,
            working: max(&self.working, &later.working),
            queued: max(&self.queued, &later.queued),
            in_use: max(&self.in_use, &later.in_use),
        }
    }
}

/// The most samples a timeline keeps before it halves its resolution.
pub(crate) const MAX_SAMPLES: usize = 1000;

impl Timeline {
    pub(crate) fn push(&mut self, sample: Sample, interval: &mut Duration) {
        self.samples.push(sample);
        if self.samples.len() >= MAX_SAMPLES {
            // Pairs merged, keeping their peaks (an odd last one alone).
            let kept: Vec<Sample> = self
                .samples
                .chunks(2)
                .filter_map(|pair| pair.iter().cloned().reduce(|a, b| a.merge(&b)))
                .collect();
            self.samples = kept;
            *interval *= 2;
        }
        self.interval_s = interval.as_secs_f64();
    }
}

/// The metrics a run sets, with their help texts, for a Prometheus
/// exporter's `# HELP` lines. Every one carries the label `pipeline` (the
/// run's [`RunOptions::metrics_label`](crate::RunOptions::metrics_label),
/// by default the pipeline's name). Said to the installed recorder at the
/// start of every run (saying it again is harmless).
pub const METRICS: &[(&str, MetricKind, &str)] = &[
    (
        "warpline_items_total",
        MetricKind::Counter,
        "Items ended, by outcome (done, skipped, failed).",
    ),
    (
        "warpline_stage_queue_depth",
        MetricKind::Gauge,
        "Items waiting in the stage's mailbox.",
    ),
    (
        "warpline_stage_working",
        MetricKind::Gauge,
        "Items in the stage's workers.",
    ),
    (
        "warpline_limiter_in_use",
        MetricKind::Gauge,
        "Slots of a count limiter held.",
    ),
    (
        "warpline_limiter_capacity",
        MetricKind::Gauge,
        "Slots of a count limiter in all.",
    ),
    (
        "warpline_limiter_in_use_bytes",
        MetricKind::Gauge,
        "Bytes of a byte budget held.",
    ),
    (
        "warpline_limiter_capacity_bytes",
        MetricKind::Gauge,
        "Bytes of a byte budget in all.",
    ),
    (
        "warpline_limiter_waiters",
        MetricKind::Gauge,
        "Items waiting for the limiter.",
    ),
    (
        "warpline_host_concurrency_limit",
        MetricKind::Gauge,
        "A host's adaptive concurrency limit, set when back-pressure lowers it.",
    ),
    (
        "warpline_host_rate_limit",
        MetricKind::Gauge,
        "A host's learnt rate in requests per second, set when back-pressure lowers it.",
    ),
];

/// Whether a metric counts up or goes up and down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Gives the installed `metrics` recorder the help text of every metric in
/// [`METRICS`].
pub fn describe_metrics() {
    for (name, kind, help) in METRICS {
        match kind {
            MetricKind::Counter => metrics::describe_counter!(*name, *help),
            MetricKind::Gauge => metrics::describe_gauge!(*name, *help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_outcomes_keep_their_json_strings() {
        let json = |k: &EventKind| serde_json::to_value(k).unwrap();
        let finished = EventKind::StageFinished {
            item: "a".into(),
            stage: "s".into(),
            busy_s: 0.0,
            outcome: TryOutcome::Failed(ErrorKind::Transient),
        };
        assert_eq!(json(&finished)["outcome"], "transient");
        for (outcome, text) in [(TryOutcome::Ok, "ok"), (TryOutcome::Skip, "skip")] {
            assert_eq!(serde_json::to_value(outcome).unwrap(), text);
            assert_eq!(outcome.to_string(), text);
        }
        let ended = EventKind::RunFinished {
            outcome: RunOutcome::AbortedOnError,
            admitted: 3,
            not_admitted: Some(7),
        };
        let v = json(&ended);
        assert_eq!(v["event"], "run_finished");
        assert_eq!(v["outcome"], "aborted_on_error");
        assert_eq!(v["not_admitted"], 7);
    }
}
