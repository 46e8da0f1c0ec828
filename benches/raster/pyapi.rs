//! The `mixed` pipeline run by its users' two front doors (issue 38), each
//! scenario only when named:
//!
//! - `mixed-cli`: the `warpline` binary (`warpline run PIPELINE --report
//!   FILE`), run and timed by the bench's child: the binary at
//!   `WARPLINE_BENCH_CLI`, else `warpline` in the bench's own profile
//!   folder (`cargo build --release -p warpline-cli` with the same
//!   `CARGO_TARGET_DIR` puts it there);
//! - `mixed-pyapi`: `warpline.run(PIPELINE)` from Python
//!   (`benches/python/pyapi.py run`, under `WARPLINE_BENCH_PYTHON`, which
//!   needs the `warpline` package built with `--release`);
//! - `mixed-pystage`: the same with a pass-through stage written in Python
//!   (`@warpline.stage`, every band in and out as numpy arrays) between
//!   reproject and write: what a Python stage costs per item.
//!
//! All three run the TOML `mixed` runs, written by the parent to a file, on
//! the same corpus, server and latency, and print the same figures: tiles/s
//! over the caller's wall time (process start to exit for the binary;
//! around `warpline.run` for Python) and over the engine's own
//! (`elapsed_s` of the report), CPU ms per tile, minor page faults per
//! tile (which the allocator's settings move), peak RSS. With more than
//! one run, [`summary`] ends the bench with each one's mean and range, the
//! Python / binary ratio, and the stage's cost per item.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The scenarios of this module.
pub const NAMES: [&str; 3] = ["mixed-cli", "mixed-pyapi", "mixed-pystage"];

pub fn is(name: &str) -> bool {
    NAMES.contains(&name)
}

/// The parent's side: the child that runs scenario `name`; the pipeline's
/// path is its last argument (and `WARPLINE_BENCH_PIPELINE`), added once
/// the tiles are served.
pub fn child(name: &str) -> Command {
    if name == "mixed-cli" {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env("WARPLINE_BENCH_SCENARIO", name);
        return cmd;
    }
    let python = std::env::var("WARPLINE_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = Command::new(python);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/python/pyapi.py"));
    cmd.arg(if name == "mixed-pystage" {
        "stage"
    } else {
        "run"
    });
    cmd
}

/// Writes `toml` to `work` as scenario `name`'s pipeline, and gives its
/// path to the child.
pub fn add_pipeline(cmd: &mut Command, name: &str, toml: &str, work: &Path) {
    let path = work.join(format!("{name}.toml"));
    std::fs::write(&path, toml).unwrap();
    cmd.arg(&path).env("WARPLINE_BENCH_PIPELINE", &path);
}

/// The `warpline` binary the `mixed-cli` scenario runs.
fn cli_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("WARPLINE_BENCH_CLI") {
        return PathBuf::from(p);
    }
    // The bench runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("warpline"))
        .unwrap();
    assert!(
        bin.is_file(),
        "mixed-cli runs the warpline binary: {} is missing (cargo build --release -p \
         warpline-cli with this CARGO_TARGET_DIR, or set WARPLINE_BENCH_CLI)",
        bin.display()
    );
    bin
}

/// The waited-for children's resource use.
fn children() -> libc::rusage {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage; getrusage only writes it.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    u
}

