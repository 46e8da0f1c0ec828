//! The dead-letter stream: `warpline dead` lists it, `warpline requeue`
//! moves its items back to the work queue.

use std::collections::{HashMap, HashSet};

use redis::streams::StreamRangeReply;
use serde::Serialize;

use super::scripts::{entries, REQUEUE};
use super::{err, Coordinator};

/// One item in the dead-letter stream.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeadLetter {
    /// The item's id.
    pub id: String,
    /// Its input (credentials hidden).
    pub source: String,
    /// Deliveries it had.
    pub deliveries: u32,
    /// Its last error.
    pub error: String,
    /// When it was dead-lettered (Unix time, ms: the entry's id).
    pub at_ms: u64,
    /// The dead-letter entry's id.
    #[serde(skip)]
    entry: String,
    /// The work queue's message it came from (absent in entries written
    /// by older versions).
    #[serde(skip)]
    msg: Option<String>,
}

impl DeadLetter {
    fn from_entry(entry: String, mut f: HashMap<String, String>) -> Self {
        let mut take = |k: &str| f.remove(k).unwrap_or_default();
        DeadLetter {
            id: take("id"),
            source: take("source"),
            deliveries: take("deliveries").parse().unwrap_or(0),
            error: take("error"),
            at_ms: entry
                .split('-')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0),
            msg: Some(take("msg")).filter(|m| !m.is_empty()),
            entry,
        }
    }
}

impl Coordinator {
    /// Every item in the dead-letter stream, oldest first.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, super::CoordinatorError> {
        let dead = self.key("dead");
        let reply: StreamRangeReply = self
            .cmd
            .query(
                "read the dead letters",
                redis::cmd("XRANGE").arg(&dead).arg("-").arg("+"),
            )
            .await
            .map_err(err)?;
        Ok(entries(reply.ids)
            .into_iter()
            .map(|(entry, f)| DeadLetter::from_entry(entry, f))
            .collect())
    }

    /// The original input of a dead letter: its queue message's `source`
    /// (the dead letter's own has its credentials hidden).
    async fn original_source(&self, d: &DeadLetter) -> Result<Option<String>, String> {
        let Some(msg) = &d.msg else {
            return Ok((!d.source.contains("***")).then(|| d.source.clone()));
        };
        let stream = self.key("stream");
        let reply: StreamRangeReply = self
            .cmd
            .query(
                "read a queued input",
                redis::cmd("XRANGE").arg(&stream).arg(msg).arg(msg),
            )
            .await
            .map_err(err)?;
        Ok(entries(reply.ids)
            .into_iter()
            .next()
            .and_then(|(_, mut f)| f.remove("source")))
    }

    /// Moves the dead letters of `ids` (every one when `None`) back to the
    /// work queue, their deliveries counted from 0 again. Returns the ids
    /// moved, and the ids asked for that are not dead letters (or whose
    /// input cannot be found again).
    pub async fn requeue(
        &self,
        ids: Option<&[String]>,
    ) -> Result<(Vec<String>, Vec<String>), super::CoordinatorError> {
        let wanted: Option<HashSet<&str>> = ids.map(|i| i.iter().map(String::as_str).collect());
        let mut moved = Vec::new();
        let mut missing: HashSet<String> = ids.unwrap_or_default().iter().cloned().collect();
        for d in self.dead_letters().await? {
            if wanted.as_ref().is_some_and(|w| !w.contains(d.id.as_str())) {
                continue;
            }
            let Some(source) = self.original_source(&d).await? else {
                tracing::warn!(item = %d.id, "its input is not in the queue any more: not requeued");
                continue;
            };
            let mut call = REQUEUE.prepare_invoke();
            for part in ["dead", "stream", "results", "deliveries", "errors"] {
                call.key(self.key(part));
            }
            call.arg(&d.entry).arg(&d.id).arg(&source);
            let n = self
                .invoke("requeue a dead letter", &call)
                .await
                .map_err(err)?;
            if n == 1 {
                missing.remove(&d.id);
                moved.push(d.id);
            }
        }
        let mut missing: Vec<String> = missing.into_iter().collect();
        missing.sort();
        Ok((moved, missing))
    }
}
