//! Adaptive per-host limits against servers that misbehave (issue 20), the
//! fetch stage alone (32 workers, no limiter, adaptive on: as a user
//! writes it first), each run only when named:
//!
//! - `adapt-rate`: the server allows 20 requests/s (50 ms latency, 429
//!   with `Retry-After: 1` beyond), 800 tiles: items failed, 429s, the
//!   achieved rate after the first 5 s;
//! - `adapt-drop`: the server allows 40 requests/s, 10 from 10 s after the
//!   first request, 40 again from 20 s; 900 tiles: how long the achieved
//!   rate (tiles served over a 2 s window) takes to come within 25% of the
//!   new limit after each change, and each phase's rate and 429s;
//! - `adapt-knee`: latency 20 ms + 10 ms per request in flight beyond 8,
//!   1,000 tiles per run;
//!   a sweep of fixed concurrencies (`adaptive = false`, N workers), then
//!   adaptive: where its concurrency limit settles, and its throughput
//!   against the sweep's best;
//! - `adapt-outage`: the server answers 503 (no `Retry-After`) from 2 s
//!   after the first request, for 5 s (50 ms latency, no rate limit):
//!   items failed, requests during the outage, and how long after the
//!   outage the first tile was served (`adapt-outage-off`: the same with
//!   `adaptive = false`).

use std::process::{Command, Stdio};
use std::time::Duration;

use warpline_testkit::{Faults, TileServer};

use super::corpus::{corpus, serve, Skew};
use super::{child_line, field, Parent};

/// Fixed concurrencies of the knee's sweep.
const SWEEP: [u32; 6] = [4, 6, 8, 10, 12, 16];

const S: fn(u64) -> Duration = Duration::from_secs;

/// Whether `name` is one of these scenarios (a sweep point is
/// `adapt-knee@N`).
pub fn is(name: &str) -> bool {
    name.starts_with("adapt-")
}

fn tiles(name: &str) -> usize {
    match name.split('@').next().unwrap_or(name) {
        "adapt-rate" => 800,
        "adapt-drop" => 900,
        "adapt-knee" => 1000,
        _ => 3000,
    }
}

fn faults(name: &str) -> Faults {
    let ms = Duration::from_millis;
    match name.split('@').next().unwrap_or(name) {
        "adapt-rate" => Faults {
            latency: Some(ms(50)),
            rate_limit: Some(20.0),
            ..Faults::default()
        },
        "adapt-drop" => Faults {
            latency: Some(ms(50)),
            rate_limit: Some(40.0),
            rate_changes: vec![(S(10), 10.0), (S(20), 40.0)],
            ..Faults::default()
        },
        "adapt-knee" => Faults {
            latency: Some(ms(20)),
            latency_per_in_flight: Some((8, ms(10))),
            ..Faults::default()
        },
        _ => Faults {
            latency: Some(ms(50)),
            unavailable: Some((S(2), S(5))),
            ..Faults::default()
        },
    }
}

/// The child's pipeline: the fetch stage alone.
fn toml(name: &str, list: &str) -> String {
    let fetch = match name.split_once('@') {
        Some((_, n)) => format!("workers = {n}\nadaptive = false"),
        None if name.ends_with("-off") => "workers = 32\nadaptive = false".to_owned(),
        None => "workers = 32".to_owned(),
    };
    format!(
        "[pipeline]\nflow = [\"fetch\"]\n[source]\nkind = \"list\"\npath = {list:?}\n\
         [stages.fetch]\nkind = \"fetch\"\n{fetch}\n"
    )
}

