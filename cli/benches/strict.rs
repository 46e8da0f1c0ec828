//! Rates against strict servers (issue 39): the loopback tile server
//! refuses beyond 20 requests a second as real APIs count it, with `429`
//! and a whole-second `Retry-After` (rounded up), 50 ms latency, and the
//! `warpline` binary fetches from it three ways:
//!
//! - `global`: 3 worker processes of one Redis-coordinated run, each a
//!   fetch of 4 workers under one `scope = "global"` bucket of 20/s, burst
//!   1 (`per = "host"`), 600 tiles;
//! - `adaptive`: one process, a fetch of 32 workers and no bucket (the
//!   adaptive per-host rate alone), 800 tiles;
//! - `local`: one process, a fetch of 8 workers under a per-host bucket of
//!   20/s, burst 1, 600 tiles.
//!
//! Against each kind of server (`warpline_testkit::Strict`):
//!
//! - `sliding`: refuses when it accepted 20 in the last second;
//! - `bucket`: a token bucket of 20/s holding 2 (`bucket1`, only when
//!   named: holding 1, no request may come early at all);
//! - `fixed`: 20 in each second counted from the first request.
//!
//! ```text
//! redis-server --port 6390 --daemonize yes --save ""
//! WARPLINE_BENCH_REDIS=redis://127.0.0.1:6390 cargo bench -p warpline-cli --bench strict
//! cargo bench -p warpline-cli --bench strict -- sliding local   # some
//! ```
//!
//! Without `WARPLINE_BENCH_REDIS` the `global` runs are left out. Each run
//! prints a line; each kind of server ends with a table (markdown, as
//! docs/performance.md has it). The rate is the server's: tiles served
//! (200) per second from its first answer to its last (and, for
//! `adaptive`, after its first 5 s, as the `adapt-rate` bench reads it);
//! refused is the share of all requests the server answered 429.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warpline_testkit::{Faults, Strict, TileServer};

/// The server's limit, requests a second.
const LIMIT: u32 = 20;

fn kinds(wanted: &[String]) -> Vec<(&'static str, Strict)> {
    let all = [
        ("sliding", Strict::sliding(LIMIT)),
        ("bucket", Strict::bucket(f64::from(LIMIT), 2)),
        ("fixed", Strict::fixed(LIMIT)),
        ("bucket1", Strict::bucket(f64::from(LIMIT), 1)),
    ];
    let named: Vec<_> = all
        .iter()
        .filter(|(n, _)| wanted.iter().any(|w| w == n))
        .copied()
        .collect();
    if named.is_empty() {
        all[..3].to_vec()
    } else {
        named
    }
}

const MODES: [&str; 3] = ["global", "adaptive", "local"];

fn tiles(mode: &str) -> usize {
    if mode == "adaptive" {
        800
    } else {
        600
    }
}

/// The pipeline a mode's worker runs: a fetch alone.
fn pipeline(mode: &str, name: &str, list: &Path) -> String {
    let (limits, fetch) = match mode {
        "adaptive" => (String::new(), "workers = 32".to_owned()),
        _ => {
            let (scope, workers) = if mode == "global" {
                ("scope = \"global\"\n", 4)
            } else {
                ("", 8)
            };
            (
                format!("[limits.tiles]\nper_second = {LIMIT}\nburst = 1\nper = \"host\"\n{scope}"),
                format!("workers = {workers}\nlimits = [\"tiles\"]"),
            )
        }
    };
    format!(
        "[pipeline]\nname = {name:?}\nflow = [\"fetch\"]\n[source]\nkind = \"list\"\n\
         path = {:?}\n{limits}[stages.fetch]\nkind = \"fetch\"\n{fetch}\n",
        list.display().to_string()
    )
}

/// The binary, its log at `WARPLINE_BENCH_LOG` (e.g. `debug`; none by
/// default) on stderr.
fn warpline() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_warpline"));
    c.env_remove("WARPLINE_LOG").stdout(Stdio::null());
    if let Ok(level) = std::env::var("WARPLINE_BENCH_LOG") {
        c.env("WARPLINE_LOG", level);
    }
    c
}

/// What one run measured.
struct Figures {
    requests: u64,
    served: u64,
    refused: u64,
    served_per_s: f64,
    after_5s: f64,
    wall_s: f64,
    margin: Option<String>,
    /// The host's adaptive limits at the end (one process's report).
    adaptive: Option<String>,
}

/// Tiles served per second in `[from, to]` of the server's answers: from
/// the first answer after `from` to the last.
fn served_per_s(answers: &[(Duration, u16)], from: Duration) -> f64 {
    let ok: Vec<Duration> = answers
        .iter()
        .filter(|(at, s)| *s == 200 && *at >= from)
        .map(|(at, _)| *at)
        .collect();
    match (ok.first(), ok.last()) {
        (Some(a), Some(b)) if ok.len() > 1 => (ok.len() - 1) as f64 / (*b - *a).as_secs_f64(),
        _ => 0.0,
    }
}

