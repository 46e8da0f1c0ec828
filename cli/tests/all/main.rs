//! The `warpline` binary's integration tests: one binary, a module per
//! concern, sharing the library tests' helpers (`common`), the binary's
//! (`binary`) and a Redis of their own (`own_redis`).

mod binary;
#[path = "../../../tests/all/common/mod.rs"]
mod common;
mod own_redis;

mod azure;
mod cli;
mod cli_pipes;
mod cookbook;
mod crash;
mod disk_full;
mod gcs;
mod global_rate;
mod map;
mod offline;
mod outputs;
mod redis;
mod redis_outage;
mod s3;
mod same_bytes;
mod security;
mod signer;
mod smallest;
mod stac;
mod terminal;
mod validate;
mod verify;
mod warp;
