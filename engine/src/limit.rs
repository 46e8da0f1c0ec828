//! Limiters, named after the resource they protect and shared by every stage
//! that lists them.
//!
//! Three kinds:
//! - **count**: a fixed number of interchangeable slots (sockets, cores,
//!   descriptors); an item holds one slot;
//! - **bytes**: a budget charged by each item's size, known before allocating;
//!   counted in KiB internally because one semaphore call takes at most
//!   `u32::MAX` permits;
//! - **rate**: a token bucket (per second, with burst), optionally one bucket
//!   per key such as the remote host, paced a small margin under its rate
//!   that widens when the server refuses it ([`MARGIN`]). It holds
//!   nothing, so it has no ticket.
//!
//! Acquiring a count or bytes limiter yields a [`Ticket`], which releases its
//! share when dropped, so an error, a panic or a cancellation can never leak
//! a permit. Several limiters are always acquired in one global order (their
//! position in the pipeline's [`Limits`], the order of declaration), which
//! makes deadlock between stages impossible.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

mod budget;
mod count;
mod gauge;
mod margin;
mod rate;
mod set;
mod ticket;

use budget::Budget;
pub use budget::Priority;
use count::Count;
use gauge::Gauge;
pub use gauge::{Window, WindowFigures};
pub(crate) use margin::Learned;
pub use margin::{MarginRule, MARGIN};
use rate::Rate;
pub use rate::{RateBackend, RateBackendError, RateBackendFactory, RateKey, RateScope};
pub use set::{DuplicateLimiter, Limits};
pub(crate) use ticket::Charged;
pub use ticket::Ticket;

use serde::Serialize;
use tokio::sync::Semaphore;

/// The share under `per_second` a rate limiter paces at unless told
/// otherwise (a pipeline's `margin`): 2%, which keeps a strict one-second
/// window with requests arriving up to 20 ms early.
pub const DEFAULT_MARGIN: f64 = 0.02;

/// What an item larger than a whole byte budget does: `oversize =
/// "fail"` (the default) or `"alone"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum Oversize {
    /// Fail the item with a clear error (the default).
    #[default]
    Fail,
    /// Wait until the whole budget is free and run alone.
    Alone,
}

/// The kind of a limiter, as the report shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimiterKind {
    /// A fixed number of slots.
    Count,
    /// A byte budget.
    Bytes,
    /// A token bucket.
    Rate,
}

impl fmt::Display for LimiterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimiterKind::Count => "count",
            LimiterKind::Bytes => "bytes",
            LimiterKind::Rate => "rate",
        })
    }
}

/// Why an acquisition failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The item asks for more than the whole budget and the policy is `fail`.
    #[error(
        "needs {requested} bytes of `{limiter}` but its whole budget is {budget} bytes \
         (set `oversize = \"alone\"` on [limits.{limiter}] to run such items alone)"
    )]
    OverBudget {
        /// The limiter's name.
        limiter: String,
        /// What the item asked for, in bytes.
        requested: u64,
        /// The whole budget, in bytes.
        budget: u64,
    },
    /// The limiter was closed while waiting (the run is ending).
    #[error("limiter `{0}` was closed")]
    Closed(String),
    /// A byte budget needed this share for an item deeper in the flow, and
    /// took it back while the holder waited for more (see [`Priority`]).
    #[error("`{0}` was needed by an item deeper in the flow; its share was given back")]
    GaveBack(String),
    /// A rate kept elsewhere could not be reached.
    #[error("rate limiter `{limiter}`: {message}")]
    Backend {
        /// The limiter's name.
        limiter: String,
        /// What went wrong.
        message: String,
    },
}

crate::word_setting!(Oversize, "\"fail\" or \"alone\"", {
    "fail" => Oversize::Fail,
    "alone" => Oversize::Alone,
});

/// A limiter's kind and its own state; every method of [`Limiter`] that
/// depends on the kind dispatches here.
enum State {
    Count(Count),
    Bytes {
        budget: Arc<Budget>,
        oversize: Oversize,
    },
    Rate(Rate),
}

