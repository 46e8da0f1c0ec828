//! Command-line interface: `warpline run` and `warpline validate`.
//! Exit codes are documented in docs/pipeline.md ("Exit codes").

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use warpline::engine::report::RunOutcome;
use warpline::{Loader, RunControl, RunOptions, RunReport};

/// Every input ended done or skipped.
const EXIT_OK: u8 = 0;
/// warpline could not start or finish the run (unreadable source, unwritable
/// report file, ...).
const EXIT_ERROR: u8 = 1;
/// The command line or a pipeline file is invalid.
const EXIT_INVALID: u8 = 2;
/// The run finished but some items failed.
const EXIT_ITEMS_FAILED: u8 = 3;
/// The run was aborted because an item failed and `on_error = "abort"`.
const EXIT_ABORTED_ON_ERROR: u8 = 4;
/// The run was interrupted by Ctrl-C / SIGINT or SIGTERM.
const EXIT_INTERRUPTED: u8 = 130;

const AFTER_HELP: &str = "\
Examples:
  warpline validate pipelines/*.toml
  warpline run pipelines/synthetic.toml
  warpline run pipelines/synthetic.toml --set source.count=5000 --report report.json
  WARPLINE__STAGES__WORK__WORKERS=8 warpline run pipelines/synthetic.toml

Exit codes: 0 all items done or skipped; 1 could not run; 2 invalid pipeline or
usage; 3 some items failed; 4 aborted on error (on_error = \"abort\");
130 interrupted (Ctrl-C or SIGTERM).

Logs go to stderr; set WARPLINE_LOG (like RUST_LOG), e.g. WARPLINE_LOG=debug.
The pipeline file reference is docs/pipeline.md.";

/// warpline: fetch, decode, reproject and write raster tiles, with every
/// resource bounded and every input accounted for.
#[derive(Debug, Parser)]
#[command(name = "warpline", version, about, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pipeline and print its report.
    Run {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Override a setting, e.g. `--set stages.decode.workers=4`; applied
        /// after the file and WARPLINE__ environment variables. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Also write the report as JSON to this file.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Write each failed item as one JSON line to this file.
        #[arg(long, value_name = "FILE")]
        failures: Option<PathBuf>,
        /// Run only the items listed in a failures file of an earlier run
        /// (the pipeline's source is read again; only those ids are admitted).
        #[arg(long, value_name = "FILE")]
        retry_failed: Option<PathBuf>,
    },
    /// Run the demo: make sample tiles in four CRSs, serve them on a
    /// loopback HTTP server, and fetch, decode, reproject (to EPSG:3857) and
    /// write them as COGs with pipelines/demo.toml. Needs no network and no
    /// data files.
    Demo {
        /// Where the tile list and the outputs go.
        #[arg(long, value_name = "DIR", default_value = "out/demo")]
        dir: PathBuf,
        /// Override a setting of the demo pipeline. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Also write the report as JSON to this file.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
    },
    /// Check pipeline files and print every problem found; exit 0 when all
    /// are valid.
    Validate {
        /// The pipeline files (TOML).
        #[arg(required = true)]
        pipelines: Vec<PathBuf>,
        /// Override a setting before checking, as for `run`. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
}

pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
    init_logging();
    // Use every descriptor the system allows; the `descriptors` unit budget
    // is sized from this limit.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::debug!("cannot raise the open-file limit: {e}");
    }
    let code = match cli.command {
        Command::Validate { pipelines, sets } => validate(&pipelines, &sets),
        Command::Run {
            pipeline,
            sets,
            report,
            failures,
            retry_failed,
        } => {
            let options = match retry_failed.as_deref().map(RunOptions::ids_from_failures) {
                Some(Err(e)) => {
                    eprintln!("error: --retry-failed: {e}");
                    return ExitCode::from(EXIT_INVALID);
                }
                ids => RunOptions {
                    failures,
                    only_ids: ids.and_then(Result::ok),
                },
            };
            or_error(run(&pipeline, &sets, report, &options))
        }
        Command::Demo { dir, sets, report } => or_error(demo(&dir, &sets, report)),
    };
    ExitCode::from(code)
}

fn or_error(result: anyhow::Result<u8>) -> u8 {
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        EXIT_ERROR
    })
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARPLINE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn parse_sets(sets: &[String]) -> Result<Vec<(String, String)>, String> {
    sets.iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_owned(), v.trim().to_owned())),
            None => Err(format!(
                "--set {s:?}: expected KEY=VALUE, e.g. --set stages.decode.workers=4"
            )),
        })
        .collect()
}

fn loader(path: &PathBuf, sets: &[String]) -> Result<Loader, String> {
    let mut loader = Loader::from_path(path).with_env();
    for (key, value) in parse_sets(sets)? {
        loader = loader.set(key, value);
    }
    Ok(loader)
}

fn validate(paths: &[PathBuf], sets: &[String]) -> u8 {
    let registry = warpline::registry();
    let mut code = EXIT_OK;
    for path in paths {
        let result = loader(path, sets).map(|l| l.load(&registry));
        match result {
            Err(usage) => {
                eprintln!("error: {usage}");
                return EXIT_INVALID;
            }
            Ok(Ok(p)) => println!(
                "{}: valid ({} stages, admission bound {} items)",
                path.display(),
                p.stages().len(),
                p.admission_bound()
            ),
            Ok(Err(errors)) => {
                println!("{errors}");
                code = EXIT_INVALID;
            }
        }
    }
    code
}

fn run(
    path: &PathBuf,
    sets: &[String],
    report_path: Option<PathBuf>,
    options: &RunOptions,
) -> anyhow::Result<u8> {
    let registry = warpline::registry();
    let pipeline = match loader(path, sets).map(|l| l.load(&registry)) {
        Err(usage) => {
            eprintln!("error: {usage}");
            return Ok(EXIT_INVALID);
        }
        Ok(Err(errors)) => {
            eprintln!("{errors}");
            return Ok(EXIT_INVALID);
        }
        Ok(Ok(p)) => p,
    };
    let runtime = runtime()?;
    let (report, signalled) = runtime.block_on(execute(&pipeline, options))?;
    finish(&report, report_path, signalled)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn demo(dir: &Path, sets: &[String], report_path: Option<PathBuf>) -> anyhow::Result<u8> {
    let sets = match parse_sets(sets) {
        Ok(s) => s,
        Err(usage) => {
            eprintln!("error: {usage}");
            return Ok(EXIT_INVALID);
        }
    };
    let runtime = runtime()?;
    let outcome = runtime.block_on(async {
        let demo = match warpline::demo::prepare(dir, &sets).await {
            Ok(d) => d,
            Err(warpline::demo::DemoError::Config(errors)) => {
                eprintln!("{errors}");
                return Ok(None);
            }
            Err(e) => return Err(anyhow::anyhow!("cannot prepare the demo: {e}")),
        };
        eprintln!(
            "warpline demo: {} sample tiles served at http://{}/tiles/, listed in {}",
            4 * warpline::demo::TILES_PER_CRS,
            demo.server.addr(),
            dir.join("tiles.txt").display()
        );
        let result = execute(&demo.pipeline, &RunOptions::default()).await?;
        anyhow::Ok(Some(result))
    })?;
    let Some((report, signalled)) = outcome else {
        return Ok(EXIT_INVALID);
    };
    let code = finish(&report, report_path, signalled)?;
    println!("outputs: {}", dir.join("output").display());
    Ok(code)
}

/// Runs a pipeline until it ends, turning the first interrupt into a stop
/// and the second into an abort. Returns the report and whether a signal
/// arrived.
async fn execute(
    pipeline: &warpline::Pipeline,
    options: &RunOptions,
) -> anyhow::Result<(RunReport, bool)> {
    let control = RunControl::new();
    let mut signalled = false;
    // Listen before the run starts, so no interrupt is missed.
    let mut signals = Signals::new()?;
    let run = pipeline.run_with_options(&control, options);
    tokio::pin!(run);
    let report = loop {
        tokio::select! {
            report = &mut run => break report?,
            () = signals.next() => {
                if control.is_stopped() {
                    eprintln!("warpline: second interrupt: aborting now");
                    control.abort();
                } else {
                    signalled = true;
                    eprintln!(
                        "warpline: stopping: no new inputs; items in flight have {:?} to finish \
                         (interrupt again to abort now)",
                        pipeline.shutdown_deadline()
                    );
                    control.stop();
                }
            }
        }
    };
    Ok((report, signalled))
}

fn finish(report: &RunReport, report_path: Option<PathBuf>, signalled: bool) -> anyhow::Result<u8> {
    print!("{report}");
    if let Some(path) = report_path {
        write_report(report, &path)?;
    }
    Ok(exit_code(report, signalled))
}

fn exit_code(report: &RunReport, signalled: bool) -> u8 {
    match report.outcome {
        RunOutcome::AbortedOnError => EXIT_ABORTED_ON_ERROR,
        RunOutcome::Stopped | RunOutcome::Aborted if signalled => EXIT_INTERRUPTED,
        _ if report.items.failed > 0 => EXIT_ITEMS_FAILED,
        _ => EXIT_OK,
    }
}

fn write_report(report: &RunReport, path: &PathBuf) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report).context("cannot serialise the report")?;
    std::fs::write(path, json + "\n")
        .with_context(|| format!("cannot write the report to {}", path.display()))
}

/// Ctrl-C / SIGINT and SIGTERM, listened for from creation on.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                int: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
                term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Resolves at the next interrupt.
    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
