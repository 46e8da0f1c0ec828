//! `plan`'s memory: what bounds it and where that came from, the most the
//! process can hold under that bound, and the peak it should reach,
//! estimated from the first inputs as the stages size them
//! ([`Pipeline::size_first`]).
//!
//! The estimate models the usual shape of a run: the stage whose items
//! hold the most (the warp, holding its input, its output and its chunk
//! buffers) is the slowest, so its workers are full, and every slot before
//! it (its mailbox, the workers and mailboxes of the stages before) holds
//! an item waiting, as back-pressure leaves them; each stage after it
//! holds one item on its way out. No more items than the source has, and
//! no more bytes than the budgets. To that come GDAL's block cache (as
//! full as the items being warped can fill it) and the process itself.
//! docs/performance.md ("The smallest pipeline") checks it against
//! measured peaks.

use serde::Serialize;
use warpline_engine::defaults::MemoryFrom;
use warpline_engine::limit::LimiterKind;
use warpline_engine::sizing::Sizing;
use warpline_engine::Pipeline;

/// The most the process takes besides its budgets and caches: the bound
/// `plan` gives.
pub(crate) const BASE_MEMORY: u64 = 64 << 20;

/// The same, when a stage calls GDAL: its libraries and state are 70-75
/// MiB of resident memory before any item, and the heap keeps 20-60 MiB
/// free beside a full budget (docs/design/memory-budget.md).
pub(crate) const BASE_MEMORY_GDAL: u64 = 96 << 20;

/// What the process itself is expected to take at the peak, for the
/// estimate: the binary and the runtime (the synthetic pipeline peaked at
/// 42 MiB with 8 MiB of budget in use).
pub(crate) const PROCESS_ESTIMATE: u64 = 32 << 20;

/// The same with GDAL, where the system does not say what the process
/// holds (see [`resident_with_gdal`]): Debian's GDAL 3.6 and its libraries
/// are 70-75 MiB before any item (docs/design/memory-budget.md). The free
/// pages the heap keeps beside a full budget are not counted: with the
/// items' charges (which count each warp's chunk buffers at
/// `warp_memory`, and keep them charged until the item ends) the estimate
/// came within 11% of measured peaks (docs/performance.md, "The smallest
/// pipeline").
pub(crate) const PROCESS_ESTIMATE_GDAL: u64 = 75 << 20;

/// What this process holds now (Linux's `VmRSS`) with GDAL's drivers
/// registered: the run's binary and GDAL as they will be before any item.
/// It depends on the GDAL build: 72 MiB with Debian's GDAL 3.6 and every
/// library its drivers link, 45 MiB with a `bundled` GDAL 3.12 of a few
/// drivers.
pub(crate) fn resident_with_gdal() -> Option<u64> {
    warpline_gdal::init();
    warpline_engine::report::rss_bytes()
}

/// How many inputs `plan` sizes unless told (`--sample`).
pub const DEFAULT_SAMPLE: usize = 8;

/// The peak memory `plan` expects, and what it is made of.
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    /// The process itself.
    pub process_bytes: u64,
    /// GDAL's block cache, as full as the items being warped fill it.
    pub gdal_cache_bytes: u64,
    /// What the items hold at the peak.
    pub items_bytes: u64,
    /// The sum.
    pub peak_bytes: u64,
    /// Inputs sized.
    pub inputs_sized: usize,
    /// Inputs the source holds, when it says.
    pub inputs_total: Option<u64>,
    /// How the items' bytes were counted, in a sentence.
    pub how: String,
}

/// What a pipeline's memory comes to.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedMemory {
    /// What bounds it, and where that came from.
    pub bound_by: MemoryFrom,
    /// The most the process should hold: every byte budget, GDAL's cache
    /// and the process; `None` when nothing bounds it.
    pub at_most_bytes: Option<u64>,
    /// The peak expected from the first inputs; `None` when they could
    /// not be sized (see `not_estimated`).
    pub estimate: Option<Estimate>,
    /// Why there is no estimate, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_estimated: Option<String>,
}

