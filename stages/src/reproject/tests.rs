//! The reproject stage's unit tests.

use super::*;
use crate::decode::crs_to_wkt;

fn to(crs: &str) -> Reproject {
    Reproject {
        args: Vec::new(),
        transformer: Vec::new(),
        target_wkt: crs_to_wkt(crs).unwrap(),
        resolution: None,
        size: None,
        extent: None,
        dtype: None,
        bands: None,
        max_pixels: 1 << 28,
        warp_memory: DEFAULT_WARP_MEMORY,
        dst_alpha: false,
        one_area: Default::default(),
        disk: Default::default(),
        kernel: Kernel::Auto,
    }
}

fn tile_in(crs: &str) -> Dataset {
    init();
    let mem = gdal::DriverManager::get_driver_by_name("MEM").unwrap();
    let mut ds = mem.create("", 1, 1, 1).unwrap();
    ds.set_projection(&crs_to_wkt(crs).unwrap()).unwrap();
    ds
}

#[test]
fn tiles_share_one_area_of_interest_only_when_it_cannot_change_projs_choice() {
    let web = to("EPSG:3857");
    // WGS 84 on both sides: UTM 18N, geographic, a PROJ string.
    for same in ["EPSG:32618", "EPSG:4326", "+proj=robin +datum=WGS84"] {
        let tile = tile_in(same);
        assert_eq!(
            web.area_of_interest(&[&tile]),
            Some(shared_area()),
            "{same}"
        );
        // The answer is kept per source CRS, and stays the same.
        assert_eq!(
            web.area_of_interest(&[&tile]),
            Some(shared_area()),
            "{same}"
        );
    }
    // ETRS89 and NAD27 to WGS 84: PROJ picks the datum shift by area.
    for other in ["EPSG:3035", "EPSG:26718", "EPSG:4267"] {
        assert_eq!(web.area_of_interest(&[&tile_in(other)]), None, "{other}");
    }
    // NAD27 to NAD27: no shift again.
    let nad27 = to("EPSG:4267");
    assert_eq!(
        nad27.area_of_interest(&[&tile_in("EPSG:26718")]),
        Some(shared_area())
    );
    // Heights involved (a compound CRS): never.
    assert_eq!(web.area_of_interest(&[&tile_in("EPSG:4326+5773")]), None);
    // A CRS PROJ knows only by its PROJ string: no database search,
    // whatever the datum, on either side (gdal/area.rs). Not GOES: PROJ
    // models `+proj=geos`, and searches its database for it.
    let approx = "+proj=utm +zone=14 +approx +datum=NAD27 +units=m +no_defs";
    assert_eq!(
        web.area_of_interest(&[&tile_in(approx)]),
        Some(shared_area())
    );
    assert_eq!(
        to(approx).area_of_interest(&[&tile_in("EPSG:3035")]),
        Some(shared_area())
    );
    let geos = "+proj=geos +sweep=x +lon_0=-75 +h=35786023 +datum=NAD27 +units=m +no_defs";
    assert_eq!(web.area_of_interest(&[&tile_in(geos)]), None);
    // A datum PROJ's database holds no operation for (gdal/area/registry.rs):
    // GOES on GRS80 alone, UTM on the WGS 84 ellipsoid alone, as a tile's
    // dataset holds them.
    for unregistered in [
        geos.replace("+datum=NAD27", "+ellps=GRS80"),
        "+proj=utm +zone=18 +ellps=WGS84 +units=m +no_defs".to_owned(),
    ] {
        assert_eq!(
            web.area_of_interest(&[&tile_in(&unregistered)]),
            Some(shared_area()),
            "{unregistered}"
        );
    }
    assert_eq!(web.one_area.lock().unwrap().len(), 11);
    // A mosaic shares one area only if each of its inputs may: its UTM
    // tile may, its NAD27 tile may not.
    let (utm, nad27) = (tile_in("EPSG:32618"), tile_in("EPSG:26718"));
    assert_eq!(web.area_of_interest(&[&utm, &utm]), Some(shared_area()));
    assert_eq!(web.area_of_interest(&[&utm, &nad27]), None);
    assert_eq!(web.area_of_interest(&[&nad27, &utm]), None);
    // Unless the transformer promotes the CRSs to 3D.
    let mut promoted = to("EPSG:3857");
    promoted.transformer.push("PROMOTE_TO_3D=YES".to_owned());
    assert_eq!(promoted.area_of_interest(&[&tile_in("EPSG:32618")]), None);
}
