//! # warpline
//!
//! An actor-based dataflow engine for geospatial raster batch work: fetch
//! raster tiles, decode them, reproject them and write GeoTIFF / COG, with
//! every resource bounded by a named limiter and every input accounted for.
//! This crate is warpline as a library, for embedding in your own Rust
//! service; the `warpline` binary is built on the same API.
//!
//! ## Where things live
//!
//! In the order an item goes through them:
//!
//! - [`engine`] (`warpline-engine`): the generic runtime: pipeline files,
//!   limiters, stages and their mailboxes, the run and its report;
//! - `warpline-gdal`: the one crate that calls GDAL's C API, with typed,
//!   safe calls (open, CRS, translate, copy, VSI, and the warp from a
//!   typed `WarpSpec`);
//! - `warpline-gdal36` (feature `gdal36`, on by default): the warp
//!   accelerator for GDAL 3.6, warpline's own resampling loops where
//!   proven equal to gdalwarp; off by itself on any other GDAL;
//! - [`stages`] (`warpline-stages`): the raster stages (sources, fetch,
//!   decode, reproject, write) and the object stores; no `unsafe`;
//! - [`registry`]: every stage and source kind warpline ships;
//! - `examples/service.rs`: an axum service that runs posted pipelines;
//!   `examples/ndvi.rs`: a raster stage of your own (typed band access,
//!   its own memory charge).
//!
//! This crate is the embedder's facade and nothing more: the `warpline`
//! binary, with its Redis coordinator, progress bar, HTML report, plan and
//! demo, is the `warpline-cli` package (`cli/`), and the loopback test
//! tile server is `warpline-testkit` (`testkit/`), so depending on
//! `warpline` compiles neither Redis nor a metrics exporter.
//!
//! ## Run a pipeline
//!
//! On your own tokio runtime (current-thread or multi-threaded); warpline
//! starts no runtime of its own.
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
//!
//! [`Pipeline::from_path`] reads a file; [`Loader`] adds environment and
//! `--set`-style overrides. Every problem comes back at once, each with its
//! key path ([`ConfigErrors`]).
//!
//! ## Build one in code
//!
//! [`PipelineBuilder`] writes what a file would say and compiles it the same
//! way, so the checks and messages are the same.
//!
//! ```
//! use serde_json::json;
//!
//! let pipeline = warpline::PipelineBuilder::new("in-code")
//!     .source("generate", json!({ "count": 10 }))
//!     .stage("work", "hold", json!({ "duration": "1ms", "workers": 2 }))
//!     .build(&warpline::registry())
//!     .expect("valid pipeline");
//! assert_eq!(pipeline.admission_bound(), 1 + 2 + 2);
//! ```
//!
//! ## Spawn, watch, abort
//!
//! [`Pipeline::spawn`] returns a [`RunHandle`] at once: exact
//! [`progress`](RunWatch::progress) counts, [`events`](RunWatch::events) as
//! a `Stream`, [`stop`](RunWatch::stop) (drain) and
//! [`abort`](RunWatch::abort) (every permit is given back), a
//! [`cancellation_token`](RunWatch::cancellation_token), and the report.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use futures::StreamExt;
//!
//! let pipeline = warpline::PipelineBuilder::new("watched")
//!     .source("generate", serde_json::json!({ "count": 1000000 }))
//!     .stage("work", "hold", serde_json::json!({ "duration": "1ms", "workers": 4 }))
//!     .build(&warpline::registry())
//!     .unwrap();
//! let handle = pipeline.spawn(warpline::RunOptions::default());
//! let mut events = handle.events();
//! while let Some(event) = events.next().await {
//!     if matches!(event.kind, warpline::EventKind::Done { .. }) {
//!         break; // one item went all the way through
//!     }
//! }
//! handle.abort();
//! let report = handle.report().await.unwrap();
//! assert!(report.items.done < 1000000);
//! assert_eq!(report.items.done + report.items.failed, report.items.total);
//! # }
//! ```
//!
//! ## Share limits between pipelines
//!
//! A service running many jobs at once gives them one `connections` and one
//! `memory` budget: build the shared [`Limits`] once, pass them to every
//! pipeline ([`Loader::with_limits`], [`PipelineBuilder::with_limits`]), and
//! let each pipeline file name the ones it draws on with
//! `[limits.NAME] shared = true`. Its other limits stay its own. Shared
//! limiters keep the order of the shared set, so no two pipelines take them
//! in opposite orders.
//!
//! ```
//! use std::num::NonZeroU32;
//! use warpline::{Limiter, Limits, Loader};
//!
//! let mut shared = Limits::new();
//! shared.add(Limiter::count("connections", NonZeroU32::new(16).unwrap())).unwrap();
//! let job = r#"
//!     [pipeline]
//!     flow = ["work"]
//!     [source]
//!     kind = "generate"
//!     count = 3
//!     [limits.connections]
//!     shared = true
//!     [stages.work]
//!     kind = "hold"
//!     limits = ["connections"]
//! "#;
//! let a = Loader::from_toml_str(job).with_limits(&shared).load(&warpline::registry()).unwrap();
//! let b = Loader::from_toml_str(job).with_limits(&shared).load(&warpline::registry()).unwrap();
//! assert!(a.limits().holds(shared.get("connections").unwrap()));
//! assert!(b.limits().holds(shared.get("connections").unwrap()));
//! ```
//!
//! ## Your own stages and sources
//!
//! Implement [`Stage`] (what the stage says of itself: its payload types,
//! what to charge before it runs; every method has a default) and
//! [`AsyncStage`] (I/O, on tokio tasks) or [`BlockingStage`] (CPU or
//! blocking C, on OS threads the stage owns), and register a factory by
//! kind name; a file then uses it with `kind = "..."`. Sources implement
//! [`Source`] and [`SourceSpec`]. A factory reads its settings with
//! [`Settings::parse`] into a struct with `#[serde(deny_unknown_fields)]`.
//!
//! ```
//! use warpline::{async_trait, AsyncStage, Handler, Item, Outcome, Stage, StageError};
//!
//! struct Stamp;
//!
//! impl Stage for Stamp {}
//!
//! #[async_trait]
//! impl AsyncStage for Stamp {
//!     async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
//!         item.set_payload(format!("seen {}", item.id));
//!         Ok(Outcome::Continue)
//!     }
//! }
//!
//! let mut registry = warpline::registry();
//! registry.register_stage("stamp", |_settings| Ok(Handler::from_async(Stamp)));
//! let p = warpline::Pipeline::from_toml_str(
//!     "[pipeline]\nflow = [\"s\"]\n[source]\nkind = \"generate\"\ncount = 2\n[stages.s]\nkind = \"stamp\"\n",
//!     &registry,
//! );
//! assert!(p.is_ok());
//! ```
//!
//! ## GDAL in a process with several pipelines
//!
//! GDAL's process-wide state is set up once, safely, however many pipelines
//! start at the same time: drivers, an error handler that forwards GDAL's
//! messages to `tracing` inside the item's span, and the block cache, sized
//! to the largest a pipeline's memory budget asks for (see
//! [`stages::gdal`]). GDAL calls run only on the blocking stages' own
//! threads, never on your runtime's.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use warpline_engine as engine;
pub use warpline_stages as stages;