struct Inner {
    name: String,
    state: State,
    gauge: Arc<Gauge>,
}

/// One named limiter. Cloning is cheap and shares the same slots.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("name", &self.inner.name)
            .field("kind", &self.kind())
            .field("capacity", &self.capacity())
            .field("in_use", &self.in_use())
            .finish()
    }
}

const KIB: u64 = 1024;

impl Limiter {
    /// A count limiter with `permits` slots (at least 1).
    pub fn count(name: impl Into<String>, permits: NonZeroU32) -> Self {
        Self::new(name, State::Count(Count::new(permits)))
    }

    /// A byte budget of `budget` bytes (rounded up to whole KiB, at least 1
    /// KiB). Items deeper in the flow are served first, and an item that
    /// already holds some of it asks only for the difference: see
    /// [`Priority`] and the `limit::budget` module for why it cannot
    /// deadlock.
    pub fn bytes(name: impl Into<String>, budget: u64, oversize: Oversize) -> Self {
        let budget = budget.div_ceil(KIB).max(1).saturating_mul(KIB);
        Self::new(
            name,
            State::Bytes {
                budget: Arc::new(Budget::new(budget)),
                oversize,
            },
        )
    }

    /// A token bucket refilling `per_second` tokens a second and holding at
    /// most `burst`, paced [`DEFAULT_MARGIN`] under `per_second` (see
    /// [`rate_with_margin`](Self::rate_with_margin)). Returns `None` when
    /// `per_second` is not a positive, finite number.
    pub fn rate(
        name: impl Into<String>,
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
    ) -> Option<Self> {
        Self::rate_with(name, per_second, burst, key, DEFAULT_MARGIN, None)
    }

    /// A token bucket as [`rate`](Self::rate), paced `margin` (a share of
    /// `per_second`, from 0 to 1) under it: a server that counts a strict
    /// window of a second then still finds no more than `per_second` in
    /// one when requests arrive up to `margin` seconds early or late. A
    /// request refused at the bucket's rate widens the margin, by
    /// [`MARGIN`]'s rule. Returns `None` when `per_second` is not a
    /// positive, finite number or `margin` is not in `[0, 1)`.
    pub fn rate_with_margin(
        name: impl Into<String>,
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
        margin: f64,
    ) -> Option<Self> {
        Self::rate_with(name, per_second, burst, key, margin, None)
    }

    fn rate_with(
        name: impl Into<String>,
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
        margin: f64,
        external: Option<Arc<dyn RateBackend>>,
    ) -> Option<Self> {
        let rate = Rate::new(per_second, burst, key, margin, external)?;
        Some(Self::new(name, State::Rate(rate)))
    }

    fn new(name: impl Into<String>, state: State) -> Self {
        Limiter {
            inner: Arc::new(Inner {
                name: name.into(),
                state,
                gauge: Arc::new(Gauge::default()),
            }),
        }
    }

    /// A rate limiter whose bucket is kept by `backend` (shared by every
    /// process of a run), not in this process; `backend` was made for
    /// `per_second` less `margin` (see [`Self::paced_per_second`]).
    pub fn rate_shared_by(
        name: impl Into<String>,
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
        margin: f64,
        backend: Arc<dyn RateBackend>,
    ) -> Option<Self> {
        Self::rate_with(name, per_second, burst, key, margin, Some(backend))
    }

    /// What a rate of `per_second` paced `margin` under it gives: the rate a
    /// global bucket's backend is made for. `None` when either is out of
    /// range (see [`rate_with_margin`](Self::rate_with_margin)).
    pub fn paced_per_second(per_second: f64, margin: f64) -> Option<f64> {
        Rate::new(per_second, NonZeroU32::MIN, RateKey::All, margin, None)
            .map(|r| r.paced_per_second())
    }

