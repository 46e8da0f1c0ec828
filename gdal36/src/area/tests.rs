//! When one area of interest serves every tile.

use super::*;

const GEOS: &str = "+proj=geos +sweep=x +lon_0=-75 +h=35786023 +ellps=GRS80 +units=m +no_defs";
/// A PROJ string PROJ's CRS model cannot hold (`+approx`): PROJ keeps it.
const APPROX: &str = "+proj=utm +zone=14 +approx +datum=NAD27 +units=m +no_defs";

fn srs(text: &str) -> SpatialRef {
    warpline_gdal::init();
    SpatialRef::from_definition(text).unwrap()
}

#[test]
fn a_proj_string_proj_keeps_as_it_is_known_by_its_string_alone() {
    if crate::area_skipped() {
        return;
    }
    let approx = srs(APPROX);
    assert!(by_proj_string(&approx));
    let web = srs("EPSG:3857");
    assert_eq!(one_area(&approx, &web), OneArea::ByProjString);
    // On the target's side too.
    assert_eq!(one_area(&srs("EPSG:3035"), &approx), OneArea::ByProjString);
    // A title names the CRS, which PROJ might look up: not shared.
    assert!(!by_proj_string(&srs(&format!("{APPROX} +title=mine"))));
    // This process runs the GDAL and PROJ the argument was read from.
    assert!(OneArea::ByProjString.holds());
}

#[test]
fn crss_the_database_may_serve_keep_each_tiles_area() {
    if crate::area_skipped() {
        return;
    }
    let web = srs("EPSG:3857");
    // A code, a CRS PROJ searches by name, PROJ strings PROJ models
    // (GOES among them: its WKT1 has an `EXTENSION` node all the same):
    // none is known by its string alone; those whose datum the registry
    // has no operation for share an area all the same.
    let named = r#"PROJCS["UTM Zone 18, Northern Hemisphere",GEOGCS["Unknown datum based upon the WGS 84 ellipsoid",DATUM["Not_specified_based_on_WGS_84_spheroid",SPHEROID["WGS 84",6378137,298.257223563]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],PARAMETER["central_meridian",-75],PARAMETER["scale_factor",0.9996],PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1]]"#;
    let geos_nad27 = GEOS.replace("+ellps=GRS80", "+datum=NAD27");
    // Without the `proj-db` feature the registry is not read, and such a
    // CRS keeps each tile's area.
    let unregistered = if cfg!(feature = "proj-db") {
        OneArea::Unregistered
    } else {
        OneArea::No
    };
    for (other, why) in [
        ("EPSG:26718", OneArea::No),
        (named, unregistered),
        ("+proj=utm +zone=18 +ellps=clrk66 +units=m", unregistered),
        (GEOS, unregistered),
        (&geos_nad27, OneArea::No),
    ] {
        let s = srs(other);
        assert!(!by_proj_string(&s), "{other}");
        assert_eq!(one_area(&s, &web), why, "{other}");
    }
    // The same datum on both sides, and heights involved.
    assert_eq!(one_area(&srs("EPSG:32618"), &web), OneArea::SameDatum);
    assert_eq!(one_area(&srs("EPSG:4326+5773"), &web), OneArea::No);
    assert!(OneArea::SameDatum.holds() && !OneArea::No.holds());
}

#[test]
fn only_an_extension_proj_keeps_on_parsing_the_string_again_counts() {
    if crate::area_skipped() {
        return;
    }
    // An extension PROJ would drop on parsing the string again: the
    // transformation would then come from the database.
    let utm = r#"PROJCS["unknown",GEOGCS["unknown",DATUM["unknown",SPHEROID["GRS 1980",6378137,298.257222101]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],PARAMETER["central_meridian",-75],PARAMETER["scale_factor",0.9996],PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1],EXTENSION["PROJ4","+proj=utm +zone=18 +ellps=GRS80 +units=m +no_defs"]]"#;
    assert!(!by_proj_string(&srs(utm)));
    // A datum shift (a bound CRS); a geographic CRS.
    for text in [
        &format!("{APPROX} +towgs84=1,2,3"),
        "+proj=longlat +datum=WGS84 +lon_wrap=180 +no_defs",
    ] {
        assert!(!by_proj_string(&srs(text)), "{text}");
    }
}

