//! # warpline-testkit
//!
//! Test support for warpline, kept out of the `warpline` library so an
//! embedder never compiles it: [`tileserver`], a loopback tile server that
//! can misbehave on purpose, used by `warpline demo`, the integration tests
//! and the benchmarks; and [`proxy`], a loopback proxy that counts (or
//! holds) the requests holding a needle, for the S3 tests.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod proxy;
pub mod tileserver;

pub use proxy::{watching_proxy, OnNeedle};
pub use tileserver::{Fault, Faults, TileServer};
