//! A CRS PROJ's registry holds no operation for: the second case of
//! [`super::one_area`] (see `area.rs` for the first steps of the
//! argument: GDAL hands PROJ the area only as
//! `proj_create_crs_to_crs_from_pj`'s, and PROJ reads it only in
//! `FilterResults` and, in 9.6, behind a non-empty registry result).
//!
//! The argument, from PROJ 9.1.1's and 9.6.2's sources
//! (coordinateoperationfactory.cpp unless said; line numbers `9.1; 9.6`).
//! On 9.1 it was checked against a traced build on the mixed corpus's
//! `masked` and `geos` CRSs, twelve areas each (whole world, no area,
//! tiles, degenerate points, beyond 85°, across the antimeridian): the
//! same search, query for query, and the same operation. On 9.6 it was
//! read again, and the tests move points with GDAL's transformation for
//! such areas on both (`tests.rs`).
//!
//! 1. Every registry query of operations is keyed by a source and a
//!    target code (findOpsInRegistryDirect 1689-1745; 1814-1892,
//!    findsOpsInRegistryWithIntermediate 1937-2037; 1998-2199), and the
//!    codes of a CRS, its geodetic CRS and its datum come from their
//!    identifiers or from an exact-name match (buildCRSIds 1562-1640;
//!    1701-1783, findCandidateGeodCRSForDatum 1817-1866; 1965-1975 with
//!    factory.cpp 9749-9792, getResolvedCRS 6218-6300; 7413-7554). 9.6
//!    adds searches between CRSs of one datum (factory.cpp 8054-8573),
//!    and shortcuts that return nothing for an `unknown` CRS or datum
//!    (1820-1825, 2017-2031, 3104-3113). [`unregistered`] checks that the
//!    CRS, its geodetic CRS and its datum have no identifier, and that no
//!    exact-name match of any of them (equivalent or not), nor any
//!    geodetic CRS of its datum, is the source or target of an operation
//!    in the database PROJ reads (`coordinate_operation_view`, as PROJ
//!    9.6 itself asks: factory.cpp 7445-7452). Then every query with a
//!    code of that side returns nothing.
//! 2. Queries with codes of the other side alone (the datum pivot's,
//!    createOperationsWithDatumPivot 2826-3070; 3072-3443) are used only
//!    through operations from candidates of this side (2883, 3046-3051;
//!    3357-3401, 3405-3445): none.
//!    The other side must be a plain projected or geographic 2D CRS
//!    ([`Proj::plain`]): a bound or compound one has searches of its own
//!    (createOperationsBoundToGeog and others) this does not argue.
//! 3. So no intermediate `FilterResults` runs: each sits behind a
//!    non-empty query result (1727, 1797, 2020; 1875-1880, 1945-1948,
//!    2185-2189; hasPerfectAccuracyResult 3096; 3469 filters an empty list
//!    at 3416; 3896 and runs at 3545; 4109 only on a non-empty one), as
//!    does 9.6's test of too small areas (4020-4074). The list entering
//!    the final filter does not depend on the area.
//! 4. [`Proj::one_ballpark`] checks that list: with no area and no CRS
//!    extent (nothing filtered out), PROJ returns one operation, a
//!    ballpark one, in each direction, with each grid use
//!    `proj_create_crs_to_crs_from_pj` may ask for. A non-ballpark
//!    operation would have survived `andSort` (`removeUninterestingOps`
//!    needs the entry before to have an accuracy, which a ballpark has
//!    not; `removeSyntheticNullTransforms` does nothing without an area;
//!    `removeDuplicateOps` keeps the first of equal ones), so the list
//!    holds ballpark operations only. The traces show it holds exactly
//!    one, and `filterOut` keeps such an operation for any area: dropped
//!    for an area outside its extent, it is put back by the fallback, as
//!    no non-ballpark operation with an extent was seen (1220-1235;
//!    1348-1363). One operation is returned as it is (4D_api.cpp
//!    1956-1962; crs_to_crs.cpp 617-643, whatever PROJ 9.6's "only best"
//!    default: a ballpark operation can be instantiated). (Copies of one
//!    ballpark operation, which `andSort` would fold into one, are not
//!    excluded by the check itself; the code paths above make one.)
//!
//! The check runs on each text GDAL may hand PROJ for either CRS
//! ([`texts`]: its code, and its PROJ string or its WKT2 on GDAL 3.6,
//! PROJJSON on 3.12, as GDAL picks them). It holds with a GDAL and PROJ
//! the argument was read from, GDAL's default choice of operation and no
//! auxiliary database, which [`super::OneArea::holds`] reads each time;
//! for a CRS whose datum PROJ has operations for (NAD27, say), step 1
//! fails and each tile keeps its own area. It reads the database PROJ
//! reads, a file or, in a static PROJ 9.6 with none found, the copy
//! built into the library (PROJ names it by a URI of its in-memory
//! SQLite file system, which the same SQLite opens); if it cannot, no
//! area is shared. The tests (`registry/tests.rs`) have, for each
//! sub-check, a CRS only that one turns down.