/// The points `from` -> `to` moves with GDAL's transformation for `aoi`
/// (`None`: no area), as bits.
fn moved(
    from: &SpatialRef,
    to: &SpatialRef,
    aoi: Option<[f64; 4]>,
    x0: f64,
    y0: f64,
) -> Vec<(u64, u64)> {
    let mut x: Vec<f64> = (0..50).map(|i| x0 + f64::from(i) * 1.1e4).collect();
    let mut y: Vec<f64> = (0..50).map(|i| y0 + f64::from(i) * 3.7e3).collect();
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
        let ct = sys::OCTNewCoordinateTransformationEx(from.to_c_hsrs(), to.to_c_hsrs(), o);
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
}

/// `AREA_OF_INTEREST=w,s,e,n` as numbers.
fn bounds(option: &str) -> [f64; 4] {
    let v: Vec<f64> = option
        .strip_prefix("AREA_OF_INTEREST=")
        .unwrap()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    [v[0], v[1], v[2], v[3]]
}

#[test]
fn every_area_gives_a_crs_known_by_its_string_the_same_operation() {
    if crate::area_skipped() {
        return;
    }
    // What the argument proves, seen from outside: on NAD27, where the
    // database holds datum shifts by area, the transformation GDAL makes
    // for a tile's own area moves points exactly as those for the shared
    // areas, and as the one with no area.
    let approx = srs(APPROX);
    let web = srs("EPSG:3857");
    let (x0, y0) = (400_000.0, 2_900_000.0);
    let shared = moved(&approx, &web, Some(bounds(area_of(0))), x0, y0);
    for aoi in [
        None,
        Some(bounds(area_of(1))),
        Some([-100.0, 25.0, -98.0, 28.0]),
        Some([170.0, 20.0, -170.0, 30.0]),
    ] {
        assert_eq!(moved(&approx, &web, aoi, x0, y0), shared, "{aoi:?}");
    }
}

#[test]
fn a_crs_the_database_serves_may_move_with_the_area() {
    if crate::area_skipped() {
        return;
    }
    // Why the rule asks for PROJ's own extension: GOES on NAD27 has an
    // `EXTENSION` node in WKT1 but none of its own, and its datum shift
    // for a tile over Texas is not the one for the shared area.
    let geos = srs(&GEOS.replace("+ellps=GRS80", "+datum=NAD27"));
    let web = srs("EPSG:3857");
    // Points over Texas and the Gulf, in the geostationary CRS.
    let (x0, y0) = (-2.1e6, 2.55e6);
    let tile = moved(&geos, &web, Some([-97.0, 24.0, -95.0, 27.0]), x0, y0);
    let shared = moved(&geos, &web, Some(bounds(area_of(1))), x0, y0);
    assert_ne!(tile, shared);
    assert!(!by_proj_string(&geos));
}

#[test]
fn another_choice_of_operation_turns_the_database_cases_off() {
    if crate::area_skipped() {
        return;
    }
    warpline_gdal::init();
    for (key, value) in [
        (c"OGR_CT_OP_SELECTION", c"BEST_ACCURACY"),
        (c"OSR_USE_APPROX_TMERC", c"YES"),
    ] {
        // SAFETY: valid strings; the option is this thread's, and is
        // unset again below.
        unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), value.as_ptr()) };
        let (by_string, same) = (OneArea::ByProjString.holds(), OneArea::SameDatum.holds());
        let unregistered = OneArea::Unregistered.holds();
        // SAFETY: as above.
        unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), std::ptr::null()) };
        assert!(!unregistered, "{key:?}");
        assert!(!by_string && same, "{key:?}");
    }
    assert!(OneArea::ByProjString.holds() && OneArea::Unregistered.holds());
}

