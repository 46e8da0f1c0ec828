//! # warpline-stages
//!
//! The raster stages of warpline, plugged into the engine's stage traits:
//!
//! - [`source`]: kinds `list` (a text file of URLs and paths), `inline`
//!   (a list in the pipeline) and `glob` (local files);
//! - [`fetch`]: HTTP(S) with reqwest and rustls, `s3://` objects, and
//!   local files (async);
//! - [`store`]: S3 and S3-compatible object stores (`object_store`): the
//!   `s3://` glob source, fetch's reads, write's uploads;
//! - [`decode`]: bytes to pixels with GDAL, from a `/vsimem/` buffer the
//!   engine owns, size checked before any pixel is read (blocking);
//! - [`reproject`]: `GDALWarp` with gdalwarp's options (blocking);
//! - [`write`](mod@write): GeoTIFF or COG, written to a temporary name, synced and
//!   renamed into place (blocking); [`temps`]: the temporary names, and
//!   the removal of those a killed process left;
//! - [`gdal`]: the one place that calls GDAL's C API;
//! - [`samples`]: small georeferenced tiles for the demo and the tests.
//!
//! What travels between them is an [`Item`](warpline_engine::Item) whose
//! payload is [`Fetched`](fetch::Fetched) bytes, then a
//! [`Raster`](gdal::Raster), then a [`Written`](write::Written) path.

#![warn(missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod decode;
pub mod fetch;
pub mod gdal;
pub mod reproject;
pub mod samples;
pub mod source;
pub mod store;
pub mod temps;
pub mod write;

use warpline_engine::Registry;

/// The stage kinds that call GDAL (and so use its block cache).
pub const GDAL_KINDS: &[&str] = &["decode", "reproject", "write"];

/// A registry with every kind warpline ships: the engine's synthetic kinds
/// and the raster kinds (sources `list`, `inline`, `glob`; stages `fetch`,
/// `decode`, `reproject`, `write`).
pub fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    source::register(&mut r);
    r.register_stage("fetch", fetch::factory);
    r.register_stage("decode", decode::factory);
    r.register_stage("reproject", reproject::factory);
    r.register_stage("write", write::factory);
    r
}
