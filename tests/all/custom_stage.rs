//! The custom raster stage of examples/ndvi.rs, run as a user runs it, and
//! its output compared with the same NDVI computed here and warped by
//! gdalwarp.

use crate::common;

#[path = "../../examples/ndvi.rs"]
mod ndvi;

use gdal::raster::Buffer;
use gdal::Dataset;

/// The NDVI of `input`'s bands 3 and 1 as a Float32 GeoTIFF at `out`.
fn ndvi_by_hand(input: &std::path::Path, out: &std::path::Path) {
    let src = Dataset::open(input).unwrap();
    let (w, h) = src.raster_size();
    let band = |i: usize| {
        let b = src.rasterband(i).unwrap();
        let nodata = b.no_data_value();
        let v = b.read_as::<f32>((0, 0), (w, h), (w, h), None).unwrap();
        (v.data().to_vec(), nodata)
    };
    let ((a, na), (b, nb)) = (band(3), band(1));
    let is = |v: f32, n: Option<f64>| n.is_some_and(|n| f64::from(v) == n);
    let data: Vec<f32> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| {
            if is(x, na) || is(y, nb) || x + y == 0.0 {
                f32::NAN
            } else {
                (x - y) / (x + y)
            }
        })
        .collect();
    let gtiff = gdal::DriverManager::get_driver_by_name("GTiff").unwrap();
    let mut ds = gtiff.create_with_band_type::<f32, _>(out, w, h, 1).unwrap();
    ds.set_geo_transform(&src.geo_transform().unwrap()).unwrap();
    ds.set_projection(&src.projection()).unwrap();
    let mut band = ds.rasterband(1).unwrap();
    band.write((0, 0), (w, h), &mut Buffer::new((w, h), data))
        .unwrap();
    band.set_no_data_value(Some(f64::NAN)).unwrap();
}

#[test]
fn a_custom_ndvi_stage_runs_between_decode_and_reproject_and_equals_gdal() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let report = ndvi::run(work.path(), &out).unwrap();
    assert_eq!((report.items.done, report.items.failed), (8, 0), "{report}");
    let mut checked = 0;
    for entry in std::fs::read_dir(work.path().join("in")).unwrap() {
        let input = entry.unwrap().path();
        let name = input.file_name().unwrap().to_owned();
        let by_hand = work.path().join("by-hand.tif");
        ndvi_by_hand(&input, &by_hand);
        let theirs = work.path().join("theirs.tif");
        common::gdalwarp(
            &[
                "-t_srs".into(),
                "EPSG:3857".into(),
                "-r".into(),
                "bilinear".into(),
            ],
            &by_hand,
            &theirs,
        );
        common::assert_same_raster(&out.join(&name), &theirs, &name.to_string_lossy());
        checked += 1;
    }
    assert_eq!(checked, 8);
}
