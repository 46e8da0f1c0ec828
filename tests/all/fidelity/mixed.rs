//! Every tile of the raster bench's mixed corpus (benches/raster/mixed.rs:
//! eight kinds cut from the real rasters, the geostationary limb, NaN
//! nodata, an internal mask, UInt16 with alpha) warped by warpline as the
//! bench warps it (EPSG:3857, bilinear), and with near and cubic, equals
//! `gdalwarp` with the same options, pixels and metadata.

use std::path::Path;

use super::{assert_same_metadata, data, s};
use crate::common::{assert_same_raster, gdalwarp, raster_pipeline, run};

#[path = "../../../benches/raster/mixed.rs"]
mod corpus;

/// The file in `dir` named after `input`.
fn output_for(dir: &Path, input: &Path) -> std::path::PathBuf {
    let stem = input.file_stem().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_stem().is_some_and(|f| f.to_string_lossy() == stem))
        .unwrap_or_else(|| panic!("no output for {}", input.display()))
}

/// Tiles of the corpus warpline's loops must take, by method: every one of
/// the 48 with each (every tile has nodata, a mask or an alpha band).
/// Every tile is compared whichever loop took it.
const OURS_AT_LEAST: [(&str, u64); 4] = [
    ("bilinear", 48),
    ("near", 48),
    ("cubic", 48),
    ("average", 48),
];

/// Of `all` tiles, those the accelerator takes on the GDAL this process
/// runs: every one on 3.6 and 3.12, whatever the method; none elsewhere
/// (it is off there).
fn proven_here(all: u64) -> u64 {
    let v = warpline::stages::gdal::versions().gdal;
    match (v.major, v.minor) {
        (3, 6) | (3, 12) => all,
        _ => 0,
    }
}

#[test]
fn every_tile_of_the_mixed_corpus_equals_gdalwarp() {
    if data().is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let kinds = corpus::make(&work.path().join("tiles"));
    let tiles: Vec<&Path> = kinds
        .iter()
        .flat_map(|(_, t)| t.iter().map(|p| p.as_path()))
        .collect();
    assert_eq!(tiles.len(), corpus::KINDS.len() * corpus::PER_KIND);
    let inputs: Vec<String> = tiles.iter().map(|p| s(p)).collect();
    for (method, at_least) in OURS_AT_LEAST {
        let out = work.path().join(method);
        let toml = raster_pipeline(
            &inputs,
            &format!("crs = \"EPSG:3857\"\nresampling = \"{method}\""),
            &format!("dir = {:?}", s(&out)),
            2,
        );
        let report = run(&toml);
        assert_eq!(report.items.done, tiles.len() as u64, "{report}");
        // warpline's own loops took the tiles with nodata, a mask or an
        // alpha band, so the comparison below proves them on those.
        let reproject = crate::common::reproject_stage(&report);
        eprintln!("{method}: reproject paths {:?}", reproject.paths);
        let ours = reproject.paths.get("warpline-kernel").copied().unwrap_or(0);
        let at_least = proven_here(at_least);
        match crate::common::accelerated() {
            true => assert_eq!(ours, at_least, "{method}: {:?}", reproject.paths),
            // Every tile still equals gdalwarp below, through GDAL's loop.
            false => assert_eq!(ours, 0, "{method}: {:?}", reproject.paths),
        }
        let args: Vec<String> = ["-t_srs", "EPSG:3857", "-r", method]
            .iter()
            .map(|a| a.to_string())
            .collect();
        for tile in &tiles {
            let name = tile.file_name().unwrap().to_string_lossy().into_owned();
            let theirs = work.path().join(format!("gdalwarp-{method}-{name}"));
            gdalwarp(&args, tile, &theirs);
            let ours = output_for(&out, tile);
            let what = format!("{method} {name}");
            assert_same_raster(&ours, &theirs, &what);
            assert_same_metadata(&ours, &theirs, &what);
        }
    }
}

/// `kernel = "gdal"` leaves every tile to GDAL's loop, `"auto"` takes
/// warpline's where it is proven: the report says which, and the pixels
/// are the same.
#[test]
fn the_kernel_key_chooses_the_loop_and_not_the_pixels() {
    let Some((data, work)) = super::data_and_work() else {
        return;
    };
    let input = data.join("RGB.byte.tif");
    let mut outputs = Vec::new();
    let auto = match crate::common::accelerated() {
        true => "warpline-kernel",
        false => "memory",
    };
    for (kernel, path) in [("auto", auto), ("gdal", "memory")] {
        let out = work.path().join(kernel);
        let toml = raster_pipeline(
            &[s(&input)],
            &format!("crs = \"EPSG:3857\"\nresampling = \"bilinear\"\nkernel = \"{kernel}\""),
            &format!("dir = {:?}", s(&out)),
            1,
        );
        let report = run(&toml);
        assert_eq!(report.items.done, 1, "{report}");
        let reproject = crate::common::reproject_stage(&report);
        assert_eq!(
            reproject.paths.get(path),
            Some(&1),
            "{kernel}: {:?}",
            reproject.paths
        );
        outputs.push(output_for(&out, &input));
    }
    assert_same_raster(&outputs[0], &outputs[1], "kernel auto against gdal");
}
