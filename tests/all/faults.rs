//! The fault suite: a loopback tile server that returns 500s, resets
//! connections, cuts bodies short, stalls bodies past the timeout, answers
//! 429 storms with Retry-After, and goes down for a while. For each fault,
//! and for all at once: every input ends done or failed with the right
//! reason, done + skipped + failed == total, transient faults with enough
//! attempts end all done, and every output equals a clean run's.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{hashes, list_pipeline, runtime, tiles, write_url_list};
use warpline::engine::ErrorKind;
use warpline::RunReport;
use warpline_testkit::{Fault, Faults, TileServer};

const FETCH: &str = r#"timeout = "1s"
connect_timeout = "1s"
retry = { attempts = ATTEMPTS, base_delay = "20ms", max_delay = "200ms" }"#;

struct Outcome {
    report: RunReport,
    outputs: BTreeMap<String, String>,
    requests: u64,
}

fn run_against(faults: Faults, attempts: u32, work: &Path) -> Outcome {
    let tiles = tiles(4, 96);
    let rt = runtime();
    rt.block_on(async {
        let server = TileServer::start_with(tiles.clone(), faults).await.unwrap();
        let list = work.join("tiles.txt");
        write_url_list(&server, tiles.iter().map(|(n, _)| n.as_str()), &list);
        let out = work.join("out");
        let toml = list_pipeline(
            &list,
            &out,
            &FETCH.replace("ATTEMPTS", &attempts.to_string()),
        );
        let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
        let report = pipeline.run().await.unwrap();
        Outcome {
            outputs: hashes(&out),
            report,
            requests: server.requests(),
        }
    })
}

fn clean() -> BTreeMap<String, String> {
    let work = tempfile::tempdir().unwrap();
    let o = run_against(Faults::default(), 1, work.path());
    assert_eq!(o.report.items.done, 16);
    o.outputs
}

fn assert_accounted(r: &RunReport) {
    let i = r.items;
    assert_eq!(i.done + i.skipped + i.failed, i.total, "{r}");
    assert_eq!(i.total, 16, "{r}");
}

fn each_fault() -> Vec<(&'static str, Faults)> {
    let some = Fault {
        one_in: 3,
        times: 2,
    };
    vec![
        (
            "500s",
            Faults {
                server_errors: Some(some),
                ..Faults::default()
            },
        ),
        (
            "resets",
            Faults {
                resets: Some(some),
                ..Faults::default()
            },
        ),
        (
            "bodies cut short",
            Faults {
                truncated: Some(some),
                ..Faults::default()
            },
        ),
        (
            "bodies slower than the timeout",
            Faults {
                slow: Some((some, Duration::from_secs(3))),
                ..Faults::default()
            },
        ),
        (
            "429 storm with Retry-After",
            Faults {
                throttle: Some((Fault::all(1), 1)),
                ..Faults::default()
            },
        ),
        (
            "down for a second",
            Faults {
                down_for: Some(Duration::from_secs(1)),
                ..Faults::default()
            },
        ),
    ]
}

#[test]
fn with_enough_attempts_every_transient_fault_ends_all_done_and_identical() {
    let clean = clean();
    for (name, faults) in each_fault() {
        let work = tempfile::tempdir().unwrap();
        let o = run_against(faults, 20, work.path());
        assert_accounted(&o.report);
        assert_eq!(o.report.items.done, 16, "{name}: {}", o.report);
        assert_eq!(
            o.outputs, clean,
            "{name}: outputs differ from a clean run (or a temporary file is left)"
        );
    }
}

#[test]
fn all_faults_at_once_end_all_done_and_identical() {
    let clean = clean();
    let work = tempfile::tempdir().unwrap();
    let f = |one_in| Some(Fault { one_in, times: 1 });
    let faults = Faults {
        server_errors: f(3),
        resets: f(4),
        truncated: f(5),
        slow: f(6).map(|x| (x, Duration::from_secs(3))),
        throttle: f(2).map(|x| (x, 1)),
        down_for: Some(Duration::from_millis(500)),
        ..Faults::default()
    };
    let o = run_against(faults, 20, work.path());
    assert_accounted(&o.report);
    assert_eq!(o.report.items.done, 16, "{}", o.report);
    assert!(o.requests > 16, "the faults were retried");
    assert_eq!(o.outputs, clean);
}

/// Whether a failure has the reason a fault should give.
type Reason = fn(&warpline::engine::report::Failure) -> bool;

