//! The raster stages end to end with real GDAL, real files and real HTTP
//! over loopback: outputs equal gdalwarp's, whatever the worker count.

use crate::common;

use std::path::{Path, PathBuf};

use common::{assert_same_raster, gdalwarp, hashes, raster_pipeline, run, sample_files};
use warpline_testkit::TileServer;

/// A UTM zone near each shared raster (not its own CRS, so it is a warp).
fn utm_for(path: &Path) -> &'static str {
    match path.file_name().and_then(|n| n.to_str()) {
        Some("RGB.byte.tif") => "EPSG:32617",
        Some("RGBA.uint16.tif") => "EPSG:32613",
        Some("float_raster_with_nodata.tif") => "EPSG:32637",
        Some("shade.tif") => "EPSG:32613",
        _ => "EPSG:32618",
    }
}

const ROBINSON: &str = "+proj=robin +lon_0=0 +x_0=0 +y_0=0 +datum=WGS84 +units=m +no_defs";

/// Warps each file with warpline and with gdalwarp (given only the same
/// CRS and resampling: warpline's defaults must be gdalwarp's) and compares.
fn oracle(
    files: &[PathBuf],
    target: impl Fn(&Path) -> String,
    resampling: &str,
    format: &str,
    work: &Path,
) {
    for file in files {
        let crs = target(file);
        let tag = format!(
            "{}-{}-{resampling}-{format}",
            file.file_stem().unwrap().to_string_lossy(),
            crs.replace([':', ' ', '+', '='], "_")
        );
        let out_dir = work.join(&tag);
        let toml = raster_pipeline(
            &[file.display().to_string()],
            &format!("crs = {crs:?}\nresampling = {resampling:?}"),
            &format!(
                "dir = {:?}\nformat = {format:?}",
                out_dir.display().to_string()
            ),
            2,
        );
        let report = run(&toml);
        assert_eq!(report.items.done, 1, "{tag}: {report}");
        let ours = out_dir.join(format!(
            "{}.tif",
            file.file_stem().unwrap().to_string_lossy()
        ));
        let theirs = work.join(format!("{tag}-gdalwarp.tif"));
        gdalwarp(
            &["-t_srs".into(), crs.clone(), "-r".into(), resampling.into()],
            file,
            &theirs,
        );
        assert_same_raster(&ours, &theirs, &tag);
    }
}

/// The target CRS for a file.
type Target = fn(&Path) -> String;

/// EPSG:3857, EPSG:4326, a UTM zone, and a PROJ string.
fn targets() -> [Target; 4] {
    [
        |_| "EPSG:3857".to_owned(),
        |_| "EPSG:4326".to_owned(),
        |p| utm_for(p).to_owned(),
        |_| ROBINSON.to_owned(),
    ]
}

/// For every target: GTiff outputs with each of `resamplings`, and a COG
/// with `cog_resampling`, each equal to gdalwarp's.
fn every_target(files: &[PathBuf], resamplings: &[&str], cog_resampling: &str, work: &Path) {
    for target in targets() {
        for resampling in resamplings {
            oracle(files, target, resampling, "GTiff", work);
        }
        oracle(files, target, cog_resampling, "COG", work);
    }
}

#[test]
fn outputs_equal_gdalwarp_on_the_shared_real_rasters() {
    let Some(files) = common::real_rasters() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    every_target(
        &files,
        &["near", "bilinear", "cubic", "average"],
        "bilinear",
        work.path(),
    );
}

#[test]
fn outputs_equal_gdalwarp_on_generated_tiles() {
    let work = tempfile::tempdir().unwrap();
    let files = sample_files(&work.path().join("in"), 1, 300);
    let resamplings = ["near", "bilinear", "cubic", "average", "lanczos", "mode"];
    every_target(&files, &resamplings, "cubic", work.path());
}

