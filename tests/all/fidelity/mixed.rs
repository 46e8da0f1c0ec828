//! Every tile of the raster bench's mixed corpus (benches/raster/mixed.rs:
//! eight kinds cut from the real rasters, the geostationary limb, NaN
//! nodata, an internal mask, UInt16 with alpha) warped by warpline as the
//! bench warps it (EPSG:3857, bilinear) equals `gdalwarp` with the same
//! options, pixels and metadata.

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
    let out = work.path().join("out");
    let toml = raster_pipeline(
        &inputs,
        "crs = \"EPSG:3857\"\nresampling = \"bilinear\"",
        &format!("dir = {:?}", s(&out)),
        2,
    );
    let report = run(&toml);
    assert_eq!(report.items.done, tiles.len() as u64, "{report}");
    let args: Vec<String> = ["-t_srs", "EPSG:3857", "-r", "bilinear"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    for tile in tiles {
        let name = tile.file_name().unwrap().to_string_lossy().into_owned();
        let theirs = work.path().join(format!("gdalwarp-{name}"));
        gdalwarp(&args, tile, &theirs);
        let ours = output_for(&out, tile);
        assert_same_raster(&ours, &theirs, &name);
        assert_same_metadata(&ours, &theirs, &name);
    }
}
