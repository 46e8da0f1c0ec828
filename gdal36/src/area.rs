//! When one area of interest serves every tile of a batch.
//!
//! GDAL gives each transformer the source's footprint as PROJ's area of
//! interest, so that PROJ can pick the best datum transformation there,
//! and it keys its cache of coordinate transformations on that area. Each
//! tile (a new footprint) thus makes PROJ build its transformation again:
//! 0.3 ms for a geographic tile, 2-3 ms for UTM, 13-18 ms for a CRS PROJ
//! searches its database for by name (measured on the mixed corpus). When
//! the area cannot change what PROJ picks, the reproject stage gives every
//! tile the same area (the whole world) and GDAL's cache serves them all.
//! [`one_area`] says when:
//!
//! - **The same geographic CRS on both sides.** No datum transformation is
//!   involved: PROJ chains the two conversions, whatever the area.
//! - **A CRS PROJ knows only by its PROJ string** ([`by_proj_string`]), on
//!   either side, with a GDAL and PROJ this was read from ([`Proven`]:
//!   GDAL 3.6.2 with PROJ 9.1.1, and GDAL 3.12.1 with PROJ 9.6.2; line
//!   numbers are given in that order, `a; b`) and GDAL's default choice of
//!   operation. The argument, from their sources:
//!   1. GDAL hands the area to PROJ only as `proj_create_crs_to_crs_from_pj`'s
//!      area (ogrct.cpp 1562-1590; 1662-1694 and 1734-1789), for
//!      `OGR_CT_OP_SELECTION` unset and `OSR_USE_APPROX_TMERC` off; it
//!      reads it nowhere else. GDAL 3.12 also hands PROJ the transformer's
//!      `ALLOW_BALLPARK` and `ONLY_BEST`, and coordinate metadata for
//!      epochs (1755-1786): [`spec_argued`] and [`one_area`] leave those
//!      warps out.
//!   2. PROJ reads the area in `FilterResults` (coordinateoperationfactory.cpp
//!      1016; 1144), and in 9.6 also in `createOperationsFromDatabase`'s
//!      test of too small areas (4020-4074), which needs a non-empty list
//!      of registry operations: neither is on the way below.
//!   3. When the source or the target, as PROJ parses the text GDAL hands
//!      it, carries its own PROJ string extension (and, having no
//!      identifier and the name `unknown` or `unnamed`, is not swapped for
//!      a database CRS by `getResolvedCRS`, 6218-6300; 7413-7554),
//!      `Private::createOperations` returns at once the single operation
//!      `createOperationsFromProj4Ext` makes (3147-3160, 3331-3378;
//!      3523-3536, 3744-3790): no database search on the way.
//!   4. That operation has no domain, hence no extent (oputils.cpp
//!      453-470; 457-477). `filterOut` skips it in its loop and keeps it in
//!      its fallback whatever the area (1092-1238; 1220-1366); `andSort`
//!      keeps a lone operation. `proj_create_crs_to_crs_from_pj` returns
//!      it as is when it is the only one (4D_api.cpp 1956-1961;
//!      crs_to_crs.cpp 617-643).
//!
//!   So every area gives the same operation. Such CRSs come from PROJ
//!   strings PROJ cannot model fully, such as `+proj=utm +approx`. Not
//!   the GOES tiles' `+proj=geos +sweep=x`: PROJ models it, and its
//!   operation comes out of the database search, where the area filters
//!   what the database holds (for GOES on NAD27, PROJ's datum shift for the
//!   whole world is 5 m off the one for a tile over Texas).
//!
//! - **A CRS PROJ's registry holds no operation for** (`registry.rs`,
//!   [`registry::unregistered`]), on either side, with the same GDAL,
//!   PROJ and options: no identifier, and nothing in PROJ's database of
//!   its name, its geodetic CRS's or its datum's is the source or target
//!   of an operation, so PROJ's search never filters by the area on the
//!   way, and the one operation it ends with is a ballpark one, which
//!   the final filter keeps for any area. The `masked` tiles' "Unknown
//!   datum based upon the WGS 84 ellipsoid" and the GOES tiles' GRS80
//!   are such; GOES on NAD27 is not.
//!
//! Anything else keeps GDAL's area for each tile, as gdalwarp does.
//!
//! GDAL's cache keeps one transformation per key (the area printed with
//! six decimals among it) and lends it out: `FindFromCache` removes it
//! until its user destroys it (on GDAL 3.12.1, ogrct.cpp 132-152, 1108,
//! 3803-3829, 988-999), so two workers warping at once with the same area
//! would make the second build its own. Each thread therefore has an area
//! of its own ([`shared_area`]): the whole world with the south edge moved
//! by a ten-thousandth of a degree per thread, which by the argument
//! above gives the same operation.

