//! `warpline run --progress stages`: a live view of the run in the
//! terminal, as Vector's `top`, redrawn every second (in the log every
//! 10 s when stderr is not a terminal): per stage, the items
//! in its mailbox and in its workers, those it passed on and failed, and
//! its rate; per count or byte limiter, its use; the failures so far and
//! the last of them. It reads [`Snapshot`]s from the run's [`Probe`] and
//! the failures from its events; [`frame`] draws one.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use warpline_engine::live::{LimiterSnapshot, Probe, Snapshot};
use warpline_engine::{Event, EventKind, EventSink, LimiterKind};

/// Rates are measured over the last this many frames.
const RATE_FRAMES: usize = 5;

/// The longest a stage's or a limiter's name is shown.
const NAME_WIDTH: usize = 18;

/// The live view: a probe to read the run, the failures seen, and the
/// lines drawn on the terminal (log lines go above them), if there is one.
#[derive(Debug)]
pub struct Top {
    probe: Probe,
    bar: Option<ProgressBar>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    pipeline: String,
    /// The last frames' snapshots, oldest first, for the rates.
    history: VecDeque<Snapshot>,
    /// The last failure: `item at stage (kind): message`.
    last_failure: Option<String>,
}

impl Top {
    /// A view drawn on stderr when it is a `terminal`; otherwise each
    /// [`tick`](Self::tick) only returns the frame (for the log).
    pub fn new(terminal: bool) -> Arc<Self> {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            crate::progress::draw_above(Some(bar.clone()));
            bar
        });
        Arc::new(Top {
            probe: Probe::new(),
            bar,
            state: Mutex::default(),
        })
    }

    /// The probe to give the run ([`RunOptions::probe`](warpline_engine::RunOptions)).
    pub fn probe(&self) -> Probe {
        self.probe.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the run and draws a frame on the terminal, and returns it
    /// (`None` before the run started and after it ended).
    pub fn tick(&self) -> Option<String> {
        let now = self.probe.snapshot()?;
        let text = {
            let mut s = self.state();
            // The first frame's rates are since the start (all zeros).
            let start = Snapshot::default();
            let before = s.history.front().unwrap_or(&start);
            let text = frame(&s.pipeline, &now, Some(before), s.last_failure.as_deref());
            s.history.push_back(now);
            if s.history.len() > RATE_FRAMES {
                s.history.pop_front();
            }
            text
        };
        if let Some(bar) = &self.bar {
            bar.set_message(text.clone());
        }
        Some(text)
    }

    /// Clears the view; log lines go straight to stderr again.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            crate::progress::draw_above(None);
            bar.finish_and_clear();
        }
    }
}

impl EventSink for Top {
    fn event(&self, event: &Event) {
        match &event.kind {
            EventKind::RunStarted { pipeline, .. } => self.state().pipeline = pipeline.clone(),
            EventKind::Failed {
                item,
                stage,
                kind,
                message,
            } => {
                self.state().last_failure = Some(format!("{item} at {stage} ({kind}): {message}"));
            }
            _ => {}
        }
    }
}

/// Per second from `before` to `now` of what `count` counts; `None`
/// without an earlier snapshot.
fn rate(
    now: &Snapshot,
    before: Option<&Snapshot>,
    count: impl Fn(&Snapshot) -> u64,
) -> Option<f64> {
    let before = before?;
    let secs = now.t_s - before.t_s;
    (secs > 0.0).then(|| count(now).saturating_sub(count(before)) as f64 / secs)
}

fn per_s(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_owned(), |r| format!("{r:.1}/s"))
}

