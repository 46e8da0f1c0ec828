//! A global rate shared by worker processes holds at its limit over the
//! whole run, queue drained or not, with no 429 from a server that allows
//! exactly that rate. On a redis-server of the test's own.
//!
//! The README's figure: `cargo test -p warpline-cli --test all global_rate
//! -- --ignored --nocapture` (3 workers, 300 tiles, bucket 20/s, bursts 1 and 2).

use crate::binary::warpline;
use crate::common;
use crate::own_redis;

use std::process::Stdio;
use std::time::{Duration, Instant};

use own_redis::OwnRedis;
use warpline_testkit::Faults;

/// Script calls Redis has run since its statistics were last reset.
fn script_calls(redis: &OwnRedis, reset: bool) -> u64 {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    if reset {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut conn)
            .unwrap();
    }
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// What a run did: the rate the server saw over the whole run, its 429s,
/// and the script calls per item (an item's end is one, its token one).
struct Ran {
    achieved: f64,
    throttled: u64,
    calls_per_item: f64,
}

/// The pipeline each worker runs: fetch under a global rate of 20/s per
/// host, decode, write.
fn rate_pipeline(
    list: &std::path::Path,
    out: &std::path::Path,
    burst: u32,
    attempts: u32,
) -> String {
    common::TilePipeline {
        name: "rate",
        list,
        out,
        per_second: 20,
        burst,
        global: true,
        connections: false,
        attempts,
    }
    .toml()
}

/// Waits for every worker to end, each with exit code 0.
fn wait_for_all(children: &mut [std::process::Child]) {
    let deadline = Instant::now() + Duration::from_secs(300);
    for c in children {
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                assert_eq!(s.code(), Some(0), "a worker failed");
                break;
            }
            assert!(Instant::now() < deadline, "the workers did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `workers` processes over `tiles_per_crs * 4` tiles from a server
/// allowing 20 requests/s (50 ms latency, 429 beyond).
fn run(redis: &OwnRedis, workers: usize, tiles_per_crs: usize, burst: u32) -> Ran {
    // A 429 is tried again (after its `Retry-After`, which pauses the
    // bucket for every worker) rather than left for reclaim.
    let attempts = 3;
    let common::ServedTiles {
        server,
        work,
        list,
        rt: _rt,
    } = common::ServedTiles::new(
        tiles_per_crs,
        Faults {
            latency: Some(Duration::from_millis(50)),
            rate_limit: Some(20.0),
            ..Faults::default()
        },
    );
    let out = work.path().join("out");
    let pipeline = work.path().join("p.toml");
    std::fs::write(&pipeline, rate_pipeline(&list, &out, burst, attempts)).unwrap();
    let p = pipeline.to_str().unwrap();
    let url = redis.url();
    let run = format!("rate-{workers}-{burst}-{tiles_per_crs}");
    let co = ["--coordinator", url.as_str(), "--run", run.as_str()];
    assert!(warpline()
        .args(["enqueue", p])
        .args(co)
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success());
    script_calls(redis, true);
    let mut children: Vec<_> = (0..workers)
        .map(|i| {
            warpline()
                .args([
                    "run",
                    p,
                    "--progress",
                    "off",
                    "--consumer",
                    &format!("w{i}"),
                ])
                .args(co)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_for_all(&mut children);
    let n = (tiles_per_crs * 4) as u64;
    assert_eq!(server.served(), n, "every tile served once");
    assert_eq!(server.requests(), n + server.throttled());
    Ran {
        achieved: server.achieved_rate(),
        throttled: server.throttled(),
        calls_per_item: script_calls(redis, false) as f64 / n as f64,
    }
}

#[test]
fn three_workers_hold_a_global_rate_at_its_limit() {
    let Some(redis) = OwnRedis::start() else {
        return;
    };
    // 120 tiles, 6 s at 20/s: the queue drains well before the end, which
    // is where one connection for reads and tokens lost the rate.
    let Ran {
        achieved,
        throttled,
        calls_per_item,
    } = run(&redis, 3, 30, 1);
    eprintln!(
        "3 workers, burst 1: {achieved:.2} requests/s, {throttled} x 429, \
         {calls_per_item:.2} script calls per item"
    );
    // One to take the token, one to record the end: waiters sleep until
    // their token's time rather than ask again.
    assert!(
        calls_per_item < 2.5,
        "{calls_per_item:.2} script calls per item"
    );
    // 0.98 and no 429 on a quiet machine (the ignored figure below); on a
    // loaded one a worker may be late for its token, or send two together
    // (the server takes up to 3 at once), now and then. One connection for
    // reads and tokens made it 0.58.
    assert!(throttled <= 1, "{throttled} x 429");
    assert!(
        achieved >= 0.8 * 20.0,
        "{achieved:.2} requests/s against a global 20/s"
    );
}

/// The README's figure: 300 tiles, 1-3 workers, bursts 1 and 2.
#[test]
#[ignore = "a measurement: 4 runs of 15 s"]
fn global_rate_figure() {
    let Some(redis) = OwnRedis::start() else {
        return;
    };
    for (workers, burst) in [(3, 1), (3, 2), (1, 1), (2, 2)] {
        let r = run(&redis, workers, 75, burst);
        println!(
            "workers={workers} burst={burst}: {:.2} requests/s, achieved/limit={:.3}, {} x 429, \
             {:.2} script calls per item",
            r.achieved,
            r.achieved / 20.0,
            r.throttled,
            r.calls_per_item
        );
    }
}