use std::ffi::{c_char, CStr};

use gdal::spatial_ref::SpatialRef;
use gdal_sys as sys;

/// The transformer option giving this thread's shared area of interest
/// (see the module's notes): `AREA_OF_INTEREST=-180,S,180,90`, with `S`
/// -90 for the first thread, -89.9999 for the second, and so on (16 areas,
/// then they repeat). A reproject worker is one thread, and makes its
/// stage's sizing and its warp there, one after the other.
pub(crate) fn shared_area() -> &'static str {
    area_of(turn())
}

/// This thread's turn among the threads that asked for a shared area.
fn turn() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    MINE.with(|&k| k)
}

/// How many areas threads take in turn.
const AREAS: usize = 16;

/// The `k`th thread's shared area (see [`shared_area`]).
fn area_of(k: usize) -> &'static str {
    static OPTIONS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let options = OPTIONS.get_or_init(|| {
        (0..AREAS)
            .map(|k| {
                let south = -90.0 + k as f64 * 1e-4;
                format!("AREA_OF_INTEREST=-180,{south:.4},180,90")
            })
            .collect()
    });
    options[k % AREAS].as_str()
}

/// Why one area of interest may serve every source in one CRS warped to
/// another (see the module's notes), as [`one_area`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OneArea {
    /// The same geographic CRS on both sides.
    SameDatum,
    /// A CRS PROJ knows only by its PROJ string, on one side: holds with
    /// a GDAL and PROJ the argument was read from ([`Proven`]) and GDAL's
    /// default choice of operation, which [`OneArea::holds`] reads each
    /// time (the configuration may change).
    ByProjString,
    /// A CRS PROJ's registry holds no operation for, on one side: holds
    /// with a GDAL and PROJ the argument was read from, GDAL's default
    /// choice of operation and no auxiliary database, which
    /// [`OneArea::holds`] reads each time.
    Unregistered,
    /// None of these: each tile keeps its own area.
    No,
}

impl OneArea {
    /// Whether one area serves every tile now.
    pub(crate) fn holds(self) -> bool {
        match self {
            OneArea::SameDatum => true,
            OneArea::ByProjString => proven(),
            // Auxiliary databases (`PROJ_AUX_DB`) are not searched by
            // the check.
            OneArea::Unregistered => proven() && std::env::var_os("PROJ_AUX_DB").is_none(),
            OneArea::No => false,
        }
    }
}

/// Why one area of interest may serve every source in `src` warped to
/// `dst`.
pub(crate) fn one_area(src: &SpatialRef, dst: &SpatialRef) -> OneArea {
    if src.is_compound() || dst.is_compound() {
        // Heights are involved: never.
        OneArea::No
    } else if !epochs_argued(src) || !epochs_argued(dst) {
        OneArea::No
    } else if same_geog_cs(src, dst) {
        OneArea::SameDatum
    } else if !versions_proven() {
        // The checks below cannot help on a GDAL or PROJ the argument was
        // not read from (issue 36): none of them runs there.
        OneArea::No
    } else if by_proj_string(src) || by_proj_string(dst) {
        OneArea::ByProjString
    } else if unregistered(src, dst) {
        OneArea::Unregistered
    } else {
        OneArea::No
    }
}

