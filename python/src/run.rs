//! A run in the background: `NativeRun` (the Python `RunHandle` wraps it)
//! starts a compiled pipeline on the module's runtime and offers what the
//! engine's `RunWatch` offers (progress, stop, abort), its events as a
//! stream read from Python (`EventStream`), and its report when it ends.
//! Every wait releases the GIL and, when it is on Python's side, looks for
//! signals (Ctrl-C) every tenth of a second.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::sync::{broadcast, watch};
use warpline::{Event, EventKind, EventSink, Pipeline, RunOptions, RunReport, RunWatch};

use crate::runtime::{bridge, runtime};

/// How long a wait on Python's side blocks before it looks for signals.
const SLICE: Duration = Duration::from_millis(100);

/// How many events a slow reader may fall behind before it misses some
/// (told by a `missed` event), as the engine's own subscribers.
const EVENT_BUFFER: usize = warpline::engine::handle::EVENT_BUFFER;

/// The run's end: its report (as JSON and as text) or why it failed.
type Ended = Result<(String, String), String>;

/// A pipeline running on the module's runtime.
#[pyclass(module = "warpline._warpline", name = "NativeRun", frozen)]
pub(crate) struct NativeRun {
    watch: RunWatch,
    ended: watch::Receiver<bool>,
    result: Arc<Mutex<Option<Ended>>>,
    events: broadcast::Sender<Event>,
    /// Subscribed before the run started, for the first `events()`.
    first: Mutex<Option<broadcast::Receiver<Event>>>,
}

/// Forwards the run's events to the broadcast Python subscribes to.
struct Forward(broadcast::Sender<Event>);

impl EventSink for Forward {
    fn event(&self, event: &Event) {
        // No subscriber is not an error.
        let _ = self.0.send(event.clone());
    }
}

impl NativeRun {
    /// Starts `pipeline`; `keep` lives until the run ends (the demo's
    /// tile server).
    pub(crate) fn start<K: Send + 'static>(pipeline: Pipeline, keep: K) -> PyResult<Self> {
        let rt = runtime()?;
        let (events, first) = broadcast::channel(EVENT_BUFFER);
        let options = RunOptions {
            events: Some(Arc::new(Forward(events.clone()))),
            ..RunOptions::default()
        };
        let handle = {
            let _entered = rt.enter();
            pipeline.spawn(options)
        };
        let watch = handle.watch();
        let (done, ended) = watch::channel(false);
        let result = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&result);
        rt.spawn(async move {
            let ended: Ended = match handle.report().await {
                Ok(report) => Ok(texts(&report)),
                Err(e) => Err(e.to_string()),
            };
            drop(keep);
            *lock(&slot) = Some(ended);
            let _ = done.send(true);
        });
        Ok(NativeRun {
            watch,
            ended,
            result,
            events,
            first: Mutex::new(Some(first)),
        })
    }

    fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }
}

/// The report as the binary writes it (`--report`: pretty JSON) and prints
/// it.
fn texts(report: &RunReport) -> (String, String) {
    let json = serde_json::to_string_pretty(report).unwrap_or_else(|e| {
        // A report is plain data: serde_json fails only on a map with
        // non-string keys, which it has none of.
        format!("{{\"error\": \"cannot serialise the report: {e}\"}}")
    });
    (json, report.to_string())
}

/// A poisoned lock still holds a whole value here (each is written once).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on the runtime for `fut`, up to `slice`, with the GIL released;
/// `None` when the time ran out.
fn block_for<F>(py: Python<'_>, slice: Duration, fut: F) -> PyResult<Option<F::Output>>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "cannot wait for a run on the engine's own threads (from inside a stage)",
        ));
    }
    let rt = runtime()?;
    Ok(py.detach(|| rt.block_on(async { tokio::time::timeout(slice, fut).await.ok() })))
}

