//! The run report: what became of every item, what each stage did, how full
//! each limiter got. Printed at the end of a run and written as JSON with
//! `--report FILE`.

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use crate::item::ErrorKind;
use crate::limit::LimiterKind;
use crate::observe::Timeline;
use crate::pipeline::Pipeline;
use crate::run::{HostStats, Ledger, StageStats};
use std::collections::HashMap;

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// Every input was admitted and ended.
    Completed,
    /// Stopped (Ctrl-C, SIGTERM, or [`RunControl::stop`](crate::RunControl::stop))
    /// and drained within the deadline: every admitted item ended.
    Stopped,
    /// Aborted (a second Ctrl-C, the shutdown deadline, or
    /// [`RunControl::abort`](crate::RunControl::abort)): items in flight were
    /// counted failed as `interrupted`.
    Aborted,
    /// Aborted because an item failed and `on_error = "abort"`.
    AbortedOnError,
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunOutcome::Completed => "completed",
            RunOutcome::Stopped => "stopped",
            RunOutcome::Aborted => "aborted",
            RunOutcome::AbortedOnError => "aborted on error",
        })
    }
}

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
}

/// One limiter's use.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimiterReport {
    /// The resource name.
    pub name: String,
    /// Count, bytes or rate.
    pub kind: LimiterKind,
    /// Slots (count), bytes (bytes), or burst (rate).
    pub capacity: u64,
    /// The most slots or bytes held at once; `null` for a rate limiter.
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

/// [`redact`](crate::redact::redact), kept here for the callers that
/// found it here.
pub use crate::redact::redact;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Pipeline, Registry};

    fn report(stages: Vec<StageReport>) -> RunReport {
        RunReport {
            pipeline: "p".into(),
            outcome: RunOutcome::Completed,
            elapsed_s: 10.0,
            throughput_per_s: 1.0,
            bytes_in: 0,
            bytes_out: 0,
            diagnosis: String::new(),
            items: ItemCounts {
                total: 10,
                done: 10,
                skipped: 0,
                failed: 0,
                requeued: 0,
            },
            stages,
            limiters: Vec::new(),
            hosts: Vec::new(),
            failures: Vec::new(),
            failures_not_listed: 0,
            peak_rss_bytes: None,
            timeline: None,
            stalls: Vec::new(),
        }
    }

    fn stage(name: &str, workers: u32, busy_s: f64, cpu_s: f64) -> StageReport {
        StageReport {
            name: name.into(),
            kind: "hold".into(),
            workers,
            mailbox: workers,
            processed: 10,
            busy_s,
            starved_s: 0.0,
            blocked_s: 0.0,
            utilisation: busy_s / (f64::from(workers) * 10.0),
            cpu_s: Some(cpu_s),
        }
    }

    #[test]
    fn busy_stages_on_saturated_cores_are_a_cpu_bound_run_not_a_call_for_workers() {
        let cores = crate::units::cores();
        let toml = format!(
            r#"
[pipeline]
flow = ["a", "b"]
[source]
kind = "generate"
count = 10
[stages.a]
kind = "hold"
mode = "spin"
workers = {cores}
[stages.b]
kind = "hold"
mode = "spin"
workers = {cores}
"#
        );
        let p = Pipeline::from_toml_str(&toml, &Registry::with_builtins()).unwrap();
        let c = f64::from(cores);
        // `b` busy 85% of its workers' time; both stages together used
        // every core 90% of the run.
        let saturated = report(vec![
            stage("a", cores, 0.3 * c * 10.0, 0.3 * c * 10.0),
            stage("b", cores, 0.85 * c * 10.0, 0.6 * c * 10.0),
        ]);
        let d = diagnose(&p, &saturated);
        assert!(d.starts_with("the CPU is the bottleneck"), "{d}");
        assert!(d.contains("more workers will not help"), "{d}");
        // The same busy time spent mostly waiting (for a disk, say): the
        // cores were not the limit, the stage's workers were.
        let waiting = report(vec![
            stage("a", cores, 0.3 * c * 10.0, 0.1 * c * 10.0),
            stage("b", cores, 0.85 * c * 10.0, 0.2 * c * 10.0),
        ]);
        let d = diagnose(&p, &waiting);
        assert!(d.starts_with("`b` is the bottleneck"), "{d}");
        assert!(d.contains("more workers"), "{d}");
    }

    #[test]
    fn a_run_with_no_input_says_whether_the_source_gave_none_or_it_was_stopped() {
        let p = Pipeline::from_toml_str(
            "[pipeline]\nflow = [\"a\"]\n[source]\nkind = \"generate\"\ncount = 0\n[stages.a]\nkind = \"discard\"\n",
            &Registry::with_builtins(),
        )
        .unwrap();
        let mut r = report(Vec::new());
        r.items = ItemCounts::default();
        assert!(diagnose(&p, &r).starts_with("the source gave no input"));
        r.outcome = RunOutcome::Stopped;
        assert!(diagnose(&p, &r).contains("before the run was stopped"));
    }

    #[test]
    fn a_bucket_paused_by_429s_is_not_credited_with_the_pace() {
        let p = Pipeline::from_toml_str(
            "[pipeline]\nflow = [\"a\"]\n[source]\nkind = \"generate\"\ncount = 1\n\
             [limits.api]\nper_second = 20\n[stages.a]\nkind = \"hold\"\nlimits = [\"api\"]\n",
            &Registry::with_builtins(),
        )
        .unwrap();
        let mut r = report(vec![stage("a", 1, 1.0, 0.0)]);
        r.limiters.push(LimiterReport {
            name: "api".into(),
            kind: LimiterKind::Rate,
            capacity: 1,
            peak_in_use: None,
            per_second: Some(20.0),
            wait_s: 50.0,
            p95_wait_s: 1.0,
            share_at_capacity: 0.9,
        });
        r.hosts.push(HostReport {
            host: "http://127.0.0.1:8931".into(),
            requests: 100,
            achieved_per_s: 10.0,
            throttled_429: 0,
            retries: 0,
        });
        assert!(diagnose(&p, &r).contains("as intended"));
        r.hosts[0].throttled_429 = 7;
        let d = diagnose(&p, &r);
        assert!(d.contains("answered 429 7 times"), "{d}");
        assert!(!d.contains("as intended"), "{d}");
    }
}

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
}

