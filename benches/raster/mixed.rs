//! The mixed corpus (issue 23): 512 px tiles of eight kinds, each cut with
//! GDAL's own tools (`gdal_translate`, `gdalwarp`) from the shared real
//! rasters (`WARPLINE_TEST_DATA`, else `../shared/data/real`), six distinct
//! tiles per kind:
//!
//! | kind | made from | what it is |
//! |---|---|---|
//! | `rgb-utm` | RGB.byte.tif | 3-band Byte, UTM 18N, nodata 0 (Landsat) |
//! | `dem-4326` | RGB.byte.tif band 2, x10 | Int16, EPSG:4326, nodata -32768 |
//! | `f32-utm` | RGB.byte.tif band 1 | Float32, UTM 18N, nodata NaN |
//! | `geos` | world.rgb.tif | 3-band Byte, GOES-16's full disk (geostationary CRS), space nodata 0 |
//! | `aerial-3857` | rgb1_fake_nir_epsg3857.tif | Byte, EPSG:3857, nodata 0 |
//! | `shade-3857` | shade.tif | Byte hillshade, EPSG:3857, nodata 255 (mostly nodata) |
//! | `rgba-u16` | RGBA.uint16.tif, 400 px windows scaled to 512 | 4-band UInt16 with alpha, UTM 12N |
//! | `masked` | RGB2.byte.tif + .msk | 3-band Byte, UTM 18N, internal per-dataset mask |
//!
//! The bench's `mixed` scenario serves them in turn; the fidelity tests
//! (tests/all/fidelity/mixed.rs) warp every one with warpline and gdalwarp.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The kinds of tile, in the order they are served.
pub const KINDS: [&str; 8] = [
    "rgb-utm",
    "dem-4326",
    "f32-utm",
    "geos",
    "aerial-3857",
    "shade-3857",
    "rgba-u16",
    "masked",
];

/// Distinct tiles per kind.
pub const PER_KIND: usize = 6;

/// The tile size in pixels.
pub const SIZE: usize = 512;

/// GOES-16's geostationary CRS (GOES-East, 75.2 W).
pub const GEOS: &str = "+proj=geos +h=35786023 +lon_0=-75 +sweep=x +ellps=GRS80 +units=m +no_defs";

/// The folder of real rasters: `WARPLINE_TEST_DATA` (which must then
/// exist), else `../shared/data/real` beside the workspace. Panics with
/// the folder's name when it is missing.
pub fn data_dir() -> PathBuf {
    let dir = match std::env::var_os("WARPLINE_TEST_DATA") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/real"),
    };
    assert!(
        dir.join("RGB.byte.tif").is_file(),
        "the mixed corpus needs the real rasters: {} has no RGB.byte.tif (set WARPLINE_TEST_DATA)",
        dir.display()
    );
    dir
}

/// Runs a GDAL command line tool, panicking with its stderr on failure.
fn gdal(program: &str, args: &[&str]) {
    let quiet: Vec<&str> = std::iter::once("-q").chain(args.iter().copied()).collect();
    warpline_testkit::gdal_tool(
        program,
        &quiet,
        &[
            ("GDAL_PAM_ENABLED", "NO"),
            ("GDAL_TIFF_INTERNAL_MASK", "YES"),
        ],
    );
}

/// A raster's size in pixels, lines.
fn size_of(path: &Path) -> (usize, usize) {
    gdal::Dataset::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .raster_size()
}

/// Six windows of `win` px over a `w` x `h` raster: three across, two down.
fn windows(w: usize, h: usize, win: usize) -> Vec<(usize, usize)> {
    assert!(w >= win && h >= win, "a {w} x {h} raster is under {win} px");
    let xs = [0, (w - win) / 2, w - win];
    let ys = [0, h - win];
    ys.iter()
        .flat_map(|y| xs.iter().map(move |x| (*x, *y)))
        .collect()
}

/// Cuts the windows of one kind out of `full` into `dir`, `win` px each,
/// scaled to [`SIZE`] (bilinear) when `win` is smaller.
fn cut(full: &Path, kind: &str, win: usize, dir: &Path) -> Vec<PathBuf> {
    let (w, h) = size_of(full);
    let full = full.to_str().unwrap();
    windows(w, h, win)
        .into_iter()
        .enumerate()
        .map(|(i, (x, y))| {
            let out = dir.join(format!("{kind}-{i}.tif"));
            let (x, y, win, size) = (
                x.to_string(),
                y.to_string(),
                win.to_string(),
                SIZE.to_string(),
            );
            let mut args = vec!["-srcwin", &x, &y, &win, &win];
            if win != size {
                args.extend(["-outsize", &size, &size, "-r", "bilinear"]);
            }
            args.extend([full, out.to_str().unwrap()]);
            gdal("gdal_translate", &args);
            out
        })
        .collect()
}

