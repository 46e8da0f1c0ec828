//! The shortcut against gdalwarp's checked transformer, point by point
//! and tile by tile.

use gdal::DriverManager;

use super::*;
use crate::kernel::output_grid;

/// GOES-East's full disk, and a Himawari-like one whose disk spans
/// the antimeridian, as (CRS, disk radius in metres).
const DISKS: [&str; 2] = [
    "+proj=geos +h=35786023 +lon_0=-75 +sweep=x +ellps=GRS80 +units=m +no_defs",
    "+proj=geos +h=35785863 +lon_0=140.7 +sweep=y +a=6378137 +b=6356752.3 +units=m +no_defs",
];

/// A 512 px window of a 1536 px full disk (7 km pixels), at `(i, j)`:
/// one Byte band of a pattern, 0 (its nodata) on one pixel in seven.
fn window(crs: &str, (i, j): (f64, f64)) -> Dataset {
    let r = 5434894.885;
    let px = 2.0 * r / 1536.0;
    let mem = DriverManager::get_driver_by_name("MEM").unwrap();
    let mut ds = mem.create_with_band_type::<u8, _>("", 512, 512, 1).unwrap();
    let data: Vec<u8> = (0..512 * 512)
        .map(|k: usize| {
            if k % 7 == 0 {
                0
            } else {
                (k * 31 % 251) as u8 + 1
            }
        })
        .collect();
    {
        let mut band = ds.rasterband(1).unwrap();
        let mut buffer = gdal::raster::Buffer::new((512, 512), data);
        band.write((0, 0), (512, 512), &mut buffer).unwrap();
        band.set_no_data_value(Some(0.0)).unwrap();
    }
    ds.set_geo_transform(&[-r + i * px, px, 0.0, r - j * px, 0.0, -px])
        .unwrap();
    ds.set_spatial_ref(&SpatialRef::from_proj4(crs).unwrap())
        .unwrap();
    ds
}

/// The reproject stage's gdalwarp arguments to `target` with `method`.
fn stage_args(target: &str, method: &str) -> [String; 8] {
    ["-t_srs", target, "-r", method, "-et", "0.125", "-wm", "64"].map(String::from)
}

/// Tiles at the limb warp through the shortcut to `GDALWarp`'s pixels,
/// with most points skipping the check.
#[test]
fn limb_tiles_warp_to_gdalwarps_pixels_through_the_shortcut() {
    if crate::skipped() {
        return;
    }
    warpline_gdal::init();
    for (crs, at) in [(DISKS[0], (0.0, 0.0)), (DISKS[1], (1024.0, 512.0))] {
        for method in ["bilinear", "near"] {
            let src = window(crs, at);
            let args = stage_args("EPSG:3857", method);
            let plan = Plan::from_args(&args).unwrap();
            let (mine, took, checks) = crate::kernel::warp(&src, &plan).unwrap().done(crs);
            let options = warpline_gdal::ffi::WarpOptions::new(&args).unwrap();
            let gdals = warpline_gdal::warp::warp(&[&src], &options).unwrap();
            let what = format!("{crs} at {at:?} {method}");
            crate::kernel::tests::same(&mine, &gdals, &what);
            assert_eq!(took, crate::kernel::Took::Ours, "{what}");
            assert!(
                checks.skipped > 10 * checks.kept && checks.kept > 0,
                "{what}: {checks:?}"
            );
        }
    }
}

/// A row of 300 destination x from a width before the output to one
/// past it.
fn start_x(w: f64) -> Vec<f64> {
    (0..300)
        .map(|c| -w + 3.0 * w * f64::from(c) / 300.0 + 0.25)
        .collect()
}

