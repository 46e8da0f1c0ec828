//! gdalwarp's flags read as gdalwarp reads them, and the docs and the help
//! naming every one.

use super::*;

fn args(line: &[&str]) -> Vec<String> {
    line.iter().map(|s| s.to_string()).collect()
}

fn warp(line: &[&str]) -> Warp {
    parse(&args(line)).unwrap_or_else(|e| panic!("{line:?}: {e:?}"))
}

fn problems(line: &[&str]) -> Vec<String> {
    parse(&args(line)).expect_err("refused")
}

#[test]
fn multi_value_flags_take_their_values_in_any_case_and_order() {
    let w = warp(&[
        "in.tif",
        "-TR",
        "30",
        "-30",
        "-t_srs",
        "EPSG:3857",
        "-te",
        "-180",
        "-85",
        "180",
        "85",
        "-ts",
        "0",
        "512",
        "b.tif",
        "-r",
        "cubic",
        "out",
    ]);
    assert_eq!(w.inputs, ["in.tif", "b.tif"]);
    assert_eq!(w.outdir, "out");
    assert_eq!(
        w.reproject.lines(),
        "resolution = [30.0, 30.0]\ncrs = \"EPSG:3857\"\n\
         extent = [-180.0, -85.0, 180.0, 85.0]\nsize = [0, 512]\nresampling = \"cubic\"\n"
    );
}

#[test]
fn repeated_options_and_quoted_nodata_are_read_as_gdalwarp_reads_them() {
    let w = warp(&[
        "-t_srs",
        "EPSG:4326",
        "-srcnodata",
        "0 0 0",
        "-dstnodata",
        "None",
        "-wo",
        "INIT_DEST=NO_DATA",
        "-wo",
        "UNIFIED_SRC_NODATA=YES",
        "-to",
        "RPC_DEM=dem.tif",
        "-co",
        "COMPRESS=DEFLATE",
        "-co",
        "PREDICTOR=2",
        "-oo",
        "NUM_THREADS=1",
        "-if",
        "GTiff",
        "-if",
        "PNG",
        "-b",
        "3",
        "-b",
        "1",
        "-refine_gcps",
        "0.5",
        "4",
        "-order",
        "2",
        "-wm",
        "500",
        "-ovr",
        "1",
        "-overwrite",
        "-of",
        "cog",
        "in.tif",
        "out",
    ]);
    assert_eq!(w.reproject.get("src_nodata").unwrap(), "\"0 0 0\"");
    assert_eq!(w.reproject.get("dst_nodata").unwrap(), "\"None\"");
    assert_eq!(
        w.reproject.get("warp_options").unwrap(),
        "{ INIT_DEST = \"NO_DATA\", UNIFIED_SRC_NODATA = \"YES\" }"
    );
    assert_eq!(
        w.reproject.get("transformer_options").unwrap(),
        "{ RPC_DEM = \"dem.tif\" }"
    );
    assert_eq!(w.reproject.get("bands").unwrap(), "[3, 1]");
    assert_eq!(w.reproject.get("refine_gcps").unwrap(), "[0.5, 4.0]");
    assert_eq!(w.reproject.get("transformer").unwrap(), "\"polynomial\"");
    assert_eq!(w.reproject.get("order").unwrap(), "2");
    assert_eq!(w.reproject.get("warp_memory").unwrap(), "\"500MiB\"");
    assert_eq!(w.reproject.get("overview").unwrap(), "1");
    assert_eq!(
        w.write.get("creation_options").unwrap(),
        "{ COMPRESS = \"DEFLATE\", PREDICTOR = \"2\" }"
    );
    assert_eq!(w.write.get("format").unwrap(), "\"COG\"");
    assert_eq!(w.write.get("exists").unwrap(), "\"overwrite\"");
    assert_eq!(w.decode.get("drivers").unwrap(), "[\"GTiff\", \"PNG\"]");
    assert_eq!(
        w.decode.get("open_options").unwrap(),
        "{ NUM_THREADS = \"1\" }"
    );
    assert_eq!(w.inputs, ["in.tif"]);
}

#[test]
fn refine_gcps_takes_a_second_value_only_when_it_is_a_number() {
    let w = warp(&["-t_srs", "EPSG:4326", "-refine_gcps", "2", "in.tif", "out"]);
    assert_eq!(w.reproject.get("refine_gcps").unwrap(), "[2.0]");
    assert_eq!(w.inputs, ["in.tif"]);
}

