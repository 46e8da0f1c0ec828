//! # warpline-cli
//!
//! What the `warpline` binary needs beyond the library, in the order a
//! run goes through them; the binary itself (flags, loading, commands) is
//! `main.rs` and its `cli` module.
//!
//! - [`plan`]: `warpline plan`, the pipeline as it will run;
//! - [`demo`]: `warpline demo`, the whole pipeline on sample tiles served
//!   by `warpline-testkit`'s loopback tile server;
//! - [`coordinator`]: runs across machines on Redis (a shared work queue,
//!   global rate limits);
//! - [`progress`]: the progress bar, the log summary and `--events`;
//! - [`top`]: `--progress stages`, the live per-stage view;
//! - [`html`]: `--report-html`, the report as one HTML page.
//!
//! An embedder depends on the `warpline` library, not on this crate.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod coordinator;
pub mod demo;
pub mod html;
pub mod plan;
pub mod progress;
pub mod top;
