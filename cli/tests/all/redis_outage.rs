//! Coordinated workers while Redis restarts or freezes under them, on a
//! redis-server of the test's own (never the shared one): every item ends
//! exactly once, with outputs identical to a single-process run, and none
//! waits for reclaim.

use crate::binary;
use crate::common;
use crate::own_redis;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::hashes;
use own_redis::OwnRedis;
use warpline_testkit::{Faults, TileServer};

/// Longer than any of these runs may take: an item that waited for
/// reclaim fails the test by its deadline.
const RECLAIM_AFTER: &str = "300s";
/// How long a run may take, Redis's outage included, on a loaded machine.
const RUN_DEADLINE: Duration = Duration::from_secs(200);

fn pipeline_text(list: &Path, out: &Path, global: bool) -> String {
    common::TilePipeline {
        name: "outage",
        list,
        out,
        per_second: 40,
        burst: 2,
        global,
        connections: true,
        attempts: 1,
    }
    .toml()
}

/// A tile server with 60 tiles (100 ms each, so items are in flight when
/// Redis goes), its list, and the coordinated pipeline.
struct Setup {
    _rt: tokio::runtime::Runtime,
    server: TileServer,
    work: tempfile::TempDir,
    list: PathBuf,
}

impl Setup {
    fn new() -> Self {
        let served = common::ServedTiles::new(
            15,
            Faults {
                latency: Some(Duration::from_millis(100)),
                ..Faults::default()
            },
        );
        Setup {
            server: served.server,
            work: served.work,
            list: served.list,
            _rt: served.rt,
        }
    }

    fn out(&self) -> PathBuf {
        self.work.path().join("out")
    }

    /// Writes the pipeline (`global`: its rate kept in Redis) and returns
    /// its path.
    fn pipeline(&self, name: &str, out: &Path, global: bool) -> String {
        let p = self.work.path().join(name);
        std::fs::write(&p, pipeline_text(&self.list, out, global)).unwrap();
        p.display().to_string()
    }

