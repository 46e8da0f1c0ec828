//! gdalwarp's inverse check, skipped where it provably passes.
//!
//! When the suggested output's edges do not round trip (a geostationary
//! source whose tiles hold the limb, say), gdalwarp turns on
//! `CHECK_WITH_INVERT_PROJ` and warps with it: every point the warp
//! transforms exactly (PROJ's forward projection of the target point to
//! the source CRS) is then projected back and compared with where it
//! started (ogr/ogrct.cpp, `OGRProjCT::TransformWithErrorCodes`); a point
//! that comes back more than `THRESHOLD` away (10 km for a projected
//! target, 0.1 degree for a geographic one) fails. The check changes
//! nothing else: a point either keeps its forward result or fails. GDAL
//! 3.12 does the same (3.12.1 apps/gdalwarp_lib.cpp:4254-4330, the
//! transformer keeping the option from the retried suggestion,
//! alg/gdaltransformer.cpp:358-368 and 2797-2813; ogr/ogrct.cpp:1385-1397
//! and 2852-2866), and PROJ 9.6.2's ellipsoidal inverse sets up the
//! quadratic [`Disk::inside`] tests (src/projections/geos.cpp:153-177).
//!
//! For a geostationary source on an ellipsoid (on a sphere PROJ's forward
//! tests no visibility, and the shortcut is not used) the check can fail
//! only where the forward result is near the limb (the inverse then misses
//! the ellipsoid, or lands far from a point it cannot tell apart) or where
//! the longitude
//! wraps (a target point beyond the antimeridian comes back 360 degrees
//! away). [`Shortcut`] warps with two transformers made alike, one
//! without the check: each batch goes through the one without, and a
//! point keeps that result only when both of these hold, with margins
//! far above rounding:
//!
//! - its source point's view ray lies inside the cone of the sphere of
//!   the polar radius (every such ray meets the ellipsoid, which holds
//!   that sphere, well away from grazing it: the ray's angle from nadir
//!   is at most the root of the sum of the squares of the two scan
//!   angles, since the cosine of that angle is the product of theirs),
//!   or, nearer the limb, the ray's quadratic against the ellipsoid (as
//!   PROJ's inverse sets it up) has a discriminant well above 0;
//! - its target point is more than 0.02 rad of longitude inside the
//!   antimeridian (a web mercator or geographic target only).
//!
//! Every other point, and every point of a batch where anything else
//! happens, goes through gdalwarp's own transformer, with the check.
//! Before a warp uses the shortcut, it must give what the checked
//! transformer gives on a sample of the output ([`Shortcut::agrees`]).
//! What else GDAL reads from a GenImgProj transformer is the same for
//! both: the poles as special points (never visible from a geostationary
//! orbit, so never added), the translation-only case (not with a
//! reprojection), and a source window retried with the check (not for a
//! disk within a million pixels of the raster, see [`Disk::of`]). A
//! failed forward projection fails in both alike. The property and
//! corpus tests compare the result with `GDALWarp` to the bit, and a test
//! here compares the two transformers point by point over the disk, the
//! limb and beyond it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use gdal::spatial_ref::SpatialRef;
use gdal::Dataset;
use gdal_sys as sys;

use super::{default_config, hook, Plan, Transformer};

/// How far inside the antimeridian a target point must be (radians).
const LON_MARGIN: f64 = 0.02;
/// How far inside the polar sphere's cone a view ray must be (relative).
const CONE_MARGIN: f64 = 1e-4;
/// The least discriminant of a view ray's quadratic against the
/// ellipsoid (at most 4, at nadir; 0 where the ray grazes the limb).
const RAY_MARGIN: f64 = 1e-4;

/// The source's geostationary view: where its rays meet the earth safely.
#[derive(Debug, Clone, Copy)]
pub(super) struct Disk {
    gt: [f64; 6],
    /// Metres per unit of the source CRS, its false easting and northing.
    to_m: f64,
    false_en: (f64, f64),
    height: f64,
    /// The square of the largest safe scan-angle radius.
    max2: f64,
    /// The ray test near the limb: the sweep axis (`+sweep=x`), and in
    /// units of the semi-major axis the satellite's distance from the
    /// centre, the polar radius, and the distance squared less one.
    sweep_x: bool,
    radius_g: f64,
    radius_p: f64,
    c: f64,
}

