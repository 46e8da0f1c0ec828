//! What is written: per-band nodata, and the side files GDAL writes.

use gdal::Dataset;

use super::{data_and_work, s, same_as_gdalwarp};
use crate::common::{raster_pipeline, run};

#[test]
fn per_band_nodata_is_taken_as_gdalwarp_takes_it_and_never_collapsed() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let rgb = s(&data.join("RGB.byte.tif"));
    same_as_gdalwarp(
        work.path(),
        "one",
        &rgb,
        "",
        "crs = \"EPSG:3857\"\ndst_nodata = [7, 7, 7]",
        &["-t_srs", "EPSG:3857", "-dstnodata", "7 7 7"],
    );
    let out_dir = work.path().join("three");
    let toml = raster_pipeline(
        &[rgb],
        "crs = \"EPSG:3857\"\ndst_nodata = \"1 2 3\"",
        &format!("dir = {:?}", s(&out_dir)),
        1,
    );
    let report = run(&toml);
    assert_eq!(report.items.failed, 1, "{report}");
    let m = &report.failures[0].message;
    assert!(
        m.contains("different nodata values (1, 2, 3)") && m.contains("GTiff"),
        "{m}"
    );
    let left: Vec<_> = std::fs::read_dir(&out_dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing is left: {left:?}");
}

#[test]
fn side_files_gdal_writes_are_renamed_with_the_output_and_nothing_else_is_left() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let out_dir = work.path().join("out");
    // A plain GeoTIFF profile has no tag for nodata: GDAL puts it in a
    // .aux.xml beside the file.
    let toml = raster_pipeline(
        &[s(&data.join("RGB.byte.tif"))],
        "crs = \"EPSG:3857\"",
        &format!(
            "dir = {:?}\ncreation_options = {{ PROFILE = \"GeoTIFF\", TFW = \"YES\" }}",
            s(&out_dir)
        ),
        1,
    );
    for round in 0..2 {
        let report = run(&toml.replace("[stages.write]", "[stages.write]\nexists = \"overwrite\""));
        assert_eq!(report.items.done, 1, "round {round}: {report}");
        let mut names: Vec<String> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["RGB.byte.tfw", "RGB.byte.tif", "RGB.byte.tif.aux.xml"],
            "round {round}"
        );
    }
    let out = Dataset::open(out_dir.join("RGB.byte.tif")).unwrap();
    assert_eq!(out.rasterband(1).unwrap().no_data_value(), Some(0.0));
}

#[test]
fn a_cog_equals_gdalwarp_to_gtiff_then_gdal_translate_to_cog() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let out_dir = work.path().join("cog");
    let toml = raster_pipeline(
        &[s(&data.join("RGB.byte.tif"))],
        "crs = \"EPSG:3857\"\nresampling = \"cubic\"",
        &format!("dir = {:?}\nformat = \"COG\"", s(&out_dir)),
        1,
    );
    assert_eq!(run(&toml).items.done, 1);
    let ours = out_dir.join("RGB.byte.tif");
    let warped = work.path().join("warped.tif");
    crate::common::gdalwarp(
        &[
            "-t_srs".into(),
            "EPSG:3857".into(),
            "-r".into(),
            "cubic".into(),
        ],
        &data.join("RGB.byte.tif"),
        &warped,
    );
    let theirs = work.path().join("theirs.tif");
    super::gdal(
        "gdal_translate",
        &["-q", "-of", "COG", &s(&warped), &s(&theirs)],
    );
    crate::common::assert_same_raster(&ours, &theirs, "COG");
    // The overviews the COG driver made are the same too.
    let (a, b) = (
        Dataset::open(&ours).unwrap(),
        Dataset::open(&theirs).unwrap(),
    );
    for i in 1..=a.raster_count() {
        let (x, y) = (a.rasterband(i).unwrap(), b.rasterband(i).unwrap());
        assert_eq!(x.overview_count().unwrap(), y.overview_count().unwrap());
        assert!(
            x.overview_count().unwrap() > 0,
            "a COG this size has overviews"
        );
        for o in 0..x.overview_count().unwrap() as usize {
            let (p, q) = (x.overview(o).unwrap(), y.overview(o).unwrap());
            let size = p.size();
            let read = |b: &gdal::raster::RasterBand| {
                b.read_as::<u8>((0, 0), size, size, None)
                    .unwrap()
                    .data()
                    .to_vec()
            };
            assert_eq!(read(&p), read(&q), "band {i} overview {o}");
        }
    }
}

