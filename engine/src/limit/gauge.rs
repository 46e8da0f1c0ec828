//! A limiter's live use (the [`Gauge`]) and one run's share of it (a
//! [`Window`]).
//!
//! A limiter may be shared by many runs, one after another or at once (an
//! embedding service shares `connections` and `memory` between its jobs), so
//! its counters cover its whole life. A run opens a [`Window`] on each of
//! its limiters when it starts: the window notes the counters then, and has
//! its own high-water mark, raised by every acquisition while it is open.
//! The report reads the difference, so a quiet job that follows a busy one
//! is told its own figures.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

type Histogram = hdrhistogram::Histogram<u64>;

/// Live use of a limiter, over its whole life.
#[derive(Debug)]
pub(super) struct Gauge {
    pub(super) in_use: AtomicU64,
    pub(super) peak: AtomicU64,
    /// Total nanoseconds spent waiting to acquire.
    waited_ns: AtomicU64,
    /// Acquisitions that did not wait.
    pub(super) immediate: AtomicU64,
    /// Who waits now, and for how long someone has been waiting in all.
    contention: Mutex<Contention>,
    /// Waits that did wait, in microseconds.
    waits_us: Mutex<Histogram>,
    /// The high-water marks of the open windows.
    windows: Mutex<Vec<Weak<AtomicU64>>>,
    /// How many windows are open (the hot path locks `windows` only then).
    open: AtomicUsize,
}

#[derive(Debug, Default)]
struct Contention {
    waiters: u64,
    since: Option<tokio::time::Instant>,
    total: Duration,
}

fn empty_histogram() -> Histogram {
    // 1 µs .. 1 h at 2 significant digits: valid bounds, cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

impl Default for Gauge {
    fn default() -> Self {
        Gauge {
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
            immediate: AtomicU64::new(0),
            contention: Mutex::new(Contention::default()),
            waits_us: Mutex::new(empty_histogram()),
            windows: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
        }
    }
}

/// Marks a waiting acquisition; dropping it (the wait ended, or was
/// cancelled) records the wait.
pub(super) struct Waiting<'a> {
    gauge: &'a Gauge,
    started: tokio::time::Instant,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let now = tokio::time::Instant::now();
        let waited = now.saturating_duration_since(self.started);
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.gauge.waited_ns.fetch_add(ns, Ordering::Relaxed);
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX).max(1);
        self.gauge
            .waits_us
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .saturating_record(us);
        let mut c = self
            .gauge
            .contention
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        c.waiters = c.waiters.saturating_sub(1);
        if c.waiters == 0 {
            if let Some(since) = c.since.take() {
                c.total += now.saturating_duration_since(since);
            }
        }
    }
}

/// What the counters said at one moment, for the differences.
#[derive(Debug, Clone)]
struct Marks {
    waited_ns: u64,
    immediate: u64,
    contended: Duration,
    waits_us: Histogram,
}

impl Gauge {
    pub(super) fn begin_wait(&self) -> Waiting<'_> {
        let started = tokio::time::Instant::now();
        let mut c = self.contention.lock().unwrap_or_else(|p| p.into_inner());
        c.waiters += 1;
        if c.waiters == 1 {
            c.since = Some(started);
        }
        Waiting {
            gauge: self,
            started,
        }
    }

    pub(super) fn add(&self, n: u64) {
        let now = self.in_use.fetch_add(n, Ordering::AcqRel) + n;
        self.peak.fetch_max(now, Ordering::AcqRel);
        if self.open.load(Ordering::Acquire) > 0 {
            let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
            windows.retain(|w| match w.upgrade() {
                Some(peak) => {
                    peak.fetch_max(now, Ordering::AcqRel);
                    true
                }
                None => false,
            });
        }
    }

    pub(super) fn sub(&self, n: u64) {
        self.in_use.fetch_sub(n, Ordering::AcqRel);
    }

    pub(super) fn waiters(&self) -> u64 {
        self.contention
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .waiters
    }

    pub(super) fn total_wait(&self) -> Duration {
        Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed))
    }

    pub(super) fn contended(&self) -> Duration {
        let c = self.contention.lock().unwrap_or_else(|p| p.into_inner());
        let ongoing = c
            .since
            .map(|s| tokio::time::Instant::now().saturating_duration_since(s))
            .unwrap_or_default();
        c.total + ongoing
    }

    fn marks(&self) -> Marks {
        Marks {
            waited_ns: self.waited_ns.load(Ordering::Relaxed),
            immediate: self.immediate.load(Ordering::Relaxed),
            contended: self.contended(),
            waits_us: self
                .waits_us
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    pub(super) fn p95_wait(&self) -> Duration {
        let m = self.marks();
        p95(m.immediate, &m.waits_us)
    }

    /// Opens a window on this gauge: its figures start now.
    pub(super) fn open_window(self: &Arc<Self>) -> Window {
        let peak = Arc::new(AtomicU64::new(self.in_use.load(Ordering::Acquire)));
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.retain(|w| w.strong_count() > 0);
        windows.push(Arc::downgrade(&peak));
        drop(windows);
        self.open.fetch_add(1, Ordering::AcqRel);
        Window {
            gauge: Arc::clone(self),
            start: self.marks(),
            peak,
        }
    }
}

/// The 95th percentile of the wait over every acquisition, most of which
/// (`immediate`) took none.
fn p95(immediate: u64, waited: &Histogram) -> Duration {
    let waited_n = waited.len();
    let total = immediate + waited_n;
    if total == 0 || (immediate as f64) >= 0.95 * total as f64 {
        return Duration::ZERO;
    }
    let q = (0.95 * total as f64 - immediate as f64) / waited_n as f64;
    Duration::from_micros(waited.value_at_quantile(q.clamp(0.0, 1.0)))
}

/// One run's view of a limiter: its figures from the moment it was opened.
/// Other runs that hold the limiter at the same time count too (they fill
/// the same slots); runs before it or after it do not.
#[derive(Debug)]
pub struct Window {
    gauge: Arc<Gauge>,
    start: Marks,
    peak: Arc<AtomicU64>,
}

/// A limiter's figures over a [`Window`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowFigures {
    /// The most slots or bytes held at once while the window was open.
    pub peak_in_use: u64,
    /// Time spent waiting to acquire, summed over acquisitions.
    pub total_wait: Duration,
    /// The 95th percentile of an acquisition's wait.
    pub p95_wait: Duration,
    /// How long, in all, at least one item was waiting (it was at capacity).
    pub contended: Duration,
}

impl Window {
    /// The figures since the window was opened.
    pub fn figures(&self) -> WindowFigures {
        let now = self.gauge.marks();
        let mut waits = now.waits_us;
        // The start is an earlier state of the same histogram, so every
        // count in it is also in `waits`: subtracting cannot fail; if it
        // ever did, the whole-life figure is the fallback.
        let _ = waits.subtract(&self.start.waits_us);
        let immediate = now.immediate.saturating_sub(self.start.immediate);
        WindowFigures {
            peak_in_use: self.peak.load(Ordering::Acquire),
            total_wait: Duration::from_nanos(now.waited_ns.saturating_sub(self.start.waited_ns)),
            p95_wait: p95(immediate, &waits),
            contended: now.contended.saturating_sub(self.start.contended),
        }
    }
}

impl Window {
    /// The most held at once since the window opened or this was last
    /// called; the peak starts again from `now` (what is held now).
    pub fn take_peak(&self, now: u64) -> u64 {
        self.peak.swap(now, Ordering::AcqRel).max(now)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        self.gauge.open.fetch_sub(1, Ordering::AcqRel);
    }
}
