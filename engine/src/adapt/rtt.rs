//! Response times as back-pressure, as Vector's Adaptive Request
//! Concurrency reads them: tries' response times are averaged over windows
//! about one response time long; a window whose mean is above the moving
//! average of past windows by more than `latency` times their moving mean
//! deviation (at least 5% of the average: a steady host is not punished for
//! noise) is back-pressure, and is not learnt from (the average stays the
//! host's speed unloaded); otherwise the window may raise the limit.

use std::time::Duration;

use tokio::time::Instant;

/// The moving averages' weight of the newest window.
const ALPHA: f64 = 0.4;
/// The shortest window.
const MIN_WINDOW: Duration = Duration::from_millis(10);
/// Deviation never counts as less than this share of the average.
const MIN_DEVIATION: f64 = 0.05;

/// A window's verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Verdict {
    /// Slower than the past: lower the limit.
    Slower,
    /// As fast as the past: the limit may rise.
    AsFast,
}

#[derive(Debug)]
pub(super) struct Rtt {
    /// Moving average of past windows' means, and of their deviation.
    past: Option<(f64, f64)>,
    sum: f64,
    n: u32,
    since: Option<Instant>,
}

impl Rtt {
    pub(super) fn new() -> Self {
        Rtt {
            past: None,
            sum: 0.0,
            n: 0,
            since: None,
        }
    }

    /// The host's response time unloaded (the moving average of the windows
    /// that were not slower), in seconds.
    pub(super) fn average(&self) -> Option<f64> {
        self.past.map(|(avg, _)| avg)
    }

    /// A try answered at `now` after `rtt`; at a window's end, its verdict.
    pub(super) fn add(&mut self, now: Instant, rtt: Duration, scale: f64) -> Option<Verdict> {
        self.sum += rtt.as_secs_f64();
        self.n += 1;
        let since = *self.since.get_or_insert(now);
        let long = self
            .past
            .map_or(MIN_WINDOW, |(avg, _)| Duration::from_secs_f64(avg))
            .max(MIN_WINDOW);
        if now - since < long {
            return None;
        }
        let mean = self.sum / f64::from(self.n);
        (self.sum, self.n, self.since) = (0.0, 0, Some(now));
        let Some((avg, dev)) = self.past else {
            self.past = Some((mean, 0.0));
            return Some(Verdict::AsFast);
        };
        if mean > avg + scale * dev.max(MIN_DEVIATION * avg) {
            // Not learnt from: the past stays the host's unloaded speed,
            // so load that grows step by step does not drag it along.
            return Some(Verdict::Slower);
        }
        let avg2 = avg + ALPHA * (mean - avg);
        self.past = Some((avg2, dev + ALPHA * ((mean - avg).abs() - dev)));
        Some(Verdict::AsFast)
    }
}
