//! Command-line interface, split by concern as ripgrep splits its flags:
//! `args` (what the command line is), `load` (a pipeline loaded for a
//! command), `logging`, then the commands: `check` (`validate`, `plan`),
//! `execute` (`run`, `demo`), `warp` (gdalwarp's command line as a
//! pipeline), `verify` (outputs against their provenance) and `coordinated` (`enqueue`, `status`, `dead`, `requeue`). This file parses and dispatches. Every flag and
//! exit code is documented in docs/pipeline.md.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use warpline::RunOptions;

/// `println!` that never panics nor fails the run: stdout may be a pipe
/// its reader closed (`warpline ... | head -1`).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `eprintln!` that never panics: stderr may be a closed pipe too.
macro_rules! say_err {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

mod args;
mod check;
mod coordinated;
mod execute;
mod load;
mod logging;
mod verify;
mod warp;
use args::{
    Cli, Command, Format, LogFormat, ProgressMode, RunArgs, EXIT_ABORTED_ON_ERROR,
    EXIT_COORDINATOR_LOST, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_ITEMS_FAILED, EXIT_OK,
};
use check::{plan, validate};
use coordinated::{enqueue, status, EnqueueArgs, NamedRunArgs, RedisArgs};
use execute::{demo, run};
use load::{load_with, loader, not_connected, parse_sets, GlobalRates};
use logging::init_logging;

pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(warp::clap_order(std::env::args_os().collect())) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                EXIT_INVALID
            } else {
                EXIT_OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_logging(cli.log_format);
    // Use every descriptor the system allows; the `descriptors` unit budget
    // is sized from this limit.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::debug!("cannot raise the open-file limit: {e}");
    }
    let code = match cli.command {
        Command::Validate {
            pipelines,
            sets,
            format,
            online,
        } => validate(&pipelines, &sets, format, online),
        Command::Plan {
            pipeline,
            sets,
            format,
            sample,
        } => plan(&pipeline, &sets, format, sample),
        Command::Run {
            pipeline,
            args,
            redis,
            retry_failed,
        } => {
            // A coordinated run's workers share one queue: an input a shard
            // or a retry list filtered out would never be acknowledged.
            if redis.coordinator.is_some() {
                let with = [
                    args.shard.is_some().then_some("--shard"),
                    retry_failed.is_some().then_some("--retry-failed"),
                ];
                if let Some(flag) = with.into_iter().flatten().next() {
                    say_err!(
                        "error: {flag} cannot be used with --coordinator: the workers of a \
                         coordinated run share one queue (see docs/scale-out.md)"
                    );
                    return ExitCode::from(EXIT_INVALID);
                }
            }
            let only_ids = match only_ids(retry_failed.as_deref()) {
                Ok(ids) => ids,
                Err(code) => return ExitCode::from(code),
            };
            or_error(run(&pipeline, &args, &redis, only_ids))
        }
        Command::Warp {
            gdalwarp,
            print_pipeline,
            args,
            retry_failed,
        } => warp::warp(&warp::WarpCommand {
            gdalwarp: &gdalwarp,
            print_pipeline,
            args: &args,
            retry_failed: retry_failed.as_deref(),
        }),
        Command::Demo { dir, args } => or_error(demo(&dir, &args)),
        Command::Verify {
            target,
            sample,
            gdalwarp,
            format,
            endpoint,
        } => or_error(verify::verify(&verify::VerifyArgs {
            target: &target,
            sample,
            gdalwarp,
            format,
            endpoint,
        })),
        Command::Enqueue {
            pipeline,
            sets,
            redis,
        } => or_error(enqueue(&pipeline, &sets, &redis)),
        Command::Status { redis, format } => or_error(status(&redis, format)),
        Command::Dead { redis, format } => or_error(coordinated::dead(&redis, format)),
        Command::Requeue { redis, ids, all } => {
            let ids = (!all).then_some(ids);
            or_error(coordinated::requeue(&redis, ids.as_deref()))
        }
    };
    ExitCode::from(code)
}

/// The ids of `--retry-failed FILE`, or the exit code of a file that
/// cannot be read.
fn only_ids(
    retry_failed: Option<&std::path::Path>,
) -> Result<Option<std::collections::HashSet<String>>, u8> {
    match retry_failed.map(RunOptions::ids_from_failures) {
        None => Ok(None),
        Some(Ok(ids)) => Ok(Some(ids)),
        Some(Err(e)) => {
            say_err!("error: --retry-failed: {e}");
            Err(EXIT_INVALID)
        }
    }
}

fn or_error(result: anyhow::Result<u8>) -> u8 {
    result.unwrap_or_else(|e| {
        say_err!("error: {e:#}");
        EXIT_ERROR
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
