//! Masks, alpha, overviews and metadata: what GDAL reads beside the pixels.

use std::process::Command;

use gdal::{Dataset, Metadata};

use super::{data_and_work, gdal, pixels_differ, s, same_as_gdalwarp};
use crate::common::gdalwarp;

#[test]
fn an_internal_mask_is_read_as_gdalwarp_reads_it() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let masked = work.path().join("masked.tif");
    let out = Command::new("gdal_translate")
        .args([
            "-q",
            "-co",
            "COMPRESS=JPEG",
            "-a_nodata",
            "none",
            "-mask",
            "1",
        ])
        .arg(data.join("RGB.byte.tif"))
        .arg(&masked)
        .env("GDAL_TIFF_INTERNAL_MASK", "YES")
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    assert!(
        !work.path().join("masked.tif.msk").exists(),
        "the mask is internal"
    );
    let ours = same_as_gdalwarp(
        work.path(),
        "masked",
        &s(&masked),
        "",
        "crs = \"EPSG:3857\"\nresampling = \"bilinear\"",
        &["-t_srs", "EPSG:3857", "-r", "bilinear"],
    );
    // The mask matters: without it gdalwarp makes other pixels.
    let stripped = work.path().join("stripped.tif");
    gdal(
        "gdal_translate",
        &["-q", "-mask", "none", &s(&masked), &s(&stripped)],
    );
    let unmasked = work.path().join("unmasked.tif");
    gdalwarp(
        &[
            "-t_srs".into(),
            "EPSG:3857".into(),
            "-r".into(),
            "bilinear".into(),
        ],
        &stripped,
        &unmasked,
    );
    assert!(pixels_differ(&ours, &unmasked), "the mask changed nothing");
}

#[test]
fn an_external_mask_and_alpha_bands_are_read_as_gdalwarp_reads_them() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    for (tag, file) in [
        ("msk", "RGB2.byte.tif"),
        ("alpha", "alpha.tif"),
        ("rgba", "RGBA.uint16.tif"),
    ] {
        same_as_gdalwarp(
            work.path(),
            tag,
            &s(&data.join(file)),
            "",
            "crs = \"EPSG:4326\"\nresampling = \"cubic\"",
            &["-t_srs", "EPSG:4326", "-r", "cubic"],
        );
    }
    same_as_gdalwarp(
        work.path(),
        "dstalpha",
        &s(&data.join("RGB.byte.tif")),
        "",
        "crs = \"EPSG:3857\"\ndst_alpha = true",
        &["-t_srs", "EPSG:3857", "-dstalpha"],
    );
}

#[test]
fn overviews_are_used_as_gdalwarp_uses_them() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let copy = work.path().join("ovr.tif");
    std::fs::copy(data.join("RGB.byte.tif"), &copy).unwrap();
    gdal(
        "gdaladdo",
        &["-q", "-r", "average", &s(&copy), "2", "4", "8"],
    );
    let down = "crs = \"EPSG:32618\"\nresampling = \"bilinear\"\nresolution = 2400";
    let args = [
        "-t_srs",
        "EPSG:32618",
        "-r",
        "bilinear",
        "-tr",
        "2400",
        "2400",
    ];
    let auto = same_as_gdalwarp(work.path(), "auto", &s(&copy), "", down, &args);
    let none = same_as_gdalwarp(
        work.path(),
        "none",
        &s(&copy),
        "",
        &format!("{down}\noverview = \"NONE\""),
        &[&args[..], &["-ovr", "NONE"]].concat(),
    );
    assert!(pixels_differ(&auto, &none), "the overviews changed nothing");
    same_as_gdalwarp(
        work.path(),
        "level",
        &s(&copy),
        "",
        &format!("{down}\noverview = 1"),
        &[&args[..], &["-ovr", "1"]].concat(),
    );
    // External overviews (.ovr beside the file).
    same_as_gdalwarp(
        work.path(),
        "external",
        &s(&data.join("red.tif")),
        "",
        "crs = \"EPSG:4326\"\nresampling = \"average\"\nresolution = 4",
        &["-t_srs", "EPSG:4326", "-r", "average", "-tr", "4", "4"],
    );
}

#[test]
fn dataset_and_band_metadata_are_kept_as_gdalwarp_keeps_them() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let meta = work.path().join("meta.tif");
    gdal(
        "gdal_translate",
        &[
            "-q",
            "-mo",
            "AREA_OR_POINT=Point",
            "-mo",
            "SENSOR=ETM+",
            "-a_scale",
            "2",
            "-a_offset",
            "1",
            &s(&data.join("RGB.byte.tif")),
            &s(&meta),
        ],
    );
    // Units and descriptions from PAM metadata beside the file, as GDAL
    // reads them (and warpline fetches them with a local input).
    std::fs::write(
        work.path().join("meta.tif.aux.xml"),
        r#"<PAMDataset>
  <PAMRasterBand band="1"><Description>red</Description><UnitType>m</UnitType>
    <Metadata><MDI key="WAVELENGTH">0.66</MDI></Metadata></PAMRasterBand>
  <PAMRasterBand band="2"><Description>green</Description></PAMRasterBand>
</PAMDataset>"#,
    )
    .unwrap();
    same_as_gdalwarp(
        work.path(),
        "meta",
        &s(&meta),
        "",
        "crs = \"EPSG:3857\"",
        &["-t_srs", "EPSG:3857"],
    );
    let ours = Dataset::open(work.path().join("meta/meta.tif")).unwrap();
    assert_eq!(
        ours.metadata_item("AREA_OR_POINT", "").as_deref(),
        Some("Point")
    );
    assert_eq!(ours.rasterband(1).unwrap().unit(), "m");
    same_as_gdalwarp(
        work.path(),
        "nomd",
        &s(&meta),
        "",
        "crs = \"EPSG:3857\"\nmetadata = false",
        &["-t_srs", "EPSG:3857", "-nomd"],
    );
}
