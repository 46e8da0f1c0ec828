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
//!   run across workers, and when it is complete;
//! - rate limiters with `scope = "global"` are token buckets kept in Redis
//!   by an atomic script (GCRA) that uses Redis's own clock, so every worker
//!   on every machine draws on the same bucket. Count and byte limiters stay
//!   per process.
//!
//! Keys, for a run named `R`: `warpline:R:stream`, `:enqueued` (set),
//! `:deliveries` and `:errors` and `:results` and `:counts` (hashes),
//! `:dead` (stream), `:rate:NAME:KEY` and `:pause:NAME:KEY` (strings).
//! `:counts` keeps how many results are `done`, so `warpline status` need
//! not read every result; a run begun by a version without it (no
//! `tracked` field) is counted from `:results`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Value};
use serde::Serialize;
use warpline_engine::limit::{RateBackend, RateBackendFactory};
use warpline_engine::{
    ErrorKind, Event, EventKind, EventSink, Input, Source, SourceError, SourceSpec,
};

/// The consumer group every worker reads through.
const GROUP: &str = "workers";

/// Records an item's end in one atomic step: sets its result (KEYS[1],
/// field ARGV[1], value ARGV[2]) keeping the count of `done` results
/// (KEYS[2]) right (an item redone after its worker died before
/// acknowledging is counted once), adds the dead-letter entry (KEYS[4],
/// fields ARGV[5..]) if there is one, and acknowledges the message (stream
/// KEYS[3], group ARGV[3], message ARGV[4]).
///
/// A `done` result is never turned `dead`: the item's output is complete.
/// That happens when an item was reclaimed from a worker that was slow, not
/// dead, and the slow one then failed it (with `exists = "error"`, on the
/// output the other worker wrote). Returns 1 when it refused so, else 0.
static RECORD: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old == 'done' and ARGV[2] == 'dead' then
  redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
  return 1
end
if old ~= ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  if ARGV[2] == 'done' then redis.call('HINCRBY', KEYS[2], 'done', 1) end
end
if #ARGV > 4 then redis.call('XADD', KEYS[4], '*', unpack(ARGV, 5)) end
redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
return 0
",
    )
});

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
}