/// Every point of a grid over the output and past it (off the disk,
/// the limb, beyond the antimeridian) transforms the same through the
/// shortcut as through gdalwarp's checked transformer, bit for bit;
/// and the shortcut skips the check for most of them.
#[test]
fn the_shortcut_transforms_every_point_as_the_checked_transformer() {
    if crate::skipped() {
        return;
    }
    warpline_gdal::init();
    let (mut skipped, mut points, mut windows) = (0usize, 0usize, 0);
    // Points the shortcut itself counted as skipping the check: a batch
    // it left whole to the checked transformer counts none.
    let mut counted = 0u64;
    // Points the check fails that pass without it: where skipping it
    // blindly would differ from gdalwarp.
    let mut caught = 0usize;
    for crs in DISKS {
        for target in ["EPSG:3857", "EPSG:4326"] {
            for at in [
                (0.0, 0.0),
                (512.0, 0.0),
                (1024.0, 0.0),
                (0.0, 1024.0),
                (1024.0, 1024.0),
                (512.0, 512.0),
            ] {
                let src = window(crs, at);
                let plan = Plan::from_args(&stage_args(target, "bilinear")).unwrap();
                let gen = Transformer::new(&src, &plan.transformer_options()).unwrap();
                let Ok((gt, w, l, checked)) = output_grid(&src, &gen) else {
                    continue;
                };
                // SAFETY: a GenImgProj transformer; six doubles.
                unsafe { sys::GDALSetGenImgProjTransformerDstGeoTransform(gen.0, gt.as_ptr()) };
                let Some(geometry) = Geometry::of(&src, &plan, gt).filter(|_| checked) else {
                    continue;
                };
                windows += 1;
                let plain = Transformer::new(&src, &plan.transformer_options()).unwrap();
                // SAFETY: as above.
                unsafe { sys::GDALSetGenImgProjTransformerDstGeoTransform(plain.0, gt.as_ptr()) };
                let s = Shortcut::new(gen, plain, geometry);
                let (w, l) = (f64::from(w), f64::from(l));
                for row in 0..300 {
                    let py = -l + 3.0 * l * f64::from(row) / 300.0 + 0.5;
                    let mut x: Vec<f64> = (0..300)
                        .map(|c| -w + 3.0 * w * f64::from(c) / 300.0 + 0.25)
                        .collect();
                    let mut y = vec![py; x.len()];
                    let (mut x2, mut y2) = (x.clone(), y.clone());
                    let (mut z, mut z2) = (vec![0.0; x.len()], vec![0.0; x.len()]);
                    let (mut ok, mut ok2) = (vec![0; x.len()], vec![0; x.len()]);
                    let n = x.len() as i32;
                    let arg = &s as *const Shortcut as *mut c_void;
                    // SAFETY: a live shortcut and arrays of `n`.
                    let r = unsafe {
                        transform(
                            arg,
                            1,
                            n,
                            x.as_mut_ptr(),
                            y.as_mut_ptr(),
                            z.as_mut_ptr(),
                            ok.as_mut_ptr(),
                        )
                    };
                    let mut b = Batch {
                        x: &mut x2,
                        y: &mut y2,
                        z: &mut z2,
                        ok: &mut ok2,
                    };
                    let r2 = Shortcut::call(&s.checked, 1, &mut b);
                    assert_eq!(r, r2, "{crs} -> {target} at {at:?}, row {row}");
                    let (mut x3, mut y3) = (start_x(w), vec![py; 300]);
                    let (mut z3, mut ok3) = (vec![0.0; 300], vec![0; 300]);
                    let mut b3 = Batch {
                        x: &mut x3,
                        y: &mut y3,
                        z: &mut z3,
                        ok: &mut ok3,
                    };
                    Shortcut::call(&s.plain, 1, &mut b3);
                    caught += (0..300).filter(|&c| ok3[c] != 0 && ok2[c] == 0).count();
                    for c in 0..x.len() {
                        let what = format!(
                            "{crs} -> {target} at {at:?}, point ({}, {py})",
                            -w + 3.0 * w * c as f64 / 300.0 + 0.25
                        );
                        assert_eq!(ok[c], ok2[c], "{what}: success");
                        if ok[c] != 0 {
                            assert_eq!(x[c].to_bits(), x2[c].to_bits(), "{what}: x");
                            assert_eq!(y[c].to_bits(), y2[c].to_bits(), "{what}: y");
                            points += 1;
                            let start = (-w + 3.0 * w * c as f64 / 300.0 + 0.25, py);
                            skipped += usize::from(s.geometry.safe(start, (x[c], y[c])));
                        }
                    }
                }
                counted += s.counts().skipped;
            }
        }
    }
    eprintln!("{windows} windows, {points} points on the disk, {skipped} without the check, {caught} the check fails");
    assert!(caught > 0, "no point where the check matters");
    assert!(windows >= 8, "only {windows} windows took the check");
    assert!(
        skipped * 100 >= points * 95,
        "the check was skipped for only {skipped} of {points} points"
    );
    // And the shortcut skipped it for each of them (on GDAL 3.12 a batch
    // holding one failed point once went whole through the check).
    assert_eq!(counted, skipped as u64, "points the shortcut skipped");
}

