//! What the binary shows while a run goes on: a progress bar on a terminal
//! (done/total, rate, ETA, failures), otherwise a one-line summary in the
//! log every so often; and `--events FILE`, one JSON line per event. Log
//! lines are written through [`LogWriter`], which prints them above the bar.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use warpline_engine::{Event, EventKind, EventSink};

/// The progress bar on the terminal while one is drawn: log lines are
/// printed above it (see [`LogWriter`]).
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Where text and JSON log lines go: stderr, and while a progress bar is
/// drawn there, above it: the bar is cleared, the line written, the bar
/// drawn again, so a line is never glued to the bar's frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

/// One log line being formatted; written out whole when dropped.
#[derive(Debug, Default)]
pub struct LogLine(Vec<u8>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine::default()
    }
}

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let bar = BAR.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // A line that cannot be written (stderr is a closed pipe) is dropped.
        let write = || {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(&self.0);
            let _ = err.flush();
        };
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }
}

/// Makes `bar` the lines log lines are printed above (`None`: none now).
pub(crate) fn draw_above(bar: Option<ProgressBar>) {
    *BAR.lock().unwrap_or_else(|p| p.into_inner()) = bar;
}

/// Counts outcomes and drives a progress bar (when there is one).
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    total: AtomicU64,
    ended: AtomicU64,
    failed: AtomicU64,
    skipped: AtomicU64,
}

impl Progress {
    /// A progress bar on stderr if it is a terminal; counters only if not.
    pub fn new(terminal: bool) -> Arc<Self> {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {rate} ETA {eta} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                // Items a second, to one decimal (indicatif's own
                // `per_sec` shows four).
                .with_key(
                    "rate",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.1}/s", state.per_sec());
                    },
                ),
            );
            draw_above(Some(bar.clone()));
            bar
        });
        Arc::new(Progress {
            bar,
            total: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        })
    }

    /// One line: `120/1000 ended, 3 failed, 0 skipped`.
    pub fn summary(&self) -> String {
        let total = match self.total.load(Ordering::Relaxed) {
            0 => "?".to_owned(),
            n => n.to_string(),
        };
        format!(
            "{}/{total} ended, {} failed, {} skipped",
            self.ended.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed)
        )
    }

    /// Clears the bar; log lines go straight to stderr again.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            draw_above(None);
            bar.finish_and_clear();
        }
    }

    fn ended(&self) {
        self.ended.fetch_add(1, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
}

impl EventSink for Progress {
    fn event(&self, event: &Event) {
        match &event.kind {
            EventKind::RunStarted { total: Some(t), .. } => {
                self.total.store(*t, Ordering::Relaxed);
                if let Some(bar) = &self.bar {
                    bar.set_length(*t);
                }
            }
            EventKind::Done { .. } => self.ended(),
            EventKind::Skipped { .. } => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                self.ended();
            }
            EventKind::Failed { .. } => {
                let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
                self.ended();
                if let Some(bar) = &self.bar {
                    bar.set_message(format!("{failed} failed"));
                }
            }
            _ => {}
        }
    }
}

/// `--events FILE`: one JSON line per event.
#[derive(Debug)]
pub struct EventsFile {
    out: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl EventsFile {
    /// Creates (or truncates) the file.
    pub fn create(path: &std::path::Path) -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(EventsFile {
            out: Mutex::new(std::io::BufWriter::new(std::fs::File::create(path)?)),
        }))
    }

    /// Writes what is buffered.
    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

impl EventSink for EventsFile {
    fn event(&self, event: &Event) {
        // One write of the whole line: the buffer then holds whole lines
        // only, and so does the file of a worker killed between two.
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = out.write_all(&line);
    }
}

/// Sends every event to several sinks.
pub struct Fanout(pub Vec<Arc<dyn EventSink>>);

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fanout({} sinks)", self.0.len())
    }
}

impl EventSink for Fanout {
    fn event(&self, event: &Event) {
        for s in &self.0 {
            s.event(event);
        }
    }
}
