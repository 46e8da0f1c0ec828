//! The one room where warpline talks to GDAL's C API (through `gdal-sys`,
//! and the `gdal` crate where it is safe). Read ../shared/GDAL-NOTES.md
//! before changing anything here.
//!
//! - [`init`]: process-wide set-up, once however many pipelines start at
//!   the same time (a `std::sync::Once`): drivers, an error handler that
//!   forwards to `tracing` (never panics; it runs on the thread of the GDAL
//!   call, so messages arrive inside the item's span), the block cache
//!   size ([`request_cache`]: the largest any pipeline asked for);
//! - `MemFile`: bytes Rust owns, seen by GDAL as a `/vsimem/` file whose
//!   name the engine made (never a name built from input);
//! - [`Raster`]: a decoded raster: Rust-owned band buffers with a MEM
//!   dataset over them, or a MEM dataset GDAL made (the warp's output);
//! - `CStringList`: argument and option lists for the C API.

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use gdal::Dataset;
use gdal_sys as sys;

static INIT: Once = Once::new();

/// Sets GDAL up for this process, once, however many pipelines start at the
/// same time: registers the drivers, installs an error handler that
/// forwards GDAL's messages to `tracing`, and sizes the block cache.
pub fn init() {
    INIT.call_once(|| {
        // Through the `gdal` crate's own `Once` (every `Dataset::open` and
        // driver lookup goes through it too), never `register_all`
        // directly: two threads in GDALAllRegister at the same time corrupt
        // GDAL's driver tables (seen as a hang and a SIGSEGV when a test
        // opened a driver while a pipeline started).
        let _ = gdal::DriverManager::count();
        gdal::config::set_error_handler(|class, code, message| {
            // Runs on whichever thread called GDAL; must never panic.
            match class {
                gdal::errors::CplErrType::Warning => {
                    tracing::warn!(target: "gdal", code, "{message}")
                }
                gdal::errors::CplErrType::Debug | gdal::errors::CplErrType::None => {
                    tracing::trace!(target: "gdal", code, "{message}")
                }
                // Failures reach the item's error through `last_error`.
                _ => tracing::debug!(target: "gdal", code, "{message}"),
            }
        });
        set_cache_max(DEFAULT_CACHE);
    });
}

/// The block cache when no memory budget says otherwise.
pub const DEFAULT_CACHE: u64 = 64 << 20;

static CACHE_REQUESTED: AtomicU64 = AtomicU64::new(0);

/// Asks for a block cache of at least `bytes`. The cache is one per
/// process: with several pipelines in one process it is the largest any of
/// them asked for.
pub fn request_cache(bytes: u64) {
    init();
    let before = CACHE_REQUESTED.fetch_max(bytes, Ordering::AcqRel);
    if bytes > before {
        set_cache_max(bytes);
    }
}

/// Sets GDAL's block cache size (bytes). `GDALSetCacheMax64` works at any
/// time, unlike the `GDAL_CACHEMAX` config option.
pub fn set_cache_max(bytes: u64) {
    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
    // SAFETY: a plain setter of a process-wide integer, thread-safe in GDAL.
    unsafe { sys::GDALSetCacheMax64(bytes) };
}

/// The block cache size in bytes.
pub fn cache_max() -> u64 {
    // SAFETY: a plain getter.
    let v = unsafe { sys::GDALGetCacheMax64() };
    u64::try_from(v).unwrap_or(0)
}

/// Bytes GDAL's block cache holds right now (every dataset's blocks).
pub fn cache_used() -> u64 {
    // SAFETY: a plain getter of a process-wide counter.
    let v = unsafe { sys::GDALGetCacheUsed64() };
    u64::try_from(v).unwrap_or(0)
}

/// The block cache a memory budget of `capacity` bytes asks for: a 32nd
/// of it, within 8 MiB .. 64 MiB.
///
/// Since decode reads a window of blocks at a time and drops them (see
/// `decode.rs`), the cache mostly holds what `write` has not yet flushed.
/// Every block is a small allocation on the C heap, and glibc keeps what a
/// full cache freed as free heap in each arena: with an eighth of the
/// budget (64 MiB at 512 MiB) the skewed matrix's peak RSS was 649 MiB,
/// with a 32nd (16 MiB) 552 MiB (400 tiles, one run each; README).
pub fn cache_for_budget(capacity: u64) -> u64 {
    (capacity / 32).clamp(8 << 20, DEFAULT_CACHE)
}

/// Items whose pixels take at least this many bytes give the C heap's free
/// pages back to the system when decode or reproject is done with them
/// ([`trim_heap_after`]): glibc's own trim threshold (8 MiB, set by
/// `warpline::tune_allocator`), ten times a normal tile (a 512 px RGB tile
/// is 768 KiB).
pub const TRIM_AFTER: u64 = 8 << 20;

