//! The rate a host's gate lets tries start at, learnt from its refusals.
//!
//! At a refusal the server has just let through as many as it allows: a
//! strict server (a sliding window, a fixed window, a token bucket) has
//! accepted its limit within the last second. So the gate counts the
//! successes of the last second and takes that count as the host's
//! **limit**, and paces [`BASE_MARGIN`] under it, less a margin it learns
//! as a rate bucket does (`limit/margin.rs`): a refusal at that pace
//! (jitter put one request too many in a window) widens the margin, which
//! is kept, then narrows after a quiet spell. So refusals stop instead of
//! coming back each time the rate creeps over the limit.
//!
//! No rate until the first refusal (429, 503); then:
//!
//! - **probe**: at the first refusal, what got through in the last second,
//!   less the base margin, rising [`PROBE_STEP`] per success (about 7x a
//!   second) until the next refusal measures the limit (one within half a
//!   second of the pause's end is far over, below);
//! - **climbing**: a limit a probe or a ramp measured may be low (they rose
//!   through it within that second): it rises [`CLIMB`] a second until a
//!   refusal measures it at the gate's pace. Not one a probe measured
//!   within a second of its pause: that counted a window from its start;
//! - **steady**: the limit less the margins, held. A refusal at that pace
//!   with the pace's worth got through keeps the limit and widens the
//!   margin; with clearly less got through (or soon after a pause) the
//!   limit fell, and becomes what got through. Refusals within [`QUICK`]
//!   of each other cut the limit to [`QUICK_CUT`] of what got through: the
//!   measure was too high (a fixed window lets up to twice its limit
//!   through in a second across its edge);
//! - **far over**: a refusal soon after a pause's end (under a second) with
//!   fewer than half the rate's worth got through says the rate is far
//!   above the limit: the rate becomes what got through, at least
//!   [`FAR_OVER`] of the rate, then rises 25% a second (+0.25 per success)
//!   until the next refusal measures the limit (not below 1 request/s:
//!   refusals at a few a second are as often not about the rate; fewer
//!   than two successes measure nothing); but when nothing at all got
//!   through since the pause, the host is down rather than limiting a
//!   rate, and the rate stays (the pause, doubling, is the answer);
//! - **back**: a limit that fell (a server under load, a shared key) often
//!   comes back. While the limit is under 0.75 of the highest that held
//!   (refused at its own pace, paced [`HELD`] without a refusal, or
//!   measured by a climb that long), every
//!   [`BACK_AFTER`] without a refusal the gate goes straight back to that
//!   highest; refused, it returns to where it was (after [`MAX_BACKS`]
//!   such refusals in a row the old limit is forgotten); unrefused for
//!   half a second, it stays;
//! - after [`PROBE_AFTER`] without a refusal it probes up again (the limit
//!   may have risen).
//!
//! A success answered after the refusal that counted the limit, of a try
//! sent before the refused try, was let through before it (a server
//! decides as requests come, then answers, and answers do not come back in
//! the order they were decided): it is added to the count (until a later
//! try succeeds: that flight's answers are back).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::WINDOW;
use crate::limit::Learned;

/// After this long without a refusal, probe for a higher rate again.
const PROBE_AFTER: Duration = Duration::from_secs(60);
/// After this long without a refusal, go back toward a limit that held
/// before it fell.
pub(super) const BACK_AFTER: Duration = Duration::from_secs(3);
/// The least a far-over refusal leaves of the rate.
const FAR_OVER: f64 = 0.25;
/// Returns to an old limit refused in a row before it is forgotten.
const MAX_BACKS: u32 = 10;
/// The share under the measured limit the gate paces at before it learns
/// any margin: a count of one second is off by a request or two.
const BASE_MARGIN: f64 = 0.05;
/// How fast a limit measured by a probe rises, a share of it a second.
const CLIMB: f64 = 0.08;
/// What each success adds to a probe's rate (its rate `r` gets `r`
/// successes a second, so it grows `e^PROBE_STEP` a second): fast, so that
/// it reaches the limit within the second after its pause, before a fixed
/// window's edge lets a second window's worth into the count.
const PROBE_STEP: f64 = 2.0;
/// A refusal at a steady pace this soon after the last one (a refusal, its
/// pause and a second) says the limit measured is too high...
const QUICK: Duration = Duration::from_secs(3);
/// ... and cuts it to this share of what got through.
const QUICK_CUT: f64 = 0.85;
/// A limit paced this long without a refusal held: one that falls from it
/// goes back to it (see `back`).
const HELD: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Doubling each second.
    Probe,
    /// Raised 25% a second, after a far-over refusal.
    Ramp,
    /// At the measured limit, less the margins.
    Steady,
}

