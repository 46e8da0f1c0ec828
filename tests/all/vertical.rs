//! `vertical_shift` (gdalwarp's `-vshift` / `-novshift`): heights in a
//! compound CRS (UTM 18N + NAVD88 height in metres) warped to the same CRS
//! with NAVD88 height in US feet: a vertical change PROJ makes without a
//! grid (a unit conversion), so the pixel values change with the shift.

use crate::common;
use crate::common::{assert_same_raster, gdalwarp, one_raster_pipeline, real_rasters};
use warpline_testkit::gdal_tool;

#[test]
fn the_vertical_shift_is_gdalwarps_on_off_and_by_default() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let heights = work.path().join("heights.tif");
    let s = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let args = [
        "-q",
        "-b",
        "1",
        "-ot",
        "Float32",
        "-a_srs",
        "EPSG:32618+5703",
    ];
    gdal_tool(
        "gdal_translate",
        &[&args[..], &[&s(&data[0]), &s(&heights)]].concat(),
        &[],
    );
    let mut outputs = Vec::new();
    for (key, flag) in [
        ("vertical_shift = true", Some("-vshift")),
        ("vertical_shift = false", Some("-novshift")),
        ("", None),
    ] {
        let out = work.path().join(format!("out-{}", outputs.len()));
        let reproject = format!("crs = \"EPSG:32618+6360\"\n{key}");
        let report = common::run(&one_raster_pipeline(&heights, &reproject, &out, ""));
        assert_eq!(report.items.done, 1, "{key}: {report}");
        let theirs = work.path().join(format!("theirs-{}.tif", outputs.len()));
        let mut args = vec!["-t_srs".to_owned(), "EPSG:32618+6360".to_owned()];
        args.extend(flag.map(str::to_owned));
        gdalwarp(&args, &heights, &theirs);
        let ours = out.join("heights.tif");
        assert_same_raster(&ours, &theirs, key);
        outputs.push(ours);
    }
    // The shift changes the heights (metres to US feet), and is on by
    // default, as in gdalwarp.
    let first_row = |p: &std::path::Path| {
        let ds = gdal::Dataset::open(p).unwrap();
        let (w, _) = ds.raster_size();
        let band = ds.rasterband(1).unwrap();
        let row = band.read_as::<f32>((0, 200), (w, 1), (w, 1), None).unwrap();
        row.data()
            .iter()
            .copied()
            .fold(0f64, |a, v| a + f64::from(v))
    };
    let (shifted, unshifted, default) = (
        first_row(&outputs[0]),
        first_row(&outputs[1]),
        first_row(&outputs[2]),
    );
    assert!(unshifted > 0.0);
    assert!(
        (shifted / unshifted - 3.2808).abs() < 0.001,
        "{shifted} / {unshifted}"
    );
    assert_eq!(default, shifted);
}
