//! `warpline verify` (issue 40): the demo's outputs are all identical when
//! made again from their records; an output changed by hand is reported
//! different, saying what (pixels, metadata); an input that changed makes
//! its output "not re-derivable", naming it; `--gdalwarp` agrees with the
//! gdalwarp command; the exit codes say which.

use std::path::{Path, PathBuf};

use crate::binary::{said, warpline};
use crate::common::{self, ServedTiles};

fn verify(args: &[&str]) -> (Option<i32>, String) {
    let out = warpline().arg("verify").args(args).output().unwrap();
    (out.status.code(), said(&out))
}

#[test]
fn the_demo_outputs_are_identical_when_made_again() {
    let tiles = ServedTiles::new(2, Default::default());
    let dir = tiles.work.path().join("output");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines/demo.toml");
    let out = warpline()
        .arg("run")
        .arg(&demo)
        .args(["--progress", "off", "--set"])
        .arg(format!("source.path={}", tiles.list.display()))
        .arg("--set")
        .arg(format!("stages.write.dir={}", dir.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    let collection = dir.join("collection.json");
    let (code, text) = verify(&[collection.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(
            "verify: 8 of 8 outputs checked: 8 identical, 0 different, 0 not re-derivable"
        ),
        "{text}"
    );
    let out = warpline()
        .arg("verify")
        .args([dir.to_str().unwrap(), "--sample", "3", "--format", "json"])
        .output()
        .unwrap();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // The report is stdout's last line; the log goes to stderr.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("stdout's last line is not JSON ({e}): {text}"));
    eprintln!("{text}");
    assert_eq!(report["identical"], 3, "{report}");
    assert_eq!(report["total"], 8, "{report}");
}

/// Whether the `gdalwarp` on the PATH is the GDAL these tests link.
fn same_gdal_as_gdalwarp() -> bool {
    let out = std::process::Command::new("gdalwarp")
        .arg("--version")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    said.starts_with(&format!("GDAL {},", warpline_gdal::versions().gdal))
}

/// Local inputs warped to COGs in `out`, the run finished.
fn local_run(work: &Path) -> (Vec<PathBuf>, PathBuf) {
    let inputs = common::sample_files(&work.join("in"), 1, 64);
    let out = work.join("out");
    let toml = format!(
        r#"[pipeline]
flow = ["fetch", "decode", "reproject", "write"]
[source]
kind = "glob"
pattern = "{}/*.tif"
[stages.fetch]
kind = "fetch"
[stages.decode]
kind = "decode"
[stages.reproject]
kind = "reproject"
crs = "EPSG:4326"
resampling = "bilinear"
[stages.write]
kind = "write"
dir = {:?}
format = "COG"
creation_options = {{ COMPRESS = "DEFLATE" }}
"#,
        work.join("in").display(),
        out.display().to_string()
    );
    let pipeline = work.join("p.toml");
    std::fs::write(&pipeline, toml).unwrap();
    let run = warpline()
        .arg("run")
        .arg(&pipeline)
        .args(["--progress", "off"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", said(&run));
    (inputs, out)
}

/// Opens `path` for update and lets `f` change it.
pub(crate) fn edit(path: &Path, f: impl FnOnce(&mut gdal::Dataset)) {
    let mut ds = gdal::Dataset::open_ex(
        path,
        gdal::DatasetOptions {
            open_flags: gdal::GdalOpenFlags::GDAL_OF_UPDATE,
            // GDAL 3.12 opens a COG for update only when told the layout
            // may break (3.6 warns of an unknown option, and opens it).
            open_options: Some(&["IGNORE_COG_LAYOUT_BREAK=YES"]),
            ..Default::default()
        },
    )
    .unwrap();
    f(&mut ds);
}

#[test]
fn what_changed_is_named_and_the_exit_code_says_it() {
    let work = tempfile::tempdir().unwrap();
    let (inputs, out) = local_run(work.path());
    let out_arg = out.to_str().unwrap();
    let (code, text) = verify(&[out_arg]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("4 identical"), "{text}");
    let (code, text) = verify(&[out_arg, "--gdalwarp"]);
    if same_gdal_as_gdalwarp() {
        assert_eq!(code, Some(0), "{text}");
        assert!(text.contains("against gdalwarp: 4 identical"), "{text}");
        assert!(!text.contains("note:"), "{text}");
    } else {
        // A bundled GDAL beside the system's gdalwarp: said first, and the
        // four are compared (a pixel size may be an ulp apart).
        assert!(
            text.starts_with("note: the gdalwarp on the PATH is GDAL "),
            "{text}"
        );
        assert!(
            text.contains("4 of 4 outputs checked against gdalwarp"),
            "{text}"
        );
    }

    // One output's pixel, another's metadata, changed by hand.
    let names: Vec<String> = inputs
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let (pixel, item) = (out.join(&names[0]), out.join(&names[1]));
    edit(&pixel, |ds| {
        let mut band = ds.rasterband(1).unwrap();
        let v = band
            .read_as::<u8>((10, 10), (1, 1), (1, 1), None)
            .unwrap()
            .data()[0];
        let mut new = gdal::raster::Buffer::new((1, 1), vec![v.wrapping_add(1)]);
        band.write((10, 10), (1, 1), &mut new).unwrap();
    });
    edit(&item, |ds| {
        gdal::Metadata::set_metadata_item(ds, "EDITED", "by hand", "").unwrap()
    });
    let (code, text) = verify(&[out_arg]);
    assert_eq!(code, Some(3), "{text}");
    let line = |name: &str| {
        let at = text.find(&format!("{}", out.join(name).display())).unwrap();
        text[..at].lines().last().unwrap_or_default().to_owned() + &text[at..]
    };
    let p = line(&names[0]);
    assert!(p.starts_with("different"), "{text}");
    assert!(p.contains("pixels: band 1: 1 of"), "{text}");
    let m = line(&names[1]);
    assert!(m.starts_with("different"), "{text}");
    assert!(m.contains("metadata: dataset metadata EDITED"), "{text}");
    assert!(
        text.contains("2 identical, 2 different, 0 not re-derivable"),
        "{text}"
    );

    // An input that changed: its output is not re-derivable, the input named.
    for changed in [&pixel, &item] {
        std::fs::remove_file(changed).unwrap();
    }
    // Another raster under its name (the run succeeds: its record tells).
    std::fs::copy(&inputs[3], &inputs[2]).unwrap();
    let (code, text) = verify(&[out_arg]);
    assert_eq!(code, Some(4), "{text}");
    let shown = format!(
        "input {} changed: its ",
        std::path::absolute(&inputs[2]).unwrap().display()
    );
    assert!(text.contains(&shown), "{text}");
    assert!(
        text.contains("1 identical, 0 different, 1 not re-derivable"),
        "{text}"
    );

    // An input that is gone: named, with why it cannot be read.
    std::fs::remove_file(&inputs[3]).unwrap();
    let (code, text) = verify(&[out_arg]);
    assert_eq!(code, Some(4), "{text}");
    let gone = format!(
        "input {} cannot be read",
        std::path::absolute(&inputs[3]).unwrap().display()
    );
    assert!(text.contains(&gone), "{text}");
}
