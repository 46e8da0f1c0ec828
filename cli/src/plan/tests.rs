//! `plan`'s text and JSON: every figure with where it came from, the
//! memory bound (or that there is none, and how to have one), and the
//! estimate from the first inputs.

use super::memory::{BASE_MEMORY, BASE_MEMORY_GDAL};
use super::*;
use warpline_engine::machine::{CgroupLimit, Machine};
use warpline_engine::Loader;

const GIB: u64 = 1 << 30;

fn plan(stage: &str) -> Plan {
    let toml = format!(
        "[pipeline]\nflow = [\"a\"]\n[source]\nkind = \"generate\"\ncount = 1\n\
         [limits.memory]\nbudget = \"8MiB\"\n[stages.a]\n{stage}\nlimits = [\"memory\"]\n"
    );
    Plan::of(&Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap())
}

#[test]
fn a_pipeline_without_gdal_stages_has_no_gdal_cache() {
    let p = plan("kind = \"hold\"");
    assert_eq!(p.gdal_cache_bytes, None);
    assert_eq!(p.memory.at_most_bytes, Some((8 << 20) + BASE_MEMORY));
    let text = p.to_string();
    assert!(!text.contains("GDAL block cache"), "{text}");
    assert!(text.contains("1 async worker (default),"), "{text}");
    assert!(
        text.contains(
            "memory: bounded by the byte budgets (declared: [limits.memory]); at most 72.0 MiB"
        ),
        "{text}"
    );
    assert!(
        text.contains("memory       bytes  8.0 MiB (declared)"),
        "{text}"
    );
    let json = serde_json::to_value(&p).unwrap();
    assert!(json["gdal_cache_bytes"].is_null(), "{json}");
    assert_eq!(json["memory"]["bound_by"]["from"], "declared", "{json}");
}

#[test]
fn a_pipeline_with_a_gdal_stage_counts_its_cache() {
    let p = plan("kind = \"decode\"");
    let cache = p.gdal_cache_bytes.expect("decode calls GDAL");
    assert_eq!(
        p.memory.at_most_bytes,
        Some((8 << 20) + cache + BASE_MEMORY_GDAL)
    );
    assert!(p.to_string().contains("GDAL block cache"), "{p}");
}

/// The smallest raster pipeline (no `[limits]`, no `workers`) over
/// `inputs`, planned on `machine`, with `extra` keys in `[pipeline]`.
fn smallest(inputs: &str, machine: Machine, extra: &str) -> (Pipeline, Plan) {
    let out = tempfile::tempdir().unwrap();
    let toml = format!(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"reproject\", \"write\"]\n{extra}\n\
         [source]\nkind = \"inline\"\ninputs = [{inputs}]\n[stages.fetch]\nkind = \"fetch\"\n\
         [stages.decode]\nkind = \"decode\"\n[stages.reproject]\nkind = \"reproject\"\n\
         crs = \"EPSG:3857\"\n[stages.write]\nkind = \"write\"\ndir = {:?}\n",
        out.path().display().to_string()
    );
    let p = Loader::from_toml_str(&toml)
        .with_machine(machine)
        .load(&warpline::registry())
        .unwrap_or_else(|e| panic!("{e}"));
    let plan = Plan::of(&p);
    (p, plan)
}

fn machine(cores: u32, ram: u64, cgroup: Option<u64>) -> Machine {
    Machine {
        cores,
        ram: Some(ram),
        cgroup_limit: cgroup.map(|bytes| CgroupLimit {
            bytes,
            file: "/sys/fs/cgroup/memory.max".into(),
        }),
    }
}

