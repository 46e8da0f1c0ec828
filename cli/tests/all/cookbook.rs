//! The cookbook (docs/cookbook.md): each recipe of pipelines/cookbook/ run
//! by the `warpline` binary as written, only its paths, URLs and bucket
//! replaced with `--set` as a user would, against real files, the
//! loopback tile server, a STAC API and the S3 test server.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::binary::said;
use crate::common;
use crate::s3::server::{files, items, s3, warpline};
use crate::s3::stac_api;

/// The recipe file `name` of pipelines/cookbook/.
fn recipe(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pipelines/cookbook")
        .join(name)
}

/// `command run RECIPE --set K=V... --report work/report.json` in `work`:
/// its report and what it printed; the exit code must be `code`.
fn run(command: Command, work: &Path, name: &str, sets: &[(&str, String)]) -> (Value, String) {
    let report = work.join("report.json");
    let out = with_sets(command, name, sets)
        .current_dir(work)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(0), "{name}: {text}");
    (common::read_json(report), text)
}

/// `command run RECIPE --set K=V...`.
fn with_sets(mut command: Command, name: &str, sets: &[(&str, String)]) -> Command {
    command.arg("run").arg(recipe(name));
    for (key, value) in sets {
        command.arg("--set").arg(format!("{key}={value}"));
    }
    command
}

/// The file names in `dir`, sorted, but the STAC items and collection a
/// COG output has beside it (`write`'s `stac`, checked by stac.rs).
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = files(dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

/// `path` is a DEFLATE-compressed COG in EPSG:3857.
fn assert_cog_3857(path: &Path) {
    use gdal::Metadata;
    let ds = gdal::Dataset::open(path).unwrap();
    let structure = |key| ds.metadata_item(key, "IMAGE_STRUCTURE");
    assert_eq!(
        structure("LAYOUT").as_deref(),
        Some("COG"),
        "{}",
        path.display()
    );
    assert_eq!(structure("COMPRESSION").as_deref(), Some("DEFLATE"));
    let srs = ds.spatial_ref().unwrap();
    assert_eq!(srs.auth_code().ok(), Some(3857), "{}", path.display());
}

/// gdalwarp's output for `inputs` (a mosaic when more than one) with the
/// recipes' warp: `-t_srs EPSG:3857 -r bilinear`.
fn oracle(inputs: &[PathBuf], to: &Path) {
    let args: Vec<String> = ["-t_srs", "EPSG:3857", "-r", "bilinear"]
        .map(String::from)
        .to_vec();
    common::gdalwarp_many(&args, inputs, to);
}

/// Recipe 1: a folder of scenes in four CRSs to COGs in EPSG:3857 whose
/// pixels are gdalwarp's; a rerun skips them all.
#[test]
fn recipe_1_a_folder_of_scenes_becomes_cogs_in_web_mercator() {
    let work = tempfile::tempdir().unwrap();
    let scenes = common::sample_files(&work.path().join("scenes"), 2, 64);
    let out = work.path().join("cog-3857");
    let sets = [
        (
            "source.pattern",
            format!("{}/*.tif", work.path().join("scenes").display()),
        ),
        ("stages.write.dir", out.display().to_string()),
    ];
    let (report, text) = run(warpline(), work.path(), "scenes-to-cog-3857.toml", &sets);
    assert_eq!(items(&report), [8, 8, 0, 0], "{text}");
    assert_eq!(names(&out).len(), 8, "{:?}", names(&out));
    for scene in &scenes {
        let name = scene.file_name().unwrap();
        let ours = out.join(name);
        assert_cog_3857(&ours);
        let theirs = work.path().join("oracle").join(name);
        std::fs::create_dir_all(theirs.parent().unwrap()).unwrap();
        oracle(std::slice::from_ref(scene), &theirs);
        common::assert_same_raster(&ours, &theirs, &name.to_string_lossy());
    }
    let (report, text) = run(warpline(), work.path(), "scenes-to-cog-3857.toml", &sets);
    assert_eq!(items(&report), [8, 0, 8, 0], "a rerun skips: {text}");
}

/// Recipe 2: the search (its query as written: collection, bbox, month)
/// against a STAC API on loopback whose assets are objects in the S3 test
/// server; only the items the query matches are uploaded, as COGs; a
/// rerun skips them.
#[test]
fn recipe_2_a_stac_search_goes_to_a_bucket() {
    let _serial = crate::s3::server::serial();
    let Some(s3) = s3("cookbook-stac") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&work.path().join("tiles"), 1, 64);
    let mut scenes = Vec::new();
    for (i, tile) in tiles.iter().enumerate() {
        let name = tile.file_name().unwrap().to_string_lossy().into_owned();
        s3.put(&format!("assets/{name}"), std::fs::read(tile).unwrap());
        let href = [("visual", s3.url(&format!("assets/{name}")))];
        // In the recipe's bbox and month, but for the last two: one far
        // away, one a year early.
        let (x, y, when) = match i {
            2 => (100.0, 40.0, "2024-06-10T10:00:00Z"),
            3 => (11.0, 46.0, "2023-06-10T10:00:00Z"),
            _ => (11.0, 46.0, "2024-06-10T10:00:00Z"),
        };
        let id = format!("S2-{i}");
        scenes.push(stac_api::item(&id, "sentinel-2-l2a", x, y, when, &href));
    }
    let api = stac_api::serve("sentinel-2-l2a", scenes);
    let mut command = s3.warpline(&s3.secret);
    command
        .env("AWS_ENDPOINT_URL", &s3.endpoint)
        .env("AWS_ALLOW_HTTP", "true");
    let sets = [
        ("source.search", format!("{}/search", api.url)),
        ("stages.write.dir", s3.url("visual-3857")),
        (
            "stages.write.staging",
            work.path().join("staging").display().to_string(),
        ),
    ];
    let (report, text) = run(command, work.path(), "stac-to-bucket.toml", &sets);
    assert_eq!(items(&report), [2, 2, 0, 0], "{text}");
    assert_eq!(
        s3.list("visual-3857"),
        [
            "S2-0_visual.json",
            "S2-0_visual.tif",
            "S2-1_visual.json",
            "S2-1_visual.tif",
            "collection.json"
        ]
    );
    let got = work.path().join("got");
    s3.download("visual-3857", &got);
    // Published in the bucket as STAC (write's `stac`, on for COG), each
    // item dated by the scene it was made of.
    assert_eq!(crate::stac::check_published(&got), 2);
    crate::stac::check_with_python(&got);
    let item = common::read_json(got.join("S2-0_visual.json"));
    assert_eq!(item["properties"]["datetime"], "2024-06-10T10:00:00Z");
    let input = &item["properties"]["warpline:provenance"]["inputs"][0];
    assert_eq!(input["href"], s3.url("assets/utm18n-000.tif").as_str());
    assert!(input["etag"].is_string(), "the object's ETag: {input}");
    for i in 0..2 {
        let ours = got.join(format!("S2-{i}_visual.tif"));
        assert_cog_3857(&ours);
        let theirs = work.path().join(format!("oracle-{i}.tif"));
        oracle(&tiles[i..=i], &theirs);
        common::assert_same_raster(&ours, &theirs, &format!("S2-{i}"));
    }
    let mut command = s3.warpline(&s3.secret);
    command
        .env("AWS_ENDPOINT_URL", &s3.endpoint)
        .env("AWS_ALLOW_HTTP", "true");
    let (report, text) = run(command, work.path(), "stac-to-bucket.toml", &sets);
    assert_eq!(items(&report), [2, 0, 2, 0], "a rerun skips: {text}");
}