/// Above this share of the run at capacity, a limiter is called the
/// bottleneck.
const BOUND: f64 = 0.5;

/// What limited the run, in a sentence, with the numbers behind it.
pub(crate) fn diagnose(pipeline: &Pipeline, r: &RunReport) -> String {
    if r.items.total == 0 {
        return match r.outcome {
            RunOutcome::Completed => "the source gave no input (an empty list, a pattern that \
                matched no file, or an empty shard): nothing was done"
                .to_owned(),
            _ => "no input was admitted before the run was stopped".to_owned(),
        };
    }
    let holders = |name: &str| -> Vec<String> {
        pipeline
            .stages
            .iter()
            .filter(|s| s.limits.iter().any(|l| l.name() == name))
            .map(|s| s.name.clone())
            .collect()
    };
    let busiest = r
        .limiters
        .iter()
        .filter(|l| l.share_at_capacity >= BOUND)
        .max_by(|a, b| a.share_at_capacity.total_cmp(&b.share_at_capacity));
    if let Some(l) = busiest {
        let stages = holders(&l.name);
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
        let cores = u64::from(crate::units::cores());
        let blocking = stages.iter().any(|s| {
            pipeline
                .stages
                .iter()
                .any(|p| &p.name == s && p.handler.is_blocking())
        });
        let hint = match l.kind {
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
        };
        return format!(
            "{who} {} the bottleneck: `{}` was at capacity {pct}% of the run{hint}",
            if stages.len() > 1 { "are" } else { "is" },
            l.name
        );
    }
    // Blocking stages keeping every core busy: the machine is the limit,
    // whichever stage is busiest (more of its workers would only take
    // cores from the others). Their CPU time, not their busy time: a
    // worker waiting for the disk is busy without using a core.
    let cores = f64::from(crate::units::cores());
    let blocking_cpu: f64 = pipeline
        .stages
        .iter()
        .zip(&r.stages)
        .filter(|(p, _)| p.handler.is_blocking())
        .map(|(_, s)| s.cpu_s.unwrap_or(0.0))
        .sum();
    let share = blocking_cpu / (cores * r.elapsed_s.max(f64::MIN_POSITIVE));
    if share >= 0.8 {
        let names: Vec<String> = pipeline
            .stages
            .iter()
            .filter(|p| p.handler.is_blocking())
            .map(|p| format!("`{}`", p.name))
            .collect();
        return format!(
            "the CPU is the bottleneck: {} kept the {} cores busy {}% of the run; more workers will not help",
            names.join(", "),
            cores,
            (share.min(1.0) * 100.0).round()
        );
    }
    let stage = r
        .stages
        .iter()
        .max_by(|a, b| a.utilisation.total_cmp(&b.utilisation));
    if let Some(s) = stage.filter(|s| s.utilisation >= 0.8) {
        return format!(
            "`{}` is the bottleneck: its {} worker{} were busy {}% of the run; more workers (and the limits they need) may help",
            s.name,
            s.workers,
            if s.workers == 1 { "" } else { "s" },
            (s.utilisation * 100.0).round()
        );
    }
    "no limiter was at capacity and no stage was busy most of the time: something outside the limits \
     serialises (the source, the network or the disk)"
        .to_owned()
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
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl RunReport {
    pub(crate) fn build(
        pipeline: &Pipeline,
        ledger: &Ledger,
        stats: &[StageStats],
        outcome: RunOutcome,
        elapsed: Duration,
        timeline: Option<Timeline>,
        hosts: &HashMap<String, HostStats>,
    ) -> Self {
        let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let failures = ledger
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let failed = ledger.failed.load(Ordering::Acquire);
        let done = ledger.done.load(Ordering::Acquire);
        let mut hosts: Vec<HostReport> = hosts
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
                }
            })
            .collect();
        hosts.sort_by(|a, b| a.host.cmp(&b.host));
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
            },
            stages: pipeline
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
                    starved_s: Duration::from_nanos(s.starved_ns.load(Ordering::Acquire))
                        .as_secs_f64(),
                    blocked_s: Duration::from_nanos(s.blocked_ns.load(Ordering::Acquire))
                        .as_secs_f64(),
                    utilisation: Duration::from_nanos(s.busy_ns.load(Ordering::Acquire))
                        .as_secs_f64()
                        / (f64::from(plan.workers) * secs),
                    cpu_s: plan.handler.is_blocking().then(|| {
                        Duration::from_nanos(s.cpu_ns.load(Ordering::Acquire)).as_secs_f64()
                    }),
                })
                .collect(),
            limiters: pipeline
                .limits
                .iter()
                .map(|l| LimiterReport {
                    name: l.name().to_owned(),
                    kind: l.kind(),
                    capacity: l.capacity(),
                    peak_in_use: (l.kind() != LimiterKind::Rate).then(|| l.peak_in_use()),
                    per_second: l.per_second(),
                    wait_s: l.total_wait().as_secs_f64(),
                    p95_wait_s: l.p95_wait().as_secs_f64(),
                    share_at_capacity: (l.contended().as_secs_f64() / secs).min(1.0),
                })
                .collect(),
            hosts,
            failures_not_listed: failed.saturating_sub(failures.len() as u64),
            failures,
            peak_rss_bytes: peak_rss_bytes(),
            timeline,
            stalls: Vec::new(),
        };
        report.diagnosis = diagnose(pipeline, &report);
        report
    }

    /// The report of the stage with this name.
    pub fn stage(&self, name: &str) -> Option<&StageReport> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// The report of the limiter with this name.
    pub fn limiter(&self, name: &str) -> Option<&LimiterReport> {
        self.limiters.iter().find(|l| l.name == name)
    }

    /// Whether every admitted item ended done or skipped.
    pub fn all_ok(&self) -> bool {
        self.items.failed == 0
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.items;
        let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
        writeln!(
            f,
            "pipeline `{}` {} in {:.2}s: {} items, {} done, {} skipped, {} failed",
            self.pipeline, self.outcome, self.elapsed_s, i.total, i.done, i.skipped, i.failed
        )?;
        writeln!(f, "  throughput: {:.1} items/s", self.throughput_per_s)?;
        if i.requeued > 0 {
            writeln!(
                f,
                "  requeued: {} times an item gave back its share of a byte budget for an item \
                 deeper in the flow and started again (a larger budget avoids the repeated work)",
                i.requeued
            )?;
        }
        for stall in &self.stalls {
            writeln!(
                f,
                "  stalled: no item moved for {:.0} s at {:.0} s: {}",
                stall.quiet_s, stall.at_s, stall.state
            )?;
        }
        if self.bytes_in > 0 || self.bytes_out > 0 {
            writeln!(
                f,
                "  bytes: {} in, {} out",
                size(self.bytes_in),
                size(self.bytes_out)
            )?;
        }
        if let Some(rss) = self.peak_rss_bytes {
            writeln!(f, "  peak memory (RSS): {}", size(rss))?;
        }
        writeln!(f, "  stages:")?;
        for s in &self.stages {
            write!(
                f,
                "    {:<12} {:<9} workers {:>3} mailbox {:>4} processed {:>7} busy {:>7.2}s ({:>3.0}%) starved {:>6.2}s blocked {:>6.2}s",
                s.name,
                s.kind,
                s.workers,
                s.mailbox,
                s.processed,
                s.busy_s,
                s.utilisation * 100.0,
                s.starved_s,
                s.blocked_s
            )?;
            match s.cpu_s {
                Some(cpu) if s.processed > 0 => {
                    writeln!(f, " cpu {:.2} ms/item", cpu * 1000.0 / s.processed as f64)?
                }
                _ => writeln!(f)?,
            }
        }
        if !self.limiters.is_empty() {
            writeln!(f, "  limiters:")?;
        }
        for l in &self.limiters {
            let use_ = match (l.kind, l.peak_in_use) {
                (LimiterKind::Rate, _) => format!(
                    "{}/s burst {}",
                    l.per_second.unwrap_or_default(),
                    l.capacity
                ),
                (LimiterKind::Bytes, peak) => {
                    format!(
                        "peak {} of {}",
                        size(peak.unwrap_or_default()),
                        size(l.capacity)
                    )
                }
                (_, peak) => format!("peak {} of {}", peak.unwrap_or_default(), l.capacity),
            };
            writeln!(
                f,
                "    {:<12} {:<5} {use_:<28} at capacity {:>3.0}%  waited {:.2}s (p95 {:.3}s)",
                l.name,
                l.kind.to_string(),
                l.share_at_capacity * 100.0,
                l.wait_s,
                l.p95_wait_s
            )?;
        }
        for h in &self.hosts {
            writeln!(
                f,
                "  host {}: {} requests, {:.1}/s, {} x 429, {} retries",
                h.host, h.requests, h.achieved_per_s, h.throttled_429, h.retries
            )?;
        }
        writeln!(f, "  diagnosis: {}", self.diagnosis)?;
        for fail in self.failures.iter().take(10) {
            writeln!(
                f,
                "  failed {} at {} ({}): {}",
                fail.id, fail.stage, fail.kind, fail.message
            )?;
        }
        let more = self.failures.len().saturating_sub(10) as u64 + self.failures_not_listed;
        if more > 0 {
            writeln!(f, "  ... and {more} more failures (see --report FILE)")?;
        }
        Ok(())
    }
}
