//! The rate kind: a token bucket (governor, on tokio's clock) refilling
//! `per_second` tokens and holding at most `burst`, one bucket for all or
//! one per key (the remote host), or kept outside this process by a
//! [`RateBackend`] (`scope = "global"`). It holds nothing, so it gives no
//! ticket; a server's `Retry-After` pauses a bucket for every item.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};
use serde::Serialize;

use super::gauge::Gauge;
use super::LimitError;

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

/// A rate limiter's own state.
pub(super) struct Rate {
    buckets: Buckets,
    clock: TokioClock,
    pub(super) per_second: f64,
    pub(super) burst: u32,
    pub(super) key: RateKey,
    /// Kept elsewhere (`scope = "global"`) instead of in `buckets`.
    external: Option<Arc<dyn RateBackend>>,
    /// Per key, a time before which no token is handed out (set when a
    /// server says `Retry-After`).
    paused_until: Mutex<HashMap<String, tokio::time::Instant>>,
}

impl Rate {
    /// `None` when `per_second` is not a positive, finite number or too
    /// small to schedule.
    pub(super) fn new(
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
        Some(Rate {
            buckets,
            clock,
            per_second,
            burst: burst.get(),
            key,
            external,
            paused_until: Mutex::new(HashMap::new()),
        })
    }

    /// The bucket an item with this key draws on.
    fn bucket(&self, key: Option<&str>) -> String {
        match self.key {
            RateKey::All => String::new(),
            RateKey::Host => key.unwrap_or_default().to_owned(),
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
            let _waiting = gauge.begin_wait();
            // The backend is the embedder's code: a panic in it is
            // a failed try (transient), not a dead worker.
            let asked = crate::guard::guarded_async(backend.acquire(&bucket))
                .await
                .unwrap_or_else(|text| {
                    Err(RateBackendError(format!(
                        "the rate backend panicked: {text}"
                    )))
                });
            return asked.map_err(|message| LimitError::Backend {
                limiter: name.to_owned(),
                message: message.to_string(),
            });
        }
        let mut waiting = None;
        loop {
            let resume = self
                .paused_until
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .get(&bucket)
                .copied();
            if let Some(at) = resume {
                if at > tokio::time::Instant::now() {
                    waiting.get_or_insert_with(|| gauge.begin_wait());
                    tokio::time::sleep_until(at).await;
                    continue;
                }
            }
            match self.buckets.check_key(&bucket) {
                Ok(()) => break,
                Err(not_until) => {
                    waiting.get_or_insert_with(|| gauge.begin_wait());
                    tokio::time::sleep(not_until.wait_time_from(self.clock.now())).await
                }
            }
        }
        if waiting.is_none() {
            gauge.immediate.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Hands out no token for `key` before `delay` has passed, here and,
    /// for a rate kept elsewhere, in its backend.
    pub(super) fn pause(&self, key: Option<&str>, delay: Duration) {
        let bucket = self.bucket(key);
        if let Some(backend) = &self.external {
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
        let mut map = self
            .paused_until
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = map.entry(bucket).or_insert(until);
        *entry = (*entry).max(until);
    }
}