/// Which target points are safely inside the antimeridian.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Web mercator metres: `|x|` below this.
    Mercator(f64),
    /// Degrees of longitude and latitude.
    Degrees,
}

/// Where the shortcut applies: a geostationary source, a web mercator or
/// geographic target, GDAL's default threshold, one thread.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    disk: Disk,
    target: Target,
    dst_gt: [f64; 6],
}

impl Geometry {
    /// The geometry of this warp, or None when the shortcut does not
    /// apply (then the warp keeps gdalwarp's checked transformer alone).
    pub(super) fn of(src: &Dataset, plan: &Plan, dst_gt: [f64; 6]) -> Option<Geometry> {
        // A THRESHOLD of the user's could make the check fail anywhere;
        // several threads would clone the transformer, which GDAL cannot
        // do for this one.
        // With OGR_CT_OP_SELECTION (or OSR_USE_APPROX_TMERC, which sets
        // it), GDAL picks one PROJ operation per batch, from the batch's
        // mean point: a point's result then depends on its batch, and the
        // points the shortcut passes on to the checked transformer are
        // another batch than gdalwarp's.
        if !default_config() {
            return None;
        }
        let disk = Disk::of(src)?;
        let dst = SpatialRef::from_definition(&plan.dst_srs).ok()?;
        let target = if dst.auth_name().as_deref() == Some("EPSG")
            && dst.auth_code().ok() == Some(3857)
        {
            Target::Mercator(6378137.0 * (std::f64::consts::PI - LON_MARGIN))
        } else if dst.is_geographic() && (dst.angular_units() - 1f64.to_radians()).abs() < 1e-12 {
            Target::Degrees
        } else {
            return None;
        };
        Some(Geometry {
            disk,
            target,
            dst_gt,
        })
    }

    /// Whether the point that started at destination pixel `(px, py)`
    /// and ended at source pixel `(sx, sy)` surely passes the check.
    #[inline]
    fn safe(&self, (px, py): (f64, f64), (sx, sy): (f64, f64)) -> bool {
        let g = &self.dst_gt;
        let (tx, ty) = (g[0] + px * g[1] + py * g[2], g[3] + px * g[4] + py * g[5]);
        let inside = match self.target {
            Target::Mercator(max) => tx.abs() < max,
            Target::Degrees => tx.abs() < 180.0 - LON_MARGIN.to_degrees() && ty.abs() < 89.0,
        };
        inside && self.disk.inside(sx, sy)
    }
}

impl Disk {
    fn of(src: &Dataset) -> Option<Disk> {
        let srs = src.spatial_ref().ok()?;
        let h = srs.to_c_hsrs();
        let norm = |name: &std::ffi::CStr| {
            let mut err = 0;
            // SAFETY: a valid SRS handle; reads one parameter.
            let v = unsafe { sys::OSRGetNormProjParm(h, name.as_ptr(), f64::NAN, &mut err) };
            (err == 0 && v.is_finite()).then_some(v)
        };
        // SAFETY: a valid SRS handle; the attribute is copied at once.
        let projection = unsafe { sys::OSRGetAttrValue(h, c"PROJECTION".as_ptr(), 0) };
        if projection.is_null()
            // SAFETY: a NUL-terminated string GDAL owns.
            || unsafe { std::ffi::CStr::from_ptr(projection) } != c"Geostationary_Satellite"
        {
            return None;
        }
        let height = norm(c"satellite_height")?;
        let false_en = (norm(c"false_easting")?, norm(c"false_northing")?);
        let (mut err_a, mut err_b) = (0, 0);
        // SAFETY: a valid SRS handle; plain reads.
        let (a, b, to_m) = unsafe {
            (
                sys::OSRGetSemiMajor(h, &mut err_a),
                sys::OSRGetSemiMinor(h, &mut err_b),
                sys::OSRGetLinearUnits(h, std::ptr::null_mut()),
            )
        };
        let gt = src.geo_transform().ok()?;
        // An ellipsoid, not a sphere: on a sphere PROJ's geos forward
        // (`geos_s_forward`) has no visibility test, so far-side points
        // project onto the disk and only the inverse check rejects them.
        let sane = err_a == 0 && err_b == 0 && height > 0.0 && b > 0.0 && b < a && to_m > 0.0;
        if !sane || gt.iter().any(|v| !v.is_finite()) {
            return None;
        }
        // gdalwarp retries a source window more than a million pixels off
        // the raster with the option set, and then again without it; the
        // shortcut must never meet that case: every point on the disk
        // (radius: the ellipsoid's limb, in scan-angle metres) lies well
        // inside that distance of the raster.
        let r = height * (a / (a + height)).asin() * 1.01;
        let mut inv = [0f64; 6];
        let mut gt_c = gt;
        // SAFETY: six doubles in, six out.
        if unsafe { sys::GDALInvGeoTransform(gt_c.as_mut_ptr(), inv.as_mut_ptr()) } == 0 {
            return None;
        }
        let (w, l) = src.raster_size();
        let near = [(-r, -r), (-r, r), (r, -r), (r, r)].iter().all(|&(x, y)| {
            let (x, y) = ((x + false_en.0) / to_m, (y + false_en.1) / to_m);
            let px = inv[0] + x * inv[1] + y * inv[2];
            let py = inv[3] + x * inv[4] + y * inv[5];
            px.abs() < 1e6 - w as f64 && py.abs() < 1e6 - l as f64
        });
        if !near {
            return None;
        }
        let max = (b / (a + height)).asin() * (1.0 - CONE_MARGIN);
        let radius_g = 1.0 + height / a;
        Some(Disk {
            gt,
            to_m,
            false_en,
            height,
            max2: max * max,
            sweep_x: sweep_x(&srs)?,
            radius_g,
            radius_p: b / a,
            c: radius_g * radius_g - 1.0,
        })
    }