/// Each kind of fault, on every tile, with the reason it should give.
fn every_fault() -> Vec<(&'static str, Faults, Reason)> {
    let every = Fault::all(1);
    vec![
        (
            "500",
            Faults {
                server_errors: Some(every),
                ..Faults::default()
            },
            |f| f.status == Some(500),
        ),
        (
            "reset",
            Faults {
                resets: Some(every),
                ..Faults::default()
            },
            |f| f.status.is_none(),
        ),
        (
            "cut short",
            Faults {
                truncated: Some(every),
                ..Faults::default()
            },
            |f| f.message.contains("cut short") || f.message.contains("Content-Length"),
        ),
        (
            "slow",
            Faults {
                slow: Some((every, Duration::from_secs(3))),
                ..Faults::default()
            },
            |f| f.message.contains("timed out") || f.message.contains("cut short"),
        ),
    ]
}

#[test]
fn without_retries_each_fault_fails_its_items_with_the_right_reason() {
    let clean = clean();
    let cases = every_fault();
    for (name, faults, right_reason) in cases {
        let work = tempfile::tempdir().unwrap();
        let o = run_against(faults, 1, work.path());
        assert_accounted(&o.report);
        assert_eq!(o.report.items.failed, 16, "{name}: {}", o.report);
        for f in &o.report.failures {
            assert_eq!(
                (f.stage.as_str(), f.kind, f.attempts),
                ("fetch", ErrorKind::Transient, 1),
                "{name}: {f:?}"
            );
            assert!(right_reason(f), "{name}: wrong reason: {f:?}");
        }
        assert!(
            o.outputs.is_empty(),
            "{name}: a failed item left a file: {:?}",
            o.outputs
        );
    }
    // Partial faults: the rest are done and identical to a clean run.
    let work = tempfile::tempdir().unwrap();
    let o = run_against(
        Faults {
            server_errors: Some(Fault {
                one_in: 2,
                times: 1,
            }),
            ..Faults::default()
        },
        1,
        work.path(),
    );
    assert_accounted(&o.report);
    assert!(
        o.report.items.done > 0 && o.report.items.failed > 0,
        "{}",
        o.report
    );
    for (file, hash) in &o.outputs {
        assert_eq!(
            clean.get(file),
            Some(hash),
            "{file} differs from a clean run"
        );
    }
}

/// A server that is down for five seconds (a restart, a failover) costs no
/// item with fetch's default retries (issue 16: 53 of 300 items were lost
/// when retries spanned 1.4 s).
#[test]
fn with_the_default_retries_a_five_second_outage_costs_no_item() {
    let tiles = tiles(4, 64);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime();
    let report = rt.block_on(async {
        let faults = Faults {
            down_for: Some(Duration::from_secs(5)),
            ..Faults::default()
        };
        let server = TileServer::start_with(tiles.clone(), faults).await.unwrap();
        let list = work.path().join("tiles.txt");
        write_url_list(&server, tiles.iter().map(|(n, _)| n.as_str()), &list);
        let toml = list_pipeline(&list, &work.path().join("out"), r#"timeout = "5s""#);
        let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
        pipeline.run().await.unwrap()
    });
    assert_accounted(&report);
    assert_eq!(report.items.done, 16, "{report}");
}

/// A 404 reached through a redirect says where it came from: the list
/// names one URL, the server that answered 404 another.
#[test]
fn a_404_after_a_redirect_names_where_it_was_redirected() {
    let work = tempfile::tempdir().unwrap();
    let rt = runtime();
    let report = rt.block_on(async {
        let faults = Faults {
            redirects: vec![("moved.tif".into(), "/gone.tif".into())],
            ..Faults::default()
        };
        let server = TileServer::start_with(Vec::<(String, Vec<u8>)>::new(), faults)
            .await
            .unwrap();
        let list = work.path().join("tiles.txt");
        write_url_list(&server, ["moved.tif"], &list);
        let toml = list_pipeline(&list, &work.path().join("out"), "retry = { attempts = 1 }");
        let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
        pipeline.run().await.unwrap()
    });
    assert_eq!(report.items.failed, 1, "{report}");
    let f = &report.failures[0];
    assert_eq!(f.status, Some(404), "{f:?}");
    assert!(f.message.contains("moved.tif"), "{f:?}");
    assert!(
        f.message.contains("gone.tif") && f.message.contains("redirect"),
        "{f:?}"
    );
}

/// A 429 is not a failed try (adaptive per-host limits, on by default): with
/// one attempt and every tile refused once (`Retry-After: 1`), every item
/// ends done; the host was paused, not the items' tries spent.
#[test]
fn a_429_is_not_a_failed_try() {
    let work = tempfile::tempdir().unwrap();
    let faults = Faults {
        throttle: Some((Fault::all(1), 1)),
        ..Faults::default()
    };
    let o = run_against(faults, 1, work.path());
    assert_accounted(&o.report);
    assert_eq!(o.report.items.done, 16, "{}", o.report);
    let host = &o.report.hosts[0];
    assert_eq!(host.throttled_429, 16, "{host:?}");
    assert!(
        host.adaptive.as_ref().is_some_and(|a| a.decreases >= 1),
        "{host:?}"
    );
}