/// The `mixed-cli` child: runs the binary on the parent's pipeline and
/// prints the line of figures.
pub fn cli_child(work: &Path) {
    let pipeline = std::env::var("WARPLINE_BENCH_PIPELINE").expect("pipeline from the parent");
    let report_path = work.join("report.json");
    let bin = cli_binary();
    eprintln!("mixed-cli: {}", bin.display());
    let cpu0 = super::rusage(libc::RUSAGE_CHILDREN);
    let faults0 = children().ru_minflt;
    let t0 = Instant::now();
    let status = Command::new(&bin)
        .args(["run", &pipeline, "--report"])
        .arg(&report_path)
        .stdout(Stdio::null())
        .status()
        .expect("the warpline binary");
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (super::rusage(libc::RUSAGE_CHILDREN) - cpu0).as_secs_f64();
    let after = children();
    assert!(status.success(), "warpline run: {status}");
    let mut text = String::new();
    std::fs::File::open(&report_path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (done, total) = (&report["items"]["done"], &report["items"]["total"]);
    assert_eq!(done, total, "every item done: {text}");
    let n = total.as_f64().unwrap();
    let engine = report["elapsed_s"].as_f64().unwrap();
    let per_stage: Vec<String> = report["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let ms = s["cpu_s"].as_f64().unwrap_or(0.0) * 1000.0;
            let processed = s["processed"].as_f64().unwrap_or(0.0).max(1.0);
            format!(
                "{}:{:.2}",
                s["name"].as_str().unwrap_or("?"),
                ms / processed
            )
        })
        .collect();
    eprintln!("pipeline per stage (mean CPU ms): {}", per_stage.join(" "));
    println!(
        "tiles={n} wall_s={wall:.2} tiles_per_s={:.1} engine_wall_s={engine:.2} engine_tiles_per_s={:.1} cpu_ms_per_tile={:.2} page_faults_per_tile={:.0} peak_rss_mib={:.0}",
        n / wall,
        n / engine,
        cpu * 1000.0 / n,
        (after.ru_minflt - faults0) as f64 / n,
        after.ru_maxrss as f64 / 1024.0
    );
}

/// Mean, min and max.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, min, max)
}

/// Each scenario's mean (range) over its runs (`lines`: the name and the
/// line of each run, in order), the Python / binary ratio of tiles/s, and
/// what the Python stage adds per tile.
pub fn summary(lines: &[(&str, String)]) {
    let of = |name: &str, key: &str| -> Vec<f64> {
        lines
            .iter()
            .filter(|(n, _)| *n == name)
            .filter_map(|(_, l)| super::field(l, key))
            .collect()
    };
    let mean = |name: &str, key: &str| {
        let v = of(name, key);
        (!v.is_empty()).then(|| spread(&v).0)
    };
    println!("\nscenario | runs | tiles/s | engine tiles/s | CPU ms per tile | page faults per tile | peak RSS MiB");
    for name in NAMES {
        let runs = of(name, "tiles_per_s").len();
        if runs == 0 {
            continue;
        }
        let cell = |key: &str| {
            let (m, lo, hi) = spread(&of(name, key));
            format!("{m:.1} ({lo:.1}-{hi:.1})")
        };
        println!(
            "{name} | {runs} | {} | {} | {} | {} | {}",
            cell("tiles_per_s"),
            cell("engine_tiles_per_s"),
            cell("cpu_ms_per_tile"),
            cell("page_faults_per_tile"),
            cell("peak_rss_mib")
        );
    }
    for key in ["tiles_per_s", "engine_tiles_per_s"] {
        if let (Some(py), Some(cli)) = (mean("mixed-pyapi", key), mean("mixed-cli", key)) {
            println!("python / binary, {key}: {:.3}", py / cli);
        }
    }
    if let (Some(with), Some(without)) = (
        mean("mixed-pystage", "cpu_ms_per_tile"),
        mean("mixed-pyapi", "cpu_ms_per_tile"),
    ) {
        let wall = |name| 1000.0 / mean(name, "tiles_per_s").unwrap_or(f64::NAN);
        println!(
            "the Python stage per tile: +{:.2} CPU ms (the stage's own CPU {:.2} ms, busy {:.2} ms); +{:.2} ms of wall per tile",
            with - without,
            mean("mixed-pystage", "stage_cpu_ms_per_tile").unwrap_or(f64::NAN),
            mean("mixed-pystage", "stage_busy_ms_per_tile").unwrap_or(f64::NAN),
            wall("mixed-pystage") - wall("mixed-pyapi"),
        );
    }
}
