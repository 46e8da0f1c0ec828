//! The run report: what became of every item, what each stage did, how full
//! each limiter got. Printed at the end of a run and written as JSON with
//! `--report FILE`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use crate::item::ErrorKind;
use crate::limit::{LimiterKind, Window};
pub use crate::observe::RunOutcome;
use crate::observe::Timeline;
use crate::pipeline::Pipeline;

mod footprint;
mod ledger;
pub use footprint::{Ended, Footprint, ItemFootprint};
pub(crate) use ledger::{HostStats, Ledger, StageStats};
use std::collections::HashMap;

/// What became of the items. `done + skipped + failed == total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ItemCounts {
    /// Inputs admitted (including malformed ones the source reported).
    pub total: u64,
    /// Passed every stage.
    pub done: u64,
    /// Stopped early on purpose (for example: output already complete).
    pub skipped: u64,
    /// Failed at some stage, or interrupted.
    pub failed: u64,
    /// Times an item gave back its share of a byte budget so that an item
    /// deeper in the flow could finish, and went to the start of the flow
    /// again (not an end: the item is counted once, where it ends).
    pub requeued: u64,
    /// Inputs the source holds that were never admitted because the run was
    /// stopped or aborted first (0 when every input was admitted), so that
    /// `total + not_admitted` is what the source holds. `None` (`null`)
    /// when the source does not know its length, or the run takes only a
    /// shard or a list of ids.
    pub not_admitted: Option<u64>,
}

/// One stage's work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageReport {
    /// The stage's name.
    pub name: String,
    /// The stage kind.
    pub kind: String,
    /// Workers.
    pub workers: u32,
    /// Mailbox capacity.
    pub mailbox: u32,
    /// Items the stage's code ran on (whatever the outcome).
    pub processed: u64,
    /// Time spent in the stage's code, summed over workers, in seconds.
    pub busy_s: f64,
    /// Time workers waited for an item (the mailbox was empty), summed.
    pub starved_s: f64,
    /// Time workers waited to hand an item on (the next mailbox was full).
    pub blocked_s: f64,
    /// Busy time over the time its workers had: `busy_s / (workers x elapsed_s)`.
    pub utilisation: f64,
    /// CPU time the stage's code used, summed over workers, in seconds:
    /// `null` for an async stage (its tasks share the runtime's threads, so
    /// their CPU time is not theirs alone).
    pub cpu_s: Option<f64>,
    /// Tries per way the stage's code said it took with an item
    /// ([`Item::took`](crate::Item::took)), e.g. reproject's `memory` and
    /// `disk`; empty (and left out of JSON) for a stage that never says.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub paths: BTreeMap<String, u64>,
    /// What the stage said of how it works ([`Stage::notes`](crate::Stage::notes)):
    /// reproject's warp path and why. Left out of JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One limiter's use during this run: for a limiter shared with other runs
/// (see [`Limiter::window`](crate::limit::Limiter::window)), what happened
/// while this run went on, not what earlier runs did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimiterReport {
    /// The resource name.
    pub name: String,
    /// Count, bytes or rate.
    pub kind: LimiterKind,
    /// Slots (count), bytes (bytes), or burst (rate).
    pub capacity: u64,
    /// The most slots or bytes held at once during the run; `null` for a
    /// rate limiter.
    pub peak_in_use: Option<u64>,
    /// Tokens per second, for a rate limiter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_second: Option<f64>,
    /// Time spent waiting for this limiter, summed over items, in seconds.
    pub wait_s: f64,
    /// The 95th percentile of an acquisition's wait, in seconds.
    pub p95_wait_s: f64,
    /// The share of the run during which an item was waiting for this
    /// limiter: it was at capacity (0..1).
    pub share_at_capacity: f64,
}

/// Requests to one remote host (by the stages that fetch).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostReport {
    /// The host (`(local)` for files).
    pub host: String,
    /// Tries, retries included.
    pub requests: u64,
    /// Requests per second between the first and the last.
    pub achieved_per_s: f64,
    /// Answers 429 Too Many Requests.
    pub throttled_429: u64,
    /// Tries that were tried again.
    pub retries: u64,
    /// Where the host's adaptive limits stood at the end (`null` when the
    /// stage does not adapt).
    pub adaptive: Option<crate::adapt::HostLimits>,
}

/// One failed item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The item's id.
    pub id: String,
    /// The item's source.
    pub source: String,
    /// The stage that failed it (`source` for a malformed input).
    pub stage: String,
    /// How the error is treated.
    pub kind: ErrorKind,
    /// What went wrong.
    pub message: String,
    /// Attempts made at that stage.
    pub attempts: u32,
    /// The HTTP status, when a server's answer failed the item.
    pub status: Option<u16>,
}

#[cfg(test)]
mod tests;
mod text;

