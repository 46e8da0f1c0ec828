//! Interrupted runs: a kill -9 or a Ctrl-C mid-run, then a rerun that
//! finishes exactly the rest, every final file complete and identical to a
//! clean run's.

use crate::binary::warpline;
use crate::common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{hashes, list_pipeline, runtime, tiles, write_url_list};
use warpline::stages::temps::temporary_name;
use warpline_testkit::{Faults, TileServer};

const TILES_PER_CRS: usize = 6;
const TOTAL: u64 = 4 * TILES_PER_CRS as u64;

fn final_files(dir: &Path) -> Vec<String> {
    hashes(dir)
        .into_keys()
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// Waits until `n` final outputs exist (a condition, checked every 10 ms;
/// the deadline only turns a hang into a failure).
fn wait_for_outputs(dir: &Path, n: usize, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while final_files(dir).len() < n {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it could be interrupted"
        );
        assert!(Instant::now() < deadline, "no outputs appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn report(path: &Path) -> serde_json::Value {
    common::read_json(path)
}

struct Setup {
    work: tempfile::TempDir,
    pipeline: std::path::PathBuf,
    out: std::path::PathBuf,
    clean: std::collections::BTreeMap<String, String>,
}

fn setup(server: &TileServer, tiles: &[(String, Vec<u8>)]) -> Setup {
    let work = tempfile::tempdir().unwrap();
    let list = work.path().join("tiles.txt");
    write_url_list(server, tiles.iter().map(|(n, _)| n.as_str()), &list);
    let out = work.path().join("out");
    let pipeline = work.path().join("p.toml");
    // One connection: slow enough to interrupt mid-run.
    std::fs::write(
        &pipeline,
        list_pipeline(&list, &out, "").replace("permits = 6", "permits = 1"),
    )
    .unwrap();
    // A clean run of the same inputs, in-process, for the reference bytes.
    let clean_out = work.path().join("clean");
    let toml = list_pipeline(&list, &clean_out, "");
    let r = common::run(&toml);
    assert_eq!(r.items.done, TOTAL, "{r}");
    Setup {
        clean: hashes(&clean_out),
        work,
        pipeline,
        out,
    }
}

fn spawn(s: &Setup, report: &str) -> Child {
    warpline()
        .arg("run")
        .arg(&s.pipeline)
        .arg("--report")
        .arg(s.work.path().join(report))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn rerun_finishes_the_rest(s: &Setup) {
    let finished_before = final_files(&s.out).len() as u64;
    let status = spawn(s, "rerun.json").wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let r = report(&s.work.path().join("rerun.json"));
    assert_eq!(r["items"]["skipped"], finished_before, "{r}");
    assert_eq!(r["items"]["done"], TOTAL - finished_before, "{r}");
    assert_eq!(r["items"]["failed"], 0, "{r}");
    let after: std::collections::BTreeMap<_, _> = hashes(&s.out)
        .into_iter()
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    assert_eq!(
        after, s.clean,
        "every final file is complete and as a clean run made it"
    );
}

/// A slow tile server (so the run can be interrupted), the setup, and a
/// first run that has written a few outputs.
fn start_and_wait_for_outputs() -> (tokio::runtime::Runtime, TileServer, Setup, Child) {
    let rt = runtime();
    let tiles = tiles(TILES_PER_CRS, 256);
    let faults = Faults {
        latency: Some(Duration::from_millis(60)),
        ..Faults::default()
    };
    let server = rt
        .block_on(TileServer::start_with(tiles.clone(), faults))
        .unwrap();
    let s = setup(&server, &tiles);
    let mut child = spawn(&s, "first.json");
    wait_for_outputs(&s.out, 3, &mut child);
    (rt, server, s, child)
}

#[test]
fn after_kill_9_a_rerun_finishes_the_rest() {
    let (_rt, server, s, mut child) = start_and_wait_for_outputs();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let finished = final_files(&s.out);
    assert!(
        (finished.len() as u64) < TOTAL,
        "the run was not interrupted"
    );
    // Whatever is at a final path is complete: identical to the clean run.
    for name in &finished {
        assert_eq!(
            hashes(&s.out).get(name),
            s.clean.get(name),
            "{name} is incomplete"
        );
    }
    // Temporary files as the killed run would have left them mid-write
    // (it may or may not have been writing), beside one of a live process
    // (this one) and one from another machine sharing the directory.
    let dead = child.id();
    let left = temporary_name(&s.out.join("left.tif"), dead);
    let mut side = left.clone().into_os_string();
    side.push(".ovr.tmp");
    let live = temporary_name(&s.out.join("live.tif"), std::process::id());
    let elsewhere = s
        .out
        .join(format!(".other.tif.0123456789abcdef-{dead}-00c0ffee.tmp"));
    for path in [&left, Path::new(&side), &live, &elsewhere] {
        std::fs::write(path, b"partial").unwrap();
    }
    rerun_finishes_the_rest(&s);
    let temporary: Vec<_> = hashes(&s.out)
        .into_keys()
        .filter(|n| n.starts_with('.'))
        .collect();
    let mut kept =
        [&elsewhere, &live].map(|p| p.file_name().unwrap().to_string_lossy().into_owned());
    kept.sort();
    assert_eq!(
        temporary, kept,
        "the rerun removes what the killed run left, and only that"
    );
    drop(server);
}

#[test]
fn after_ctrl_c_the_run_drains_leaves_no_temporary_file_and_a_rerun_finishes() {
    let (_rt, server, s, mut child) = start_and_wait_for_outputs();
    assert_eq!(common::interrupt(&mut child).code(), Some(130));
    let r = report(&s.work.path().join("first.json"));
    assert_eq!(r["outcome"], "stopped", "drained within the deadline: {r}");
    let i = &r["items"];
    assert_eq!(i["failed"], 0, "{r}");
    assert_eq!(i["done"], i["total"], "{r}");
    let left: Vec<String> = hashes(&s.out)
        .into_keys()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    assert_eq!(
        final_files(&s.out).len() as u64,
        i["done"].as_u64().unwrap()
    );
    rerun_finishes_the_rest(&s);
    drop(server);
}
