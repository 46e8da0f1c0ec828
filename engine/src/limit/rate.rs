//! The rate kind: a token bucket (GCRA on tokio's clock) refilling
//! `per_second` tokens and holding at most `burst`, one bucket for all or
//! one per key (the remote host), or kept outside this process by a
//! [`RateBackend`] (`scope = "global"`). It holds nothing, so it gives no
//! ticket; a server's `Retry-After` pauses a bucket for every item.
//!
//! A bucket paces a margin under `per_second` (`margin.rs`), which a
//! refusal of a request that waited for its token widens. Its rate so
//! changes while it runs, which governor's fixed quota cannot do: the GCRA
//! is written out here, as the coordinator's script writes it for Redis.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::gauge::Gauge;
use super::margin::Learned;
use super::LimitError;

/// A token bucket kept outside this process, shared by every worker of a
/// run on every machine (for example in Redis, with Redis's own clock).
///
/// It paces at the rate it was made with (`per_second` less the limiter's
/// configured margin) less the margin it learns from [`widen`](Self::widen)
/// calls, by [`MARGIN`](super::MARGIN)'s rule.
#[async_trait::async_trait]
pub trait RateBackend: Send + Sync + 'static {
    /// Waits until a token of the bucket `key` may be taken, and takes it;
    /// how long it waited for the token's time (zero: it was due).
    async fn acquire(&self, key: &str) -> Result<Duration, RateBackendError>;

    /// Hands out no token of `key` before `delay` has passed (a server
    /// said `Retry-After`), for every worker.
    async fn pause(&self, key: &str, delay: Duration) -> Result<(), RateBackendError>;

    /// A request that waited for a token of `key` was refused: the bucket
    /// keeps a wider margin under its rate, for every worker. Returns the
    /// margin it learnt (a share of its rate); a backend that learns none
    /// returns 0, as the default does.
    async fn widen(&self, key: &str) -> Result<f64, RateBackendError> {
        let _ = key;
        Ok(0.0)
    }
}

/// Why a rate kept elsewhere could not be reached, said by the backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RateBackendError(pub String);

/// Makes the backend of a global rate limiter: `(name, per_second, burst)`,
/// `per_second` already less the limiter's configured margin.
pub type RateBackendFactory = Arc<dyn Fn(&str, f64, u32) -> Arc<dyn RateBackend> + Send + Sync>;

/// How a rate limiter chooses its bucket: `per = "all"` (the default) or
/// `"host"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum RateKey {
    /// One bucket for everything (`per = "all"`; whether that bucket is
    /// kept here or by the coordinator is [`RateScope`]).
    #[default]
    All,
    /// One bucket per remote host of the item's source.
    Host,
}

