//! The source a worker reads: the run's stream, through the consumer group.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use redis::streams::{StreamAutoClaimReply, StreamReadReply};
use redis::AsyncCommands;
use warpline_engine::{Input, Source, SourceError, SourceSpec};

use super::scripts::{entries, Entry};
use super::{err, Coordinator, BLOCK, GROUP};

/// An item this worker holds: its stream message, its input, and which
/// delivery of it this is.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) msg: String,
    pub(crate) source: String,
    pub(crate) delivery: u32,
}

/// Item id -> what this worker holds of it, from its admission until its
/// end is written to Redis.
pub(crate) type Inflight = Arc<Mutex<HashMap<String, Held>>>;

pub(crate) struct StreamSpec {
    pub(crate) coordinator: Coordinator,
    pub(crate) inflight: Inflight,
}

impl SourceSpec for StreamSpec {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        Ok(Box::new(StreamSource {
            c: self.coordinator.clone(),
            inflight: Arc::clone(&self.inflight),
            claimed: VecDeque::new(),
            last_claim: None,
            // Messages a worker of the same name left pending are read
            // first (a restarted worker with a fixed `--consumer`).
            read_errors: None,
        }))
    }
}

struct StreamSource {
    c: Coordinator,
    inflight: Inflight,
    claimed: VecDeque<Entry>,
    last_claim: Option<Instant>,
    /// The read connection's failures when this worker last read its own
    /// pending messages (`None`: never).
    read_errors: Option<u64>,
}

impl StreamSource {
    async fn claim_idle(&mut self) -> Result<(), String> {
        let s = &self.c.settings;
        let stream = self.c.key("stream");
        let idle_ms = s.reclaim_after.as_millis() as u64;
        // On the read connection: when its reply is lost, the messages it
        // claimed are this worker's, and are found by `read_own`.
        let reply: StreamAutoClaimReply = self
            .c
            .read
            .query(
                "reclaim idle items",
                redis::cmd("XAUTOCLAIM")
                    .arg(&stream)
                    .arg(GROUP)
                    .arg(&s.consumer)
                    .arg(idle_ms)
                    .arg("0-0")
                    .arg("COUNT")
                    .arg(16),
            )
            .await
            .map_err(err)?;
        let got = entries(reply.claimed);
        if !got.is_empty() {
            tracing::info!(count = got.len(), "reclaimed idle items from other workers");
        }
        self.claimed.extend(got);
        self.last_claim = Some(Instant::now());
        Ok(())
    }

    /// The messages Redis has handed to this worker that it does not hold:
    /// a read or a claim whose reply was lost (Redis restarted or froze)
    /// left them pending under this worker's name, where no other worker
    /// looks until `reclaim_after`.
    async fn read_own(&mut self) -> Result<(), String> {
        let held: HashSet<String> = {
            let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            inflight.values().map(|h| h.msg.clone()).collect()
        };
        let queued: HashSet<String> = self.claimed.iter().map(|(m, _)| m.clone()).collect();
        let mut after = "0".to_owned();
        let mut found = 0;
        loop {
            let got = self.read(&after, None).await?;
            let Some((last, _)) = got.last() else { break };
            after = last.clone();
            let more = got.len() == 100;
            for e in got {
                if !held.contains(&e.0) && !queued.contains(&e.0) {
                    found += 1;
                    self.claimed.push_back(e);
                }
            }
            if !more {
                break;
            }
        }
        if found > 0 {
            tracing::warn!(
                count = found,
                "found items Redis had handed to this worker while its replies were lost"
            );
        }
        Ok(())
    }

    /// `XREADGROUP` from `after` (`>`: new messages, waiting up to `block`;
    /// an id: this worker's own pending messages after it), on the read
    /// connection, tried again while Redis is out of reach.
    async fn read(
        &self,
        after: &str,
        block: Option<std::time::Duration>,
    ) -> Result<Vec<Entry>, String> {
        let stream = self.c.key("stream");
        let consumer = &self.c.settings.consumer;
        let count = if block.is_some() { 1 } else { 100 };
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(GROUP).arg(consumer);
        cmd.arg("COUNT").arg(count);
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(&stream).arg(after);
        // Nil (nothing came within `block`) reads as no stream.
        let reply: StreamReadReply = self
            .c
            .read
            .query("read the work stream", &cmd)
            .await
            .map_err(err)?;
        Ok(entries(reply.keys.into_iter().flat_map(|k| k.ids)))
    }

