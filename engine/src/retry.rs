//! How a stage tries a failed item again ([`RetryPolicy`]), shared by the
//! stages that declare a default and the pipeline that resolves it.

use std::time::Duration;

/// When a stage tries a failed item again: up to `attempts` tries in all,
/// for errors of the kinds in `on`, waiting a random time between half of
/// and all of `min(max_delay, base_delay * 2^(try - 1))` ("equal jitter"),
/// or as long as the server's `Retry-After` asks, whichever is longer.
/// Limiters are
/// given back while waiting and taken again for the next try (so a rate
/// limit counts every try).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (1: no retry).
    pub attempts: u32,
    /// The first backoff's upper bound.
    pub base_delay: Duration,
    /// No backoff is longer than this.
    pub max_delay: Duration,
    /// Which errors are tried again.
    pub on: Vec<crate::item::ErrorKind>,
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        RetryPolicy {
            attempts: 1,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            on: vec![crate::item::ErrorKind::Transient],
        }
    }

    /// Up to `attempts` tries for transient errors, 200 ms base, 10 s cap.
    pub fn transient(attempts: u32) -> Self {
        RetryPolicy {
            attempts,
            ..Self::none()
        }
    }

    /// Whether an error on try number `attempt` (1-based) is tried again.
    pub fn retries(&self, error: &crate::item::StageError, attempt: u32) -> bool {
        attempt < self.attempts && self.on.contains(&error.kind)
    }

    /// Up to `attempts` tries for transient errors, spread so that they
    /// outlast a short outage: 500 ms base, 10 s cap; with 6 tries the
    /// waits add up to between 7.75 and 15.5 s.
    pub fn patient(attempts: u32) -> Self {
        RetryPolicy {
            attempts,
            base_delay: Duration::from_millis(500),
            ..Self::none()
        }
    }

    /// The backoff before try `attempt + 1`: "equal jitter", half of
    /// `min(max_delay, base_delay * 2^(attempt - 1))` plus a random part of
    /// the other half, so that tries spread out (no herd) yet always span
    /// at least half the exponential schedule.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let half = exp.min(self.max_delay) / 2;
        half + half.mul_f64(fastrand::f64())
    }
}
