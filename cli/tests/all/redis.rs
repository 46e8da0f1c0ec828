//! Beyond one machine: `--shard i/N`, and worker processes sharing a Redis
//! work queue and a global rate limit, one of them killed mid-run.
//!
//! Needs a Redis server: `WARPLINE_TEST_REDIS=redis://127.0.0.1:6399`
//! (`scripts/test.sh` starts one). Without the variable these tests say
//! they are skipped; with it, an unreachable server fails them.

use crate::binary;
use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{hashes, runtime};
use warpline::engine::shard::Shard;
use warpline::{Event, EventKind, RunOptions};
use warpline_testkit::Faults;

fn redis_url() -> Option<String> {
    match std::env::var("WARPLINE_TEST_REDIS") {
        Ok(url) => {
            let client = redis::Client::open(url.as_str()).expect("a redis:// URL");
            client.get_connection().unwrap_or_else(|e| {
                panic!("WARPLINE_TEST_REDIS={url} is set but Redis is not there: {e}")
            });
            Some(url)
        }
        Err(_) => {
            eprintln!("WARPLINE_TEST_REDIS is not set: the Redis tests are skipped");
            None
        }
    }
}

/// Ids admitted by a run over `count` generated inputs in shard `shard`.
fn admitted(shard: Shard, count: u64) -> BTreeSet<String> {
    let pipeline = warpline::PipelineBuilder::new("sharded")
        .source("generate", serde_json::json!({ "count": count }))
        .stage("work", "hold", serde_json::json!({ "workers": 2 }))
        .build(&warpline::registry())
        .unwrap();
    let ids = Arc::new(Mutex::new(BTreeSet::new()));
    let sink = Arc::clone(&ids);
    let options = RunOptions {
        shard: Some(shard),
        events: Some(Arc::new(move |e: &Event| {
            if let EventKind::Admitted { item } = &e.kind {
                sink.lock().unwrap().insert(item.clone());
            }
        })),
        ..RunOptions::default()
    };
    let report = runtime()
        .block_on(pipeline.run_with_options(&warpline::RunControl::new(), &options))
        .unwrap();
    assert_eq!(report.items.done, report.items.total);
    let ids = ids.lock().unwrap().clone();
    assert_eq!(ids.len() as u64, report.items.total);
    ids
}

#[test]
fn shards_are_disjoint_cover_every_input_and_are_stable() {
    let n = 3;
    let shards: Vec<BTreeSet<String>> = (0..n)
        .map(|i| admitted(Shard::new(i, n).unwrap(), 600))
        .collect();
    let mut union = BTreeSet::new();
    for (i, a) in shards.iter().enumerate() {
        assert!(
            a.len() > 100,
            "shard {i} has {} of 600: the split is lopsided",
            a.len()
        );
        for b in &shards[i + 1..] {
            assert!(a.is_disjoint(b));
        }
        union.extend(a.iter().cloned());
    }
    assert_eq!(union.len(), 600, "the shards cover every input");
    assert_eq!(
        admitted(Shard::new(1, n).unwrap(), 600),
        shards[1],
        "stable from run to run"
    );
}

fn worker_pipeline(list: &Path, out: &Path, rate: u32) -> String {
    common::TilePipeline {
        name: "mosaic",
        list,
        out,
        per_second: rate,
        burst: 1,
        global: true,
        connections: true,
        attempts: 1,
    }
    .toml()
}

fn warpline(args: &[&str]) -> Command {
    let mut c = binary::warpline();
    c.args(args);
    c
}

