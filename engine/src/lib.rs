//! # warpline-engine
//!
//! The generic runtime of warpline: stage actors with bounded mailboxes,
//! limiters named after the resource they protect, token buckets, and TOML
//! pipelines. It knows nothing of GDAL or HTTP; `warpline-stages` plugs the
//! raster stages into it.
//!
//! Where things live, in the order a pipeline goes through them, from its
//! file to its report:
//!
//! - [`config`]: loading a TOML file with overrides, and the compile step
//!   that reports every problem at once;
//! - [`defaults`]: what a pipeline gets where it says nothing (workers per
//!   core, a memory budget of half the [`machine`]'s memory or cgroup
//!   limit), put into its tables before it compiles, and where each figure
//!   came from;
//! - [`registry`]: the stage and source kinds a file may name;
//! - [`builder`]: a [`PipelineBuilder`] for pipelines made in code (it
//!   writes what a file would say, and compiles it the same way);
//! - [`pipeline`]: a compiled [`Pipeline`], its [`admission
//!   bound`](Pipeline::admission_bound), and [`Pipeline::run`];
//! - [`sizing`]: the first inputs sized by the stages' own code, before
//!   any run ([`Pipeline::size_first`], for `plan`'s estimate of memory);
//! - [`payload`]: the [`Payload`] a stage declares it takes and hands on,
//!   checked between neighbours when the pipeline compiles;
//! - [`handle`]: [`Pipeline::spawn`] and the [`RunHandle`] that watches,
//!   stops or aborts a run in the background;
//! - [`run`]: the source loop, the workers (tokio tasks or OS threads), and
//!   shutdown through [`RunControl`];
//! - [`shard`]: `--shard i/N`, a fixed split of the inputs by id;
//! - [`item`]: the [`Item`] that travels, its [`Outcome`] and [`StageError`];
//! - [`stage`]: the [`Stage`] supertrait, whose prepare step
//!   ([`demand`](Stage::demand)) always runs before the work, and the
//!   [`AsyncStage`], [`BlockingStage`] and [`Source`] traits a kind
//!   implements;
//! - [`limit`]: count, bytes and rate [`Limiter`]s and the [`Ticket`]s that
//!   give their share back on drop;
//! - [`adapt`]: adaptive per-host concurrency and rate for stages whose
//!   tries are requests (a fetch), and [`requests`], the same for
//!   requests a source makes (a STAC API's pages);
//! - [`observe`]: [`Event`]s and the
//!   [`Timeline`](observe::Timeline) of a run;
//! - [`live`]: a [`Probe`] that reads a [`Snapshot`] of a running
//!   pipeline (mailboxes, workers, limiters) when asked;
//! - [`stall`]: the watchdog that says what waits for what when no item
//!   moves for a long time;
//! - [`report`]: the [`RunReport`] and its diagnosis;
//! - [`redact`]: user names, passwords and secret query parameters of
//!   URLs hidden before anything is shown, for URLs that do not parse too;
//! - beside the flow: [`synthetic`] (the `generate` source and the `hold`
//!   and `discard` stages, for exercising and benchmarking the engine) and
//!   [`units`] (sizes, durations and counts as a file writes them).
//!
//! The modules form layers with no import circle (a module uses only the
//! ones below it): leaves (`units`, `machine`, `defaults`, `redact`,
//! `shard`, `stall`, `adapt`,
//! `payload`, the panic guard, a config `Problem` and the lenient read
//! that finds every mistake of a table at once); then [`limit`],
//! [`item`], [`observe`], [`live`] and the retry policy; [`stage`];
//! [`pipeline`] (the compiled plan) and [`sizing`]; [`registry`] and
//! [`synthetic`];
//! [`config`] (which compiles a file into a pipeline) and [`builder`];
//! [`report`]; [`run`] and [`requests`]; and on top [`handle`].
//! `Pipeline::from_toml_str` lives in `config` and `Pipeline::run` in `run`,
//! so that the plan below them knows neither.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use warpline_engine::{Pipeline, Registry};
//!
//! let pipeline = Pipeline::from_toml_str(r#"
//!     [pipeline]
//!     flow = ["work"]
//!     [source]
//!     kind = "generate"
//!     count = 20
//!     [stages.work]
//!     kind = "hold"
//!     duration = "1ms"
//!     workers = 4
//! "#, &Registry::with_builtins()).expect("valid pipeline");
//! assert_eq!(pipeline.admission_bound(), 1 + 4 + 4);
//! let report = pipeline.run().await.expect("run");
//! assert_eq!(report.items.done, 20);
//! # }
//! ```

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod adapt;
pub mod builder;
pub mod config;
pub mod defaults;
mod guard;
pub mod handle;
pub mod item;
mod lenient;
pub mod limit;
pub mod live;
pub mod machine;
pub mod observe;
pub mod payload;
pub mod pipeline;
mod problem;
pub mod redact;
pub mod registry;
pub mod report;
pub mod requests;
mod retry;
pub mod run;
pub mod shard;
pub mod sizing;
pub mod stage;
pub mod stall;
pub mod synthetic;
pub mod units;

/// The attribute for implementing [`AsyncStage`] and [`Source`].
pub use async_trait::async_trait;
pub use builder::PipelineBuilder;
pub use config::{ConfigErrors, Loader, Problem, Tier};
pub use handle::{Progress, RunHandle, RunWatch, StageProgress};
pub use item::{ErrorKind, Input, Item, Outcome, StageError};
pub use limit::{Limiter, LimiterKind, Limits, RateBackendError, Ticket};
pub use live::{Probe, Snapshot};
pub use observe::{Event, EventKind, EventSink, TryOutcome};
pub use payload::Payload;
pub use pipeline::Pipeline;
pub use registry::{Registry, Settings};
pub use report::{Footprint, RunReport};
pub use requests::Requests;
pub use run::{FailuresFileError, RunControl, RunError, RunOptions};
pub use stage::{
    AsyncStage, BlockingStage, Handler, OpenError, Source, SourceError, SourceSpec, Stage,
};
