//! The command line when its output goes nowhere: a closed stdout or
//! stderr pipe (`warpline run p.toml | head -1`, `2>&1 >/dev/null | true`)
//! neither hangs nor panics a run; and `validate` and `plan` take a
//! pipeline with a global rate (its coordinator is needed only to run);
//! the `--events` file of a killed run ends with a whole line.

use crate::binary::{said, warpline};

use std::process::Stdio;
use std::time::{Duration, Instant};

/// Many failing items: one warning logged per failure.
const FAILING: &str = r#"
[pipeline]
name = "pipes"
flow = ["work"]
[source]
kind = "generate"
count = 3000
[stages.work]
kind = "hold"
fail_every = 3
"#;

/// Runs `FAILING` with stdout and/or stderr a pipe closed at once; the
/// exit code, or a failure when it runs past a generous deadline.
fn exit_with_closed(stdout: bool, stderr: bool) -> Option<i32> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, FAILING).unwrap();
    let pipe_or_null = |pipe: bool| if pipe { Stdio::piped() } else { Stdio::null() };
    let mut child = warpline()
        .args(["run", p.to_str().unwrap(), "--progress", "log"])
        .stdout(pipe_or_null(stdout))
        .stderr(pipe_or_null(stderr))
        .spawn()
        .unwrap();
    // The reader goes away before the first line is written.
    drop(child.stdout.take());
    drop(child.stderr.take());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run hung with a closed pipe (stdout {stdout}, stderr {stderr})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_closed_stderr_pipe_neither_hangs_nor_panics_a_run() {
    // Exit code 3: items failed (not 101, a panic).
    assert_eq!(exit_with_closed(false, true), Some(3));
}

#[test]
fn a_closed_stdout_pipe_neither_hangs_nor_panics_a_run() {
    assert_eq!(exit_with_closed(true, false), Some(3));
    assert_eq!(exit_with_closed(true, true), Some(3));
}

#[test]
fn validate_and_plan_take_a_pipeline_with_a_global_rate() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(
        &p,
        format!(
            "{FAILING}
[limits.tiles]
per_second = 20
scope = \"global\"
"
        )
        .replace("fail_every = 3", "fail_every = 3\nlimits = [\"tiles\"]"),
    )
    .unwrap();
    for command in ["validate", "plan"] {
        let out = warpline()
            .args([command, p.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{command}: {}", said(&out));
    }
}

#[test]
fn the_events_file_of_a_killed_run_ends_with_a_whole_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, FAILING.replace("count = 3000", "count = 10000000")).unwrap();
    let events = dir.path().join("events.jsonl");
    let mut child = warpline()
        .args(["run", p.to_str().unwrap(), "--progress", "off", "--events"])
        .arg(&events)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Several buffers' worth written out, then killed (SIGKILL).
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::metadata(&events).map(|m| m.len()).unwrap_or(0) < 100_000 {
        assert!(Instant::now() < deadline, "no events written");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Stopped first (a write in progress completes; SIGKILL could cut one
    // at a page boundary in the kernel, which no program can prevent),
    // then killed: what is on disk is what the program wrote.
    let pid = child.id() as i32;
    // SAFETY: kill(2) on the pid of a child not yet waited for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let stat = format!("/proc/{pid}/stat");
    while !std::fs::read_to_string(&stat)
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('T')
        })
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "the run did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&events).unwrap();
    assert!(
        text.ends_with('\n'),
        "ends mid-line: {:?}",
        &text[text.len() - 200..]
    );
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
}
