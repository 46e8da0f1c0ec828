//! The report as text, printed at the end of a run.

use std::fmt;

use super::RunReport;
use crate::limit::LimiterKind;

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_items(f)?;
        self.write_stages(f)?;
        self.write_limiters(f)?;
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

/// A size as the report prints it (`1.5 MiB`).
fn size(b: u64) -> String {
    bytesize::ByteSize(b).display().iec().to_string()
}

impl RunReport {
    /// The first lines: what became of the items, throughput, stalls,
    /// bytes and memory.
    fn write_items(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.items;
        writeln!(
            f,
            "pipeline `{}` {} in {:.2}s: {} item{}, {} done, {} skipped, {} failed",
            self.pipeline,
            self.outcome,
            self.elapsed_s,
            i.total,
            if i.total == 1 { "" } else { "s" },
            i.done,
            i.skipped,
            i.failed
        )?;
        if let Some(n) = i.not_admitted.filter(|n| *n > 0) {
            writeln!(
                f,
                "  not admitted: {n} of the source's {} inputs (the run ended before them)",
                i.total + n
            )?;
        }
        writeln!(f, "  throughput: {:.1} items/s", self.throughput_per_s)?;
        if let Some(busy) = self.cores_busy() {
            writeln!(
                f,
                "  cpu: {:.1} s in the blocking stages over {:.1} s: {busy:.2} of {} cores busy",
                self.stages.iter().filter_map(|s| s.cpu_s).sum::<f64>(),
                self.elapsed_s,
                crate::units::cores()
            )?;
        }
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
        Ok(())
    }

    /// One line per stage.
    fn write_stages(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            if !s.paths.is_empty() {
                let ways: Vec<String> = s.paths.iter().map(|(k, v)| format!("{k} {v}")).collect();
                writeln!(f, "    {:<12} took: {}", "", ways.join(", "))?;
            }
            for note in &s.notes {
                writeln!(f, "    {:<12} {note}", "")?;
            }
        }
        Ok(())
    }

    /// One line per limiter.
    fn write_limiters(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        Ok(())
    }
}
