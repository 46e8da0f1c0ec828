//! Global rate limits: a token bucket per limiter and key, kept in Redis.

use std::sync::Arc;
use std::time::Duration;

use warpline_engine::limit::{RateBackend, RateBackendError};

use super::link::Link;

/// A token bucket in Redis (GCRA, Redis's clock), one per limiter and key.
///
/// Its commands go on the coordinator's command connection, never behind a
/// blocking read of the work stream, and each token costs one script call:
/// the script reserves the next token and says when it is due, and the
/// caller sleeps until then (no polling, however many wait).
pub(crate) struct GlobalRate {
    pub(crate) link: Arc<Link>,
    /// The GCRA script, hashed once (it is run for every token).
    pub(crate) script: redis::Script,
    pub(crate) prefix: String,
    pub(crate) name: String,
    pub(crate) period_us: u64,
    pub(crate) burst: u64,
}

impl GlobalRate {
    fn key(&self, part: &str, key: &str) -> String {
        format!("{}:{part}:{}:{key}", self.prefix, self.name)
    }
}

#[warpline_engine::async_trait]
impl RateBackend for GlobalRate {
    async fn acquire(&self, key: &str) -> Result<(), RateBackendError> {
        let (rate, pause) = (self.key("rate", key), self.key("pause", key));
        // Sent again when its reply was lost: the lost call's token goes
        // unused, which slows the bucket by one period, once.
        let wait_us: i64 = self
            .link
            .run("take a global rate token", |mut conn| {
                let mut call = self.script.prepare_invoke();
                call.key(&rate)
                    .key(&pause)
                    .arg(self.period_us)
                    .arg(self.burst);
                async move { call.invoke_async(&mut conn).await }
            })
            .await
            .map_err(|e| RateBackendError(e.to_string()))?;
        if wait_us > 0 {
            tokio::time::sleep(Duration::from_micros(wait_us.unsigned_abs())).await;
        }
        Ok(())
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
}
