//! # warpline-gdal
//!
//! The one crate of warpline that talks to GDAL's C API (through
//! `gdal-sys`, and the `gdal` crate where it is safe) and the only one
//! with `unsafe`: every other crate calls the safe, typed functions here.
//! Read ../shared/GDAL-NOTES.md before changing anything. Its rooms, in
//! the order an item meets them:
//!
//! - [`init`]: process-wide set-up, once however many pipelines start at
//!   the same time: drivers, an error handler that forwards to `tracing`
//!   (never panics; it runs on the thread of the GDAL call, so messages
//!   arrive inside the item's span), the block cache ([`request_cache`]);
//! - [`vsi`]: `/vsiwarpline/`, a file system whose reads are the fetch
//!   stage's range requests ([`RangeRead`]), with its block cache
//!   (`blocks`);
//! - [`files`]: bytes Rust owns, seen by GDAL as files in a private
//!   `/vsimem/` directory the engine named;
//! - [`open`]: a raster opened from those files, its header checked
//!   before any pixel is read; `translate`: in-memory VRT views;
//! - [`Raster`]: the input as GDAL opened it, or the dataset a warp made,
//!   with typed band access ([`Pixel`], [`DataType`]) and its footprint
//!   in EPSG:4326 ([`GeoBounds`]);
//! - [`warp`]: the warp from a typed [`WarpSpec`] (gdalwarp's arguments are
//!   derived from it, one way), the output size GDAL suggests, and the
//!   [`accel`] hook through which an optional accelerator (the
//!   `warpline-gdal36` crate) takes the warps it is proven on;
//! - `copy`: an output file written by a driver (`GDALCreateCopy`);
//!   [`watch`]: GDAL's messages on one thread, listened to for a while;
//! - [`ffi`]: the low-level helpers an accelerator needs (error reading,
//!   string lists), not for stages;
//! - [`samples`]: small georeferenced tiles for the demo and the tests;
//! - `heap`: glibc's allocator tuned for tile work, and trimmed after a
//!   large item ([`tune_allocator`], [`trim_heap_after`]).

#![warn(missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use gdal::cpl::CslStringList;
use gdal::errors::GdalError;
use gdal_sys as sys;

pub mod accel;
mod blocks;
pub mod compare;
mod copy;
mod crs;
pub mod files;
mod footprint;
mod heap;
pub mod open;
mod range;
mod raster;
pub mod samples;
mod sources;
pub mod spec;
mod translate;
mod types;
mod version;
pub mod vsi;
pub mod warp;
pub mod watch;

pub use accel::{warp_path, WarpPath};
pub(crate) use copy::flush;
pub use copy::{create_copy, creation_option_list, driver_exists, new_path_option};
pub use crs::{crs_name, crs_to_wkt, CrsError, CrsName};
pub use files::MemDir;
pub use footprint::{extent_to_4326, GeoBounds};
pub use heap::{trim_heap_after, tune_allocator, TRIM_AFTER};
pub(crate) use raster::pixel_bytes;
pub use raster::{BandScaling, Raster, RasterError, ScratchFile};
pub use sources::{Sources, WarpedBy};
pub use spec::{Cutline, GcpTransformer, Resampling, WarpSpec};
pub(crate) use translate::vrt_view;
pub use types::{DataType, Pixel};
pub use version::{versions, Version, Versions};
pub use vsi::{RangeRead, RemoteFile, CACHE_BYTES};
pub use warp::WarpError;
pub use watch::MessageWatch;

/// What went wrong in a GDAL call: GDAL's message (scrubbed of the
/// engine's in-memory paths), and whose fault it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input is not what the call needs (a band it does not have...).
    #[error("{0}")]
    Input(String),
    /// GDAL failed, with its message.
    #[error("{0}")]
    Gdal(String),
}

/// The low-level helpers an accelerator crate needs to call GDAL the way
/// this crate does (errors read and scrubbed, string lists). Not for
/// stages: they use the typed calls above.
pub mod ffi {
    pub use crate::raster::pixel_bytes;
    pub use crate::translate::vrt_view;
    pub use crate::warp::{classify, suggested_output, Suggested, WarpOptions};
    pub use crate::watch::report_failure;
    pub use crate::{dtype_size, error_message, last_error, reset_error, string_list};
    pub use gdal::Dataset;
}

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
            forward(class, code, message)
        });
        set_cache_max(DEFAULT_CACHE);
    });
}

