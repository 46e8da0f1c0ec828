//! Same bytes whatever the parallelism (issue 40): one input set warped
//! to COGs with STAC by 1 and by 4 workers a stage, and by 1 and 3
//! coordinated worker processes (Redis, when `WARPLINE_TEST_REDIS` is
//! set), gives byte-identical outputs, and items and collections that
//! differ only in the documented timestamps (`created`, and a `datetime`
//! taken from the run's start when the input has no date of its own).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::binary::{said, warpline};
use crate::common::{self, hashes, ServedTiles};

/// The pipeline with `workers` workers a stage (and as many connections
/// and cpu permits), named `name`, writing COGs to `out`.
fn pipeline(tiles: &ServedTiles, out: &Path, workers: u32, name: &str) -> std::path::PathBuf {
    let n = workers.to_string();
    let toml = warpline_testkit::pipelines::Raster {
        pipeline: &format!("name = {name:?}"),
        source: &format!(
            "kind = \"list\"\npath = {:?}",
            tiles.list.display().to_string()
        ),
        connections: workers,
        cpu: &n,
        workers: &n,
        reproject: "crs = \"EPSG:3857\"\nresampling = \"bilinear\"",
        write: &format!(
            "dir = {:?}\nformat = \"COG\"\ncreation_options = {{ COMPRESS = \"DEFLATE\" }}\n\
             collection = {{ id = \"same\" }}",
            out.display().to_string()
        ),
        ..Default::default()
    }
    .toml();
    let path = tiles.work.path().join(format!("{name}.toml"));
    std::fs::write(&path, toml).unwrap();
    path
}

fn run(p: &Path) {
    let out = warpline()
        .arg("run")
        .arg(p)
        .args(["--progress", "off"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
}

/// Every file of `dir` by name: a raster's bytes (as a hash), a JSON
/// document without its timestamps.
fn contents(dir: &Path) -> BTreeMap<String, String> {
    let mut out = hashes(dir);
    for (name, v) in out.iter_mut() {
        if name.ends_with(".json") {
            let mut doc = common::read_json(dir.join(name));
            untimed(&mut doc);
            *v = doc.to_string();
        }
    }
    out
}

/// The documented timestamps removed: an item's `created` and (its
/// inputs have no date) `datetime`, a collection's temporal extent.
fn untimed(doc: &mut Value) {
    if let Some(p) = doc.get_mut("properties").and_then(Value::as_object_mut) {
        assert!(p.remove("created").is_some(), "an item has `created`");
        p.remove("datetime");
    }
    if let Some(e) = doc.get_mut("extent").and_then(Value::as_object_mut) {
        e.remove("temporal");
    }
}

fn assert_same(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>, what: &str) {
    assert_eq!(
        a.len(),
        4 * 6 * 2 + 1,
        "{what}: outputs, items and the collection"
    );
    for (name, v) in a {
        assert_eq!(Some(v), b.get(name), "{what}: {name} differs");
    }
    assert_eq!(a.len(), b.len(), "{what}");
}

#[test]
fn one_and_four_workers_a_stage_write_the_same_bytes() {
    let tiles = ServedTiles::new(6, Default::default());
    let (one, four) = (
        tiles.work.path().join("one"),
        tiles.work.path().join("four"),
    );
    run(&pipeline(&tiles, &one, 1, "one"));
    run(&pipeline(&tiles, &four, 4, "four"));
    let reference = contents(&one);
    assert_same(&reference, &contents(&four), "4 workers a stage");

    let Ok(url) = std::env::var("WARPLINE_TEST_REDIS") else {
        eprintln!("WARPLINE_TEST_REDIS is not set: the coordinated runs are not compared");
        return;
    };
    for processes in [1, 3] {
        let out = tiles.work.path().join(format!("coordinated-{processes}"));
        let run_name = format!("same-bytes-{}-{processes}-{}", std::process::id(), nanos());
        let p = pipeline(&tiles, &out, 2, &run_name);
        let co = ["--coordinator", url.as_str(), "--run", run_name.as_str()];
        let enqueued = warpline().arg("enqueue").arg(&p).args(co).output().unwrap();
        assert!(enqueued.status.success(), "{}", said(&enqueued));
        let workers: Vec<_> = (0..processes)
            .map(|i| {
                let mut c: Command = warpline();
                c.arg("run")
                    .arg(&p)
                    .args(co)
                    .args(["--consumer", &format!("w{i}"), "--progress", "off"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                c.spawn().unwrap()
            })
            .collect();
        for mut w in workers {
            assert!(w.wait().unwrap().success(), "a coordinated worker failed");
        }
        let what = format!("{processes} coordinated workers");
        assert_same(&reference, &contents(&out), &what);
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