fn status(url: &str, run: &str) -> serde_json::Value {
    let out = warpline(&[
        "status",
        "--coordinator",
        url,
        "--run",
        run,
        "--format",
        "json",
    ])
    .output()
    .unwrap();
    crate::common::assert_success(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn final_files(dir: &Path) -> usize {
    hashes(dir).keys().filter(|n| !n.starts_with('.')).count()
}

#[test]
fn status_of_a_run_nothing_was_enqueued_for_says_so() {
    let Some(url) = redis_url() else { return };
    let run = format!("none{}-{}", std::process::id(), fastrand_id());
    let out = warpline(&["status", "--coordinator", &url, "--run", &run])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("0 enqueued"), "{text}");
    assert!(
        text.contains("nothing was enqueued under this name"),
        "{text}"
    );
    assert!(!text.contains("complete"), "{text}");
    assert_eq!(status(&url, &run)["complete"], false);
}

#[test]
fn a_worker_of_a_run_nothing_was_enqueued_for_says_so_and_fails() {
    let Some(url) = redis_url() else { return };
    let run = format!("nosuch{}-{}", std::process::id(), fastrand_id());
    let work = tempfile::tempdir().unwrap();
    let list = work.path().join("tiles.txt");
    std::fs::write(&list, "").unwrap();
    let pipeline = work.path().join("p.toml");
    let out = work.path().join("out");
    std::fs::write(&pipeline, worker_pipeline(&list, &out, 20)).unwrap();
    let p = pipeline.to_str().unwrap();
    let out = warpline(&["run", p, "--coordinator", &url, "--run", &run])
        .args(["--progress", "off"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nothing was enqueued"), "{stderr}");
    assert!(stderr.contains(&run), "{stderr}");
}

#[test]
fn dead_letters_are_listed_with_their_errors_and_requeued_with_counts_kept_true() {
    let Some(url) = redis_url() else { return };
    let run = format!("d{}-{}", std::process::id(), fastrand_id());
    let (served, pipeline) = with_poison();
    let p = pipeline.to_str().unwrap();
    let co = ["--coordinator", url.as_str(), "--run", run.as_str()];
    let work_once = || {
        warpline(&["run", p, "--progress", "off"])
            .args(co)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
    };
    enqueue(p, &co);
    assert_eq!(work_once().code(), Some(3), "the 404 failed");

    let listed = |format: &str| list_dead(&co, format);
    let dead: serde_json::Value = serde_json::from_str(&listed("json")).unwrap();
    let dead = dead.as_array().unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0]["source"].as_str().unwrap().ends_with("/poison.tif"));
    assert!(
        dead[0]["error"].as_str().unwrap().contains("404"),
        "{dead:?}"
    );
    assert_eq!(dead[0]["deliveries"], 1);
    let id = dead[0]["id"].as_str().unwrap().to_owned();
    assert!(listed("text").contains(&id));

    // An id that is no dead letter: said, and nothing moves.
    let none = warpline(&["requeue", "no-such-item"])
        .args(co)
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no-such-item"));
    assert_eq!(status(&url, &run)["dead"], 1);

    requeue(&co, &id);
    let s = status(&url, &run);
    assert_eq!(
        (&s["enqueued"], &s["done"], &s["dead"], &s["complete"]),
        (&5.into(), &4.into(), &0.into(), &false.into()),
        "{s}"
    );
    // Worked again: it fails again, once, and is dead again.
    assert_eq!(work_once().code(), Some(3));
    let s = status(&url, &run);
    assert_eq!(
        (&s["done"], &s["dead"], &s["complete"]),
        (&4.into(), &1.into(), &true.into()),
        "{s}"
    );
    assert_eq!(
        served.server.requests(),
        4 + 2,
        "the requeued item was fetched once more"
    );
    assert!(warpline(&["requeue", "--all"])
        .args(co)
        .status()
        .unwrap()
        .success());
    assert_eq!(status(&url, &run)["dead"], 0);
}

#[test]
fn three_workers_one_killed_every_item_once_within_the_global_rate() {
    let Some(url) = redis_url() else { return };
    let run = format!("t{}-{}", std::process::id(), fastrand_id());
    // 60 tiles.
    let common::ServedTiles {
        server,
        work,
        list,
        rt: _rt,
    } = common::ServedTiles::new(15, Faults::default());
    let out = work.path().join("out");
    let pipeline = work.path().join("p.toml");
    let rate = 20;
    std::fs::write(&pipeline, worker_pipeline(&list, &out, rate)).unwrap();
    let p = pipeline.to_str().unwrap();

    let co = ["--coordinator", url.as_str(), "--run", run.as_str()];
    for _ in 0..2 {
        let out = warpline(&["enqueue", p]).args(co).output().unwrap();
        crate::common::assert_success(&out);
    }
    assert_eq!(
        status(&url, &run)["enqueued"],
        60,
        "enqueueing twice adds nothing"
    );

    let spawn = |name: &str| spawn_worker(p, &co, name);
    let mut victim = spawn("victim");
    let mut others = vec![spawn("w1"), spawn("w2")];
    // Kill one worker once some outputs exist (a condition, polled).
    let deadline = Instant::now() + Duration::from_secs(120);
    while final_files(&out) < 15 {
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    for w in &mut others {
        let status = w.wait().unwrap();
        assert!(status.success(), "a surviving worker failed: {status:?}");
    }

    let s = status(&url, &run);
    assert_eq!(s["complete"], true, "{s}");
    assert_eq!(s["pending"], 0, "{s}");
    assert_eq!(s["done"], 60, "{s}");
    assert_eq!(s["dead"], 0, "{s}");
    // Exactly one complete output per item, each as a clean decode+write.
    assert_eq!(final_files(&out), 60);
    for name in hashes(&out).keys().filter(|n| !n.starts_with('.')) {
        let ds = gdal::Dataset::open(out.join(name)).unwrap();
        assert_eq!(ds.raster_size(), (64, 64), "{name}");
    }
    // The killed worker's items were claimed again by the others.
    let mut conn = connect(&url);
    let deliveries: std::collections::HashMap<String, u32> = redis::cmd("HGETALL")
        .arg(format!("warpline:{run}:deliveries"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(deliveries.len(), 60);
    assert!(
        deliveries.values().any(|n| *n >= 2),
        "nothing was reclaimed: {deliveries:?}"
    );
    let achieved = server.achieved_rate();
    assert!(
        achieved <= f64::from(rate) * 1.02,
        "the tile server saw {achieved:.2} requests/s over the global {rate}/s"
    );
    assert!(server.requests() >= 60);
}

#[test]
fn a_permanent_failure_is_dead_lettered_at_once_a_transient_one_after_the_maximum_deliveries() {
    let Some(url) = redis_url() else { return };
    let run = format!("p{}-{}", std::process::id(), fastrand_id());
    // poison.tif: 404 every time (permanent). A port nothing listens on:
    // connection refused every time (transient).
    let (served, pipeline) = with_poison();
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut text = std::fs::read_to_string(&served.list).unwrap();
    text.push_str(&format!("\nhttp://{refused}/refused.tif\n"));
    std::fs::write(&served.list, text).unwrap();
    let p = pipeline.to_str().unwrap();
    let co = ["--coordinator", url.as_str(), "--run", run.as_str()];
    enqueue(p, &co);
    let status_code = warpline(&[
        "run",
        p,
        "--max-deliveries",
        "3",
        "--reclaim-after",
        "300ms",
        "--progress",
        "off",
    ])
    .args(co)
    .stderr(Stdio::null())
    .output()
    .unwrap();
    assert_eq!(status_code.status.code(), Some(3), "two items failed");
    // The refused item's failed deliveries went back to the queue: said.
    let said = String::from_utf8_lossy(&status_code.stdout);
    assert!(
        said.contains("were left in the queue for another delivery"),
        "{said}"
    );
    let s = status(&url, &run);
    assert_eq!(
        (
            s["done"].as_u64(),
            s["dead"].as_u64(),
            s["pending"].as_u64()
        ),
        (Some(4), Some(2), Some(0)),
        "{s}"
    );
    assert_eq!(s["complete"], true);
    let dead = dead_stream(&url, &run);
    let entry = |name: &str| {
        dead.iter()
            .map(|(_, f)| f)
            .find(|f| f["source"].ends_with(name))
            .unwrap_or_else(|| panic!("no dead-letter entry for {name}: {dead:?}"))
    };
    let poison = entry("/poison.tif");
    assert_eq!(poison["deliveries"], "1", "{poison:?}");
    assert!(poison["error"].contains("404"), "{poison:?}");
    let refused = entry("/refused.tif");
    assert_eq!(refused["deliveries"], "3", "{refused:?}");
    assert_eq!(
        served.server.requests(),
        4 + 1,
        "the 404 was asked for once, not once per delivery"
    );
}

/// Four tiles served, and a worker pipeline (`p.toml` in their folder)
/// over their list and `poison.tif`, which the server does not have (404):
/// the tiles, and the pipeline's path.
fn with_poison() -> (common::ServedTiles, PathBuf) {
    let served = common::ServedTiles::new(1, Faults::default());
    let mut text = std::fs::read_to_string(&served.list).unwrap();
    text.push_str(&format!("\n{}", served.server.url("poison.tif")));
    std::fs::write(&served.list, text).unwrap();
    let pipeline = served.work.path().join("p.toml");
    let out = served.work.path().join("out");
    std::fs::write(&pipeline, worker_pipeline(&served.list, &out, 1000)).unwrap();
    (served, pipeline)
}

/// `warpline requeue ID`, which must succeed.
fn requeue(co: &[&str], id: &str) {
    let moved = warpline(&["requeue", id]).args(co).output().unwrap();
    assert!(
        moved.status.success(),
        "{}",
        String::from_utf8_lossy(&moved.stderr)
    );
}

/// The run's dead-letter stream, read straight from Redis.
fn dead_stream(url: &str, run: &str) -> Vec<(String, HashMap<String, String>)> {
    let mut conn = connect(url);
    redis::cmd("XRANGE")
        .arg(format!("warpline:{run}:dead"))
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap()
}

/// `warpline enqueue`, which must succeed.
fn enqueue(p: &str, co: &[&str]) {
    assert!(warpline(&["enqueue", p])
        .args(co)
        .status()
        .unwrap()
        .success());
}

/// A connection to the test's Redis.
fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// `warpline dead --format FORMAT`, which must succeed: its output.
fn list_dead(co: &[&str], format: &str) -> String {
    let out = warpline(&["dead", "--format", format])
        .args(co)
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    String::from_utf8(out.stdout).unwrap()
}

/// A worker that reclaims items idle for a second.
fn spawn_worker(p: &str, co: &[&str], name: &str) -> Child {
    warpline(&[
        "run",
        p,
        "--reclaim-after",
        "1s",
        "--consumer",
        name,
        "--progress",
        "off",
    ])
    .args(co)
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

fn fastrand_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000_007
}