/// [`redact`], kept here for the callers that
/// found it here.
pub use crate::redact::redact;

/// The report of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The pipeline's name.
    pub pipeline: String,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// Wall-clock seconds from start to the last worker's end.
    pub elapsed_s: f64,
    /// Items done per second.
    pub throughput_per_s: f64,
    /// Bytes read (fetched).
    pub bytes_in: u64,
    /// Bytes written.
    pub bytes_out: u64,
    /// What limited the run, in a sentence.
    pub diagnosis: String,
    /// What became of the items.
    pub items: ItemCounts,
    /// Per stage, in flow order.
    pub stages: Vec<StageReport>,
    /// Per limiter, in acquisition order.
    pub limiters: Vec<LimiterReport>,
    /// Per remote host.
    pub hosts: Vec<HostReport>,
    /// The first failures, up to [`REPORTED_FAILURES`](crate::run::REPORTED_FAILURES).
    pub failures: Vec<Failure>,
    /// Failures counted but not listed.
    pub failures_not_listed: u64,
    /// The process's peak resident memory so far, in bytes (Linux; `null`
    /// elsewhere). For an embedding service it covers the whole process.
    pub peak_rss_bytes: Option<u64>,
    /// Items in flight and limiter use over time, when the run was sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
    /// Each time no item moved for the pipeline's `stall_warning`, with what
    /// waited for what (empty when the run never stalled).
    pub stalls: Vec<crate::stall::Stall>,
    /// Where the items' data went: each item whose footprint a stage knew
    /// when it ended, in the order they ended, up to
    /// [`REPORTED_FOOTPRINTS`](crate::run::REPORTED_FOOTPRINTS). Left out of
    /// JSON when empty (a run whose stages know no footprint).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub footprints: Vec<ItemFootprint>,
}

/// Above this share of the run at capacity, a limiter is called the
/// bottleneck.
const BOUND: f64 = 0.5;

/// What limited the run, in a sentence, with the numbers behind it: the
/// first of a limiter at capacity, blocking stages keeping every core
/// busy, and a stage busy most of the run that applies.
pub(crate) fn diagnose(pipeline: &Pipeline, r: &RunReport) -> String {
    if r.items.total == 0 {
        return match r.outcome {
            RunOutcome::Completed => "the source gave no input (an empty list, a pattern that \
                matched no file, or an empty shard): nothing was done"
                .to_owned(),
            _ => "no input was admitted before the run was stopped".to_owned(),
        };
    }
    limiter_bound(pipeline, r)
        .or_else(|| cpu_bound(pipeline, r))
        .or_else(|| stage_bound(r))
        .unwrap_or_else(|| unbound(r))
}

/// When nothing inside the limits held the run back: says so with the
/// busiest stage's share, so the sentence is true of a stage busy 77%.
fn unbound(r: &RunReport) -> String {
    let busiest = r
        .stages
        .iter()
        .max_by(|a, b| a.utilisation.total_cmp(&b.utilisation))
        .map(|s| {
            format!(
                " (the busiest, `{}`, {}%)",
                s.name,
                (s.utilisation * 100.0).round()
            )
        })
        .unwrap_or_default();
    format!(
        "no limiter was at capacity half the run and no stage's workers were busy 80% of it{busiest}: \
         something outside the limits serialises (the source, the network or the disk), or the run \
         was too short to fill them"
    )
}

/// The limiter longest at capacity, when it was for more than [`BOUND`]
/// of the run, with a hint of what would help.
fn limiter_bound(pipeline: &Pipeline, r: &RunReport) -> Option<String> {
    let l = r
        .limiters
        .iter()
        .filter(|l| l.share_at_capacity >= BOUND)
        .max_by(|a, b| a.share_at_capacity.total_cmp(&b.share_at_capacity))?;
    let stages: Vec<String> = pipeline
        .stages
        .iter()
        .filter(|s| s.limits.iter().any(|x| x.name() == l.name))
        .map(|s| s.name.clone())
        .collect();
    let who = match stages.as_slice() {
        [] => "the source".to_owned(),
        [one] => format!("`{one}`"),
        many => many
            .iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(" and "),
    };
    let pct = (l.share_at_capacity * 100.0).round();
    let blocking = stages.iter().any(|s| {
        pipeline
            .stages
            .iter()
            .any(|p| &p.name == s && p.handler.is_blocking())
    });
    let hint = limiter_hint(l, blocking, r);
    Some(format!(
        "{who} {} the bottleneck: `{}` was at capacity {pct}% of the run{hint}",
        if stages.len() > 1 { "are" } else { "is" },
        l.name
    ))
}

