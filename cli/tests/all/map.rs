//! The report's map (issue 37, item 7): each item's footprint in
//! EPSG:4326 in the report's JSON, as gdalinfo gives the output's extent,
//! and drawn in the HTML report as one shape per item of its outcome's
//! class, split at the antimeridian.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::binary::{said, warpline};
use crate::common;

/// gdalinfo's `wgs84Extent` of `path` as (west, south, east, north): the
/// bounds of its corners in EPSG:4326.
fn gdalinfo_bounds(path: &Path) -> [f64; 4] {
    let out = std::process::Command::new("gdalinfo")
        .arg("-json")
        .arg(path)
        .output()
        .expect("gdalinfo (install gdal-bin)");
    assert!(out.status.success(), "gdalinfo {}", path.display());
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ring = info["wgs84Extent"]["coordinates"][0].as_array().unwrap();
    let (xs, ys): (Vec<f64>, Vec<f64>) = ring
        .iter()
        .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
        .unzip();
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    [min(&xs), min(&ys), max(&xs), max(&ys)]
}

/// A 100 x 100 GeoTIFF in UTM zone 60N whose extent (x 700 to 1,000 km)
/// crosses the antimeridian (about 833 km at its latitudes).
fn across_the_antimeridian(path: &Path) {
    let driver = gdal::DriverManager::get_driver_by_name("GTiff").unwrap();
    let mut ds = driver
        .create_with_band_type::<u8, _>(path, 100, 100, 1)
        .unwrap();
    ds.set_geo_transform(&[700_000.0, 3000.0, 0.0, 500_000.0, 0.0, -3000.0])
        .unwrap();
    ds.set_spatial_ref(&gdal::spatial_ref::SpatialRef::from_epsg(32660).unwrap())
        .unwrap();
    let mut band = ds.rasterband(1).unwrap();
    let mut data = gdal::raster::Buffer::new((100, 100), vec![7u8; 100 * 100]);
    band.write((0, 0), (100, 100), &mut data).unwrap();
}

/// Four inputs, fetch -> decode -> write: a sample tile in UTM 18N and one
/// across the antimeridian are done; one whose output is there already
/// fails at write (`exists = "error"`), drawn where its input is; one that
/// is not a raster fails at decode, with no footprint.
#[test]
fn the_html_report_maps_each_item_by_outcome_and_splits_the_antimeridian() {
    let dir = tempfile::tempdir().unwrap();
    let tiles = common::sample_files(&dir.path().join("in"), 2, 64);
    let utm: Vec<&PathBuf> = tiles
        .iter()
        .filter(|t| t.to_string_lossy().contains("utm18n"))
        .collect();
    let fiji = dir.path().join("in/fiji.tif");
    across_the_antimeridian(&fiji);
    let junk = dir.path().join("in/junk.tif");
    std::fs::write(&junk, "not a tiff").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // utm18n-001's output is there: its write fails.
    std::fs::write(out.join("utm18n-001.tif"), "earlier").unwrap();
    let inputs: Vec<String> = [utm[0], utm[1], &fiji, &junk]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let pipeline = format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "write"]
[source]
kind = "inline"
inputs = {inputs}
[stages.fetch]
kind = "fetch"
[stages.decode]
kind = "decode"
[stages.write]
kind = "write"
dir = {out:?}
exists = "error"
"#,
        inputs = common::toml_list(&inputs),
        out = out.display().to_string(),
    );
    let file = dir.path().join("p.toml");
    std::fs::write(&file, pipeline).unwrap();
    let (report, html) = (dir.path().join("r.json"), dir.path().join("r.html"));
    let run = warpline()
        .arg("run")
        .arg(&file)
        .arg("--report")
        .arg(&report)
        .arg("--report-html")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", said(&run));
    let report = common::read_json(&report);
    let placed = report["footprints"].as_array().unwrap();
    let outcome = |id: &str| common::entry(&report["footprints"], "id", id)["outcome"].clone();
    assert_eq!(placed.len(), 3, "the junk input has none: {placed:?}");
    assert_eq!(outcome("utm18n-000"), "done");
    assert_eq!(outcome("fiji"), "done");
    assert_eq!(outcome("utm18n-001"), "failed");

    // A done item's footprint is its output's, as gdalinfo bounds it
    // (corners; ours follow the edges, which curve in UTM: 0.01 degree).
    let bounds = |id: &str| {
        let f = common::entry(&report["footprints"], "id", id);
        ["west", "south", "east", "north"].map(|k| f[k].as_f64().unwrap())
    };
    let ours = bounds("utm18n-000");
    let theirs = gdalinfo_bounds(&out.join("utm18n-000.tif"));
    for (a, b) in ours.iter().zip(theirs) {
        assert!(
            (a - b).abs() < 0.01,
            "{ours:?} against gdalinfo's {theirs:?}"
        );
    }
    // The failed item is drawn where its input is.
    let input = gdalinfo_bounds(utm[1]);
    for (a, b) in bounds("utm18n-001").iter().zip(input) {
        assert!((a - b).abs() < 0.01, "{a} against {b}");
    }
    // Across the antimeridian: west of it, then east.
    let [west, _, east, _] = bounds("fiji");
    assert!(
        west > 175.0 && west < 180.0 && east > -180.0 && east < -175.0,
        "{west} {east}"
    );

    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(
        page.matches(r#"<path class="fp done""#).count(),
        2,
        "{page}"
    );
    assert_eq!(page.matches(r#"<path class="fp failed""#).count(), 1);
    assert_eq!(page.matches(r#"<path class="fp skipped""#).count(), 0);
    let fiji_shape = page
        .split(r#"<path class="fp "#)
        .find(|s| s.contains("<title>fiji:"))
        .unwrap();
    let d = fiji_shape
        .split("d=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(d.matches('M').count(), 2, "split in two parts: {d}");
    assert!(d.contains("H1800.00") && d.contains("M-1800.00"), "{d}");
    assert!(page.contains("not drawn: 1 of 4 items"), "the junk input");
    assert!(
        !page.contains("http://") && !page.contains("https://") && !page.contains("<script"),
        "fetches nothing"
    );
}

/// The footprint of RGB.byte.tif (UTM zone 18N) as gdalinfo's
/// `wgs84Extent` bounds it, within 0.01 degree (ours follow the edges
/// between the corners).
#[test]
fn the_footprint_of_a_utm_scene_is_gdalinfos_wgs84_extent() {
    let Some(rasters) = common::real_rasters() else {
        return;
    };
    let rgb = rasters
        .iter()
        .find(|p| p.ends_with("RGB.byte.tif"))
        .unwrap();
    let raster = warpline_gdal::Raster::in_memory(gdal::Dataset::open(rgb).unwrap());
    let ours = raster.bounds_4326().expect("a georeferenced raster");
    let theirs = gdalinfo_bounds(rgb);
    let ours = [ours.west, ours.south, ours.east, ours.north];
    for (a, b) in ours.iter().zip(theirs) {
        assert!(
            (a - b).abs() < 0.01,
            "{ours:?} against gdalinfo's {theirs:?}"
        );
    }
    // What decode and write pay per item for it (a figure, not a bound).
    let started = std::time::Instant::now();
    for _ in 0..50 {
        assert!(raster.bounds_4326().is_some());
    }
    eprintln!(
        "RGB.byte.tif: ours {ours:?}, gdalinfo {theirs:?}; {:.2} ms a call",
        started.elapsed().as_secs_f64() * 1000.0 / 50.0
    );
}
