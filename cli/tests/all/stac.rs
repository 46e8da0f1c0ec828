//! What `write` publishes with `stac` (issue 40): a STAC item beside each
//! output and the run's collection, checked as a reader would: one item
//! per output, the collection's links equal to the items, each checksum
//! the file's, the GeoTIFF's own provenance the item's, read back by the
//! `stac` crate, and (with `WARPLINE_TEST_STAC_PYTHON`, which
//! scripts/test.sh sets) valid against the vendored STAC JSON schemas and
//! read back by pystac (scripts/check-stac.py). Then a `kill -9` in the
//! middle of a 300-item run and two processes writing one collection.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::binary::{said, warpline};
use crate::common::{self, list_pipeline, ServedTiles};

/// The outputs (`*.tif`) and items (`*.json` but the collection) in `dir`,
/// by stem.
fn stems(dir: &Path, ext: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(ext)?;
            (!name.starts_with('.') && name != "collection.json").then(|| stem.to_owned())
        })
        .collect()
}

/// Checks the collection in `dir` as a reader would; returns how many
/// items it links.
pub fn check_published(dir: &Path) -> usize {
    let outputs = stems(dir, ".tif");
    let items = stems(dir, ".json");
    assert_eq!(outputs, items, "one item per output, and no other");
    let collection = common::read_json(dir.join("collection.json"));
    let mut links: Vec<String> = collection["links"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["rel"] == "item")
        .map(|l| l["href"].as_str().unwrap().to_owned())
        .collect();
    let count = links.len();
    links.sort();
    links.dedup();
    assert_eq!(links.len(), count, "a link twice: {links:?}");
    let expected: Vec<String> = items.iter().map(|s| format!("./{s}.json")).collect();
    assert_eq!(
        links, expected,
        "the collection links every item, and only those"
    );
    let _: stac::Collection = serde_json::from_value(collection).expect("the stac crate reads it");
    for stem in &items {
        check_item(dir, stem);
    }
    count
}

/// One item: read back by the `stac` crate, its asset's size and checksum
/// the file's, its provenance the GeoTIFF's own.
fn check_item(dir: &Path, stem: &str) {
    let path = dir.join(format!("{stem}.json"));
    let item = common::read_json(&path);
    let asset = &item["assets"]["data"];
    let bytes = std::fs::read(dir.join(asset["href"].as_str().unwrap())).unwrap();
    assert_eq!(asset["file:size"], bytes.len(), "{stem}: file:size");
    let checksum = format!("1220{:x}", Sha256::digest(&bytes));
    assert_eq!(
        asset["file:checksum"],
        checksum.as_str(),
        "{stem}: file:checksum"
    );
    assert!(item["bbox"].is_array(), "{stem}: no bbox");
    let ds = gdal::Dataset::open(dir.join(format!("{stem}.tif"))).unwrap();
    let xmp = gdal::Metadata::metadata_domain(&ds, "xml:XMP").expect("an XMP packet");
    let own = warpline::stages::provenance::from_xmp(&xmp[0]).expect("a provenance record");
    let own: serde_json::Value = serde_json::from_str(&own).unwrap();
    assert_eq!(
        own, item["properties"]["warpline:provenance"],
        "{stem}: the GeoTIFF's provenance is the item's"
    );
    let back: stac::Item = serde_json::from_value(item).expect("the stac crate reads it");
    assert_eq!(back.id, stem);
}

/// scripts/check-stac.py on the collection, when scripts/test.sh made its
/// Python: every document valid against the vendored schemas, read back
/// by pystac.
pub fn check_with_python(dir: &Path) {
    check_with_python_and_items(dir, None);
}