/// Recipe 3: three adjacent tiles become one COG whose pixels are
/// gdalwarp's mosaic of them.
#[test]
fn recipe_3_tiles_become_one_mosaic_equal_to_gdalwarps() {
    let work = tempfile::tempdir().unwrap();
    let mut tiles: Vec<PathBuf> = common::sample_files(&work.path().join("tiles"), 3, 64)
        .into_iter()
        .filter(|t| t.to_string_lossy().contains("utm18n-"))
        .collect();
    tiles.sort();
    assert_eq!(tiles.len(), 3);
    let out = work.path().join("mosaics");
    let sets = [
        (
            "source.pattern",
            format!("{}/utm18n-*.tif", work.path().join("tiles").display()),
        ),
        ("stages.write.dir", out.display().to_string()),
    ];
    let (report, text) = run(warpline(), work.path(), "mosaic-of-tiles.toml", &sets);
    assert_eq!(items(&report), [1, 1, 0, 0], "{text}");
    assert_eq!(names(&out), ["mosaic.tif"]);
    let ours = out.join("mosaic.tif");
    assert_cog_3857(&ours);
    let theirs = work.path().join("oracle.tif");
    oracle(&tiles, &theirs);
    common::assert_same_raster(&ours, &theirs, "the mosaic");
}

