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
//!   per key such as the remote host. It holds nothing, so it has no ticket.
//!
//! Acquiring a count or bytes limiter yields a [`Ticket`], which releases its
//! share when dropped, so an error, a panic or a cancellation can never leak
//! a permit. Several limiters are always acquired in one global order (their
//! position in the pipeline's [`Limits`], the order of declaration), which
//! makes deadlock between stages impossible.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod budget;
mod gauge;
mod set;
mod ticket;

use budget::Budget;
pub use budget::Priority;
use gauge::Gauge;
pub use gauge::{Window, WindowFigures};
pub use set::{DuplicateLimiter, Limits};
pub(crate) use ticket::Charged;
pub use ticket::Ticket;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};
use serde::Serialize;
use tokio::sync::Semaphore;

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

/// A token bucket kept outside this process, shared by every worker of a
/// run on every machine (for example in Redis, with Redis's own clock).
#[async_trait::async_trait]
pub trait RateBackend: Send + Sync + 'static {
    /// Waits until a token of the bucket `key` may be taken, and takes it.
    async fn acquire(&self, key: &str) -> Result<(), RateBackendError>;

    /// Hands out no token of `key` before `delay` has passed (a server
    /// said `Retry-After`), for every worker.
    async fn pause(&self, key: &str, delay: Duration) -> Result<(), RateBackendError>;
}

/// Why a rate kept elsewhere could not be reached, said by the backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RateBackendError(pub String);

/// Makes the backend of a global rate limiter: `(name, per_second, burst)`.
pub type RateBackendFactory = Arc<dyn Fn(&str, f64, u32) -> Arc<dyn RateBackend> + Send + Sync>;

crate::word_setting!(Oversize, "\"fail\" or \"alone\"", {
    "fail" => Oversize::Fail,
    "alone" => Oversize::Alone,
});

/// How a rate limiter chooses its bucket: `per = "all"` (the default) or
/// `"host"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum RateKey {
    /// One bucket for everything.
    #[default]
    Global,
    /// One bucket per remote host of the item's source.
    Host,
}

crate::word_setting!(RateKey, "\"host\" (one bucket per remote host) or \"all\"", {
    "host" => RateKey::Host,
    "all" => RateKey::Global,
});

/// Who keeps a rate limiter's bucket: `scope = "local"` (the default: this
/// process) or `"global"` (the coordinator, for every worker of a run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum RateScope {
    /// This process.
    #[default]
    Local,
    /// The coordinator, shared by every worker of the run.
    Global,
}

crate::word_setting!(RateScope, "\"local\" or \"global\"", {
    "local" => RateScope::Local,
    "global" => RateScope::Global,
});

/// A clock for governor that reads tokio's clock, so rate limits follow
/// paused time in tests and `tokio::time::sleep` waits exactly as long as
/// governor asks.
#[derive(Debug, Clone)]
struct TokioClock {
    base: tokio::time::Instant,
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(tokio::time::Instant::now().saturating_duration_since(self.base))
    }
}

type Buckets = RateLimiter<String, HashMapStateStore<String>, TokioClock, NoOpMiddleware<Nanos>>;

enum State {
    Count {
        sem: Arc<Semaphore>,
        permits: u32,
    },
    Bytes {
        budget: Arc<Budget>,
        oversize: Oversize,
    },
    Rate {
        buckets: Buckets,
        clock: TokioClock,
        per_second: f64,
        burst: u32,
        key: RateKey,
        /// Kept elsewhere (`scope = "global"`) instead of in `buckets`.
        external: Option<Arc<dyn RateBackend>>,
        /// Per key, a time before which no token is handed out (set when a
        /// server says `Retry-After`).
        paused_until: Mutex<HashMap<String, tokio::time::Instant>>,
    },
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
        let permits = permits.get();
        Self::new(
            name,
            State::Count {
                sem: Arc::new(Semaphore::new(permits as usize)),
                permits,
            },
        )
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
    /// most `burst`. Returns `None` when `per_second` is not a positive,
    /// finite number.
    pub fn rate(
        name: impl Into<String>,
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
    ) -> Option<Self> {
        Self::rate_with(name, per_second, burst, key, None)
    }