/// Whether the warp's options leave the argument as it was read: on
/// GDAL 3.6 always (its transformer reads none of those below); on
/// another GDAL, no `ALLOW_BALLPARK` or `ONLY_BEST` transformer option
/// (GDAL 3.11+ hands them to `proj_create_crs_to_crs_from_pj`, 3.12.1
/// gdaltransformer.cpp 2732-2743, ogrct.cpp 1757-1770) and no coordinate
/// epoch (3.12.1 ogrct.cpp 1772-1786 then hands PROJ coordinate metadata,
/// whose point motion operations PROJ 9.6 takes from its database:
/// coordinateoperationfactory.cpp 3825-3886). Not argued: no shared area.
pub(crate) fn spec_argued(spec: &warpline_gdal::WarpSpec) -> bool {
    if gdal_36() {
        return true;
    }
    // `COORDINATE_EPOCH` ends `SRC_` and `DST_COORDINATE_EPOCH` too.
    let unargued = ["ALLOW_BALLPARK", "ONLY_BEST", "COORDINATE_EPOCH"];
    spec.src_coord_epoch.is_none()
        && spec.dst_coord_epoch.is_none()
        && !spec.transformer_options.iter().any(|(k, _)| {
            let k = k.to_ascii_uppercase();
            unargued.iter().any(|u| k.ends_with(u))
        })
}

/// Whether this process runs GDAL 3.6.
fn gdal_36() -> bool {
    let v = warpline_gdal::versions().gdal;
    (v.major, v.minor) == (3, 6)
}

/// Whether `srs`'s coordinate epoch leaves the argument as it was read:
/// always on GDAL 3.6 (as [`spec_argued`]); elsewhere only without one.
fn epochs_argued(srs: &SpatialRef) -> bool {
    // SAFETY: a valid handle (owned by `srs`), only read.
    gdal_36() || unsafe { sys::OSRGetCoordinateEpoch(srs.to_c_hsrs()) } == 0.0
}

/// Whether PROJ's registry holds no operation for `src` or for `dst`
/// (`registry.rs`, with the `proj-db` feature). Asked only where the
/// answer can be used (a GDAL and PROJ the argument was read from, see
/// [`proven`]): the check costs some 0.6 G instructions per CRS.
fn unregistered(src: &SpatialRef, dst: &SpatialRef) -> bool {
    #[cfg(feature = "proj-db")]
    {
        proven() && (registry::unregistered(src, dst) || registry::unregistered(dst, src))
    }
    #[cfg(not(feature = "proj-db"))]
    {
        let _ = (src, dst);
        false
    }
}

/// Whether `a` and `b` share their geographic CRS (datum, ellipsoid,
/// prime meridian).
fn same_geog_cs(a: &SpatialRef, b: &SpatialRef) -> bool {
    // SAFETY: both handles are valid for the call (owned by `a` and `b`);
    // OSRIsSameGeogCS only reads them.
    unsafe { sys::OSRIsSameGeogCS(a.to_c_hsrs(), b.to_c_hsrs()) != 0 }
}