/// What would help a limiter at capacity, by its kind.
fn limiter_hint(l: &LimiterReport, blocking: bool, r: &RunReport) -> String {
    let cores = u64::from(crate::units::cores());
    match l.kind {
        // Measured in docs/pipeline.md ("How many `cpu` permits").
        LimiterKind::Count if blocking && l.capacity == cores => format!(
            "; `{}` has as many permits as cores: one more (\"cores+1\") keeps the cores busy while permits change hands, more will not help",
            l.name
        ),
        LimiterKind::Count if blocking && l.capacity > cores => {
            format!("; `{}` is above the core count: raising it will not help", l.name)
        }
        LimiterKind::Count => format!("; raising `{}` (now {}) may help", l.name, l.capacity),
        LimiterKind::Bytes => format!(
            "; a larger `{}` budget (now {}) or fewer workers would admit more",
            l.name,
            bytesize::ByteSize(l.capacity).display().iec()
        ),
        LimiterKind::Rate => match r.hosts.iter().map(|h| h.throttled_429).sum::<u64>() {
            // The bucket waited, but for the server's Retry-After
            // pauses: the server's limit set the pace, not the bucket.
            0 => format!(
                "; the rate `{}` ({}/s) sets the pace, as intended",
                l.name,
                l.per_second.unwrap_or_default()
            ),
            refused => format!(
                "; but the server answered 429 {refused} times and its Retry-After paused `{}`: \
                 the server allows less than {}/s, so lower `per_second` to its rate",
                l.name,
                l.per_second.unwrap_or_default()
            ),
        },
    }
}

/// Blocking stages keeping every core busy: the machine is the limit,
/// whichever stage is busiest (more of its workers would only take cores
/// from the others). Their CPU time, not their busy time: a worker waiting
/// for the disk is busy without using a core.
fn cpu_bound(pipeline: &Pipeline, r: &RunReport) -> Option<String> {
    let cores = f64::from(crate::units::cores());
    let blocking_cpu: f64 = pipeline
        .stages
        .iter()
        .zip(&r.stages)
        .filter(|(p, _)| p.handler.is_blocking())
        .map(|(_, s)| s.cpu_s.unwrap_or(0.0))
        .sum();
    let share = blocking_cpu / (cores * r.elapsed_s.max(f64::MIN_POSITIVE));
    if share < 0.8 {
        return None;
    }
    let names: Vec<String> = pipeline
        .stages
        .iter()
        .filter(|p| p.handler.is_blocking())
        .map(|p| format!("`{}`", p.name))
        .collect();
    Some(format!(
        "the CPU is the bottleneck: {} kept the {} cores busy {}% of the run; more workers will not help",
        names.join(", "),
        cores,
        (share.min(1.0) * 100.0).round()
    ))
}

/// The stage busiest, when it was busy for 80% of the run or more.
fn stage_bound(r: &RunReport) -> Option<String> {
    let s = r
        .stages
        .iter()
        .max_by(|a, b| a.utilisation.total_cmp(&b.utilisation))
        .filter(|s| s.utilisation >= 0.8)?;
    Some(format!(
        "`{}` is the bottleneck: {} busy {}% of the run; more workers (and the limits they need) may help",
        s.name,
        if s.workers == 1 {
            "its 1 worker was".to_owned()
        } else {
            format!("its {} workers were", s.workers)
        },
        (s.utilisation * 100.0).round()
    ))
}

/// CPU time (user + system) of the calling thread so far; zero where the
/// platform cannot say.
pub fn thread_cpu() -> Duration {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    }
    #[cfg(not(unix))]
    Duration::ZERO
}

/// The process's peak resident set size (VmHWM), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// The process's resident set size now (VmRSS), in bytes.
pub fn rss_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// A size Linux gives in kB in `/proc/self/status` (`field` with its colon).
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How a run ended, for [`RunReport::build`].
pub(crate) struct RunEnd<'a> {
    pub outcome: RunOutcome,
    pub elapsed: Duration,
    pub timeline: Option<Timeline>,
    pub hosts: &'a HashMap<String, HostStats>,
    /// One window per limiter of the pipeline, in order, opened as the run
    /// started: the figures are this run's own, even for a shared limiter.
    pub windows: &'a [Window],
    /// How many inputs the source holds, when it knows and the run takes
    /// them all (no shard, no id list).
    pub length: Option<u64>,
}

