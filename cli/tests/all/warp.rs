//! `warpline warp` (issue 37, item 5): gdalwarp's command line as a
//! pipeline. Its outputs are gdalwarp's with the same flags on real
//! rasters; a flag it cannot honour is refused by name; the pipeline it
//! prints validates and `warpline run` makes the same outputs from it; an
//! `@LIST` works as the files it lists; and docs/pipeline.md's example
//! prints what the reference shows.

use crate::binary::{said, warpline};
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{assert_same_metadata, assert_same_raster, gdalwarp, hashes, sample_files};
use gdal::{Dataset, Metadata};

/// The issue's command line (without inputs and directory).
const FLAGS: [&str; 10] = [
    "-t_srs",
    "EPSG:3857",
    "-r",
    "cubic",
    "-tr",
    "30",
    "30",
    "-co",
    "COMPRESS=DEFLATE",
    "-overwrite",
];

/// `warpline warp ARGS`, finished.
fn warp<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    warpline().arg("warp").args(args).output().unwrap()
}

fn with(flags: &[&str], rest: &[&Path]) -> Vec<String> {
    let mut v: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    v.extend(rest.iter().map(|p| p.display().to_string()));
    v
}

fn succeeded(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", said(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn warp_equals_gdalwarp_with_the_same_flags_on_real_rasters() {
    let Some(rasters) = common::real_rasters() else {
        return;
    };
    // RGB.byte.tif is left out: at 30 m it is an 8300 x 7500 output that
    // takes gdalwarp alone a minute on a shared 2-core machine.
    let inputs: Vec<&Path> = rasters[1..].iter().map(PathBuf::as_path).collect();
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let report = work.path().join("report.json");
    let mut args = with(&FLAGS, &inputs);
    args.push(out.display().to_string());
    args.extend(["--report".to_owned(), report.display().to_string()]);
    succeeded(&warp(&args));
    let json = common::read_json(&report);
    assert_eq!(json["pipeline"], "warp");
    assert_eq!(json["items"]["done"], inputs.len(), "{json:#}");

    let gdal_flags: Vec<String> = FLAGS.iter().map(|s| s.to_string()).collect();
    for input in &inputs {
        let stem = input.file_stem().unwrap().to_string_lossy();
        let ours = out.join(format!("{stem}.tif"));
        let theirs = work.path().join(format!("{stem}-gdalwarp.tif"));
        gdalwarp(&gdal_flags, input, &theirs);
        assert_same_raster(&ours, &theirs, &stem);
        assert_same_metadata(&ours, &theirs, &stem);
        let structure = |p: &Path| Dataset::open(p).unwrap().metadata_domain("IMAGE_STRUCTURE");
        assert_eq!(
            structure(&ours),
            structure(&theirs),
            "{stem}: IMAGE_STRUCTURE"
        );
        assert!(
            structure(&ours)
                .unwrap_or_default()
                .contains(&"COMPRESSION=DEFLATE".to_owned()),
            "{stem}: -co COMPRESS=DEFLATE"
        );
    }
}

#[test]
fn flags_warpline_cannot_honour_are_refused_by_name_with_exit_code_2() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let tile = &sample_files(&work.path().join("tiles"), 1, 16)[0];
    let run = warp(&with(
        &["-t_srs", "EPSG:3857", "-doo", "X=1", "-setci"],
        &[tile, &out],
    ));
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("error: -doo is not supported: "), "{err}");
    assert!(err.contains("error: -setci is not supported: "), "{err}");
    assert!(!out.exists(), "nothing runs");

    let run = warp(&with(&["-t_srs", "EPSG:3857", "-wat", "1"], &[tile, &out]));
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    assert!(
        said(&run).contains("-wat: not a gdalwarp option"),
        "{}",
        said(&run)
    );
    // A key the stage refuses names the flag it came from.
    let run = warp(&with(
        &["-t_srs", "EPSG:3857", "-r", "bicubic"],
        &[tile, &out],
    ));
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    let err = said(&run);
    assert!(
        err.contains("stages.reproject.resampling: unknown method"),
        "{err}"
    );
    assert!(
        err.contains("(stages.reproject.resampling is -r's key)"),
        "{err}"
    );
}

