//! Outputs larger than the memory budget (issues 18 and 22): warped in
//! chunks to disk, not refused, with gdalwarp's pixels and a peak memory
//! bounded by the budget; and the charge of a mosaic warped in memory
//! covers what its output really takes.
//!
//! The run whose memory is measured goes in a process of its own
//! ([`child::run_alone`]), so its peak resident memory is its own, not
//! that of every test of this binary.

use std::path::Path;
use std::process::Command;

use crate::child;
use crate::common;
use crate::common::{gdalwarp_many, raster_pipeline, real_rasters, toml_list};
use gdal::Dataset;

/// Three overlapping pieces of RGB.byte.tif (the mosaic oracle's).
fn pieces(rgb: &Path, dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (name, win) in [
        ("a.tif", ["0", "0", "400", "400"]),
        ("b.tif", ["350", "0", "441", "400"]),
        ("c.tif", ["200", "300", "400", "418"]),
    ] {
        let piece = dir.join(name).to_string_lossy().into_owned();
        let status = Command::new("gdal_translate")
            .args(["-q", "-srcwin"])
            .args(win)
            .arg(rgb)
            .arg(&piece)
            .status()
            .expect("gdal_translate (install gdal-bin)");
        assert!(status.success());
        out.push(piece);
    }
    out
}

/// A mosaic pipeline over `inputs` with a byte budget of `budget`.
fn mosaic(inputs: &[String], budget: &str, reproject: &str, out: &Path) -> String {
    raster_pipeline(
        &[],
        reproject,
        &format!("dir = {:?}", out.to_string_lossy()),
        1,
    )
    .replace(
        "kind = \"inline\"\ninputs = []",
        &format!(
            "kind = \"mosaic\"\nid = \"big\"\ninputs = {}",
            toml_list(inputs)
        ),
    )
    .replace("budget = \"512MiB\"", &format!("budget = {budget:?}"))
}

/// Size, geotransform, CRS, types, nodata, colour interpretation, then
/// every pixel, 256 lines at a time (the rasters here are too large to
/// compare whole).
fn assert_same_in_strips(ours: &Path, theirs: &Path) {
    let (a, b) = (Dataset::open(ours).unwrap(), Dataset::open(theirs).unwrap());
    assert_eq!(a.raster_size(), b.raster_size(), "size");
    assert_eq!(a.raster_count(), b.raster_count(), "bands");
    assert_eq!(a.geo_transform().unwrap(), b.geo_transform().unwrap());
    assert_eq!(a.projection(), b.projection(), "CRS");
    let (w, h) = a.raster_size();
    for i in 1..=a.raster_count() {
        let (ba, bb) = (a.rasterband(i).unwrap(), b.rasterband(i).unwrap());
        assert_eq!(ba.band_type(), bb.band_type(), "band {i} type");
        assert_eq!(ba.no_data_value(), bb.no_data_value(), "band {i} nodata");
        assert_eq!(ba.color_interpretation(), bb.color_interpretation());
        for y in (0..h).step_by(256) {
            let rows = 256.min(h - y);
            let read = |band: &gdal::raster::RasterBand| {
                band.read_as::<u8>((0, y as isize), (w, rows), (w, rows), None)
                    .unwrap()
            };
            let (x, z) = (read(&ba), read(&bb));
            let differing = x
                .data()
                .iter()
                .zip(z.data())
                .filter(|(p, q)| p != q)
                .count();
            assert_eq!(differing, 0, "band {i}, lines {y}..{}", y + rows);
        }
    }
}

/// The most the `memory` budget had in use.
fn memory_peak(report: &serde_json::Value) -> u64 {
    let limiters = report["limiters"].as_array().unwrap();
    let memory = limiters.iter().find(|l| l["name"] == "memory").unwrap();
    memory["peak_in_use"].as_u64().unwrap()
}

/// The bytes of the output's pixels.
fn pixel_bytes(path: &Path) -> u64 {
    let ds = Dataset::open(path).unwrap();
    let (w, h) = ds.raster_size();
    (w * h * ds.raster_count()) as u64
}

#[test]
fn a_mosaic_larger_than_the_budget_is_warped_to_disk_with_gdalwarps_pixels() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let inputs = pieces(&data[0], work.path());
    let out = work.path().join("out");
    let scratch = work.path().join("scratch");
    // 6,000 x 5,500 pixels of 3 bytes: about 180 MiB, with a budget of 32.
    let reproject = format!(
        "crs = \"EPSG:3857\"\nresolution = 33\nwarp_memory = \"16MiB\"\nscratch = {:?}",
        scratch.to_string_lossy()
    );
    let toml = mosaic(&inputs, "32MiB", &reproject, &out);
    let report = child::run_alone(&toml, work.path(), &[]);
    assert_eq!(report["items"]["done"], 1, "{report:#}");
    // The report says which way the item went.
    let reproject = common::entry(&report["stages"], "kind", "reproject");
    assert_eq!(
        reproject["paths"],
        serde_json::json!({ "disk": 1 }),
        "{report:#}"
    );
    let ours = out.join("big.tif");
    let theirs = work.path().join("theirs.tif");
    let args = ["-t_srs", "EPSG:3857", "-tr", "33", "33", "-wm", "16777216"].map(String::from);
    gdalwarp_many(&args, &inputs, &theirs);
    let size = pixel_bytes(&theirs);
    assert!(
        size > 150 << 20,
        "the output is {size} bytes, not over 150 MiB"
    );
    assert_same_in_strips(&ours, &theirs);
    // The charge stayed within the budget, and so did the process: GDAL
    // and the process take 70-75 MiB before any tile (see `warpline
    // plan`), GDAL's block cache 8 MiB at this budget; the output alone
    // is larger than all of it.
    let peak = memory_peak(&report);
    assert!(peak <= 32 << 20, "charged {peak}");
    let rss = report["peak_rss_bytes"].as_u64().unwrap();
    eprintln!(
        "output {} MiB, charged {} KiB, peak RSS {} MiB",
        size >> 20,
        peak >> 10,
        rss >> 20
    );
    assert!(rss < (96 + 32 + 8 + 8) << 20, "peak RSS {} MiB", rss >> 20);
    assert!(rss < size);
    // Nothing is left in the scratch directory nor beside the output.
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

