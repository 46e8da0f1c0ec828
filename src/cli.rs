//! Command-line interface: `warpline run`, `demo`, `validate` and `plan`.
//! Every flag and exit code is documented in docs/pipeline.md.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use warpline::engine::report::RunOutcome;
use warpline::engine::{EventSink, Tier};
use warpline::progress::{EventsFile, Fanout, Progress};
use warpline::{Loader, Pipeline, Problem, RunControl, RunOptions, RunReport};

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
  warpline demo
  warpline validate pipelines/*.toml
  warpline plan pipelines/demo.toml
  warpline run pipelines/synthetic.toml --report report.json --report-html report.html
  warpline run my.toml --set stages.decode.workers=4 --failures failed.jsonl
  warpline run my.toml --retry-failed failed.jsonl
  WARPLINE__STAGES__WORK__WORKERS=8 warpline run pipelines/synthetic.toml

Exit codes: 0 all items done or skipped; 1 could not run; 2 invalid pipeline or
usage; 3 some items failed; 4 aborted on error (on_error = \"abort\");
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

/// Where a run's shared work queue lives.
#[derive(Debug, Args)]
struct RedisArgs {
    /// Read inputs from the run's work queue in Redis (filled by `warpline
    /// enqueue`) instead of the pipeline's source; keep `scope = "global"`
    /// rates there.
    #[arg(long, value_name = "redis://HOST:PORT")]
    coordinator: Option<String>,
    /// The run's name in Redis (default: the pipeline's name).
    #[arg(long, value_name = "NAME")]
    run: Option<String>,
    /// This worker's name (default: HOST-PID).
    #[arg(long, value_name = "NAME")]
    consumer: Option<String>,
    /// Deliveries of an item before it goes to the dead-letter stream (an
    /// item failed by a permanent error goes there at once).
    #[arg(long, value_name = "N", default_value_t = 3)]
    max_deliveries: u32,
    /// Claim an item from another worker when it has been pending this long.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    reclaim_after: String,
}

impl RedisArgs {
    async fn connect(
        &self,
        pipeline_name: &str,
    ) -> anyhow::Result<Option<warpline::coordinator::Coordinator>> {
        let Some(url) = &self.coordinator else {
            return Ok(None);
        };
        let reclaim_after = warpline::engine::units::parse_duration(&self.reclaim_after)
            .map_err(|e| anyhow::anyhow!("--reclaim-after: {e}"))?;
        let consumer = self.consumer.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
            format!("{}-{}", host.trim(), std::process::id())
        });
        let settings = warpline::coordinator::Settings {
            run: self.run.clone().unwrap_or_else(|| pipeline_name.to_owned()),
            consumer,
            max_deliveries: self.max_deliveries.max(1),
            reclaim_after,
        };
        let c = warpline::coordinator::Coordinator::connect(url, settings)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(Some(c))
    }
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
        redis: RedisArgs,
    },
    /// Show a Redis-coordinated run's progress across workers.
    Status {
        #[command(flatten)]
        redis: RedisArgs,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
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
                    eprintln!(
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
                    eprintln!("error: --retry-failed: {e}");
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
    };
    ExitCode::from(code)
}

fn or_error(result: anyhow::Result<u8>) -> u8 {
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        EXIT_ERROR
    })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARPLINE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,warpline::progress=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
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

/// Loads a pipeline, printing every problem; `Err(code)` to exit with.
fn load(path: &Path, sets: &[String]) -> Result<Pipeline, u8> {
    load_with(path, sets, None)
}

/// A stand-in for global rates while the coordinator is not connected yet
/// (the pipeline's name, which names the run, comes from compiling it).
struct NotConnected;

#[warpline::async_trait]
impl warpline::engine::limit::RateBackend for NotConnected {
    async fn acquire(&self, _key: &str) -> Result<(), String> {
        Err("the coordinator is not connected".to_owned())
    }
    async fn pause(&self, _key: &str, _delay: Duration) -> Result<(), String> {
        Ok(())
    }
}

fn not_connected() -> warpline::engine::limit::RateBackendFactory {
    Arc::new(|_: &str, _: f64, _: u32| {
        Arc::new(NotConnected) as Arc<dyn warpline::engine::limit::RateBackend>
    })
}

fn load_with(
    path: &Path,
    sets: &[String],
    global: Option<warpline::engine::limit::RateBackendFactory>,
) -> Result<Pipeline, u8> {
    let loaded = loader(path, sets).map(|l| match global {
        Some(g) => l.with_global_rates(g),
        None => l,
    });
    match loaded.map(|l| l.load(&warpline::registry())) {
        Err(usage) => {
            eprintln!("error: {usage}");
            Err(EXIT_INVALID)
        }
        Ok(Err(errors)) => {
            eprintln!("{errors}");
            Err(EXIT_INVALID)
        }
        Ok(Ok(p)) => Ok(p),
    }
}

fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Schema => "schema",
        Tier::Graph => "graph",
        Tier::Environment => "environment",
    }
}

fn validate(paths: &[PathBuf], sets: &[String], format: Format) -> u8 {
    let registry = warpline::registry();
    let mut files = Vec::new();
    for path in paths {
        let loaded = match loader(path, sets) {
            Err(usage) => {
                eprintln!("error: {usage}");
                return EXIT_INVALID;
            }
            Ok(l) => l.load(&registry),
        };
        let (problems, bound): (Vec<Problem>, Option<u64>) = match loaded {
            Ok(p) => (p.check_environment(), Some(p.admission_bound())),
            Err(e) => (e.problems, None),
        };
        files.push((path.clone(), problems, bound));
    }
    let all_valid = files.iter().all(|(_, p, _)| p.is_empty());
    match format {
        Format::Json => {
            let json = serde_json::json!({
                "valid": all_valid,
                "files": files.iter().map(|(path, problems, bound)| serde_json::json!({
                    "path": path.display().to_string(),
                    "valid": problems.is_empty(),
                    "admission_bound": bound,
                    "problems": problems,
                })).collect::<Vec<_>>(),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&json).unwrap_or_default()
            );
        }
        Format::Text => {
            for (path, problems, bound) in &files {
                if problems.is_empty() {
                    println!(
                        "{}: valid (admission bound {} items)",
                        path.display(),
                        bound.unwrap_or_default()
                    );
                    continue;
                }
                let n = problems.len();
                println!(
                    "{}: {n} problem{}",
                    path.display(),
                    if n == 1 { "" } else { "s" }
                );
                let mut sorted: Vec<&Problem> = problems.iter().collect();
                sorted.sort_by_key(|p| p.tier);
                for p in sorted {
                    println!("  - [{}] {}: {}", tier_name(p.tier), p.path, p.message);
                }
            }
        }
    }
    if all_valid {
        EXIT_OK
    } else {
        EXIT_INVALID
    }
}

fn plan(path: &Path, sets: &[String], format: Format) -> u8 {
    let pipeline = match load(path, sets) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let plan = warpline::plan::Plan::of(&pipeline);
    match format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&plan).unwrap_or_default()
        ),
        Format::Text => print!("{plan}"),
    }
    EXIT_OK
}

fn run(
    path: &Path,
    args: &RunArgs,
    redis: &RedisArgs,
    only_ids: Option<std::collections::HashSet<String>>,
) -> anyhow::Result<u8> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let global = redis.coordinator.as_ref().map(|_| not_connected());
        let pipeline = match load_with(path, &args.sets, global) {
            Ok(p) => p,
            Err(code) => return Ok(code),
        };
        let Some(c) = redis.connect(pipeline.name()).await? else {
            return execute(&pipeline, args, only_ids, None).await;
        };
        // Again, with the coordinator's global rates, reading its queue.
        let pipeline = match load_with(path, &args.sets, Some(c.rate_backends())) {
            Ok(p) => p,
            Err(code) => return Ok(code),
        };
        let (queue, acker) = c.worker();
        let pipeline = pipeline.with_source("redis", queue);
        let code = execute(&pipeline, args, only_ids, Some(acker.clone())).await;
        acker.finish().await;
        code
    })
}

fn enqueue(path: &Path, sets: &[String], redis: &RedisArgs) -> anyhow::Result<u8> {
    let pipeline = match load_with(path, sets, Some(not_connected())) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    if redis.coordinator.is_none() {
        eprintln!("error: enqueue needs --coordinator redis://HOST:PORT");
        return Ok(EXIT_INVALID);
    }
    runtime()?.block_on(async {
        let c = redis
            .connect(pipeline.name())
            .await?
            .expect("checked above");
        let source = pipeline.source().open().map_err(|e| anyhow::anyhow!(e))?;
        let (added, already) = c.enqueue(source).await.map_err(|e| anyhow::anyhow!(e))?;
        println!("enqueued {added} inputs ({already} were there already)");
        Ok(EXIT_OK)
    })
}

fn status(redis: &RedisArgs, format: Format) -> anyhow::Result<u8> {
    let Some(run) = &redis.run else {
        eprintln!("error: status needs --run NAME (the pipeline's name by default when running)");
        return Ok(EXIT_INVALID);
    };
    runtime()?.block_on(async {
        let Some(c) = redis.connect(run).await? else {
            eprintln!("error: status needs --coordinator redis://HOST:PORT");
            return Ok(EXIT_INVALID);
        };
        let s = c.status().await.map_err(|e| anyhow::anyhow!(e))?;
        match format {
            Format::Json => println!("{}", serde_json::to_string_pretty(&s)?),
            Format::Text => println!(
                "run `{}`: {} enqueued, {} done, {} dead, {} pending{}",
                s.run,
                s.enqueued,
                s.done,
                s.dead,
                s.pending,
                if s.complete {
                    ": complete"
                } else if s.enqueued == 0 {
                    " (nothing was enqueued under this name: check --run, or run `warpline enqueue` first)"
                } else {
                    ""
                }
            ),
        }
        Ok(EXIT_OK)
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
            eprintln!("error: {usage}");
            return Ok(EXIT_INVALID);
        }
    };
    let runtime = runtime()?;
    runtime.block_on(async {
        let demo = match warpline::demo::prepare(dir, &sets).await {
            Ok(d) => d,
            Err(warpline::demo::DemoError::Config(errors)) => {
                eprintln!("{errors}");
                return Ok(EXIT_INVALID);
            }
            Err(e) => return Err(anyhow::anyhow!("cannot prepare the demo: {e}")),
        };
        eprintln!(
            "warpline demo: {} sample tiles served at http://{}/tiles/, listed in {}",
            4 * warpline::demo::TILES_PER_CRS,
            demo.server.addr(),
            dir.join("tiles.txt").display()
        );
        let code = execute(&demo.pipeline, args, None, None).await?;
        println!("outputs: {}", dir.join("output").display());
        Ok(code)
    })
}

/// Runs a pipeline until it ends, turning the first interrupt into a stop
/// and the second into an abort; prints and writes the reports.
async fn execute(
    pipeline: &Pipeline,
    args: &RunArgs,
    only_ids: Option<std::collections::HashSet<String>>,
    acker: Option<Arc<warpline::coordinator::Acker>>,
) -> anyhow::Result<u8> {
    let mut sinks: Vec<Arc<dyn EventSink>> = Vec::new();
    if let Some(a) = acker {
        sinks.push(a);
    }
    let terminal = std::io::stderr().is_terminal();
    let progress = (args.progress != ProgressMode::Off)
        .then(|| Progress::new(terminal && args.progress == ProgressMode::Auto));
    if let Some(p) = &progress {
        sinks.push(p.clone());
    }
    let events = match &args.events {
        None => None,
        Some(path) => {
            let f = EventsFile::create(path)
                .with_context(|| format!("cannot create the events file {}", path.display()))?;
            sinks.push(f.clone());
            Some(f)
        }
    };
    // The report files are made before the run: a path that cannot be
    // written is said at once, not after hours of work.
    let create = |path: &Option<PathBuf>, what: &str| {
        path.as_ref()
            .map(|p| {
                std::fs::File::create(p)
                    .map(|f| (p.clone(), f))
                    .with_context(|| format!("cannot create the {what} {}", p.display()))
            })
            .transpose()
    };
    let report_file = create(&args.report, "report")?;
    let html_file = create(&args.report_html, "HTML report")?;
    if let Some(addr) = args.metrics {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .with_context(|| format!("cannot serve metrics on {addr}"))?;
    }
    let sample = match (&args.report_html, args.metrics) {
        (Some(_), _) => Some(Duration::from_millis(100)),
        (None, Some(_)) => Some(Duration::from_secs(1)),
        (None, None) => None,
    };
    let options = RunOptions {
        failures: args.failures.clone(),
        only_ids,
        events: (!sinks.is_empty()).then(|| Arc::new(Fanout(sinks)) as Arc<dyn EventSink>),
        sample,
        shard: args.shard,
    };

    let control = RunControl::new();
    let mut signalled = false;
    // Listen before the run starts, so no interrupt is missed.
    let mut signals = Signals::new()?;
    let run = pipeline.run_with_options(&control, &options);
    tokio::pin!(run);
    let mut summary = tokio::time::interval(Duration::from_secs(10));
    summary.tick().await;
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
            _ = summary.tick(), if progress.is_some() && (!terminal || args.progress == ProgressMode::Log) => {
                if let Some(p) = &progress {
                    tracing::info!(target: "warpline::progress", "{}", p.summary());
                }
            }
        }
    };
    if let Some(p) = &progress {
        p.finish();
    }
    if let Some(e) = events {
        e.flush().context("cannot write the events file")?;
    }
    print!("{report}");
    if let Some((path, mut file)) = report_file {
        let json = serde_json::to_string_pretty(&report).context("cannot serialise the report")?;
        file.write_all((json + "\n").as_bytes())
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    if let Some((path, mut file)) = html_file {
        file.write_all(warpline::html::render(&report).as_bytes())
            .with_context(|| format!("cannot write the HTML report to {}", path.display()))?;
    }
    Ok(exit_code(&report, signalled))
}

fn exit_code(report: &RunReport, signalled: bool) -> u8 {
    match report.outcome {
        RunOutcome::AbortedOnError => EXIT_ABORTED_ON_ERROR,
        RunOutcome::Stopped | RunOutcome::Aborted if signalled => EXIT_INTERRUPTED,
        _ if report.items.failed > 0 => EXIT_ITEMS_FAILED,
        _ => EXIT_OK,
    }
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
}