/// The flags of the tests on sample tiles: every output differs from its
/// input, and nothing depends on the tiles' CRSs.
const SAMPLE_FLAGS: [&str; 8] = [
    "-t_srs",
    "EPSG:3857",
    "-r",
    "bilinear",
    "-dstnodata",
    "0",
    "-co",
    "COMPRESS=DEFLATE",
];

#[test]
fn the_printed_pipeline_validates_and_runs_to_the_same_outputs() {
    let work = tempfile::tempdir().unwrap();
    let tiles = work.path().join("tiles");
    sample_files(&tiles, 1, 64);
    let pattern = tiles.join("*.tif");
    let direct = work.path().join("direct");
    let printed = work.path().join("printed");
    let out = warp(&with(&SAMPLE_FLAGS, &[&pattern, &direct]));
    assert!(
        succeeded(&out).contains("4 items, 4 done"),
        "{}",
        said(&out)
    );

    let mut args = with(&SAMPLE_FLAGS, &[&pattern, &printed]);
    args.push("--print-pipeline".into());
    let text = succeeded(&warp(&args));
    assert!(text.contains("kind = \"glob\""), "{text}");
    assert!(!printed.exists(), "printing runs nothing");
    let file = work.path().join("warp.toml");
    std::fs::write(&file, &text).unwrap();
    let check = warpline().arg("validate").arg(&file).output().unwrap();
    assert!(succeeded(&check).contains("valid"), "{}", said(&check));
    succeeded(&warpline().arg("run").arg(&file).output().unwrap());

    let (a, b) = (hashes(&direct), hashes(&printed));
    assert_eq!(a.len(), 4, "{a:?}");
    assert_eq!(a, b, "warpline warp and warpline run of its pipeline");
}

#[test]
fn an_at_list_reads_its_inputs_as_the_files_it_lists() {
    let work = tempfile::tempdir().unwrap();
    let tiles = sample_files(&work.path().join("tiles"), 1, 64);
    let list = work.path().join("list.txt");
    let lines: Vec<String> = tiles.iter().map(|p| p.display().to_string()).collect();
    std::fs::write(&list, format!("# the sample tiles\n{}\n", lines.join("\n"))).unwrap();
    let (listed, given) = (work.path().join("listed"), work.path().join("given"));

    let at_list = format!("@{}", list.display());
    let mut args = with(&SAMPLE_FLAGS, &[Path::new(&at_list), &listed]);
    args.extend(["--progress".into(), "off".into()]);
    let out = warp(&args);
    assert!(
        succeeded(&out).contains("4 items, 4 done"),
        "{}",
        said(&out)
    );
    let mut files: Vec<&Path> = tiles.iter().map(PathBuf::as_path).collect();
    files.push(&given);
    succeeded(&warp(&with(&SAMPLE_FLAGS, &files)));
    assert_eq!(hashes(&listed).len(), 4);
    assert_eq!(hashes(&listed), hashes(&given));

    let mut args = with(&SAMPLE_FLAGS, &[Path::new(&at_list), &listed]);
    args.push("--print-pipeline".into());
    let text = succeeded(&warp(&args));
    let source = format!("kind = \"list\"\npath = {:?}\n", list.display().to_string());
    assert!(text.contains(&source), "{text}");
    // Again: every output exists and is skipped (no -overwrite).
    let out = warp(&with(&SAMPLE_FLAGS, &[Path::new(&at_list), &listed]));
    assert!(
        succeeded(&out).contains("0 done, 4 skipped"),
        "{}",
        said(&out)
    );
}

/// Splits a command line as a POSIX shell does, for the plain and
/// single-quoted words of the reference's example.
fn shell_split(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => (quoted, any) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

#[test]
fn the_references_example_prints_the_pipeline_it_shows() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/pipeline.md"))
        .unwrap();
    let at = doc.find("```sh\nwarpline warp ").expect("the example");
    let block = &doc[at + "```sh\n".len()..];
    let command = &block[..block.find("\n```").unwrap()];
    let after = &block[block.find("```toml\n").unwrap() + "```toml\n".len()..];
    let shown = &after[..after.find("```").unwrap()];
    let words = shell_split(command);
    assert_eq!(words[..2], ["warpline", "warp"], "{command}");
    // In an empty directory: the example names no file of the repository.
    let dir = tempfile::tempdir().unwrap();
    let out = warpline()
        .args(&words[1..])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(succeeded(&out), shown, "docs/pipeline.md's example");
}