#[test]
fn an_output_over_the_budget_warped_in_memory_meets_the_oversize_policy() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let inputs = pieces(&data[0], work.path());
    let out = work.path().join("out");
    let reproject = "crs = \"EPSG:3857\"\nresolution = 33\nwarp_to = \"memory\"";
    let report = common::run(&mosaic(&inputs, "32MiB", reproject, &out));
    assert_eq!(report.items.failed, 1, "{report}");
    let failure = &report.failures[0];
    assert_eq!(failure.stage, "reproject");
    assert!(
        failure.message.contains("whole budget") && failure.message.contains("oversize"),
        "{}",
        failure.message
    );
    // On disk, chunk buffers of warp_memory (64 MiB by default) do not fit
    // a 32 MiB budget either: the error says what to lower.
    let reproject = "crs = \"EPSG:3857\"\nresolution = 33";
    let report = common::run(&mosaic(&inputs, "32MiB", reproject, &out));
    assert_eq!(report.items.failed, 1, "{report}");
    let message = &report.failures[0].message;
    assert!(
        message.contains("even warped to disk") && message.contains("warp_memory"),
        "{message}"
    );
}

#[test]
fn outputs_warped_to_disk_are_copied_to_their_format_with_gdalwarps_pixels() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let rgb = data[0].to_string_lossy().into_owned();
    let scratch = work.path().join("scratch");
    let reproject = format!(
        "crs = \"EPSG:3857\"\nresampling = \"bilinear\"\nwarp_to = \"disk\"\nscratch = {:?}",
        scratch.to_string_lossy()
    );
    let theirs = work.path().join("theirs.tif");
    let args = ["-t_srs", "EPSG:3857", "-r", "bilinear"].map(String::from);
    gdalwarp_many(&args, &[&rgb], &theirs);
    // Moved into place (GTiff, no creation options), copied with creation
    // options, and copied to a COG (whose full resolution is the warp's).
    for (i, write) in [
        "",
        "creation_options = { COMPRESS = \"DEFLATE\", TILED = \"YES\" }",
        "format = \"COG\"",
    ]
    .into_iter()
    .enumerate()
    {
        let out = work.path().join(format!("out{i}"));
        let write = format!("dir = {:?}\n{write}", out.to_string_lossy());
        let report = common::run(&raster_pipeline(
            std::slice::from_ref(&rgb),
            &reproject,
            &write,
            1,
        ));
        assert_eq!(report.items.done, 1, "{report}");
        let reproject = crate::common::reproject_stage(&report);
        assert_eq!(reproject.paths.get("disk"), Some(&1), "{report}");
        assert!(!reproject.paths.contains_key("memory"), "{report}");
        common::assert_same_raster(&out.join("RGB.byte.tif"), &theirs, write.as_str());
        // The output (and, for the COG, its STAC item and the collection).
        let rasters = std::fs::read_dir(&out)
            .unwrap()
            .filter(|e| {
                !e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".json")
            })
            .count();
        assert_eq!(rasters, 1, "{write}");
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0, "{write}");
    }
}

#[test]
fn a_mosaics_charge_covers_the_output_its_warp_allocates() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let mut inputs = pieces(&data[0], work.path());
    // One piece at a coarser resolution and one finer: the output's grid
    // is the union of the extents at the finest resolution.
    for (piece, res) in [(0, "600"), (2, "150")] {
        let coarse = work.path().join(format!("res{res}.tif"));
        let status = Command::new("gdalwarp")
            .args(["-q", "-tr", res, res, &inputs[piece]])
            .arg(&coarse)
            .status()
            .unwrap();
        assert!(status.success());
        inputs[piece] = coarse.to_string_lossy().into_owned();
    }
    let out = work.path().join("out");
    let toml = mosaic(&inputs, "512MiB", "crs = \"EPSG:3857\"", &out);
    let report = common::run(&toml);
    assert_eq!(report.items.done, 1, "{report}");
    let files: u64 = inputs
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let output = pixel_bytes(&out.join("big.tif"));
    let json = serde_json::to_value(&report).unwrap();
    let charged = memory_peak(&json);
    assert!(
        charged >= files + output,
        "charged {charged} bytes; the inputs are {files} and the warp's MEM output {output}"
    );
    // And not wildly more: the charge adds the chunk buffers (at most the
    // inputs' pixels and the output), so under 2 x output + inputs + 1 MiB.
    assert!(
        charged <= 2 * output + 2 * files + (1 << 20),
        "charged {charged}"
    );
}