use std::ffi::{c_char, c_int, CStr, CString};

use gdal::spatial_ref::SpatialRef;

/// Whether `side`'s CRS, transformed to or from `other`'s, gets one
/// operation from PROJ whatever the area (steps 1 and 4 above).
pub(super) fn unregistered(side: &SpatialRef, other: &SpatialRef) -> bool {
    if authority(side).is_some() {
        return false;
    }
    let (Some(sides), Some(others)) = (texts(side), texts(other)) else {
        return false;
    };
    let Some(proj) = Proj::new() else {
        return false;
    };
    sides
        .iter()
        .all(|s| proj.unregistered(s) && others.iter().all(|o| proj.one_ballpark(s, o)))
}

/// The texts GDAL may hand PROJ for `srs` (ogrct.cpp
/// `GetTextRepresentation` and `GetWktOrProjString`, 178-272 on 3.6.2;
/// `GetAsAProjRecognizableString`, 167-279 on 3.12.1): its
/// authority code, if it has one (GDAL takes it when the code's CRS is the
/// same and its configuration does not say otherwise), and the text
/// GDAL takes else: the PROJ string (with `+type=crs`) when the CRS's
/// WKT1 has a root `EXTENSION["PROJ4", ...]`, else its WKT2 (2018) on
/// GDAL 3.6 and its PROJJSON on 3.12.
fn texts(srs: &SpatialRef) -> Option<Vec<String>> {
    let mut texts = Vec::new();
    if let Some((auth, code)) = authority(srs) {
        texts.push(format!("{auth}:{code}"));
    }
    // GDAL reads the extension in its WKT1 tree, which PROJ writes as
    // WKT1_GDAL whatever `OSR_WKT_FORMAT` says (ogrspatialreference.cpp
    // 335-363 on 3.6.2, 397-433 on 3.12.1), except for a CRS imported
    // from a WKT with `CENTER_LONG`,
    // whose tree is the WKT's own: not argued.
    let wkt1 = super::export_wkt(srs, c"FORMAT=WKT1_GDAL")?;
    if wkt1.contains("CENTER_LONG") {
        return None;
    }
    let root = super::wkt::parse(&wkt1)?;
    let extension = root.children.iter().any(|c| {
        c.value.eq_ignore_ascii_case("EXTENSION")
            && c.children.len() >= 2
            && c.children[0].value.eq_ignore_ascii_case("PROJ4")
    });
    if extension {
        let mut text = srs.to_proj4().ok()?;
        if !text.contains(" +type=crs") {
            text.push_str(" +type=crs");
        }
        texts.push(text);
    } else if !super::gdal_36() {
        // GDAL 3.12 hands PROJJSON where 3.6 handed WKT2 (2018)
        // (3.12.1 ogrct.cpp 186-195).
        texts.push(projjson(srs)?);
    } else {
        texts.push(super::export_wkt(srs, c"FORMAT=WKT2_2018")?);
    }
    Some(texts)
}

/// `srs` as PROJJSON, as GDAL 3.12 exports it for its transformation (no
/// options), or `None` if GDAL cannot.
fn projjson(srs: &SpatialRef) -> Option<String> {
    let mut out: *mut c_char = std::ptr::null_mut();
    // SAFETY: a valid handle, no options (a null list) and an out-pointer;
    // GDAL allocates the result, freed below with VSIFree.
    let err = unsafe { gdal_sys::OSRExportToPROJJSON(srs.to_c_hsrs(), &mut out, std::ptr::null()) };
    // SAFETY: `out` is null or the string the export allocated.
    unsafe { super::exported(err, out) }
}