#[test]
fn a_cutline_bounds_and_crops_the_output_as_gdalwarp_does() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let cut = work.path().join("cut.geojson");
    std::fs::write(
        &cut,
        r#"{"type": "FeatureCollection",
 "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::32618"}},
 "features": [{"type": "Feature", "properties": {"name": "a"},
   "geometry": {"type": "Polygon", "coordinates":
     [[[150000, 2650000], [300000, 2700000], [250000, 2800000], [150000, 2650000]]]}}]}"#,
    )
    .unwrap();
    let c = s(&cut);
    same_as_gdalwarp(
        work.path(),
        "cut",
        &s(&data.join("RGB.byte.tif")),
        "",
        &format!("crs = \"EPSG:3857\"\ncutline = {c:?}\ncrop_to_cutline = true"),
        &["-t_srs", "EPSG:3857", "-cutline", &c, "-crop_to_cutline"],
    );
}

/// Warps `pieces` as one mosaic named `id` with warpline (EPSG:3857,
/// bilinear) into `work/mosaic/`, and with `gdalwarp` into
/// `work/theirs.tif`, and asserts the two are the same raster.
fn mosaic_equals_gdalwarp(work: &std::path::Path, pieces: &[String], id: &str) {
    let out_dir = work.join("mosaic");
    let toml = raster_pipeline(
        &[],
        "crs = \"EPSG:3857\"\nresampling = \"bilinear\"",
        &format!("dir = {:?}", s(&out_dir)),
        1,
    )
    .replace(
        "kind = \"inline\"\ninputs = []",
        &format!(
            "kind = \"mosaic\"\nid = \"{id}\"\ninputs = {}",
            crate::common::toml_list(pieces)
        ),
    );
    let report = run(&toml);
    assert_eq!((report.items.total, report.items.done), (1, 1), "{report}");
    let theirs = work.join("theirs.tif");
    let args = ["-t_srs", "EPSG:3857", "-r", "bilinear"].map(String::from);
    crate::common::gdalwarp_many(&args, pieces, &theirs);
    crate::common::assert_same_raster(&out_dir.join(format!("{id}.tif")), &theirs, "mosaic");
}

/// A mosaic whose first input shares the target's datum and whose second
/// is on NAD27: gdalwarp gives each input's transformer its own area of
/// interest, where PROJ picks NAD27's datum shift, so warpline may share
/// one area only when every input allows it. (Over the Gulf coast at
/// 87°W, 30°N, PROJ's shift for the whole world is 5 m off the one for
/// the input's own area: sharing would show in the pixels.)
#[test]
fn a_mosaic_of_two_datums_warps_each_input_as_gdalwarp_does() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let rgb = s(&data.join("RGB.byte.tif"));
    let a = s(&work.path().join("a.tif"));
    let b = s(&work.path().join("b.tif"));
    // Real pixels placed there: WGS 84 / UTM 16N, then NAD27 / UTM 16N.
    for (piece, win, srs, ullr) in [
        (
            &a,
            ["0", "0", "200", "200"],
            "EPSG:32616",
            ["480000", "3310000", "486000", "3304000"],
        ),
        (
            &b,
            ["200", "200", "200", "200"],
            "EPSG:26716",
            ["490000", "3305000", "496000", "3299000"],
        ),
    ] {
        let mut args = vec!["-q", "-srcwin"];
        args.extend(win);
        args.extend(["-a_srs", srs, "-a_ullr"]);
        args.extend(ullr);
        args.extend([rgb.as_str(), piece.as_str()]);
        super::gdal("gdal_translate", &args);
    }
    mosaic_equals_gdalwarp(work.path(), &[a, b], "two");
}

#[test]
fn three_inputs_warp_into_one_output_as_gdalwarp_makes_a_mosaic() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let rgb = s(&data.join("RGB.byte.tif"));
    // Three overlapping pieces: where they overlap, the later one wins.
    let mut pieces = Vec::new();
    for (name, win) in [
        ("a.tif", ["0", "0", "400", "400"]),
        ("b.tif", ["350", "0", "441", "400"]),
        ("c.tif", ["200", "300", "400", "418"]),
    ] {
        let piece = work.path().join(name);
        let mut args = vec!["-q", "-srcwin"];
        args.extend(win);
        let (from, to) = (rgb.clone(), s(&piece));
        args.extend([from.as_str(), to.as_str()]);
        super::gdal("gdal_translate", &args);
        pieces.push(to);
    }
    mosaic_equals_gdalwarp(work.path(), &pieces, "valley");
    let theirs = work.path().join("theirs.tif");
    // Not one input's warp: the mosaic is larger than any piece's.
    let size = |p: &std::path::Path| Dataset::open(p).unwrap().raster_size();
    let piece = work.path().join("a-alone.tif");
    crate::common::gdalwarp(
        &["-t_srs".into(), "EPSG:3857".into()],
        &work.path().join("a.tif"),
        &piece,
    );
    assert!(size(&theirs).0 > size(&piece).0);
}
