//! When one area of interest serves every tile.

use super::*;

const GEOS: &str = "+proj=geos +sweep=x +lon_0=-75 +h=35786023 +ellps=GRS80 +units=m +no_defs";

fn srs(text: &str) -> SpatialRef {
    crate::gdal::init();
    SpatialRef::from_definition(text).unwrap()
}

#[test]
fn a_geostationary_proj_string_is_known_by_its_string_alone() {
    let geos = srs(GEOS);
    assert!(root_extension(&geos).is_some());
    assert!(by_proj_string(&geos));
    let web = srs("EPSG:3857");
    assert_eq!(one_area(&geos, &web), OneArea::ByProjString);
    // A title names the CRS, but GDAL hands PROJ the string without it,
    // so PROJ cannot look the name up.
    assert!(by_proj_string(&srs(&format!("{GEOS} +title=goes"))));
    // On the target's side too.
    assert_eq!(one_area(&srs("EPSG:26718"), &geos), OneArea::ByProjString);
    // This process runs the GDAL and PROJ the argument was read from.
    assert!(OneArea::ByProjString.holds());
}

#[test]
fn crss_the_database_may_serve_keep_each_tiles_area() {
    let web = srs("EPSG:3857");
    // A code, a CRS PROJ searches by name, a PROJ string PROJ models.
    let named = r#"PROJCS["UTM Zone 18, Northern Hemisphere",GEOGCS["Unknown datum based upon the WGS 84 ellipsoid",DATUM["Not_specified_based_on_WGS_84_spheroid",SPHEROID["WGS 84",6378137,298.257223563]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],PARAMETER["central_meridian",-75],PARAMETER["scale_factor",0.9996],PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1]]"#;
    for other in [
        "EPSG:26718",
        named,
        "+proj=utm +zone=18 +ellps=clrk66 +units=m",
    ] {
        let s = srs(other);
        assert!(!by_proj_string(&s), "{other}");
        assert_eq!(one_area(&s, &web), OneArea::No, "{other}");
    }
    // The same datum on both sides, and heights involved.
    assert_eq!(one_area(&srs("EPSG:32618"), &web), OneArea::SameDatum);
    assert_eq!(one_area(&srs("EPSG:4326+5773"), &web), OneArea::No);
    assert!(OneArea::SameDatum.holds() && !OneArea::No.holds());
}

#[test]
fn only_a_string_proj_keeps_as_an_extension_of_a_plain_projected_crs_counts() {
    // An extension PROJ would drop on parsing the string again: the
    // transformation would then come from the database.
    let utm = r#"PROJCS["unknown",GEOGCS["unknown",DATUM["unknown",SPHEROID["GRS 1980",6378137,298.257222101]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],PARAMETER["central_meridian",-75],PARAMETER["scale_factor",0.9996],PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1],EXTENSION["PROJ4","+proj=utm +zone=18 +ellps=GRS80 +units=m +no_defs"]]"#;
    let s = srs(utm);
    assert!(root_extension(&s).is_some(), "GDAL reads the extension");
    assert!(!by_proj_string(&s));
    // A datum shift (a bound CRS); a geographic CRS.
    for text in [
        &format!("{GEOS} +towgs84=1,2,3"),
        "+proj=longlat +datum=WGS84 +lon_wrap=180 +no_defs",
    ] {
        assert!(!by_proj_string(&srs(text)), "{text}");
    }
}