    /// The resource name (`cpu`, `memory`, `connections`, ...).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Count, bytes or rate.
    pub fn kind(&self) -> LimiterKind {
        match self.inner.state {
            State::Count(_) => LimiterKind::Count,
            State::Bytes { .. } => LimiterKind::Bytes,
            State::Rate(_) => LimiterKind::Rate,
        }
    }

    /// Slots for a count limiter, bytes for a byte budget, the burst for a rate.
    pub fn capacity(&self) -> u64 {
        match &self.inner.state {
            State::Count(count) => count.capacity(),
            State::Bytes { budget, .. } => budget.capacity(),
            State::Rate(rate) => u64::from(rate.burst),
        }
    }

    /// Tokens per second, for a rate limiter.
    pub fn per_second(&self) -> Option<f64> {
        match &self.inner.state {
            State::Rate(rate) => Some(rate.per_second),
            _ => None,
        }
    }

    /// The share under `per_second` a rate limiter paces at before it
    /// learns any (`None` for other kinds).
    pub fn margin(&self) -> Option<f64> {
        match &self.inner.state {
            State::Rate(rate) => Some(rate.margin),
            _ => None,
        }
    }

    /// How a rate limiter picks its bucket (`None` for other kinds).
    pub fn rate_key(&self) -> Option<RateKey> {
        match &self.inner.state {
            State::Rate(rate) => Some(rate.key),
            _ => None,
        }
    }

    /// What the policy is for items larger than a whole byte budget.
    pub fn oversize(&self) -> Option<Oversize> {
        match &self.inner.state {
            State::Bytes { oversize, .. } => Some(*oversize),
            _ => None,
        }
    }

    /// Slots or bytes held right now (0 for a rate limiter).
    pub fn in_use(&self) -> u64 {
        self.inner.gauge.in_use.load(Ordering::Acquire)
    }

    /// The most slots or bytes ever held at once (0 for a rate limiter).
    pub fn peak_in_use(&self) -> u64 {
        self.inner.gauge.peak.load(Ordering::Acquire)
    }

    /// Total time spent waiting to acquire this limiter, over all items.
    pub fn total_wait(&self) -> Duration {
        self.inner.gauge.total_wait()
    }

    /// How long, in all, at least one item was waiting for this limiter
    /// (it was at capacity), up to now.
    pub fn contended(&self) -> Duration {
        self.inner.gauge.contended()
    }

    /// Items waiting for this limiter right now.
    pub fn waiters(&self) -> u64 {
        self.inner.gauge.waiters()
    }

    /// The 95th percentile of the wait over every acquisition (most take
    /// none).
    pub fn p95_wait(&self) -> Duration {
        self.inner.gauge.p95_wait()
    }

    /// Starts counting this limiter's figures afresh for one run (or any
    /// span): the [`Window`]'s figures cover only what happens while it is
    /// open. A limiter shared by several runs reports each its own.
    pub fn window(&self) -> Window {
        self.inner.gauge.open_window()
    }

    /// Slots or bytes free right now; equals [`capacity`](Self::capacity) when
    /// nothing is held. For a rate limiter, the burst.
    pub fn available(&self) -> u64 {
        match &self.inner.state {
            State::Count(count) => count.available(),
            State::Bytes { budget, .. } => budget.available(),
            State::Rate(rate) => u64::from(rate.burst),
        }
    }

    /// Waits for a share of this limiter.
    ///
    /// - count: one slot (`amount` is ignored);
    /// - bytes: `amount` bytes, rounded up to KiB; more than the whole budget
    ///   follows the limiter's [`Oversize`] policy;
    /// - rate: one token from the bucket for `key` (ignored unless the limiter
    ///   is keyed); returns `Ok(None)` as a token is not held.
    ///
    /// Cancel-safe: dropping the future gives nothing back because nothing
    /// was taken.
    pub async fn acquire(
        &self,
        amount: u64,
        key: Option<&str>,
    ) -> Result<Option<Ticket>, LimitError> {
        match &self.inner.state {
            State::Count(count) => self.take(&count.sem, 1, 1).await.map(Some),
            State::Bytes { .. } => self.resize(None, amount).await.map(Some),
            State::Rate(rate) => rate
                .acquire(&self.inner.name, &self.inner.gauge, key)
                .await
                .map(|()| None),
        }
    }