/// A connection to the run's keys.
#[derive(Clone)]
pub struct Coordinator {
    conn: MultiplexedConnection,
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

/// `[[field, value, ...]]` of a stream entry as a map.
fn fields(v: &Value) -> HashMap<String, String> {
    let mut out = HashMap::new();
    if let Value::Array(items) = v {
        for pair in items.chunks(2) {
            if let [k, v] = pair {
                if let (Ok(k), Ok(v)) = (
                    redis::from_redis_value::<String>(k.clone()),
                    redis::from_redis_value::<String>(v.clone()),
                ) {
                    out.insert(k, v);
                }
            }
        }
    }
    out
}

/// Stream entries `[[id, [field, value, ...]], ...]`.
fn entries(v: &Value) -> Vec<(String, HashMap<String, String>)> {
    let mut out = Vec::new();
    if let Value::Array(items) = v {
        for e in items {
            if let Value::Array(parts) = e {
                if let [id, body] = parts.as_slice() {
                    if let Ok(id) = redis::from_redis_value::<String>(id.clone()) {
                        out.push((id, fields(body)));
                    }
                }
            }
        }
    }
    out
}

impl Coordinator {
    /// Connects, and makes sure the run's stream and group exist.
    pub async fn connect(url: &str, settings: Settings) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| format!("{url}: {e}"))?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("cannot reach Redis at {url}: {e}"))?;
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
                .map_err(|e| format!("cannot start the run's counts: {e}"))?,
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(format!("cannot create the consumer group: {e}")),
        }
        Ok(Coordinator { conn, settings })
    }

    fn key(&self, part: &str) -> String {
        key(&self.settings.run, part)
    }

    /// Records that `id` (message `msg`) ended as `result`, with its
    /// dead-letter entry's fields when it is dead: see [`RECORD`]. The
    /// script is sent by its hash, and loaded only when Redis lacks it.
    /// `false` when the item was already done and stays so.
    async fn record(
        &self,
        id: &str,
        msg: &str,
        result: &str,
        dead: &[(&str, String)],
    ) -> Result<bool, redis::RedisError> {
        let mut call = RECORD.prepare_invoke();
        for part in ["results", "counts", "stream", "dead"] {
            call.key(self.key(part));
        }
        call.arg(id).arg(result).arg(GROUP).arg(msg);
        for (field, value) in dead {
            call.arg(*field).arg(value);
        }
        let mut conn = self.conn.clone();
        let kept_done: i64 = call.invoke_async(&mut conn).await?;
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
            ("source", warpline_engine::report::redact(source)),
            ("deliveries", deliveries.to_string()),
            ("error", error.to_owned()),
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
        let mut conn = self.conn.clone();
        let (tracked, done): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.key("counts"))
            .arg("tracked")
            .arg("done")
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        if tracked.is_some() {
            return Ok(done.unwrap_or(0));
        }
        let results: HashMap<String, String> =
            conn.hgetall(self.key("results")).await.map_err(err)?;
        Ok(results.values().filter(|v| v.as_str() == "done").count() as u64)
    }

    /// Puts every input of `source` in the stream, once: returns (added,
    /// already there).
    pub async fn enqueue(&self, mut source: Box<dyn Source>) -> Result<(u64, u64), String> {
        let script = redis::Script::new(
            r"if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
                redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'source', ARGV[2])
                return 1
              end
              return 0",
        );
        let (mut added, mut already) = (0, 0);
        let mut conn = self.conn.clone();
        while let Some(next) = source.next().await {
            let (id, src) = match next {
                Ok(input) => (input.id, input.source),
                // A malformed line is enqueued too: it fails where it is read.
                Err(e) => (e.id.clone(), format!("invalid:{}", e.message)),
            };
            let n: i64 = script
                .key(self.key("enqueued"))
                .key(self.key("stream"))
                .arg(&id)
                .arg(&src)
                .invoke_async(&mut conn)
                .await
                .map_err(err)?;
            if n == 1 {
                added += 1;
            } else {
                already += 1;
            }
        }
        Ok((added, already))
    }

    /// The run's progress across workers.
    pub async fn status(&self) -> Result<Status, String> {
        let mut conn = self.conn.clone();
        let enqueued: u64 = conn.scard(self.key("enqueued")).await.map_err(err)?;
        let done = self.done().await?;
        let dead: u64 = conn.xlen(self.key("dead")).await.map_err(err)?;
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
        let mut conn = self.conn.clone();
        let summary: Value = redis::cmd("XPENDING")
            .arg(self.key("stream"))
            .arg(GROUP)
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        Ok(match &summary {
            Value::Array(v) => v
                .first()
                .and_then(|c| redis::from_redis_value::<u64>(c.clone()).ok()),
            _ => None,
        }
        .unwrap_or(0))
    }

    /// The source a worker reads instead of the pipeline's own, and the
    /// event sink that acknowledges what it finished. Run the pipeline with
    /// both, then await [`Acker::finish`].
    pub fn worker(&self) -> (Arc<dyn SourceSpec>, Arc<Acker>) {
        let inflight = Arc::new(Mutex::new(HashMap::new()));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let acker = Arc::new(Acker {
            tx: Mutex::new(Some(tx)),
            task: Mutex::new(Some(tokio::spawn(ack_loop(
                self.clone(),
                Arc::clone(&inflight),
                rx,
            )))),
            heartbeat: tokio::spawn(heartbeat(self.clone(), Arc::clone(&inflight))),
        });
        let spec = Arc::new(StreamSpec {
            coordinator: self.clone(),
            inflight,
        });
        (spec, acker)
    }

    /// Makes the Redis-kept buckets of `scope = "global"` rate limiters.
    pub fn rate_backends(&self) -> RateBackendFactory {
        let this = self.clone();
        Arc::new(move |name: &str, per_second: f64, burst: u32| {
            Arc::new(GlobalRate {
                conn: this.conn.clone(),
                script: redis::Script::new(GCRA),
                prefix: format!("warpline:{}", this.settings.run),
                name: name.to_owned(),
                period_us: (1_000_000.0 / per_second).round().max(1.0) as u64,
                burst: u64::from(burst.max(1)),
            }) as Arc<dyn RateBackend>
        })
    }
}

