//! The byte budget's check on a heavily skewed corpus (issue 16): 1,000
//! tiles, one in ten 40-100x the pixels of the others (30-75 MiB decoded),
//! through the whole pipeline at a 256 MiB and a 512 MiB budget.
//!
//! A run that makes no progress (nothing admitted, done, skipped or failed)
//! for [`NO_PROGRESS`] is cancelled and counts as not completed; its line
//! then says what each stage and limiter was doing. While it runs, the
//! child samples its own resident size and notes, at the peak, what the
//! budget, GDAL's block cache and glibc's heaps held.

use std::time::{Duration, Instant};

/// How long a run may go without progress before it counts as stalled.
const NO_PROGRESS: Duration = Duration::from_secs(120);

/// The large tiles' pixels, as multiples of a normal tile's.
pub const HEAVY_FACTORS: [f64; 5] = [40.0, 55.0, 70.0, 85.0, 100.0];

/// Tiles per matrix run: 1,000, or `WARPLINE_BENCH_TILES`.
pub fn tiles() -> usize {
    std::env::var("WARPLINE_BENCH_TILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// The budget of a matrix scenario (`skew10-256` -> 256 MiB), if `name` is
/// one.
pub fn budget_mib(name: &str) -> Option<u64> {
    name.strip_prefix("skew10-")?.parse().ok()
}

/// Resident bytes of this process's files (code, mapped data): the part of
/// its resident size that is not anonymous memory.
fn file_rss_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    let kib = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (kib("Rss:").saturating_sub(kib("Anonymous:"))) * 1024
}

/// Resident bytes of this process now.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// What was held when the resident size was at its highest.
#[derive(Debug, Default, Clone, Copy)]
struct AtPeak {
    rss: u64,
    /// The part of `rss` that is files (code, libraries).
    file: u64,
    budget_in_use: u64,
    gdal_cache: u64,
    /// glibc: bytes free inside its heaps (kept, not given back).
    heap_free: u64,
    /// glibc: bytes in use inside its heaps.
    heap_used: u64,
    /// glibc: bytes in mmapped chunks (large buffers).
    mmapped: u64,
}

fn sample(memory: Option<&warpline::Limiter>) -> AtPeak {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    AtPeak {
        rss: rss_bytes(),
        file: file_rss_bytes(),
        budget_in_use: memory.map(|l| l.in_use()).unwrap_or(0),
        gdal_cache: warpline::stages::gdal::cache_used(),
        heap_free: m.fordblks as u64,
        heap_used: m.uordblks as u64,
        mmapped: m.hblkhd as u64,
    }
}

/// Samples the resident size every 10 ms until `stop`, keeping the sample
/// taken at its highest. With `WARPLINE_BENCH_TRACE=FILE`, every 50 ms
/// sample goes to FILE too (MiB: seconds, RSS, budget in use, GDAL cache,
/// heap used, heap free, mmapped).
fn watch_peak(
    memory: Option<warpline::Limiter>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<AtPeak> {
    let mut trace = std::env::var_os("WARPLINE_BENCH_TRACE")
        .and_then(|p| std::fs::File::create(p).ok())
        .map(std::io::BufWriter::new);
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut peak = AtPeak::default();
        let mut tick = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if rss_bytes() > peak.rss + (1 << 20) {
                peak = sample(memory.as_ref());
            }
            if let Some(out) = trace.as_mut().filter(|_| tick % 5 == 0) {
                use std::io::Write;
                let s = sample(memory.as_ref());
                let _ = writeln!(
                    out,
                    "{:.2} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0}",
                    t0.elapsed().as_secs_f64(),
                    mib(s.rss),
                    mib(s.budget_in_use),
                    mib(s.gdal_cache),
                    mib(s.heap_used),
                    mib(s.heap_free),
                    mib(s.mmapped)
                );
            }
            tick += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        peak
    })
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// Runs one matrix scenario in this (child) process and prints its line.
pub fn child(toml: &str) {
    let pipeline = warpline::Pipeline::from_toml_str(toml, &warpline::registry()).unwrap();
    let memory = pipeline.limits().get("memory").cloned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // What the process holds before the first item: code, GDAL, PROJ.
    let rss_start = rss_bytes();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peak = watch_peak(memory.clone(), stop.clone());
    let t0 = Instant::now();
    let (report, stalled) = rt.block_on(watched(pipeline, memory.as_ref()));
    let wall = t0.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let at = peak.join().unwrap_or_default();
    let state = match (&stalled, &report) {
        (None, _) => "-".to_owned(),
        (Some(s), Some(r)) => {
            let watchdog: Vec<&str> = r.stalls.iter().map(|s| s.state.as_str()).collect();
            format!("{s}; watchdog: {}", watchdog.join(" / "))
        }
        (Some(s), None) => format!("{s}; the run did not end within {NO_REPORT:?} of its cancel"),
    };
    let (items, limiter_peak) = match &report {
        Some(r) => {
            if stalled.is_some() || r.items.done != r.items.total {
                eprintln!("{r}");
            }
            let i = &r.items;
            let peak = r.limiter("memory").and_then(|l| l.peak_in_use);
            ((i.total, i.done, i.failed, i.requeued), peak.unwrap_or(0))
        }
        None => ((0, 0, 0, 0), 0),
    };
    println!(
        "completed={} total={} done={} failed={} requeued={} peak_rss_mib={:.0} limiter_peak_mib={:.0} wall_s={wall:.1} rss_start_mib={:.0} at_peak: rss={:.0} files={:.0} budget={:.0} gdal_cache={:.0} heap_used={:.0} heap_free={:.0} mmapped={:.0} state={state:?}",
        if stalled.is_none() { "yes" } else { "no" },
        items.0,
        items.1,
        items.2,
        items.3,
        warpline::engine::report::peak_rss_bytes().map(mib).unwrap_or(0.0),
        mib(limiter_peak),
        mib(rss_start),
        mib(at.rss),
        mib(at.file),
        mib(at.budget_in_use),
        mib(at.gdal_cache),
        mib(at.heap_used),
        mib(at.heap_free),
        mib(at.mmapped),
    );
    if report.is_none() {
        // Stage threads may still be stuck: dropping the runtime would
        // wait for them.
        std::process::exit(0);
    }
}

/// How long a cancelled run may take to hand over its report.
const NO_REPORT: Duration = Duration::from_secs(60);

/// Runs the pipeline, cancelling it after [`NO_PROGRESS`] (or
/// `WARPLINE_BENCH_NO_PROGRESS_S` seconds) without an item admitted,
/// done, skipped or failed: its report (none if the cancelled run did not
/// end), and what stalled it.
async fn watched(
    pipeline: warpline::Pipeline,
    memory: Option<&warpline::Limiter>,
) -> (Option<warpline::RunReport>, Option<String>) {
    let limit = std::env::var("WARPLINE_BENCH_NO_PROGRESS_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(NO_PROGRESS);
    let handle = pipeline.spawn(warpline::RunOptions::default());
    let mut last = handle.progress();
    let mut since = Instant::now();
    let mut stalled = None;
    while !handle.is_finished() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = handle.progress();
        let moved = (now.admitted, now.done, now.skipped, now.failed)
            != (last.admitted, last.done, last.skipped, last.failed);
        if moved {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= limit && !now.finished {
            stalled = Some(format!(
                "no progress for {}s at {now:?}; memory {:.1} of {:.0} MiB in use, {} waiting",
                since.elapsed().as_secs(),
                mib(memory.map(|l| l.in_use()).unwrap_or(0)),
                mib(memory.map(|l| l.capacity()).unwrap_or(0)),
                memory.map(|l| l.waiters()).unwrap_or(0),
            ));
            handle.abort();
            break;
        }
    }
    let report = tokio::time::timeout(NO_REPORT, handle.report()).await;
    (report.ok().map(|r| r.unwrap()), stalled)
}

/// One run's figures, read back from the child's line.
#[derive(Debug)]
pub struct Row {
    budget_mib: u64,
    round: usize,
    line: String,
}

impl Row {
    pub fn new(budget_mib: u64, round: usize, line: &str) -> Self {
        Row {
            budget_mib,
            round,
            line: line.to_owned(),
        }
    }

    fn get(&self, key: &str) -> String {
        self.line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or("?")
            .to_owned()
    }

    /// Whether the peak RSS was within the budget + 64 MiB.
    fn within(&self) -> bool {
        let rss: f64 = self.get("peak_rss_mib").parse().unwrap_or(f64::MAX);
        rss <= (self.budget_mib + 64) as f64
    }

    /// Whether the run completed every item with peak RSS within the
    /// budget + 64 MiB.
    pub fn ok(&self) -> bool {
        self.get("completed") == "yes" && self.get("done") == self.get("total") && self.within()
    }
}

/// The matrix as a Markdown table, and whether every run passed.
pub fn table(rows: &[Row]) -> (String, bool) {
    let mut out = String::from(
        "| budget | run | completed | done | failed | requeued | peak RSS (MiB) | <= budget + 64 | limiter peak (MiB) | RSS at its peak: files, budget in use, heap used + free, GDAL cache (MiB) | wall (s) |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out += &format!(
            "| {} MiB | {} | {} | {} | {} | {} | {} | {} | {} | {}: {}, {}, {} + {}, {} | {} |\n",
            r.budget_mib,
            r.round + 1,
            r.get("completed"),
            r.get("done"),
            r.get("failed"),
            r.get("requeued"),
            r.get("peak_rss_mib"),
            if r.within() { "yes" } else { "**no**" },
            r.get("limiter_peak_mib"),
            r.get("rss"),
            r.get("files"),
            r.get("budget"),
            r.get("heap_used"),
            r.get("heap_free"),
            r.get("gdal_cache"),
            r.get("wall_s"),
        );
    }
    (out, rows.iter().all(Row::ok))
}
