//! The oracle: `gdalwarp` of the GDAL this process links.
//!
//! With Debian's GDAL the `gdalwarp` command of gdal-bin is that GDAL, and
//! the tests run it. With another GDAL linked in (the bundled 3.12.1, which
//! gdal-src builds without its command-line programs), the command on the
//! PATH is a different version whose pixels may differ, so the oracle is
//! `GDALWarp`, the library function the command is a thin shell around
//! (apps/gdalwarp_bin.cpp parses the arguments with
//! `GDALWarpAppOptionsNew`, opens the sources and calls `GDALWarp`): the
//! same calls, made here with the same arguments.

use std::ffi::CString;
use std::path::Path;
use std::sync::OnceLock;

/// Runs `gdalwarp` with `args`, from `src` to a GTiff at `dst`.
pub fn gdalwarp(args: &[String], src: &Path, dst: &Path) {
    gdalwarp_many(args, &[src], dst);
}

/// Runs `gdalwarp` with `args`, from every one of `srcs` (a mosaic, in
/// order) to a GTiff at `dst`: the command when it is this process's GDAL,
/// else the library's `GDALWarp` with the same arguments.
pub fn gdalwarp_many<P: AsRef<Path>>(args: &[String], srcs: &[P], dst: &Path) {
    if command_is_linked_gdal() {
        let out = std::process::Command::new("gdalwarp")
            .args(["-q", "-overwrite", "-of", "GTiff"])
            .args(args)
            .args(srcs.iter().map(AsRef::as_ref))
            .arg(dst)
            .output()
            .expect("gdalwarp (install gdal-bin)");
        assert!(
            out.status.success(),
            "gdalwarp {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        library_gdalwarp(args, srcs, dst);
    }
}

/// Whether `gdalwarp --version` names the GDAL this process links.
fn command_is_linked_gdal() -> bool {
    static SAME: OnceLock<bool> = OnceLock::new();
    *SAME.get_or_init(|| {
        let linked = warpline::stages::gdal::versions().gdal.to_string();
        let said = std::process::Command::new("gdalwarp")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        // "GDAL 3.6.2, released 2023/01/02"
        let same = said
            .strip_prefix("GDAL ")
            .and_then(|rest| rest.split([',', ' ']).next())
            .is_some_and(|v| v == linked);
        if !same {
            eprintln!(
                "oracle: GDALWarp of the linked GDAL {linked} (the gdalwarp command is {:?})",
                said.trim()
            );
        }
        same
    })
}

/// `gdalwarp -of GTiff args srcs... dst` as apps/gdalwarp_bin.cpp makes
/// it: the options parsed by `GDALWarpAppOptionsNew`, the sources opened
/// read-only, `GDALWarp` to a new `dst`.
fn library_gdalwarp<P: AsRef<Path>>(args: &[String], srcs: &[P], dst: &Path) {
    warpline::stages::gdal::init();
    let _ = std::fs::remove_file(dst);
    let mut argv: Vec<String> = vec!["-of".into(), "GTiff".into()];
    argv.extend(args.iter().cloned());
    let c_args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_str()).unwrap())
        .collect();
    let mut ptrs: Vec<*mut std::ffi::c_char> =
        c_args.iter().map(|c| c.as_ptr().cast_mut()).collect();
    ptrs.push(std::ptr::null_mut());
    let datasets: Vec<gdal::Dataset> = srcs
        .iter()
        .map(|p| gdal::Dataset::open(p.as_ref()).expect("an oracle source opens"))
        .collect();
    let mut handles: Vec<gdal_sys::GDALDatasetH> = datasets.iter().map(|d| d.c_dataset()).collect();
    let c_dst = CString::new(dst.to_string_lossy().as_bytes()).unwrap();
    let mut usage = 0;
    // SAFETY: a NULL-terminated argument list alive for the calls; valid
    // source handles (alive until `datasets` drops, after the warp); the
    // new dataset is closed at once; the options are freed once.
    unsafe {
        let options = gdal_sys::GDALWarpAppOptionsNew(ptrs.as_mut_ptr(), std::ptr::null_mut());
        assert!(!options.is_null(), "GDALWarp refuses {args:?}");
        let out = gdal_sys::GDALWarp(
            c_dst.as_ptr(),
            std::ptr::null_mut(),
            handles.len() as i32,
            handles.as_mut_ptr(),
            options,
            &mut usage,
        );
        gdal_sys::GDALWarpAppOptionsFree(options);
        assert!(!out.is_null(), "GDALWarp {args:?} failed");
        gdal_sys::GDALClose(out);
    }
    drop(datasets);
}