fn key(run: &str, part: &str) -> String {
    format!("warpline:{run}:{part}")
}

/// An item this worker holds: its stream message, its input, and which
/// delivery of it this is.
struct Held {
    msg: String,
    source: String,
    delivery: u32,
}

/// Item id -> what this worker holds of it.
type Inflight = Arc<Mutex<HashMap<String, Held>>>;

struct StreamSpec {
    coordinator: Coordinator,
    inflight: Inflight,
}

impl SourceSpec for StreamSpec {
    fn open(&self) -> Result<Box<dyn Source>, String> {
        Ok(Box::new(StreamSource {
            c: self.coordinator.clone(),
            inflight: Arc::clone(&self.inflight),
            claimed: VecDeque::new(),
            last_claim: None,
        }))
    }
}

struct StreamSource {
    c: Coordinator,
    inflight: Inflight,
    claimed: VecDeque<(String, HashMap<String, String>)>,
    last_claim: Option<Instant>,
}

impl StreamSource {
    async fn claim_idle(&mut self) -> Result<(), String> {
        let s = &self.c.settings;
        let mut conn = self.c.conn.clone();
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(self.c.key("stream"))
            .arg(GROUP)
            .arg(&s.consumer)
            .arg(s.reclaim_after.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(16)
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        if let Value::Array(parts) = &reply {
            if let Some(list) = parts.get(1) {
                let got = entries(list);
                if !got.is_empty() {
                    tracing::info!(count = got.len(), "reclaimed idle items from other workers");
                }
                self.claimed.extend(got);
            }
        }
        self.last_claim = Some(Instant::now());
        Ok(())
    }

    async fn read_new(&mut self) -> Result<Option<(String, HashMap<String, String>)>, String> {
        let mut conn = self.c.conn.clone();
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(&self.c.settings.consumer)
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(200)
            .arg("STREAMS")
            .arg(self.c.key("stream"))
            .arg(">")
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        // [[stream, [[id, fields]]]] or nil
        if let Value::Array(streams) = &reply {
            if let Some(Value::Array(s)) = streams.first() {
                if let Some(list) = s.get(1) {
                    return Ok(entries(list).into_iter().next());
                }
            }
        }
        Ok(None)
    }

    /// Counts a delivery and returns its number; past the maximum, sends the
    /// message to the dead-letter stream and returns `None`.
    async fn admit(
        &self,
        msg_id: &str,
        f: &HashMap<String, String>,
    ) -> Result<Option<u32>, String> {
        let id = f.get("id").cloned().unwrap_or_else(|| msg_id.to_owned());
        let mut conn = self.c.conn.clone();
        let n: u32 = conn
            .hincr(self.c.key("deliveries"), &id, 1)
            .await
            .map_err(err)?;
        if n <= self.c.settings.max_deliveries {
            return Ok(Some(n));
        }
        let last: Option<String> = conn.hget(self.c.key("errors"), &id).await.map_err(err)?;
        let source = f.get("source").map(String::as_str).unwrap_or_default();
        let error = last
            .unwrap_or_else(|| "no result after the maximum deliveries (the worker died?)".into());
        self.c
            .dead_letter(&id, msg_id, source, n - 1, &error)
            .await
            .map_err(err)?;
        Ok(None)
    }
}

#[warpline_engine::async_trait]
impl Source for StreamSource {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        loop {
            let claim_due = self
                .last_claim
                .is_none_or(|t| t.elapsed() >= self.c.settings.reclaim_after / 2);
            if self.claimed.is_empty() && claim_due {
                if let Err(e) = self.claim_idle().await {
                    tracing::warn!("cannot reclaim idle items: {e}");
                }
            }
            let next = match self.claimed.pop_front() {
                Some(m) => Some(m),
                None => match self.read_new().await {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!("cannot read the work stream: {e}");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                },
            };
            let Some((msg_id, f)) = next else {
                // Nothing new: done once nothing is pending anywhere (this
                // worker's own items are acknowledged as they finish).
                match self.c.pending().await {
                    Ok(0) => return None,
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!("cannot read the run's status: {e}");
                        continue;
                    }
                }
            };
            let delivery = match self.admit(&msg_id, &f).await {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("cannot count a delivery: {e}");
                    continue;
                }
            };
            let id = f.get("id").cloned().unwrap_or_else(|| msg_id.clone());
            let source = f.get("source").cloned().unwrap_or_default();
            self.inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    id.clone(),
                    Held {
                        msg: msg_id,
                        source: source.clone(),
                        delivery,
                    },
                );
            if let Some(message) = source.strip_prefix("invalid:") {
                return Some(Err(SourceError {
                    id,
                    message: message.to_owned(),
                }));
            }
            return Some(Ok(Input {
                id,
                source,
                size_hint: None,
            }));
        }
    }
}

