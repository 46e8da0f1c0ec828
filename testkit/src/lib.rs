//! # warpline-testkit
//!
//! Test support for warpline, kept out of the `warpline` library so an
//! embedder never compiles it: [`tileserver`], a loopback tile server that
//! can misbehave on purpose, used by `warpline demo`, the integration tests
//! and the benchmarks; and [`proxy`], a loopback proxy that counts (or
//! holds, or holds until a gate opens) the requests holding a needle, for
//! the object store tests; and [`sas`],
//! signed URLs that expire (a token endpoint, and the check the tile
//! server makes of a signed request), for fetch's `signer`; and
//! [`credentials`], object-store session credentials that expire (a
//! container's and an instance's metadata service, and a proxy that holds
//! the S3 server's clients to their expiry), with [`sts`], a web
//! identity's STS endpoint over https handing out the same; and
//! [`runtime`], the tests' two-worker tokio runtime; and [`gdal_tool`], a
//! GDAL command line tool run for the tests' and benchmarks' rasters; and
//! [`pipelines`], the pipeline files they share; and [`geoparquet`],
//! stac-geoparquet files of generated items.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod credentials;
pub mod geoparquet;
pub mod pipelines;
pub mod proxy;
pub mod sas;
pub mod sts;
pub mod tileserver;

pub use proxy::{gated_proxy, watching_proxy, Gate, OnNeedle};
pub use sas::{Clock, Sas, TokenServer};
pub use tileserver::{Fault, Faults, StacApi, Strict, TileServer};

/// A multi-threaded tokio runtime of two workers (as many as the machine
/// the tests run on has cores), with time and I/O.
///
/// # Panics
/// When the runtime cannot be built (test support: the test fails).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Runs the GDAL command line tool `program` with `args` and the
/// environment `envs`.
///
/// # Panics
/// When the tool cannot start or fails (test support: the test or bench
/// fails), with its stderr.
pub fn gdal_tool(program: &str, args: &[&str], envs: &[(&str, &str)]) {
    let out = std::process::Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (install gdal-bin)"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
