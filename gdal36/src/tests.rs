//! The accelerator's own tests: which tiles share one area of interest.

use gdal::Dataset;
use warpline_gdal::accel::Accelerator;
use warpline_gdal::WarpSpec;

use super::area::shared_area;
use super::Gdal36;

fn tile_in(crs: &str) -> Dataset {
    warpline_gdal::init();
    let mem = gdal::DriverManager::get_driver_by_name("MEM").unwrap();
    let mut ds = mem.create("", 1, 1, 1).unwrap();
    ds.set_projection(&warpline_gdal::crs_to_wkt(crs).unwrap())
        .unwrap();
    ds
}

/// The area the accelerator gives tiles in `srcs` warped to `dst`.
fn area(a: &Gdal36, dst: &str, srcs: &[&Dataset]) -> Option<String> {
    a.area_of_interest(srcs, &WarpSpec::new(dst))
}

fn shared() -> Option<String> {
    Some(shared_area().to_owned())
}

#[test]
fn tiles_share_one_area_of_interest_only_when_it_cannot_change_projs_choice() {
    if crate::area_skipped() {
        return;
    }
    if let Err(why) = Gdal36::default().probe() {
        eprintln!("skipped: {why}");
        return;
    }
    let a = Gdal36::default();
    let web = "EPSG:3857";
    // WGS 84 on both sides: UTM 18N, geographic, a PROJ string.
    for same in ["EPSG:32618", "EPSG:4326", "+proj=robin +datum=WGS84"] {
        let tile = tile_in(same);
        assert_eq!(area(&a, web, &[&tile]), shared(), "{same}");
        // The answer is kept per source CRS, and stays the same.
        assert_eq!(area(&a, web, &[&tile]), shared(), "{same}");
    }
    // ETRS89 and NAD27 to WGS 84: PROJ picks the datum shift by area.
    for other in ["EPSG:3035", "EPSG:26718", "EPSG:4267"] {
        assert_eq!(area(&a, web, &[&tile_in(other)]), None, "{other}");
    }
    // NAD27 to NAD27: no shift again.
    assert_eq!(area(&a, "EPSG:4267", &[&tile_in("EPSG:26718")]), shared());
    // Heights involved (a compound CRS): never.
    assert_eq!(area(&a, web, &[&tile_in("EPSG:4326+5773")]), None);
    // A CRS PROJ knows only by its PROJ string: no database search,
    // whatever the datum, on either side (area.rs). Not GOES: PROJ
    // models `+proj=geos`, and searches its database for it.
    let approx = "+proj=utm +zone=14 +approx +datum=NAD27 +units=m +no_defs";
    assert_eq!(area(&a, web, &[&tile_in(approx)]), shared());
    assert_eq!(area(&a, approx, &[&tile_in("EPSG:3035")]), shared());
    let geos = "+proj=geos +sweep=x +lon_0=-75 +h=35786023 +datum=NAD27 +units=m +no_defs";
    assert_eq!(area(&a, web, &[&tile_in(geos)]), None);
    // A datum PROJ's database holds no operation for (area/registry.rs):
    // GOES on GRS80 alone, UTM on the WGS 84 ellipsoid alone, as a tile's
    // dataset holds them.
    if cfg!(feature = "proj-db") {
        for unregistered in [
            geos.replace("+datum=NAD27", "+ellps=GRS80"),
            "+proj=utm +zone=18 +ellps=WGS84 +units=m +no_defs".to_owned(),
        ] {
            assert_eq!(
                area(&a, web, &[&tile_in(&unregistered)]),
                shared(),
                "{unregistered}"
            );
        }
        // Found once per (target, source CRS): eleven to EPSG:3857, one
        // each to NAD27 and to the PROJ string.
        assert_eq!(a.areas.lock().unwrap().len(), 13);
    }
    // A mosaic shares one area only if each of its inputs may: its UTM
    // tile may, its NAD27 tile may not.
    let (utm, nad27) = (tile_in("EPSG:32618"), tile_in("EPSG:26718"));
    assert_eq!(area(&a, web, &[&utm, &utm]), shared());
    assert_eq!(area(&a, web, &[&utm, &nad27]), None);
    assert_eq!(area(&a, web, &[&nad27, &utm]), None);
}