/// `srs`'s authority name and code, as GDAL reads them for its text.
fn authority(srs: &SpatialRef) -> Option<(String, String)> {
    let h = srs.to_c_hsrs();
    // SAFETY: a valid handle; GDAL owns the strings while `srs` lives and
    // is not changed, and they are copied at once.
    unsafe {
        Some((
            text(gdal_sys::OSRGetAuthorityName(h, std::ptr::null()))?,
            text(gdal_sys::OSRGetAuthorityCode(h, std::ptr::null()))?,
        ))
    }
}

/// A PROJ context of this check's own, on the database GDAL's reads (the
/// default search path: warpline sets none).
struct Proj {
    ctx: *mut ffi::PJ_CONTEXT,
}

impl Proj {
    fn new() -> Option<Proj> {
        // SAFETY: no arguments; the context is destroyed in Drop.
        let ctx = unsafe { ffi::proj_context_create() };
        (!ctx.is_null()).then_some(Proj { ctx })
    }

    /// Step 1: `text`'s CRS, geodetic CRS and datum can lead to no
    /// registry operation.
    fn unregistered(&self, text: &str) -> bool {
        let Some(crs) = self.create(text) else {
            return false;
        };
        if !self.plain(&crs) {
            return false;
        }
        let kind = crs.kind();
        // SAFETY: valid context and CRS; the result is owned below.
        let geod = Pj(unsafe { ffi::proj_crs_get_geodetic_crs(self.ctx, crs.0) });
        // SAFETY: a valid context; `geod` is valid or null, which PROJ
        // accepts (and returns a null for, checked below).
        let datum = Pj(unsafe { ffi::proj_crs_get_datum_forced(self.ctx, geod.0) });
        if geod.0.is_null() || datum.0.is_null() {
            return false;
        }
        let Some(db) = self.database() else {
            return false;
        };
        let objects = [
            (&crs, kind),
            (&geod, ffi::PJ_TYPE_GEOGRAPHIC_2D_CRS),
            (&datum, ffi::PJ_TYPE_GEODETIC_REFERENCE_FRAME),
        ];
        objects
            .iter()
            .all(|(pj, kind)| self.no_operation_by_name(pj, *kind, &db))
    }

    /// Whether `pj` has no identifier and nothing of its name in the
    /// registry is the source or target of an operation.
    fn no_operation_by_name(&self, pj: &Pj, kind: c_int, db: &rusqlite::Connection) -> bool {
        // SAFETY: a valid object; index 0 exists or a null comes back.
        if !unsafe { ffi::proj_get_id_auth_name(pj.0, 0) }.is_null() {
            return false;
        }
        // SAFETY: as above; PROJ owns the name while `pj` lives, and it is
        // copied at once, byte for byte. PROJ looks up every name, even
        // `unknown` (buildCRSIds 1597-1621), so this does too.
        let name = unsafe {
            let p = ffi::proj_get_name(pj.0);
            if p.is_null() {
                return true;
            }
            CStr::from_ptr(p).to_owned()
        };
        let types = [kind];
        // SAFETY: a valid context, name and type list; every authority,
        // exact matches only, no limit, no options. The list is freed below.
        let list = unsafe {
            ffi::proj_create_from_name(
                self.ctx,
                std::ptr::null(),
                name.as_ptr(),
                types.as_ptr(),
                types.len(),
                0,
                0,
                std::ptr::null(),
            )
        };
        if list.is_null() {
            return false;
        }
        let list = List(list);
        (0..list.count()).all(|i| {
            let m = list.get(self.ctx, i);
            match (m.id(), kind) {
                (Some((auth, code)), ffi::PJ_TYPE_GEODETIC_REFERENCE_FRAME) => {
                    operations(db, Touching::Datum, &auth, &code) == Some(0)
                }
                (Some((auth, code)), _) => {
                    // SAFETY: a valid context and CRS; owned below.
                    let d = Pj(unsafe { ffi::proj_crs_get_datum_forced(self.ctx, m.0) });
                    let datum_free = match d.id() {
                        Some((a, c)) => operations(db, Touching::Datum, &a, &c) == Some(0),
                        None => !d.0.is_null(),
                    };
                    datum_free && operations(db, Touching::Crs, &auth, &code) == Some(0)
                }
                (None, _) => false,
            }
        })
    }

    /// Step 4: with no area and no CRS extent, `side` to `other` and back
    /// each get one operation, a ballpark one, with the options
    /// `proj_create_crs_to_crs_from_pj` sets (4D_api.cpp 1898-1934).
    fn one_ballpark(&self, side: &str, other: &str) -> bool {
        let (Some(a), Some(b)) = (self.create(side), self.create(other)) else {
            return false;
        };
        // A bound or compound other side has searches of its own
        // (createOperationsBoundToGeog and others): not argued.
        self.plain(&b) && self.ballpark_only(&a, &b) && self.ballpark_only(&b, &a)
    }

