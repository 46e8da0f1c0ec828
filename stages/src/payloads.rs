//! The payloads the raster stages hand each other, as each stage declares
//! them to the engine ([`warpline_engine::Payload`]): the flow is checked
//! once when the pipeline compiles, so `write` right after `fetch` is a
//! `validate` error, not a failure of every item. A stage of your own
//! between them declares the same (examples/ndvi.rs).

use std::path::PathBuf;

use warpline_engine::{Footprint, Payload};
use warpline_gdal::{GeoBounds, Raster, RemoteFile};

/// What `fetch` hands on and `decode` takes: the input's bytes.
pub fn fetched() -> Payload {
    Payload::of::<Fetched>("fetched bytes").shown_as("warpline_stages::fetch::Fetched")
}

/// What `decode` and `reproject` hand on, and `reproject` and `write`
/// take.
pub fn raster() -> Payload {
    Payload::of::<Raster>("a raster").shown_as("warpline_stages::gdal::Raster")
}

/// What `write` hands on: where the output is.
pub fn written() -> Payload {
    Payload::of::<Written>("a written file").shown_as("warpline_stages::write::Written")
}

/// What fetch hands on: the input's bytes, and for a local file the
/// siblings GDAL would read beside it.
#[derive(Debug, Default)]
pub struct Fetched {
    /// The body or file contents.
    pub bytes: Vec<u8>,
    /// Files beside a local input that GDAL reads with it (external mask,
    /// overviews, `.aux.xml`, world file, `.prj`): see [`Sibling`].
    pub siblings: Vec<Sibling>,
    /// A mosaic's inputs, one each, in order (`bytes` is then empty).
    pub parts: Vec<Fetched>,
    /// An input read by ranges while it is warped (`read = "window"`):
    /// `bytes` is then empty.
    pub(crate) remote: Option<RemoteFile>,
}

impl Fetched {
    /// Bytes with no siblings.
    pub fn new(bytes: Vec<u8>) -> Self {
        Fetched {
            bytes,
            ..Fetched::default()
        }
    }

    /// Bytes held, siblings included.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
            + self
                .siblings
                .iter()
                .map(|s| s.bytes.len() as u64)
                .sum::<u64>()
    }

    /// Whether there are no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file beside a local input, by what follows the input's name (an
/// appended `.msk`, `.ovr`, `.aux.xml`) or its stem (`.tfw`, `.wld`,
/// `.prj`): see [`crate::names::sibling_candidates`].
#[derive(Debug)]
pub struct Sibling {
    /// `.msk`, `.ovr`, `.aux.xml`, `.tfw`, `.prj`, ... as found on disk.
    pub suffix: String,
    /// The file's contents.
    pub bytes: Vec<u8>,
}

/// What write hands on: where the output is.
#[derive(Debug, Clone)]
pub struct Written {
    /// The final path (for an upload, the object's `s3://` URL).
    pub path: PathBuf,
}

/// GDAL's bounds of a raster in EPSG:4326 as the engine's
/// [`Footprint`] (the report's map).
pub(crate) fn footprint(b: GeoBounds) -> Footprint {
    Footprint {
        west: b.west,
        south: b.south,
        east: b.east,
        north: b.north,
    }
}
