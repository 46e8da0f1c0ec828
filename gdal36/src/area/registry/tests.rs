//! Each half of the check on its own: a CRS only one of them turns down.

use super::*;

/// A projected CRS on a datum PROJ does not know, named `name`, its
/// geographic CRS `geog` and its datum `datum`, on `ellipsoid`.
fn utm(name: &str, geog: &str, datum: &str, ellipsoid: &str) -> String {
    format!(
        r#"PROJCRS["{name}",BASEGEOGCRS["{geog}",DATUM["{datum}",ELLIPSOID[{ellipsoid},LENGTHUNIT["metre",1]]],PRIMEM["Greenwich",0,ANGLEUNIT["degree",0.0174532925199433]]],CONVERSION["UTM zone 18N",METHOD["Transverse Mercator",ID["EPSG",9807]],PARAMETER["Latitude of natural origin",0,ANGLEUNIT["degree",0.0174532925199433]],PARAMETER["Longitude of natural origin",-75,ANGLEUNIT["degree",0.0174532925199433]],PARAMETER["Scale factor at natural origin",0.9996,SCALEUNIT["unity",1]],PARAMETER["False easting",500000,LENGTHUNIT["metre",1]],PARAMETER["False northing",0,LENGTHUNIT["metre",1]]],CS[Cartesian,2],AXIS["easting",east,ORDER[1],LENGTHUNIT["metre",1]],AXIS["northing",north,ORDER[2],LENGTHUNIT["metre",1]]]"#
    )
}

const WGS84: &str = r#""WGS 84",6378137,298.257223563"#;
const WEB: &str = "EPSG:3857";

fn srs(text: &str) -> SpatialRef {
    warpline_gdal::init();
    SpatialRef::from_definition(text).unwrap()
}

fn proj() -> Proj {
    warpline_gdal::init();
    Proj::new().unwrap()
}

#[test]
fn a_name_with_operations_in_the_registry_turns_the_crs_down() {
    if crate::skipped() {
        return;
    }
    let p = proj();
    let plain = utm("mine", "my geographic", "my datum", WGS84);
    assert!(p.unregistered(&plain));
    assert!(p.one_ballpark(&plain, WEB));
    // The projected CRS's name, its geographic CRS's, its datum's: each
    // names something the registry has datum shifts for (NAD27), while
    // the CRS itself is not that one (its datum is its own), so PROJ ends
    // with a ballpark operation all the same, today.
    for text in [
        utm("NAD27 / UTM zone 18N", "my geographic", "my datum", WGS84),
        utm("mine", "NAD27", "my datum", WGS84),
        utm("mine", "my geographic", "North American Datum 1927", WGS84),
    ] {
        assert!(!p.unregistered(&text), "{text}");
        assert!(p.one_ballpark(&text, WEB), "{text}");
        assert!(!unregistered(&srs(&text), &srs(WEB)), "{text}");
    }
    assert!(unregistered(&srs(&plain), &srs(WEB)));
}

#[test]
fn a_name_without_operations_in_the_registry_passes() {
    if crate::skipped() {
        return;
    }
    let p = proj();
    // EPSG:4030's name, and its datum's: the registry has no operation
    // for either.
    let text = utm(
        "mine",
        "Unknown datum based upon the WGS 84 ellipsoid",
        "Not specified (based on WGS 84 ellipsoid)",
        WGS84,
    );
    assert!(p.unregistered(&text));
}

#[test]
fn an_operation_other_than_one_ballpark_turns_the_pair_down() {
    if crate::skipped() {
        return;
    }
    let p = proj();
    let geog = "+proj=longlat +ellps=GRS80 +no_defs +type=crs";
    let same_datum = "+proj=utm +zone=18 +ellps=GRS80 +units=m +no_defs +type=crs";
    assert!(p.unregistered(geog) && p.unregistered(same_datum));
    // The same datum: a conversion, no ballpark.
    assert!(!p.one_ballpark(geog, same_datum));
    assert!(!unregistered(&srs(geog), &srs(same_datum)));
    assert!(unregistered(&srs(geog), &srs(WEB)));
    assert!(p.one_ballpark(geog, WEB));
    // The other side's datum shifts (NAD27's) start from no CRS of this
    // side (step 2): one ballpark operation still.
    assert!(p.one_ballpark(geog, "EPSG:4267"));
    // Bound, compound and 3D sides are not argued.
    for other in [
        "+proj=longlat +ellps=GRS80 +towgs84=1,2,3 +type=crs",
        "EPSG:4326+5773",
        "EPSG:4979",
    ] {
        assert!(!p.one_ballpark(geog, other), "{other}");
    }
    let geog3d =
        "+proj=longlat +ellps=GRS80 +no_defs +type=crs".replace("longlat", "longlat +vunits=m");
    assert!(!p.unregistered(&geog3d), "{geog3d}");
}

#[test]
fn the_text_checked_is_the_one_gdal_hands_proj() {
    if crate::skipped() {
        return;
    }
    // GOES as a GeoTIFF gives it: read back from its WKT1, whose
    // `EXTENSION["PROJ4", ...]` makes GDAL hand PROJ the PROJ string (its
    // WKT2 carries the string as PROJ's own, which PROJ would transform
    // by: no ballpark operation).
    let geos = srs(
        "+proj=geos +sweep=x +lon_0=-75 +h=35786023 +x_0=0 +y_0=0 +ellps=GRS80 +units=m +no_defs",
    );
    let read = SpatialRef::from_wkt(&geos.to_wkt().unwrap()).unwrap();
    let t = texts(&read).unwrap();
    assert_eq!(t.len(), 1);
    assert!(
        t[0].starts_with("+proj=geos") && t[0].ends_with(" +type=crs"),
        "{t:?}"
    );
    assert!(unregistered(&read, &srs(WEB)));
    // A CRS with no such extension: its WKT2 (GDAL 3.6) or its PROJJSON
    // (GDAL 3.12); one with a code: the code too.
    let t = texts(&srs(&utm("mine", "g", "d", WGS84))).unwrap();
    let v = warpline_gdal::versions().gdal;
    let head = match (v.major, v.minor) {
        (3, 6) => "PROJCRS[",
        _ => "{\n  \"$schema\": \"https://proj.org/schemas/",
    };
    assert!(t.len() == 1 && t[0].starts_with(head), "{t:?}");
    if head.starts_with('{') {
        assert!(t[0].contains("\"type\": \"ProjectedCRS\""), "{t:?}");
    }
    let t = texts(&srs(WEB)).unwrap();
    assert_eq!(t[0], "EPSG:3857");
    assert!(t[1].starts_with("+proj=merc"), "{t:?}");
}
