//! # warpline
//!
//! An actor-based dataflow engine for geospatial raster batch work: fetch
//! raster tiles, decode them, reproject them and write GeoTIFF / COG, with
//! every resource bounded by a named limiter and every input accounted for.
//!
//! This crate is warpline as a library: it re-exports the engine and the
//! stages, and [`registry`] gives every kind the `warpline` binary knows.
//!
//! - [`engine`] (`warpline-engine`): the generic runtime: stages, mailboxes,
//!   limiters, pipeline files, the run report;
//! - [`stages`] (`warpline-stages`): the raster stages;
//! - [`demo`]: `warpline demo`: sample tiles served on loopback, run
//!   through `pipelines/demo.toml`;
//! - [`tileserver`]: the loopback tile server the demo and tests use;
//! - [`html`]: the report as a self-contained HTML page;
//! - [`plan`]: `warpline plan`, the pipeline with every number resolved;
//! - [`progress`]: the progress bar and the `--events` file;
//! - `src/main.rs` and `src/cli.rs`: the `warpline` binary.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let pipeline = warpline::Pipeline::from_toml_str(r#"
//!     [pipeline]
//!     flow = ["work", "sink"]
//!     [source]
//!     kind = "generate"
//!     count = 50
//!     [limits.cpu]
//!     permits = "cores"
//!     [stages.work]
//!     kind = "hold"
//!     mode = "spin"
//!     duration = "100us"
//!     workers = 2
//!     limits = ["cpu"]
//!     [stages.sink]
//!     kind = "discard"
//! "#, &warpline::registry()).expect("valid pipeline");
//! let report = pipeline.run().await.expect("run");
//! assert_eq!(report.items.done, 50);
//! # }
//! ```

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_code)]

pub mod demo;
pub mod html;
pub mod plan;
pub mod progress;
pub mod tileserver;

pub use warpline_engine as engine;
pub use warpline_stages as stages;

pub use warpline_engine::{
    ConfigErrors, Loader, Pipeline, Problem, Registry, RunControl, RunError, RunOptions, RunReport,
};

/// Every stage and source kind warpline ships.
pub fn registry() -> Registry {
    warpline_stages::registry()
}