    /// Whether `crs` is a projected or geographic CRS of two axes (not
    /// bound, as `+towgs84` makes, compound or 3D: not argued).
    fn plain(&self, crs: &Pj) -> bool {
        let kind = crs.kind();
        if kind != ffi::PJ_TYPE_PROJECTED_CRS && kind != ffi::PJ_TYPE_GEOGRAPHIC_2D_CRS {
            return false;
        }
        // SAFETY: a valid context and CRS; the system is owned below, and
        // PROJ accepts a null for the count (returning -1).
        unsafe {
            let cs = Pj(ffi::proj_crs_get_coordinate_system(self.ctx, crs.0));
            ffi::proj_cs_get_axis_count(self.ctx, cs.0) == 2
        }
    }

    /// Whether `src` to `dst` gets one operation, a ballpark one, with
    /// the grid availability `proj_create_crs_to_crs_from_pj` asks for:
    /// PROJ 9.1 asks for known grids with the network on, else for
    /// discarding missing ones (4D_api.cpp 1928-1934); PROJ 9.6 asks for
    /// known grids also when the context's default "only best" setting
    /// warns or errors (crs_to_crs.cpp 568-576), which the C API does not
    /// tell: so on 9.6 both uses are checked.
    fn ballpark_only(&self, src: &Pj, dst: &Pj) -> bool {
        // SAFETY: a valid context.
        let network = unsafe { ffi::proj_context_is_network_enabled(self.ctx) } != 0;
        let grids: &[c_int] = match (network, super::versions()) {
            (true, _) => &[ffi::PROJ_GRID_AVAILABILITY_KNOWN_AVAILABLE],
            (false, Some(super::Proven::Gdal312Proj96)) => &[
                ffi::PROJ_GRID_AVAILABILITY_KNOWN_AVAILABLE,
                ffi::PROJ_GRID_AVAILABILITY_DISCARD_OPERATION_IF_MISSING_GRID,
            ],
            (false, _) => &[ffi::PROJ_GRID_AVAILABILITY_DISCARD_OPERATION_IF_MISSING_GRID],
        };
        grids
            .iter()
            .all(|&grids| self.ballpark_only_with(src, dst, grids))
    }

    fn ballpark_only_with(&self, src: &Pj, dst: &Pj, grids: c_int) -> bool {
        // SAFETY: a valid context; every call below gets it and the
        // factory context, destroyed at the end of this function.
        unsafe {
            let oc = ffi::proj_create_operation_factory_context(self.ctx, std::ptr::null());
            if oc.is_null() {
                return false;
            }
            ffi::proj_operation_factory_context_set_spatial_criterion(
                self.ctx,
                oc,
                ffi::PROJ_SPATIAL_CRITERION_PARTIAL_INTERSECTION,
            );
            ffi::proj_operation_factory_context_set_grid_availability_use(self.ctx, oc, grids);
            ffi::proj_operation_factory_context_set_crs_extent_use(
                self.ctx,
                oc,
                ffi::PJ_CRS_EXTENT_NONE,
            );
            let list = ffi::proj_create_operations(self.ctx, src.0, dst.0, oc);
            ffi::proj_operation_factory_context_destroy(oc);
            if list.is_null() {
                return false;
            }
            let list = List(list);
            list.count() == 1
                && ffi::proj_coordoperation_has_ballpark_transformation(
                    self.ctx,
                    list.get(self.ctx, 0).0,
                ) != 0
        }
    }

    fn create(&self, text: &str) -> Option<Pj> {
        let c = CString::new(text).ok()?;
        // SAFETY: a valid context and NUL-terminated text; owned by Pj.
        let pj = Pj(unsafe { ffi::proj_create(self.ctx, c.as_ptr()) });
        (!pj.0.is_null()).then_some(pj)
    }

    /// PROJ's database, read-only.
    fn database(&self) -> Option<rusqlite::Connection> {
        // SAFETY: a valid context; PROJ owns the path while it lives.
        let path = unsafe { text(ffi::proj_context_get_database_path(self.ctx)) }?;
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()
    }
}

