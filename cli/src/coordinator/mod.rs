//! Runs beyond one machine, on Redis: a Redis Stream is the run's work
//! queue, read through a consumer group by every worker.
//!
//! - `warpline enqueue P.toml --coordinator redis://...` puts the inputs of
//!   the pipeline's source in the stream, once each (a set of enqueued ids
//!   makes it idempotent);
//! - `warpline run P.toml --coordinator redis://...` reads the stream
//!   instead of the source, one message at a time and only when the first
//!   mailbox has room, and acknowledges a message only when its item is
//!   done or skipped (its output is durable). An item that failed with a
//!   permanent error goes to a dead-letter stream at once (another delivery
//!   would fail the same way); any other failed item stays pending: a
//!   message idle past `reclaim_after` (its worker died, or it failed) is
//!   claimed again by a live worker (`XAUTOCLAIM`); after `max_deliveries`
//!   deliveries it goes to the dead-letter stream with its last error;
//! - results (done, dead) are kept in a hash; `warpline status` shows the
//!   run across workers, and when it is complete; `warpline dead` lists the
//!   dead letters and `warpline requeue` puts them back in the queue;
//! - rate limiters with `scope = "global"` are token buckets kept in Redis
//!   by an atomic script (GCRA) that uses Redis's own clock, so every worker
//!   on every machine draws on the same bucket. Count and byte limiters stay
//!   per process.
//!
//! Redis may restart or freeze under a run: every command is tried again
//! on a new connection until Redis has been out of reach for
//! `give_up_after`; the blocking reads of the stream have a
//! connection of their own, so no other command waits behind them; after
//! a failed read a worker reads its own pending messages again, so none
//! that Redis handed out while the reply was lost waits for reclaim.
//!
//! Keys, for a run named `R`: `warpline:R:stream`, `:enqueued` (set),
//! `:deliveries` and `:errors` and `:results` and `:counts` (hashes),
//! `:dead` (stream), `:rate:NAME:KEY` and `:pause:NAME:KEY` (strings),
//! `:margin:NAME:KEY` (a hash: the margin a global rate learnt).
//! `:counts` keeps how many results are `done`, so `warpline status` need
//! not read every result; a run begun by a version without it (no
//! `tracked` field) is counted from `:results`.

mod acker;
mod dead;
mod link;
mod queue;
mod rate;
mod scripts;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use serde::Serialize;
use warpline_engine::limit::{RateBackend, RateBackendFactory};
use warpline_engine::{Source, SourceSpec};

pub use acker::Acker;
pub use dead::DeadLetter;
use link::{Link, Outage};

/// The consumer group every worker reads through.
const GROUP: &str = "workers";

/// How a run on Redis behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The run's name (keys are `warpline:NAME:...`).
    pub run: String,
    /// This worker's name in the consumer group.
    pub consumer: String,
    /// Deliveries before a message goes to the dead-letter stream.
    pub max_deliveries: u32,
    /// A message pending this long is claimed by a live worker.
    pub reclaim_after: Duration,
    /// How long Redis may be out of reach (restarting, frozen, cut off)
    /// before the worker gives up: see [`Coordinator::lost`].
    pub give_up_after: Duration,
}

/// A connection to the run's keys.
#[derive(Clone)]
pub struct Coordinator {
    /// Every command but the blocking reads of the work stream.
    cmd: Arc<Link>,
    /// The work stream's blocking reads (and the claims whose replies
    /// carry messages), on a connection of their own.
    read: Arc<Link>,
    settings: Settings,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("settings", &self.settings)
            .finish()
    }
}

/// What `warpline status` shows.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    /// The run.
    pub run: String,
    /// Inputs enqueued.
    pub enqueued: u64,
    /// Items done (or skipped: their output existed).
    pub done: u64,
    /// Items in the dead-letter stream.
    pub dead: u64,
    /// Messages delivered to a worker and not yet acknowledged.
    pub pending: u64,
    /// Whether every enqueued input is done or dead, and nothing is pending.
    pub complete: bool,
}

fn err(e: redis::RedisError) -> String {
    e.to_string()
}

/// What went wrong with the coordinator's Redis.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The URL is not one the Redis client takes.
    #[error("{url}: {error}")]
    Url {
        /// The URL given.
        url: String,
        /// What the client said.
        error: redis::RedisError,
    },
    /// The first connection failed.
    #[error("cannot reach Redis at {url}: {error}")]
    Unreachable {
        /// The URL given.
        url: String,
        /// What the client said.
        error: redis::RedisError,
    },
    /// A new run's counts could not be started.
    #[error("cannot start the run's counts: {0}")]
    Counts(redis::RedisError),
    /// The run's consumer group could not be created.
    #[error("cannot create the consumer group: {0}")]
    Group(redis::RedisError),
    /// A command failed, after the retries an outage allows.
    #[error("{0}")]
    Command(String),
}

