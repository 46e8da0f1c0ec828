//! The whole pipeline, measured against the machine's own limit.
//!
//!     cargo bench --bench raster                # every scenario
//!     cargo bench --bench raster -- cpu-1000    # one
//!     WARPLINE_BENCH_REPEAT=5 cargo bench --bench raster -- cpu-1000
//!                                               # five rounds, and the spread
//!
//! Each scenario runs in a fresh child process (so peak RSS is its own) and
//! prints one line of figures:
//!
//! - `floor`: decode + warp + write of 512 px, 3-band Byte tiles from UTM
//!   to EPSG:3857 (bilinear, uncompressed GTiff), sequentially on one
//!   thread: CPU ms per tile;
//! - `cpu-1000`, `cpu-10000`: that work for N tiles served on loopback, the
//!   full pipeline: tiles/s, CPU ms per tile, achieved / (floor x cores)
//!   and the same as a cost (core time per tile beyond the floor), peak
//!   RSS;
//! - `mixed` (the headline): 480 tiles of the mixed corpus of real rasters
//!   (`raster/mixed.rs`: eight kinds, 60 tiles each), served with 50 ms
//!   latency, warped to EPSG:3857 bilinear: the same figures as `cpu-*`,
//!   and on stderr each kind's floor split per stage (decode, reproject,
//!   write), before and after the run;
//! - `mixed-python` (only when named): the same job, tiles and server as
//!   `mixed`, done by `benches/python/mixed.py` (asyncio + aiohttp +
//!   rasterio, one warp thread a core): its tiles/s, CPU ms per tile and
//!   peak RSS, for issue 23's comparison. Runs `WARPLINE_BENCH_PYTHON`
//!   (default `python3`), which needs `benches/python/requirements.txt`;
//! - `mixed-cli`, `mixed-pyapi`, `mixed-pystage` (only when named): the
//!   `mixed` pipeline run by the `warpline` binary, by the Python package,
//!   and by the Python package with a pass-through stage written in Python
//!   (`raster/pyapi.rs`): tiles/s, CPU ms per tile and peak RSS of each,
//!   then their means, the Python / binary ratio and the stage's cost;
//! - `mixed-floor` (only when named): each kind's floor, with `GDALWarp`
//!   alone (in-process, the stage's options, from memory to MEM) beside its
//!   reproject stage: what warpline adds to GDAL's warp, kind by kind
//!   (`WARPLINE_BENCH_KINDS=geos,masked` measures only those kinds);
//! - `mixed-kernel` (only when named): each kind's reproject stage with
//!   warpline's resampling loop (`kernel = "auto"`) and with GDAL's
//!   (`kernel = "gdal"`), in turn in one process: the loop's gain, kind by
//!   kind, on the same machine load;
//! - `mixed-instructions` (only when named, needs `valgrind`): the
//!   reproject stage's instructions under callgrind, warpline's loop
//!   against GDAL's, kind by kind (`raster/instructions.rs`): the
//!   comparison a shared machine's timings cannot make;
//! - `skewed-1000`: 1% of the tiles 20-100x larger, a 512 MiB memory
//!   budget: peak RSS against budget + 64 MiB;
//! - `skew10-256`, `skew10-512` (only when named; `scripts/fault-matrix.sh`
//!   runs them 5 rounds each): 10% of the tiles 40-100x larger, at that
//!   budget in MiB: completed or stalled, items done / failed / requeued,
//!   peak RSS and the budget's own peak, then a table of every round;
//! - `rate`: a server that allows 20 requests/s (50 ms latency, 429 beyond),
//!   a bucket configured to 20/s: achieved rate / limit, 429s;
//! - `fetch-1000`: the fetch stage alone, 1,000 tiles: what HTTP over
//!   loopback costs per tile;
//! - `adapt-rate`, `adapt-drop`, `adapt-knee`, `adapt-outage` (only when
//!   named): adaptive per-host limits against a rate-limited server, a
//!   limit that drops and comes back, a latency knee and an outage (see
//!   `raster/adaptive.rs`).
//!
//! The tile server runs in the parent process, so its CPU is not counted
//! in the pipeline's CPU per tile (it does share the machine's cores); the
//! parent prints it as `server_cpu_ms_per_tile`.
//!
//! Beside each line, on stderr: the floor's split per stage (mean, median,
//! p10, p90), the pipeline's CPU per stage from its run report, and the
//! machine as a whole during the run (idle share, busy core time per tile,
//! this process's share). `WARPLINE_BENCH_REPORT=1` prints the whole run
//! report too.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warpline_testkit::pipelines::{self, Raster};
use warpline_testkit::Faults;

