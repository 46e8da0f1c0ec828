//! A pipeline running in the background on the caller's tokio runtime:
//! [`Pipeline::spawn`] returns a [`RunHandle`] to watch it ([`progress`],
//! [`events`] as a `Stream`), stop or abort it, and await its report.
//!
//! [`progress`]: RunWatch::progress
//! [`events`]: RunWatch::events

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use serde::Serialize;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::live::{Probe, Snapshot};
use crate::observe::{Event, EventKind, EventSink};
use crate::pipeline::Pipeline;
use crate::report::RunReport;
use crate::run::{RunControl, RunError, RunOptions};

/// How many events a slow subscriber may fall behind before it misses some.
pub const EVENT_BUFFER: usize = 4096;

/// Where a run stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Inputs in all, when the source knows.
    pub total: Option<u64>,
    /// Items admitted so far.
    pub admitted: u64,
    /// Items done.
    pub done: u64,
    /// Items skipped.
    pub skipped: u64,
    /// Items failed.
    pub failed: u64,
    /// Whether the run has ended.
    pub finished: bool,
    /// Once the run has ended: inputs of `total` that were never admitted
    /// (the report's `items.not_admitted`), so `admitted + not_admitted ==
    /// total` when the source knows its length.
    pub not_admitted: Option<u64>,
}

#[derive(Debug, Default)]
struct Counts {
    total: AtomicU64,
    known_total: AtomicBool,
    admitted: AtomicU64,
    done: AtomicU64,
    skipped: AtomicU64,
    failed: AtomicU64,
    finished: AtomicBool,
    /// `not_admitted + 1`, 0 for none.
    not_admitted: AtomicU64,
    /// Per stage of the flow, in order: items in its workers.
    working: Vec<(String, AtomicU64)>,
    /// When the run started and ended (tokio's clock), for the rate.
    span: std::sync::Mutex<(Option<tokio::time::Instant>, Option<tokio::time::Instant>)>,
}

/// One stage's items in its workers right now (see [`RunWatch::stages`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageProgress {
    /// The stage's name.
    pub name: String,
    /// Items in its workers: from `stage_started` to `stage_finished`.
    pub working: u64,
}

impl Counts {
    fn working(&self, stage: &str) -> Option<&AtomicU64> {
        self.working
            .iter()
            .find(|(name, _)| name == stage)
            .map(|(_, n)| n)
    }