/// Whether PROJ builds every operation from or to `srs` out of its PROJ
/// string alone (step 3 of the module's argument).
///
/// What counts is the CRS PROJ makes of the text GDAL hands it
/// (ogrct.cpp `GetTextRepresentation`, with `GetWktOrProjString` on 3.6,
/// `GetAsAProjRecognizableString` on 3.12): the PROJ string when the CRS's
/// WKT1 has a root `EXTENSION["PROJ4", ...]`, else its WKT2 (3.6) or
/// PROJJSON (3.12). PROJ keeps a PROJ string as the CRS's own extension
/// only when the string says something its CRS model cannot, and says so
/// in the CRS's WKT2 remark (`PROJ CRS string: ...`, crs.cpp 938-979;
/// 955-1000); a WKT1
/// `EXTENSION` node alone proves nothing, as PROJ writes one for methods
/// WKT1 cannot name even without an extension (`+proj=geos +sweep=x`). So
/// the CRS and its PROJ string parsed again as GDAL's transformation will
/// parse it must both carry their own extension, be plain projected CRSs
/// (WKT2 root `PROJCRS`), and have no identifier and the name `unknown`
/// or `unnamed` (which `getResolvedCRS` does not look up).
fn by_proj_string(srs: &SpatialRef) -> bool {
    let plain = |s: &SpatialRef| {
        s.is_projected()
            && s.auth_name().is_none()
            && matches!(s.name().as_deref(), Some("unknown" | "unnamed"))
            && wkt2_root(s).is_some_and(|root| {
                root.value == "PROJCRS"
                    && root.children.iter().any(|c| {
                        c.value == "REMARK"
                            && c.children
                                .first()
                                .is_some_and(|r| r.value.starts_with("PROJ CRS string: "))
                    })
            })
    };
    if !plain(srs) {
        return false;
    }
    let Ok(mut text) = srs.to_proj4() else {
        return false;
    };
    if !text.contains(" +type=crs") {
        text.push_str(" +type=crs");
    }
    // GDAL reads `+init=` with other rules than the transformation does.
    if text.contains("+init=") {
        return false;
    }
    SpatialRef::from_proj4(&text).is_ok_and(|parsed| plain(&parsed))
}

/// A GDAL and PROJ the argument was read from, by (major, minor) each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proven {
    /// GDAL 3.6 with PROJ 9.1 (Debian 12's 3.6.2 and 9.1.1).
    Gdal36Proj91,
    /// GDAL 3.12 with PROJ 9.6 (the bundled 3.12.1 and 9.6.2).
    Gdal312Proj96,
}

/// A (major, minor) version.
type MajorMinor = (i32, i32);

/// The pairs the argument was read from: GDAL 3.6 with PROJ 9.1, and
/// GDAL 3.12 with PROJ 9.6.
const PROVEN: [(MajorMinor, MajorMinor, Proven); 2] = [
    ((3, 6), (9, 1), Proven::Gdal36Proj91),
    ((3, 12), (9, 6), Proven::Gdal312Proj96),
];

/// Which of the pairs the argument was read from ([`PROVEN`]) this
/// process runs, if any.
pub(crate) fn versions() -> Option<Proven> {
    static VERSIONS: std::sync::OnceLock<Option<Proven>> = std::sync::OnceLock::new();
    *VERSIONS.get_or_init(|| {
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: three valid out-pointers for the call.
        unsafe { sys::OSRGetPROJVersion(&mut major, &mut minor, &mut patch) };
        let gdal = warpline_gdal::versions().gdal;
        let gdal = (
            i32::try_from(gdal.major).ok()?,
            i32::try_from(gdal.minor).ok()?,
        );
        PROVEN
            .iter()
            .find(|(g, p, _)| *g == gdal && *p == (major, minor))
            .map(|(_, _, pair)| *pair)
    })
}

/// Whether this process runs one of the pairs of GDAL and PROJ the
/// argument was read from: GDAL 3.6 with PROJ 9.1, or GDAL 3.12 with
/// PROJ 9.6.
pub(crate) fn versions_proven() -> bool {
    versions().is_some()
}

/// Whether this process runs the GDAL and PROJ the argument was read from,
/// with GDAL's default choice of operation.
fn proven() -> bool {
    let versions = versions_proven();
    let unset = |key: &CStr| {
        // SAFETY: a valid key; the value GDAL returns is read at once.
        let v = unsafe { sys::CPLGetConfigOption(key.as_ptr(), std::ptr::null()) };
        v.is_null()
    };
    let tmerc = c"OSR_USE_APPROX_TMERC";
    // SAFETY: a valid key; CPLTestBool reads the value GDAL returns at once.
    let approx = unsafe {
        let v = sys::CPLGetConfigOption(tmerc.as_ptr(), std::ptr::null());
        !v.is_null() && sys::CPLTestBool(v)
    };
    versions && unset(c"OGR_CT_OP_SELECTION") && !approx
}