#[test]
fn explicit_resolution_extent_and_type_match_gdalwarp() {
    let work = tempfile::tempdir().unwrap();
    let files = sample_files(&work.path().join("in"), 1, 256);
    let file = &files[0]; // utm18n-000.tif
    let out_dir = work.path().join("out");
    let toml = raster_pipeline(
        &[file.display().to_string()],
        r#"crs = "EPSG:3857"
resampling = "bilinear"
resolution = 40
tap = true
dtype = "UInt16"
dst_nodata = 65535
error_threshold = 0
warp_memory = "16MiB""#,
        &format!("dir = {:?}", out_dir.display().to_string()),
        1,
    );
    let report = run(&toml);
    assert_eq!(report.items.done, 1, "{report}");
    let theirs = work.path().join("gdalwarp.tif");
    let args: Vec<String> = [
        "-t_srs",
        "EPSG:3857",
        "-r",
        "bilinear",
        "-tr",
        "40",
        "40",
        "-tap",
        "-ot",
        "UInt16",
        "-dstnodata",
        "65535",
        "-et",
        "0",
        "-wm",
        "16777216",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    gdalwarp(&args, file, &theirs);
    assert_same_raster(&out_dir.join("utm18n-000.tif"), &theirs, "explicit options");
}

#[test]
fn one_worker_and_several_write_the_same_bytes() {
    let work = tempfile::tempdir().unwrap();
    let files: Vec<String> = sample_files(&work.path().join("in"), 3, 200)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut runs = Vec::new();
    for workers in [1, 3] {
        let out = work.path().join(format!("out-{workers}"));
        let toml = raster_pipeline(
            &files,
            "crs = \"EPSG:4326\"\nresampling = \"cubic\"",
            &format!(
                "dir = {:?}\nformat = \"COG\"\ncreation_options = {{ COMPRESS = \"DEFLATE\" }}",
                out.display().to_string()
            ),
            workers,
        );
        let report = run(&toml);
        assert_eq!(report.items.done, files.len() as u64, "{report}");
        // The rasters: their STAC items differ in `created` (see
        // cli/tests/all/same_bytes.rs for those).
        let rasters: std::collections::BTreeMap<String, String> = hashes(&out)
            .into_iter()
            .filter(|(name, _)| name.ends_with(".tif"))
            .collect();
        runs.push(rasters);
    }
    assert_eq!(runs[0].len(), files.len());
    assert_eq!(runs[0], runs[1], "outputs differ between 1 and 3 workers");
}

#[test]
fn end_to_end_over_loopback_http() {
    let work = tempfile::tempdir().unwrap();
    let tiles = warpline::stages::samples::sample_tiles(2, 256).unwrap();
    let rt = common::runtime();
    let mut served: Vec<(String, Vec<u8>)> = tiles
        .iter()
        .map(|t| (t.name.clone(), t.bytes.clone()))
        .collect();
    served.push(("json.tif".into(), br#"{"error": "not a tile"}"#.to_vec()));
    let (report, urls, requests) = rt.block_on(async {
        let server = TileServer::start(served).await.unwrap();
        let mut urls: Vec<String> = tiles.iter().map(|t| server.url(&t.name)).collect();
        urls.push(server.url("json.tif"));
        urls.push(server.url("missing.tif"));
        let toml = raster_pipeline(
            &urls,
            "crs = \"EPSG:3857\"\nresampling = \"bilinear\"",
            &format!("dir = {:?}", work.path().join("out").display().to_string()),
            2,
        );
        let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
        let report = pipeline.run().await.unwrap();
        (report, urls, server.requests())
    });
    let n = tiles.len() as u64;
    assert_eq!(report.items.total, n + 2, "{report}");
    assert_eq!(report.items.done, n, "{report}");
    assert_eq!(report.items.failed, 2, "{report}");
    let json = report.failures.iter().find(|f| f.id == "json").unwrap();
    assert_eq!(json.stage, "decode");
    assert!(
        json.message.contains("not a readable raster"),
        "{}",
        json.message
    );
    let missing = report.failures.iter().find(|f| f.id == "missing").unwrap();
    assert_eq!(
        (missing.stage.as_str(), missing.status),
        ("fetch", Some(404))
    );
    assert!(
        missing.message.contains(&urls[urls.len() - 1]),
        "{}",
        missing.message
    );
    assert_eq!(missing.attempts, 1, "a 404 is not retried");
    assert_eq!(requests, n + 2, "one request per input");
    // Every output opens in GDAL, in the target CRS, and equals gdalwarp
    // run on the same bytes.
    for t in &tiles {
        let src = work.path().join(&t.name);
        std::fs::write(&src, &t.bytes).unwrap();
        let theirs = work.path().join(format!("gdalwarp-{}", t.name));
        gdalwarp(
            &[
                "-t_srs".into(),
                "EPSG:3857".into(),
                "-r".into(),
                "bilinear".into(),
            ],
            &src,
            &theirs,
        );
        assert_same_raster(&work.path().join("out").join(&t.name), &theirs, &t.name);
    }
}

#[test]
#[should_panic(expected = "differing pixels")]
fn the_oracle_notices_a_different_resampling() {
    // Guards the comparison itself: warpline with cubic, gdalwarp with near.
    let work = tempfile::tempdir().unwrap();
    let files = sample_files(&work.path().join("in"), 1, 200);
    let out_dir = work.path().join("out");
    let toml = raster_pipeline(
        &[files[0].display().to_string()],
        "crs = \"EPSG:3857\"\nresampling = \"cubic\"",
        &format!("dir = {:?}", out_dir.display().to_string()),
        1,
    );
    assert_eq!(run(&toml).items.done, 1);
    let theirs = work.path().join("near.tif");
    gdalwarp(
        &[
            "-t_srs".into(),
            "EPSG:3857".into(),
            "-r".into(),
            "near".into(),
        ],
        &files[0],
        &theirs,
    );
    assert_same_raster(&out_dir.join("utm18n-000.tif"), &theirs, "cubic vs near");
}

/// Reproject charges `memory` for the warp's output before it warps, sized
/// as gdalwarp sizes it (GDAL's suggested warp output with the same
/// transformer options): the charge must be for exactly the output the warp
/// makes, whatever the CRSs, the data type and the bands.
#[test]
fn the_memory_charged_for_a_warp_matches_the_output_it_makes() {
    let work = tempfile::tempdir().unwrap();
    let mut files = sample_files(&work.path().join("in"), 1, 256);
    // NAD27: a datum whose operation to WGS 84 PROJ picks by area.
    let nad27 = work.path().join("in/nad27.tif");
    let status = std::process::Command::new("gdal_translate")
        .args(["-q", "-a_srs", "EPSG:26718"])
        .arg(
            files
                .iter()
                .find(|f| f.to_string_lossy().contains("utm18n"))
                .unwrap(),
        )
        .arg(&nad27)
        .status()
        .unwrap();
    assert!(status.success(), "gdal_translate failed");
    files.push(nad27);
    files.extend(common::real_rasters().unwrap_or_default());
    let mut checked = 0;
    for target in targets() {
        for file in &files {
            let crs = target(file);
            // warp_memory is larger than any of these tiles, so the charge
            // is the input's bytes + its decoded pixels + 2 x the output.
            let toml = raster_pipeline(
                &[file.display().to_string()],
                &format!("crs = {crs:?}\nwarp_memory = \"64MiB\""),
                &format!("dir = {:?}", work.path().join("out").display().to_string()),
                1,
            );
            let p = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
            let stage =
                |name: &str| match &p.stages().iter().find(|s| s.name == name).unwrap().handler {
                    warpline::Handler::Blocking(h) => h.clone(),
                    warpline::Handler::Async(_) => unreachable!("{name} is blocking"),
                };
            let (decode, reproject) = (stage("decode"), stage("reproject"));
            let mut item = warpline::Item::new(warpline::Input {
                id: "t".into(),
                source: file.display().to_string(),
                size_hint: None,
                meta: Default::default(),
            });
            item.set_payload(warpline::stages::fetch::Fetched::new(
                std::fs::read(file).unwrap(),
            ));
            decode.demand(&mut item).unwrap();
            decode.process(&mut item).unwrap();
            let decoded = item.payload::<warpline::stages::gdal::Raster>().unwrap();
            let (input, files) = (decoded.pixel_bytes(), decoded.file_bytes());
            let charged = reproject.demand(&mut item).unwrap();
            reproject.process(&mut item).unwrap();
            let out = item.payload::<warpline::stages::gdal::Raster>().unwrap();
            let (w, h) = out.size();
            let actual = out.pixel_bytes();
            let estimated = (charged - files - input) / 2;
            assert_eq!(
                estimated, actual,
                "{} -> {crs}: charged for {estimated} output bytes, the warp made {actual} ({w} x {h})",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} warps checked");
}
