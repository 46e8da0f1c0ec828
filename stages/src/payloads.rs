//! The payloads the raster stages hand each other, as each stage declares
//! them to the engine ([`warpline_engine::Payload`]): the flow is checked
//! once when the pipeline compiles, so `write` right after `fetch` is a
//! `validate` error, not a failure of every item. A stage of your own
//! between them declares the same (examples/ndvi.rs).

use warpline_engine::Payload;

use crate::fetch::Fetched;
use crate::gdal::Raster;
use crate::write::Written;

/// What `fetch` hands on and `decode` takes: the input's bytes.
pub fn fetched() -> Payload {
    Payload::of::<Fetched>("fetched bytes")
}

/// What `decode` and `reproject` hand on, and `reproject` and `write`
/// take.
pub fn raster() -> Payload {
    Payload::of::<Raster>("a raster").shown_as("warpline_stages::gdal::Raster")
}

/// What `write` hands on: where the output is.
pub fn written() -> Payload {
    Payload::of::<Written>("a written file")
}