/// A host's learnt rate.
#[derive(Debug)]
pub(super) struct Rate {
    /// Requests per second; `None` until the first refusal.
    pub(super) per_s: Option<f64>,
    mode: Mode,
    /// Steady: the host's limit, as measured at the last refusal.
    limit: f64,
    /// The margin learnt from refusals at the gate's own pace.
    learned: Learned,
    /// The highest limit that held: refused at the gate's own pace, paced
    /// [`HELD`] without a refusal, or measured by a climb that long.
    high: f64,
    /// When the limit was last measured (a refusal at its own pace leaves
    /// it as it was: it held).
    set_at: Instant,
    /// A return to `high` under way: the limit before it, and when.
    back: Option<(f64, Instant)>,
    /// Steady: the limit was measured by a probe or a ramp, not yet at a
    /// steady pace: it rises [`CLIMB`] a second until refused.
    climbing: bool,
    /// The last refusal at a steady pace.
    refused_at: Option<Instant>,
    /// Successes of the last two windows.
    successes: VecDeque<Instant>,
    last_refusal: Option<Instant>,
    /// Returns to `high` refused since the last that was not.
    backs_refused: u32,
    /// The refusal whose count of successes set the limit (or a probe's
    /// start): when it came, and when its try was sent. Tries sent before
    /// that and answered after the refusal add to the count, until a try
    /// sent later succeeds (the answers of that flight are back).
    counted_at: Option<(Instant, Instant)>,
}

impl Rate {
    pub(super) fn new() -> Self {
        Rate {
            per_s: None,
            mode: Mode::Steady,
            limit: 0.0,
            learned: Learned::default(),
            high: 0.0,
            set_at: Instant::now(),
            back: None,
            climbing: false,
            refused_at: None,
            successes: VecDeque::new(),
            last_refusal: None,
            backs_refused: 0,
            counted_at: None,
        }
    }

    /// The steady rate at `now`: the limit less the margins.
    fn steady(&self, now: Instant) -> f64 {
        (self.limit * (1.0 - BASE_MARGIN) * (1.0 - self.learned.at(now))).max(0.1)
    }

    /// A try sent at `started` answered at `now`.
    pub(super) fn succeeded(&mut self, now: Instant, started: Instant) {
        self.successes.push_back(now);
        if let (Some((at, sent)), Some(r)) = (self.counted_at, self.per_s) {
            if started < sent && now >= at {
                // Let through before the refusal that counted the limit
                // (a probe's start counted no limit, only its rate).
                if self.mode == Mode::Probe {
                    self.per_s = Some(r + (1.0 - BASE_MARGIN));
                } else {
                    self.limit += 1.0;
                    self.per_s = Some(self.steady(now));
                }
                return;
            }
        }
        while self
            .successes
            .front()
            .is_some_and(|t| now - *t > WINDOW * 2)
        {
            self.successes.pop_front();
        }
        self.counted_at = None;
        let Some(r) = self.per_s else {
            return;
        };
        if self.back.is_some_and(|(_, at)| now - at >= WINDOW / 2) {
            // Back at the old limit, unrefused: it came back.
            self.back = None;
            self.backs_refused = 0;
        }
        let quiet = self.last_refusal.map_or(Duration::MAX, |t| now - t);
        if self.mode == Mode::Steady && quiet >= PROBE_AFTER {
            self.mode = Mode::Probe;
        }
        self.per_s = Some(match self.mode {
            Mode::Probe => r + PROBE_STEP,
            Mode::Ramp => r + 0.25,
            Mode::Steady
                if self.back.is_none() && quiet >= BACK_AFTER && self.limit < 0.75 * self.high =>
            {
                self.back = Some((self.limit, now));
                // Counts as a refusal's time: the next return waits again.
                self.last_refusal = Some(now);
                self.limit = self.high;
                self.steady(now)
            }
            Mode::Steady => {
                if self.climbing {
                    self.limit *= 1.0 + CLIMB / r.max(1.0);
                }
                self.steady(now)
            }
        });
    }

