//! The library's integration tests: one binary, a module per concern,
//! sharing the helpers in `common`. `metrics.rs` is a binary of its own: it
//! installs the process-wide metrics recorder, which would also record
//! every other test's runs.

mod common;

mod bad_input;
mod body;
mod child;
mod custom_stage;
mod docs;
mod embed;
mod faults;
mod fidelity;
mod large;
mod layers;
mod raster;
mod service;
mod signer;
mod stac_pace;
mod vertical;
mod window;
