//! The plain base against GDAL's: where it is used, where it is refused,
//! and that a warp meeting a far point is done again; every warp equal to
//! `GDALWarp` to the bit.

use gdal::raster::Buffer;
use gdal::spatial_ref::SpatialRef;
use gdal::{Dataset, DriverManager};

use super::{FAR, FAR_AT, TOOK};
use crate::kernel::{tests::same, warp, Plan, Took, AGAIN};
use warpline_gdal::ffi::WarpOptions;
use warpline_gdal::init;
use warpline_gdal::warp::warp as gdal_warp;

/// A 64 x 64 Byte tile in `crs` from `(x0, y0)` with pixels of `px`:
/// nodata 0 on a diagonal band, a ramp elsewhere.
fn tile(crs: &str, (x0, y0): (f64, f64), px: f64) -> Dataset {
    let n = 64;
    let mem = DriverManager::get_driver_by_name("MEM").unwrap();
    let mut ds = mem.create_with_band_type::<u8, _>("", n, n, 1).unwrap();
    ds.set_spatial_ref(&SpatialRef::from_definition(crs).unwrap())
        .unwrap();
    ds.set_geo_transform(&[x0, px, 0.0, y0, 0.0, -px]).unwrap();
    let data: Vec<u8> = (0..n * n)
        .map(|i| {
            let (x, y) = (i % n, i / n);
            if x.abs_diff(y) < 4 {
                0
            } else {
                (1 + (x * 7 + y * 13) % 250) as u8
            }
        })
        .collect();
    let mut band = ds.rasterband(1).unwrap();
    band.set_no_data_value(Some(0.0)).unwrap();
    band.write((0, 0), (n, n), &mut Buffer::new((n, n), data))
        .unwrap();
    ds
}

/// `src` warped to `target` (bilinear, the stage's arguments) by
/// warpline and by `GDALWarp`, which must be equal; how many warps took
/// the plain base, and how many were done again.
fn warped(src: &Dataset, target: &str, what: &str) -> (usize, usize) {
    let args: Vec<String> = [
        "-t_srs", target, "-r", "bilinear", "-et", "0.125", "-wm", "64",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let plan = Plan::from_args(&args).unwrap();
    TOOK.with(|n| n.set(0));
    AGAIN.with(|n| n.set(0));
    let (mine, took, _) = warp(src, &plan)
        .unwrap_or_else(|e| panic!("{what}: {e:?}"))
        .done(what);
    assert_eq!(took, Took::Ours, "{what}");
    let gdals = gdal_warp(&[src], &WarpOptions::new(&args).unwrap()).unwrap();
    same(&mine, &gdals, what);
    (TOOK.with(|n| n.get()), AGAIN.with(|n| n.get()))
}

/// A user-defined UTM CRS on a datum without a code, as the corpus's
/// `masked` tiles carry it (PROJ searches its database for its name).
pub(in crate::kernel) const NAMED_UTM: &str = r#"PROJCS["UTM Zone 18, Northern Hemisphere",GEOGCS["Unknown datum based upon the WGS 84 ellipsoid",DATUM["Not_specified_based_on_WGS_84_spheroid",SPHEROID["WGS 84",6378137,298.257223563]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],PARAMETER["central_meridian",-75],PARAMETER["scale_factor",0.9996],PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1]]"#;

#[test]
fn projected_sources_to_another_crs_take_the_plain_base() {
    if crate::skipped() {
        return;
    }
    init();
    for (crs, at, px) in [
        ("EPSG:32618", (500_000.0, 4_500_000.0), 30.0),
        (NAMED_UTM, (500_000.0, 4_500_000.0), 30.0),
        ("EPSG:3035", (4_300_000.0, 3_200_000.0), 60.0),
    ] {
        for target in ["EPSG:3857", "EPSG:4326"] {
            let what = format!("{} -> {target}", &crs[..crs.len().min(30)]);
            assert_eq!(warped(&tile(crs, at, px), target, &what), (1, 0), "{what}");
        }
    }
}

#[test]
fn a_pole_in_the_output_keeps_gdals_base() {
    if crate::skipped() {
        return;
    }
    init();
    // Web mercator's top band to polar stereographic: the pole inside
    // the output, where GDAL's grid sampling gives other source windows
    // than the edges do (100 pixels differ over the plain base).
    let band = tile("EPSG:3857", (-20_037_508.0, 19_971_868.0), 250_000.0);
    assert_eq!(warped(&band, "EPSG:3413", "mercator band"), (0, 0));
    // Polar stereographic north (EPSG:3413), a tile over the pole, to
    // geographic: the north pole lands inside the output, where GDAL
    // samples each chunk's source window on a grid.
    let over = tile("EPSG:3413", (-640_000.0, 640_000.0), 20_000.0);
    assert_eq!(warped(&over, "EPSG:4326", "pole"), (0, 0));
    // The same CRS 2,000 km from the pole: both poles outside.
    let away = tile("EPSG:3413", (-64_000.0, -2_000_000.0), 2000.0);
    assert_eq!(warped(&away, "EPSG:4326", "away"), (1, 0));
}

#[test]
fn several_warp_threads_keep_gdals_base() {
    if crate::skipped() {
        return;
    }
    init();
    let key = c"GDAL_NUM_THREADS";
    // SAFETY: a thread-local option, set and cleared around the warps.
    unsafe { gdal_sys::CPLSetThreadLocalConfigOption(key.as_ptr(), c"2".as_ptr()) };
    let src = tile("EPSG:32618", (500_000.0, 4_500_000.0), 30.0);
    let counts = std::panic::catch_unwind(|| warped(&src, "EPSG:3857", "threads"));
    // SAFETY: as above.
    unsafe { gdal_sys::CPLSetThreadLocalConfigOption(key.as_ptr(), std::ptr::null()) };
    assert_eq!(counts.expect("the warps with two threads"), (0, 0));
}

#[test]
fn the_same_crs_and_geographic_sources_keep_gdals_base() {
    if crate::skipped() {
        return;
    }
    init();
    // GDAL's transformer does not reproject (a translation by whole
    // pixels would be copied), or makes no transformation for the poles.
    let merc = tile("EPSG:3857", (-8_300_000.0, 4_900_000.0), 40.0);
    assert_eq!(warped(&merc, "EPSG:3857", "3857"), (0, 0));
    let geog = tile("EPSG:4326", (-75.0, 40.0), 0.0005);
    assert_eq!(warped(&geog, "EPSG:3857", "4326"), (0, 0));
}

#[test]
fn a_warp_that_meets_a_far_point_is_done_again_with_gdals_base() {
    if crate::skipped() {
        return;
    }
    init();
    // Every point counts as far: GDAL could have retried a window.
    FAR_AT.with(|d| d.set(f64::NEG_INFINITY));
    let src = tile("EPSG:32618", (500_000.0, 4_500_000.0), 30.0);
    let counts = warped(&src, "EPSG:3857", "far");
    FAR_AT.with(|d| d.set(FAR));
    assert_eq!(counts, (1, 1));
    // Nothing near the raster is far.
    assert_eq!(warped(&src, "EPSG:3857", "near"), (1, 0));
}