    /// Whether source pixel `(sx, sy)` views the earth safely: inside the
    /// polar sphere's cone (no trigonometry), or else by the ray's own
    /// test, PROJ's (`geos.cpp`, the ellipsoidal inverse): the quadratic
    /// of the view ray against the ellipsoid has a discriminant above
    /// [`RAY_MARGIN`] (its two roots are then some 60 km apart, and
    /// rounding moves the near one by well under a metre).
    #[inline]
    fn inside(&self, sx: f64, sy: f64) -> bool {
        let g = &self.gt;
        let x = (g[0] + sx * g[1] + sy * g[2]) * self.to_m - self.false_en.0;
        let y = (g[3] + sx * g[4] + sy * g[5]) * self.to_m - self.false_en.1;
        let (ax, ay) = (x / self.height, y / self.height);
        if ax * ax + ay * ay < self.max2 {
            return true;
        }
        let (vy, vz) = if self.sweep_x {
            let vz = ay.tan();
            (ax.tan() * 1f64.hypot(vz), vz)
        } else {
            let vy = ax.tan();
            (vy, ay.tan() * 1f64.hypot(vy))
        };
        let vx = -1.0f64;
        let z = vz / self.radius_p;
        let qa = vy * vy + z * z + vx * vx;
        let qb = 2.0 * self.radius_g * vx;
        let det = qb * qb - 4.0 * qa * self.c;
        det.is_finite() && det > RAY_MARGIN
    }
}

/// The sweep axis of a geostationary CRS, as PROJ reads it (`y` unless
/// the definition says `+sweep=x`), or None when it cannot be read.
fn sweep_x(srs: &SpatialRef) -> Option<bool> {
    let proj4 = srs.to_proj4().ok()?;
    Some(proj4.split_whitespace().any(|t| t == "+sweep=x"))
}

/// The warp's base transformer: gdalwarp's checked one, and its twin
/// without the check, used where [`Geometry::safe`] proves them equal.
pub(super) struct Shortcut {
    pub(super) checked: Transformer,
    pub(super) plain: Transformer,
    pub(super) geometry: Geometry,
    /// Points that kept the plain result, and points that went through
    /// the checked transformer after it.
    pub(super) skipped: AtomicU64,
    pub(super) kept: AtomicU64,
    /// Whether this GDAL's transformers return FALSE when any point of a
    /// batch fails (3.12), not only when every one does (3.6): see
    /// [`hook::fails_with_any_point`].
    any_point_fails: bool,
}

