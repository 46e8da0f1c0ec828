//! What the binary writes to a terminal and to a file: log lines print
//! above the progress bar, never glued to it; colour only on a terminal;
//! each warning names its item once.
//!
//! The terminal is a real pseudo-terminal made by util-linux `script`
//! (installed on Debian with `bsdutils`); without it the terminal test says
//! it is skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::binary::warpline;
use warpline_testkit::pipelines::generated;

/// Fails every 2nd of 16 items, each held 40 ms: the bar is drawn between
/// the warnings.
fn failing() -> String {
    generated(
        &["work"],
        16,
        "[stages.work]\nkind = \"hold\"\nduration = \"40ms\"\nfail_every = 2\n",
    )
}

fn pipeline(dir: &Path) -> PathBuf {
    let p = dir.join("failing.toml");
    std::fs::write(&p, failing()).unwrap();
    p
}

/// `text` without ANSI escape sequences (CSI `ESC [ ... letter` and
/// two-byte `ESC x`).
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // CSI: up to its final letter; any other escape: its one byte.
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        }
    }
    out
}

/// Runs `command` as under a terminal that shows colour (`TERM` says so,
/// `NO_COLOR` unset), with nothing on its standard input.
fn colour_term(command: &mut Command) -> Output {
    command
        .env_remove("NO_COLOR")
        .env("TERM", "xterm-256color")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn has_script() -> bool {
    Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn log_lines_print_above_the_progress_bar_not_glued_to_it() {
    if !has_script() {
        eprintln!("skipped: no `script` (util-linux) to make a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = pipeline(dir.path());
    let command = format!("{} run {}", env!("CARGO_BIN_EXE_warpline"), file.display());
    // `script` runs the command on a new pseudo-terminal (its stdin,
    // stdout and stderr) and copies what it writes to our stdout.
    let out = colour_term(
        Command::new("script")
            .args(["-q", "-e", "-c", &command, "/dev/null"])
            .env_remove("WARPLINE_LOG")
            .env("COLUMNS", "120"),
    );
    let raw = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{raw}");
    // The bar was drawn (a frame with its count), and the log lines on the
    // terminal are coloured.
    assert!(raw.contains("/16"), "no progress bar drawn: {raw:?}");
    // The rate to one decimal: `22.6/s`, not `22.6292/s`.
    for rate in plain(&raw).split(' ').filter(|w| w.ends_with("/s")) {
        let decimals = rate.trim_end_matches("/s").split('.').nth(1).unwrap_or("");
        assert!(decimals.len() <= 1, "rate {rate:?}");
    }
    assert!(raw.contains("\u{1b}[33m WARN"), "{raw:?}");
    // Every piece of a line (between carriage returns and newlines) that
    // has a warning starts with the warning's timestamp: nothing of the
    // bar's frame before it.
    let text = plain(&raw);
    let warnings: Vec<&str> = text
        .split(['\r', '\n'])
        .filter(|piece| piece.contains("WARN"))
        .collect();
    assert_eq!(warnings.len(), 8, "{text}");
    for w in &warnings {
        assert!(
            w.starts_with("20") && w.as_bytes().get(4) == Some(&b'-'),
            "a log line glued to the bar: {w:?}\n{text}"
        );
    }
}

#[test]
fn log_lines_in_a_file_have_no_colour_and_name_the_item_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = pipeline(dir.path());
    let out = colour_term(warpline().arg("run").arg(&file));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a file: {stderr:?}"
    );
    let line = stderr
        .lines()
        .find(|l| l.contains("WARN") && l.contains("item-02"))
        .unwrap_or_else(|| panic!("no warning for item-02: {stderr}"));
    assert_eq!(line.matches("item-02").count(), 1, "{line}");
    assert_eq!(line.matches("work").count(), 1, "{line}");
}