/// Gives the free pages inside glibc's heaps (every arena) back to the
/// system after an item of `bytes` pixels, if it is at least
/// [`TRIM_AFTER`].
///
/// GDAL's blocks, libtiff's strips and the warp's row buffers come from
/// the heap of whichever arena the thread uses, and glibc gives a heap back
/// only from its top: after a large raster, tens of MiB stay resident as
/// free heap, outside any budget. `malloc_trim` walks the free lists and
/// `madvise`s whole free pages away: cheap beside a large item's work, but
/// not after every tile, whose next buffers would fault those pages in
/// again (why `tune_allocator` raised the trim threshold). No effect off
/// glibc.
pub fn trim_heap_after(bytes: u64) {
    if bytes < TRIM_AFTER {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::os::raw::c_int;
        }
        // SAFETY: glibc's malloc_trim takes each arena's lock and only
        // gives free pages back; it touches no memory in use.
        unsafe { malloc_trim(0) };
    }
}

/// The last error GDAL recorded on this thread, or a fallback.
pub(crate) fn last_error(fallback: &str) -> String {
    // SAFETY: CPLGetLastErrorMsg returns a pointer to a thread-local
    // string owned by GDAL, valid until the next GDAL call on this thread;
    // it is copied at once.
    let msg = unsafe { CStr::from_ptr(sys::CPLGetLastErrorMsg()) }
        .to_string_lossy()
        .trim()
        .to_owned();
    if msg.is_empty() {
        fallback.to_owned()
    } else {
        msg
    }
}

/// Forgets the last error on this thread, so a later [`last_error`] is
/// about the next call.
pub(crate) fn reset_error() {
    // SAFETY: resets thread-local state.
    unsafe { sys::CPLErrorReset() };
}

/// A NULL-terminated list of C strings (`char **`) that owns its strings.
#[derive(Debug, Default)]
pub(crate) struct CStringList {
    strings: Vec<CString>,
    pointers: Vec<*mut c_char>,
}