    /// A refusal at `now` of a try sent at `sent` lowered the limits (one
    /// per window); the host's last pause ended at `unpaused_since`.
    pub(super) fn refused(&mut self, now: Instant, sent: Instant, unpaused_since: Option<Instant>) {
        let from = unpaused_since.map_or(now - WINDOW, |p| p.max(now - WINDOW));
        // What got through since the pause, within the last second (a
        // count, not a rate: a strict server counts it so).
        let got = self.successes.iter().filter(|t| **t >= from).count();
        let soon = now - from < WINDOW.mul_f64(0.99);
        self.last_refusal = Some(now);
        self.counted_at = None;
        let Some(r) = self.per_s else {
            // The first: probe up from what got through.
            let last_window = self.successes.iter().filter(|t| now - **t <= WINDOW);
            self.per_s =
                Some(((last_window.count() as f64).max(1.0) * (1.0 - BASE_MARGIN)).max(0.1));
            self.mode = Mode::Probe;
            self.counted_at = Some((now, sent));
            return;
        };
        if let Some((was, _)) = self.back.take() {
            // A return refused: the limit has not come back (yet).
            self.backs_refused += 1;
            if self.backs_refused >= MAX_BACKS {
                // The limit stays low: forget the old one.
                self.high = 0.0;
            }
            self.limit = was;
            self.climbing = false;
            self.mode = Mode::Steady;
            self.per_s = Some(self.steady(now));
            return;
        }
        let held = self.mode == Mode::Steady && now - self.set_at >= HELD;
        if held && !self.climbing {
            // A limit that held, refused: the one to go back to if it fell.
            self.high = self.high.max(self.limit);
        }
        if got == 0 {
            // Nothing got through since the pause: the host is down, not
            // limiting a rate (that lets a few through); the pause is the
            // answer, the rate stays.
            return;
        }
        let far = if self.mode == Mode::Probe {
            // A probe's refusal measures the limit, unless it came within
            // half a second of the pause's end: the probe rose through the
            // limit too fast to count it, and ramps up from there instead.
            now - from < WINDOW / 2
        } else {
            // Fewer than half the rate's worth got through since the pause.
            soon && (got as f64) < 0.5 * r
        };
        if got < 2 || far {
            // A rate limit of a few a second is not cut: refusals there are
            // as often not about the rate at all.
            if r * FAR_OVER < 1.0 {
                self.mode = Mode::Steady;
                self.limit = r / (1.0 - BASE_MARGIN);
                return;
            }
            // Far over: rise from what got through until a refusal
            // measures the limit.
            let from = (got as f64).max(r * FAR_OVER) * (1.0 - BASE_MARGIN);
            self.per_s = Some(from.max(1.0));
            self.mode = Mode::Ramp;
            return;
        }
        let pace = self.steady(now);
        let steady = self.mode == Mode::Steady;
        let quick = steady && self.refused_at.is_some_and(|t| now - t <= QUICK);
        if steady {
            self.refused_at = Some(now);
        }
        if quick {
            // Refused again soon after the last refusal at a steady pace:
            // the limit measured is too high (a fixed window lets through
            // more than its limit in a second across its edge): cut it,
            // and climb back from there.
            self.limit = self.limit.min(got as f64) * QUICK_CUT;
            self.climbing = true;
            self.set_at = now;
        } else if steady && !self.climbing && !soon && got as f64 >= 0.9 * pace {
            // Refused at its own pace: the limit holds (one to go back to if
            // it falls), the margin was too thin.
            self.learned.refused(now);
            self.high = self.high.max(self.limit);
        } else {
            // Measured: what the server let through in the last second
            // (a probe's, a ramp's, a climb's, or a limit that fell). A
            // probe that rose through the limit within that second let
            // through less than the limit: it climbs until refused.
            if held && self.climbing {
                // A climb that went that long measured a limit that held.
                self.high = self.high.max(got as f64);
            }
            // A probe refused within a second of its pause counted a
            // window from its start: that is the limit, kept.
            let fresh = self.mode == Mode::Probe && soon;
            self.climbing = !(steady || fresh);
            self.limit = got as f64;
            self.set_at = now;
            self.counted_at = Some((now, sent));
        }
        self.mode = Mode::Steady;
        self.per_s = Some(self.steady(now));
        tracing::debug!(
            got,
            soon,
            limit = self.limit,
            margin = self.learned.at(now),
            rate = self.per_s,
            "the host's rate measured at a refusal"
        );
    }
}
