//! # warpline-stages
//!
//! The raster stages of warpline, plugged into the engine's stage traits.
//! The stages, in the order an item meets them (no stage module imports
//! another; what two of them share lives in a leaf module below):
//!
//! - [`source`]: kinds `list` (a text file of URLs and paths), `inline`
//!   (a list in the pipeline), `glob` (local files, `s3://`, `az://` or
//!   `gs://`), `mosaic` (many inputs into one output) and `stac` (assets of
//!   STAC items from an ItemCollection, a STAC API search or a static
//!   catalog);
//! - [`fetch`]: HTTP(S) with reqwest and rustls, `s3://`, `az://` and
//!   `gs://` objects, and local files with their siblings (async); or, with
//!   `read = "window"`, nothing up front: GDAL later reads only the byte
//!   ranges a warp needs through `/vsiwarpline/`, a file system whose
//!   reads are fetch's;
//! - [`decode`]: the bytes opened with GDAL (blocking), under the input's
//!   own safe file name ([`names`]) in a private `/vsimem/` directory, with
//!   the siblings fetch read beside a local file, archives through
//!   `/vsizip/`, `/vsigzip/`, `/vstar/`; the header checked before any
//!   pixel is read, and no pixel read;
//! - [`reproject`]: a typed warp request (`WarpSpec`) with gdalwarp's
//!   options, warped from the input as GDAL opened it (blocking), by the
//!   accelerator where it is active and proven, else by `GDALWarp`; an
//!   output larger than the byte budget is warped in chunks to a file on
//!   disk (`warp_to`);
//! - [`write`](mod@write): GeoTIFF or COG, written to a temporary name,
//!   synced and renamed into place (blocking).
//!
//! The leaves they share: [`payloads`] (what travels between stages:
//! [`Fetched`](payloads::Fetched) bytes, then a [`Raster`](gdal::Raster),
//! then a [`Written`](payloads::Written) path, each declared to the engine
//! and checked when the pipeline compiles), [`store`] (object stores through
//! `object_store`), [`names`] (safe file names, archives, siblings), `ids`
//! (item ids), `http` (the HTTP client and error chains), `space` (telling
//! a full disk), `siblings` (the files beside a local input), [`temps`]
//! (temporary names, and the removal of those a killed process left).
//! GDAL itself is the `warpline-gdal` crate's: [`gdal`] re-exports what a
//! stage of your own needs (the [`Raster`](gdal::Raster) with typed band
//! access, examples/ndvi.rs), and [`samples`] the demo's tiles.

#![warn(missing_debug_implementations, unreachable_pub)]
// GDAL's C API is the `warpline-gdal` crate's alone: no stage writes
// `unsafe`.
#![forbid(unsafe_code)]

pub mod decode;
pub mod fetch;
mod http;
mod ids;
pub mod names;
pub mod payloads;
pub mod provenance;
pub mod reproject;
mod siblings;
pub mod source;
mod space;
pub mod store;
pub mod temps;
pub mod write;

use warpline_engine::registry::{DefaultCharge, KindDefaults};
use warpline_engine::Registry;

/// GDAL as a stage of your own sees it: the [`Raster`](gdal::Raster) that
/// travels between the raster stages with its typed band access, the
/// block cache, and which GDAL, PROJ and warp path this process runs.
/// Everything here is warpline's own type (no `gdal` crate type).
pub mod gdal {
    pub use warpline_gdal::{
        cache_max, cache_used, init, versions, warp_path, DataType, Pixel, Raster, RasterError,
        Version, Versions, WarpPath,
    };
}

/// Small georeferenced tiles for the demo and the tests.
pub mod samples {
    pub use warpline_gdal::samples::*;
}

/// The stage kinds that call GDAL (and so use its block cache).
pub const GDAL_KINDS: &[&str] = &["decode", "reproject", "write"];

/// A registry with every kind warpline ships: the engine's synthetic kinds
/// and the raster kinds (sources `list`, `inline`, `glob`, `mosaic`, `stac`;
/// stages `fetch`, `decode`, `reproject`, `write`), with their defaults
/// ([`KindDefaults`]): the blocking stages, whose work is GDAL's on the
/// CPU, run a worker per core; fetch charges the default memory budget by
/// each body (its `memory` setting), decode and reproject by what they
/// hold at their peak (in their `limits`, carried on), and write holds
/// what reproject charged until the item ends.
pub fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    source::register(&mut r);
    r.register_stage("fetch", fetch::factory);
    r.register_stage("decode", decode::factory);
    r.register_stage("reproject", reproject::factory);
    r.register_stage("write", write::factory);
    let cpu = |memory| KindDefaults {
        workers_per_core: true,
        memory,
    };
    r.set_defaults(
        "fetch",
        KindDefaults {
            workers_per_core: false,
            memory: DefaultCharge::Setting("memory"),
        },
    );
    r.set_defaults("decode", cpu(DefaultCharge::Limits));
    r.set_defaults("reproject", cpu(DefaultCharge::Limits));
    r.set_defaults("write", cpu(DefaultCharge::None));
    r
}