impl CStringList {
    pub(crate) fn new<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        let strings = items
            .iter()
            .map(|s| {
                CString::new(s.as_ref())
                    .map_err(|_| format!("{:?} contains a NUL byte", s.as_ref()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut pointers: Vec<*mut c_char> =
            strings.iter().map(|s| s.as_ptr() as *mut c_char).collect();
        pointers.push(ptr::null_mut());
        Ok(CStringList { strings, pointers })
    }

    /// The `char **` for GDAL; valid while `self` lives. GDAL only reads it.
    pub(crate) fn as_ptr(&mut self) -> *mut *mut c_char {
        debug_assert_eq!(self.pointers.len(), self.strings.len() + 1);
        self.pointers.as_mut_ptr()
    }
}

static MEMFILE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Bytes Rust owns, visible to GDAL as `/vsimem/warpline/N.bin`, a name
/// the engine made. Unlinked before the bytes are freed.
#[derive(Debug)]
pub(crate) struct MemFile {
    path: CString,
    // Kept alive (and never moved out or reallocated) until Drop has
    // unlinked the name: GDAL reads from this heap buffer.
    _data: Vec<u8>,
}

impl MemFile {
    pub(crate) fn new(mut data: Vec<u8>) -> Result<Self, String> {
        if data.is_empty() {
            return Err("empty body (0 bytes)".to_owned());
        }
        let n = MEMFILE_SEQ.fetch_add(1, Ordering::Relaxed);
        let path = CString::new(format!("/vsimem/warpline/{}-{n}.bin", std::process::id()))
            .map_err(|e| e.to_string())?;
        let len = data.len() as u64;
        // SAFETY: `data` is a live heap buffer of `len` bytes; with
        // bTakeOwnership = 0 GDAL never frees it, and `Drop` unlinks the
        // name before the buffer is freed. The handle returned is closed at
        // once (the file stays registered until unlinked).
        let fp = unsafe { sys::VSIFileFromMemBuffer(path.as_ptr(), data.as_mut_ptr(), len, 0) };
        if fp.is_null() {
            return Err(last_error("cannot register the bytes with GDAL"));
        }
        // SAFETY: `fp` is the valid handle just returned.
        unsafe { sys::VSIFCloseL(fp) };
        Ok(MemFile { path, _data: data })
    }

    pub(crate) fn len(&self) -> u64 {
        self._data.len() as u64
    }

    pub(crate) fn path(&self) -> &str {
        // Built from a format string of ASCII: always UTF-8.
        self.path.to_str().unwrap_or_default()
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        // SAFETY: unlinks the name registered in `new`; GDAL then no longer
        // refers to the buffer, which is freed after this.
        unsafe { sys::VSIUnlink(self.path.as_ptr()) };
    }
}

/// A raster in memory: a MEM dataset, over band buffers Rust owns (decoded
/// input) or over memory GDAL owns (the warp's output).
pub struct Raster {
    // Declared first so it is dropped (closed) before the buffers it
    // points into.
    pub(crate) ds: Dataset,
    pub(crate) buffers: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Raster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (w, h) = self.ds.raster_size();
        f.debug_struct("Raster")
            .field("width", &w)
            .field("height", &h)
            .field("bands", &self.ds.raster_count())
            .finish()
    }
}

// SAFETY: the dataset is only used by the thread that holds the `Raster`
// (a `Raster` is moved between stages, never shared), and the buffers are
// plain bytes. `gdal::Dataset` is `Send` for the same reason.
unsafe impl Send for Raster {}

impl Raster {
    /// The dataset.
    pub fn dataset(&self) -> &Dataset {
        &self.ds
    }

    /// Bytes of pixel data.
    pub fn pixel_bytes(&self) -> u64 {
        let (w, h) = self.ds.raster_size();
        (1..=self.ds.raster_count())
            .filter_map(|i| self.ds.rasterband(i).ok())
            .map(|b| (w * h) as u64 * u64::from(dtype_size(b.band_type() as u32)))
            .sum()
    }
}

/// Bytes per pixel of a GDAL data type.
pub(crate) fn dtype_size(t: sys::GDALDataType::Type) -> u32 {
    // SAFETY: a pure function of an enum value.
    let bytes = unsafe { sys::GDALGetDataTypeSizeBytes(t) };
    u32::try_from(bytes).unwrap_or(0)
}

/// The GDAL data type named `name` (`Byte`, `UInt16`, `Float32`, ...).
pub(crate) fn dtype_by_name(name: &str) -> Option<sys::GDALDataType::Type> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a valid C string for the call's duration.
    let t = unsafe { sys::GDALGetDataTypeByName(c.as_ptr()) };
    (t != sys::GDALDataType::GDT_Unknown).then_some(t)
}

/// One band of a MEM dataset: its type and the buffer it lives in.
pub(crate) struct BandSpec {
    pub(crate) dtype: sys::GDALDataType::Type,
    pub(crate) data: *mut u8,
}

/// A MEM dataset of `width` x `height` whose bands live in buffers the
/// caller owns.
///
/// # Safety
/// Each `data` must point to a live buffer of `width * height *
/// dtype_size(dtype)` bytes that outlives the returned dataset and is not
/// moved or freed while it lives.
pub(crate) unsafe fn mem_dataset_over(
    width: usize,
    height: usize,
    bands: &[BandSpec],
) -> Result<Dataset, String> {
    let driver = gdal::DriverManager::get_driver_by_name("MEM").map_err(|e| e.to_string())?;
    let (w, h) = (
        i32::try_from(width).map_err(|_| "width too large".to_owned())?,
        i32::try_from(height).map_err(|_| "height too large".to_owned())?,
    );
    reset_error();
    // SAFETY: a valid driver handle and an empty name; zero bands, so
    // nothing is allocated for pixels.
    let h_ds = unsafe {
        sys::GDALCreate(
            driver.c_driver(),
            c"".as_ptr(),
            w,
            h,
            0,
            sys::GDALDataType::GDT_Byte,
            ptr::null_mut(),
        )
    };
    if h_ds.is_null() {
        return Err(last_error("cannot create an in-memory dataset"));
    }
    // SAFETY: `h_ds` is a new dataset we own; the wrapper closes it.
    let ds = unsafe { Dataset::from_c_dataset(h_ds) };
    for band in bands {
        let size = dtype_size(band.dtype) as usize;
        let mut options = CStringList::new(&[
            format!("DATAPOINTER={:p}", band.data),
            format!("PIXELOFFSET={size}"),
            format!("LINEOFFSET={}", size * width),
        ])?;
        // SAFETY: the band's memory is described exactly (the caller's
        // contract); MEM does not take ownership of DATAPOINTER memory.
        let err = unsafe { sys::GDALAddBand(ds.c_dataset(), band.dtype, options.as_ptr()) };
        if err != sys::CPLErr::CE_None {
            return Err(last_error("cannot add a band to the in-memory dataset"));
        }
    }
    Ok(ds)
}

/// `GDALWarpAppOptions`, freed on drop.
pub(crate) struct WarpOptions(pub(crate) *mut sys::GDALWarpAppOptions);

impl WarpOptions {
    /// Options from `gdalwarp` arguments, warping to a MEM dataset.
    pub(crate) fn new(args: &[String]) -> Result<Self, String> {
        let mut argv: Vec<String> = args.to_vec();
        argv.extend(["-of".to_owned(), "MEM".to_owned()]);
        let mut list = CStringList::new(&argv)?;
        reset_error();
        // SAFETY: `list` is a NULL-terminated argument list alive for the
        // call; GDAL copies what it needs.
        let options = unsafe { sys::GDALWarpAppOptionsNew(list.as_ptr(), ptr::null_mut()) };
        if options.is_null() {
            return Err(last_error("invalid warp options"));
        }
        Ok(WarpOptions(options))
    }
}

impl Drop for WarpOptions {
    fn drop(&mut self) {
        // SAFETY: created by GDALWarpAppOptionsNew, freed once.
        unsafe { sys::GDALWarpAppOptionsFree(self.0) };
    }
}