#[path = "raster/adaptive.rs"]
mod adaptive;
#[path = "raster/corpus.rs"]
mod corpus;
#[path = "raster/floor.rs"]
mod floor;
#[path = "raster/instructions.rs"]
mod instructions;
#[path = "raster/matrix.rs"]
mod matrix;
#[path = "raster/mixed.rs"]
mod mixed;
#[path = "raster/pyapi.rs"]
mod pyapi;

use corpus::{corpus, serve, shape, Corpus, Skew};
use floor::floor;

/// CPU time of this process (user + system).
fn process_cpu() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage; getrusage only writes it.
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// (busy, idle + iowait) jiffies of the whole machine, from /proc/stat.
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (v.iter().take(8).sum::<u64>() - idle, idle)
}

fn peak_rss_mib() -> f64 {
    warpline::engine::report::peak_rss_bytes().unwrap_or(0) as f64 / (1 << 20) as f64
}

fn pipeline_toml(list: &Path, out: &Path, extra_limits: &str, fetch_limits: &str) -> String {
    pipeline_with_budget(list, out, extra_limits, fetch_limits, 512)
}

fn pipeline_with_budget(
    list: &Path,
    out: &Path,
    extra_limits: &str,
    fetch_limits: &str,
    budget_mib: u64,
) -> String {
    Raster {
        pipeline: "stall_warning = \"60s\"",
        source: &format!("kind = \"list\"\npath = {:?}", list.display().to_string()),
        connections: 8,
        limits: extra_limits,
        fetch_limits: &format!("[{fetch_limits}]"),
        budget: &format!("\"{budget_mib}MiB\""),
        cpu: "\"cores+1\"",
        workers: "\"cores\"",
        reproject: &reproject_settings(),
        write: &format!(
            "dir = {:?}\nexists = \"overwrite\"",
            out.display().to_string()
        ),
        ..Raster::default()
    }
    .toml()
}

/// Only the fetch stage of [`pipeline_toml`]: what HTTP over loopback costs
/// per tile, on both ends.
fn fetch_only_toml(list: &Path) -> String {
    pipelines::pipeline(
        &["fetch"],
        &format!("kind = \"list\"\npath = {:?}", list.display().to_string()),
        r#"[limits.connections]
permits = 8
[stages.fetch]
kind = "fetch"
workers = 8
limits = ["connections"]
"#,
    )
}

/// The pipeline of a scenario that is not a matrix one.
fn scenario_toml(name: &str, list: &Path, out: &Path) -> String {
    match name {
        "fetch-1000" => fetch_only_toml(list),
        "rate" => pipeline_toml(
            list,
            out,
            "[limits.per_host]\nper_second = 20\nburst = 2\nper = \"host\"\n",
            "\"connections\", \"per_host\"",
        ),
        _ => pipeline_toml(list, out, "", "\"connections\""),
    }
}

/// The pipeline's CPU per stage, on stderr (and the whole report with
/// `WARPLINE_BENCH_REPORT`).
fn print_stage_cpu(report: &warpline::RunReport) {
    let stage_cpu: Vec<String> = report
        .stages
        .iter()
        .filter_map(|s| {
            s.cpu_s
                .map(|c| format!("{}:{:.2}", s.name, c * 1000.0 / s.processed.max(1) as f64))
        })
        .collect();
    eprintln!("pipeline per stage (mean ms): {}", stage_cpu.join(" "));
    if std::env::var_os("WARPLINE_BENCH_REPORT").is_some() {
        eprintln!("{report}");
    }
}

/// The floor of a scenario's tiles: the uniform ones, or the mixed
/// corpus's kinds (each kind's line on stderr, `when` the run).
fn scenario_floor(name: &str, work: &Path, when: &str) -> f64 {
    match std::env::var_os("WARPLINE_BENCH_MIXED") {
        Some(dir) if name == "mixed" => {
            let (mean, lines) = floor::mixed_floor(Path::new(&dir), work);
            for l in lines {
                eprintln!("{l} ({when} the run)");
            }
            mean
        }
        _ => floor(work),
    }
}