/// Runs `mode` against a fresh server of `kind`.
fn run(kind: Strict, mode: &str, redis: Option<&str>) -> Option<Figures> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let n = tiles(mode);
    let bytes = Arc::new(vec![7u8; 4096]);
    let names: Vec<String> = (0..n).map(|i| format!("t{i}.tif")).collect();
    let faults = Faults {
        latency: Some(Duration::from_millis(50)),
        strict: Some(kind),
        ..Faults::default()
    };
    let corpus = names.iter().map(|n| (n.clone(), Arc::clone(&bytes)));
    let server = rt
        .block_on(TileServer::start_with(corpus, faults))
        .expect("the tile server starts");
    let work = tempfile::tempdir().expect("a work directory");
    let list = work.path().join("tiles.txt");
    let urls: Vec<String> = names.iter().map(|n| server.url(n)).collect();
    std::fs::write(&list, urls.join("\n")).expect("the list");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!(
        "strict-{}-{mode}-{}-{stamp}",
        kind.kind(),
        std::process::id()
    );
    let toml = work.path().join("p.toml");
    std::fs::write(&toml, pipeline(mode, &name, &list)).expect("the pipeline");
    let t0 = Instant::now();
    let workers = if mode == "global" {
        let url = redis?;
        let co = ["--coordinator", url, "--run", name.as_str()];
        let enqueued = warpline().arg("enqueue").arg(&toml).args(co).status();
        assert!(enqueued.is_ok_and(|s| s.success()), "enqueue failed");
        (0..3)
            .map(|i| {
                warpline()
                    .arg("run")
                    .arg(&toml)
                    .args(["--progress", "off", "--consumer", &format!("w{i}")])
                    .args(co)
                    .spawn()
                    .expect("a worker")
            })
            .collect::<Vec<_>>()
    } else {
        let child = warpline()
            .arg("run")
            .arg(&toml)
            .args(["--progress", "off", "--report"])
            .arg(work.path().join("report.json"))
            .spawn()
            .expect("warpline run");
        vec![child]
    };
    for mut w in workers {
        let status = w.wait().expect("a worker ends");
        assert!(status.success(), "{mode} against {}: {status}", kind.kind());
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let answers = server.answers();
    trace(&format!("{} {mode}", kind.kind()), &answers);
    let adaptive = std::fs::read_to_string(work.path().join("report.json"))
        .ok()
        .and_then(|r| serde_json::from_str::<serde_json::Value>(&r).ok())
        .map(|r| r["hosts"][0]["adaptive"].to_string());
    let counts = server.strict_counts();
    assert_eq!(server.served(), n as u64, "every tile served once");
    let margin = redis
        .filter(|_| mode == "global")
        .and_then(|url| learnt_margin(url, &name, &server));
    Some(Figures {
        requests: server.requests(),
        served: counts.accepted,
        refused: counts.refused,
        served_per_s: served_per_s(&answers, Duration::ZERO),
        after_5s: served_per_s(&answers, Duration::from_secs(5)),
        wall_s,
        margin,
        adaptive,
    })
}

/// Second by second, on stderr: tiles served (200) and refused (429).
fn trace(name: &str, answers: &[(Duration, u16)]) {
    let end = answers.last().map_or(0, |(at, _)| at.as_secs());
    for sec in 0..=end {
        let count = |status| {
            answers
                .iter()
                .filter(|(at, s)| at.as_secs() == sec && *s == status)
                .count()
        };
        eprintln!(
            "{name} {sec:>3} s: 200 x {:>3}, 429 x {:>2}",
            count(200),
            count(429)
        );
    }
}

/// The margin the global bucket learnt, as Redis keeps it (`none`: it
/// learnt none).
fn learnt_margin(url: &str, run: &str, server: &TileServer) -> Option<String> {
    let mut conn = redis::Client::open(url).ok()?.get_connection().ok()?;
    let key = format!("warpline:{run}:margin:tiles:http://{}", server.addr());
    let m: Option<String> = redis::cmd("HGET")
        .arg(&key)
        .arg("m")
        .query(&mut conn)
        .ok()?;
    Some(m.unwrap_or_else(|| "none".into()))
}

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let redis = std::env::var("WARPLINE_BENCH_REDIS").ok();
    let modes: Vec<&str> = MODES
        .iter()
        .copied()
        .filter(|m| {
            !wanted.iter().any(|w| MODES.contains(&w.as_str())) || wanted.iter().any(|w| w == m)
        })
        .collect();
    for (kind_name, kind) in kinds(&wanted) {
        let mut rows = Vec::new();
        for mode in &modes {
            let Some(f) = run(kind, mode, redis.as_deref()) else {
                println!("{kind_name} {mode}: left out (WARPLINE_BENCH_REDIS is not set)");
                continue;
            };
            let share = f.served_per_s / f64::from(LIMIT);
            let refused_pct = 100.0 * f.refused as f64 / f.requests.max(1) as f64;
            println!(
                "{kind_name} {mode}: requests={} served={} refused={} ({refused_pct:.1}%) \
                 served_per_s={:.2} of_limit={share:.3} after_5s={:.3} wall_s={:.1} margin={} adaptive={}",
                f.requests,
                f.served,
                f.refused,
                f.served_per_s,
                f.after_5s / f64::from(LIMIT),
                f.wall_s,
                f.margin.as_deref().unwrap_or("-"),
                f.adaptive.as_deref().unwrap_or("-"),
            );
            rows.push(format!(
                "| {mode} | {} | {:.2} | **{share:.3}** | {:.3} | {} ({refused_pct:.1}%) |",
                f.served,
                f.served_per_s,
                f.after_5s / f64::from(LIMIT),
                f.refused,
            ));
        }
        println!("\n{kind_name}:\n");
        println!("| run | tiles | served/s | of the limit | after 5 s | refused |");
        println!("|---|---|---|---|---|---|");
        for r in rows {
            println!("{r}");
        }
        println!();
    }
}
