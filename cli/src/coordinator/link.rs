//! A connection to Redis that survives Redis: a command whose connection
//! broke (Redis restarted, a reply timed out while Redis was frozen) is
//! tried again on a new connection, with backoff, until Redis has been out
//! of reach for the run's `give_up_after`; then the coordinator is *lost*
//! and every later command fails at once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

/// The first pause between tries; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Whether Redis was out of reach (rather than refusing the command).
pub(crate) fn unreachable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || matches!(e.code(), Some("LOADING" | "TRYAGAIN" | "MASTERDOWN"))
}

/// How long Redis has been out of reach, shared by every link of one
/// coordinator: one that works again ends the outage for all.
#[derive(Debug)]
pub(crate) struct Outage {
    since: Mutex<Option<Instant>>,
    give_up_after: Duration,
    lost: Mutex<Option<String>>,
}

impl Outage {
    pub(crate) fn new(give_up_after: Duration) -> Arc<Self> {
        Arc::new(Outage {
            since: Mutex::new(None),
            give_up_after,
            lost: Mutex::new(None),
        })
    }

    /// Why the coordinator was given up, once it was.
    pub(crate) fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Gives up now: Redis is there, but the run cannot go on with it.
    pub(crate) fn give_up(&self, why: String) {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.get_or_insert(why);
    }

    fn ended(&self) {
        let was = self.since.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = was {
            tracing::warn!(
                "Redis is back after {:.1}s: carrying on",
                t.elapsed().as_secs_f64()
            );
        }
    }

    /// Notes a failure; `true` when Redis has now been out of reach too long.
    fn failed(&self, what: &str, e: &RedisError) -> bool {
        let since = *self
            .since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| {
                tracing::warn!(
                    "cannot {what}: {e}; trying again for up to {:?}",
                    self.give_up_after
                );
                Instant::now()
            });
        if since.elapsed() < self.give_up_after {
            return false;
        }
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.get_or_insert_with(|| {
            format!(
                "Redis was out of reach for {:?} (the last error, trying to {what}: {e})",
                self.give_up_after
            )
        });
        true
    }
}

/// One connection (replaced when it breaks) and the outage it shares.
pub(crate) struct Link {
    client: redis::Client,
    config: AsyncConnectionConfig,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    outage: Arc<Outage>,
    /// Failures seen on this link, counted so a reader can tell that a
    /// reply may have been lost.
    errors: AtomicU64,
}

impl Link {
    /// A link whose replies may take up to `response_timeout`.
    pub(crate) fn new(
        client: redis::Client,
        response_timeout: Duration,
        outage: Arc<Outage>,
    ) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(Duration::from_secs(2)));
        Link {
            client,
            config,
            conn: tokio::sync::Mutex::new(None),
            outage,
            errors: AtomicU64::new(0),
        }
    }

    /// Failures seen so far on this link.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::SeqCst)
    }

    pub(crate) fn outage(&self) -> &Arc<Outage> {
        &self.outage
    }

    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = &*slot {
            return Ok(c.clone());
        }
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// One try of `f`; a connection that failed is dropped, so the next try
    /// makes a new one.
    pub(crate) async fn once<T, F, Fut>(&self, f: F) -> Result<T, RedisError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let result = match self.connection().await {
            Ok(c) => f(c).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            if unreachable(e) {
                self.errors.fetch_add(1, Ordering::SeqCst);
                *self.conn.lock().await = None;
            }
        }
        result
    }

    /// [`run`](Self::run) of one command, `cmd`: its answer.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        what: &str,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisError> {
        self.run(
            what,
            |mut conn| async move { cmd.query_async(&mut conn).await },
        )
        .await
    }

    /// `f` (which must be safe to repeat: its reply may have been lost
    /// after Redis applied it), tried again while Redis is out of reach, up
    /// to the outage's limit. `what` names it in the log.
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, mut f: F) -> Result<T, RedisError>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let mut backoff = FIRST_BACKOFF;
        loop {
            if let Some(why) = self.outage.lost() {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    why,
                )));
            }
            match self.once(&mut f).await {
                Ok(v) => {
                    self.outage.ended();
                    return Ok(v);
                }
                Err(e) if unreachable(&e) => {
                    if self.outage.failed(what, &e) {
                        return Err(e);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(e),
            }
        }
    }
}
