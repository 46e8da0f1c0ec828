//! `warpline plan`: the pipeline as it will run, with every number
//! resolved and where it came from (the file, or a default sized from the
//! machine), and its memory: what bounds it, the most it can take, and the
//! peak expected from the first inputs ([`memory`]).

use std::fmt;

use serde::Serialize;
use warpline_engine::adapt::Adaptive;
use warpline_engine::defaults::WorkersFrom;
use warpline_engine::limit::LimiterKind;
use warpline_engine::Pipeline;

pub mod memory;
use memory::PlannedMemory;

/// A stage as it will run.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedStage {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// `async` (tokio tasks) or `blocking` (OS threads).
    pub workers_are: &'static str,
    /// Workers.
    pub workers: u32,
    /// Where `workers` came from: the file, or the kind's default.
    pub workers_from: WorkersFrom,
    /// Mailbox capacity.
    pub mailbox: u32,
    /// Limiters taken per item, in acquisition order.
    pub limits: Vec<String>,
    /// Limiters carried on, released on entry, charged by the stage itself.
    pub carry: Vec<String>,
    /// Released on entry.
    pub release: Vec<String>,
    /// Charged by the stage's own code.
    pub charges: Vec<String>,
    /// Tries per item.
    pub attempts: u32,
    /// Adaptive per-host limits, for a stage whose tries are requests to a
    /// host (a fetch); absent for other stages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<PlannedAdaptive>,
    /// What the stage says of how it will work: reproject's warp path
    /// (accelerated or GDAL's) and why. Left out of JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A request-making stage's adaptive per-host limits: on (with its
/// settings) or off.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedAdaptive {
    /// Whether the stage adapts.
    pub on: bool,
    /// The settings, when on: `initial`, `min`, `max`, `decrease`,
    /// `latency`, `max_throttled`.
    #[serde(flatten)]
    pub settings: Option<Adaptive>,
}

/// One stage's line in the text plan.
fn stage_line(s: &PlannedStage) -> String {
    let list = |word: &str, v: &[String]| {
        if v.is_empty() {
            String::new()
        } else {
            format!(", {word} {v:?}")
        }
    };
    format!(
        "    {:<12} {:<9} {:>3} {} worker{} ({}), mailbox {:>4}, tries {}, limits {:?}{}{}{}",
        s.name,
        s.kind,
        s.workers,
        s.workers_are,
        if s.workers == 1 { "" } else { "s" },
        s.workers_from,
        s.mailbox,
        s.attempts,
        s.limits,
        list("releases", &s.release),
        list("carries", &s.carry),
        list("charges", &s.charges),
    )
}

impl fmt::Display for PlannedAdaptive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.settings {
            Some(a) if self.on => write!(
                f,
                "adaptive on: concurrency per host from {} (min {}, max {}), decrease x{}, \
                 latency x{}, max_throttled {}",
                a.initial, a.min, a.max, a.decrease, a.latency, a.max_throttled
            ),
            _ => write!(f, "adaptive off"),
        }
    }
}

/// A limiter with its resolved numbers.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedLimiter {
    /// Its name.
    pub name: String,
    /// Count, bytes or rate.
    pub kind: LimiterKind,
    /// Slots, bytes, or burst.
    pub capacity: u64,
    /// Tokens per second (rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_second: Option<f64>,
    /// `host` when keyed per host (rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per: Option<String>,
    /// Where it came from: `declared`, or the default it is and what it
    /// is sized from (`default: half of RAM 15.6 GiB`).
    pub origin: String,
}

/// The pipeline as it will run.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The pipeline's name.
    pub pipeline: String,
    /// The source kind, and the unit budget it holds.
    pub source: String,
    /// Source limiters (held from admission to the item's end).
    pub source_limits: Vec<String>,
    /// The stages, in flow order.
    pub stages: Vec<PlannedStage>,
    /// `1 + sum(workers + mailbox)`: the most items in the pipeline at once.
    pub admission_bound: u64,
    /// The limiters, in acquisition order.
    pub limiters: Vec<PlannedLimiter>,
    /// GDAL's block cache, in bytes; `None` when no stage calls GDAL (no
    /// `decode`, `reproject` or `write`).
    pub gdal_cache_bytes: Option<u64>,
    /// The memory: what bounds it (and where that came from), the most it
    /// can take, and the peak expected from the first inputs.
    pub memory: PlannedMemory,
    /// The estimate's peak when there is one, else the most the process
    /// can take; `None` when neither is known (nothing bounds the memory
    /// and the inputs could not be sized).
    pub estimated_peak_memory_bytes: Option<u64>,
}

