//! The run report: what became of every item, what each stage did, how full
//! each limiter got. Printed at the end of a run and written as JSON with
//! `--report FILE`.

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use crate::item::ErrorKind;
use crate::limit::LimiterKind;
use crate::pipeline::Pipeline;
use crate::run::{Ledger, StageStats};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ItemCounts {
    /// Inputs admitted (including malformed ones the source reported).
    pub total: u64,
    /// Passed every stage.
    pub done: u64,
    /// Stopped early on purpose (for example: output already complete).
    pub skipped: u64,
    /// Failed at some stage, or interrupted.
    pub failed: u64,
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

/// Query parameters whose values are secrets (compared case-insensitively).
const SECRET_PARAMS: &[&str] = &[
    "token",
    "access_token",
    "api_key",
    "apikey",
    "key",
    "password",
    "secret",
    "signature",
    "sig",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
];

/// A source as it may appear in logs, reports and failure records: user
/// names, passwords and secret query parameters of URLs replaced by `***`.
pub fn redact(source: &str) -> String {
    let Ok(mut url) = url::Url::parse(source) else {
        return source.to_owned();
    };
    let mut changed = false;
    if !url.username().is_empty() || url.password().is_some() {
        // Only fails for URLs that cannot have credentials, which these have.
        let _ = url.set_username("***");
        let _ = url.set_password(None);
        changed = true;
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let secret = SECRET_PARAMS.iter().any(|s| k.eq_ignore_ascii_case(s));
                changed |= secret;
                (
                    k.into_owned(),
                    if secret {
                        "***".to_owned()
                    } else {
                        v.into_owned()
                    },
                )
            })
            .collect();
        if changed {
            url.query_pairs_mut().clear().extend_pairs(pairs);
        }
    }
    if changed {
        url.into()
    } else {
        source.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn credentials_and_secret_parameters_are_hidden() {
        assert_eq!(
            redact("https://user:pa55@example.com/a.tif?x=1&token=abc"),
            "https://***@example.com/a.tif?x=1&token=***"
        );
        assert_eq!(
            redact("https://example.com/a.tif"),
            "https://example.com/a.tif"
        );
        assert_eq!(redact("/data/a.tif"), "/data/a.tif");
        assert!(!redact("https://u:p@h/x").contains(":p@"));
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
    /// What became of the items.
    pub items: ItemCounts,
    /// Per stage, in flow order.
    pub stages: Vec<StageReport>,
    /// Per limiter, in acquisition order.
    pub limiters: Vec<LimiterReport>,
    /// The first failures, up to [`REPORTED_FAILURES`](crate::run::REPORTED_FAILURES).
    pub failures: Vec<Failure>,
    /// Failures counted but not listed.
    pub failures_not_listed: u64,
    /// The process's peak resident memory so far, in bytes (Linux; `null`
    /// elsewhere). For an embedding service it covers the whole process.
    pub peak_rss_bytes: Option<u64>,
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
    ) -> Self {
        let failures = ledger
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let failed = ledger.failed.load(Ordering::Acquire);
        RunReport {
            pipeline: pipeline.name.clone(),
            outcome,
            elapsed_s: elapsed.as_secs_f64(),
            items: ItemCounts {
                total: ledger.total.load(Ordering::Acquire),
                done: ledger.done.load(Ordering::Acquire),
                skipped: ledger.skipped.load(Ordering::Acquire),
                failed,
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
                })
                .collect(),
            failures_not_listed: failed.saturating_sub(failures.len() as u64),
            failures,
            peak_rss_bytes: peak_rss_bytes(),
        }
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
        writeln!(
            f,
            "pipeline `{}` {} in {:.2}s: {} items, {} done, {} skipped, {} failed",
            self.pipeline, self.outcome, self.elapsed_s, i.total, i.done, i.skipped, i.failed
        )?;
        if self.elapsed_s > 0.0 && i.done > 0 {
            writeln!(
                f,
                "  throughput: {:.1} items/s",
                i.done as f64 / self.elapsed_s
            )?;
        }
        writeln!(f, "  stages:")?;
        for s in &self.stages {
            writeln!(
                f,
                "    {:<16} {:<10} workers {:>3}  mailbox {:>4}  processed {:>8}  busy {:>8.2}s",
                s.name, s.kind, s.workers, s.mailbox, s.processed, s.busy_s
            )?;
        }
        if !self.limiters.is_empty() {
            writeln!(f, "  limiters:")?;
        }
        for l in &self.limiters {
            match (l.kind, l.peak_in_use) {
                (LimiterKind::Rate, _) => writeln!(
                    f,
                    "    {:<16} rate   {}/s burst {}  waited {:.2}s",
                    l.name,
                    l.per_second.unwrap_or_default(),
                    l.capacity,
                    l.wait_s
                )?,
                (LimiterKind::Bytes, peak) => writeln!(
                    f,
                    "    {:<16} bytes  peak {} of {}  waited {:.2}s",
                    l.name,
                    bytesize::ByteSize(peak.unwrap_or_default()).display().iec(),
                    bytesize::ByteSize(l.capacity).display().iec(),
                    l.wait_s
                )?,
                (kind, peak) => writeln!(
                    f,
                    "    {:<16} {:<6} peak {} of {}  waited {:.2}s",
                    l.name,
                    kind.to_string(),
                    peak.unwrap_or_default(),
                    l.capacity,
                    l.wait_s
                )?,
            }
        }
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
