//! What a run keeps count of, as the workers count it: every item's end
//! (the [`Ledger`]), each stage's and each host's figures. The run writes
//! them; the report reads them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::{Ended, Failure, Footprint, ItemFootprint};

/// Per-stage counters.
#[derive(Debug, Default)]
pub(crate) struct StageStats {
    pub processed: AtomicU64,
    pub busy_ns: AtomicU64,
    /// CPU time of the stage's code on its own threads (blocking stages).
    pub cpu_ns: AtomicU64,
    /// Time workers waited for an item (the mailbox was empty).
    pub starved_ns: AtomicU64,
    /// Time workers waited to hand an item on (the next mailbox was full).
    pub blocked_ns: AtomicU64,
    /// Items in the stage's workers right now.
    pub working: AtomicU64,
    /// The most items in its workers since the sampler last looked.
    pub peak_working: AtomicU64,
    /// The most items in its mailbox since the sampler last looked.
    pub peak_queued: AtomicU64,
    /// Items its code finished with and passed on (or ended).
    pub passed: AtomicU64,
    /// Items that failed at this stage.
    pub failed: AtomicU64,
    /// Tries each way of the stage took ([`crate::Item::took`]).
    pub paths: Mutex<BTreeMap<&'static str, u64>>,
}

impl StageStats {
    /// Counts one try that went `path`.
    pub(crate) fn took(&self, path: &'static str) {
        let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        *paths.entry(path).or_default() += 1;
    }

    /// The ways counted so far, by name.
    pub(crate) fn paths(&self) -> BTreeMap<String, u64> {
        let paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        paths.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }
}

/// Requests to one host.
#[derive(Debug, Default, Clone)]
pub(crate) struct HostStats {
    pub requests: u64,
    pub throttled: u64,
    pub retries: u64,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

/// Every item's end, counted once.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub total: AtomicU64,
    pub done: AtomicU64,
    pub skipped: AtomicU64,
    pub failed: AtomicU64,
    pub failures: Mutex<Vec<Failure>>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Items sent back to the start of the flow by a byte budget.
    pub requeued: AtomicU64,
    /// Inputs taken from the source (admitted or passed over by a shard or
    /// an id list).
    pub read: AtomicU64,
    /// Whether the source said it had no more inputs.
    pub exhausted: AtomicBool,
    /// The first items that ended with a known footprint.
    pub footprints: Mutex<Vec<ItemFootprint>>,
}

impl Ledger {
    /// Keeps where `id`'s data went, if known, while fewer than
    /// [`REPORTED_FOOTPRINTS`](crate::run::REPORTED_FOOTPRINTS) are kept.
    pub(crate) fn place(&self, id: &str, outcome: Ended, footprint: Option<Footprint>) {
        let Some(footprint) = footprint else {
            return;
        };
        let mut kept = self
            .footprints
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if kept.len() < crate::run::REPORTED_FOOTPRINTS {
            kept.push(ItemFootprint {
                id: id.to_owned(),
                outcome,
                footprint,
            });
        }
    }

    /// Items admitted that have not ended yet.
    pub(crate) fn in_flight(&self) -> u64 {
        let ended = self.done.load(Ordering::Acquire)
            + self.skipped.load(Ordering::Acquire)
            + self.failed.load(Ordering::Acquire);
        self.total.load(Ordering::Acquire).saturating_sub(ended)
    }
}