impl Drop for Proj {
    fn drop(&mut self) {
        // SAFETY: created in Proj::new, every object of it already freed
        // (they live inside the methods' calls).
        unsafe { ffi::proj_context_destroy(self.ctx) };
    }
}

/// What a count of operations is keyed by.
#[derive(Clone, Copy)]
enum Touching {
    /// The CRS of this code.
    Crs,
    /// Any geodetic CRS of the datum of this code.
    Datum,
}

/// How many operations of the registry (every table of
/// `coordinate_operation_view`, deprecated ones too) have a CRS that
/// `touching` names as source or target; `None` if the query fails.
fn operations(
    db: &rusqlite::Connection,
    touching: Touching,
    auth: &str,
    code: &str,
) -> Option<i64> {
    let sql = match touching {
        Touching::Crs => {
            "SELECT count(*) FROM coordinate_operation_view v \
             WHERE (v.source_crs_auth_name = ?1 AND v.source_crs_code = ?2) \
             OR (v.target_crs_auth_name = ?1 AND v.target_crs_code = ?2)"
        }
        Touching::Datum => {
            "SELECT count(*) FROM coordinate_operation_view v WHERE EXISTS \
             (SELECT 1 FROM geodetic_crs g WHERE g.datum_auth_name = ?1 AND g.datum_code = ?2 \
             AND ((v.source_crs_auth_name = g.auth_name AND v.source_crs_code = g.code) \
             OR (v.target_crs_auth_name = g.auth_name AND v.target_crs_code = g.code)))"
        }
    };
    db.query_row(sql, [auth, code], |r| r.get(0)).ok()
}

/// A PROJ object, destroyed on drop (null allowed).
struct Pj(*mut ffi::PJ);

impl Pj {
    fn kind(&self) -> c_int {
        // SAFETY: a valid object.
        unsafe { ffi::proj_get_type(self.0) }
    }

    /// Its first identifier, if any.
    fn id(&self) -> Option<(String, String)> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: a valid object; PROJ owns the strings while it lives.
        unsafe {
            Some((
                text(ffi::proj_get_id_auth_name(self.0, 0))?,
                text(ffi::proj_get_id_code(self.0, 0))?,
            ))
        }
    }
}

impl Drop for Pj {
    fn drop(&mut self) {
        // SAFETY: owned, or null (which PROJ accepts).
        unsafe { ffi::proj_destroy(self.0) };
    }
}

/// A PROJ object list, destroyed on drop.
struct List(*mut ffi::PJ_OBJ_LIST);

impl List {
    fn count(&self) -> c_int {
        // SAFETY: a valid list.
        unsafe { ffi::proj_list_get_count(self.0) }
    }

    fn get(&self, ctx: *mut ffi::PJ_CONTEXT, i: c_int) -> Pj {
        // SAFETY: a valid context and list, `i` below its count.
        Pj(unsafe { ffi::proj_list_get(ctx, self.0, i) })
    }
}

impl Drop for List {
    fn drop(&mut self) {
        // SAFETY: owned, not null (checked at creation).
        unsafe { ffi::proj_list_destroy(self.0) };
    }
}