/// Recipe 4: 20 tiles, every one fetched and written, and the server sees
/// them at the recipe's 10 requests a second, from its first request to
/// its last (with no rate set, the four workers ask it hundreds a second
/// on loopback; a server that refuses beyond its limit is fetch's
/// adaptive limits' test, tests/all/faults.rs).
#[test]
fn recipe_4_a_rate_limited_tile_server_is_asked_at_the_set_rate() {
    let served = common::ServedTiles::new(
        5,
        warpline_testkit::Faults {
            latency: Some(Duration::from_millis(5)),
            ..warpline_testkit::Faults::default()
        },
    );
    let work = served.work.path();
    let out = work.join("tiles");
    let sets = [
        ("source.path", served.list.display().to_string()),
        ("stages.write.dir", out.display().to_string()),
    ];
    let (report, text) = run(warpline(), work, "rate-limited-tiles.toml", &sets);
    assert_eq!(items(&report), [20, 20, 0, 0], "{text}");
    assert_eq!(names(&out).len(), 20);
    let limiter = common::entry(&report["limiters"], "name", "per_host");
    assert_eq!(limiter["per_second"], json!(10.0), "{limiter}");
    let rate = served.server.achieved_rate();
    eprintln!("recipe 4: the server saw {rate:.1} requests/s");
    // Burst 2, then one request each 100 ms: 19 gaps in 1.8 s at least,
    // less the first request's lateness on a loaded machine.
    assert!(rate <= 14.0, "the server saw {rate:.1} requests/s");
}

/// The `args` of docs/k8s-indexed-job.yaml's container, as written.
fn job_args() -> Vec<String> {
    let yaml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/k8s-indexed-job.yaml"),
    )
    .unwrap();
    let start = yaml.find("args: [").expect("the Job has args") + "args: ".len();
    let end = start + yaml[start..].find(']').unwrap() + 1;
    serde_json::from_str(&yaml[start..end]).expect("the args are a list of strings")
}

/// Recipe 5: the Job's own args run as its ten pods run them, at once,
/// each with its JOB_COMPLETION_INDEX: the shards are disjoint and
/// together write every output once; a pod run again skips its shard.
#[test]
fn recipe_5_an_indexed_job_splits_the_inputs_over_its_pods() {
    let work = tempfile::tempdir().unwrap();
    let scenes = common::sample_files(&work.path().join("scenes"), 3, 64);
    let list = work.path().join("inputs.txt");
    let lines: Vec<String> = scenes.iter().map(|s| s.display().to_string()).collect();
    std::fs::write(&list, lines.join("\n")).unwrap();
    let out = work.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let args = job_args();
    assert!(
        args.windows(2).any(|w| w == ["--shard", "auto/10"]),
        "{args:?}"
    );
    let pod = |index: usize| {
        let mut command = warpline();
        for var in [
            "SLURM_ARRAY_TASK_ID",
            "SLURM_ARRAY_TASK_MIN",
            "AWS_BATCH_JOB_ARRAY_INDEX",
        ] {
            command.env_remove(var);
        }
        command.env("JOB_COMPLETION_INDEX", index.to_string());
        for arg in &args {
            let arg = arg
                .replace(
                    "/config/scenes.toml",
                    &recipe("indexed-job.toml").display().to_string(),
                )
                .replace("/out/", &format!("{}/", out.display()))
                .replace("$(JOB_COMPLETION_INDEX)", &index.to_string());
            command.arg(arg);
        }
        command
            .arg("--set")
            .arg(format!("source.path={}", list.display()))
            .arg("--set")
            .arg(format!("stages.write.dir={}", out.join("cog").display()));
        command
    };
    let children: Vec<_> = (0..10)
        .map(|i| {
            let mut pod = pod(i);
            pod.stdout(Stdio::piped()).stderr(Stdio::piped());
            pod.spawn().unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let done = child.wait_with_output().unwrap();
        assert_eq!(done.status.code(), Some(0), "pod {i}: {}", said(&done));
    }
    let shards: Vec<[u64; 4]> = (0..10)
        .map(|i| items(&common::read_json(out.join(format!("shard-{i}.json")))))
        .collect();
    let admitted: u64 = shards.iter().map(|s| s[0]).sum();
    assert_eq!(admitted, 12, "each input in exactly one shard: {shards:?}");
    assert!(shards.iter().all(|s| s[0] == s[1]), "{shards:?}");
    let mut want: Vec<String> = scenes
        .iter()
        .map(|s| s.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    want.sort();
    assert_eq!(names(&out.join("cog")), want);
    // A retried pod: its whole shard is there already.
    let (busiest, shard) = shards.iter().enumerate().max_by_key(|(_, s)| s[0]).unwrap();
    let again = pod(busiest).output().unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", said(&again));
    let report = common::read_json(out.join(format!("shard-{busiest}.json")));
    assert_eq!(items(&report), [shard[0], 0, shard[0], 0]);
}