impl Plan {
    /// The plan of a compiled pipeline.
    pub fn of(p: &Pipeline) -> Self {
        let names =
            |v: &[warpline_engine::Limiter]| v.iter().map(|l| l.name().to_owned()).collect();
        let limiters: Vec<PlannedLimiter> = p
            .limits()
            .iter()
            .map(|l| PlannedLimiter {
                name: l.name().to_owned(),
                kind: l.kind(),
                capacity: l.capacity(),
                per_second: l.per_second(),
                per: l.rate_key().map(|k| format!("{k:?}").to_lowercase()),
                origin: limiter_origin(p, l.name()),
            })
            .collect();
        let gdal_cache_bytes = p
            .stages()
            .iter()
            .any(|s| warpline_stages::GDAL_KINDS.contains(&s.kind.as_str()))
            .then(warpline_stages::gdal::cache_max);
        let memory = PlannedMemory::of(p, gdal_cache_bytes);
        Plan {
            pipeline: p.name().to_owned(),
            source: p.source().kind.clone(),
            source_limits: names(&p.source().limits),
            stages: p
                .stages()
                .iter()
                .map(|s| PlannedStage {
                    name: s.name.clone(),
                    kind: s.kind.clone(),
                    workers_are: if s.handler.is_blocking() {
                        "blocking"
                    } else {
                        "async"
                    },
                    workers: s.workers,
                    workers_from: s.workers_from,
                    mailbox: s.mailbox,
                    limits: names(&s.limits),
                    carry: s.carry.clone(),
                    release: s.release.clone(),
                    charges: names(&s.charges),
                    attempts: s.retry.attempts,
                    adaptive: s.handler.counts_requests().then_some(PlannedAdaptive {
                        on: s.adaptive.is_some(),
                        settings: s.adaptive,
                    }),
                    notes: s.handler.notes(),
                })
                .collect(),
            admission_bound: p.admission_bound(),
            limiters,
            gdal_cache_bytes,
            estimated_peak_memory_bytes: memory.at_most_bytes,
            memory,
        }
    }

    /// The plan with its estimate of peak memory, from the first `inputs`
    /// inputs as the stages size them ([`Pipeline::size_first`]): local
    /// files are read, no stage that reaches the network or writes is
    /// run.
    pub async fn sized(mut self, p: &Pipeline, inputs: usize) -> Self {
        // What this process holds before it reads an input: the binary
        // and its GDAL, as the run will hold them.
        let resident = self
            .gdal_cache_bytes
            .is_some()
            .then(memory::resident_with_gdal)
            .flatten();
        let sizing = match p.size_first(inputs).await {
            Ok(s) => s,
            Err(e) => {
                self.memory.not_estimated = Some(e.to_string());
                return self;
            }
        };
        let registry = warpline::registry();
        // The stages whose items grow there: their sizes must be known.
        let grows: Vec<bool> = p
            .stages()
            .iter()
            .map(|s| {
                s.limits.iter().any(|l| l.kind() == LimiterKind::Bytes)
                    || registry.defaults(&s.kind).memory
                        == warpline_engine::registry::DefaultCharge::Limits
            })
            .collect();
        self.memory = self
            .memory
            .estimated(p, &sizing, self.gdal_cache_bytes, resident, &grows);
        if let Some(e) = &self.memory.estimate {
            self.estimated_peak_memory_bytes = Some(e.peak_bytes);
        }
        self
    }
}

/// Where a limiter came from, as the plan says it.
fn limiter_origin(p: &Pipeline, name: &str) -> String {
    if !p.is_default_limiter(name) {
        "declared".to_owned()
    } else if name == warpline_engine::defaults::MEMORY {
        p.memory().to_string()
    } else {
        "default: a quarter of the open-file limit, less 64".to_owned()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
        writeln!(f, "pipeline `{}`", self.pipeline)?;
        writeln!(
            f,
            "  source: {} (holds {:?} per item)",
            self.source, self.source_limits
        )?;
        writeln!(f, "  stages:")?;
        for s in &self.stages {
            writeln!(f, "{}", stage_line(s))?;
            if let Some(a) = &s.adaptive {
                writeln!(f, "      {a}")?;
            }
            for note in &s.notes {
                writeln!(f, "      {note}")?;
            }
        }
        writeln!(f, "  admission bound: {} items", self.admission_bound)?;
        writeln!(f, "  limiters (in acquisition order):")?;
        for l in &self.limiters {
            match l.kind {
                LimiterKind::Count => writeln!(
                    f,
                    "    {:<12} count  {} slots ({})",
                    l.name, l.capacity, l.origin
                )?,
                LimiterKind::Bytes => writeln!(
                    f,
                    "    {:<12} bytes  {} ({})",
                    l.name,
                    size(l.capacity),
                    l.origin
                )?,
                LimiterKind::Rate => writeln!(
                    f,
                    "    {:<12} rate   {}/s, burst {}, one bucket per {}",
                    l.name,
                    l.per_second.unwrap_or_default(),
                    l.capacity,
                    match l.per.as_deref() {
                        Some("host") => "host",
                        _ => "run",
                    }
                )?,
            }
        }
        if let Some(cache) = self.gdal_cache_bytes {
            writeln!(f, "  GDAL block cache: {}", size(cache))?;
        }
        write!(f, "{}", self.memory)
    }
}

#[cfg(test)]
mod tests;
