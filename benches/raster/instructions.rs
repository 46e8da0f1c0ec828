//! `mixed-instructions` (only when named): the reproject stage's
//! instructions, counted by Valgrind's callgrind, with warpline's
//! resampling loop (`kernel = "auto"`) and with GDAL's (`kernel =
//! "gdal"`), kind by kind over the mixed corpus.
//!
//! Timings on a shared machine move by up to 1.6x within a minute;
//! instruction counts do not move at all, so this is the measure to
//! compare the two loops by (it does not see how many instructions a
//! cycle each runs). For each kind and each setting a process of its own
//! runs under `valgrind --tool=callgrind`, counting only [`counted`]: the
//! reproject stage's two calls (its prepare step, then its work), as the
//! engine makes them, for each of the kind's tiles, after one warm-up
//! tile (GDAL and PROJ open their drivers and database once per thread,
//! and a kind with a shared area of interest builds its transformation
//! once). Decode and write run uncounted: their code is the same for both
//! settings. Needs `valgrind` on the `PATH` (`apt-get install valgrind`);
//! a kind takes about a minute under it.

use std::path::Path;
use std::process::Command;

use super::floor::{fetched, mixed_tiles, stage_handlers, Stage};

/// Whether `name` is this module's scenario or its grandchild.
pub fn is(name: &str) -> bool {
    name == "mixed-instructions" || name == CHILD
}

/// The scenario a process under callgrind runs.
const CHILD: &str = "mixed-instructions-one";

/// The symbol callgrind counts (see [`counted`]).
const COUNTED: &str = "*instructions::counted*";

/// In the bench's child (`dir` holds the mixed tiles): the parent's table
/// of counts, one line a kind on stderr, and the totals on stdout.
pub fn child(name: &str, dir: &Path, work: &Path) {
    if name == CHILD {
        return one(dir, work);
    }
    let kinds: Vec<&str> = mixed_tiles(dir).iter().map(|(k, _)| *k).collect();
    let (mut ours, mut theirs) = (0u64, 0u64);
    for kind in &kinds {
        let o = count(kind, "auto", dir, work);
        let t = count(kind, "gdal", dir, work);
        ours += o;
        theirs += t;
        eprintln!(
            "instructions {kind:<12} reproject {:>9.1} M with warpline's loop, {:>9.1} M with GDAL's ({:.2})",
            o as f64 / 1e6,
            t as f64 / 1e6,
            o as f64 / t as f64
        );
    }
    println!(
        "kinds={} reproject_minstr_ours={:.1} reproject_minstr_gdal={:.1} ratio={:.3}",
        kinds.len(),
        ours as f64 / 1e6,
        theirs as f64 / 1e6,
        ours as f64 / theirs as f64
    );
}

/// The instructions callgrind counted in [`counted`] for `kind`'s tiles
/// with `kernel`, in a process of its own.
fn count(kind: &str, kernel: &str, dir: &Path, work: &Path) -> u64 {
    let out = work.join(format!("callgrind.{kind}.{kernel}"));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--toggle-collect={COUNTED}"))
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--log-file=/dev/null")
        .arg(std::env::current_exe().expect("the bench binary"))
        .env("WARPLINE_BENCH_SCENARIO", CHILD)
        .env("WARPLINE_BENCH_MIXED", dir)
        .env("WARPLINE_BENCH_KINDS", kind)
        .env("WARPLINE_BENCH_KERNEL", kernel)
        .status()
        .unwrap_or_else(|e| {
            panic!("mixed-instructions needs valgrind (apt-get install valgrind): {e}")
        });
    assert!(
        status.success(),
        "{kind} with kernel {kernel} under callgrind: {status}"
    );
    let text = std::fs::read_to_string(&out).expect("callgrind's output");
    // callgrind writes the events it collected as `totals: N` (one event:
    // instructions).
    let totals = text
        .lines()
        .find_map(|l| l.strip_prefix("totals: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a totals line in callgrind's output");
    assert!(
        totals > 0,
        "callgrind counted nothing in {COUNTED}: was it inlined?"
    );
    totals
}

/// Under callgrind: one kind's tiles through the stages, one warm-up tile
/// first, the reproject stage counted.
fn one(dir: &Path, work: &Path) {
    let kinds = mixed_tiles(dir);
    let [(_, tiles)] = kinds.as_slice() else {
        panic!("one kind a process, by WARPLINE_BENCH_KINDS");
    };
    let [decode, reproject, write] = stage_handlers(work);
    let through = |id: String, bytes: &[u8], count: bool| {
        let mut item = fetched(id, bytes);
        step(&decode, &mut item);
        if count {
            counted(&reproject, &mut item);
        } else {
            step(&reproject, &mut item);
        }
        step(&write, &mut item);
    };
    through("warm-up".to_owned(), &tiles[0], false);
    for (i, bytes) in tiles.iter().enumerate() {
        through(format!("t{i}"), bytes, true);
    }
}

/// One stage's two calls for one tile, as the engine makes them: its
/// prepare step, then its work.
fn step(stage: &Stage, item: &mut warpline::Item) {
    stage.demand(item).unwrap();
    stage.process(item).unwrap();
}

/// The reproject stage's [`step`]: what callgrind counts.
#[inline(never)]
fn counted(stage: &Stage, item: &mut warpline::Item) {
    step(stage, item);
}