#[test]
fn a_wkt_tree_is_read_as_gdal_reads_it() {
    if crate::area_skipped() {
        return;
    }
    let root = wkt::parse(
        r#"PROJCS["a [b], c",GEOGCS["g",EXTENSION["PROJ4","deep"]],EXTENSION["PROJ4","+proj=x"]]"#,
    )
    .unwrap();
    assert_eq!(root.value, "PROJCS");
    assert_eq!(root.children[0].value, "a [b], c");
    assert_eq!(root.children.len(), 3);
    assert_eq!(root.children[2].children[1].value, "+proj=x");
    for bad in [r#"PROJCS["a""#, "PROJCS[a,", "PROJCS[a]]", "A[B[C]"] {
        assert!(wkt::parse(bad).is_none(), "{bad}");
    }
}

#[test]
fn each_thread_has_its_own_shared_area_and_keeps_it() {
    if crate::area_skipped() {
        return;
    }
    let mine = shared_area();
    assert_eq!(shared_area(), mine, "a thread keeps its area");
    assert_eq!(mine, area_of(turn()));
    // Two threads have two turns, so the areas of two workers differ.
    let other = std::thread::spawn(|| (turn(), shared_area(), shared_area()))
        .join()
        .unwrap();
    assert_ne!(other.0, turn());
    assert_eq!((other.1, other.2), (area_of(other.0), area_of(other.0)));
    // The areas threads take in turn: GDAL keys its cache on an area's
    // bounds printed with 6 decimals, so they differ there; each is the
    // whole world but for a ten-thousandth of a degree per turn.
    let mut keys = std::collections::HashSet::new();
    for k in 0..AREAS {
        let area = area_of(k);
        assert_eq!(area_of(k + AREAS), area, "then they repeat");
        let [w, south, e, n] = bounds(area);
        assert_eq!((w, e, n), (-180.0, 180.0, 90.0), "{area}");
        assert!((-90.0..-89.99).contains(&south), "{area}");
        assert!(keys.insert(format!("{south:.6}")), "{area}");
    }
}

/// The `masked` tiles' CRS (RGB.byte.tif's, as GDAL reads it).
const MASKED: &str = r#"PROJCS["UTM Zone 18, Northern Hemisphere",GEOGCS["Unknown datum based upon the WGS 84 ellipsoid",DATUM["Not_specified_based_on_WGS_84_spheroid",SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433,AUTHORITY["EPSG","9122"]]],PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],PARAMETER["central_meridian",-75],PARAMETER["scale_factor",0.9996],PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1,AUTHORITY["EPSG","9001"]],AXIS["Easting",EAST],AXIS["Northing",NORTH]]"#;

#[test]
#[cfg(feature = "proj-db")]
fn a_crs_the_registry_has_no_operation_for_shares_one_area() {
    if crate::area_skipped() {
        return;
    }
    let web = srs("EPSG:3857");
    let wgs84 = srs("EPSG:4326");
    for text in [MASKED, GEOS, &GEOS.replace("GRS80", "WGS84")] {
        let s = srs(text);
        assert_eq!(one_area(&s, &web), OneArea::Unregistered, "{text}");
        assert_eq!(one_area(&web, &s), OneArea::Unregistered, "{text}");
        assert_eq!(one_area(&s, &wgs84), OneArea::Unregistered, "{text}");
    }
    assert!(OneArea::Unregistered.holds());
}

#[test]
fn every_area_gives_an_unregistered_crs_the_same_operation() {
    if crate::area_skipped() {
        return;
    }
    // Seen from outside: the transformation GDAL makes for a tile's own
    // area moves points exactly as those for the shared areas, and as
    // the one with no area.
    let web = srs("EPSG:3857");
    for (text, x0, y0) in [(MASKED, 300_000.0, 2_800_000.0), (GEOS, -2.1e6, 2.55e6)] {
        let s = srs(text);
        let shared = moved(&s, &web, Some(bounds(area_of(0))), x0, y0);
        for aoi in [
            None,
            Some(bounds(area_of(1))),
            Some([-78.0, 24.0, -76.0, 26.0]),
            Some([-97.0, 24.0, -95.0, 27.0]),
            Some([-80.0, 86.0, -70.0, 90.0]),
            Some([170.0, 20.0, -170.0, 30.0]),
        ] {
            assert_eq!(moved(&s, &web, aoi, x0, y0), shared, "{text} {aoi:?}");
        }
    }
}