pub use warpline_engine::async_trait;
pub use warpline_engine::limit::{Limiter, Limits, Oversize, RateKey};
pub use warpline_engine::{
    AsyncStage, BlockingStage, ConfigErrors, Event, EventKind, EventSink, Handler, Input, Item,
    Loader, OpenError, Outcome, Payload, Pipeline, PipelineBuilder, Problem, Progress, Registry,
    RunControl, RunError, RunHandle, RunOptions, RunReport, RunWatch, Settings, Source,
    SourceError, SourceSpec, Stage, StageError,
};

/// Tunes glibc's allocator for tile work (in the GDAL crate, the one
/// crate with `unsafe`). Call it first thing in `main`; the `warpline`
/// binary does.
pub use warpline_gdal::tune_allocator;

/// Every stage and source kind warpline ships. With the `gdal36` feature
/// (on by default) it also installs the warp accelerator for GDAL 3.6,
/// which probes the GDAL it runs on once and switches itself off on any
/// other: [`warp_path`] says which path warps and why.
pub fn registry() -> Registry {
    install_accelerator();
    warpline_stages::registry()
}

/// Installs the warp accelerators this build has (the `gdal36` feature),
/// once; [`registry`] calls it. Nothing without the feature.
pub fn install_accelerator() {
    #[cfg(feature = "gdal36")]
    warpline_gdal36::install();
}

/// Which loop warps in this process (an accelerator's, where it is proven
/// equal to gdalwarp, or GDAL's own), and why; with the GDAL and PROJ
/// versions. Probed once, after [`install_accelerator`].
pub fn warp_path() -> &'static warpline_gdal::WarpPath {
    warpline_gdal::warp_path()
}