/// The shortcut is refused where its argument does not hold: with GDAL
/// choosing one operation per batch, and when its twin transformer does
/// not give the checked one's results.
#[test]
fn the_shortcut_is_refused_where_its_argument_does_not_hold() {
    if crate::skipped() || !crate::kernel::checked_warps_mirrored() {
        return;
    }
    warpline_gdal::init();
    let src = window(DISKS[0], (0.0, 0.0));
    let plan = Plan::from_args(&stage_args("EPSG:3857", "bilinear")).unwrap();
    let gen = Transformer::new(&src, &plan.transformer_options()).unwrap();
    let (gt, w, l, checked) = output_grid(&src, &gen).unwrap();
    assert!(checked, "the limb tile should take the check");
    assert!(Geometry::of(&src, &plan, gt).is_some());
    let key = c"OGR_CT_OP_SELECTION";
    // SAFETY: a thread-local option, set and cleared around one call.
    unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), c"BEST_ACCURACY".as_ptr()) };
    let refused = Geometry::of(&src, &plan, gt).is_none();
    // SAFETY: as above.
    unsafe { sys::CPLSetThreadLocalConfigOption(key.as_ptr(), std::ptr::null()) };
    assert!(refused, "OGR_CT_OP_SELECTION must turn the shortcut off");
    // A sphere: PROJ's spherical geos forward tests no visibility.
    let sphere = window(
        "+proj=geos +h=35785831 +R=6378137 +sweep=x +units=m +no_defs",
        (0.0, 0.0),
    );
    assert!(
        Geometry::of(&sphere, &plan, gt).is_none(),
        "a spherical source"
    );
    // A twin made for another disk (lon_0 1 degree away) disagrees.
    let geometry = Geometry::of(&src, &plan, gt).unwrap();
    let other = window(&DISKS[0].replace("-75", "-74"), (0.0, 0.0));
    let plain = Transformer::new(&other, &plan.transformer_options()).unwrap();
    for t in [&gen, &plain] {
        // SAFETY: GenImgProj transformers; six doubles.
        unsafe { sys::GDALSetGenImgProjTransformerDstGeoTransform(t.0, gt.as_ptr()) };
    }
    assert!(!Shortcut::new(gen, plain, geometry).agrees((w, l)));
    // And the twin made as the warp makes it agrees.
    let gen = Transformer::new(&src, &plan.transformer_options()).unwrap();
    let (gt, w, l, _) = output_grid(&src, &gen).unwrap();
    let plain = Transformer::new(&src, &plan.transformer_options()).unwrap();
    for t in [&gen, &plain] {
        // SAFETY: as above.
        unsafe { sys::GDALSetGenImgProjTransformerDstGeoTransform(t.0, gt.as_ptr()) };
    }
    assert!(Shortcut::new(gen, plain, geometry).agrees((w, l)));
}
