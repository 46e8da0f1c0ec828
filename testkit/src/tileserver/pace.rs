//! How the tile server paces its answers: the added latency, and the
//! forgiving rate limit (GCRA with a burst of 3) that may change at set
//! times.

use std::time::Duration;

use super::{Faults, Shared};

/// The rate limit in force `since` the first request, if any.
pub(super) fn rate_now(f: &Faults, since: Duration) -> Option<f64> {
    let changed = f.rate_changes.iter().rev().find(|(at, _)| *at <= since);
    changed.map(|(_, r)| *r).or(f.rate_limit)
}

/// How long a request waits before it is answered, with `in_flight`
/// requests in flight.
pub(super) fn latency(f: &Faults, in_flight: u64) -> Duration {
    let grown = f
        .latency_per_in_flight
        .map_or(Duration::ZERO, |(knee, each)| {
            each * u32::try_from(in_flight.saturating_sub(knee)).unwrap_or(u32::MAX)
        });
    f.latency.unwrap_or_default() + grown
}

/// Whether the server-side rate limit (`rate` requests a second) lets a
/// request through now. GCRA: the theoretical arrival time may run one
/// period ahead.
pub(super) fn rate_allows(shared: &Shared, rate: f64) -> bool {
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut next = shared
        .next_allowed
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let now = tokio::time::Instant::now();
    match *next {
        Some(tat) if tat > now + period * 2 => false,
        _ => {
            *next = Some(now.max(next.unwrap_or(now)) + period);
            true
        }
    }
}
