//! Bad inputs: each is a clear per-item error naming the input, never a
//! crash, and the good inputs beside them are done.

use crate::common;

use std::path::Path;

use common::{list_pipeline, runtime, tiles, write_url_list};
use gdal::DriverManager;
use warpline_testkit::TileServer;

/// Bytes of a raster written by GDAL with `driver` and `options`.
fn gdal_bytes(
    driver: &str,
    size: (usize, usize),
    georef: bool,
    options: &[&str],
    dir: &Path,
) -> Vec<u8> {
    let mem = DriverManager::get_driver_by_name("MEM").unwrap();
    let mut ds = mem
        .create_with_band_type::<u8, _>("", size.0, size.1, 1)
        .unwrap();
    if georef {
        ds.set_geo_transform(&[500_000.0, 30.0, 0.0, 4_500_000.0, 0.0, -30.0])
            .unwrap();
        ds.set_spatial_ref(&gdal::spatial_ref::SpatialRef::from_epsg(32618).unwrap())
            .unwrap();
    }
    let mut band = ds.rasterband(1).unwrap();
    let data: Vec<u8> = (0..size.0 * size.1).map(|i| (i * 7 % 251) as u8).collect();
    band.write((0, 0), size, &mut gdal::raster::Buffer::new(size, data))
        .unwrap();
    let path = dir.join(format!("made.{}", driver.to_lowercase()));
    let opts = gdal::cpl::CslStringList::from_iter(options.iter().copied());
    ds.create_copy(
        &DriverManager::get_driver_by_name(driver).unwrap(),
        &path,
        &opts,
    )
    .unwrap();
    drop(ds);
    std::fs::read(path).unwrap()
}

/// A tiny GeoTIFF that declares 100000 x 100000 pixels (nothing written).
fn bomb(dir: &Path) -> Vec<u8> {
    let path = dir.join("bomb.tif");
    common::write_bomb(&path);
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.len() < 64 * 1024,
        "the bomb is tiny: {} bytes",
        bytes.len()
    );
    bytes
}

/// Multiplies a classic little-endian TIFF's ImageWidth and ImageLength.
fn lie_about_size(mut tiff: Vec<u8>) -> Vec<u8> {
    assert_eq!(&tiff[..4], b"II*\0", "classic little-endian TIFF");
    let ifd = u32::from_le_bytes(tiff[4..8].try_into().unwrap()) as usize;
    let n = u16::from_le_bytes(tiff[ifd..ifd + 2].try_into().unwrap()) as usize;
    for e in 0..n {
        let at = ifd + 2 + e * 12;
        let tag = u16::from_le_bytes(tiff[at..at + 2].try_into().unwrap());
        let kind = u16::from_le_bytes(tiff[at + 2..at + 4].try_into().unwrap());
        if tag == 256 || tag == 257 {
            if kind == 3 {
                let v = u16::from_le_bytes(tiff[at + 8..at + 10].try_into().unwrap());
                tiff[at + 8..at + 10].copy_from_slice(&(v * 4).to_le_bytes());
            } else {
                let v = u32::from_le_bytes(tiff[at + 8..at + 12].try_into().unwrap());
                tiff[at + 8..at + 12].copy_from_slice(&(v * 4).to_le_bytes());
            }
        }
    }
    tiff
}

#[test]
fn each_bad_input_fails_alone_with_a_clear_error() {
    let work = tempfile::tempdir().unwrap();
    let good = tiles(1, 64).remove(0).1;
    let deflate = gdal_bytes(
        "COG",
        (512, 512),
        true,
        &["COMPRESS=DEFLATE", "BLOCKSIZE=256"],
        work.path(),
    );
    let mut corrupt = deflate.clone();
    let (a, b) = (corrupt.len() * 6 / 10, corrupt.len() * 7 / 10);
    corrupt[a..b].fill(0xA5);
    let striped = gdal_bytes("GTiff", (300, 200), true, &[], work.path());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated.tif", good[..good.len() / 2].to_vec(), ""),
        (
            "json.tif",
            br#"{"message": "Internal error"}"#.to_vec(),
            // GDAL's own reason, with the input's name.
            "not a readable raster for the allowed drivers (GTiff): `json.tif' not recognized",
        ),
        (
            "html.tif",
            b"<!doctype html><html><body>Oops</body></html>".to_vec(),
            "not a readable raster",
        ),
        ("empty.tif", Vec::new(), "empty"),
        (
            "nogeo.png",
            gdal_bytes("PNG", (64, 64), false, &[], work.path()),
            "not a readable raster",
        ),
        ("bomb.tif", bomb(work.path()), "max_pixels"),
        ("lying.tif", lie_about_size(striped), ""),
        ("corrupt.tif", corrupt, ""),
        ("good.tif", good.clone(), "-"),
    ];
    let rt = runtime();
    let report = rt.block_on(async {
        let server = TileServer::start(cases.iter().map(|(n, b, _)| (n.to_string(), b.clone())))
            .await
            .unwrap();
        let list = work.path().join("tiles.txt");
        write_url_list(&server, cases.iter().map(|(n, _, _)| *n), &list);
        let toml = list_pipeline(&list, &work.path().join("out"), "");
        let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
        pipeline.run().await.unwrap()
    });
    let i = report.items;
    assert_eq!((i.total, i.done, i.failed), (9, 1, 8), "{report}");
    for (name, _, words) in &cases {
        let id = name.split('.').next().unwrap();
        if *words == "-" {
            continue;
        }
        let f = report
            .failures
            .iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("{name} did not fail: {report}"));
        assert!(
            f.message.starts_with(&format!("{id}:")),
            "{name}: the message names the input: {}",
            f.message
        );
        assert!(f.message.contains(words), "{name}: {}", f.message);
        assert!(
            !f.message.contains("/vsimem/"),
            "{name}: GDAL's name for the bytes is not the user's: {}",
            f.message
        );
        // The header is read by decode; the pixels by the warp.
        let pixels = ["truncated.tif", "lying.tif", "corrupt.tif"].contains(name);
        let stage = if pixels { "reproject" } else { "decode" };
        assert_eq!(f.stage, stage, "{name}: {f:?}");
    }
}