/// Runs one scenario in this (child) process and prints its figures.
fn scenario(name: &str) {
    if adaptive::is(name) {
        return adaptive::child(name);
    }
    let work = tempfile::tempdir().unwrap();
    let cores = warpline::engine::units::cores() as f64;
    match name {
        "floor" => println!("floor_ms_per_tile={:.2}", floor(work.path())),
        "mixed-floor" => {
            let dir = std::env::var_os("WARPLINE_BENCH_MIXED").expect("tiles from the parent");
            floor::mixed_floor_lines(Path::new(&dir), work.path());
        }
        "mixed-kernel" => {
            let dir = std::env::var_os("WARPLINE_BENCH_MIXED").expect("tiles from the parent");
            floor::mixed_kernel_lines(Path::new(&dir), work.path());
        }
        n if pyapi::is(n) => pyapi::cli_child(work.path()),
        n if instructions::is(n) => {
            let dir = std::env::var_os("WARPLINE_BENCH_MIXED").expect("tiles from the parent");
            instructions::child(n, Path::new(&dir), work.path());
        }
        _ => whole_pipeline(name, work.path(), cores),
    }
}

/// A scenario that runs the whole pipeline over the parent's tile server.
fn whole_pipeline(name: &str, work: &Path, cores: f64) {
    let (n, skew) = shape(name);
    let skewed = matches!(skew, Skew::Light | Skew::Heavy);
    // The server lives in the parent: this child only runs warpline.
    let list = std::env::var("WARPLINE_BENCH_LIST").expect("list from the parent");
    let out = work.join("out");
    if let Some(budget) = matrix::budget_mib(name) {
        let toml = pipeline_with_budget(Path::new(&list), &out, "", "\"connections\"", budget);
        return matrix::child(&toml);
    }
    // The floor again, in this process, just before and just after
    // the run: the machine's speed drifts (this shared machine's
    // floor moved 20-27 ms between runs of one afternoon), so the
    // ratio uses the mean of the two, taken around the run. Dirty
    // pages are flushed before each, so neither pays for the
    // other's writes.
    // The floor is the reference of the CPU-bound scenarios only.
    let skipfloor = !(name.starts_with("cpu-") || name == "mixed");
    let floor_before = if skipfloor {
        0.0
    } else {
        scenario_floor(name, work, "before")
    };
    let toml = scenario_toml(name, Path::new(&list), &out);
    let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // Peak RSS is the run's own: the floor's tiles are given back
    // to the system and do not count (Linux resets VmHWM when "5"
    // is written to clear_refs).
    // SAFETY: malloc_trim only returns free heap pages to the system.
    unsafe { libc::malloc_trim(0) };
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let cpu0 = process_cpu();
    let stat0 = machine_jiffies();
    let t0 = Instant::now();
    let report = rt.block_on(pipeline.run()).unwrap();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (process_cpu() - cpu0).as_secs_f64();
    let stat1 = machine_jiffies();
    let peak_rss = peak_rss_mib();
    let busy = (stat1.0 - stat0.0) as f64;
    let idle = (stat1.1 - stat0.1) as f64;
    eprintln!("machine during the run: idle {:.1}% ({:.2} ms/tile of core time), busy {:.2} ms/tile, this process {:.2} ms/tile", 100.0 * idle / (busy + idle), idle * 10.0 / n as f64, busy * 10.0 / n as f64, cpu * 1000.0 / n as f64);
    let floor_after = if skipfloor {
        0.0
    } else {
        scenario_floor(name, work, "after")
    };
    let floor_ms = (floor_before + floor_after) / 2.0;
    assert_eq!(report.items.done, n as u64, "{report}");
    let h = report.hosts.first();
    print_stage_cpu(&report);
    println!(
        "tiles={n} skewed={skewed} floor_ms={floor_ms:.2} floor_before_ms={floor_before:.2} floor_after_ms={floor_after:.2} wall_s={wall:.2} tiles_per_s={:.1} cpu_ms_per_tile={:.2} peak_rss_mib={:.0} requests={} throttled_429={} achieved_per_s={:.2} cores={cores} diagnosis={:?}",
        n as f64 / wall,
        cpu * 1000.0 / n as f64,
        peak_rss,
        h.map(|h| h.requests).unwrap_or(0),
        h.map(|h| h.throttled_429).unwrap_or(0),
        h.map(|h| h.achieved_per_s).unwrap_or(0.0),
        report.diagnosis
    );
}

fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
}

/// The default set of scenarios.
const ALL: [&str; 7] = [
    "floor",
    "cpu-1000",
    "mixed",
    "fetch-1000",
    "skewed-1000",
    "rate",
    "cpu-10000",
];

/// Every scenario of the default set, or those named (a matrix one,
/// `skew10-<budget MiB>`, only when named).
fn chosen(wanted: &[String]) -> Vec<&str> {
    if wanted.is_empty() {
        ALL.to_vec()
    } else {
        wanted.iter().map(String::as_str).collect()
    }
}

/// The reproject stage's settings: EPSG:3857, bilinear, and the `kernel`
/// `WARPLINE_BENCH_KERNEL` names (`gdal`: GDAL's own resampling loop for
/// every tile, as before warpline had one).
fn reproject_settings() -> String {
    let mut s = "crs = \"EPSG:3857\"\nresampling = \"bilinear\"".to_owned();
    if let Ok(k) = std::env::var("WARPLINE_BENCH_KERNEL") {
        s.push_str(&format!("\nkernel = {k:?}"));
    }
    s
}

/// WARPLINE_BENCH_REPEAT=N runs the chosen scenarios N rounds and ends
/// with each ratio's spread: on a shared machine one run moves 5-10%, so
/// comparing two builds needs several interleaved rounds.
fn rounds() -> usize {
    std::env::var("WARPLINE_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn main() {
    if let Ok(name) = std::env::var("WARPLINE_BENCH_SCENARIO") {
        warpline::tune_allocator();
        scenario(&name);
        return;
    }
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let chosen = chosen(&wanted);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut parent = Parent {
        rt,
        work: work.path().to_owned(),
        corpora: HashMap::new(),
    };
    let mut floor_ms = None;
    let cores = warpline::engine::units::cores() as f64;
    let rounds = rounds();
    let mut ratios: Vec<(&str, Vec<(f64, f64)>)> =
        chosen.iter().map(|n| (*n, Vec::new())).collect();
    let mut rows = Vec::new();
    let mut front_doors = Vec::new();
    for (round, name) in (0..rounds).flat_map(|r| chosen.iter().map(move |n| (r, *n))) {
        if adaptive::is(name) {
            adaptive::run(&mut parent, name);
            continue;
        }
        let (line, mut extra) = parent.run(name);
        if name == "floor" {
            floor_ms = field(&line, "floor_ms_per_tile");
        }
        if let Some(budget) = matrix::budget_mib(name) {
            rows.push(matrix::Row::new(budget, round, &line));
        }
        let floor_ms = field(&line, "floor_ms").filter(|f| *f > 0.0).or(floor_ms);
        if let (Some(f), Some(tps), false) = (
            floor_ms,
            field(&line, "tiles_per_s"),
            !(name.starts_with("cpu-") || name == "mixed"),
        ) {
            let ratio = tps / (1000.0 / f * cores);
            // The same figure as a cost: what the pipeline spends per tile,
            // in core time, beyond the floor's sequential work.
            let beyond = cores * 1000.0 / tps - f;
            extra += &format!(
                " achieved/(floor x cores)={ratio:.2} beyond_floor_ms_per_tile={beyond:.2}"
            );
            if let Some((_, v)) = ratios.iter_mut().find(|(n, _)| *n == name) {
                v.push((ratio, beyond));
            }
        }
        if name == "rate" {
            if let Some(r) = field(&line, "achieved_per_s") {
                extra += &format!(" achieved/limit={:.3}", r / 20.0);
            }
        }
        if pyapi::is(name) {
            front_doors.push((name, line.clone()));
        }
        println!("{name}: {line}{extra}");
    }
    print_spreads(ratios);
    if front_doors.len() > 1 {
        pyapi::summary(&front_doors);
    }
    if !rows.is_empty() {
        let (table, ok) = matrix::table(&rows);
        println!("\n{table}");
        if !ok {
            println!("FAILED: a run did not complete, or its peak RSS was over budget + 64 MiB");
            std::process::exit(1);
        }
    }
}

/// The parent's side: the tile server and its corpora.
struct Parent {
    rt: tokio::runtime::Runtime,
    work: std::path::PathBuf,
    corpora: HashMap<Skew, Corpus>,
}

impl Parent {
    /// Runs one scenario in a child process: its line, and the server's
    /// CPU per tile.
    fn run(&mut self, name: &str) -> (String, String) {
        let mut cmd = if name == "mixed-python" {
            python_child()
        } else if pyapi::is(name) {
            pyapi::child(name)
        } else {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.env("WARPLINE_BENCH_SCENARIO", name);
            cmd
        };
        cmd.stdout(Stdio::piped());
        let mut tiles = 0;
        let served = match name {
            "floor" => None,
            _ => {
                let (n, skew) = shape(name);
                let faults = match name {
                    "mixed" | "mixed-python" | "mixed-cli" | "mixed-pyapi" | "mixed-pystage" => {
                        Faults {
                            latency: Some(Duration::from_millis(50)),
                            ..Faults::default()
                        }
                    }
                    "rate" => Faults {
                        latency: Some(Duration::from_millis(50)),
                        rate_limit: Some(20.0),
                        ..Faults::default()
                    },
                    _ => Faults::default(),
                };
                tiles = n;
                let work = &self.work;
                let corpus = self
                    .corpora
                    .entry(skew)
                    .or_insert_with(|| corpus(skew, work));
                if let Some(dir) = &corpus.dir {
                    cmd.env("WARPLINE_BENCH_MIXED", dir);
                }
                let s = self.rt.block_on(serve(n, skew, corpus, faults, work));
                cmd.env("WARPLINE_BENCH_LIST", &s.list);
                if pyapi::is(name) {
                    let out = self.work.join(format!("{name}-out"));
                    let toml = scenario_toml("mixed", &s.list, &out);
                    pyapi::add_pipeline(&mut cmd, name, &toml, &self.work);
                }
                if name == "mixed-python" {
                    cmd.arg(&s.list).arg(self.work.join("python-out"));
                    cmd.env("WARPLINE_BENCH_MIXED_KINDS", mixed::KINDS.join(","));
                }
                Some(s)
            }
        };
        let parent_cpu = process_cpu();
        let mut child = cmd.spawn().expect("bench child");
        let line = child_line(&mut child, name);
        // This process only served tiles while the child ran.
        let server_cpu = (process_cpu() - parent_cpu).as_secs_f64();
        drop(served);
        let mut extra = String::new();
        if tiles > 0 {
            extra = format!(
                " server_cpu_ms_per_tile={:.2}",
                server_cpu * 1000.0 / tiles as f64
            );
        }
        (line, extra)
    }
}

/// The `mixed-python` child: `benches/python/mixed.py` (its arguments,
/// the list of URLs and the output folder, follow).
fn python_child() -> Command {
    let python = std::env::var("WARPLINE_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = Command::new(python);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/python/mixed.py"));
    cmd
}

/// The last line a scenario's child printed, once it has exited; panics
/// when it failed (a bench with a failed scenario has no figure to give).
fn child_line(child: &mut std::process::Child, name: &str) -> String {
    let line = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .last()
        .unwrap_or_default();
    assert!(child.wait().unwrap().success(), "scenario {name} failed");
    line
}

/// With several rounds: each scenario's spread of the ratio and the cost.
fn print_spreads(ratios: Vec<(&str, Vec<(f64, f64)>)>) {
    for (name, v) in ratios {
        if v.len() > 1 {
            let spread = |mut x: Vec<f64>| {
                x.sort_by(f64::total_cmp);
                format!(
                    "min {:.2} median {:.2} max {:.2}",
                    x[0],
                    x[x.len() / 2],
                    x[x.len() - 1]
                )
            };
            println!(
                "{name} over {} rounds: achieved/(floor x cores) {}; beyond the floor (ms per tile) {}",
                v.len(),
                spread(v.iter().map(|r| r.0).collect()),
                spread(v.iter().map(|r| r.1).collect()),
            );
        }
    }
}