    /// Tells a rate limiter to hand out no token for `key` before `delay` has
    /// passed (a server answered 429 or 503 with `Retry-After`): every item
    /// that draws on that bucket slows, not only the one that was refused.
    /// No effect on other kinds.
    pub fn pause_key(&self, key: Option<&str>, delay: Duration) {
        if let State::Rate(rate) = &self.inner.state {
            rate.pause(key, delay);
        }
    }

    /// Tells a rate limiter that a request which drew on its bucket for
    /// `key` was refused (429, 503), with the server's `Retry-After` if it
    /// gave one: the bucket pauses for it (as [`pause_key`](Self::pause_key))
    /// and, when the request is at the bucket's own rate (a token waited
    /// for its time within the last second), keeps a wider margin
    /// ([`MARGIN`]). Whether it was at the bucket's rate; `false` for
    /// other kinds.
    pub fn refused(&self, key: Option<&str>, retry_after: Option<Duration>) -> bool {
        match &self.inner.state {
            State::Rate(rate) => rate.refused(&self.inner.name, key, retry_after),
            _ => false,
        }
    }

    async fn take(
        &self,
        sem: &Arc<Semaphore>,
        permits: u32,
        gauge: u64,
    ) -> Result<Ticket, LimitError> {
        let permit = match sem.clone().try_acquire_many_owned(permits) {
            Ok(p) => {
                self.inner.gauge.immediate.fetch_add(1, Ordering::Relaxed);
                p
            }
            Err(tokio::sync::TryAcquireError::Closed) => {
                return Err(LimitError::Closed(self.inner.name.clone()))
            }
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                let _waiting = self.inner.gauge.begin_wait();
                sem.clone()
                    .acquire_many_owned(permits)
                    .await
                    .map_err(|_| LimitError::Closed(self.inner.name.clone()))?
            }
        };
        self.inner.gauge.add(gauge);
        Ok(Ticket::counted(self.clone(), gauge, permit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).expect("test uses non-zero")
    }

    #[tokio::test]
    async fn tickets_give_back_on_drop() {
        let l = Limiter::count("cpu", nz(2));
        let a = l.acquire(1, None).await.unwrap();
        let b = l.acquire(1, None).await.unwrap();
        assert_eq!(l.available(), 0);
        assert_eq!(l.in_use(), 2);
        drop(a);
        drop(b);
        assert_eq!(l.available(), 2);
        assert_eq!(l.in_use(), 0);
        assert_eq!(l.peak_in_use(), 2);
    }

    #[tokio::test]
    async fn bytes_round_up_to_kib_and_enforce_oversize_policy() {
        let fail = Limiter::bytes("memory", 10 * 1024, Oversize::Fail);
        let t = fail.acquire(1, None).await.unwrap().unwrap();
        assert_eq!(t.amount(), 1024);
        drop(t);
        let err = fail.acquire(10 * 1024 + 1, None).await.unwrap_err();
        assert!(matches!(err, LimitError::OverBudget { .. }), "{err}");
        assert!(err.to_string().contains("memory"));

        let alone = Limiter::bytes("memory", 10 * 1024, Oversize::Alone);
        let t = alone.acquire(1 << 30, None).await.unwrap().unwrap();
        assert_eq!(alone.available(), 0);
        assert_eq!(t.amount(), 10 * 1024);
    }

    #[test]
    fn rate_rejects_non_positive() {
        assert!(Limiter::rate("r", 0.0, nz(1), RateKey::All).is_none());
        assert!(Limiter::rate("r", f64::NAN, nz(1), RateKey::All).is_none());
        assert!(Limiter::rate("r", -1.0, nz(1), RateKey::All).is_none());
    }
}