/// GDAL's message to `tracing`, without the in-memory paths ([`scrub`]),
/// inside the span of the item whose GDAL call said it. Failures log at
/// debug: they reach the item's error through [`last_error`].
pub(crate) fn forward(class: gdal::errors::CplErrType, code: i32, message: &str) {
    let message = scrub(message);
    match class {
        gdal::errors::CplErrType::Warning => tracing::warn!(target: "gdal", code, "{message}"),
        gdal::errors::CplErrType::Debug | gdal::errors::CplErrType::None => {
            tracing::trace!(target: "gdal", code, "{message}")
        }
        _ => tracing::debug!(target: "gdal", code, "{message}"),
    }
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
/// with a 32nd (16 MiB) 552 MiB (400 tiles, one run each; docs/performance.md).
pub fn cache_for_budget(capacity: u64) -> u64 {
    (capacity / 32).clamp(8 << 20, DEFAULT_CACHE)
}

/// The last error GDAL recorded on this thread, or a fallback.
pub fn last_error(fallback: &str) -> String {
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
        scrub(&msg)
    }
}

/// `message` without the in-memory directories GDAL names (see
/// `files`): `/vsimem/warpline/<pid>-<n>/` and the `/vsizip/`,
/// `/vsigzip/` or `/vstar/` before it. What is left is the input's own
/// file name, which the user knows.
pub(crate) fn scrub(message: &str) -> String {
    const DIR: &str = "/vsimem/warpline/";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(DIR) {
        let mut before = &rest[..at];
        let braced = before.ends_with('{');
        if braced {
            before = &before[..before.len() - 1];
        }
        for prefix in ["/vsizip/", "/vsigzip/", "/vstar/"] {
            if let Some(b) = before.strip_suffix(prefix) {
                before = b;
                break;
            }
        }
        out.push_str(before);
        let after = &rest[at + DIR.len()..];
        // `<pid>-<n>/`, then the file's own name.
        let end = after
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(after.len());
        rest = after[end..].strip_prefix('/').unwrap_or(&after[end..]);
        if braced {
            if let Some(close) = rest.find('}') {
                out.push_str(&rest[..close]);
                rest = &rest[close + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Forgets the last error on this thread, so a later [`last_error`] is
/// about the next call.
pub fn reset_error() {
    // SAFETY: resets thread-local state.
    unsafe { sys::CPLErrorReset() };
}

/// A GDAL string list (`char **`) of `items`, each copied as it is: an
/// item with `=` is not split into a name and a value (the gdal crate's
/// `FromIterator` would, and drop an item such as `+proj=longlat` whose
/// "name" GDAL would refuse).
pub fn string_list<S: AsRef<str>>(items: &[S]) -> Result<CslStringList, Error> {
    let mut list = CslStringList::new();
    for s in items {
        let s = s.as_ref();
        list.add_string(s)
            .map_err(|_| Error::Input(format!("{s:?} contains a NUL byte")))?;
    }
    Ok(list)
}

/// GDAL's message in an error of the gdal crate (which takes GDAL's last
/// message into its error and resets GDAL's own), or `fallback`.
pub fn error_message(e: GdalError, fallback: &str) -> String {
    match e {
        GdalError::NullPointer { msg, .. } if !msg.trim().is_empty() => scrub(msg.trim()),
        _ => fallback.to_owned(),
    }
}

/// Bytes per pixel of a GDAL data type.
pub fn dtype_size(t: sys::GDALDataType::Type) -> u32 {
    // SAFETY: a pure function of an enum value.
    let bytes = unsafe { sys::GDALGetDataTypeSizeBytes(t) };
    u32::try_from(bytes).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn in_memory_directories_are_scrubbed_from_messages() {
        assert_eq!(
            super::scrub("/vsimem/warpline/12-3/a.tif, band 1: IReadBlock failed"),
            "a.tif, band 1: IReadBlock failed"
        );
        assert_eq!(
            super::scrub("`/vsizip//vsimem/warpline/1-2/x.zip/N45E006.hgt' not recognized"),
            "`x.zip/N45E006.hgt' not recognized"
        );
        assert_eq!(
            super::scrub("/vsizip/{/vsimem/warpline/1-2/x.bin}/a.tif: bad"),
            "x.bin/a.tif: bad"
        );
        assert_eq!(super::scrub("no names here"), "no names here");
    }
}