#[test]
fn every_area_gives_the_geostationary_tiles_the_same_operation() {
    // What the argument proves, seen from outside: the transformation
    // GDAL makes for a tile's own area moves points exactly as the one for
    // the whole world (and as the one with no area).
    let geos = srs(GEOS);
    let web = srs("EPSG:3857");
    let moved = |aoi: Option<[f64; 4]>| -> Vec<(u64, u64)> {
        let mut x: Vec<f64> = (0..50).map(|i| -3.0e6 + f64::from(i) * 1.1e5).collect();
        let mut y: Vec<f64> = (0..50).map(|i| 2.0e6 + f64::from(i) * 3.7e4).collect();
        // SAFETY: valid handles and options; `x` and `y` hold 50 points;
        // every object made here is destroyed here.
        unsafe {
            let o = sys::OCTNewCoordinateTransformationOptions();
            if let Some([w, s, e, n]) = aoi {
                assert_ne!(
                    sys::OCTCoordinateTransformationOptionsSetAreaOfInterest(o, w, s, e, n),
                    0
                );
            }
            let ct = sys::OCTNewCoordinateTransformationEx(geos.to_c_hsrs(), web.to_c_hsrs(), o);
            assert!(!ct.is_null());
            let mut ok = vec![0; 50];
            let z = std::ptr::null_mut();
            sys::OCTTransformEx(ct, 50, x.as_mut_ptr(), y.as_mut_ptr(), z, ok.as_mut_ptr());
            sys::OCTDestroyCoordinateTransformation(ct);
            sys::OCTDestroyCoordinateTransformationOptions(o);
        }
        x.iter()
            .zip(&y)
            .map(|(a, b)| (a.to_bits(), b.to_bits()))
            .collect()
    };
    let world = moved(Some([-180.0, -90.0, 180.0, 90.0]));
    for aoi in [
        None,
        Some([-80.0, 20.0, -70.0, 30.0]),
        Some([-110.0, -10.0, -100.0, 5.0]),
    ] {
        assert_eq!(moved(aoi), world, "{aoi:?}");
    }
}

#[test]
fn the_wkt1_tree_is_read_as_gdal_reads_it() {
    let root = wkt1::parse(
        r#"PROJCS["a [b], c",GEOGCS["g",EXTENSION["PROJ4","deep"]],EXTENSION["PROJ4","+proj=x"]]"#,
    )
    .unwrap();
    assert_eq!(root.value, "PROJCS");
    assert_eq!(root.children[0].value, "a [b], c");
    assert_eq!(root.children.len(), 3);
    assert_eq!(root.children[2].children[1].value, "+proj=x");
    for bad in [r#"PROJCS["a""#, "PROJCS[a,", "PROJCS[a]]", "A[B[C]"] {
        assert!(wkt1::parse(bad).is_none(), "{bad}");
    }
}

#[test]
fn another_choice_of_operation_turns_the_proj_string_case_off() {
    crate::gdal::init();
    for (key, value) in [
        (c"OGR_CT_OP_SELECTION", c"BEST_ACCURACY"),
        (c"OSR_USE_APPROX_TMERC", c"YES"),
    ] {
        // SAFETY: valid strings; the option is this thread's, and is
        // unset again below.
        unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), value.as_ptr()) };
        let (by_string, same) = (OneArea::ByProjString.holds(), OneArea::SameDatum.holds());
        // SAFETY: as above.
        unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), std::ptr::null()) };
        assert!(!by_string && same, "{key:?}");
    }
    assert!(OneArea::ByProjString.holds());
}

#[test]
fn each_thread_has_its_own_shared_area_and_keeps_it() {
    let mine = shared_area();
    assert_eq!(shared_area(), mine, "a thread keeps its area");
    let other = std::thread::spawn(|| (shared_area(), shared_area()))
        .join()
        .unwrap();
    assert_eq!(other.0, other.1);
    // The areas threads take in turn: GDAL keys its cache on an area's
    // bounds printed with 6 decimals, so they differ there; each is the
    // whole world but for a ten-thousandth of a degree per turn.
    let mut keys = std::collections::HashSet::new();
    for k in 0..AREAS {
        let area = area_of(k);
        assert_eq!(area_of(k + AREAS), area, "then they repeat");
        let v: Vec<f64> = area
            .strip_prefix("AREA_OF_INTEREST=")
            .unwrap()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!((v[0], v[2], v[3]), (-180.0, 180.0, 90.0), "{area}");
        assert!((-90.0..-89.99).contains(&v[1]), "{area}");
        assert!(keys.insert(format!("{:.6}", v[1])), "{area}");
    }
}
