//! The `stac` source (issue 22, item 2): a search of a real STAC API on
//! loopback paged through `next` links, an ItemCollection file, a static
//! catalog, asset selection, assets in the S3 server, and the errors.

use std::path::Path;

use serde_json::{json, Value};

use super::server::{files, items, pipeline, run_with, s3, warpline};
use super::stac_api::{item, serve, write_collection};
use crate::common;

/// Runs `toml` with no S3 server (local and http assets only).
fn run(work: &Path, toml: &str, code: i32) -> (Value, String) {
    run_with(warpline(), work, toml, code)
}

fn stac(source: &str, out: &Path) -> String {
    let source = format!("kind = \"stac\"\n{source}");
    pipeline(
        &source,
        &format!("dir = \"{}\"", out.display()),
        "http://127.0.0.1:9",
    )
}

/// The failure records' (id, message).
fn failures(work: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(work.join("failures.jsonl")).unwrap_or_default();
    let mut out: Vec<(String, String)> = text
        .lines()
        .map(|l| {
            let f: Value = serde_json::from_str(l).unwrap();
            (
                f["id"].as_str().unwrap().to_owned(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = files(dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Five scenes (B04, B08) in the query's bbox and time, as hrefs made by
/// `href` from a tile's file name; and two the query leaves out.
fn scenes(tiles: &[std::path::PathBuf], href: impl Fn(&str) -> String) -> Vec<Value> {
    let name = |i: usize| {
        tiles[i % tiles.len()]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    let mut out: Vec<Value> = (0..5)
        .map(|i| {
            let assets = [("B04", href(&name(i))), ("B08", href(&name(i + 1)))];
            item(
                &format!("S2-{i}"),
                "scenes",
                i as f64,
                0.0,
                "2024-06-01T00:00:00Z",
                &assets,
            )
        })
        .collect();
    let assets = [("B04", href(&name(0))), ("B08", href(&name(1)))];
    out.push(item(
        "far",
        "scenes",
        100.0,
        40.0,
        "2024-06-01T00:00:00Z",
        &assets,
    ));
    out.push(item(
        "old",
        "scenes",
        1.0,
        0.0,
        "2019-06-01T00:00:00Z",
        &assets,
    ));
    out
}

const QUERY: &str = "collections = [\"scenes\"]\nbbox = [0, 0, 10, 10]\n\
    datetime = \"2024-01-01T00:00:00Z/2024-12-31T23:59:59Z\"\nlimit = 2\nassets = [\"B04\", \"B08\"]";

/// A search of 5 items, 2 a page: 3 pages (GET, then POST), 10 inputs;
/// the assets are objects in the S3 server, and the outputs equal those of
/// the same items read from local files through an ItemCollection file.
#[test]
fn a_search_pages_through_next_links_and_s3_assets_equal_the_local_run() {
    let _serial = super::server::serial();
    let Some(s3) = s3("stac") else { return };
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    for t in &tiles {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        s3.put(&format!("assets/{name}"), std::fs::read(t).unwrap());
    }
    // The oracle: the same scenes, local hrefs relative to the file.
    let local: Vec<Value> = scenes(&tiles, |n| format!("tiles/{n}"))[..5].to_vec();
    write_collection(&work.path().join("local.json"), &local, json!([]));
    let local_out = work.path().join("local-out");
    let toml = stac(
        "items = \"local.json\"\nassets = [\"B04\", \"B08\"]",
        &local_out,
    );
    let (report, text) = run(work.path(), &toml, 0);
    assert_eq!(items(&report), [10, 10, 0, 0], "{text}");

    let api = serve("scenes", scenes(&tiles, |n| s3.url(&format!("assets/{n}"))));
    // GET with the query in the URL: stac-server 0.5 cannot page a GET
    // search with list values (collections, bbox): its `next` link fails
    // with "unsupported value". The datetime leaves "old" out; "far" is in.
    // POST: the whole query; "far" and "old" are left out.
    let get = "method = \"GET\"\ndatetime = \"2024-01-01T00:00:00Z/2024-12-31T23:59:59Z\"\n\
               limit = 2\nassets = [\"B04\", \"B08\"]";
    let post = format!("method = \"POST\"\n{QUERY}");
    for (method, query, inputs, searches) in [("GET", get, 12, 3), ("POST", post.as_str(), 10, 6)] {
        let out = work.path().join(format!("out-{method}"));
        let source = format!("kind = \"stac\"\nsearch = \"{}/search\"\n{query}", api.url);
        let write = format!("dir = \"{}\"", out.display());
        let toml = pipeline(&source, &write, &s3.endpoint);
        let (report, text) = s3.run(work.path(), &toml, &s3.secret, 0);
        assert_eq!(items(&report), [inputs, inputs, 0, 0], "{method}: {text}");
        assert_eq!(
            api.searches(),
            searches,
            "{method}: 3 pages of 2 items at most"
        );
        let mut want = names(&local_out);
        if method == "GET" {
            want.extend(["far_B04.tif".to_owned(), "far_B08.tif".to_owned()]);
            want.sort();
        }
        assert_eq!(names(&out), want, "{method}");
        for name in names(&local_out) {
            common::assert_same_raster(&out.join(&name), &local_out.join(&name), &name);
        }
    }
    assert!(
        names(&local_out).contains(&"S2-0_B04.tif".to_owned()),
        "{:?}",
        names(&local_out)
    );
}

/// `assets = "visual"` takes one asset per item; an item without an asset
/// asked for is a failed item named ITEM_ASSET saying which it has.
#[test]
fn assets_are_picked_by_key_and_a_missing_one_fails_naming_the_item() {
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("data/tiles"), 1, 64);
    let name = |i: usize| format!("tiles/{}", tiles[i].file_name().unwrap().to_string_lossy());
    let items_ = vec![
        item(
            "a",
            "c",
            0.0,
            0.0,
            "2024-01-01T00:00:00Z",
            &[("visual", name(0)), ("B04", name(1))],
        ),
        item(
            "b",
            "c",
            0.0,
            0.0,
            "2024-01-01T00:00:00Z",
            &[("visual", name(1))],
        ),
    ];
    // Relative hrefs are resolved against the file's own directory.
    write_collection(&work.path().join("data/items.json"), &items_, json!([]));
    let out = work.path().join("visual");
    let (report, text) = run(
        work.path(),
        &stac("items = \"data/items.json\"\nassets = \"visual\"", &out),
        0,
    );
    assert_eq!(items(&report), [2, 2, 0, 0], "{text}");
    assert_eq!(names(&out), ["a_visual.tif", "b_visual.tif"]);

    let out = work.path().join("bands");
    let toml = stac(
        "items = \"data/items.json\"\nassets = [\"B04\", \"visual\"]",
        &out,
    );
    let (report, text) = run(work.path(), &toml, 3);
    assert_eq!(items(&report), [4, 3, 0, 1], "{text}");
    assert_eq!(names(&out), ["a_B04.tif", "a_visual.tif", "b_visual.tif"]);
    let f = failures(work.path());
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, "b_B04");
    assert!(
        f[0].1
            .contains("item \"b\" has no asset \"B04\" (its assets: visual)"),
        "{}",
        f[0].1
    );
}

/// catalog.json -> a child collection -> two items in folders of their
/// own, each asset relative to its item (and one linked to twice).
#[test]
fn a_static_catalog_is_walked_through_its_child_and_item_links() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("cat");
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let write = |rel: &str, v: Value| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, serde_json::to_vec(&v).unwrap()).unwrap();
    };
    write(
        "catalog.json",
        json!({"type": "Catalog", "id": "root", "stac_version": "1.1.0", "description": "d",
        "links": [{"rel": "self", "href": "./catalog.json"}, {"rel": "child", "href": "./scenes/collection.json"}]}),
    );
    write(
        "scenes/collection.json",
        json!({"type": "Collection", "id": "scenes", "links": [
        {"rel": "parent", "href": "../catalog.json"}, {"rel": "root", "href": "../catalog.json"},
        {"rel": "item", "href": "./one/one.json"}, {"rel": "item", "href": "two/two.json"},
        {"rel": "item", "href": "one/one.json"}]}),
    );
    for (i, id) in ["one", "two"].iter().enumerate() {
        let mut it = item(
            id,
            "scenes",
            0.0,
            0.0,
            "2024-01-01T00:00:00Z",
            &[("B04", "./B04.tif".into())],
        );
        it["links"] = json!([{"rel": "parent", "href": "../collection.json"}]);
        write(&format!("scenes/{id}/{id}.json"), it);
        std::fs::copy(&tiles[i], root.join(format!("scenes/{id}/B04.tif"))).unwrap();
    }
    let out = work.path().join("out");
    let (report, text) = run(
        work.path(),
        &stac("catalog = \"cat/catalog.json\"\nassets = \"B04\"", &out),
        3,
    );
    assert_eq!(items(&report), [3, 2, 0, 1], "{text}");
    assert_eq!(names(&out), ["one_B04.tif", "two_B04.tif"]);
    // An item linked to twice is read once, and said.
    let f = failures(work.path());
    assert!(f[0].1.contains("one.json is linked to twice"), "{f:?}");
}

/// Bad JSON, a search that matches nothing, a `next` link back to the same
/// page, a URL that is not a search: each a failed item naming the URL or
/// file and what is wrong.
#[test]
fn stac_errors_name_the_document_and_what_is_wrong() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    std::fs::write(
        work.path().join("bad.json"),
        "{\"type\": \"FeatureCollection\", \"features\": [",
    )
    .unwrap();
    let looped = work.path().join("loop.json");
    let tile = &common::sample_files(&work.path().join("tiles"), 1, 64)[0];
    let it = item(
        "x",
        "c",
        0.0,
        0.0,
        "2024-01-01T00:00:00Z",
        &[("B04", tile.display().to_string())],
    );
    write_collection(
        &looped,
        &[it],
        json!([{"rel": "next", "href": "./loop.json"}]),
    );
    let api = serve("scenes", Vec::new());
    let cases = [
        (
            "items = \"bad.json\"".to_owned(),
            "not a STAC JSON document: EOF while parsing",
            0,
        ),
        ("items = \"loop.json\"".to_owned(), "leads back to", 1),
        (
            format!(
                "search = \"{}/search\"\ncollections = [\"scenes\"]",
                api.url
            ),
            "no STAC items found",
            0,
        ),
        (
            format!("search = \"{}/nothing-here?token=qqv-secret\"", api.url),
            "HTTP 404 Not Found",
            0,
        ),
        (
            format!("search = \"{}/collections\"", api.url),
            "not what a STAC ItemCollection gives",
            0,
        ),
    ];
    for (source, says, done) in cases {
        let (report, text) = run(
            work.path(),
            &stac(&format!("{source}\nassets = \"B04\""), &out),
            3,
        );
        assert_eq!(items(&report)[1], done, "{source}: {text}");
        let f = failures(work.path());
        assert_eq!(f.len(), 1, "{source}: {f:?}");
        assert!(f[0].1.contains(says), "{source}: {f:?}");
        let shown = format!("{text}{f:?}{report}");
        assert!(!shown.contains("qqv-secret"), "a secret was shown: {shown}");
    }
}

/// The reference's search example, against the loopback STAC API (its
/// URL replaced), its assets in the S3 server (`AWS_ENDPOINT_URL`).
#[test]
fn the_reference_stac_example_runs() {
    let _serial = super::server::serial();
    let Some(s3) = s3("stac-docs") else { return };
    let block = &crate::binary::reference_example(
        "[pipeline]\nflow = [\"fetch\", \"decode\", \"reproject\", \"write\"]\n\n[source]\nkind = \"stac\"\nsearch = ",
        "the STAC search example in docs/pipeline.md",
    );
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let mut scenes = Vec::new();
    for (i, t) in tiles.iter().enumerate().take(3) {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        s3.put(&format!("s2/{name}"), std::fs::read(t).unwrap());
        let href = s3.url(&format!("s2/{name}"));
        let assets = [("red", href.clone()), ("nir", href), ("scl", "x".into())];
        let (x, id) = (11.0 + i as f64 * 0.1, format!("S2B_32TPS_{i}"));
        scenes.push(item(
            &id,
            "sentinel-2-l2a",
            x,
            46.0,
            "2024-06-10T10:00:00Z",
            &assets,
        ));
    }
    // Outside the bbox, outside the month.
    let far = [("red", "x".to_owned()), ("nir", "x".to_owned())];
    scenes.push(item(
        "far",
        "sentinel-2-l2a",
        20.0,
        46.0,
        "2024-06-10T10:00:00Z",
        &far,
    ));
    scenes.push(item(
        "may",
        "sentinel-2-l2a",
        11.0,
        46.0,
        "2024-05-10T10:00:00Z",
        &far,
    ));
    let api = serve("sentinel-2-l2a", scenes);
    let toml = block.replace(
        "https://earth-search.aws.element84.com/v1/search",
        &format!("{}/search", api.url),
    );
    assert!(!toml.contains("element84"), "{toml}");
    let mut command = s3.warpline(&s3.secret);
    command.env("AWS_ENDPOINT_URL", &s3.endpoint);
    let (report, text) = run_with(command, work.path(), &toml, 0);
    assert_eq!(items(&report), [6, 6, 0, 0], "{text}");
    let out = work.path().join("out/scenes");
    assert_eq!(names(&out).len(), 6);
    assert!(
        out.join("S2B_32TPS_0_nir.tif").is_file(),
        "{:?}",
        names(&out)
    );
}