/// `name` cut to [`NAME_WIDTH`] characters (the last one an ellipsis).
fn name(text: &str) -> String {
    if text.chars().count() <= NAME_WIDTH {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(NAME_WIDTH - 1).collect();
    cut.push('…');
    cut
}

/// One frame of the view: `now`, with rates since `before`, and the last
/// failure. Lines stay under 80 columns but for the failure's.
pub fn frame(
    pipeline: &str,
    now: &Snapshot,
    before: Option<&Snapshot>,
    last_failure: Option<&str>,
) -> String {
    let ended = |s: &Snapshot| s.done + s.skipped + s.failed;
    let total = now.total.map_or_else(|| "?".to_owned(), |t| t.to_string());
    let mut out = format!(
        "warpline: {pipeline}  {:.0} s  {}/{total} ended: {} done, {} skipped, {} failed  {}\n",
        now.t_s,
        ended(now),
        now.done,
        now.skipped,
        now.failed,
        per_s(rate(now, before, ended)),
    );
    let w = NAME_WIDTH;
    let _ = writeln!(
        out,
        "{:<w$} {:>7} {:>7} {:>8} {:>7} {:>9}",
        "stage", "queued", "working", "passed", "failed", "rate"
    );
    for (i, s) in now.stages.iter().enumerate() {
        let r = rate(now, before, |snap| {
            snap.stages.get(i).map_or(0, |s| s.passed + s.failed)
        });
        let _ = writeln!(
            out,
            "{:<w$} {:>7} {:>7} {:>8} {:>7} {:>9}",
            name(&s.name),
            s.queued,
            s.working,
            s.passed,
            s.failed,
            per_s(r)
        );
    }
    if !now.limiters.is_empty() {
        let _ = writeln!(
            out,
            "{:<w$} {:>10} {:>10} {:>5} {:>7}",
            "limiter", "in use", "capacity", "use", "waiting"
        );
        for l in &now.limiters {
            out.push_str(&limiter_line(l));
        }
    }
    match last_failure {
        Some(f) if now.failed > 0 => {
            let _ = write!(out, "failures: {}; the last: {f}", now.failed);
        }
        _ => {
            let _ = write!(out, "failures: {}", now.failed);
        }
    }
    out
}

fn limiter_line(l: &LimiterSnapshot) -> String {
    let shown = |n: u64| match l.kind {
        LimiterKind::Bytes => bytesize::ByteSize(n).display().iec().to_string(),
        _ => n.to_string(),
    };
    let share = l.in_use as f64 * 100.0 / l.capacity.max(1) as f64;
    format!(
        "{:<w$} {:>10} {:>10} {:>4.0}% {:>7}\n",
        name(&l.name),
        shown(l.in_use),
        shown(l.capacity),
        share,
        l.waiters,
        w = NAME_WIDTH
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use warpline_engine::live::StageSnapshot;

    fn stage(name: &str, queued: u64, working: u64, passed: u64, failed: u64) -> StageSnapshot {
        StageSnapshot {
            name: name.into(),
            queued,
            working,
            passed,
            failed,
        }
    }

    fn at(t_s: f64, fetched: u64, decoded: u64) -> Snapshot {
        Snapshot {
            t_s,
            admitted: 40,
            done: decoded,
            skipped: 0,
            failed: 2,
            total: Some(400),
            stages: vec![
                stage("fetch", 0, 8, fetched, 2),
                stage("decode_with_a_very_long_name", 3, 2, decoded, 0),
            ],
            limiters: vec![
                LimiterSnapshot {
                    name: "connections".into(),
                    kind: LimiterKind::Count,
                    in_use: 8,
                    capacity: 8,
                    waiters: 3,
                },
                LimiterSnapshot {
                    name: "memory".into(),
                    kind: LimiterKind::Bytes,
                    in_use: 16 << 20,
                    capacity: 64 << 20,
                    waiters: 0,
                },
            ],
        }
    }

    #[test]
    fn a_frame_shows_each_stage_limiter_rate_and_the_last_failure() {
        let before = at(10.0, 100, 90);
        let now = at(12.0, 120, 110);
        let text = frame(
            "demo",
            &now,
            Some(&before),
            Some("t-17 at fetch (transient): 503"),
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "warpline: demo  12 s  112/400 ended: 110 done, 0 skipped, 2 failed  10.0/s",
                "stage               queued working   passed  failed      rate",
                "fetch                    0       8      120       2    10.0/s",
                "decode_with_a_ver…       3       2      110       0    10.0/s",
                "limiter                in use   capacity   use waiting",
                "connections                 8          8  100%       3",
                "memory               16.0 MiB   64.0 MiB   25%       0",
                "failures: 2; the last: t-17 at fetch (transient): 503",
            ],
            "{text}"
        );
    }

    #[test]
    fn the_first_frame_has_no_rate_yet_and_an_unknown_total() {
        let mut now = at(0.5, 0, 0);
        now.total = None;
        now.failed = 0;
        let text = frame("p", &now, None, None);
        assert!(
            text.starts_with("warpline: p  0 s  0/? ended: 0 done, 0 skipped, 0 failed  -\n"),
            "{text}"
        );
        assert!(text.ends_with("\nfailures: 0"), "{text}");
    }
}