impl Shortcut {
    pub(super) fn new(checked: Transformer, plain: Transformer, geometry: Geometry) -> Shortcut {
        Shortcut {
            checked,
            plain,
            geometry,
            skipped: AtomicU64::new(0),
            kept: AtomicU64::new(0),
            any_point_fails: hook::fails_with_any_point(),
        }
    }

    /// Whether the shortcut gives what gdalwarp's checked transformer
    /// gives, bit for bit, on a sample of the output's `(w, l)` pixel
    /// centres: 7 rows of 33 points. A guard on what the argument assumes
    /// of the two transformers (the same PROJ operation, made from the
    /// same CRS definitions); the counts start again after it.
    pub(super) fn agrees(&self, (w, l): (i32, i32)) -> bool {
        let (w, l) = (f64::from(w), f64::from(l));
        let agree = (0..7).all(|r| {
            let y = l * (f64::from(r) + 0.5) / 7.0;
            let start: Vec<(f64, f64, f64)> = (0..33)
                .map(|c| (w * f64::from(c) / 32.0 + 0.5, y, 0.0))
                .collect();
            let mut ours = Points::from(&start);
            let mut theirs = Points::from(&start);
            let mine = self.dst_to_src(&mut ours.batch(), &start);
            let gdals = Self::call(&self.checked, 1, &mut theirs.batch());
            mine == gdals && ours.same(&theirs)
        });
        self.skipped.store(0, Relaxed);
        self.kept.store(0, Relaxed);
        agree
    }

    /// Points the warp transformed without the check, and with it.
    pub(super) fn counts(&self) -> Checks {
        Checks {
            skipped: self.skipped.load(Relaxed),
            kept: self.kept.load(Relaxed),
        }
    }
}

/// How many points of a warp skipped gdalwarp's inverse check (proven to
/// pass), and how many kept it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Checks {
    pub(crate) skipped: u64,
    pub(crate) kept: u64,
}

/// A batch of points of warpline's own.
struct Points {
    x: Vec<f64>,
    y: Vec<f64>,
    z: Vec<f64>,
    ok: Vec<i32>,
}

impl Points {
    fn from(start: &[(f64, f64, f64)]) -> Points {
        Points {
            x: start.iter().map(|p| p.0).collect(),
            y: start.iter().map(|p| p.1).collect(),
            z: start.iter().map(|p| p.2).collect(),
            ok: vec![0; start.len()],
        }
    }

    fn batch(&mut self) -> Batch<'_> {
        Batch {
            x: &mut self.x,
            y: &mut self.y,
            z: &mut self.z,
            ok: &mut self.ok,
        }
    }

    /// The same successes, and where both succeed the same bits.
    fn same(&self, other: &Points) -> bool {
        (0..self.x.len()).all(|i| {
            self.ok[i] == other.ok[i]
                && (self.ok[i] == 0
                    || (self.x[i].to_bits() == other.x[i].to_bits()
                        && self.y[i].to_bits() == other.y[i].to_bits()))
        })
    }
}

/// Points a batch holds, as GDAL passes them.
struct Batch<'a> {
    x: &'a mut [f64],
    y: &'a mut [f64],
    z: &'a mut [f64],
    ok: &'a mut [i32],
}

impl Shortcut {
    /// GDAL's `GDALGenImgProjTransform` over one of the two.
    fn call(t: &Transformer, inverse: i32, b: &mut Batch<'_>) -> i32 {
        let n = i32::try_from(b.x.len()).unwrap_or(i32::MAX);
        // SAFETY: a GenImgProj transformer; four arrays of `n` elements.
        unsafe {
            sys::GDALGenImgProjTransform(
                t.0,
                inverse,
                n,
                b.x.as_mut_ptr(),
                b.y.as_mut_ptr(),
                b.z.as_mut_ptr(),
                b.ok.as_mut_ptr(),
            )
        }
    }

