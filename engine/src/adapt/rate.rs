//! The rate a host's gate lets tries start at, learnt from its refusals.
//!
//! No rate until the first refusal (429, 503); then:
//!
//! - **probe**: at the first refusal, what got through in the last second,
//!   times 0.9, doubled each second (+1 per success) until the next
//!   refusal, which sets the rate to what got through in its last half
//!   second (a probe's rate rises fast), times 0.9;
//! - **steady**: at a refusal, what got through over the last second the
//!   host was not paused, times 0.9 (never above the rate itself), then
//!   raised by [`CREEP`] request/s each second: a sawtooth just under the
//!   server's limit, whose refusals (each pausing the host) stay rare;
//! - **far over**: a refusal too soon after the last pause's end to
//!   measure anything (under a second; half a second while probing or
//!   ramping) says the rate is far above the limit: it is multiplied by
//!   [`FAR_OVER`], then raised 25% a second (+0.25 per success) until the
//!   next refusal measures it (not below 1 request/s: refusals at a few a
//!   second are as often not about the rate; fewer than two successes
//!   measure nothing); but when nothing at all got through since
//!   the pause, the host is down rather than limiting a rate, and the rate
//!   stays (the pause, doubling, is the answer);
//! - **back**: a limit that fell (a server under load, a shared key) often
//!   comes back. While the rate is under 0.75 of the highest steady rate
//!   refused at, every [`BACK_AFTER`] without a refusal the rate goes
//!   straight back to 0.95 of that; refused, it returns to where it was
//!   (after [`MAX_BACKS`] such refusals in a row the old rate is forgotten);
//!   unrefused for half a second, it creeps up from there;
//! - after [`PROBE_AFTER`] without a refusal it probes up again.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::WINDOW;

/// After this long without a refusal, probe for a higher rate again.
const PROBE_AFTER: Duration = Duration::from_secs(20);
/// After this long without a refusal, go back toward a rate that was fine
/// before the limit fell.
pub(super) const BACK_AFTER: Duration = Duration::from_secs(3);
/// What a refusal soon after a pause multiplies the rate by.
const FAR_OVER: f64 = 0.25;
/// Returns to an old rate refused in a row before it is forgotten.
const MAX_BACKS: u32 = 10;
/// How fast a steady rate creeps up, in requests per second each second.
const CREEP: f64 = 0.1;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Doubling each second.
    Probe,
    /// Raised 25% a second, after a halving.
    Ramp,
    /// Creeping up.
    Steady,
}

/// A host's learnt rate.
#[derive(Debug)]
pub(super) struct Rate {
    /// Requests per second; `None` until the first refusal.
    pub(super) per_s: Option<f64>,
    mode: Mode,
    /// The highest steady rate refused at.
    high: f64,
    /// A return toward `high` under way: the rate before it, and when.
    back: Option<(f64, Instant)>,
    /// Successes of the last two windows.
    successes: VecDeque<Instant>,
    last_refusal: Option<Instant>,
    /// Returns to `high` refused since the last that was not.
    backs_refused: u32,
}

impl Rate {
    pub(super) fn new() -> Self {
        Rate {
            per_s: None,
            mode: Mode::Steady,
            high: 0.0,
            back: None,
            successes: VecDeque::new(),
            last_refusal: None,
            backs_refused: 0,
        }
    }

    /// A try answered at `now`.
    pub(super) fn succeeded(&mut self, now: Instant) {
        self.successes.push_back(now);
        while self
            .successes
            .front()
            .is_some_and(|t| now - *t > WINDOW * 2)
        {
            self.successes.pop_front();
        }
        let Some(r) = self.per_s else {
            return;
        };
        if self.back.is_some_and(|(_, at)| now - at >= WINDOW / 2) {
            // Back at the old rate, unrefused: the limit came back.
            self.back = None;
            self.backs_refused = 0;
        }
        let quiet = self.last_refusal.map_or(Duration::MAX, |t| now - t);
        if self.mode == Mode::Steady && quiet >= PROBE_AFTER {
            self.mode = Mode::Probe;
        }
        self.per_s = Some(match self.mode {
            Mode::Probe => r + 1.0,
            Mode::Ramp => r + 0.25,
            Mode::Steady if self.back.is_none() && quiet >= BACK_AFTER && r < 0.75 * self.high => {
                self.back = Some((r, now));
                // Counts as a refusal's time: the next return waits again.
                self.last_refusal = Some(now);
                0.95 * self.high
            }
            Mode::Steady => r + CREEP / r.max(0.5),
        });
    }

    /// A refusal at `now` lowered the limits (one per window); the host's
    /// last pause ended at `unpaused_since`.
    pub(super) fn refused(&mut self, now: Instant, unpaused_since: Option<Instant>) {
        let last_window = self
            .successes
            .iter()
            .filter(|t| now - **t <= WINDOW)
            .count() as f64;
        // A probe's or a ramp's rate rises fast: only its last half second
        // says what the server let through.
        let lookback = if self.mode != Mode::Steady {
            WINDOW / 2
        } else {
            WINDOW
        };
        let from = unpaused_since.map_or(now - lookback, |p| p.max(now - lookback));
        let span = (now - from).as_secs_f64();
        // Fewer than two successes measure nothing (a slow rate).
        let got = self.successes.iter().filter(|t| **t >= from).count();
        let observed =
            (span >= lookback.as_secs_f64() * 0.99 && got >= 2).then(|| got as f64 / span);
        self.last_refusal = Some(now);
        let (rate, mode) = match (self.per_s, self.back.take(), observed) {
            // The first: probe up from what got through.
            (None, _, _) => (last_window.max(1.0), Mode::Probe),
            // A return refused: the limit has not come back (yet).
            (Some(_), Some((was, _)), _) => {
                self.backs_refused += 1;
                if self.backs_refused >= MAX_BACKS {
                    // The limit stays low: forget the old rate.
                    self.high = 0.0;
                }
                (was / 0.9, Mode::Steady)
            }
            // Nothing got through since the pause: the host is down, not
            // limiting a rate (that lets a few through); the pause is
            // the answer, the rate stays.
            (Some(r), None, None) if !self.successes.iter().any(|t| *t >= from) => {
                (r / 0.9, self.mode)
            }
            // A rate limit of a few a second is not cut 4x: refusals there
            // are as often not about the rate at all.
            (Some(r), None, None) if r * FAR_OVER < 1.0 => (r, Mode::Steady),
            (Some(r), None, None) => (r * FAR_OVER / 0.9, Mode::Ramp),
            (Some(r), None, Some(o)) => {
                if self.mode == Mode::Steady {
                    self.high = self.high.max(r);
                }
                (r.min(o), Mode::Steady)
            }
        };
        self.per_s = Some((rate * 0.9).max(0.1));
        self.mode = mode;
    }
}
