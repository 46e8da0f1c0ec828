//! Watching a run: the stall watchdog and the sampler behind the timeline
//! and the metrics.

use super::*;

/// Starts the stall watchdog: movement is any item admitted, ended or sent
/// back, or any call a stage finished.
pub(super) fn watch_stalls(
    pipeline: &Pipeline,
    receivers: &[Receiver<Item>],
    shared: &Arc<Shared>,
) -> crate::stall::Watchdog {
    let moved = {
        let shared = Arc::clone(shared);
        move || {
            let l = &shared.ledger;
            let calls: u64 = shared
                .stats
                .iter()
                .map(|s| s.processed.load(Ordering::Relaxed))
                .sum();
            [&l.total, &l.done, &l.skipped, &l.failed, &l.requeued]
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<u64>()
                + calls
        }
    };
    let describe = {
        let shared = Arc::clone(shared);
        let names: Vec<String> = pipeline.stages.iter().map(|s| s.name.clone()).collect();
        let receivers = receivers.to_vec();
        let limiters: Vec<Limiter> = pipeline.limits.iter().cloned().collect();
        move || {
            let mut parts: Vec<String> = names
                .iter()
                .zip(&receivers)
                .zip(&shared.stats)
                .map(|((name, rx), s)| {
                    let working = s.working.load(Ordering::Relaxed);
                    format!("`{name}` {working} working, {} queued", rx.len())
                })
                .collect();
            for l in limiters.iter().filter(|l| l.kind() != LimiterKind::Rate) {
                let shown = |n: u64| match l.kind() {
                    LimiterKind::Bytes => bytesize::ByteSize(n).display().iec().to_string(),
                    _ => n.to_string(),
                };
                parts.push(format!(
                    "`{}` {} of {} in use, {} waiting",
                    l.name(),
                    shown(l.in_use()),
                    shown(l.capacity()),
                    l.waiters()
                ));
            }
            parts.join("; ")
        }
    };
    crate::stall::Watchdog::start(pipeline.stall_warning, moved, describe)
}

/// Sets the run's gauges (see `observe::METRICS`): per stage, items queued
/// and working; per limiter, what is held and its capacity (in bytes for a
/// byte budget, slots for a count; none for a rate) and the waiters.
fn set_gauges(
    run: &str,
    stages: &[String],
    queued: &[u64],
    working: &[u64],
    limiters: &[crate::limit::Limiter],
) {
    for ((name, queued), working) in stages.iter().zip(queued).zip(working) {
        let labels = [("pipeline", run.to_owned()), ("stage", name.clone())];
        metrics::gauge!("warpline_stage_queue_depth", &labels).set(*queued as f64);
        metrics::gauge!("warpline_stage_working", &labels).set(*working as f64);
    }
    for l in limiters {
        let labels = [
            ("pipeline", run.to_owned()),
            ("limiter", l.name().to_owned()),
        ];
        let (in_use, capacity) = match l.kind() {
            LimiterKind::Count => ("warpline_limiter_in_use", "warpline_limiter_capacity"),
            LimiterKind::Bytes => (
                "warpline_limiter_in_use_bytes",
                "warpline_limiter_capacity_bytes",
            ),
            LimiterKind::Rate => ("", ""),
        };
        if !in_use.is_empty() {
            metrics::gauge!(in_use, &labels).set(l.in_use() as f64);
            metrics::gauge!(capacity, &labels).set(l.capacity() as f64);
        }
        metrics::gauge!("warpline_limiter_waiters", &labels).set(l.waiters() as f64);
    }
}

/// A probe attached to a run; detached when dropped.
pub(super) struct Attached(Probe);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.detach();
    }
}

/// Lets `probe` read the run's snapshots until the guard is dropped.
pub(super) fn attach(
    probe: &Probe,
    pipeline: &Pipeline,
    started: tokio::time::Instant,
    total: Option<u64>,
    receivers: &[Receiver<Item>],
    shared: &Arc<Shared>,
) -> Attached {
    let (receivers, shared) = (receivers.to_vec(), Arc::clone(shared));
    let limiters: Vec<Limiter> = pipeline.limits.iter().cloned().collect();
    probe.attach(move || snapshot(started, total, &receivers, &shared, &limiters));
    Attached(probe.clone())
}

