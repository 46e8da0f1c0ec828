//! The engine's integration tests: one binary, a module per concern,
//! sharing the helpers in `common`.

mod common;

mod adaptive;
mod admission;
mod budget;
mod config;
mod contract;
mod limits;
mod live;
mod margin;
mod observe;
mod per_run;
mod retry;
mod shutdown;
