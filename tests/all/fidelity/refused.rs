//! Inputs whose metadata or archive would make GDAL open other files are
//! refused, with a message naming the input; an archive is found by its
//! bytes whatever its name.

use std::path::Path;

use super::{data, data_and_work, gdal, s, zip_stored};
use crate::common::{raster_pipeline, run};

/// Runs one input through the raster pipeline; returns (done, messages).
fn one(input: &str, decode: &str, out: &Path) -> (u64, Vec<String>) {
    let toml = raster_pipeline(
        &[input.to_owned()],
        "crs = \"EPSG:3857\"",
        &format!("dir = {:?}", s(out)),
        1,
    )
    .replace(
        "[stages.decode]\nkind = \"decode\"",
        &format!("[stages.decode]\nkind = \"decode\"\n{decode}"),
    );
    let report = run(&toml);
    let messages = report.failures.iter().map(|f| f.message.clone()).collect();
    (report.items.done, messages)
}

/// PAM metadata naming `file` as the overview file (what GDAL would open).
fn overview_file_pam(file: &Path) -> String {
    format!(
        "<PAMDataset><Metadata domain=\"OVERVIEWS\"><MDI key=\"OVERVIEW_FILE\">{}</MDI></Metadata></PAMDataset>",
        s(file)
    )
}

/// Zips `entries` in `work`, runs its member `a.tif`, and checks it is
/// refused with a message containing `expected`.
fn member_is_refused(work: &Path, entries: &[(&str, Vec<u8>)], expected: &str) {
    let zip = work.join("x.zip");
    std::fs::write(&zip, zip_stored(entries)).unwrap();
    let (done, messages) = one(&format!("{}!/a.tif", s(&zip)), "", &work.join("out"));
    assert_eq!(done, 0, "{messages:?}");
    assert!(messages[0].contains(expected), "{messages:?}");
}

#[test]
fn metadata_naming_an_overview_file_is_refused() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let secret = work.path().join("secret.tif");
    std::fs::copy(data.join("red.tif"), &secret).unwrap();
    let input = work.path().join("x.tif");
    std::fs::copy(data.join("RGB.byte.tif"), &input).unwrap();
    std::fs::write(
        work.path().join("x.tif.aux.xml"),
        overview_file_pam(&secret),
    )
    .unwrap();
    let (done, messages) = one(&s(&input), "", &work.path().join("out"));
    assert_eq!(done, 0);
    assert!(
        messages[0].starts_with("x:") && messages[0].contains("names an overview file"),
        "{messages:?}"
    );
}

#[test]
fn an_overview_in_an_archive_that_is_not_a_tiff_is_refused() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    // A VRT "overview" beside the member, naming a local file.
    let vrt = work.path().join("a.tif.ovr");
    gdal(
        "gdal_translate",
        &["-q", "-of", "VRT", &s(&data.join("red.tif")), &s(&vrt)],
    );
    let entries = [
        ("a.tif", std::fs::read(data.join("red.tif")).unwrap()),
        ("a.tif.ovr", std::fs::read(&vrt).unwrap()),
    ];
    member_is_refused(
        work.path(),
        &entries,
        "a.tif.ovr in the archive is not a TIFF",
    );
}

#[test]
fn a_zip_is_known_by_its_bytes_whatever_its_name() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let bin = work.path().join("download.bin");
    let entries = [("rgb.tif", std::fs::read(data.join("RGB.byte.tif")).unwrap())];
    std::fs::write(&bin, zip_stored(&entries)).unwrap();
    let (done, messages) = one(&s(&bin), "", &work.path().join("out"));
    assert_eq!(done, 1, "{messages:?}");
}

#[test]
fn an_overview_in_an_archive_whose_metadata_names_another_file_is_refused() {
    let Some(data) = data() else { return };
    let secret = data.join("RGB.byte.tif");
    let pam = overview_file_pam(&secret);
    let entries = [
        ("a.tif", std::fs::read(data.join("red.tif")).unwrap()),
        (
            "a.tif.ovr",
            std::fs::read(data.join("red.tif.ovr")).unwrap(),
        ),
        ("a.tif.ovr.aux.xml", pam.into_bytes()),
    ];
    let work = tempfile::tempdir().unwrap();
    member_is_refused(work.path(), &entries, "names an overview file");
}

#[test]
fn a_zip_of_one_raster_and_its_metadata_opens_the_raster() {
    let Some((data, work)) = data_and_work() else {
        return;
    };
    let zip = work.path().join("scene.zip");
    let pam = "<PAMDataset><Metadata><MDI key=\"SENSOR\">ETM+</MDI></Metadata></PAMDataset>";
    let entries = [
        ("rgb.tif", std::fs::read(data.join("RGB.byte.tif")).unwrap()),
        ("rgb.tif.aux.xml", pam.as_bytes().to_vec()),
        ("README.txt", b"a scene".to_vec()),
    ];
    std::fs::write(&zip, zip_stored(&entries)).unwrap();
    let out = work.path().join("out");
    let (done, messages) = one(&s(&zip), "", &out);
    assert_eq!(done, 1, "{messages:?}");
    // The metadata beside the raster in the zip was read with it.
    let written = gdal::Dataset::open(out.join("scene.tif")).unwrap();
    assert_eq!(
        gdal::Metadata::metadata_item(&written, "SENSOR", "").as_deref(),
        Some("ETM+")
    );
}
