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
//! - `skewed-1000`: 1% of the tiles 20-100x larger, a 512 MiB memory
//!   budget: peak RSS against budget + 64 MiB;
//! - `rate`: a server that allows 20 requests/s (50 ms latency, 429 beyond),
//!   a bucket configured to 20/s: achieved rate / limit, 429s;
//! - `fetch-1000`: the fetch stage alone, 1,000 tiles: what HTTP over
//!   loopback costs per tile.
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

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gdal::raster::Buffer;
use gdal::DriverManager;
use warpline::tileserver::{Faults, TileServer};

const TILE: usize = 512;
const DISTINCT: usize = 48;

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

/// A 3-band Byte GeoTIFF in UTM 18N, `size` px, with texture; DEFLATE when
/// `compress` (the skewed corpus keeps its large tiles small on the wire).
fn make_tile(seed: usize, size: usize, compress: bool, dir: &Path) -> Vec<u8> {
    let path = dir.join(format!("t{seed}-{size}.tif"));
    let mem = DriverManager::get_driver_by_name("MEM").unwrap();
    let mut ds = mem
        .create_with_band_type::<u8, _>("", size, size, 3)
        .unwrap();
    let x0 = 583_000.0 + (seed % 8) as f64 * size as f64 * 30.0;
    let y0 = 4_507_000.0 - (seed / 8) as f64 * size as f64 * 30.0;
    ds.set_geo_transform(&[x0, 30.0, 0.0, y0, 0.0, -30.0])
        .unwrap();
    ds.set_spatial_ref(&gdal::spatial_ref::SpatialRef::from_epsg(32618).unwrap())
        .unwrap();
    for b in 0..3 {
        let data: Vec<u8> = (0..size * size)
            .map(|p| {
                let (x, y) = (p % size, p / size);
                ((x * (b + 1) + y * 3 + seed * 17 + (x * y) % 7) % 251) as u8
            })
            .collect();
        ds.rasterband(b + 1)
            .unwrap()
            .write((0, 0), (size, size), &mut Buffer::new((size, size), data))
            .unwrap();
    }
    let opts: Vec<&str> = if compress {
        vec!["COMPRESS=DEFLATE", "TILED=YES"]
    } else {
        vec![]
    };
    let gtiff = DriverManager::get_driver_by_name("GTiff").unwrap();
    ds.create_copy(&gtiff, &path, &gdal::cpl::CslStringList::from_iter(opts))
        .unwrap();
    drop(ds);
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    bytes
}

fn pipeline_toml(list: &Path, out: &Path, extra_limits: &str, fetch_limits: &str) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "reproject", "write"]
[source]
kind = "list"
path = {list:?}
[limits.connections]
permits = 8
{extra_limits}
[limits.memory]
budget = "512MiB"
[limits.cpu]
permits = "cores+1"
[stages.fetch]
kind = "fetch"
workers = 8
limits = [{fetch_limits}]
memory = "memory"
[stages.decode]
kind = "decode"
workers = "cores"
limits = ["memory", "cpu"]
release = ["memory"]
carry = ["memory"]
[stages.reproject]
kind = "reproject"
workers = "cores"
limits = ["memory", "cpu"]
release = ["memory"]
carry = ["memory"]
crs = "EPSG:3857"
resampling = "bilinear"
[stages.write]
kind = "write"
workers = "cores"
dir = {out:?}
exists = "overwrite"
"#,
        list = list.display().to_string(),
        out = out.display().to_string()
    )
}

/// Only the fetch stage of [`pipeline_toml`]: what HTTP over loopback costs
/// per tile, on both ends.
fn fetch_only_toml(list: &Path) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch"]
[source]
kind = "list"
path = {list:?}
[limits.connections]
permits = 8
[stages.fetch]
kind = "fetch"
workers = 8
limits = ["connections"]
"#,
        list = list.display().to_string()
    )
}

