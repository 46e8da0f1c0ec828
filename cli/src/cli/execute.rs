//! The `run` and `demo` commands: a pipeline run from the command line
//! (alone or as a coordinated worker), its interrupts, progress, the
//! report and its files, the exit code.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use warpline::engine::report::RunOutcome;
use warpline::engine::EventSink;
use warpline::{Pipeline, RunControl, RunOptions, RunReport};
use warpline_cli::progress::{EventsFile, Fanout, Progress};
use warpline_cli::top::Top;

use super::{
    coordinated, load_with, parse_sets, runtime, GlobalRates, ProgressMode, RedisArgs, RunArgs,
    EXIT_ABORTED_ON_ERROR, EXIT_COORDINATOR_LOST, EXIT_INTERRUPTED, EXIT_INVALID,
    EXIT_ITEMS_FAILED, EXIT_OK,
};

/// What a run writes besides its log: the sinks of its events, and the
/// report files, made before the run.
struct Outputs {
    sinks: Vec<Arc<dyn EventSink>>,
    progress: Option<Arc<Progress>>,
    /// `--progress stages`.
    top: Option<Arc<Top>>,
    terminal: bool,
    events: Option<Arc<EventsFile>>,
    report_file: Option<(PathBuf, std::fs::File)>,
    html_file: Option<(PathBuf, std::fs::File)>,
}

impl Outputs {
    fn open(
        args: &RunArgs,
        acker: Option<Arc<warpline_cli::coordinator::Acker>>,
    ) -> anyhow::Result<Self> {
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
        let top = (args.progress == ProgressMode::Stages).then(|| Top::new(terminal));
        if let Some(t) = &top {
            sinks.push(t.clone());
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
        Ok(Outputs {
            sinks,
            progress,
            top,
            terminal,
            events,
            report_file: create(&args.report, "report")?,
            html_file: create(&args.report_html, "HTML report")?,
        })
    }

    /// Where the run stands, in the log: the per-stage view, or the
    /// one-line summary.
    fn log_progress(&self) {
        match (&self.top, &self.progress) {
            (Some(t), _) => {
                if let Some(frame) = t.tick() {
                    tracing::info!(target: "warpline::progress", "\n{frame}");
                }
            }
            (None, Some(p)) => tracing::info!(target: "warpline::progress", "{}", p.summary()),
            (None, None) => {}
        }
    }

    /// Prints the report and writes its files.
    fn finish(self, report: &RunReport) -> anyhow::Result<()> {
        if let Some(p) = &self.progress {
            p.finish();
        }
        if let Some(t) = &self.top {
            t.finish();
        }
        if let Some(e) = self.events {
            e.flush().context("cannot write the events file")?;
        }
        let _ = write!(std::io::stdout().lock(), "{report}");
        if let Some((path, mut file)) = self.report_file {
            let json =
                serde_json::to_string_pretty(report).context("cannot serialise the report")?;
            file.write_all((json + "\n").as_bytes())
                .with_context(|| format!("cannot write the report to {}", path.display()))?;
        }
        if let Some((path, mut file)) = self.html_file {
            file.write_all(warpline_cli::html::render(report).as_bytes())
                .with_context(|| format!("cannot write the HTML report to {}", path.display()))?;
        }
        Ok(())
    }
}

/// Runs a pipeline until it ends, turning the first interrupt into a stop
/// and the second into an abort; prints and writes the reports.
pub(super) async fn execute(
    pipeline: &Pipeline,
    args: &RunArgs,
    only_ids: Option<std::collections::HashSet<String>>,
    acker: Option<Arc<warpline_cli::coordinator::Acker>>,
) -> anyhow::Result<u8> {
    let mut outputs = Outputs::open(args, acker.clone())?;
    // Which loop warps, and why: once, at start-up, before any item.
    for s in pipeline.stages() {
        for note in s.handler.notes() {
            tracing::info!("{}: {note}", s.name);
        }
    }
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
    let sinks = std::mem::take(&mut outputs.sinks);
    let options = RunOptions {
        failures: args.failures.clone(),
        only_ids,
        events: (!sinks.is_empty()).then(|| Arc::new(Fanout(sinks)) as Arc<dyn EventSink>),
        sample,
        shard: args.shard,
        metrics_label: None,
        probe: outputs.top.as_ref().map(|t| t.probe()),
    };

    let control = RunControl::new();
    let mut signalled = false;
    // Listen before the run starts, so no interrupt is missed.
    let mut signals = Signals::new()?;
    let run = pipeline.run_with_options(&control, &options);
    tokio::pin!(run);
    let mut summary = tokio::time::interval(Duration::from_secs(10));
    summary.tick().await;
    let mut redraw = tokio::time::interval(Duration::from_secs(1));
    let summaries =
        outputs.progress.is_some() && (!outputs.terminal || args.progress == ProgressMode::Log);
    let report = loop {
        tokio::select! {
            report = &mut run => break report?,
            () = signals.next() => {
                if control.is_stopped() {
                    say_err!("warpline: second interrupt: aborting now");
                    control.abort();
                } else {
                    signalled = true;
                    say_err!(
                        "warpline: stopping: no new inputs; items in flight have {:?} to finish \
                         (interrupt again to abort now)",
                        pipeline.shutdown_deadline()
                    );
                    control.stop();
                }
            }
            _ = redraw.tick(), if outputs.top.is_some() && outputs.terminal => {
                if let Some(t) = &outputs.top {
                    t.tick();
                }
            }
            _ = summary.tick(), if summaries => outputs.log_progress(),
        }
    };
    outputs.finish(&report)?;
    // A coordinated worker's transient failures went back to the queue:
    // say so, as the report counts each delivery that failed.
    let redelivered = acker.map_or(0, |a| a.left_for_redelivery());
    if redelivered > 0 {
        say!(
            "  of the failed, {redelivered} were left in the queue for another delivery \
             (`warpline status` and `warpline dead` say how they end)"
        );
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

/// `warpline run`: alone, or as a worker of a coordinated run.
pub(super) fn run(
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

/// `warpline demo`: the demo pipeline on sample tiles served on loopback.
pub(super) fn demo(dir: &Path, args: &RunArgs) -> anyhow::Result<u8> {
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