/// Runs the pipeline in this (child) process and prints its figures.
pub fn child(name: &str) {
    let list = std::env::var("WARPLINE_BENCH_LIST").expect("list from the parent");
    let pipeline =
        warpline::Pipeline::from_toml_str(&toml(name, &list), &warpline::registry()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let t0 = std::time::Instant::now();
    let report = rt.block_on(pipeline.run()).unwrap();
    let wall = t0.elapsed().as_secs_f64();
    let h = report.hosts.first();
    let a = h.and_then(|h| h.adaptive.as_ref());
    println!(
        "done={} failed={} wall_s={wall:.2} tiles_per_s={:.1} requests={} concurrency={:.1} rate_per_s={:.1} decreases={} last_decrease={}",
        report.items.done,
        report.items.failed,
        report.items.done as f64 / wall,
        h.map_or(0, |h| h.requests),
        a.map_or(0.0, |a| a.concurrency),
        a.and_then(|a| a.rate_per_s).unwrap_or(0.0),
        a.map_or(0, |a| a.decreases),
        a.and_then(|a| a.last_decrease.clone()).unwrap_or_default(),
    );
}

/// Runs `name` in a child process against its server; the child's line and
/// the server's answers (when after the first request, status).
fn run_one(parent: &mut Parent, name: &str) -> (String, Vec<(Duration, u16)>) {
    let work = parent.work.clone();
    let corpus = parent
        .corpora
        .entry(Skew::None)
        .or_insert_with(|| corpus(Skew::None, &work));
    let served = parent
        .rt
        .block_on(serve(tiles(name), Skew::None, corpus, faults(name), &work));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("WARPLINE_BENCH_SCENARIO", name)
        .env("WARPLINE_BENCH_LIST", &served.list)
        .stdout(Stdio::piped())
        .spawn()
        .expect("bench child");
    let line = child_line(&mut child, name);
    (line, answers(&served.server))
}

fn answers(server: &TileServer) -> Vec<(Duration, u16)> {
    server.answers()
}

/// Answers with `status` per second in `[from, from + span)`.
fn per_s(answers: &[(Duration, u16)], status: u16, from: Duration, span: Duration) -> f64 {
    let n = answers
        .iter()
        .filter(|(at, s)| *s == status && *at >= from && *at < from + span)
        .count();
    n as f64 / span.as_secs_f64()
}

/// How long after `change` the served rate over a 2 s window first comes
/// within 25% of `limit` (the window's end, from the change).
fn follows(answers: &[(Duration, u16)], change: Duration, limit: f64) -> Option<Duration> {
    let (step, window) = (Duration::from_millis(100), S(2));
    (0..300).map(|i| step * i + window).find(|end| {
        let r = per_s(answers, 200, change + *end - window, window);
        (0.75 * limit..=1.25 * limit).contains(&r)
    })
}

/// Runs the named scenario (a sweep and a run for `adapt-knee`) and prints
/// its figures.
pub fn run(parent: &mut Parent, name: &str) {
    if name == "adapt-knee" {
        return knee(parent);
    }
    let (line, answers) = run_one(parent, name);
    let count = |status, from, to| {
        let n = answers
            .iter()
            .filter(|(at, s)| *s == status && *at >= from && *at < to);
        n.count()
    };
    let end = answers.last().map_or(Duration::ZERO, |a| a.0);
    let all = answers.len().max(1);
    // Second by second, on stderr: tiles served, 429s, 503s.
    for sec in 0..=end.as_secs() {
        let at = |status| count(status, S(sec), S(sec + 1));
        eprintln!(
            "{name} {sec:>3} s: 200 x {:>3}, 429 x {:>2}, 503 x {:>2}",
            at(200),
            at(429),
            at(503)
        );
    }
    let extra = match name {
        "adapt-rate" => format!(
            " answers_429={} ({:.1}% of requests) served_per_s_after_5s={:.2} achieved/limit={:.3}",
            count(429, S(0), end + S(1)),
            100.0 * count(429, S(0), end + S(1)) as f64 / all as f64,
            per_s(&answers, 200, S(5), end.saturating_sub(S(5))),
            per_s(&answers, 200, S(5), end.saturating_sub(S(5))) / 20.0,
        ),
        "adapt-drop" => {
            let phase = |from: u64, to: Duration, limit: f64| {
                let r = per_s(&answers, 200, S(from), to.saturating_sub(S(from)));
                format!(
                    "{r:.1}/s ({:.2} of {limit}), {} x 429",
                    r / limit,
                    count(429, S(from), to)
                )
            };
            format!(
                " follow_down_s={:?} follow_up_s={:?}; 0-10 s: {}; 10-20 s: {}; 20 s-end: {}",
                follows(&answers, S(10), 10.0).map(|d| d.as_secs_f64()),
                follows(&answers, S(20), 40.0).map(|d| d.as_secs_f64()),
                phase(0, S(10), 40.0),
                phase(10, S(20), 10.0),
                phase(20, end, 40.0),
            )
        }
        _ => {
            let back = answers.iter().find(|(at, s)| *s == 200 && *at >= S(7));
            format!(
                " answers_503={} first_tile_after_outage_s={:?} requests_in_all={all}",
                count(503, S(0), end + S(1)),
                back.map(|(at, _)| (*at - S(7)).as_secs_f64()),
            )
        }
    };
    println!("{name}: {line}{extra}");
}

/// The knee: a sweep of fixed concurrencies, then adaptive.
fn knee(parent: &mut Parent) {
    let mut best = (0, 0.0);
    for n in SWEEP {
        let (line, _) = run_one(parent, &format!("adapt-knee@{n}"));
        let tps = field(&line, "tiles_per_s").unwrap_or(0.0);
        println!("adapt-knee fixed {n}: {line}");
        if tps > best.1 {
            best = (n, tps);
        }
    }
    let (line, _) = run_one(parent, "adapt-knee");
    let tps = field(&line, "tiles_per_s").unwrap_or(0.0);
    println!(
        "adapt-knee: {line} best_fixed={} best_fixed_tiles_per_s={:.1} adaptive/best={:.2}",
        best.0,
        best.1,
        tps / best.1.max(f64::MIN_POSITIVE)
    );
}
