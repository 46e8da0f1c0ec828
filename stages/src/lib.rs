//! # warpline-stages
//!
//! The raster stages of warpline, plugged into the engine's stage traits:
//!
//! - [`source`]: kinds `list` (a text file of URLs and paths), `inline`
//!   (a list in the pipeline), `glob` (local files, `s3://`, `az://` or `gs://`),
//!   `mosaic` (many inputs into one output) and `stac` (assets of STAC
//!   items from an ItemCollection, a STAC API search or a static catalog);
//! - [`fetch`]: HTTP(S) with reqwest and rustls, `s3://`, `az://` and
//!   `gs://` objects, and local files with their siblings (async); or, with
//!   `read = "window"`, nothing up front: GDAL later reads only the byte
//!   ranges a warp needs through `/vsiwarpline/`, a file system whose
//!   reads are fetch's;
//! - [`store`]: object stores (`object_store`): S3 and S3-compatible, Azure
//!   Blob Storage, Google Cloud Storage (read only); the `s3://` / `az://` /
//!   `gs://` glob source, fetch's reads, write's uploads (`s3://`, `az://`);
//! - [`decode`]: the bytes opened with GDAL (blocking), under the input's
//!   own safe file name ([`names`]) in a private `/vsimem/` directory, with
//!   the siblings fetch read beside a local file (`siblings`), archives
//!   through `/vsizip/`, `/vsigzip/`, `/vstar/`; the header checked before
//!   any pixel is read, and no pixel read;
//! - [`reproject`]: `GDALWarp` with gdalwarp's options, from the input as
//!   GDAL opened it, so masks, alpha, overviews and metadata are read as
//!   gdalwarp reads them (blocking); where it is proven to give gdalwarp's
//!   pixels (bilinear, nodata, masks or alpha), the same GDAL calls with
//!   warpline's own resampling loop (`gdal/kernel/`, `kernel = "auto"`); an
//!   output larger than the byte budget is warped in chunks to a file on
//!   disk (`warp_to`);
//! - [`write`](mod@write): GeoTIFF or COG, written to a temporary name, synced and
//!   renamed into place (blocking); [`temps`]: the temporary names, and
//!   the removal of those a killed process left;
//! - [`gdal`]: the one place that calls GDAL's C API (the only module
//!   allowed `unsafe`), and
//!   [`Raster`](gdal::Raster) with typed band access for stages of your own
//!   (examples/ndvi.rs);
//! - [`samples`]: small georeferenced tiles for the demo and the tests.
//!
//! What travels between them is an [`Item`](warpline_engine::Item) whose
//! payload is [`Fetched`](fetch::Fetched) bytes, then a
//! [`Raster`](gdal::Raster), then a [`Written`](write::Written) path; each
//! stage declares what it takes and hands on ([`payloads`]), checked when
//! the pipeline compiles.

#![warn(missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]
// GDAL in one room: only `gdal` may call the C API (or write `unsafe` at
// all); every other module uses its safe functions.
#![deny(unsafe_code)]

pub mod decode;
pub mod fetch;
#[allow(unsafe_code)]
pub mod gdal;
pub mod names;
pub mod payloads;
pub mod reproject;
pub mod samples;
mod siblings;
pub mod source;
pub mod store;
pub mod temps;
pub mod write;

use warpline_engine::Registry;

/// The stage kinds that call GDAL (and so use its block cache).
pub const GDAL_KINDS: &[&str] = &["decode", "reproject", "write"];

/// A registry with every kind warpline ships: the engine's synthetic kinds
/// and the raster kinds (sources `list`, `inline`, `glob`, `mosaic`, `stac`;
/// stages `fetch`, `decode`, `reproject`, `write`).
pub fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    source::register(&mut r);
    r.register_stage("fetch", fetch::factory);
    r.register_stage("decode", decode::factory);
    r.register_stage("reproject", reproject::factory);
    r.register_stage("write", write::factory);
    r
}