impl From<String> for CoordinatorError {
    fn from(message: String) -> Self {
        CoordinatorError::Command(message)
    }
}

fn key(run: &str, part: &str) -> String {
    format!("warpline:{run}:{part}")
}

/// How long a reply on the command connection may take (Redis answers in
/// well under a millisecond; more means it is frozen or gone).
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a blocking read of the stream waits for a message.
pub(crate) const BLOCK: Duration = Duration::from_millis(200);

impl Coordinator {
    /// Connects, and makes sure the run's stream and group exist.
    pub async fn connect(url: &str, settings: Settings) -> Result<Self, CoordinatorError> {
        let client = redis::Client::open(url).map_err(|error| CoordinatorError::Url {
            url: url.to_owned(),
            error,
        })?;
        let outage = Outage::new(settings.give_up_after);
        let cmd = Arc::new(Link::new(
            client.clone(),
            REPLY_TIMEOUT,
            Arc::clone(&outage),
        ));
        let read = Arc::new(Link::new(client, BLOCK + Duration::from_secs(2), outage));
        // The first connection is not waited for: a wrong URL or a server
        // that is not there is said at once.
        let mut conn = cmd.once(|c| async move { Ok(c) }).await.map_err(|error| {
            CoordinatorError::Unreachable {
                url: url.to_owned(),
                error,
            }
        })?;
        let created: Result<(), redis::RedisError> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(key(&settings.run, "stream"))
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match created {
            // A new run: its results are counted from the start.
            Ok(()) => conn
                .hset_nx::<_, _, _, ()>(key(&settings.run, "counts"), "tracked", 1)
                .await
                .map_err(CoordinatorError::Counts)?,
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(CoordinatorError::Group(e)),
        }
        Ok(Coordinator {
            cmd,
            read,
            settings,
        })
    }

    /// The run's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Why this worker gave up on Redis (it was out of reach for
    /// [`Settings::give_up_after`]), once it did.
    pub fn lost(&self) -> Option<String> {
        self.cmd.outage().lost()
    }

    fn key(&self, part: &str) -> String {
        key(&self.settings.run, part)
    }

    /// Runs `f` on the command connection, again while Redis is out of
    /// reach (see [`Link::run`]).
    async fn run<T, F, Fut>(&self, what: &str, f: F) -> Result<T, redis::RedisError>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, redis::RedisError>>,
    {
        self.cmd.run(what, f).await
    }

    /// Runs a prepared script (`what` it does, for the outage messages): the
    /// count it answers. Sent by its hash, loaded only when Redis lacks it.
    async fn invoke(
        &self,
        what: &str,
        call: &redis::ScriptInvocation<'_>,
    ) -> Result<i64, redis::RedisError> {
        self.run(what, move |mut conn| async move {
            call.invoke_async(&mut conn).await
        })
        .await
    }

    /// Records that `id` (message `msg`) ended as `result`, with its
    /// dead-letter entry's fields when it is dead: see
    /// [`scripts::RECORD`]. The script is sent by its hash, and loaded only
    /// when Redis lacks it (after a restart, too). `false` when the item
    /// was already done and stays so.
    async fn record(
        &self,
        id: &str,
        msg: &str,
        result: &str,
        dead: &[(&str, String)],
    ) -> Result<bool, redis::RedisError> {
        let mut call = scripts::RECORD.prepare_invoke();
        for part in ["results", "counts", "stream", "dead"] {
            call.key(self.key(part));
        }
        call.arg(id).arg(result).arg(GROUP).arg(msg);
        for (field, value) in dead {
            call.arg(*field).arg(value);
        }
        let kept_done = self.invoke("record an item's end", &call).await?;
        Ok(kept_done == 0)
    }

    /// Sends `id` (message `msg`, input `source`) to the dead-letter stream
    /// after `deliveries` deliveries, its last error `error`.
    async fn dead_letter(
        &self,
        id: &str,
        msg: &str,
        source: &str,
        deliveries: u32,
        error: &str,
    ) -> Result<(), redis::RedisError> {
        let entry = [
            ("id", id.to_owned()),
            // The queue's message, which keeps the input unredacted for
            // `warpline requeue`.
            ("msg", msg.to_owned()),
            ("source", warpline_engine::report::redact(source)),
            ("deliveries", deliveries.to_string()),
            // Failure messages are redacted when recorded; this one may
            // also be an older worker's, so once more here.
            ("error", warpline_engine::redact::redact_text(error)),
        ];
        if self.record(id, msg, "dead", &entry).await? {
            tracing::warn!(item = %id, deliveries, "dead-lettered: {error}");
        } else {
            tracing::warn!(
                item = %id,
                "another worker finished this item while this one failed it ({error}); it stays done"
            );
        }
        Ok(())
    }