#[test]
fn a_png_without_georeferencing_says_so_when_png_is_allowed() {
    let work = tempfile::tempdir().unwrap();
    let png = gdal_bytes("PNG", (64, 64), false, &[], work.path());
    let input = work.path().join("plain.png");
    std::fs::write(&input, png).unwrap();
    let toml = common::one_raster_pipeline(
        &input,
        "crs = \"EPSG:3857\"",
        &work.path().join("out"),
        "drivers = [\"GTiff\", \"PNG\"]",
    );
    let report = common::run(&toml);
    assert_eq!(report.items.failed, 1, "{report}");
    assert!(
        report.failures[0].message.contains("no geotransform"),
        "{:?}",
        report.failures[0]
    );
}

#[test]
fn a_source_list_with_blank_and_malformed_lines_fails_only_the_malformed() {
    let work = tempfile::tempdir().unwrap();
    let files = common::sample_files(&work.path().join("in"), 1, 64);
    let list = work.path().join("list.txt");
    let text = format!(
        "# tiles\n\n{}\n   \nftp://example.com/a.tif\n{}\n/vsicurl/http://127.0.0.1:9/x.tif\n\n",
        files[0].display(),
        files[1].display()
    );
    std::fs::write(&list, text).unwrap();
    let toml = list_pipeline(&list, &work.path().join("out"), "");
    let report = common::run(&toml);
    let i = report.items;
    assert_eq!((i.total, i.done, i.failed), (4, 2, 2), "{report}");
    let at = |line: usize| format!("{}:{line}", list.display());
    for f in &report.failures {
        assert_eq!(f.stage, "source");
        assert!(f.id == at(5) || f.id == at(7), "{f:?}");
    }
}

#[test]
fn an_unknown_crs_is_a_config_error_naming_the_key() {
    let toml = common::raster_pipeline(
        &["a.tif".to_owned()],
        "crs = \"EPSG:999999\"",
        "dir = \"out\"",
        1,
    );
    let e = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap_err();
    let p = e
        .problems
        .iter()
        .find(|p| p.path == "stages.reproject.crs")
        .expect("names the key");
    assert!(p.message.contains("EPSG:999999"), "{p}");
}

#[test]
fn an_unknown_creation_option_or_value_is_a_config_error() {
    for (write, key) in [
        (
            "dir = \"out\"\ncreation_options = { COMPRES = \"DEFLATE\" }",
            "stages.write.creation_options.COMPRES",
        ),
        (
            "dir = \"out\"\ncreation_options = { COMPRESS = \"ZIPPY\" }",
            "stages.write.creation_options.COMPRESS",
        ),
        (
            "dir = \"out\"\nformat = \"COG\"\ncreation_options = { TILED = \"YES\" }",
            "stages.write.creation_options.TILED",
        ),
    ] {
        let toml = common::raster_pipeline(&["a.tif".to_owned()], "crs = \"EPSG:3857\"", write, 1);
        let e = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap_err();
        assert!(e.problems.iter().any(|p| p.path == key), "{key} not in {e}");
    }
}

#[test]
fn an_unwritable_output_directory_fails_each_item_clearly() {
    let work = tempfile::tempdir().unwrap();
    let files = common::sample_files(&work.path().join("in"), 1, 64);
    let blocker = work.path().join("not-a-dir");
    std::fs::write(&blocker, "a file").unwrap();
    let toml = common::raster_pipeline(
        &[files[0].display().to_string()],
        "crs = \"EPSG:3857\"",
        &format!("dir = {:?}", blocker.join("out").display().to_string()),
        1,
    );
    let report = common::run(&toml);
    assert_eq!(report.items.failed, 1, "{report}");
    let f = &report.failures[0];
    assert_eq!(f.stage, "write");
    assert!(f.message.contains("cannot create"), "{f:?}");
}