/// The raster a kind's tiles are cut from (made in `dir` when derived),
/// and the window size.
fn source(kind: &str, data: &Path, dir: &Path) -> (PathBuf, usize) {
    let real = |name: &str| data.join(name);
    // Whole derived rasters go in their own folder, apart from the tiles.
    let made = |name: &str| dir.join("full").join(name);
    match kind {
        "rgb-utm" => (real("RGB.byte.tif"), SIZE),
        "dem-4326" => (dem_4326(&real, &made), SIZE),
        "f32-utm" => (f32_utm(&real, &made), SIZE),
        "geos" => (geos(&real, &made), SIZE),
        "aerial-3857" => (real("rgb1_fake_nir_epsg3857.tif"), SIZE),
        "shade-3857" => (real("shade.tif"), SIZE),
        "rgba-u16" => (real("RGBA.uint16.tif"), 400),
        "masked" => (real("RGB2.byte.tif"), SIZE),
        other => panic!("unknown kind {other}"),
    }
}

/// Int16 heights-like in EPSG:4326 (Landsat band 2 x 10), nodata -32768.
fn dem_4326(real: &dyn Fn(&str) -> PathBuf, made: &dyn Fn(&str) -> PathBuf) -> PathBuf {
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let scaled = made("dem-scaled.tif");
    let (src, tmp) = (s(&real("RGB.byte.tif")), s(&scaled));
    let args = ["-b", "2", "-ot", "Int16", "-scale", "0", "255", "0", "2550"];
    gdal("gdal_translate", &[&args[..], &[&src, &tmp]].concat());
    let out = made("dem-4326.tif");
    gdal(
        "gdalwarp",
        &[
            "-t_srs",
            "EPSG:4326",
            "-srcnodata",
            "0",
            "-dstnodata",
            "-32768",
            "-r",
            "bilinear",
            &tmp,
            &s(&out),
        ],
    );
    out
}

/// Float32 in UTM with NaN as nodata.
fn f32_utm(real: &dyn Fn(&str) -> PathBuf, made: &dyn Fn(&str) -> PathBuf) -> PathBuf {
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let band = made("f32-band1.vrt");
    gdal(
        "gdal_translate",
        &[
            "-of",
            "VRT",
            "-b",
            "1",
            &s(&real("RGB.byte.tif")),
            &s(&band),
        ],
    );
    let out = made("f32-utm.tif");
    gdal(
        "gdalwarp",
        &[
            "-ot",
            "Float32",
            "-srcnodata",
            "0",
            "-dstnodata",
            "nan",
            &s(&band),
            &s(&out),
        ],
    );
    out
}

/// The full disk as GOES-East sees it.
fn geos(real: &dyn Fn(&str) -> PathBuf, made: &dyn Fn(&str) -> PathBuf) -> PathBuf {
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    // The full disk as GOES-East sees it (7 km pixels), space as
    // nodata: the tiles hold the limb, where points fall off the
    // earth.
    let out = made("geos.tif");
    let r = "5434894.885";
    let m = format!("-{r}");
    let args = [
        "-t_srs",
        GEOS,
        "-te",
        &m,
        &m,
        r,
        r,
        "-ts",
        "1536",
        "1536",
        "-dstnodata",
        "0",
        "-r",
        "bilinear",
    ];
    gdal(
        "gdalwarp",
        &[&args[..], &[&s(&real("world.rgb.tif")), &s(&out)]].concat(),
    );
    out
}

/// Makes every kind's tiles in `dir`: by kind, its tiles' paths.
pub fn make(dir: &Path) -> Vec<(&'static str, Vec<PathBuf>)> {
    let data = data_dir();
    std::fs::create_dir_all(dir.join("full")).unwrap();
    KINDS
        .iter()
        .map(|kind| {
            let (full, win) = source(kind, &data, dir);
            (*kind, cut(&full, kind, win, dir))
        })
        .collect()
}

/// The kind of a tile made by [`make`], from its file name.
pub fn kind_of(name: &str) -> Option<&'static str> {
    KINDS
        .iter()
        .find(|k| name.starts_with(&format!("{k}-")) && name.ends_with(".tif"))
        .copied()
}