#[test]
fn warp_memory_is_megabytes_below_10000_and_bytes_above() {
    assert_eq!(warp_memory("64").unwrap(), "\"64MiB\"");
    assert_eq!(warp_memory("0.5").unwrap(), "524288");
    assert_eq!(warp_memory("268435456").unwrap(), "268435456");
    assert!(warp_memory("1GB").is_err());
}

#[test]
fn speed_only_flags_are_taken_and_left_out() {
    let w = warp(&[
        "-multi",
        "-wo",
        "NUM_THREADS=ALL_CPUS",
        "-q",
        "-t_srs",
        "EPSG:3857",
        "in.tif",
        "out",
    ]);
    assert!(w.reproject.get("warp_options").is_none());
    assert_eq!(w.left_out.len(), 2, "{:?}", w.left_out);
    assert!(w.left_out[0].starts_with("-multi: left out"));
    assert!(w.quiet);
}

#[test]
fn flags_warpline_cannot_honour_are_refused_by_name_all_at_once() {
    let p = problems(&[
        "-t_srs",
        "EPSG:3857",
        "-doo",
        "X=1",
        "-setci",
        "-dstband",
        "2",
        "in.tif",
        "out",
    ]);
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p[0].starts_with("-doo is not supported: "), "{p:?}");
    assert!(p[1].starts_with("-setci is not supported: "), "{p:?}");
    assert!(p[2].starts_with("-dstband is not supported: "), "{p:?}");
    let p = problems(&["-t_srs", "EPSG:3857", "-foo", "1", "in.tif", "out"]);
    assert_eq!(
        p,
        ["-foo: not a gdalwarp option warpline knows (`warpline warp --help` lists them)"]
    );
}

#[test]
fn values_of_the_wrong_form_or_count_are_refused() {
    let p = problems(&["-t_srs", "EPSG:3857", "-tr", "30", "x", "in.tif", "out"]);
    assert_eq!(p, ["-tr 30 x: \"x\" is not a number"]);
    let p = problems(&["-t_srs", "EPSG:3857", "in.tif", "out", "-te", "1", "2"]);
    assert_eq!(p, ["-te takes 4 values"]);
    let p = problems(&["-t_srs", "EPSG:3857", "-of", "PNG", "in.tif", "out"]);
    assert!(p[0].contains("GTiff or COG"), "{p:?}");
    let p = problems(&[
        "-t_srs",
        "EPSG:3857",
        "-co",
        "A=1",
        "-co",
        "a=2",
        "in.tif",
        "out",
    ]);
    assert!(p[0].contains("given twice"), "{p:?}");
}

#[test]
fn the_target_crs_an_input_and_a_directory_are_required() {
    let p = problems(&["in.tif", "out"]);
    assert!(p[0].starts_with("-t_srs is required"), "{p:?}");
    let p = problems(&["-t_srs", "EPSG:3857", "out"]);
    assert!(p[0].contains("INPUTS... OUTDIR"), "{p:?}");
    let p = problems(&["-t_srs", "EPSG:3857", "in.tif", "out.tif"]);
    assert!(p[0].contains("one output per input"), "{p:?}");
}

/// The text of docs/pipeline.md's `warpline warp` section.
fn reference_section() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/pipeline.md"))
        .unwrap();
    let start = doc
        .find("### `warpline warp`")
        .expect("a `warpline warp` section");
    let rest = &doc[start + 3..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
}

#[test]
fn the_reference_and_the_help_name_every_flag_and_its_key() {
    let section = reference_section();
    let help = crate::cli::args::WARP_HELP;
    for f in FLAGS {
        assert!(
            section.contains(&format!("`{}", f.name)),
            "docs/pipeline.md's warp table lacks {}",
            f.name
        );
        assert!(help.contains(f.name), "warp --help lacks {}", f.name);
        for key in f.key.split([' ', ',']).filter(|k| k.contains('.')) {
            let name = key.rsplit('.').next().unwrap_or(key);
            assert!(
                section.contains(name),
                "the docs lack {}'s key {name}",
                f.name
            );
        }
    }
    for (name, ..) in REFUSED {
        assert!(
            section.contains(&format!("`{name}`")),
            "the docs lack {name}"
        );
        assert!(help.contains(name), "warp --help lacks {name}");
    }
}
