//! The margin a rate bucket keeps under its `per_second`, learnt from the
//! server's refusals.
//!
//! A bucket paced at exactly a strict server's limit is refused again and
//! again: its requests arrive with jitter, and one early arrival puts the
//! 21st request of a 20/s limit inside one second (docs/design/rates.md
//! gives the argument). So a bucket paces `margin` under its rate from the
//! start (a `[limits.NAME]` key, 2% by default), and a request that waited
//! for its token and was still refused (429, 503) widens the margin by
//! [`MarginRule::step`]. The margin is kept while refusals come; only after
//! [`MarginRule::hold`] without one does it narrow again, slowly
//! ([`MarginRule::creep_per_s`]), so a refusal is not met again at once.
//! The refusals of one burst (within [`MarginRule::one_signal`] of the last
//! widening) widen it once.
//!
//! A global bucket keeps its learnt margin in Redis by the same rule
//! (computed there, on Redis's clock), so every worker paces at it.

use std::time::Duration;

use tokio::time::Instant;

/// How a bucket's learnt margin moves: the same numbers here and in the
/// coordinator's script for a global bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MarginRule {
    /// What a refusal at the bucket's rate adds to the margin (a share of
    /// the rate).
    pub step: f64,
    /// The most a bucket learns (beyond its configured margin).
    pub max: f64,
    /// How long the learnt margin is kept after the last refusal.
    pub hold: Duration,
    /// Then, how fast it narrows: a share of the rate per second.
    pub creep_per_s: f64,
    /// Refusals this soon after a widening are of the same burst.
    pub one_signal: Duration,
}

/// The rule every bucket follows.
pub const MARGIN: MarginRule = MarginRule {
    step: 0.02,
    max: 0.2,
    hold: Duration::from_secs(30),
    // One point of the rate each 20 s.
    creep_per_s: 0.0005,
    one_signal: Duration::from_secs(2),
};

/// A bucket's learnt margin.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Learned {
    /// The margin at `at`.
    margin: f64,
    /// The last refusal at the bucket's rate.
    at: Option<Instant>,
    /// The last widening.
    widened: Option<Instant>,
}

impl Learned {
    /// The learnt margin at `now`: as the last refusal left it until
    /// `hold` has passed, then narrowing.
    pub(crate) fn at(&self, now: Instant) -> f64 {
        let Some(at) = self.at else {
            return 0.0;
        };
        let quiet = now
            .saturating_duration_since(at)
            .saturating_sub(MARGIN.hold);
        (self.margin - MARGIN.creep_per_s * quiet.as_secs_f64()).max(0.0)
    }

    /// A request at the bucket's rate was refused at `now`: the margin
    /// widens (once per burst) and is held again. The new margin when it
    /// widened.
    pub(crate) fn refused(&mut self, now: Instant) -> Option<f64> {
        let mut margin = self.at(now);
        let widen = self
            .widened
            .is_none_or(|w| now.saturating_duration_since(w) >= MARGIN.one_signal);
        if widen {
            margin = (margin + MARGIN.step).min(MARGIN.max);
            self.widened = Some(now);
        }
        self.margin = margin;
        self.at = Some(now);
        widen.then_some(margin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_refusal_widens_the_margin_which_is_kept_then_narrows_slowly() {
        let s = Duration::from_secs;
        let mut learned = Learned::default();
        let t0 = Instant::now();
        assert_eq!(learned.at(t0), 0.0);
        assert_eq!(learned.refused(t0), Some(0.02));
        // The same burst: no wider, but held from its last refusal.
        assert_eq!(learned.refused(t0 + s(1)), None);
        assert_eq!(learned.at(t0 + s(31)), 0.02);
        // Refused again later: wider.
        assert_eq!(learned.refused(t0 + s(3)), Some(0.04));
        // Kept 30 s after that refusal, then one point in 20 s.
        assert_eq!(learned.at(t0 + s(33)), 0.04);
        assert!((learned.at(t0 + s(53)) - 0.03).abs() < 1e-9);
        assert_eq!(learned.at(t0 + s(200)), 0.0);
        // Never past the most.
        for i in 0..20 {
            learned.refused(t0 + s(300 + 3 * i));
        }
        assert_eq!(learned.at(t0 + s(357)), MARGIN.max);
    }
}