    /// How many results are `done`.
    async fn done(&self) -> Result<u64, String> {
        let counts = self.key("counts");
        let (tracked, done): (Option<u64>, Option<u64>) = self
            .cmd
            .query(
                "read the run's counts",
                redis::cmd("HMGET").arg(&counts).arg("tracked").arg("done"),
            )
            .await
            .map_err(err)?;
        if tracked.is_some() {
            return Ok(done.unwrap_or(0));
        }
        let results = self.key("results");
        let results: HashMap<String, String> = self
            .run("read the run's results", |mut conn| {
                let results = results.clone();
                async move { conn.hgetall(results).await }
            })
            .await
            .map_err(err)?;
        Ok(results.values().filter(|v| v.as_str() == "done").count() as u64)
    }

    /// Puts every input of `source` in the stream, once: returns (added,
    /// already there).
    pub async fn enqueue(
        &self,
        mut source: Box<dyn Source>,
    ) -> Result<(u64, u64), CoordinatorError> {
        let (mut added, mut already) = (0, 0);
        while let Some(next) = source.next().await {
            let (id, src, meta) = match next {
                Ok(input) => {
                    let meta = if input.meta.is_empty() {
                        String::new()
                    } else {
                        serde_json::to_string(&input.meta).unwrap_or_default()
                    };
                    (input.id, input.source, meta)
                }
                // A malformed line is enqueued too: it fails where it is read.
                Err(e) => (
                    e.id.clone(),
                    format!("invalid:{}", e.message),
                    String::new(),
                ),
            };
            let mut call = scripts::ENQUEUE.prepare_invoke();
            call.key(self.key("enqueued"))
                .key(self.key("stream"))
                .arg(&id)
                .arg(&src)
                .arg(&meta);
            let n = self.invoke("enqueue an input", &call).await.map_err(err)?;
            if n == 1 {
                added += 1;
            } else {
                already += 1;
            }
        }
        Ok((added, already))
    }

    /// The run's progress across workers.
    pub async fn status(&self) -> Result<Status, CoordinatorError> {
        let enqueued: u64 = self
            .cmd
            .query(
                "count the enqueued inputs",
                redis::cmd("SCARD").arg(self.key("enqueued")),
            )
            .await
            .map_err(err)?;
        let done = self.done().await?;
        let dead: u64 = self
            .cmd
            .query(
                "count the dead letters",
                redis::cmd("XLEN").arg(self.key("dead")),
            )
            .await
            .map_err(err)?;
        let pending = self.pending().await?;
        Ok(Status {
            run: self.settings.run.clone(),
            enqueued,
            done,
            dead,
            pending,
            complete: pending == 0 && done + dead >= enqueued && enqueued > 0,
        })
    }

    /// Messages delivered to some worker and not yet acknowledged.
    async fn pending(&self) -> Result<u64, String> {
        let stream = self.key("stream");
        let summary: redis::streams::StreamPendingReply = self
            .cmd
            .query(
                "count the pending items",
                redis::cmd("XPENDING").arg(&stream).arg(GROUP),
            )
            .await
            .map_err(err)?;
        Ok(summary.count() as u64)
    }

    /// The source a worker reads instead of the pipeline's own, and the
    /// event sink that acknowledges what it finished. Run the pipeline with
    /// both, then await [`Acker::finish`].
    pub fn worker(&self) -> (Arc<dyn SourceSpec>, Arc<Acker>) {
        let inflight = queue::Inflight::default();
        let acker = Arc::new(Acker::start(self.clone(), Arc::clone(&inflight)));
        let spec = Arc::new(queue::StreamSpec {
            coordinator: self.clone(),
            inflight,
        });
        (spec, acker)
    }

    /// Makes the Redis-kept buckets of `scope = "global"` rate limiters.
    pub fn rate_backends(&self) -> RateBackendFactory {
        let this = self.clone();
        Arc::new(move |name: &str, per_second: f64, burst: u32| {
            Arc::new(this.global_rate(name, per_second, burst)) as Arc<dyn RateBackend>
        })
    }

    /// The global bucket of rate limiter `name`: `per_second` (less its
    /// configured margin), `burst`.
    fn global_rate(&self, name: &str, per_second: f64, burst: u32) -> rate::GlobalRate {
        rate::GlobalRate {
            link: Arc::clone(&self.cmd),
            script: redis::Script::new(&scripts::GCRA),
            widen: redis::Script::new(&scripts::WIDEN),
            prefix: format!("warpline:{}", self.settings.run),
            name: name.to_owned(),
            period_us: (1_000_000.0 / per_second).round().max(1.0) as u64,
            burst: u64::from(burst.max(1)),
        }
    }
}