    /// Destination to source: the plain transformer, then the checked
    /// one for every point not proven safe. Returns what the checked
    /// transformer would return for the whole batch: on 3.6 TRUE unless
    /// no point transforms, on 3.12 TRUE only if every point does (each
    /// point the checked transformer fails, the plain one fails or the
    /// check does). `start` holds the batch's points as they came.
    fn dst_to_src(&self, b: &mut Batch<'_>, start: &[(f64, f64, f64)]) -> i32 {
        let went = Self::call(&self.plain, 1, b) != 0;
        if !self.usable(went, b.ok) {
            return self.all_checked(b, start);
        }
        let redo: Vec<usize> = (0..b.x.len())
            .filter(|&i| {
                b.ok[i] != 0
                    && !self
                        .geometry
                        .safe((start[i].0, start[i].1), (b.x[i], b.y[i]))
            })
            .collect();
        let m = redo.len();
        let done = b.ok.iter().filter(|&&ok| ok != 0).count() - m;
        self.skipped.fetch_add(done as u64, Relaxed);
        self.kept.fetch_add(m as u64, Relaxed);
        if m > 0 {
            let (mut x, mut y, mut z, mut ok) =
                (vec![0.0; m], vec![0.0; m], vec![0.0; m], vec![0; m]);
            for (k, &i) in redo.iter().enumerate() {
                (x[k], y[k], z[k]) = start[i];
            }
            let mut sub = Batch {
                x: &mut x,
                y: &mut y,
                z: &mut z,
                ok: &mut ok,
            };
            let went = Self::call(&self.checked, 1, &mut sub) != 0;
            if !self.usable(went, sub.ok) {
                return self.all_checked(b, start);
            }
            for (k, &i) in redo.iter().enumerate() {
                (b.x[i], b.y[i], b.z[i], b.ok[i]) = (x[k], y[k], z[k], ok[k]);
            }
        }
        i32::from(!self.any_point_fails || b.ok.iter().all(|&ok| ok != 0))
    }

    /// Whether a batch a transformer returned `went` for holds per-point
    /// results to keep: always when it went; on a GDAL whose FALSE means
    /// "some point failed" (3.12), also when some point is marked done.
    /// Otherwise (nothing transformed, or an error) the whole batch is
    /// left to gdalwarp's checked transformer.
    fn usable(&self, went: bool, ok: &[i32]) -> bool {
        went || (self.any_point_fails && ok.iter().any(|&ok| ok != 0))
    }

    /// The whole batch, from its points as they came, through gdalwarp's
    /// checked transformer: what gdalwarp does with it.
    fn all_checked(&self, b: &mut Batch<'_>, start: &[(f64, f64, f64)]) -> i32 {
        for (i, &(x, y, z)) in start.iter().enumerate() {
            (b.x[i], b.y[i], b.z[i]) = (x, y, z);
        }
        Self::call(&self.checked, 1, b)
    }
}

/// The shortcut as a `GDALTransformerFunc`, for the approximating
/// transformer to call. Never unwinds into GDAL.
///
/// # Safety
/// `arg` is a live [`Shortcut`]; the arrays hold `n` elements each.
pub(super) unsafe extern "C" fn transform(
    arg: *mut c_void,
    dst_to_src: i32,
    n: i32,
    x: *mut f64,
    y: *mut f64,
    z: *mut f64,
    ok: *mut i32,
) -> i32 {
    // SAFETY: as the function's contract says.
    let s = unsafe { &*(arg as *const Shortcut) };
    let len = usize::try_from(n).unwrap_or(0);
    if len == 0 || x.is_null() || y.is_null() || z.is_null() || ok.is_null() {
        // SAFETY: GDAL's own transformer takes the same arguments.
        return unsafe { sys::GDALGenImgProjTransform(s.checked.0, dst_to_src, n, x, y, z, ok) };
    }
    // SAFETY: four arrays of `n` elements, GDAL's for this call.
    let mut b = unsafe {
        Batch {
            x: std::slice::from_raw_parts_mut(x, len),
            y: std::slice::from_raw_parts_mut(y, len),
            z: std::slice::from_raw_parts_mut(z, len),
            ok: std::slice::from_raw_parts_mut(ok, len),
        }
    };
    if dst_to_src == 0 {
        return Shortcut::call(&s.checked, 0, &mut b);
    }
    let start: Vec<(f64, f64, f64)> = (0..len).map(|i| (b.x[i], b.y[i], b.z[i])).collect();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.dst_to_src(&mut b, &start)
    }));
    // A panic (a bug) leaves the batch to gdalwarp's own transformer.
    run.unwrap_or_else(|_| s.all_checked(&mut b, &start))
}

#[cfg(test)]
mod tests;
