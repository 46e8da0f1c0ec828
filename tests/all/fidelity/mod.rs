//! gdalwarp's pixels and metadata on real rasters GIS users have: masks
//! (internal and `.msk`), alpha, overviews (internal and `.ovr`), dataset
//! and band metadata, a world file, GCPs, an SRTM tile in a zip, a gzipped
//! GeoTIFF, an overridden source CRS, per-band nodata. Each input is one of
//! the shared real rasters or made from one with GDAL's own tools, and each
//! output is compared with the `gdalwarp` command with the same options.

use crate::common;
mod inputs;
mod mixed;
mod outputs;
mod pixels;
mod refused;

use std::path::{Path, PathBuf};

pub(crate) use common::assert_same_metadata;
use common::{assert_same_raster, gdalwarp, raster_pipeline, run};
use gdal::Dataset;

/// The shared real rasters' folder, or `None` (the tests say they skip).
pub(crate) fn data() -> Option<PathBuf> {
    common::real_rasters().map(|files| files[0].parent().unwrap().to_owned())
}

/// The shared real rasters' folder and a fresh work folder, or `None`
/// (the tests say they skip): what every fidelity test starts from.
pub(crate) fn data_and_work() -> Option<(PathBuf, tempfile::TempDir)> {
    Some((data()?, tempfile::tempdir().unwrap()))
}

/// Runs a GDAL command line tool; panics with its stderr on failure.
pub(crate) fn gdal(program: &str, args: &[&str]) {
    warpline_testkit::gdal_tool(program, args, &[("GDAL_PAM_ENABLED", "NO")]);
}

/// Warps `input` with warpline (reproject settings `reproject`, decode
/// settings `decode`) into `work/<tag>/`, and with `gdalwarp <args>`, and
/// asserts the two are the same raster with the same metadata. Returns
/// warpline's output.
pub(crate) fn same_as_gdalwarp(
    work: &Path,
    tag: &str,
    input: &str,
    decode: &str,
    reproject: &str,
    args: &[&str],
) -> PathBuf {
    let out_dir = work.join(tag);
    let toml = raster_pipeline(
        &[input.to_owned()],
        reproject,
        &format!("dir = {:?}", out_dir.display().to_string()),
        1,
    )
    .replace(
        "[stages.decode]\nkind = \"decode\"",
        &format!("[stages.decode]\nkind = \"decode\"\n{decode}"),
    );
    let report = run(&toml);
    assert_eq!(report.items.done, 1, "{tag}: {report}");
    let ours = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tif"))
        .unwrap();
    let theirs = work.join(format!("{tag}-gdalwarp.tif"));
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    gdalwarp(&args, Path::new(input), &theirs);
    assert_same_raster(&ours, &theirs, tag);
    assert_same_metadata(&ours, &theirs, tag);
    ours
}

pub(crate) fn pixels_differ(a: &Path, b: &Path) -> bool {
    let (a, b) = (Dataset::open(a).unwrap(), Dataset::open(b).unwrap());
    let read = |d: &Dataset| {
        let (w, h) = d.raster_size();
        d.rasterband(1)
            .unwrap()
            .read_as::<f64>((0, 0), (w, h), (w, h), None)
            .unwrap()
            .data()
            .to_vec()
    };
    read(&a) != read(&b)
}

pub(crate) fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A zip of `entries`, stored (no compression): enough for GDAL's
/// `/vsizip/`, without a zip tool on the machine.
pub(crate) fn zip_stored(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let (mut out, mut central) = (Vec::new(), Vec::new());
    for (name, data) in entries {
        let (offset, crc, len) = (out.len() as u32, crc32(data), data.len() as u32);
        let fields = |sig: u32, central: bool| {
            let mut h = sig.to_le_bytes().to_vec();
            if central {
                h.extend(20u16.to_le_bytes()); // made by
            }
            h.extend([20u16, 0, 0, 0, 0].iter().flat_map(|v| v.to_le_bytes()));
            h.extend([crc, len, len].iter().flat_map(|v| v.to_le_bytes()));
            h.extend((name.len() as u16).to_le_bytes());
            h.extend(0u16.to_le_bytes());
            if central {
                h.extend([0u16, 0, 0].iter().flat_map(|v| v.to_le_bytes()));
                h.extend([0u32, offset].iter().flat_map(|v| v.to_le_bytes()));
            }
            h.extend(name.as_bytes());
            h
        };
        out.extend(fields(0x0403_4b50, false));
        out.extend(data);
        central.extend(fields(0x0201_4b50, true));
    }
    let (at, size, n) = (out.len() as u32, central.len() as u32, entries.len() as u16);
    out.extend(central);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u16, 0, n, n].iter().flat_map(|v| v.to_le_bytes()));
    out.extend([size, at].iter().flat_map(|v| v.to_le_bytes()));
    out.extend(0u16.to_le_bytes());
    out
}