/// Each host's requests, by host.
fn host_reports(hosts: &HashMap<String, HostStats>) -> Vec<HostReport> {
    let mut reports: Vec<HostReport> = hosts
        .iter()
        .map(|(host, h)| {
            let span = match (h.first, h.last) {
                (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
                _ => 0.0,
            };
            HostReport {
                host: host.clone(),
                requests: h.requests,
                achieved_per_s: if span > 0.0 {
                    (h.requests.saturating_sub(1)) as f64 / span
                } else {
                    0.0
                },
                throttled_429: h.throttled,
                retries: h.retries,
                adaptive: None,
            }
        })
        .collect();
    reports.sort_by(|a, b| a.host.cmp(&b.host));
    reports
}

/// Each limiter's figures over this run's window.
fn limiter_reports(pipeline: &Pipeline, windows: &[Window], secs: f64) -> Vec<LimiterReport> {
    pipeline
        .limits
        .iter()
        .zip(windows)
        .map(|(l, w)| {
            let fig = w.figures();
            LimiterReport {
                name: l.name().to_owned(),
                kind: l.kind(),
                capacity: l.capacity(),
                peak_in_use: (l.kind() != LimiterKind::Rate).then_some(fig.peak_in_use),
                per_second: l.per_second(),
                wait_s: fig.total_wait.as_secs_f64(),
                p95_wait_s: fig.p95_wait.as_secs_f64(),
                share_at_capacity: (fig.contended.as_secs_f64() / secs).min(1.0),
            }
        })
        .collect()
}

impl RunReport {
    pub(crate) fn build(
        pipeline: &Pipeline,
        ledger: &Ledger,
        stats: &[StageStats],
        end: RunEnd<'_>,
    ) -> Self {
        let RunEnd {
            outcome,
            elapsed,
            timeline,
            hosts,
            windows,
            length,
        } = end;
        let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let failures = ledger
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let failed = ledger.failed.load(Ordering::Acquire);
        let done = ledger.done.load(Ordering::Acquire);
        let not_admitted = length.map(|len| {
            if ledger.exhausted.load(Ordering::Acquire) {
                0
            } else {
                len.saturating_sub(ledger.read.load(Ordering::Acquire))
            }
        });
        let hosts = host_reports(hosts);
        let footprints = ledger
            .footprints
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let mut report = RunReport {
            pipeline: pipeline.name.clone(),
            outcome,
            elapsed_s: elapsed.as_secs_f64(),
            throughput_per_s: done as f64 / secs,
            bytes_in: ledger.bytes_in.load(Ordering::Acquire),
            bytes_out: ledger.bytes_out.load(Ordering::Acquire),
            diagnosis: String::new(),
            items: ItemCounts {
                total: ledger.total.load(Ordering::Acquire),
                done,
                skipped: ledger.skipped.load(Ordering::Acquire),
                failed,
                requeued: ledger.requeued.load(Ordering::Acquire),
                not_admitted,
            },
            stages: stage_reports(pipeline, stats, secs),
            limiters: limiter_reports(pipeline, windows, secs),
            hosts,
            failures_not_listed: failed.saturating_sub(failures.len() as u64),
            failures,
            peak_rss_bytes: peak_rss_bytes(),
            timeline,
            stalls: Vec::new(),
            footprints,
        };
        report.diagnosis = diagnose(pipeline, &report);
        report
    }

    /// How many cores the blocking stages kept busy on average: their CPU
    /// time over the run's wall time (`None` when they used none, or the
    /// run took no time).
    pub fn cores_busy(&self) -> Option<f64> {
        let cpu: f64 = self.stages.iter().filter_map(|s| s.cpu_s).sum();
        (cpu > 0.0 && self.elapsed_s > 0.0).then(|| cpu / self.elapsed_s)
    }

    /// The report of the stage with this name.
    pub fn stage(&self, name: &str) -> Option<&StageReport> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// The report of the limiter with this name.
    pub fn limiter(&self, name: &str) -> Option<&LimiterReport> {
        self.limiters.iter().find(|l| l.name == name)
    }
}

/// Each stage's figures, from its counters, over `secs` of run.
fn stage_reports(pipeline: &Pipeline, stats: &[StageStats], secs: f64) -> Vec<StageReport> {
    pipeline
        .stages
        .iter()
        .zip(stats)
        .map(|(plan, s)| StageReport {
            name: plan.name.clone(),
            kind: plan.kind.clone(),
            workers: plan.workers,
            mailbox: plan.mailbox,
            processed: s.processed.load(Ordering::Acquire),
            busy_s: Duration::from_nanos(s.busy_ns.load(Ordering::Acquire)).as_secs_f64(),
            starved_s: Duration::from_nanos(s.starved_ns.load(Ordering::Acquire)).as_secs_f64(),
            blocked_s: Duration::from_nanos(s.blocked_ns.load(Ordering::Acquire)).as_secs_f64(),
            utilisation: Duration::from_nanos(s.busy_ns.load(Ordering::Acquire)).as_secs_f64()
                / (f64::from(plan.workers) * secs),
            cpu_s: plan
                .handler
                .is_blocking()
                .then(|| Duration::from_nanos(s.cpu_ns.load(Ordering::Acquire)).as_secs_f64()),
            paths: s.paths(),
            notes: plan.handler.notes(),
        })
        .collect()
}
