//! The smallest pipeline (issue 37): a glob source of local files, fetch,
//! decode, reproject, write, with no `[limits]` and no `workers`. Its
//! blocking stages run a worker per core under the default memory budget,
//! which the stages charge; `plan` says where each figure came from, and
//! its estimate of peak memory is within 25% of the peak the run reaches
//! (the binary's own, each run in a process of its own). With `workers = 1`
//! declared, one worker each, and one core busy at most.
//!
//! The scenes are six windows of RGB.byte.tif resampled to 1600 x 1452 px
//! (a test build warps ten times slower than a release one);
//! `scripts/smallest.sh` runs the same on 4000 x 3630 px scenes for
//! docs/performance.md.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::binary::{run_reporting, said, warpline};
use crate::common::{read_json, real_rasters};

/// Six scenes of `w` x `h` px in `dir`, from six windows of `rgb`.
fn scenes(rgb: &Path, dir: &Path, w: u32, h: u32) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..6 {
        let status = Command::new("gdal_translate")
            .args(["-q", "-r", "bilinear", "-srcwin"])
            .args([i * 30, i * 25, 600, 545].map(|v| v.to_string()))
            .args(["-outsize", &w.to_string(), &h.to_string()])
            .arg(rgb)
            .arg(dir.join(format!("scene-{i}.tif")))
            .status()
            .expect("gdal_translate (install gdal-bin)");
        assert!(status.success());
    }
}

/// The smallest pipeline over `scenes`, writing into `out`, with
/// `stage` added to each blocking stage.
fn pipeline(scenes: &Path, out: &Path, stage: &str) -> String {
    format!(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"reproject\", \"write\"]\n\
         [source]\nkind = \"glob\"\npattern = {:?}\n\
         [stages.fetch]\nkind = \"fetch\"\n\
         [stages.decode]\nkind = \"decode\"\n{stage}\n\
         [stages.reproject]\nkind = \"reproject\"\ncrs = \"EPSG:3857\"\n{stage}\n\
         [stages.write]\nkind = \"write\"\ndir = {:?}\n{stage}\n",
        scenes.join("*.tif").display().to_string(),
        out.display().to_string()
    )
}

/// `warpline plan --format json` of `path`.
fn plan(path: &Path) -> Value {
    let out = warpline()
        .args(["plan", "--format", "json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `toml` (as `name.toml` in `dir`): its plan and its report.
fn plan_and_run(dir: &Path, name: &str, toml: &str) -> (Value, Value) {
    let path: PathBuf = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml).unwrap();
    let plan = plan(&path);
    let report_path = dir.join(format!("{name}.json"));
    let out = run_reporting(&path, &report_path);
    assert!(out.status.success(), "{}", said(&out));
    let report = read_json(&report_path);
    assert_eq!(report["items"]["done"], 6, "{report}");
    assert!(
        said(&out).contains(" cores busy"),
        "the report says how many cores were busy: {}",
        said(&out)
    );
    (plan, report)
}

/// The estimate is within 25% of the measured peak.
fn assert_estimate_holds(plan: &Value, report: &Value) {
    let estimate = plan["memory"]["estimate"]["peak_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no estimate: {plan}"));
    assert_eq!(plan["memory"]["estimate"]["inputs_sized"], 6, "{plan}");
    let measured = report["peak_rss_bytes"].as_u64().expect("Linux says VmHWM");
    let error = (estimate as f64 - measured as f64) / measured as f64;
    eprintln!(
        "estimate {} MiB, measured {} MiB ({:+.0}%): {}",
        estimate >> 20,
        measured >> 20,
        error * 100.0,
        plan["memory"]["estimate"]["how"]
    );
    // Within 25% on Debian's GDAL 3.6, which the model was measured on.
    // On another GDAL (the bundled 3.12: 137-151 MiB measured against 175
    // estimated) GDAL's block cache fills less than the model counts, so
    // the estimate may be up to 50% over, never more than 25% under.
    let v = warpline_gdal::versions().gdal;
    let over = if (v.major, v.minor) == (3, 6) {
        0.25
    } else {
        0.5
    };
    assert!(
        (-0.25..=over).contains(&error),
        "plan estimated {} MiB, the run peaked at {} MiB",
        estimate >> 20,
        measured >> 20
    );
}

/// The report's CPU of the blocking stages over the run's wall time.
fn cores_busy(report: &Value) -> f64 {
    let cpu: f64 = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["cpu_s"].as_f64())
        .sum();
    cpu / report["elapsed_s"].as_f64().unwrap()
}

#[test]
fn the_smallest_pipeline_uses_every_core_under_the_default_budget_as_plan_says() {
    let Some(rasters) = real_rasters() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    scenes(&rasters[0], &dir.path().join("scenes"), 1600, 1452);
    let cores = std::thread::available_parallelism().unwrap().get() as u64;

    let toml = pipeline(&dir.path().join("scenes"), &dir.path().join("out"), "");
    let (plan, report) = plan_and_run(dir.path(), "smallest", &toml);
    for (i, name) in ["fetch", "decode", "reproject", "write"].iter().enumerate() {
        let (planned, ran) = (&plan["stages"][i], &report["stages"][i]);
        assert_eq!(ran["name"], *name);
        let want = if i == 0 { 1 } else { cores };
        assert_eq!(planned["workers"], want, "{planned}");
        assert_eq!(ran["workers"], want, "{ran}");
        let from = if i == 0 { "one" } else { "cores" };
        assert_eq!(planned["workers_from"]["from"], from, "{planned}");
    }
    // The default budget: half the machine, charged by the stages.
    assert_eq!(plan["memory"]["bound_by"]["from"], "machine", "{plan}");
    let budget = plan["memory"]["bound_by"]["budget"].as_u64().unwrap();
    let memory = report["limiters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "memory")
        .unwrap_or_else(|| panic!("no default budget in {report}"));
    assert_eq!(memory["capacity"], budget);
    let peak = memory["peak_in_use"].as_u64().unwrap();
    assert!(peak >= 3 * 1600 * 1452, "a scene's bytes at least: {peak}");
    assert!(peak <= budget);
    assert_estimate_holds(&plan, &report);

    // Declared, one worker each: the plan says so, and the blocking stages
    // keep at most about one core busy (reproject, with a little of write).
    let one = pipeline(
        &dir.path().join("scenes"),
        &dir.path().join("out1"),
        "workers = 1",
    );
    let (plan, report) = plan_and_run(dir.path(), "one", &one);
    for i in 1..4 {
        assert_eq!(plan["stages"][i]["workers_from"]["from"], "declared");
        assert_eq!(report["stages"][i]["workers"], 1);
    }
    let busy = cores_busy(&report);
    assert!(busy < 1.5, "{busy} cores busy with one worker per stage");
    assert_estimate_holds(&plan, &report);
}