#[pymethods]
impl NativeRun {
    /// Waits until the run ends or `timeout` seconds pass (forever when
    /// `None`); whether it ended. Raises `KeyboardInterrupt` (and any
    /// signal handler's exception) as soon as one comes.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let deadline = timeout.map(|t| std::time::Instant::now() + secs(t));
        loop {
            if self.is_ended() {
                return Ok(true);
            }
            let slice = match deadline {
                Some(d) => d
                    .saturating_duration_since(std::time::Instant::now())
                    .min(SLICE),
                None => SLICE,
            };
            let mut ended = self.ended.clone();
            block_for(
                py,
                slice,
                async move { ended.wait_for(|d| *d).await.is_ok() },
            )?;
            py.check_signals()?;
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Ok(self.is_ended());
            }
        }
    }

    /// An asyncio future of `event_loop` that resolves to `True` when the
    /// run ends; the loop is never blocked.
    fn wait_async(&self, event_loop: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let mut ended = self.ended.clone();
        bridge(event_loop, async move {
            ended.wait_for(|d| *d).await.map_err(|e| e.to_string())?;
            Ok(true)
        })
    }

    /// Whether the run has ended.
    fn is_finished(&self) -> bool {
        self.is_ended()
    }

    /// Counts so far, and items ended per second, as JSON.
    fn progress(&self) -> String {
        let p = self.watch.progress();
        let mut v = serde_json::to_value(p).unwrap_or_default();
        v["rate_per_s"] = serde_json::Value::from(self.watch.rate_per_s());
        v.to_string()
    }

    /// Stops admitting inputs; items in flight finish (until the
    /// pipeline's shutdown deadline).
    fn stop(&self) {
        self.watch.stop();
    }

    /// Aborts: waits are cancelled, items in flight fail as interrupted.
    fn abort(&self) {
        self.watch.abort();
    }

    /// The report as JSON and as text, once the run has ended (`None`
    /// before); raises `RunError` when the run could not start or finish.
    fn report(&self, py: Python<'_>) -> PyResult<Option<(String, String)>> {
        match lock(&self.result).as_ref() {
            None => Ok(None),
            Some(Ok(texts)) => Ok(Some(texts.clone())),
            Some(Err(message)) => Err(crate::load::run_error(py, message.clone())),
        }
    }

    /// The run's events from now on (from its start for the first call).
    fn events(&self) -> EventStream {
        let rx = lock(&self.first)
            .take()
            .unwrap_or_else(|| self.events.subscribe());
        EventStream {
            sub: Arc::new(tokio::sync::Mutex::new(Subscription {
                rx,
                ended: self.ended.clone(),
                finished: false,
            })),
        }
    }
}

fn secs(t: f64) -> Duration {
    Duration::try_from_secs_f64(t.max(0.0)).unwrap_or(Duration::MAX)
}

/// One reader's place in a run's events.
struct Subscription {
    rx: broadcast::Receiver<Event>,
    ended: watch::Receiver<bool>,
    /// `run_finished` was handed out, or the run ended with nothing left.
    finished: bool,
}

impl Subscription {
    /// The next event as JSON; `None` once the run has ended and every
    /// event was read.
    async fn next(&mut self) -> Option<String> {
        use broadcast::error::{RecvError, TryRecvError};
        if self.finished {
            return None;
        }
        // Ok(event), Err(Some(n)): n missed, Err(None): the end.
        let got: Result<Event, Option<u64>> = tokio::select! {
            biased;
            r = self.rx.recv() => match r {
                Ok(e) => Ok(e),
                Err(RecvError::Lagged(n)) => Err(Some(n)),
                Err(RecvError::Closed) => Err(None),
            },
            _ = self.ended.wait_for(|d| *d) => match self.rx.try_recv() {
                Ok(e) => Ok(e),
                Err(TryRecvError::Lagged(n)) => Err(Some(n)),
                Err(_) => Err(None),
            },
        };
        let got = match got {
            Err(None) => return self.finish(),
            Ok(e) => Ok(e),
            Err(Some(n)) => Err(n),
        };
        Some(match got {
            Ok(e) => {
                self.finished |= matches!(e.kind, EventKind::RunFinished { .. });
                serde_json::to_string(&e).unwrap_or_default()
            }
            Err(n) => serde_json::json!({ "event": "missed", "count": n }).to_string(),
        })
    }

    fn finish(&mut self) -> Option<String> {
        self.finished = true;
        None
    }
}

/// A run's events, read one at a time from Python (sync or asyncio).
#[pyclass(module = "warpline._warpline", name = "EventStream", frozen)]
pub(crate) struct EventStream {
    sub: Arc<tokio::sync::Mutex<Subscription>>,
}

#[pymethods]
impl EventStream {
    /// The next event as JSON, waiting for it; `None` at the end.
    fn next(&self, py: Python<'_>) -> PyResult<Option<String>> {
        loop {
            let sub = Arc::clone(&self.sub);
            if let Some(got) = block_for(py, SLICE, async move { sub.lock().await.next().await })? {
                return Ok(got);
            }
            py.check_signals()?;
        }
    }

    /// An asyncio future of the next event as JSON (`None` at the end).
    fn next_async(&self, event_loop: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let sub = Arc::clone(&self.sub);
        bridge(event_loop, async move { Ok(sub.lock().await.next().await) })
    }
}