/// The process's share in the bound: more when a stage calls GDAL.
pub(crate) fn process_bytes(gdal: bool) -> u64 {
    if gdal {
        BASE_MEMORY_GDAL
    } else {
        BASE_MEMORY
    }
}

impl PlannedMemory {
    /// The bound alone, before any input is sized.
    pub(crate) fn of(p: &Pipeline, gdal_cache: Option<u64>) -> Self {
        let budgets: u64 = p
            .limits()
            .iter()
            .filter(|l| l.kind() == LimiterKind::Bytes)
            .map(|l| l.capacity())
            .sum();
        let unbounded = p.memory().is_unbounded();
        PlannedMemory {
            bound_by: p.memory().clone(),
            at_most_bytes: (!unbounded)
                .then(|| budgets + gdal_cache.unwrap_or(0) + process_bytes(gdal_cache.is_some())),
            estimate: None,
            not_estimated: Some("the inputs were not sized".to_owned()),
        }
    }

    /// With the estimate from `sizing`.
    pub(crate) fn estimated(
        mut self,
        p: &Pipeline,
        sizing: &Sizing,
        gdal_cache: Option<u64>,
        resident: Option<u64>,
        grows: &[bool],
    ) -> Self {
        if let Some(why) = not_sized(p, sizing, grows) {
            self.not_estimated = Some(why);
            return self;
        }
        let model = Model::of(p, sizing);
        let budgets: Option<u64> = (!p.memory().is_unbounded()).then(|| {
            p.limits()
                .iter()
                .filter(|l| l.kind() == LimiterKind::Bytes)
                .map(|l| l.capacity())
                .sum()
        });
        // The budgets cap what items hold only when every stage where
        // items grow charges one.
        let items = match budgets {
            Some(b) if model.bounded => model.bytes.min(b),
            _ => model.bytes,
        };
        let cache = gdal_cache.map_or(0, |c| c.min(model.warping));
        let process = if gdal_cache.is_some() {
            resident.unwrap_or(PROCESS_ESTIMATE_GDAL)
        } else {
            PROCESS_ESTIMATE
        };
        let mut how = model.how;
        if items < model.bytes {
            how.push_str("; the budgets allow no more");
        }
        self.estimate = Some(Estimate {
            process_bytes: process,
            gdal_cache_bytes: cache,
            items_bytes: items,
            peak_bytes: process + cache + items,
            inputs_sized: sizing.inputs,
            inputs_total: sizing.total,
            how,
        });
        self.not_estimated = None;
        self
    }
}

/// Why the sizing cannot make an estimate, if it cannot.
fn not_sized(p: &Pipeline, sizing: &Sizing, grows: &[bool]) -> Option<String> {
    if sizing.inputs == 0 {
        return Some(match sizing.failed.first() {
            None => "the source gave no input to size".to_owned(),
            Some(first) => format!("no input could be sized: {first}"),
        });
    }
    let stages = p.stages();
    let missed = (0..stages.len()).find(|i| grows[*i] && !sizing.sized[*i])?;
    let stopped = (0..missed).rev().find(|i| sizing.sized[*i]);
    Some(match stopped {
        _ if !sizing.failed.is_empty() => format!(
            "what stage `{}` holds is not known: sizing the first inputs failed: {}{}",
            stages[missed].name,
            sizing.failed[0],
            match sizing.failed.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more)"),
            }
        ),
        Some(i) => format!(
            "what stage `{}` holds is not known: plan sizes the first inputs by running the \
             stages that may run before a run (a fetch of local files, decode), and `{}` may \
             not (it reaches the network, writes or takes time)",
            stages[missed].name, stages[i].name
        ),
        None => format!(
            "what stage `{}` holds is not known: the first inputs could not be sized",
            stages[missed].name
        ),
    })
}