/// The per-tile CPU floor: the three blocking stages called one after the
/// other on this thread, for the same distinct tiles the pipeline is served.
/// One untimed tile first (GDAL and PROJ open their drivers and database
/// once per thread), then two timed rounds. The floor is the *mean* CPU per
/// tile: N tiles cost N x mean, so that is what the limit "floor x cores"
/// must use. The median is printed beside it; it sits 2-3% lower because
/// a few fsyncs are slow, and those are part of the work.
fn floor(work: &Path) -> f64 {
    let tiles: Vec<Vec<u8>> = (0..DISTINCT)
        .map(|i| make_tile(i, TILE, false, work))
        .collect();
    let out = work.join("floor");
    let toml = pipeline_toml(&work.join("unused.txt"), &out, "", "\"connections\"");
    let p = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
    let stages: Vec<_> = p.stages()[1..]
        .iter()
        .map(|s| match &s.handler {
            warpline::Handler::Blocking(h) => h.clone(),
            warpline::Handler::Async(_) => unreachable!("decode, reproject and write are blocking"),
        })
        .collect();
    let run = |id: String, bytes: &[u8], per: &mut [f64; 3]| {
        let mut item = warpline::Item::new(warpline::Input {
            id,
            source: "bench".into(),
            size_hint: None,
        });
        item.set_payload(warpline::stages::fetch::Fetched {
            bytes: bytes.to_vec(),
        });
        let cpu = warpline::engine::report::thread_cpu;
        let start = cpu();
        for (k, s) in stages.iter().enumerate() {
            let t = cpu();
            s.process(&mut item).unwrap();
            per[k] += (cpu() - t).as_secs_f64() * 1000.0;
        }
        (cpu() - start).as_secs_f64() * 1000.0
    };
    run("warm-up".to_owned(), &tiles[0], &mut [0.0; 3]);
    // Nothing written before (making the tiles, or a run) is left for this
    // floor's fsyncs to flush.
    // SAFETY: sync() takes no arguments and only flushes dirty pages.
    unsafe { libc::sync() };
    let mut times = Vec::new();
    let mut per = [0.0f64; 3];
    let stat0 = machine_jiffies();
    for round in 0..2 {
        for (i, bytes) in tiles.iter().enumerate() {
            times.push(run(format!("f{round}-{i}"), bytes, &mut per));
        }
    }
    let stat1 = machine_jiffies();
    let n = times.len() as f64;
    let mean = times.iter().sum::<f64>() / n;
    // The whole machine's busy time over the floor's rounds (jiffies of
    // 10 ms): the floor's thread, and the kernel's work for it elsewhere
    // (journal commits, writeback), and whatever else ran.
    eprintln!(
        "floor on the machine: busy {:.2} ms/tile (its thread {mean:.2})",
        (stat1.0 - stat0.0) as f64 * 10.0 / n
    );
    times.sort_by(f64::total_cmp);
    eprintln!(
        "floor (ms per tile): mean {mean:.2} = decode {:.2} + reproject {:.2} + write {:.2}; median {:.2}, p10 {:.2}, p90 {:.2}",
        per[0] / n,
        per[1] / n,
        per[2] / n,
        times[times.len() / 2],
        times[times.len() / 10],
        times[times.len() * 9 / 10],
    );
    mean
}

struct Served {
    list: std::path::PathBuf,
    _server: TileServer,
}

async fn serve(n: usize, skewed: bool, faults: Faults, work: &Path) -> Served {
    // Every name serves one of a few distinct tiles, shared, not copied.
    let distinct: Vec<Arc<Vec<u8>>> = (0..DISTINCT)
        .map(|i| Arc::new(make_tile(i, TILE, skewed, work)))
        .collect();
    let mut big = Vec::new();
    if skewed {
        // 20x .. 100x the pixels of a normal tile.
        for (i, factor) in [20.0f64, 35.0, 50.0, 70.0, 100.0].iter().enumerate() {
            big.push(Arc::new(make_tile(
                100 + i,
                (TILE as f64 * factor.sqrt()) as usize,
                true,
                work,
            )));
        }
    }
    let tiles: Vec<(String, Arc<Vec<u8>>)> = (0..n)
        .map(|i| {
            let bytes = if skewed && i % 100 == 50 {
                &big[(i / 100) % big.len()]
            } else {
                &distinct[i % DISTINCT]
            };
            (format!("tile-{i:05}.tif"), Arc::clone(bytes))
        })
        .collect();
    let server = TileServer::start_with(tiles.iter().cloned(), faults)
        .await
        .unwrap();
    let list = work.join("tiles.txt");
    let urls: Vec<String> = tiles.iter().map(|(n, _)| server.url(n)).collect();
    std::fs::write(&list, urls.join("\n")).unwrap();
    Served {
        list,
        _server: server,
    }
}

