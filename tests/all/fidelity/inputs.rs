//! Inputs placed on the map by a world file, GCPs or an overridden CRS, and
//! inputs read by their names: an SRTM tile in a zip, a gzipped GeoTIFF.

use std::path::Path;
use std::process::Command;

use super::{data_and_work, gdal, s, same_as_gdalwarp};
use crate::common::{assert_same_raster, gdalwarp, raster_pipeline, run};

#[test]
fn a_world_file_places_the_raster_as_gdalwarp_does() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let rgb = s(&data.join("RGB.byte.tif"));
    // Georeferenced only by a world file (and its CRS in .aux.xml).
    let wf = work.path().join("wf.tif");
    let out = Command::new("gdal_translate")
        .args([
            "-q",
            "-co",
            "PROFILE=BASELINE",
            "-co",
            "TFW=YES",
            &rgb,
            &s(&wf),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(work.path().join("wf.tfw").exists());
    same_as_gdalwarp(
        work.path(),
        "wf",
        &s(&wf),
        "",
        "crs = \"EPSG:3857\"",
        &["-t_srs", "EPSG:3857"],
    );
}

#[test]
fn gcps_place_the_raster_as_gdalwarp_does() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let rgb = s(&data.join("RGB.byte.tif"));
    // Georeferenced by GCPs only.
    let gcp = work.path().join("gcp.tif");
    gdal(
        "gdal_translate",
        &[
            "-q",
            "-a_srs",
            "EPSG:32618",
            "-gcp",
            "0",
            "0",
            "101985",
            "2826915",
            "-gcp",
            "791",
            "0",
            "339315",
            "2826915",
            "-gcp",
            "0",
            "718",
            "101985",
            "2611485",
            "-gcp",
            "791",
            "718",
            "339315",
            "2611485",
            "-gcp",
            "400",
            "300",
            "222000",
            "2737000",
            &rgb,
            &s(&gcp),
        ],
    );
    same_as_gdalwarp(
        work.path(),
        "gcp",
        &s(&gcp),
        "",
        "crs = \"EPSG:4326\"",
        &["-t_srs", "EPSG:4326"],
    );
    same_as_gdalwarp(
        work.path(),
        "tps",
        &s(&gcp),
        "",
        "crs = \"EPSG:4326\"\ntransformer = \"tps\"",
        &["-t_srs", "EPSG:4326", "-tps"],
    );
    same_as_gdalwarp(
        work.path(),
        "refine",
        &s(&gcp),
        "",
        "crs = \"EPSG:4326\"\ntransformer = \"polynomial\"\norder = 1\nrefine_gcps = [50, 4]",
        &[
            "-t_srs",
            "EPSG:4326",
            "-order",
            "1",
            "-refine_gcps",
            "50",
            "4",
        ],
    );
}

#[test]
fn a_source_crs_override_places_the_raster_as_gdalwarp_s_srs_does() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let rgb = s(&data.join("RGB.byte.tif"));
    same_as_gdalwarp(
        work.path(),
        "s_srs",
        &rgb,
        "",
        "crs = \"EPSG:3857\"\nsrc_crs = \"EPSG:32617\"",
        &["-t_srs", "EPSG:3857", "-s_srs", "EPSG:32617"],
    );
}

#[test]
fn an_srtm_tile_in_a_zip_is_read_by_its_name() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let zip = work.path().join("N45E006.hgt.zip");
    srtm_tile(
        &data.join("shade.tif"),
        6,
        &format!("/vsizip/{}/N45E006.hgt", s(&zip)),
    );
    let srtm = "drivers = [\"SRTMHGT\"]";
    same_as_gdalwarp(
        work.path(),
        "hgt",
        &s(&zip),
        srtm,
        "crs = \"EPSG:3857\"",
        &["-t_srs", "EPSG:3857"],
    );
}

#[test]
fn a_named_member_of_a_zip_is_read_and_a_zip_of_two_rasters_says_how_to_name_one() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let srtm = "drivers = [\"SRTMHGT\"]";
    // Two rasters in one zip: the member is named.
    let two = work.path().join("two.zip");
    for (name, east) in [("N45E006.hgt", 6), ("N45E007.hgt", 7)] {
        srtm_tile(
            &data.join("shade.tif"),
            east,
            &format!("/vsizip/{}/{name}", s(&two)),
        );
    }
    let member = format!("{}!/N45E007.hgt", s(&two));
    let out_dir = work.path().join("member");
    let toml = raster_pipeline(
        &[member, s(&two)],
        "crs = \"EPSG:3857\"",
        &format!("dir = {:?}", s(&out_dir)),
        1,
    )
    .replace(
        "[stages.decode]\nkind = \"decode\"",
        &format!("[stages.decode]\nkind = \"decode\"\n{srtm}"),
    );
    let report = run(&toml);
    assert_eq!((report.items.done, report.items.failed), (1, 1), "{report}");
    let f = &report.failures[0];
    assert!(
        f.message.contains("holds 2 files") && f.message.contains("!/"),
        "an archive of two rasters says how to name one: {}",
        f.message
    );
    let member = format!("/vsizip/{}/N45E007.hgt", s(&two));
    the_only_output_equals_gdalwarp_of(&out_dir, &member, "zip member");
}