    fn rate_with(
        name: impl Into<String>,
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
        external: Option<Arc<dyn RateBackend>>,
    ) -> Option<Self> {
        if !(per_second.is_finite() && per_second > 0.0) {
            return None;
        }
        let period = Duration::try_from_secs_f64(1.0 / per_second).ok()?;
        let quota = Quota::with_period(period)?.allow_burst(burst);
        let clock = TokioClock {
            base: tokio::time::Instant::now(),
        };
        let buckets = RateLimiter::new(quota, HashMapStateStore::default(), clock.clone());
        Some(Self::new(
            name,
            State::Rate {
                buckets,
                clock,
                per_second,
                burst: burst.get(),
                key,
                external,
                paused_until: Mutex::new(HashMap::new()),
            },
        ))
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
    /// process of a run), not in this process.
    pub fn rate_shared_by(
        name: impl Into<String>,
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
        backend: Arc<dyn RateBackend>,
    ) -> Option<Self> {
        Self::rate_with(name, per_second, burst, key, Some(backend))
    }

    /// The resource name (`cpu`, `memory`, `connections`, ...).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Count, bytes or rate.
    pub fn kind(&self) -> LimiterKind {
        match self.inner.state {
            State::Count { .. } => LimiterKind::Count,
            State::Bytes { .. } => LimiterKind::Bytes,
            State::Rate { .. } => LimiterKind::Rate,
        }
    }

    /// Slots for a count limiter, bytes for a byte budget, the burst for a rate.
    pub fn capacity(&self) -> u64 {
        match &self.inner.state {
            State::Count { permits, .. } => u64::from(*permits),
            State::Bytes { budget, .. } => budget.capacity(),
            State::Rate { burst, .. } => u64::from(*burst),
        }
    }

    /// Tokens per second, for a rate limiter.
    pub fn per_second(&self) -> Option<f64> {
        match &self.inner.state {
            State::Rate { per_second, .. } => Some(*per_second),
            _ => None,
        }
    }

    /// How a rate limiter picks its bucket (`None` for other kinds).
    pub fn rate_key(&self) -> Option<RateKey> {
        match &self.inner.state {
            State::Rate { key, .. } => Some(*key),
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
            State::Count { sem, .. } => sem.available_permits() as u64,
            State::Bytes { budget, .. } => budget.available(),
            State::Rate { burst, .. } => u64::from(*burst),
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
            State::Count { sem, .. } => self.take(sem, 1, 1).await.map(Some),
            State::Bytes { .. } => self.resize(None, amount).await.map(Some),
            State::Rate {
                buckets,
                clock,
                key: keying,
                paused_until,
                external,
                ..
            } => {
                let bucket = match keying {
                    RateKey::Global => String::new(),
                    RateKey::Host => key.unwrap_or_default().to_owned(),
                };
                if let Some(backend) = external {
                    let _waiting = self.inner.gauge.begin_wait();
                    // The backend is the embedder's code: a panic in it is
                    // a failed try (transient), not a dead worker.
                    let asked = crate::guard::guarded_async(backend.acquire(&bucket))
                        .await
                        .unwrap_or_else(|text| {
                            Err(RateBackendError(format!(
                                "the rate backend panicked: {text}"
                            )))
                        });
                    return asked.map(|_| None).map_err(|message| LimitError::Backend {
                        limiter: self.inner.name.clone(),
                        message: message.to_string(),
                    });
                }
                let mut waiting = None;
                loop {
                    let resume = paused_until
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .get(&bucket)
                        .copied();
                    if let Some(at) = resume {
                        if at > tokio::time::Instant::now() {
                            waiting.get_or_insert_with(|| self.inner.gauge.begin_wait());
                            tokio::time::sleep_until(at).await;
                            continue;
                        }
                    }
                    match buckets.check_key(&bucket) {
                        Ok(()) => break,
                        Err(not_until) => {
                            waiting.get_or_insert_with(|| self.inner.gauge.begin_wait());
                            tokio::time::sleep(not_until.wait_time_from(clock.now())).await
                        }
                    }
                }
                if waiting.is_none() {
                    self.inner.gauge.immediate.fetch_add(1, Ordering::Relaxed);
                }
                Ok(None)
            }
        }
    }

    /// Tells a rate limiter to hand out no token for `key` before `delay` has
    /// passed (a server answered 429 or 503 with `Retry-After`): every item
    /// that draws on that bucket slows, not only the one that was refused.
    /// No effect on other kinds.
    pub fn pause_key(&self, key: Option<&str>, delay: Duration) {
        if let State::Rate {
            key: keying,
            paused_until,
            external,
            ..
        } = &self.inner.state
        {
            let bucket = match keying {
                RateKey::Global => String::new(),
                RateKey::Host => key.unwrap_or_default().to_owned(),
            };
            if let Some(backend) = external {
                let (backend, bucket) = (Arc::clone(backend), bucket.clone());
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        if let Err(e) = backend.pause(&bucket, delay).await {
                            tracing::warn!("cannot pause the global rate bucket {bucket:?}: {e}");
                        }
                    });
                }
            }
            let until = tokio::time::Instant::now() + delay;
            let mut map = paused_until
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let entry = map.entry(bucket).or_insert(until);
            *entry = (*entry).max(until);
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
        assert!(Limiter::rate("r", 0.0, nz(1), RateKey::Global).is_none());
        assert!(Limiter::rate("r", f64::NAN, nz(1), RateKey::Global).is_none());
        assert!(Limiter::rate("r", -1.0, nz(1), RateKey::Global).is_none());
    }
}