/// What an item's end means for its message.
enum Ended {
    Done(String),
    Failed(String, ErrorKind, String),
}

/// Acknowledges finished items (done or skipped) and records failures, in
/// the background; an [`EventSink`] for the run.
pub struct Acker {
    tx: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Ended>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Acker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acker")
    }
}

impl EventSink for Acker {
    fn event(&self, event: &Event) {
        let ended = match &event.kind {
            EventKind::Done { item } => Ended::Done(item.clone()),
            EventKind::Skipped { item, .. } => Ended::Done(item.clone()),
            EventKind::Failed {
                item,
                kind,
                message,
                ..
            } => Ended::Failed(item.clone(), *kind, message.clone()),
            _ => return,
        };
        if let Some(tx) = &*self.tx.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = tx.send(ended);
        }
    }
}

impl Acker {
    /// Waits until every acknowledgement is written.
    pub async fn finish(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = task {
            let _ = t.await;
        }
        self.heartbeat.abort();
    }
}

/// Keeps this worker's items from looking idle while they wait in its
/// mailboxes or stages: every `reclaim_after / 3` they are claimed again by
/// this worker (`XCLAIM ... JUSTID` resets the idle time and does not count
/// a delivery). Only a dead worker's items go idle.
async fn heartbeat(c: Coordinator, inflight: Inflight) {
    let every = (c.settings.reclaim_after / 3).max(Duration::from_millis(50));
    let mut conn = c.conn.clone();
    loop {
        tokio::time::sleep(every).await;
        let ids: Vec<String> = inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|h| h.msg.clone())
            .collect();
        for chunk in ids.chunks(100) {
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(c.key("stream"))
                .arg(GROUP)
                .arg(&c.settings.consumer)
                .arg(0);
            for id in chunk {
                cmd.arg(id);
            }
            cmd.arg("JUSTID");
            if let Err(e) = cmd.query_async::<Value>(&mut conn).await {
                tracing::warn!("cannot renew this worker's claims: {e}");
            }
        }
    }
}

async fn ack_loop(
    c: Coordinator,
    inflight: Inflight,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Ended>,
) {
    let mut conn = c.conn.clone();
    while let Some(ended) = rx.recv().await {
        let id = match &ended {
            Ended::Done(id) | Ended::Failed(id, ..) => id.clone(),
        };
        let held = inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        let Some(held) = held else { continue };
        let written: Result<(), redis::RedisError> = match ended {
            Ended::Done(_) => c.record(&id, &held.msg, "done", &[]).await.map(drop),
            // A 404, an undecodable file, an input line that is no input:
            // every delivery would fail the same way, so none is waited for.
            Ended::Failed(_, ErrorKind::Permanent, message) => {
                c.dead_letter(&id, &held.msg, &held.source, held.delivery, &message)
                    .await
            }
            // Left pending: claimed again after `reclaim_after`, until the
            // maximum deliveries send it to the dead letters. A transient
            // error may pass; an item over one worker's budget may fit
            // another's; a panic or an interrupted run says nothing of the
            // input.
            Ended::Failed(_, _, message) => conn.hset(c.key("errors"), &id, message).await,
        };
        if let Err(e) = written {
            tracing::error!(item = %id, "cannot record the item's end in Redis: {e}");
        }
    }
}

