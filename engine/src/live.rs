//! A live look inside a running pipeline, read when asked: per stage, the
//! items in its mailbox and in its workers, and the items it passed on or
//! failed so far; per limiter, what it holds. A [`Probe`] given in
//! [`RunOptions::probe`](crate::RunOptions::probe) (or
//! [`RunWatch::snapshot`](crate::RunWatch::snapshot) for a spawned run)
//! hands out [`Snapshot`]s while the run lasts; `warpline run --progress
//! stages` draws them.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::limit::LimiterKind;

/// Where every stage and limiter of a run stands at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Inputs admitted so far.
    pub admitted: u64,
    /// Items done (through every stage) so far.
    pub done: u64,
    /// Items skipped so far.
    pub skipped: u64,
    /// Items failed so far.
    pub failed: u64,
    /// Inputs the source holds, when it knows.
    pub total: Option<u64>,
    /// Per stage, in flow order.
    pub stages: Vec<StageSnapshot>,
    /// Per count or byte limiter (rates hold nothing).
    pub limiters: Vec<LimiterSnapshot>,
}

/// One stage in a [`Snapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StageSnapshot {
    /// The stage's name.
    pub name: String,
    /// Items waiting in its mailbox.
    pub queued: u64,
    /// Items in its workers (waiting for limiters, in the stage's code, or
    /// being handed on).
    pub working: u64,
    /// Items its code finished with so far and passed on (or ended, at the
    /// last stage).
    pub passed: u64,
    /// Items that failed at this stage so far.
    pub failed: u64,
}

/// One count or byte limiter in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimiterSnapshot {
    /// The limiter's name.
    pub name: String,
    /// `count` or `bytes`.
    pub kind: LimiterKind,
    /// Slots or bytes held.
    pub in_use: u64,
    /// Slots or bytes in all.
    pub capacity: u64,
    /// Items waiting for it.
    pub waiters: u64,
}

type Reader = Arc<dyn Fn() -> Snapshot + Send + Sync>;

/// Reads [`Snapshot`]s of the run it is given to (in
/// [`RunOptions::probe`](crate::RunOptions::probe)); clones read the same
/// run. Before the run starts and after it ends there is nothing to read.
#[derive(Clone, Default)]
pub struct Probe {
    reader: Arc<Mutex<Option<Reader>>>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("attached", &self.lock().is_some())
            .finish()
    }
}

impl Probe {
    /// A probe not given to any run yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where the run stands now; `None` while no run is attached.
    pub fn snapshot(&self) -> Option<Snapshot> {
        // Read outside the lock: the reader takes other locks (limiters').
        let reader = self.lock().clone()?;
        Some(reader())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Reader>> {
        self.reader.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attaches a run: `read` makes its snapshots until [`detach`](Self::detach).
    pub(crate) fn attach(&self, read: impl Fn() -> Snapshot + Send + Sync + 'static) {
        *self.lock() = Some(Arc::new(read));
    }

    /// The run has ended.
    pub(crate) fn detach(&self) {
        self.lock().take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_reads_only_while_attached() {
        let probe = Probe::new();
        assert_eq!(probe.snapshot(), None);
        let clone = probe.clone();
        probe.attach(|| Snapshot {
            admitted: 3,
            ..Snapshot::default()
        });
        assert_eq!(clone.snapshot().map(|s| s.admitted), Some(3));
        probe.detach();
        assert_eq!(clone.snapshot(), None);
    }
}