#[test]
fn the_smallest_pipeline_shows_its_defaults_and_where_they_came_from() {
    let (_, p) = smallest("\"a.tif\"", machine(3, 16 * GIB, None), "");
    let text = p.to_string();
    for want in [
        "fetch        fetch       1 async worker (default),",
        "decode       decode      3 blocking workers (default: 3 cores),",
        "reproject    reproject   3 blocking workers (default: 3 cores),",
        "write        write       3 blocking workers (default: 3 cores),",
        "memory       bytes  8.0 GiB (default: half of RAM 16.0 GiB)",
        "descriptors  count ",
        "(default: a quarter of the open-file limit, less 64)",
        "memory: bounded by the default budget `memory` of 8.0 GiB (default: half of RAM 16.0 GiB)",
        "estimated peak memory: not estimated: the inputs were not sized",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(
        json["stages"][2]["workers_from"],
        serde_json::json!({"from": "cores", "cores": 3})
    );
    assert_eq!(
        json["stages"][0]["workers_from"],
        serde_json::json!({"from": "one"})
    );
    assert_eq!(json["memory"]["bound_by"]["from"], "machine");
    assert_eq!(json["memory"]["bound_by"]["memory"]["of"], "ram");
    assert_eq!(
        json["limiters"][1]["origin"],
        "default: half of RAM 16.0 GiB"
    );
}

#[test]
fn a_cgroup_limit_is_named_as_the_origin() {
    let (_, p) = smallest("\"a.tif\"", machine(2, 16 * GIB, Some(2 * GIB)), "");
    let text = p.to_string();
    assert!(
        text.contains(
            "memory       bytes  1.0 GiB (default: half of the cgroup limit 2.0 GiB \
             (/sys/fs/cgroup/memory.max))"
        ),
        "{text}"
    );
}

#[test]
fn declared_workers_are_said_to_be_declared() {
    let toml_workers = Loader::from_toml_str(
        "[pipeline]\nflow = [\"a\"]\n[source]\nkind = \"generate\"\ncount = 1\n\
         [stages.a]\nkind = \"decode\"\nworkers = 1\n",
    )
    .with_machine(machine(2, 16 * GIB, None))
    .load(&warpline::registry())
    .unwrap();
    let text = Plan::of(&toml_workers).to_string();
    assert!(
        text.contains("decode      1 blocking worker (declared),"),
        "{text}"
    );
}

#[test]
fn memory_not_bounded_is_said_with_how_to_bound_it() {
    let (_, p) = smallest(
        "\"a.tif\"",
        machine(2, 16 * GIB, None),
        "memory = \"unbounded\"",
    );
    assert_eq!(p.memory.at_most_bytes, None);
    let text = p.to_string();
    assert!(
        text.contains("  memory not bounded: [pipeline] memory = \"unbounded\" turns the default budget off; remove it"),
        "{text}"
    );
    assert!(text.contains("memory = \"2GiB\""), "{text}");
    assert!(!text.contains("bytes  "), "no byte budget: {text}");
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["memory"]["bound_by"]["from"], "unbounded");
    assert!(json["estimated_peak_memory_bytes"].is_null(), "{json}");
}

