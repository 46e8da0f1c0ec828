//! `warpline plan`: the pipeline as it will run, with every number resolved.

use std::fmt;

use serde::Serialize;
use warpline_engine::adapt::Adaptive;
use warpline_engine::limit::LimiterKind;
use warpline_engine::Pipeline;

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
        "    {:<12} {:<9} {:>3} {} worker{}, mailbox {:>4}, tries {}, limits {:?}{}{}{}",
        s.name,
        s.kind,
        s.workers,
        s.workers_are,
        if s.workers == 1 { "" } else { "s" },
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
    /// The most memory the run should take: every byte budget, GDAL's
    /// cache (when a stage calls GDAL), and the process itself: 64 MiB, or
    /// 96 MiB with GDAL (its libraries and state are about 70-75 MiB of
    /// resident memory before any tile: docs/performance.md, the skewed matrix).
    pub estimated_peak_memory_bytes: u64,
}

/// What the process takes besides budgets and caches.
const BASE_MEMORY: u64 = 64 << 20;

/// The same, when a stage calls GDAL (measured 70-75 MiB before any item:
/// GDAL's, PROJ's and the binary's pages and state).
const BASE_MEMORY_GDAL: u64 = 96 << 20;

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
            })
            .collect();
        let budgets: u64 = limiters
            .iter()
            .filter(|l| l.kind == LimiterKind::Bytes)
            .map(|l| l.capacity)
            .sum();
        let gdal_cache_bytes = p
            .stages()
            .iter()
            .any(|s| warpline_stages::GDAL_KINDS.contains(&s.kind.as_str()))
            .then(warpline_stages::gdal::cache_max);
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
            estimated_peak_memory_bytes: budgets
                + gdal_cache_bytes.map_or(BASE_MEMORY, |cache| cache + BASE_MEMORY_GDAL),
        }
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
                LimiterKind::Count => {
                    writeln!(f, "    {:<12} count  {} slots", l.name, l.capacity)?
                }
                LimiterKind::Bytes => {
                    writeln!(f, "    {:<12} bytes  {}", l.name, size(l.capacity))?
                }
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
        let gdal = match self.gdal_cache_bytes {
            Some(cache) => {
                writeln!(f, "  GDAL block cache: {}", size(cache))?;
                " + GDAL cache"
            }
            None => "",
        };
        writeln!(
            f,
            "  estimated peak memory: {} (byte budgets{gdal} + {} MiB for the process)",
            size(self.estimated_peak_memory_bytes),
            if self.gdal_cache_bytes.is_some() {
                BASE_MEMORY_GDAL
            } else {
                BASE_MEMORY
            } >> 20
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(stage: &str) -> Plan {
        let toml = format!(
            "[pipeline]\nflow = [\"a\"]\n[source]\nkind = \"generate\"\ncount = 1\n\
             [limits.memory]\nbudget = \"8MiB\"\n[stages.a]\n{stage}\nlimits = [\"memory\"]\n"
        );
        Plan::of(&Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap())
    }

    #[test]
    fn a_pipeline_without_gdal_stages_has_no_gdal_cache() {
        let p = plan("kind = \"hold\"");
        assert_eq!(p.gdal_cache_bytes, None);
        assert_eq!(p.estimated_peak_memory_bytes, (8 << 20) + BASE_MEMORY);
        let text = p.to_string();
        assert!(!text.contains("GDAL"), "{text}");
        assert!(text.contains("1 async worker,"), "{text}");
        assert!(text.contains("estimated peak memory: 72.0 MiB"), "{text}");
        let json = serde_json::to_value(&p).unwrap();
        assert!(json["gdal_cache_bytes"].is_null(), "{json}");
    }

    #[test]
    fn a_pipeline_with_a_gdal_stage_counts_its_cache() {
        let p = plan("kind = \"decode\"");
        let cache = p.gdal_cache_bytes.expect("decode calls GDAL");
        assert_eq!(
            p.estimated_peak_memory_bytes,
            (8 << 20) + cache + BASE_MEMORY_GDAL
        );
        assert!(p.to_string().contains("GDAL block cache"), "{p}");
    }
}