    /// Counts a delivery and returns its number; past the maximum, sends the
    /// message to the dead-letter stream and returns `None`.
    async fn admit(
        &self,
        msg_id: &str,
        f: &HashMap<String, String>,
    ) -> Result<Option<u32>, String> {
        let id = f.get("id").cloned().unwrap_or_else(|| msg_id.to_owned());
        let (deliveries, errors) = (self.c.key("deliveries"), self.c.key("errors"));
        let n: u32 = self
            .c
            .run("count a delivery", |mut conn| {
                let (k, id) = (deliveries.clone(), id.clone());
                async move { conn.hincr(k, id, 1).await }
            })
            .await
            .map_err(err)?;
        if n <= self.c.settings.max_deliveries {
            return Ok(Some(n));
        }
        let last: Option<String> = self
            .c
            .run("read an item's last error", |mut conn| {
                let (k, id) = (errors.clone(), id.clone());
                async move { conn.hget(k, id).await }
            })
            .await
            .map_err(err)?;
        let source = f.get("source").map(String::as_str).unwrap_or_default();
        let error = last
            .unwrap_or_else(|| "no result after the maximum deliveries (the worker died?)".into());
        self.c
            .dead_letter(&id, msg_id, source, n - 1, &error)
            .await
            .map_err(err)?;
        Ok(None)
    }

    /// The next message to work on: one found pending under this worker's
    /// name, reclaimed, or new; `Ok(None)` when none came within [`BLOCK`].
    async fn next_message(&mut self) -> Result<Option<Entry>, String> {
        // After a failure on the read connection (and at the start), what
        // Redis handed out meanwhile is looked for first.
        let errors = self.c.read.errors();
        if self.read_errors != Some(errors) {
            self.read_own().await?;
            if self.read_errors.is_some() {
                // Back from an outage, during which every pending message
                // went on ageing: no idle ones are claimed until live
                // workers have renewed theirs (every `reclaim_after / 3`),
                // in `reclaim_after / 2`.
                self.last_claim = Some(Instant::now() + self.c.settings.reclaim_after / 4);
            }
            self.read_errors = Some(errors);
        }
        let claim_due = self
            .last_claim
            .is_none_or(|t| t.elapsed() >= self.c.settings.reclaim_after / 4);
        if self.claimed.is_empty() && claim_due {
            if let Err(e) = self.claim_idle().await {
                tracing::warn!("cannot reclaim idle items: {e}");
            }
        }
        if let Some(m) = self.claimed.pop_front() {
            return Ok(Some(m));
        }
        let got = self.read(">", Some(BLOCK)).await?.into_iter().next();
        if self.c.read.errors() != errors {
            // The read was tried again: an earlier try's message may be
            // pending here unseen. This one waits its turn behind them.
            self.claimed.extend(got);
            return Ok(None);
        }
        Ok(got)
    }

    /// Admits message `msg_id` with fields `f` as an input.
    fn hold(&self, msg_id: String, f: HashMap<String, String>, delivery: u32) -> Input {
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
        // What the source knew of the input (a STAC item's datetime), as
        // `enqueue` wrote it; an entry without it (or one a requeue made)
        // has none.
        let meta = f
            .get("meta")
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        Input {
            id,
            source,
            size_hint: None,
            meta,
        }
    }
}

#[warpline_engine::async_trait]
impl Source for StreamSource {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        loop {
            if let Some(why) = self.c.lost() {
                tracing::error!("giving up on the work queue: {why}");
                return None;
            }
            let next = match self.next_message().await {
                Ok(m) => m,
                Err(e) if e.contains("NOGROUP") => {
                    self.c.cmd.outage().give_up(format!(
                        "the run's work stream is gone from Redis (restarted without \
                         persistence, or its keys deleted): {e}"
                    ));
                    continue;
                }
                Err(e) => {
                    tracing::warn!("cannot read the work stream: {e}");
                    tokio::time::sleep(BLOCK).await;
                    continue;
                }
            };
            let Some((msg_id, f)) = next else {
                // Nothing new: done once nothing is pending anywhere (this
                // worker's own items are acknowledged as they finish).
                match self.c.pending().await {
                    Ok(0) if self.claimed.is_empty() => return None,
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
                    // Not lost: it is found again among this worker's own.
                    self.read_errors = None;
                    continue;
                }
            };
            let input = self.hold(msg_id, f, delivery);
            if let Some(message) = input.source.strip_prefix("invalid:") {
                return Some(Err(SourceError {
                    id: input.id,
                    message: message.to_owned(),
                }));
            }
            return Some(Ok(input));
        }
    }
}