/// Six sample tiles written to a directory, as a list for `inputs`.
fn tiles(dir: &std::path::Path) -> String {
    warpline_stages::samples::sample_tiles(2, 256)
        .unwrap()
        .into_iter()
        .take(6)
        .map(|t| {
            let p = dir.join(&t.name);
            std::fs::write(&p, &t.bytes).unwrap();
            format!("{:?}", p.display().to_string())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_estimate_sizes_local_inputs_with_the_stages_own_charges() {
    let dir = tempfile::tempdir().unwrap();
    let (p, plan) = smallest(&tiles(dir.path()), machine(2, 16 * GIB, None), "");
    let plan = plan.sized(&p, 8).await;
    let e = plan
        .memory
        .estimate
        .as_ref()
        .expect("local inputs are sized");
    assert_eq!((e.inputs_sized, e.inputs_total), (6, Some(6)));
    // What this test process held with GDAL loaded (Linux says), not the
    // constant for systems that do not say.
    let now = super::memory::resident_with_gdal().expect("Linux says VmRSS");
    assert!(e.process_bytes > 8 << 20, "{e:?}");
    assert!(
        e.process_bytes <= now * 2 && now <= e.process_bytes * 2,
        "{e:?}"
    );
    // Two warping (a 256 px RGB tile, its output and the chunk buffers),
    // four waiting with their bytes.
    assert!(e.how.starts_with("2 in `reproject` at "), "{}", e.how);
    assert!(e.how.contains("4 waiting before it"), "{}", e.how);
    assert!(e.items_bytes > 6 * 3 * 256 * 256, "{e:?}");
    assert_eq!(
        e.peak_bytes,
        e.process_bytes + e.gdal_cache_bytes + e.items_bytes
    );
    assert_eq!(plan.estimated_peak_memory_bytes, Some(e.peak_bytes));
    assert!(
        plan.to_string()
            .contains("(the first 6 of 6 inputs sized: 2 in `reproject`"),
        "{plan}"
    );
    // Turned off, the budget no longer caps it, and the items are sized
    // all the same.
    let (p, plan) = smallest(
        &tiles(dir.path()),
        machine(2, 16 * GIB, None),
        "memory = \"unbounded\"",
    );
    let unbounded = plan.sized(&p, 8).await;
    assert_eq!(
        unbounded.memory.estimate.as_ref().map(|u| u.items_bytes),
        Some(e.items_bytes)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_budget_caps_the_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let (p, plan) = smallest(
        &tiles(dir.path()),
        machine(2, 16 * GIB, None),
        "memory = \"1MiB\"",
    );
    let plan = plan.sized(&p, 8).await;
    let e = plan
        .memory
        .estimate
        .clone()
        .unwrap_or_else(|| panic!("{:?}", plan.memory));
    assert_eq!(e.items_bytes, 1 << 20);
    assert!(e.how.ends_with("; the budgets allow no more"), "{}", e.how);
    // Smaller than a warp's charge: the plan says why there is no
    // estimate, with the stage's own words.
    let (p, plan) = smallest(
        &tiles(dir.path()),
        machine(2, 16 * GIB, None),
        "memory = \"300KiB\"",
    );
    let why = plan.sized(&p, 8).await.memory.not_estimated.unwrap();
    assert!(
        why.starts_with("what stage `reproject` holds is not known: sizing the first inputs failed: stage `reproject`: "),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_over_the_network_are_not_read_and_the_plan_says_why() {
    // Nothing listens on port 9 of loopback; nothing is asked either.
    let (p, plan) = smallest(
        "\"http://127.0.0.1:9/a.tif\"",
        machine(2, 16 * GIB, None),
        "",
    );
    let plan = plan.sized(&p, 8).await;
    assert!(plan.memory.estimate.is_none());
    let why = plan.memory.not_estimated.clone().unwrap();
    assert!(
        why.contains("what stage `decode` holds is not known") && why.contains("`fetch` may not"),
        "{why}"
    );
    // The bound still stands.
    assert_eq!(plan.estimated_peak_memory_bytes, plan.memory.at_most_bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_read_over_the_network_is_not_opened_by_a_plan() {
    // Nothing listens on port 9 of loopback; nothing is asked either.
    let toml = "[pipeline]\nflow = [\"fetch\", \"decode\"]\n[source]\nkind = \"stac\"\n\
                items = \"http://127.0.0.1:9/items.json\"\nassets = [\"visual\"]\n\
                [stages.fetch]\nkind = \"fetch\"\n[stages.decode]\nkind = \"decode\"\n";
    let p = Loader::from_toml_str(toml)
        .with_machine(machine(2, 16 * GIB, None))
        .load(&warpline::registry())
        .unwrap_or_else(|e| panic!("{e}"));
    let plan = Plan::of(&p).sized(&p, 8).await;
    assert_eq!(
        plan.memory.not_estimated.as_deref(),
        Some("the stac source is not opened by a plan: it would read over the network")
    );
}
