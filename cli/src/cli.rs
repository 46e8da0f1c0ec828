//! Command-line interface: `warpline run`, `demo`, `validate` and `plan`.
//! Every flag and exit code is documented in docs/pipeline.md.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use warpline::engine::limit::{RateBackend, RateBackendError, RateBackendFactory};
use warpline::{Loader, Pipeline, RunOptions};

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

mod check;
mod coordinated;
mod execute;
use check::{plan, validate};
use coordinated::{enqueue, status, EnqueueArgs, NamedRunArgs, RedisArgs};
use execute::execute;

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
/// A coordinated worker gave up on Redis: it was out of reach for
/// `--redis-timeout`.
const EXIT_COORDINATOR_LOST: u8 = 5;
/// The run was interrupted by Ctrl-C / SIGINT or SIGTERM.
const EXIT_INTERRUPTED: u8 = 130;

const AFTER_HELP: &str = "\
Examples:
  warpline demo
  warpline validate pipelines/*.toml
  warpline plan pipelines/demo.toml
  warpline run pipelines/synthetic.toml --report report.json --report-html report.html
  warpline run my.toml --set stages.decode.workers=4 --failures failed.jsonl
  warpline run my.toml --retry-failed failed.jsonl
  WARPLINE__STAGES__WORK__WORKERS=8 warpline run pipelines/synthetic.toml

Exit codes: 0 all items done or skipped; 1 could not run; 2 invalid pipeline or
usage; 3 some items failed; 4 aborted on error (on_error = \"abort\"); 5 a
coordinated worker gave up on Redis (out of reach for --redis-timeout);
130 interrupted (Ctrl-C or SIGTERM).

Logs go to stderr; filter them with WARPLINE_LOG (like RUST_LOG), e.g.
WARPLINE_LOG=debug. The pipeline file reference is docs/pipeline.md.";

/// warpline: fetch, decode, reproject and write raster tiles, with every
/// resource bounded and every input accounted for.
#[derive(Debug, Parser)]
#[command(name = "warpline", version, about, after_help = AFTER_HELP)]
struct Cli {
    /// Log lines as text or as JSON objects.
    #[arg(long, value_enum, global = true, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProgressMode {
    /// A bar on a terminal; otherwise a summary line in the log every 10 s.
    Auto,
    /// A live view per stage (items queued, working, passed on, failed,
    /// rate), per limiter (use) and of the failures: redrawn every second
    /// on a terminal, otherwise in the log every 10 s.
    Stages,
    /// Never a bar; the summary line only.
    Log,
    /// Nothing.
    Off,
}

/// What `run` and `demo` share.
#[derive(Debug, Args)]
struct RunArgs {
    /// Override a setting, e.g. `--set stages.decode.workers=4`; applied
    /// after the file and WARPLINE__ environment variables. VALUE is read as
    /// TOML when it is TOML (`'"EPSG:3857"'`, `'["cpu"]'`), else as text
    /// (`EPSG:3857`). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also write the report as a self-contained HTML page with a timeline.
    #[arg(long, value_name = "FILE")]
    report_html: Option<PathBuf>,
    /// Write every event (admitted, stage started/finished, done, skipped,
    /// failed) as one JSON line to this file.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// Write each failed item as one JSON line to this file.
    #[arg(long, value_name = "FILE")]
    failures: Option<PathBuf>,
    /// Serve Prometheus metrics at this address (e.g. 127.0.0.1:9898) while
    /// the run lasts.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// How progress is shown.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
    /// Admit only the inputs of shard INDEX of COUNT (`3/10`, counted from
    /// 0), split by a fixed hash of each input's id. `auto/COUNT` takes the
    /// index from JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID or
    /// AWS_BATCH_JOB_ARRAY_INDEX. Not with --coordinator, whose workers
    /// share one queue instead.
    #[arg(long, value_name = "INDEX/COUNT")]
    shard: Option<warpline::engine::shard::Shard>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pipeline and print its report.
    Run {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        #[command(flatten)]
        args: RunArgs,
        #[command(flatten)]
        redis: RedisArgs,
        /// Run only the items listed in a failures file of an earlier run
        /// (the pipeline's source is read again; only those ids are admitted).
        /// Not with --coordinator: a coordinated run's failures are in its
        /// dead-letter stream.
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
        #[command(flatten)]
        args: RunArgs,
    },
    /// Check pipeline files in tiers (schema, graph, environment) and print
    /// every problem found; exit 0 when all are valid.
    Validate {
        /// The pipeline files (TOML).
        #[arg(required = true)]
        pipelines: Vec<PathBuf>,
        /// Override a setting before checking, as for `run`. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Put the inputs of a pipeline's source in the run's work queue in
    /// Redis, once each (enqueueing twice adds nothing).
    Enqueue {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Override a setting, as for `run`. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        #[command(flatten)]
        redis: EnqueueArgs,
    },
    /// Show a Redis-coordinated run's progress across workers.
    Status {
        #[command(flatten)]
        redis: NamedRunArgs,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// List a Redis-coordinated run's dead letters: each item's id, input,
    /// deliveries and last error.
    Dead {
        #[command(flatten)]
        redis: NamedRunArgs,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Move dead letters of a Redis-coordinated run back to its work queue
    /// (their deliveries counted from 0 again); then start workers.
    Requeue {
        #[command(flatten)]
        redis: NamedRunArgs,
        /// The items to move (their ids, as `dead` lists them).
        #[arg(
            value_name = "ID",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        ids: Vec<String>,
        /// Move every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Show the pipeline as it will run: stages, the admission bound,
    /// limiters with resolved numbers, GDAL's cache, estimated peak memory.
    Plan {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Override a setting, as for `run`. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
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
        } => validate(&pipelines, &sets, format),
        Command::Plan {
            pipeline,
            sets,
            format,
        } => plan(&pipeline, &sets, format),
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
            let only_ids = match retry_failed.as_deref().map(RunOptions::ids_from_failures) {
                None => None,
                Some(Ok(ids)) => Some(ids),
                Some(Err(e)) => {
                    say_err!("error: --retry-failed: {e}");
                    return ExitCode::from(EXIT_INVALID);
                }
            };
            or_error(run(&pipeline, &args, &redis, only_ids))
        }
        Command::Demo { dir, args } => or_error(demo(&dir, &args)),
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

fn or_error(result: anyhow::Result<u8>) -> u8 {
    result.unwrap_or_else(|e| {
        say_err!("error: {e:#}");
        EXIT_ERROR
    })
}

/// Crates whose debug logs quote URLs with their user names and passwords
/// (hyper's connection pool keys, reqwest's redirect targets): kept at
/// `info` when `WARPLINE_LOG` asks for `debug` or `trace` everywhere, unless
/// it names them.
const QUIET_CRATES: &[&str] = &["hyper", "hyper_util", "reqwest", "rustls", "h2"];

/// `WARPLINE_LOG`'s directives, with `CRATE=info` added for each of
/// [`QUIET_CRATES`] that no directive names when one asks for more than
/// `info` for every target.
fn log_directives(given: &str) -> String {
    use tracing_subscriber::filter::LevelFilter;
    let mut verbose = false;
    let mut targets = Vec::new();
    for d in given.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        // `LEVEL`, `TARGET`, `TARGET=LEVEL`, `TARGET[SPAN{FIELD=V}]=LEVEL`.
        let (target, level) = match d.rsplit_once('=') {
            Some((lhs, level)) if level.parse::<LevelFilter>().is_ok() => (lhs, level),
            _ if d.parse::<LevelFilter>().is_ok() => ("", d),
            _ => (d, "trace"),
        };
        let target = target.split(['[', '=']).next().unwrap_or_default();
        if target.is_empty() {
            verbose |= level
                .parse::<LevelFilter>()
                .is_ok_and(|l| l > LevelFilter::INFO);
        } else {
            targets.push(target);
        }
    }
    let mut directives = given.to_owned();
    if verbose {
        for quiet in QUIET_CRATES {
            // A directive applies to the targets it is a prefix of; one for
            // a part of the crate (`reqwest::connect`) is more specific than
            // `reqwest=info` and still wins there.
            let named = targets.iter().any(|t| quiet.starts_with(t));
            if !named {
                directives.push_str(&format!(",{quiet}=info"));
            }
        }
    }
    directives
}

fn init_logging(format: LogFormat) {
    let filter = std::env::var("WARPLINE_LOG")
        .ok()
        .and_then(|given| tracing_subscriber::EnvFilter::try_new(log_directives(&given)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn,warpline::progress=info"));
    // A log line that cannot be written (stderr is a closed pipe) is
    // dropped: the default reports it on stderr, which panics there.
    // Colour only on a terminal (a log file or a pipe gets plain text),
    // and never with `NO_COLOR` set (https://no-color.org).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .log_internal_errors(false)
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(warpline_cli::progress::LogWriter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
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

fn loader(path: &Path, sets: &[String]) -> Result<Loader, String> {
    let mut loader = Loader::from_path(path).with_env();
    for (key, value) in parse_sets(sets)? {
        loader = loader.set(key, value);
    }
    Ok(loader)
}

/// The backends of `scope = "global"` rates, bound once the coordinator
/// is connected. The run's name, which names its keys in Redis, comes from
/// the pipeline, so a coordinated run compiles its pipeline once, with
/// these, and binds them after connecting. Unbound (`validate`, `plan`,
/// `enqueue`), a global rate's backend says the coordinator is not
/// connected.
#[derive(Clone, Default)]
struct GlobalRates(Arc<OnceLock<RateBackendFactory>>);

impl GlobalRates {
    /// What the pipeline is compiled with: a backend per global rate that
    /// is made by the bound factory when first used.
    fn factory(&self) -> RateBackendFactory {
        let bound = Arc::clone(&self.0);
        Arc::new(move |name: &str, per_second: f64, burst: u32| {
            Arc::new(LateRate {
                bound: Arc::clone(&bound),
                name: name.to_owned(),
                per_second,
                burst,
                backend: OnceLock::new(),
            }) as Arc<dyn RateBackend>
        })
    }

    /// Binds every global rate of the pipelines compiled with
    /// [`factory`](Self::factory) to `factory` (the coordinator's); the
    /// first binding stays.
    fn bind(&self, factory: RateBackendFactory) {
        let _ = self.0.set(factory);
    }
}

/// A global rate whose backend is made when [`GlobalRates`] is bound.
struct LateRate {
    bound: Arc<OnceLock<RateBackendFactory>>,
    name: String,
    per_second: f64,
    burst: u32,
    backend: OnceLock<Arc<dyn RateBackend>>,
}

impl LateRate {
    fn backend(&self) -> Result<&Arc<dyn RateBackend>, RateBackendError> {
        let Some(factory) = self.bound.get() else {
            return Err(RateBackendError(
                "the coordinator is not connected".to_owned(),
            ));
        };
        Ok(self
            .backend
            .get_or_init(|| factory(&self.name, self.per_second, self.burst)))
    }
}

#[warpline::async_trait]
impl RateBackend for LateRate {
    async fn acquire(&self, key: &str) -> Result<(), RateBackendError> {
        self.backend()?.acquire(key).await
    }

    async fn pause(&self, key: &str, delay: Duration) -> Result<(), RateBackendError> {
        match self.backend() {
            Ok(backend) => backend.pause(key, delay).await,
            Err(_) => Ok(()),
        }
    }
}

/// Global rates that stay unbound: checked like any other rate, never run.
fn not_connected() -> RateBackendFactory {
    GlobalRates::default().factory()
}

/// Loads a pipeline, printing every problem; `Err(code)` to exit with.
/// `global` makes the backends of `scope = "global"` rates.
fn load_with(
    path: &Path,
    sets: &[String],
    global: Option<RateBackendFactory>,
) -> Result<Pipeline, u8> {
    let loaded = loader(path, sets).map(|l| match global {
        Some(g) => l.with_global_rates(g),
        None => l,
    });
    match loaded.map(|l| l.load(&warpline::registry())) {
        Err(usage) => {
            say_err!("error: {usage}");
            Err(EXIT_INVALID)
        }
        Ok(Err(errors)) => {
            say_err!("{errors}");
            Err(EXIT_INVALID)
        }
        Ok(Ok(p)) => Ok(p),
    }
}

fn run(
    path: &Path,
    args: &RunArgs,
    redis: &RedisArgs,
    only_ids: Option<std::collections::HashSet<String>>,
) -> anyhow::Result<u8> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let rates = redis.coordinator.as_ref().map(|_| GlobalRates::default());
        let pipeline = match load_with(path, &args.sets, rates.as_ref().map(GlobalRates::factory)) {
            Ok(p) => p,
            Err(code) => return Ok(code),
        };
        let Some(c) = redis.connect(pipeline.name()).await? else {
            return execute(&pipeline, args, only_ids, None).await;
        };
        if let Some(code) = coordinated::nothing_enqueued(&c).await? {
            return Ok(code);
        }
        // The same pipeline, with the coordinator's global rates, reading
        // its queue.
        if let Some(rates) = &rates {
            rates.bind(c.rate_backends());
        }
        let (queue, acker) = c.worker();
        let pipeline = pipeline.with_source("redis", queue);
        let code = execute(&pipeline, args, only_ids, Some(acker.clone())).await;
        acker.finish().await;
        match c.lost() {
            Some(why) => {
                say_err!(
                    "error: gave up on the coordinator: {why}. Items this worker did not \
                     acknowledge stay pending in Redis and are claimed by other workers \
                     after --reclaim-after; what it finished is on disk and is skipped \
                     when its item comes again."
                );
                Ok(EXIT_COORDINATOR_LOST)
            }
            None => code,
        }
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn demo(dir: &Path, args: &RunArgs) -> anyhow::Result<u8> {
    let sets = match parse_sets(&args.sets) {
        Ok(s) => s,
        Err(usage) => {
            say_err!("error: {usage}");
            return Ok(EXIT_INVALID);
        }
    };
    let runtime = runtime()?;
    runtime.block_on(async {
        let demo = match warpline_cli::demo::prepare(dir, &sets).await {
            Ok(d) => d,
            Err(warpline_cli::demo::DemoError::Config(errors)) => {
                say_err!("{errors}");
                return Ok(EXIT_INVALID);
            }
            Err(e) => return Err(anyhow::anyhow!("cannot prepare the demo: {e}")),
        };
        say_err!(
            "warpline demo: {} sample tiles served at http://{}/tiles/, listed in {}",
            4 * warpline_cli::demo::TILES_PER_CRS,
            demo.server.addr(),
            dir.join("tiles.txt").display()
        );
        let code = execute(&demo.pipeline, args, None, None).await?;
        say!("outputs: {}", dir.join("output").display());
        Ok(code)
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        // clap's own checks (conflicts and groups name arguments that
        // exist in every subcommand, no two flags alike), which it would
        // otherwise run only when a user gives that subcommand.
        super::Cli::command().debug_assert();
    }

    #[test]
    fn http_clients_stay_at_info_unless_named() {
        use super::log_directives;
        let quiet = ",hyper=info,hyper_util=info,reqwest=info,rustls=info,h2=info";
        assert_eq!(log_directives("debug"), format!("debug{quiet}"));
        assert_eq!(
            log_directives("info,[item]=trace"),
            format!("info,[item]=trace{quiet}")
        );
        // Named (`hyper` is a prefix of `hyper_util`, as the filter reads
        // it): left as asked.
        assert_eq!(
            log_directives("debug,hyper=trace,reqwest::connect=debug"),
            "debug,hyper=trace,reqwest::connect=debug,reqwest=info,rustls=info,h2=info"
        );
        // Nothing asks for more than `info` everywhere: nothing to add.
        for given in [
            "warn,warpline::progress=info",
            "warpline_engine=debug",
            "info",
            "off",
        ] {
            assert_eq!(log_directives(given), given);
        }
        for given in ["debug", "trace,hyper_util=debug", "warn,gdal=debug"] {
            assert!(tracing_subscriber::EnvFilter::try_new(log_directives(given)).is_ok());
        }
    }
}