crate::word_setting!(RateKey, "\"host\" (one bucket per remote host) or \"all\"", {
    "host" => RateKey::Host,
    "all" => RateKey::All,
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

/// A refusal this soon after a token that waited is at the bucket's rate.
const AT_RATE: Duration = Duration::from_secs(1);

/// One bucket's state.
#[derive(Debug, Default)]
struct Bucket {
    /// GCRA's theoretical arrival time: the next token is due at it, less
    /// the burst's tolerance.
    tat: Option<Instant>,
    /// No token before this (a server said `Retry-After`).
    paused_until: Option<Instant>,
    /// The margin learnt from refusals (a local bucket's).
    learned: Learned,
    /// When a token last waited for its time: the bucket set the pace.
    paced: Option<Instant>,
}

/// Why a token cannot be taken yet, and until when.
enum Wait {
    Paused(Instant),
    Rate(Instant),
}

/// A rate limiter's own state.
pub(super) struct Rate {
    pub(super) per_second: f64,
    pub(super) burst: u32,
    pub(super) key: RateKey,
    /// The share under `per_second` it paces at, before any it learns.
    pub(super) margin: f64,
    /// The time between tokens at `margin`.
    period: Duration,
    /// How late a token may be taken and still not delay the next: a
    /// quarter of the margin's share of a second (the rest is for the
    /// network's jitter), at least the timer's millisecond.
    catch_up: Duration,
    /// Kept elsewhere (`scope = "global"`) instead of in `buckets`.
    external: Option<Arc<dyn RateBackend>>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Rate {
    /// `None` when `per_second` is not a positive, finite number or too
    /// small to schedule, or `margin` is not in `[0, 1)`.
    pub(super) fn new(
        per_second: f64,
        burst: NonZeroU32,
        key: RateKey,
        margin: f64,
        external: Option<Arc<dyn RateBackend>>,
    ) -> Option<Self> {
        if !(per_second.is_finite() && per_second > 0.0 && (0.0..1.0).contains(&margin)) {
            return None;
        }
        let period = Duration::try_from_secs_f64(1.0 / (per_second * (1.0 - margin))).ok()?;
        if period.is_zero() {
            return None;
        }
        Some(Rate {
            per_second,
            burst: burst.get(),
            key,
            margin,
            period,
            catch_up: Duration::from_secs_f64(margin / 4.0).max(Duration::from_millis(1)),
            external,
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// What an external backend paces at, before any margin it learns.
    pub(super) fn paced_per_second(&self) -> f64 {
        1.0 / self.period.as_secs_f64()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bucket>> {
        // Every update leaves the map whole: a poisoned lock's data is fine.
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bucket an item with this key draws on.
    fn bucket(&self, key: Option<&str>) -> String {
        match self.key {
            RateKey::All => String::new(),
            RateKey::Host => key.unwrap_or_default().to_owned(),
        }
    }

    /// The time between tokens with `learned` more margin.
    fn period_at(&self, learned: f64) -> Duration {
        self.period.div_f64(1.0 - learned)
    }

    /// The burst's tolerance: how far ahead of its time a token may go.
    fn tolerance(&self, period: Duration) -> Duration {
        period * (self.burst - 1)
    }

    /// Takes a token of `bucket` now (`waited`: its taker waited for the
    /// rate), or says until when to wait.
    fn try_take(&self, bucket: &str, waited: bool) -> Result<(), Wait> {
        let mut map = self.lock();
        if !map.contains_key(bucket) {
            map.insert(bucket.to_owned(), Bucket::default());
        }
        let Some(b) = map.get_mut(bucket) else {
            return Ok(());
        };
        let now = Instant::now();
        if let Some(p) = b.paused_until.filter(|p| *p > now) {
            return Err(Wait::Paused(p));
        }
        let period = self.period_at(b.learned.at(now));
        // A token taken late (its taker woke late) does not delay the next
        // by as much, up to `catch_up`: the pace holds on a loaded machine.
        let late = now.checked_sub(self.catch_up).unwrap_or(now);
        let tat = b.tat.map_or(now, |t| t.max(late));
        match tat.checked_sub(self.tolerance(period)) {
            Some(at) if at > now => Err(Wait::Rate(at)),
            _ => {
                b.tat = Some(tat + period);
                if waited {
                    b.paced = Some(now);
                }
                Ok(())
            }
        }
    }

    /// Waits for a token of the bucket for `key` and takes it; the limiter
    /// `name`'s gauge counts the wait.
    pub(super) async fn acquire(
        &self,
        name: &str,
        gauge: &Gauge,
        key: Option<&str>,
    ) -> Result<(), LimitError> {
        let bucket = self.bucket(key);
        if let Some(backend) = &self.external {
            return self.acquire_external(name, gauge, backend, &bucket).await;
        }
        let mut waiting = None;
        let mut waited = false;
        loop {
            let at = match self.try_take(&bucket, waited) {
                Ok(()) => break,
                Err(Wait::Paused(at)) => at,
                Err(Wait::Rate(at)) => {
                    waited = true;
                    at
                }
            };
            waiting.get_or_insert_with(|| gauge.begin_wait());
            tokio::time::sleep_until(at).await;
        }
        if waiting.is_none() {
            gauge.immediate.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A token of a bucket kept by `backend`. A token whose time came
    /// while this process had paused the bucket (it was taken before the
    /// pause) is not used: another is taken once the pause is over.
    async fn acquire_external(
        &self,
        name: &str,
        gauge: &Gauge,
        backend: &Arc<dyn RateBackend>,
        bucket: &str,
    ) -> Result<(), LimitError> {
        let _waiting = gauge.begin_wait();
        loop {
            // The backend is the embedder's code: a panic in it is a
            // failed try (transient), not a dead worker.
            let asked = crate::guard::guarded_async(backend.acquire(bucket))
                .await
                .unwrap_or_else(|text| {
                    Err(RateBackendError(format!(
                        "the rate backend panicked: {text}"
                    )))
                });
            let waited = asked.map_err(|message| LimitError::Backend {
                limiter: name.to_owned(),
                message: message.to_string(),
            })?;
            let now = Instant::now();
            let paused = {
                let mut map = self.lock();
                let b = map.entry(bucket.to_owned()).or_default();
                if !waited.is_zero() {
                    b.paced = Some(now);
                }
                b.paused_until.filter(|p| *p > now)
            };
            match paused {
                None => return Ok(()),
                Some(until) => tokio::time::sleep_until(until).await,
            }
        }
    }

    /// Pauses `b` until `delay` from `now`; when it resumes, tokens come at
    /// the rate, not in a burst (the server's window is full again soon
    /// enough).
    fn pause_bucket(&self, b: &mut Bucket, now: Instant, delay: Duration) {
        let until = now + delay;
        let until = b.paused_until.map_or(until, |p| p.max(until));
        b.paused_until = Some(until);
        let resume = until + self.tolerance(self.period_at(b.learned.at(until)));
        b.tat = Some(b.tat.map_or(resume, |t| t.max(resume)));
    }

    /// Hands out no token for `key` before `delay` has passed, here and,
    /// for a rate kept elsewhere, in its backend.
    pub(super) fn pause(&self, key: Option<&str>, delay: Duration) {
        let bucket = self.bucket(key);
        if let Some(backend) = &self.external {
            let (backend, bucket) = (Arc::clone(backend), bucket.clone());
            spawn(async move {
                if let Err(e) = backend.pause(&bucket, delay).await {
                    tracing::warn!("cannot pause the global rate bucket {bucket:?}: {e}");
                }
            });
        }
        let mut map = self.lock();
        let b = map.entry(bucket).or_default();
        self.pause_bucket(b, Instant::now(), delay);
    }

    /// A request that drew on the bucket for `key` was refused (429, 503),
    /// with the server's `Retry-After` if it gave one: the bucket pauses
    /// for it and, when the refused request is at the bucket's own rate (a
    /// token waited for its time within [`AT_RATE`]), widens its margin.
    /// Whether it was at the bucket's rate.
    pub(super) fn refused(
        &self,
        name: &str,
        key: Option<&str>,
        retry_after: Option<Duration>,
    ) -> bool {
        let bucket = self.bucket(key);
        let now = Instant::now();
        let (at_rate, widened) = {
            let mut map = self.lock();
            let b = map.entry(bucket.clone()).or_default();
            if let Some(delay) = retry_after {
                self.pause_bucket(b, now, delay);
            }
            let at_rate = b
                .paced
                .is_some_and(|t| now.saturating_duration_since(t) <= AT_RATE);
            let widened = (at_rate && self.external.is_none())
                .then(|| b.learned.refused(now))
                .flatten();
            (at_rate, widened)
        };
        if let Some(learned) = widened {
            self.say_widened(name, &bucket, learned);
        }
        if let Some(backend) = &self.external {
            let backend = Arc::clone(backend);
            let (name, margin) = (name.to_owned(), self.margin);
            spawn(async move {
                if let Some(delay) = retry_after {
                    if let Err(e) = backend.pause(&bucket, delay).await {
                        tracing::warn!("cannot pause the global rate bucket {bucket:?}: {e}");
                    }
                }
                if at_rate {
                    match backend.widen(&bucket).await {
                        Ok(learned) => tracing::info!(
                            limiter = %name,
                            bucket = %bucket,
                            "refused at its rate: the global bucket now paces {:.1}% under per_second",
                            100.0 * (1.0 - (1.0 - margin) * (1.0 - learned))
                        ),
                        Err(e) => tracing::warn!(
                            "cannot widen the global rate bucket {bucket:?}'s margin: {e}"
                        ),
                    }
                }
            });
        }
        at_rate
    }

    fn say_widened(&self, name: &str, bucket: &str, learned: f64) {
        tracing::info!(
            limiter = %name,
            bucket = %bucket,
            "refused at its rate: the bucket now paces {:.1}% under per_second",
            100.0 * (1.0 - (1.0 - self.margin) * (1.0 - learned))
        );
    }
}

/// Runs `task` on the current runtime, if there is one (a pause or a
/// widening told to a backend is not waited for).
fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(task);
    }
}
