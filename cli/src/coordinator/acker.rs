//! Acknowledging finished items, and keeping held ones claimed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{AsyncCommands, Value};
use warpline_engine::{ErrorKind, Event, EventKind, EventSink};

use super::queue::Inflight;
use super::{Coordinator, GROUP};

/// What an item's end means for its message.
enum Ended {
    Done(String),
    Failed(String, ErrorKind, String),
}

/// Acknowledges finished items (done or skipped) and records failures, in
/// the background; an [`EventSink`] for the run. While Redis is out of
/// reach the ends wait, in order, and are written once it is back.
pub struct Acker {
    tx: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Ended>>>,
    /// Items this worker failed in a way another delivery may mend (all
    /// but permanent failures): left in the queue, not ended.
    redelivered: std::sync::atomic::AtomicU64,
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
        if matches!(&ended, Ended::Failed(_, kind, _) if *kind != ErrorKind::Permanent) {
            self.redelivered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(tx) = &*self.tx.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = tx.send(ended);
        }
    }
}

impl Acker {
    /// How many of this worker's failed items were left in the queue for
    /// another delivery (so they have not ended: `warpline status` and
    /// `warpline dead` say how they end).
    pub fn left_for_redelivery(&self) -> u64 {
        self.redelivered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts acknowledging the ends of `inflight`'s items for `c`.
    pub(crate) fn start(c: Coordinator, inflight: Inflight) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Acker {
            tx: Mutex::new(Some(tx)),
            redelivered: std::sync::atomic::AtomicU64::new(0),
            task: Mutex::new(Some(tokio::spawn(ack_loop(
                c.clone(),
                Arc::clone(&inflight),
                rx,
            )))),
            heartbeat: tokio::spawn(heartbeat(c, inflight)),
        }
    }

    /// Waits until every acknowledgement is written (or Redis was given
    /// up: see [`Coordinator::lost`]).
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
            // Once: the next beat tries again.
            let sent = c
                .cmd
                .once(|mut conn| async move { cmd.query_async::<Value>(&mut conn).await })
                .await;
            if let Err(e) = sent {
                tracing::debug!("cannot renew this worker's claims: {e}");
            }
        }
    }
}

async fn ack_loop(
    c: Coordinator,
    inflight: Inflight,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Ended>,
) {
    while let Some(ended) = rx.recv().await {
        let id = match &ended {
            Ended::Done(id) | Ended::Failed(id, ..) => id.clone(),
        };
        // Held until its end is written: a worker reading its own pending
        // messages after a lost reply must not take it for a lost one.
        let held = inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned();
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
            Ended::Failed(_, _, message) => {
                let errors = c.key("errors");
                c.run("record an item's error", |mut conn| {
                    let (k, id, m) = (errors.clone(), id.clone(), message.clone());
                    async move { conn.hset(k, id, m).await }
                })
                .await
            }
        };
        inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if let Err(e) = written {
            tracing::error!(item = %id, "cannot record the item's end in Redis: {e}");
        }
    }
}
