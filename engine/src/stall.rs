//! The stall watchdog: when no item has moved for the pipeline's
//! `stall_warning` (no stage finished a call, no item was admitted, ended
//! or sent back), it says what waits for what, once per stall, in the log
//! and in the report. A byte budget cannot deadlock (see `limit`), so a
//! stall points at something outside the engine: a stage's code that never
//! returns, a server that never answers within a long timeout.

use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// A time during which no item moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stall {
    /// Seconds from the start of the run to when the stall was noticed.
    pub at_s: f64,
    /// Seconds without movement when it was noticed.
    pub quiet_s: f64,
    /// What each stage and limiter was doing: items working and queued per
    /// stage, and what each limiter had in use and how many waited for it.
    pub state: String,
}

/// The running watchdog.
pub(crate) struct Watchdog {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Vec<Stall>>,
}

impl Watchdog {
    /// Watches `moved` (a count that grows whenever an item moves) every
    /// quarter of `after`; `describe` says what the run is doing.
    pub(crate) fn start(
        after: Duration,
        moved: impl Fn() -> u64 + Send + 'static,
        describe: impl Fn() -> String + Send + 'static,
    ) -> Self {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let every = (after / 4).max(Duration::from_millis(1));
            let mut stalls = Vec::new();
            let mut last = moved();
            let mut since = started;
            let mut told = false;
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
                let now_moved = moved();
                let now = tokio::time::Instant::now();
                if now_moved != last {
                    (last, since, told) = (now_moved, now, false);
                    continue;
                }
                let quiet = now.saturating_duration_since(since);
                if told || quiet < after {
                    continue;
                }
                told = true;
                let state = describe();
                tracing::warn!(
                    "no item has moved for {}: {state}",
                    humantime::format_duration(Duration::from_secs(quiet.as_secs()))
                );
                stalls.push(Stall {
                    at_s: now.saturating_duration_since(started).as_secs_f64(),
                    quiet_s: quiet.as_secs_f64(),
                    state,
                });
            }
            stalls
        });
        Watchdog { stop, task }
    }

    /// Stops watching; the stalls seen.
    pub(crate) async fn finish(self) -> Vec<Stall> {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stall_is_told_once_and_movement_resets_it() {
        let moved = Arc::new(AtomicU64::new(0));
        let m = Arc::clone(&moved);
        let dog = Watchdog::start(
            Duration::from_secs(60),
            move || m.load(Ordering::Relaxed),
            || "`work`: 1 working".to_owned(),
        );
        // Moving every 30 s: never a stall.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_secs(30)).await;
            moved.fetch_add(1, Ordering::Relaxed);
        }
        // Then quiet for five minutes: one stall, not five.
        tokio::time::sleep(Duration::from_secs(300)).await;
        let stalls = dog.finish().await;
        assert_eq!(stalls.len(), 1, "{stalls:?}");
        assert!(stalls[0].quiet_s >= 60.0 && stalls[0].quiet_s < 80.0);
        assert_eq!(stalls[0].state, "`work`: 1 working");
    }
}