/// Runs one scenario in this (child) process and prints its figures.
fn scenario(name: &str) {
    let work = tempfile::tempdir().unwrap();
    let cores = warpline::engine::units::cores() as f64;
    match name {
        "floor" => println!("floor_ms_per_tile={:.2}", floor(work.path())),
        _ => {
            let (n, skewed, rate) = match name {
                "cpu-1000" | "fetch-1000" => (1000, false, false),
                "cpu-10000" => (10000, false, false),
                "skewed-1000" => (1000, true, false),
                "rate" => (200, false, true),
                other => panic!("unknown scenario {other}"),
            };
            // The server lives in the parent: this child only runs warpline.
            let list = std::env::var("WARPLINE_BENCH_LIST").expect("list from the parent");
            let out = work.path().join("out");
            let (extra, fetch) = if rate {
                (
                    "[limits.per_host]\nper_second = 20\nburst = 2\nper = \"host\"\n",
                    "\"connections\", \"per_host\"",
                )
            } else {
                ("", "\"connections\"")
            };
            // The floor again, in this process, just before and just after
            // the run: the machine's speed drifts (this shared machine's
            // floor moved 20-27 ms between runs of one afternoon), so the
            // ratio uses the mean of the two, taken around the run. Dirty
            // pages are flushed before each, so neither pays for the
            // other's writes.
            // The floor is the reference of the CPU-bound scenarios only.
            let skipfloor = !name.starts_with("cpu-");
            let floor_before = if skipfloor { 0.0 } else { floor(work.path()) };
            let toml = pipeline_toml(Path::new(&list), &out, extra, fetch);
            let toml = if name == "fetch-1000" {
                fetch_only_toml(Path::new(&list))
            } else {
                toml
            };
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
            let floor_after = if skipfloor { 0.0 } else { floor(work.path()) };
            let floor_ms = (floor_before + floor_after) / 2.0;
            assert_eq!(report.items.done, n as u64, "{report}");
            let h = report.hosts.first();
            let stage_cpu: Vec<String> = report
                .stages
                .iter()
                .filter_map(|s| {
                    s.cpu_s.map(|c| {
                        format!("{}:{:.2}", s.name, c * 1000.0 / s.processed.max(1) as f64)
                    })
                })
                .collect();
            eprintln!("pipeline per stage (mean ms): {}", stage_cpu.join(" "));
            if std::env::var_os("WARPLINE_BENCH_REPORT").is_some() {
                eprintln!("{report}");
            }
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
    }
}

fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
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
    let all = [
        "floor",
        "cpu-1000",
        "fetch-1000",
        "skewed-1000",
        "rate",
        "cpu-10000",
    ];
    let chosen: Vec<&str> = all
        .iter()
        .copied()
        .filter(|s| wanted.is_empty() || wanted.iter().any(|w| w == s))
        .collect();
    let exe = std::env::current_exe().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut floor_ms = None;
    let cores = warpline::engine::units::cores() as f64;
    // WARPLINE_BENCH_REPEAT=N runs the chosen scenarios N rounds and ends
    // with each ratio's spread: on a shared machine one run moves 5-10%, so
    // comparing two builds needs several interleaved rounds.
    let rounds: usize = std::env::var("WARPLINE_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut ratios: Vec<(&str, Vec<(f64, f64)>)> =
        chosen.iter().map(|n| (*n, Vec::new())).collect();
    for name in (0..rounds).flat_map(|_| chosen.iter().copied()) {
        let mut cmd = Command::new(&exe);
        cmd.env("WARPLINE_BENCH_SCENARIO", name)
            .stdout(Stdio::piped());
        let mut tiles = 0;
        let served = match name {
            "floor" => None,
            _ => {
                let (n, skewed, faults) = match name {
                    "cpu-1000" | "fetch-1000" => (1000, false, Faults::default()),
                    "cpu-10000" => (10000, false, Faults::default()),
                    "skewed-1000" => (1000, true, Faults::default()),
                    _ => (
                        200,
                        false,
                        Faults {
                            latency: Some(Duration::from_millis(50)),
                            rate_limit: Some(20.0),
                            ..Faults::default()
                        },
                    ),
                };
                tiles = n;
                let s = rt.block_on(serve(n, skewed, faults, work.path()));
                cmd.env("WARPLINE_BENCH_LIST", &s.list);
                Some(s)
            }
        };
        let parent_cpu = process_cpu();
        let mut child = cmd.spawn().expect("bench child");
        let line = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .last()
            .unwrap_or_default();
        assert!(child.wait().unwrap().success(), "scenario {name} failed");
        // This process only served tiles while the child ran.
        let server_cpu = (process_cpu() - parent_cpu).as_secs_f64();
        drop(served);
        if name == "floor" {
            floor_ms = field(&line, "floor_ms_per_tile");
        }
        let mut extra = String::new();
        if tiles > 0 {
            extra = format!(
                " server_cpu_ms_per_tile={:.2}",
                server_cpu * 1000.0 / tiles as f64
            );
        }
        let floor_ms = field(&line, "floor_ms").filter(|f| *f > 0.0).or(floor_ms);
        if let (Some(f), Some(tps), false) = (
            floor_ms,
            field(&line, "tiles_per_s"),
            !name.starts_with("cpu-"),
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
        println!("{name}: {line}{extra}");
    }
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