/// Where the run stands now, for a [`Probe`].
fn snapshot(
    started: tokio::time::Instant,
    total: Option<u64>,
    receivers: &[Receiver<Item>],
    shared: &Shared,
    limiters: &[Limiter],
) -> Snapshot {
    let l = &shared.ledger;
    let stages = shared
        .names
        .iter()
        .zip(&shared.stats)
        .zip(receivers)
        .map(|((name, s), rx)| StageSnapshot {
            name: name.clone(),
            queued: rx.len() as u64,
            working: s.working.load(Ordering::Relaxed),
            passed: s.passed.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
        })
        .collect();
    let limiters = limiters
        .iter()
        .filter(|l| l.kind() != LimiterKind::Rate)
        .map(|l| LimiterSnapshot {
            name: l.name().to_owned(),
            kind: l.kind(),
            in_use: l.in_use(),
            capacity: l.capacity(),
            waiters: l.waiters(),
        })
        .collect();
    Snapshot {
        t_s: started.elapsed().as_secs_f64(),
        admitted: l.total.load(Ordering::Relaxed),
        done: l.done.load(Ordering::Relaxed),
        skipped: l.skipped.load(Ordering::Relaxed),
        failed: l.failed.load(Ordering::Relaxed),
        total,
        stages,
        limiters,
    }
}

/// Samples the pipeline every so often (see [`RunOptions::sample`]).
pub(super) struct Sampler {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Timeline>,
}

impl Sampler {
    pub(super) fn start(
        pipeline: &Pipeline,
        receivers: &[Receiver<Item>],
        shared: &Arc<Shared>,
        every: Duration,
    ) -> Self {
        let stop = CancellationToken::new();
        let names: Vec<String> = pipeline.stages.iter().map(|s| s.name.clone()).collect();
        let limiters: Vec<crate::limit::Limiter> = pipeline.limits.iter().cloned().collect();
        let receivers = receivers.to_vec();
        let shared = Arc::clone(shared);
        let started = tokio::time::Instant::now();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut timeline = Timeline {
                    interval_s: every.as_secs_f64(),
                    stages: names.clone(),
                    limiters: limiters
                        .iter()
                        .filter(|l| l.kind() != LimiterKind::Rate)
                        .map(|l| (l.name().to_owned(), l.capacity()))
                        .collect(),
                    samples: Vec::new(),
                };
                let (mut interval, mut last) = (every, false);
                // The sampler's own windows: each sample takes the peak
                // held since the one before.
                let windows: Vec<(Limiter, crate::limit::Window)> = limiters
                    .iter()
                    .filter(|l| l.kind() != LimiterKind::Rate)
                    .map(|l| (l.clone(), l.window()))
                    .collect();
                loop {
                    let working: Vec<u64> = shared
                        .stats
                        .iter()
                        .map(|s| s.working.load(Ordering::Relaxed))
                        .collect();
                    let queued: Vec<u64> = receivers.iter().map(|r| r.len() as u64).collect();
                    set_gauges(&shared.label, &names, &queued, &working, &limiters);
                    let sample = Sample {
                        t_s: started.elapsed().as_secs_f64(),
                        working: peaks(&shared.stats, &working, |s| &s.peak_working),
                        queued: peaks(&shared.stats, &queued, |s| &s.peak_queued),
                        in_use: windows
                            .iter()
                            .map(|(l, w)| w.take_peak(l.in_use()))
                            .collect(),
                    };
                    timeline.push(sample, &mut interval);
                    if last {
                        break;
                    }
                    // One more sample at the end: the peaks since the last.
                    tokio::select! {
                        _ = stop.cancelled() => last = true,
                        _ = tokio::time::sleep(interval) => {}
                    }
                }
                timeline
            })
        };
        Sampler { stop, task }
    }

    pub(super) async fn finish(self) -> Timeline {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

/// Per stage, the most the counter `peak` saw since the last sample (at
/// least `now`), starting it again from `now`.
fn peaks(stats: &[StageStats], now: &[u64], peak: impl Fn(&StageStats) -> &AtomicU64) -> Vec<u64> {
    stats
        .iter()
        .zip(now)
        .map(|(s, &now)| peak(s).swap(now, Ordering::Relaxed).max(now))
        .collect()
}