    /// The outputs of the same pipeline run by one process, no Redis.
    fn single_process_outputs(&self) -> Vec<(String, String)> {
        let out = self.work.path().join("single");
        let p = self.pipeline("single.toml", &out, false);
        let status = warpline(&["run", &p, "--progress", "off"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        finals(&out)
    }
}

fn warpline(args: &[&str]) -> Command {
    let mut c = binary::warpline();
    c.args(args);
    c
}

/// Final outputs (not the hidden temporary files) and their hashes.
fn finals(dir: &Path) -> Vec<(String, String)> {
    hashes(dir)
        .into_iter()
        .filter(|(n, _)| !n.starts_with('.'))
        .collect()
}

/// Polls `cond` until it holds; fails the test at `deadline`.
fn wait_until(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Worker processes and their logs.
struct Workers {
    children: Vec<Child>,
    logs: Vec<PathBuf>,
}

impl Workers {
    fn spawn(setup: &Setup, pipeline: &str, url: &str, run: &str, n: usize) -> Self {
        let (mut children, mut logs) = (Vec::new(), Vec::new());
        for i in 0..n {
            let log = setup.work.path().join(format!("worker{i}.log"));
            let child = warpline(&["run", pipeline, "--progress", "off"])
                .args(["--coordinator", url, "--run", run])
                .args(["--consumer", &format!("w{i}")])
                .args(["--reclaim-after", RECLAIM_AFTER])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            children.push(child);
            logs.push(log);
        }
        Workers { children, logs }
    }

    /// Whether every worker has logged `text`.
    fn all_logged(&self, text: &str) -> bool {
        self.logs.iter().all(|l| {
            std::fs::read_to_string(l)
                .map(|s| s.contains(text))
                .unwrap_or(false)
        })
    }

    /// Waits for every worker to exit; kills them all and fails at the
    /// deadline (today's code never exits after a Redis restart).
    fn wait(mut self, deadline: Duration) -> Vec<ExitStatus> {
        let end = Instant::now() + deadline;
        let mut done: Vec<Option<ExitStatus>> = vec![None; self.children.len()];
        while done.iter().any(Option::is_none) {
            for (c, d) in self.children.iter_mut().zip(done.iter_mut()) {
                if d.is_none() {
                    *d = c.try_wait().unwrap();
                }
            }
            if Instant::now() > end {
                for c in &mut self.children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                let logs: Vec<String> = self
                    .logs
                    .iter()
                    .map(|l| {
                        let log = std::fs::read_to_string(l).unwrap_or_default();
                        let tail = log.len().saturating_sub(3000);
                        log.get(tail..).unwrap_or(&log).to_owned()
                    })
                    .collect();
                panic!("the workers did not finish in {deadline:?}; their logs: {logs:#?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        done.into_iter().flatten().collect()
    }
}

fn status(url: &str, run: &str) -> serde_json::Value {
    let out = warpline(&["status", "--coordinator", url, "--run", run])
        .args(["--format", "json"])
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Enqueues, starts 2 workers, does `outage` to Redis once 15 outputs
/// exist, and checks that every item ended once, as one process would
/// have made it, with no item waiting for reclaim.
fn survives(outage: impl FnOnce(&mut OwnRedis, &Workers)) {
    let Some(mut redis) = OwnRedis::start() else {
        return;
    };
    let url = redis.url();
    let setup = Setup::new();
    let expected = setup.single_process_outputs();
    let requests_before = setup.server.requests();
    let out = setup.out();
    let p = setup.pipeline("p.toml", &out, true);
    let run = "outage";
    let enqueued = warpline(&["enqueue", &p, "--coordinator", &url, "--run", run])
        .output()
        .unwrap();
    assert!(enqueued.status.success());

    let workers = Workers::spawn(&setup, &p, &url, run, 2);
    wait_until("15 outputs", RUN_DEADLINE, || finals(&out).len() >= 15);
    outage(&mut redis, &workers);
    for (i, s) in workers.wait(RUN_DEADLINE).into_iter().enumerate() {
        assert!(s.success(), "worker {i} exited with {s:?}");
    }

    let s = status(&url, run);
    assert_eq!(
        (&s["done"], &s["dead"], &s["pending"], &s["complete"]),
        (&60.into(), &0.into(), &0.into(), &true.into()),
        "{s}"
    );
    // Every tile fetched once: no item was done twice.
    assert_eq!(setup.server.requests() - requests_before, 60);
    assert_eq!(
        finals(&out),
        expected,
        "outputs differ from a single-process run"
    );
}

#[test]
fn a_redis_restart_mid_run_loses_nothing_and_does_nothing_twice() {
    survives(|redis, workers| {
        redis.stop();
        // Down until every worker has seen it (each logs what failed).
        wait_until("the workers to see Redis gone", RUN_DEADLINE, || {
            workers.all_logged("cannot ")
        });
        redis.resume();
    });
}

#[test]
fn a_frozen_redis_strands_no_item_until_reclaim() {
    survives(|redis, workers| {
        redis.freeze();
        // Frozen until every worker's reads have timed out: replies Redis
        // sends after it thaws are for requests the workers gave up on.
        wait_until("the workers' reads to time out", RUN_DEADLINE, || {
            workers.all_logged("cannot ")
        });
        redis.thaw();
    });
}

#[test]
fn a_worker_gives_up_on_redis_after_the_redis_timeout_with_exit_code_5() {
    let Some(mut redis) = OwnRedis::start() else {
        return;
    };
    let url = redis.url();
    let setup = Setup::new();
    let out = setup.out();
    let p = setup.pipeline("p.toml", &out, true);
    let co = ["--coordinator", url.as_str(), "--run", "gone"];
    let enqueued = warpline(&["enqueue", &p]).args(co).output().unwrap();
    assert!(enqueued.status.success());
    let log = setup.work.path().join("worker.log");
    let mut worker = warpline(&["run", &p, "--progress", "off", "--redis-timeout", "2s"])
        .args(co)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("some outputs", RUN_DEADLINE, || !finals(&out).is_empty());
    redis.stop();
    let end = Instant::now() + RUN_DEADLINE;
    let status = loop {
        if let Some(s) = worker.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > end {
            let _ = worker.kill();
            let _ = worker.wait();
            panic!("the worker never gave up on a Redis that was gone");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(5), "{text}");
    assert!(text.contains("gave up on the coordinator"), "{text}");
    assert!(text.contains("out of reach for 2s"), "{text}");
}