    fn span(
        &self,
    ) -> std::sync::MutexGuard<'_, (Option<tokio::time::Instant>, Option<tokio::time::Instant>)>
    {
        self.span.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counts for [`RunHandle::progress`], and the broadcast behind
/// [`RunHandle::events`], plus the caller's own sink.
struct HandleSink {
    counts: Arc<Counts>,
    events: broadcast::Sender<Event>,
    user: Option<Arc<dyn EventSink>>,
}

impl EventSink for HandleSink {
    fn event(&self, event: &Event) {
        let c = &self.counts;
        match &event.kind {
            EventKind::RunStarted { total, .. } => {
                if let Some(t) = total {
                    c.total.store(*t, Ordering::Relaxed);
                    c.known_total.store(true, Ordering::Relaxed);
                }
                c.span().0 = Some(tokio::time::Instant::now());
            }
            EventKind::StageStarted { stage, .. } => {
                if let Some(n) = c.working(stage) {
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
            EventKind::StageFinished { stage, .. } => {
                if let Some(n) = c.working(stage) {
                    // Never below 0, whatever the order events come in.
                    let _ = n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                        Some(v.saturating_sub(1))
                    });
                }
            }
            EventKind::Admitted { .. } => {
                c.admitted.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::Done { .. } => {
                c.done.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::Skipped { .. } => {
                c.skipped.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::Failed { .. } => {
                c.failed.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::RunFinished { not_admitted, .. } => {
                if let Some(n) = not_admitted {
                    c.not_admitted.store(n.saturating_add(1), Ordering::Relaxed);
                }
                // An aborted try may never say it finished.
                for (_, n) in &c.working {
                    n.store(0, Ordering::Relaxed);
                }
                c.span().1 = Some(tokio::time::Instant::now());
                c.finished.store(true, Ordering::Release);
            }
            _ => {}
        }
        // No subscriber is not an error.
        let _ = self.events.send(event.clone());
        if let Some(user) = &self.user {
            user.event(event);
        }
    }
}

/// A pipeline running in the background. Dropping the handle does not stop
/// the run; [`abort`](RunWatch::abort) does.
#[derive(Debug)]
pub struct RunHandle {
    watch: RunWatch,
    task: tokio::task::JoinHandle<Result<RunReport, RunError>>,
}

/// What a [`RunHandle`] offers besides the report, cheap to clone: for a
/// service that keeps watching (and may abort) a run while another task
/// awaits its report.
#[derive(Debug, Clone)]
pub struct RunWatch {
    control: RunControl,
    counts: Arc<Counts>,
    events: broadcast::Sender<Event>,
    probe: Probe,
}

impl Pipeline {
    /// Starts the pipeline on the current tokio runtime (multi-threaded or
    /// not; no second runtime, no global actor system) and returns at once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use futures::StreamExt;
    /// use warpline_engine::{Pipeline, Registry, RunOptions};
    ///
    /// let pipeline = Pipeline::from_toml_str(r#"
    ///     [pipeline]
    ///     flow = ["work"]
    ///     [source]
    ///     kind = "generate"
    ///     count = 5
    ///     [stages.work]
    ///     kind = "hold"
    ///     duration = "1ms"
    /// "#, &Registry::with_builtins()).unwrap();
    /// let handle = pipeline.spawn(RunOptions::default());
    /// let events = handle.events(); // subscribe before the run gets far
    /// let report = handle.report().await.unwrap();
    /// assert_eq!(report.items.done, 5);
    /// let seen: Vec<_> = events.collect().await;
    /// assert!(seen.len() >= 5);
    /// # }
    /// ```
    pub fn spawn(self, options: RunOptions) -> RunHandle {
        let control = RunControl::new();
        let counts = Arc::new(Counts {
            working: self
                .stages()
                .iter()
                .map(|s| (s.name.clone(), AtomicU64::new(0)))
                .collect(),
            ..Counts::default()
        });
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let sink = HandleSink {
            counts: Arc::clone(&counts),
            events: events.clone(),
            user: options.events.clone(),
        };
        let probe = options.probe.clone().unwrap_or_default();
        let options = RunOptions {
            events: Some(Arc::new(sink)),
            probe: Some(probe.clone()),
            ..options
        };
        let run_control = control.clone();
        let task = tokio::spawn(async move { self.run_with_options(&run_control, &options).await });
        RunHandle {
            watch: RunWatch {
                control,
                counts,
                events,
                probe,
            },
            task,
        }
    }
}

/// What a handle offers besides the report is its [`RunWatch`]'s, named
/// here rather than reached through `Deref` (which is for smart pointers).
impl RunHandle {
    /// A clonable view of the run: progress, events, stop and abort.
    pub fn watch(&self) -> RunWatch {
        self.watch.clone()
    }

    /// See [`RunWatch::stop`].
    pub fn stop(&self) {
        self.watch.stop();
    }

    /// See [`RunWatch::abort`].
    pub fn abort(&self) {
        self.watch.abort();
    }

    /// See [`RunWatch::cancellation_token`].
    pub fn cancellation_token(&self) -> CancellationToken {
        self.watch.cancellation_token()
    }

    /// See [`RunWatch::progress`].
    pub fn progress(&self) -> Progress {
        self.watch.progress()
    }

    /// See [`RunWatch::stages`].
    pub fn stages(&self) -> Vec<StageProgress> {
        self.watch.stages()
    }

    /// See [`RunWatch::rate_per_s`].
    pub fn rate_per_s(&self) -> f64 {
        self.watch.rate_per_s()
    }

    /// See [`RunWatch::events`]: subscribe before the run gets far.
    pub fn events(&self) -> BoxStream<'static, Event> {
        self.watch.events()
    }

    /// Whether the run has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits for the run to end and returns its report.
    pub async fn report(self) -> Result<RunReport, RunError> {
        let RunHandle { watch, task } = self;
        // The event stream ends once the run's sink (the last sender) goes.
        drop(watch);
        task.await.map_err(|e| RunError::Panicked(e.to_string()))?
    }
}

impl RunWatch {
    /// Stops admitting inputs; items in flight finish (until the pipeline's
    /// shutdown deadline).
    pub fn stop(&self) {
        self.control.stop();
    }

    /// Aborts the run: every wait is cancelled, every permit given back, and
    /// what did not finish is counted failed as `interrupted`. The same act
    /// as [`RunControl::abort`](crate::RunControl::abort) and as cancelling
    /// the [`cancellation_token`](Self::cancellation_token).
    pub fn abort(&self) {
        self.control.abort();
    }

    /// A token whose cancellation aborts the run (to tie the run to a
    /// request's or a service's own cancellation).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.control.cancellation_token()
    }

    /// Counts so far (exact, unlike a lagging event subscriber).
    pub fn progress(&self) -> Progress {
        let c = &self.counts;
        Progress {
            total: c
                .known_total
                .load(Ordering::Relaxed)
                .then(|| c.total.load(Ordering::Relaxed)),
            admitted: c.admitted.load(Ordering::Relaxed),
            done: c.done.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            finished: c.finished.load(Ordering::Acquire),
            not_admitted: c.not_admitted.load(Ordering::Relaxed).checked_sub(1),
        }
    }

    /// Per stage of the flow, in order: the items in its workers now (0 for
    /// every stage once the run has ended).
    pub fn stages(&self) -> Vec<StageProgress> {
        self.counts
            .working
            .iter()
            .map(|(name, n)| StageProgress {
                name: name.clone(),
                working: n.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Where every stage (items queued and in its workers, passed on and
    /// failed) and every count or byte limiter stand now; `None` before
    /// the run started and after it ended.
    pub fn snapshot(&self) -> Option<Snapshot> {
        self.probe.snapshot()
    }

    /// Items ended (done, skipped or failed) per second since the run
    /// started, up to now or to its end; 0 before it started.
    pub fn rate_per_s(&self) -> f64 {
        let (started, ended) = *self.counts.span();
        let Some(started) = started else {
            return 0.0;
        };
        let secs = ended
            .unwrap_or_else(tokio::time::Instant::now)
            .saturating_duration_since(started)
            .as_secs_f64();
        let p = self.progress();
        let ended_items = p.done + p.skipped + p.failed;
        if secs > 0.0 {
            ended_items as f64 / secs
        } else {
            0.0
        }
    }

    /// The run's events from now on, as a `Stream` that ends with the run.
    /// A subscriber that falls more than [`EVENT_BUFFER`] events behind
    /// misses the oldest ones, and is told so by an
    /// [`EventKind::Missed`] with their number where they would have been
    /// (the progress counts and the report stay exact).
    pub fn events(&self) -> BoxStream<'static, Event> {
        let state = Subscription {
            rx: self.events.subscribe(),
            ended: self.counts.finished.load(Ordering::Acquire),
            next: None,
            last: (0, 0.0),
        };
        // Ends after `run_finished` (or at once if the run has ended).
        Box::pin(futures::stream::unfold(state, |mut s| async move {
            if let Some(e) = s.next.take() {
                return Some(s.hand_out(e));
            }
            if s.ended {
                return None;
            }
            let mut missed = 0u64;
            loop {
                match s.rx.recv().await {
                    Ok(e) if missed == 0 => return Some(s.hand_out(e)),
                    // Said where the missing events were, stamped with
                    // the time of the one that follows them.
                    Ok(e) => {
                        let (at_ms, t_s) = (e.at_ms, e.t_s);
                        s.next = Some(e);
                        return Some((missed_event(missed, at_ms, t_s), s));
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => missed += n,
                    Err(broadcast::error::RecvError::Closed) if missed > 0 => {
                        s.ended = true;
                        let (at_ms, t_s) = s.last;
                        return Some((missed_event(missed, at_ms, t_s), s));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }))
    }
}

/// One subscriber's place in the run's events.
struct Subscription {
    rx: broadcast::Receiver<Event>,
    /// The run has finished (or `run_finished` was handed out).
    ended: bool,
    /// An event received, to hand out after the `missed` one before it.
    next: Option<Event>,
    /// The time of the last event handed out.
    last: (u64, f64),
}

impl Subscription {
    fn hand_out(mut self, e: Event) -> (Event, Self) {
        self.ended |= matches!(e.kind, EventKind::RunFinished { .. });
        self.last = (e.at_ms, e.t_s);
        (e, self)
    }
}

fn missed_event(count: u64, at_ms: u64, t_s: f64) -> Event {
    Event {
        at_ms,
        t_s,
        kind: EventKind::Missed { count },
    }
}