/// The items' bytes at the peak, by the model in the module's
/// documentation.
struct Model {
    bytes: u64,
    /// Whether every stage where items grow charges a byte budget (so the
    /// budgets cap the bytes).
    bounded: bool,
    /// What the items in the heaviest stage hold (GDAL's cache fills from
    /// their blocks).
    warping: u64,
    how: String,
}

impl Model {
    fn of(p: &Pipeline, sizing: &Sizing) -> Self {
        let stages = p.stages();
        let held = &sizing.held;
        let k = (0..held.len())
            .rev()
            .max_by_key(|i| held[*i])
            .unwrap_or_default();
        let before = |j: usize| if j == 0 { 0 } else { held[j - 1] };
        let mut left = sizing.total.unwrap_or(u64::MAX).max(sizing.inputs as u64);
        let mut bytes = 0u64;
        let mut take = |count: u32, each: u64| {
            let n = u64::from(count).min(left);
            left -= n;
            bytes = bytes.saturating_add(n.saturating_mul(each));
            n
        };
        let Some(heaviest) = stages.get(k) else {
            return Model {
                bytes: 0,
                bounded: true,
                warping: 0,
                how: "no stage".to_owned(),
            };
        };
        let at_k = take(heaviest.workers, held[k]);
        let mut waiting = take(heaviest.mailbox, before(k));
        for j in (0..k).rev() {
            waiting += take(stages[j].workers, held[j]);
            waiting += take(stages[j].mailbox, before(j));
        }
        let mut after = 0;
        for (j, _) in stages.iter().enumerate().skip(k + 1) {
            after += take(1, held[j]);
        }
        let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
        let mut how = format!("{at_k} in `{}` at {} each", heaviest.name, size(held[k]));
        if waiting > 0 {
            how.push_str(&format!(
                ", {waiting} waiting before it at up to {}",
                size((0..=k).map(before).max().unwrap_or(0))
            ));
        }
        if after > 0 {
            how.push_str(&format!(", {after} after it"));
        }
        let bounded = stages.iter().enumerate().all(|(j, s)| {
            held[j] <= before(j)
                || !s.charges.is_empty()
                || s.limits.iter().any(|l| l.kind() == LimiterKind::Bytes)
        });
        Model {
            bytes,
            bounded,
            warping: at_k.saturating_mul(held[k]),
            how,
        }
    }
}

impl std::fmt::Display for PlannedMemory {
    /// Two lines: what bounds the memory (or that nothing does, and how
    /// to bound it), and the estimated peak (or why there is none).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
        match (&self.bound_by, self.at_most_bytes) {
            (MemoryFrom::Unbounded { .. }, _) | (_, None) => {
                let why = match &self.bound_by {
                    MemoryFrom::Unbounded { why } => why.as_str(),
                    _ => "no byte budget",
                };
                writeln!(f, "  memory not bounded: {why}")?;
            }
            (from, Some(at_most)) => {
                let what = match from.default_budget() {
                    Some(budget) => format!(
                        "the default budget `{}` of {} ({from})",
                        warpline_engine::defaults::MEMORY,
                        size(budget)
                    ),
                    None => format!("the byte budgets ({from})"),
                };
                writeln!(
                    f,
                    "  memory: bounded by {what}; at most {} with GDAL's cache and the process",
                    size(at_most)
                )?;
            }
        }
        match (&self.estimate, &self.not_estimated) {
            (Some(e), _) => {
                let of = match e.inputs_total {
                    Some(total) => format!("the first {} of {total} inputs", e.inputs_sized),
                    None => format!("the first {} inputs", e.inputs_sized),
                };
                writeln!(
                    f,
                    "  estimated peak memory: {} = {} for the process + {} of GDAL's cache + {} \
                     held by items ({of} sized: {})",
                    size(e.peak_bytes),
                    size(e.process_bytes),
                    size(e.gdal_cache_bytes),
                    size(e.items_bytes),
                    e.how
                )
            }
            (None, why) => writeln!(
                f,
                "  estimated peak memory: not estimated: {}",
                why.as_deref().unwrap_or("the inputs were not sized")
            ),
        }
    }
}
