//! # warpline-stages
//!
//! The raster stages of warpline (fetch, decode, reproject, write) plugged
//! into the engine's stage traits. Until they land, this crate only hands out
//! the engine's registry, so the binary and embedders have one place to get
//! every kind from.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use warpline_engine::Registry;

/// A registry with every kind warpline ships: the engine's synthetic kinds
/// and (as they land) the raster stages.
pub fn registry() -> Registry {
    Registry::with_builtins()
}