/// The tree of `srs`'s WKT2 (2019), or `None` if GDAL cannot export it.
fn wkt2_root(srs: &SpatialRef) -> Option<wkt::Node> {
    wkt::parse(&wkt2(srs)?)
}

/// `srs` as WKT2 (2019), or `None` if GDAL cannot export it.
pub(crate) fn wkt2(srs: &SpatialRef) -> Option<String> {
    export_wkt(srs, c"FORMAT=WKT2_2019")
}

/// `srs` as WKT with one export option, or `None` if GDAL cannot.
fn export_wkt(srs: &SpatialRef, option: &CStr) -> Option<String> {
    let options: [*const c_char; 2] = [option.as_ptr(), std::ptr::null()];
    let mut out: *mut c_char = std::ptr::null_mut();
    // SAFETY: a valid handle, a null-terminated option list and an
    // out-pointer; GDAL allocates the result, freed below with VSIFree.
    let err = unsafe { sys::OSRExportToWktEx(srs.to_c_hsrs(), &mut out, options.as_ptr()) };
    // SAFETY: `out` is null or the string the export allocated.
    unsafe { exported(err, out) }
}

/// The text of an `OSRExportTo*` call that returned `err` and allocated
/// `out` (freed here), or `None` if GDAL failed.
///
/// # Safety
/// `out` is null or a NUL-terminated string GDAL allocated, not used
/// after this call.
pub(super) unsafe fn exported(err: sys::OGRErr::Type, out: *mut c_char) -> Option<String> {
    if out.is_null() {
        return None;
    }
    // SAFETY: GDAL returned a NUL-terminated string, read before the free.
    let text = unsafe { CStr::from_ptr(out) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `out` was allocated by GDAL and is not used after this.
    unsafe { sys::VSIFree(out.cast()) };
    (err == sys::OGRErr::OGRERR_NONE).then_some(text)
}

/// WKT as a tree: a value (a keyword or a quoted string, quotes removed),
/// then children in brackets, as GDAL's `OGR_SRSNode` reads it.
mod wkt {
    pub(super) struct Node {
        pub(super) value: String,
        pub(super) children: Vec<Node>,
    }

    /// The tree of `wkt`, or `None` if it is not well formed.
    pub(super) fn parse(wkt: &str) -> Option<Node> {
        let mut rest = wkt.trim();
        let node = node(&mut rest, 0)?;
        rest.trim().is_empty().then_some(node)
    }

    fn node(s: &mut &str, depth: usize) -> Option<Node> {
        // Real CRSs nest a dozen levels at most.
        if depth > 64 {
            return None;
        }
        *s = s.trim_start();
        let value = if let Some(quoted) = s.strip_prefix('"') {
            let end = quoted.find('"')?;
            let v = quoted[..end].to_owned();
            *s = &quoted[end + 1..];
            v
        } else {
            let end = s.find(['[', ']', ',', '(', ')']).unwrap_or(s.len());
            let v = s[..end].trim().to_owned();
            *s = &s[end..];
            v
        };
        let mut children = Vec::new();
        *s = s.trim_start();
        if let Some(inner) = s.strip_prefix(['[', '(']) {
            *s = inner;
            loop {
                children.push(node(s, depth + 1)?);
                *s = s.trim_start();
                if let Some(r) = s.strip_prefix(',') {
                    *s = r;
                } else if let Some(r) = s.strip_prefix([']', ')']) {
                    *s = r;
                    break;
                } else {
                    return None;
                }
            }
        }
        Some(Node { value, children })
    }
}

#[cfg(feature = "proj-db")]
#[path = "area/registry.rs"]
mod registry;

#[cfg(test)]
#[path = "area/tests.rs"]
mod tests;
