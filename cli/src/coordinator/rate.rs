//! Global rate limits: a token bucket per limiter and key, kept in Redis,
//! with the margin it learns from refusals.

use std::sync::Arc;
use std::time::Duration;

use warpline_engine::limit::{RateBackend, RateBackendError, MARGIN};

use super::link::Link;

/// A token bucket in Redis (GCRA, Redis's clock), one per limiter and key.
///
/// Its commands go on the coordinator's command connection, never behind a
/// blocking read of the work stream, and each token costs one script call:
/// the script reserves the next token and says when it is due, and the
/// caller sleeps until then (no polling, however many wait). The margin it
/// learns from refusals is kept beside it (`:margin:NAME:KEY`) and read by
/// the same script, so every worker paces at it from its next token.
pub(crate) struct GlobalRate {
    pub(crate) link: Arc<Link>,
    /// The GCRA script, hashed once (it is run for every token).
    pub(crate) script: redis::Script,
    /// The script that widens the learnt margin.
    pub(crate) widen: redis::Script,
    pub(crate) prefix: String,
    pub(crate) name: String,
    pub(crate) period_us: u64,
    pub(crate) burst: u64,
}

/// [`MARGIN`]'s hold and creep in the scripts' units (µs, share per µs).
fn hold_and_creep() -> (u64, f64) {
    (
        MARGIN.hold.as_micros() as u64,
        MARGIN.creep_per_s / 1_000_000.0,
    )
}

impl GlobalRate {
    fn key(&self, part: &str, key: &str) -> String {
        format!("{}:{part}:{}:{key}", self.prefix, self.name)
    }

    /// Reserves the next token of bucket `key`: how long until its time.
    pub(crate) async fn reserve(&self, key: &str) -> Result<Duration, RateBackendError> {
        let keys = [
            self.key("rate", key),
            self.key("pause", key),
            self.key("margin", key),
        ];
        let (hold, creep) = hold_and_creep();
        // Sent again when its reply was lost: the lost call's token goes
        // unused, which slows the bucket by one period, once.
        let wait_us: i64 = self
            .link
            .run("take a global rate token", |mut conn| {
                let mut call = self.script.prepare_invoke();
                call.key(&keys[..])
                    .arg(self.period_us)
                    .arg(self.burst)
                    .arg(hold)
                    .arg(creep);
                async move { call.invoke_async(&mut conn).await }
            })
            .await
            .map_err(|e| RateBackendError(e.to_string()))?;
        Ok(Duration::from_micros(wait_us.unsigned_abs()))
    }
}

#[warpline_engine::async_trait]
impl RateBackend for GlobalRate {
    async fn acquire(&self, key: &str) -> Result<Duration, RateBackendError> {
        let wait = self.reserve(key).await?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(wait)
    }

    async fn pause(&self, key: &str, delay: Duration) -> Result<(), RateBackendError> {
        let ms = delay.as_millis().max(1) as u64;
        let pause = self.key("pause", key);
        self.link
            .query::<()>(
                "pause a global rate",
                redis::cmd("SET").arg(&pause).arg(1).arg("PX").arg(ms),
            )
            .await
            .map_err(|e| RateBackendError(e.to_string()))
    }

    async fn widen(&self, key: &str) -> Result<f64, RateBackendError> {
        let margin = self.key("margin", key);
        let (hold, creep) = hold_and_creep();
        let learnt: String = self
            .link
            .run("widen a global rate's margin", |mut conn| {
                let mut call = self.widen.prepare_invoke();
                call.key(&margin)
                    .arg(MARGIN.step)
                    .arg(MARGIN.max)
                    .arg(hold)
                    .arg(creep)
                    .arg(MARGIN.one_signal.as_micros() as u64);
                async move { call.invoke_async(&mut conn).await }
            })
            .await
            .map_err(|e| RateBackendError(e.to_string()))?;
        learnt
            .parse()
            .map_err(|_| RateBackendError(format!("the margin script answered {learnt:?}")))
    }
}