#[test]
fn a_gzipped_geotiff_is_read_as_gdal_reads_it() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    // A gzipped GeoTIFF.
    let gz = work.path().join("RGB.byte.tif.gz");
    let status = Command::new("gzip")
        .arg("-c")
        .arg(data.join("RGB.byte.tif"))
        .stdout(std::fs::File::create(&gz).unwrap())
        .status()
        .expect("gzip");
    assert!(status.success());
    let out_dir = work.path().join("gz");
    let toml = raster_pipeline(
        &[s(&gz)],
        "crs = \"EPSG:3857\"",
        &format!("dir = {:?}", s(&out_dir)),
        1,
    );
    assert_eq!(run(&toml).items.done, 1);
    the_only_output_equals_gdalwarp_of(&out_dir, &format!("/vsigzip/{}", s(&gz)), "gzip");
}

/// An SRTM 1201 x 1201 Int16 tile of the degree N45 E`east` at `dest`
/// (a `/vsizip/` path: GDAL writes the zip), its heights from `src`.
fn srtm_tile(src: &Path, east: u32, dest: &str) {
    let half = 0.5 / 1200.0;
    let (w, e) = (f64::from(east) - half, f64::from(east) + 1.0 + half);
    let (n, s_) = (46.0 + half, 45.0 - half);
    let bounds: Vec<String> = [w, n, e, s_].iter().map(|v| format!("{v:.13}")).collect();
    let mut args = vec![
        "-q",
        "-of",
        "SRTMHGT",
        "-ot",
        "Int16",
        "-a_srs",
        "EPSG:4326",
    ];
    args.push("-a_ullr");
    args.extend(bounds.iter().map(String::as_str));
    let src = s(src);
    args.extend(["-outsize", "1201", "1201", &src, dest]);
    gdal("gdal_translate", &args);
}

/// The one file in `out_dir` equals `gdalwarp -t_srs EPSG:3857` of the
/// GDAL path `source` (a `/vsizip/` or `/vsigzip/` path).
fn the_only_output_equals_gdalwarp_of(out_dir: &Path, source: &str, what: &str) {
    let theirs = out_dir.with_extension("gdalwarp.tif");
    gdalwarp(
        &["-t_srs".into(), "EPSG:3857".into()],
        Path::new(source),
        &theirs,
    );
    let ours = std::fs::read_dir(out_dir).unwrap().next().unwrap().unwrap();
    assert_same_raster(&ours.path(), &theirs, what);
}

/// The shared rasters not in the plain oracle: a whole-world raster (the
/// antimeridian and the poles), an ESRI WKT CRS, a band-interleaved 3857
/// raster, and, with no CRS of their own (so `assume_crs`, as gdalwarp's
/// `-s_srs`), a rotated geotransform and a south-up Float32 with NaN nodata.
#[test]
fn odd_crss_and_geotransforms_are_warped_as_gdalwarp_warps_them() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let cases: [(&str, &str, &str, &str); 5] = [
        ("world.rgb.tif", "", "EPSG:3857", "bilinear"),
        ("test_esri_wkt.tif", "", "EPSG:4326", "near"),
        ("rgb1_fake_nir_epsg3857.tif", "", "EPSG:32618", "cubic"),
        ("rotated.tif", "EPSG:32618", "EPSG:32618", "near"),
        ("float_nan.tif", "EPSG:4326", "EPSG:3857", "bilinear"),
    ];
    for (file, assumed, crs, resampling) in cases {
        let decode = if assumed.is_empty() {
            String::new()
        } else {
            format!("assume_crs = {assumed:?}")
        };
        let mut args = vec!["-t_srs", crs, "-r", resampling];
        if !assumed.is_empty() {
            args.extend(["-s_srs", assumed]);
        }
        same_as_gdalwarp(
            work.path(),
            file.trim_end_matches(".tif"),
            &s(&data.join(file)),
            &decode,
            &format!("crs = {crs:?}\nresampling = {resampling:?}"),
            &args,
        );
    }
}