/// A string PROJ returns, or `None` for a null.
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn text(p: *const c_char) -> Option<String> {
    // SAFETY: the caller's contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The few calls of PROJ's C API this check makes (proj.h of PROJ 9.1,
/// the same in 9.6;
/// GDAL already loads libproj, the binding links it by name). No crate
/// binds PROJ without generating its bindings at build time (libclang),
/// for some twenty functions.
#[allow(non_camel_case_types)]
mod ffi {
    use std::ffi::{c_char, c_int};

    pub(super) enum PJ_CONTEXT {}
    pub(super) enum PJ {}
    pub(super) enum PJ_OBJ_LIST {}
    pub(super) enum PJ_OPERATION_FACTORY_CONTEXT {}

    // PJ_TYPE, PROJ_CRS_EXTENT_USE, PROJ_GRID_AVAILABILITY_USE and
    // PROJ_SPATIAL_CRITERION, as proj.h numbers them.
    pub(super) const PJ_TYPE_GEODETIC_REFERENCE_FRAME: c_int = 3;
    pub(super) const PJ_TYPE_GEOGRAPHIC_2D_CRS: c_int = 12;
    pub(super) const PJ_TYPE_PROJECTED_CRS: c_int = 15;
    pub(super) const PJ_CRS_EXTENT_NONE: c_int = 0;
    pub(super) const PROJ_GRID_AVAILABILITY_DISCARD_OPERATION_IF_MISSING_GRID: c_int = 1;
    pub(super) const PROJ_GRID_AVAILABILITY_KNOWN_AVAILABLE: c_int = 3;
    pub(super) const PROJ_SPATIAL_CRITERION_PARTIAL_INTERSECTION: c_int = 1;

    #[link(name = "proj")]
    extern "C" {
        pub(super) fn proj_context_create() -> *mut PJ_CONTEXT;
        pub(super) fn proj_context_destroy(ctx: *mut PJ_CONTEXT) -> *mut PJ_CONTEXT;
        pub(super) fn proj_context_get_database_path(ctx: *mut PJ_CONTEXT) -> *const c_char;
        pub(super) fn proj_context_is_network_enabled(ctx: *mut PJ_CONTEXT) -> c_int;
        pub(super) fn proj_create(ctx: *mut PJ_CONTEXT, text: *const c_char) -> *mut PJ;
        pub(super) fn proj_destroy(pj: *mut PJ) -> *mut PJ;
        pub(super) fn proj_get_type(pj: *const PJ) -> c_int;
        pub(super) fn proj_get_name(pj: *const PJ) -> *const c_char;
        pub(super) fn proj_get_id_auth_name(pj: *const PJ, index: c_int) -> *const c_char;
        pub(super) fn proj_get_id_code(pj: *const PJ, index: c_int) -> *const c_char;
        pub(super) fn proj_crs_get_geodetic_crs(ctx: *mut PJ_CONTEXT, crs: *const PJ) -> *mut PJ;
        pub(super) fn proj_crs_get_coordinate_system(
            ctx: *mut PJ_CONTEXT,
            crs: *const PJ,
        ) -> *mut PJ;
        pub(super) fn proj_cs_get_axis_count(ctx: *mut PJ_CONTEXT, cs: *const PJ) -> c_int;
        pub(super) fn proj_crs_get_datum_forced(ctx: *mut PJ_CONTEXT, crs: *const PJ) -> *mut PJ;
        #[allow(clippy::too_many_arguments)]
        pub(super) fn proj_create_from_name(
            ctx: *mut PJ_CONTEXT,
            auth_name: *const c_char,
            searched_name: *const c_char,
            types: *const c_int,
            types_count: usize,
            approximate_match: c_int,
            limit_result_count: usize,
            options: *const *const c_char,
        ) -> *mut PJ_OBJ_LIST;
        pub(super) fn proj_list_get_count(list: *const PJ_OBJ_LIST) -> c_int;
        pub(super) fn proj_list_get(
            ctx: *mut PJ_CONTEXT,
            list: *const PJ_OBJ_LIST,
            index: c_int,
        ) -> *mut PJ;
        pub(super) fn proj_list_destroy(list: *mut PJ_OBJ_LIST);
        pub(super) fn proj_create_operation_factory_context(
            ctx: *mut PJ_CONTEXT,
            authority: *const c_char,
        ) -> *mut PJ_OPERATION_FACTORY_CONTEXT;
        pub(super) fn proj_operation_factory_context_destroy(
            ctx: *mut PJ_OPERATION_FACTORY_CONTEXT,
        );
        pub(super) fn proj_operation_factory_context_set_spatial_criterion(
            ctx: *mut PJ_CONTEXT,
            factory_ctx: *mut PJ_OPERATION_FACTORY_CONTEXT,
            criterion: c_int,
        );
        pub(super) fn proj_operation_factory_context_set_grid_availability_use(
            ctx: *mut PJ_CONTEXT,
            factory_ctx: *mut PJ_OPERATION_FACTORY_CONTEXT,
            grid_availability_use: c_int,
        );
        pub(super) fn proj_operation_factory_context_set_crs_extent_use(
            ctx: *mut PJ_CONTEXT,
            factory_ctx: *mut PJ_OPERATION_FACTORY_CONTEXT,
            extent_use: c_int,
        );
        pub(super) fn proj_create_operations(
            ctx: *mut PJ_CONTEXT,
            source_crs: *const PJ,
            target_crs: *const PJ,
            operation_context: *const PJ_OPERATION_FACTORY_CONTEXT,
        ) -> *mut PJ_OBJ_LIST;
        pub(super) fn proj_coordoperation_has_ballpark_transformation(
            ctx: *mut PJ_CONTEXT,
            op: *const PJ,
        ) -> c_int;
    }
}

#[cfg(test)]
#[path = "registry/tests.rs"]
mod tests;