/// [`check_with_python`], and the ItemCollection `items` too.
fn check_with_python_and_items(dir: &Path, items: Option<&Path>) {
    let Ok(python) = std::env::var("WARPLINE_TEST_STAC_PYTHON") else {
        eprintln!("WARPLINE_TEST_STAC_PYTHON is not set: the STAC schemas are not checked");
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(python)
        .arg(root.join("scripts/check-stac.py"))
        .arg(dir.join("collection.json"))
        .arg(root.join("tests/data/stac-schemas"))
        .args(items)
        .output()
        .unwrap();
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");
}

#[test]
fn the_demo_publishes_a_valid_collection() {
    let work = tempfile::tempdir().unwrap();
    let out = warpline()
        .args(["demo", "--progress", "off", "--dir"])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    let dir = work.path().join("output");
    assert_eq!(check_published(&dir), 24);
    let item = common::read_json(dir.join("wgs84-000.json"));
    assert_eq!(item["properties"]["proj:code"], "EPSG:3857");
    assert_eq!(
        item["assets"]["data"]["raster:bands"][0]["data_type"],
        "uint8"
    );
    let provenance = &item["properties"]["warpline:provenance"];
    assert_eq!(
        provenance["passed"],
        serde_json::json!(["fetch", "decode", "reproject", "write"])
    );
    assert!(provenance["inputs"][0]["href"]
        .as_str()
        .unwrap()
        .ends_with("/tiles/wgs84-000.tif"));
    check_with_python(&dir);
}

/// With `collection.item_collection`, one FeatureCollection at the root
/// holds every item the collection links (outputs in a subfolder: its
/// hrefs made relative to the root), valid and read back by pystac; a name
/// in a folder is refused when the pipeline is checked.
#[test]
fn an_item_collection_holds_every_item_with_hrefs_from_the_root() {
    let work = tempfile::tempdir().unwrap();
    let demo = |name: &str| {
        warpline()
            .args(["demo", "--progress", "off", "--dir"])
            .arg(work.path())
            .args(["--set", "stages.write.name=tiles/{id}.tif", "--set"])
            .arg(format!("stages.write.collection.item_collection={name}"))
            .output()
            .unwrap()
    };
    let out = demo("items.json");
    assert!(out.status.success(), "{}", said(&out));
    let dir = work.path().join("output");
    let items = common::read_json(dir.join("items.json"));
    assert_eq!(items["type"], "FeatureCollection");
    let features = items["features"].as_array().unwrap();
    assert_eq!(features.len(), 24, "{items}");
    for f in features {
        let asset = &f["assets"]["data"];
        let href = asset["href"].as_str().unwrap();
        assert!(href.starts_with("./tiles/"), "{href}");
        let size = std::fs::metadata(dir.join(href)).unwrap().len();
        assert_eq!(asset["file:size"], size, "{href}");
    }
    let collection = common::read_json(dir.join("collection.json"));
    let links = collection["links"].as_array().unwrap();
    assert!(
        !links.iter().any(|l| l["href"] == "./items.json"),
        "the ItemCollection is not an item: {collection}"
    );
    check_with_python_and_items(&dir, Some(&dir.join("items.json")));
    let out = demo("all/items.json");
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(
        said(&out).contains("the name of a .json file at the root of dir"),
        "{}",
        said(&out)
    );
    // An output whose item would take the ItemCollection's name fails.
    let other = tempfile::tempdir().unwrap();
    let out = warpline()
        .args(["demo", "--progress", "off", "--dir"])
        .arg(other.path())
        .args([
            "--set",
            "stages.write.collection.item_collection=wgs84-000.json",
        ])
        .output()
        .unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains(
            "its STAC item wgs84-000.json would take the name of the run's ItemCollection"
        ),
        "{text}"
    );
    let dir = other.path().join("output");
    assert!(!dir.join("wgs84-000.tif").exists(), "its output is removed");
    let items = common::read_json(dir.join("wgs84-000.json"));
    assert_eq!(items["features"].as_array().unwrap().len(), 23, "{items}");
}

/// A pipeline over the served tiles that writes COGs (and so STAC) into
/// `out`, one connection so that it can be stopped mid-run.
fn cog_pipeline(tiles: &ServedTiles, out: &Path) -> PathBuf {
    let toml = list_pipeline(&tiles.list, out, "")
        .replace("permits = 6", "permits = 1")
        .replace(
            &format!("dir = {:?}", out.display().to_string()),
            &format!("dir = {:?}\nformat = \"COG\"", out.display().to_string()),
        );
    assert!(toml.contains("format = \"COG\""), "{toml}");
    let path = tiles.work.path().join(format!(
        "p-{}.toml",
        out.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&path, toml).unwrap();
    path
}

fn spawn(pipeline: &Path, extra: &[&str]) -> Child {
    warpline()
        .arg("run")
        .arg(pipeline)
        .args(["--progress", "off"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_run_killed_mid_way_and_run_again_has_one_item_per_output() {
    let tiles = ServedTiles::new(75, Default::default());
    let out = tiles.work.path().join("out");
    let pipeline = cog_pipeline(&tiles, &out);
    let mut child = spawn(&pipeline, &[]);
    // Until a third of the 300 items are written (the deadline only turns
    // a hang into a failure).
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::read_dir(&out).map_or(0, |d| d.count()) < 200 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended too soon"
        );
        assert!(Instant::now() < deadline, "no outputs appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let written = stems(&out, ".tif");
    assert!(written.len() < 300, "the run was not interrupted");
    // What a kill between an output's rename and its item's write leaves
    // (an output without its item), and a collection edited by hand with a
    // link twice and one to an item that is not there: the rerun mends both.
    let first = written.iter().next().unwrap().clone();
    std::fs::remove_file(out.join(format!("{first}.json"))).unwrap();
    let mut collection = common::read_json(out.join("collection.json"));
    let links = collection["links"].as_array_mut().unwrap();
    links.push(serde_json::json!({"rel": "item", "href": "./gone.json"}));
    links.push(links[1].clone());
    std::fs::write(out.join("collection.json"), collection.to_string()).unwrap();

    let status = spawn(&pipeline, &["--report", "/dev/null"]).wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(stems(&out, ".tif").len(), 300);
    assert_eq!(check_published(&out), 300);
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn two_processes_writing_one_folder_end_with_one_collection_of_all() {
    let tiles = ServedTiles::new(10, Default::default());
    let out = tiles.work.path().join("shared");
    let pipeline = cog_pipeline(&tiles, &out);
    let children: Vec<Child> = ["0/2", "1/2"]
        .iter()
        .map(|shard| spawn(&pipeline, &["--shard", shard]))
        .collect();
    for mut c in children {
        assert_eq!(c.wait().unwrap().code(), Some(0));
    }
    assert_eq!(check_published(&out), 40);
}