/// A token bucket in Redis (GCRA, Redis's clock), one per limiter and key.
struct GlobalRate {
    conn: MultiplexedConnection,
    /// The GCRA script, hashed once (it is run for every token).
    script: redis::Script,
    prefix: String,
    name: String,
    period_us: u64,
    burst: u64,
}

/// Returns 0 when a token was taken, else microseconds to wait.
const GCRA: &str = r"
local pause = redis.call('PTTL', KEYS[2])
if pause > 0 then return pause * 1000 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local period = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allow_at = tat - (burst - 1) * period
if now < allow_at then return allow_at - now end
local new_tat = tat + period
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return 0
";

#[warpline_engine::async_trait]
impl RateBackend for GlobalRate {
    async fn acquire(&self, key: &str) -> Result<(), String> {
        let mut conn = self.conn.clone();
        loop {
            let wait_us: i64 = self
                .script
                .key(format!("{}:rate:{}:{key}", self.prefix, self.name))
                .key(format!("{}:pause:{}:{key}", self.prefix, self.name))
                .arg(self.period_us)
                .arg(self.burst)
                .invoke_async(&mut conn)
                .await
                .map_err(err)?;
            if wait_us <= 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_micros(wait_us as u64)).await;
        }
    }

    async fn pause(&self, key: &str, delay: Duration) -> Result<(), String> {
        let mut conn = self.conn.clone();
        let ms = delay.as_millis().max(1) as u64;
        redis::cmd("SET")
            .arg(format!("{}:pause:{}:{key}", self.prefix, self.name))
            .arg(1)
            .arg("PX")
            .arg(ms)
            .query_async::<()>(&mut conn)
            .await
            .map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records results as the workers do (the message ids need not exist:
    /// acknowledging an unknown one does nothing).
    async fn set(c: &Coordinator, id: &str, value: &str) {
        let dead = [("id", id.to_owned())];
        let entry: &[(&str, String)] = if value == "dead" { &dead } else { &[] };
        c.record(id, "0-1", value, entry).await.unwrap();
    }

    #[tokio::test]
    async fn an_item_done_twice_counts_once_and_older_runs_are_counted_from_their_results() {
        let Ok(url) = std::env::var("WARPLINE_TEST_REDIS") else {
            eprintln!("WARPLINE_TEST_REDIS is not set: the Redis test is skipped");
            return;
        };
        let run = format!(
            "counts-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let c = Coordinator::connect(
            &url,
            Settings {
                run: run.clone(),
                consumer: "test".into(),
                max_deliveries: 3,
                reclaim_after: Duration::from_secs(60),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("WARPLINE_TEST_REDIS={url} is set but: {e}"));
        set(&c, "a", "done").await;
        // Redone after a worker died before acknowledging: still one.
        set(&c, "a", "done").await;
        set(&c, "b", "done").await;
        assert_eq!(c.status().await.unwrap().done, 2);
        // A slow worker failing an item another worker finished: the
        // complete output wins, and no dead-letter entry is added.
        set(&c, "b", "dead").await;
        assert_eq!(c.status().await.unwrap().done, 2);
        set(&c, "c", "dead").await;
        let mut conn = c.conn.clone();
        // A dead result comes with its dead-letter entry.
        let dead: u64 = conn.xlen(c.key("dead")).await.unwrap();
        assert_eq!(dead, 1);
        let result: String = conn.hget(c.key("results"), "b").await.unwrap();
        assert_eq!(result, "done");
        let counted: u64 = conn.hget(c.key("counts"), "done").await.unwrap();
        assert_eq!(counted, 2);
        // The count is what is read, not every result: a result written
        // around the script is not seen.
        conn.hset::<_, _, _, ()>(c.key("results"), "d", "done")
            .await
            .unwrap();
        assert_eq!(c.done().await.unwrap(), 2);
        // A run begun without counts is counted from its results (a, b, d).
        conn.hdel::<_, _, ()>(c.key("counts"), "tracked")
            .await
            .unwrap();
        assert_eq!(c.done().await.unwrap(), 3);
        conn.del::<_, ()>(&[
            c.key("results"),
            c.key("counts"),
            c.key("stream"),
            c.key("dead"),
        ])
        .await
        .unwrap();
    }
}