#[test]
fn a_crs_with_operations_in_the_registry_keeps_its_own_areas() {
    if crate::area_skipped() {
        return;
    }
    let web = srs("EPSG:3857");
    // NAD27 by name only: no identifier anywhere, but PROJ finds its
    // datum by name, and the registry holds its datum shifts.
    let nad27_by_name = MASKED
        .replace("Unknown datum based upon the WGS 84 ellipsoid", "NAD27")
        .replace(
            "Not_specified_based_on_WGS_84_spheroid",
            "North_American_Datum_1927",
        )
        .replace(
            r#"SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]]"#,
            r#"SPHEROID["Clarke 1866",6378206.4,294.978698213898]"#,
        );
    for text in [
        GEOS.replace("+ellps=GRS80", "+datum=NAD27"),
        GEOS.replace("+ellps=GRS80", "+ellps=GRS80 +towgs84=1,2,3"),
        "EPSG:26718".to_owned(),
        "+proj=utm +zone=18 +datum=NAD83 +units=m +no_defs".to_owned(),
        nad27_by_name,
    ] {
        assert_eq!(one_area(&srs(&text), &web), OneArea::No, "{text}");
    }
}

#[test]
fn the_pair_proven_is_the_one_this_process_runs() {
    if crate::area_skipped() {
        return;
    }
    let v = warpline_gdal::versions().gdal;
    let pair = match (v.major, v.minor) {
        (3, 6) => Proven::Gdal36Proj91,
        _ => Proven::Gdal312Proj96,
    };
    assert_eq!(versions(), Some(pair));
}

#[test]
fn options_and_epochs_the_argument_leaves_out_keep_each_tiles_area() {
    if crate::area_skipped() {
        return;
    }
    // GDAL 3.6's transformer reads none of them; 3.12's hands them to
    // PROJ, which the argument does not cover.
    let on_36 = versions() == Some(Proven::Gdal36Proj91);
    let plain = warpline_gdal::WarpSpec::new("EPSG:3857");
    assert!(spec_argued(&plain));
    for (key, value) in [
        ("ALLOW_BALLPARK", "NO"),
        ("only_best", "YES"),
        ("COORDINATE_EPOCH", "2020"),
        ("SRC_COORDINATE_EPOCH", "2020"),
        ("DST_COORDINATE_EPOCH", "2020"),
    ] {
        let mut spec = plain.clone();
        spec.transformer_options
            .push((key.to_owned(), value.to_owned()));
        assert_eq!(spec_argued(&spec), on_36, "{key}");
    }
    // Other transformer options leave it as it was.
    let mut spec = plain.clone();
    spec.transformer_options
        .push(("INSERT_CENTER_LONG".to_owned(), "NO".to_owned()));
    assert!(spec_argued(&spec));
    for epoch in [
        |s: &mut warpline_gdal::WarpSpec| s.src_coord_epoch = Some(2020.0),
        |s: &mut warpline_gdal::WarpSpec| s.dst_coord_epoch = Some(2020.0),
    ] {
        let mut spec = plain.clone();
        epoch(&mut spec);
        assert_eq!(spec_argued(&spec), on_36);
    }
    // A CRS with a coordinate epoch of its own, on either side.
    let web = srs("EPSG:3857");
    let utm = srs("EPSG:32618");
    assert_eq!(one_area(&utm, &web), OneArea::SameDatum);
    // SAFETY: a valid handle owned by `utm`, changed before any other use.
    unsafe { sys::OSRSetCoordinateEpoch(utm.to_c_hsrs(), 2020.0) };
    let why = if on_36 {
        OneArea::SameDatum
    } else {
        OneArea::No
    };
    assert_eq!(one_area(&utm, &web), why);
    assert_eq!(one_area(&web, &utm), why);
}
