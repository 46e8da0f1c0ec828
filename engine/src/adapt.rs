//! Adaptive per-host concurrency and rate, for stages whose tries are
//! requests to a remote host (a fetch): additive increase, multiplicative
//! decrease, as TCP and Vector's Adaptive Request Concurrency do.
//!
//! A user rarely knows a server's limit, and it changes. So for each host
//! (`scheme://name:port`) the stage's workers pass a `HostGate` before each
//! try, which keeps:
//!
//! - a **concurrency limit**: tries in flight to the host at once. It starts
//!   at `initial`, grows by one per window of successes (`+1/limit` each),
//!   and is multiplied by `decrease` on back-pressure: a 429 or 503 answer,
//!   or a window of answers slower than the past by more than `latency`
//!   deviations (`adapt/rtt.rs`); while a rate is learnt it never holds
//!   the rate back (noise in the response times is not load, which the
//!   rate caps);
//! - a **rate**, learnt at the first 429 or 503 from what got through in
//!   the second before it, then kept a margin under the server's limit,
//!   following it down and back up when it changes (`adapt/rate.rs`);
//! - a **pause**: a 429 or 503 stops every try to the host for its
//!   `Retry-After` (capped at an hour), or for 1 s doubling while refusals
//!   follow each other (at most 30 s): not only the refused item waits.
//!
//! Back-pressure within one second of the last decrease does not decrease
//! again (the answers of one burst are one signal). A refusal of a request
//! that a configured rate bucket paced (it waited for its token) only
//! pauses the host: the bucket learns from it (a wider margin), and the
//! gate's limits stay, so the two do not both cut the rate. A refused try is
//! counted apart from failed ones (see `max_throttled`): while a host is
//! throttling, an item's tries are not used up. Configured limiters
//! (`connections`, a rate bucket) stay hard ceilings: the gate is passed
//! first, then the stage's limiters are acquired.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::item::StageError;

use rate::Rate;
use rtt::{Rtt, Verdict};

/// `adaptive` in a stage's table: `true`, `false`, or the settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum AdaptiveValue {
    /// On with the defaults, or off.
    Switch(bool),
    /// On with these settings.
    Settings(AdaptiveSection),
}

/// `adaptive = { ... }`: every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveSection {
    /// The concurrency limit per host to start from.
    pub initial: Option<u32>,
    /// The lowest the concurrency limit goes.
    pub min: Option<u32>,
    /// The highest (never above the stage's workers).
    pub max: Option<u32>,
    /// What back-pressure multiplies the concurrency limit by (0 < x < 1).
    pub decrease: Option<f64>,
    /// A response time this many times its moving average is back-pressure.
    pub latency: Option<f64>,
    /// Refused tries (429, 503) an item may have before it fails.
    pub max_throttled: Option<u32>,
}

/// The settings of a stage's adaptive limits, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Adaptive {
    /// The concurrency limit per host to start from.
    pub initial: u32,
    /// The lowest it goes.
    pub min: u32,
    /// The highest it goes.
    pub max: u32,
    /// Multiplies the limit on back-pressure.
    pub decrease: f64,
    /// Response time over this many times its average is back-pressure.
    pub latency: f64,
    /// Refused tries an item may have before it fails.
    pub max_throttled: u32,
}

impl Adaptive {
    /// The settings for a stage with `workers` workers, or the problems
    /// (key, message) in them.
    pub fn resolve(section: &AdaptiveSection, workers: u32) -> Result<Self, Vec<(String, String)>> {
        let mut problems = Vec::new();
        let max = section.max.unwrap_or(workers).clamp(1, workers.max(1));
        let min = section.min.unwrap_or(1).max(1);
        if min > max {
            problems.push(("min".to_owned(), format!("{min} is above `max` ({max})")));
        }
        let decrease = section.decrease.unwrap_or(0.5);
        if !(decrease > 0.0 && decrease < 1.0) {
            problems.push((
                "decrease".to_owned(),
                format!("must be between 0 and 1, got {decrease}"),
            ));
        }
        let latency = section.latency.unwrap_or(2.5);
        if !(latency.is_finite() && latency > 0.0) {
            problems.push((
                "latency".to_owned(),
                format!("must be above 0, got {latency}"),
            ));
        }
        let settings = Adaptive {
            initial: section.initial.unwrap_or(8).clamp(min, max.max(min)),
            min,
            max,
            decrease,
            latency,
            max_throttled: section.max_throttled.unwrap_or(50),
        };
        problems.is_empty().then_some(settings).ok_or(problems)
    }
}

/// How a try to a host ended, as the gate learns from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Answer {
    /// Answered.
    Ok,
    /// Refused (429, 503), with the server's `Retry-After` if it gave one.
    Refused(Option<Duration>),
    /// Refused at the rate of a configured bucket, which learns from it:
    /// the host pauses, but its limits stay.
    RefusedAtRate(Option<Duration>),
    /// Failed otherwise (a timeout, a reset, a 404): no signal.
    Other,
}

impl Answer {
    /// How a try whose error is `error` (`None`: it succeeded) ended, for
    /// its host's gate: a refusal ([`refusal`]) or an unreachable host
    /// pauses the host; a refusal at a configured bucket's rate
    /// (`at_rate`) is the bucket's to learn from; any other error says
    /// nothing of the host's limits. One rule for a stage's worker and for
    /// [`Requests`](crate::Requests).
    pub(crate) fn of(error: Option<&StageError>, at_rate: bool) -> Answer {
        match error {
            None => Answer::Ok,
            Some(e) if at_rate => Answer::RefusedAtRate(e.retry_after),
            Some(e) if refusal(e) || e.host_down => Answer::Refused(e.retry_after),
            Some(_) => Answer::Other,
        }
    }
}

/// Whether a try's error is a throttling host's refusal (429, 503).
pub(crate) fn refusal(e: &StageError) -> bool {
    matches!(e.status, Some(429 | 503))
}

/// Whether a refused try is waited out at its host's gate rather than
/// counted as a failed try: while the item (or request) has been refused
/// fewer than `max_throttled` times. Without a gate, a refusal is a try.
pub(crate) fn throttled(refused: bool, gated: bool, so_far: u32, max_throttled: u32) -> bool {
    refused && gated && so_far < max_throttled
}

/// What a host's gate ended the run at, for the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostLimits {
    /// The concurrency limit.
    pub concurrency: f64,
    /// The learnt rate, requests per second (`null`: never refused).
    pub rate_per_s: Option<f64>,
    /// Times back-pressure lowered the limits.
    pub decreases: u64,
    /// Why they were last lowered (`429`, `503`, `latency`).
    pub last_decrease: Option<String>,
}

const WINDOW: Duration = Duration::from_secs(1);
/// What a window of slower answers multiplies the concurrency limit by.
const LATENCY_DECREASE: f64 = 0.9;
/// For this long after latency lowered the limit, it rises slowly.
const NEAR_KNEE: Duration = Duration::from_secs(10);
const MAX_PAUSE: Duration = Duration::from_secs(3600);
/// How late a try may start and still not delay the next at the learnt
/// rate (well inside the rate's margin of a second).
const CATCH_UP: Duration = Duration::from_millis(10);
/// While a rate is learnt, tries in flight may be this many times what the
/// rate needs (its share of one unloaded response time).
const RATE_CONCURRENCY: f64 = 2.0;
const MAX_DEFAULT_PAUSE: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: u32,
    paused_until: Option<Instant>,
    /// Refusals in a row, for the default pause's doubling.
    refused_in_a_row: u32,
    /// When the last refusal came.
    last_refused: Option<Instant>,
    rate: Rate,
    next_at: Option<Instant>,
    /// Response times, by window.
    rtt: Rtt,
    /// When a window of slower answers last lowered the limit, and the
    /// limit it lowered.
    slowed: Option<(Instant, f64)>,
    /// When a latency decrease was last announced (events, metrics).
    announced: Option<Instant>,
    last_decrease: Option<Instant>,
    report: HostLimits,
}

/// Why a refusal lowered the limits, as the report says it.
fn why(retry_after: Option<Duration>) -> &'static str {
    if retry_after.is_some() {
        "429"
    } else {
        "refused"
    }
}

impl State {
    /// Tries that may be in flight at once. While a rate is learnt, or a
    /// configured bucket's (`bucket`) paces the host, the rate holds the
    /// load: the concurrency never holds it back (at least
    /// [`RATE_CONCURRENCY`] times the rate's share of one unloaded response
    /// time), whatever noise in the response times lowered it.
    fn concurrency(&self, bucket: Option<f64>) -> f64 {
        let rate = match (self.rate.per_s, bucket) {
            (Some(r), Some(b)) => Some(r.min(b)),
            (r, b) => r.or(b),
        };
        let floor = match (rate, self.rtt.average()) {
            (Some(r), Some(rtt)) => (r * rtt * RATE_CONCURRENCY).ceil(),
            _ => 1.0,
        };
        self.limit.floor().max(floor).max(1.0)
    }
}

/// One host's adaptive limits, shared by a stage's workers.
#[derive(Debug)]
pub(crate) struct HostGate {
    settings: Adaptive,
    /// The rate of a configured bucket the stage draws on, if any.
    bucket: Option<f64>,
    state: Mutex<State>,
    changed: Notify,
}

/// A try in flight to a host: end it with [`InFlight::finish`]; dropped
/// unfinished (the run was aborted), it ends as [`Answer::Other`].
#[derive(Debug)]
pub(crate) struct InFlight {
    gate: Arc<HostGate>,
    started: Instant,
    finished: bool,
}

impl InFlight {
    /// The try's request starts now (its limiters were acquired after it
    /// passed the gate): its response time is counted from here.
    pub(crate) fn starts_now(&mut self) {
        self.started = Instant::now();
    }

    /// Ends the try, the gate learning from its answer; the limits when
    /// this lowered them.
    pub(crate) fn finish(mut self, answer: Answer) -> Option<HostLimits> {
        self.finished = true;
        self.gate.leave(self.started, answer)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.finished {
            self.gate.leave(self.started, Answer::Other);
        }
    }
}

impl HostGate {
    fn new(settings: Adaptive, bucket: Option<f64>) -> Self {
        HostGate {
            settings,
            bucket,
            state: Mutex::new(State {
                limit: f64::from(settings.initial),
                in_flight: 0,
                paused_until: None,
                refused_in_a_row: 0,
                last_refused: None,
                rate: Rate::new(),
                next_at: None,
                rtt: Rtt::new(),
                slowed: None,
                announced: None,
                last_decrease: None,
                report: HostLimits {
                    concurrency: f64::from(settings.initial),
                    rate_per_s: None,
                    decreases: 0,
                    last_decrease: None,
                },
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves the state whole: a poisoned lock's data is fine.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until a try may start: the host is not paused, fewer tries than
    /// the limit are in flight, and the learnt rate allows one now.
    pub(crate) async fn enter(self: &Arc<Self>) -> InFlight {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let until = {
                let mut s = self.lock();
                let now = Instant::now();
                match s.paused_until.filter(|p| *p > now) {
                    Some(p) => Some(p),
                    None if f64::from(s.in_flight) >= s.concurrency(self.bucket) => None,
                    None => match (s.rate.per_s, s.next_at.filter(|at| *at > now)) {
                        (Some(_), Some(at)) => Some(at),
                        (rate, _) => {
                            if let Some(r) = rate {
                                // A try that starts late (its worker woke
                                // late) does not delay the next by as much.
                                let late = now.checked_sub(CATCH_UP).unwrap_or(now);
                                let due = s.next_at.map_or(now, |at| at.max(late));
                                s.next_at = Some(due + Duration::from_secs_f64(1.0 / r));
                            }
                            s.in_flight += 1;
                            return InFlight {
                                gate: Arc::clone(self),
                                started: now,
                                finished: false,
                            };
                        }
                    },
                }
            };
            match until {
                Some(at) => tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = &mut notified => {}
                },
                None => notified.await,
            }
        }
    }

    fn leave(&self, started: Instant, answer: Answer) -> Option<HostLimits> {
        let lowered = {
            let mut s = self.lock();
            let now = Instant::now();
            s.in_flight = s.in_flight.saturating_sub(1);
            let before = s.report.decreases;
            match answer {
                Answer::Ok => self.succeeded(&mut s, now, started),
                Answer::Refused(retry_after) => {
                    let paused_since = self.pause(&mut s, now, started, retry_after);
                    if self.decrease(&mut s, now, why(retry_after)) {
                        s.rate.refused(now, started, paused_since);
                    }
                }
                Answer::RefusedAtRate(retry_after) => {
                    self.pause(&mut s, now, started, retry_after);
                }
                Answer::Other => {}
            }
            s.report.concurrency = s.limit;
            s.report.rate_per_s = s.rate.per_s;
            (s.report.decreases > before).then(|| s.report.clone())
        };
        self.changed.notify_waiters();
        lowered
    }

    fn succeeded(&self, s: &mut State, now: Instant, started: Instant) {
        s.refused_in_a_row = 0;
        s.rate.succeeded(now, started);
        let rtt = now - started;
        let verdict = s.rtt.add(now, rtt, self.settings.latency);
        match verdict {
            Some(Verdict::Slower) => {
                // Gentler than a refusal's, and once per window: the
                // limit settles just under where the latency rises.
                s.limit = (s.limit * LATENCY_DECREASE).max(f64::from(self.settings.min));
                s.report.last_decrease = Some("latency".to_owned());
                s.slowed = Some((now, s.limit / LATENCY_DECREASE));
                if s.announced.is_none_or(|t| now - t >= WINDOW) {
                    s.announced = Some(now);
                    s.report.decreases += 1;
                    tracing::debug!(limit = s.limit, "a host's adaptive limits lowered: latency");
                }
            }
            Some(Verdict::AsFast) => {
                // One more per window; near where latency last rose (and
                // lately), one more per `limit` windows, so the limit stays
                // under it.
                let near = s
                    .slowed
                    .is_some_and(|(t, at)| now - t < NEAR_KNEE && s.limit >= 0.8 * at);
                let step = if near { 1.0 / s.limit.max(1.0) } else { 1.0 };
                s.limit = (s.limit + step).min(f64::from(self.settings.max));
            }
            _ => {}
        }
    }

    /// Pauses the host after a refusal: for its `Retry-After`, or 1 s
    /// doubling while refusals follow each other. When the last pause had
    /// ended before this one, when it ended.
    fn pause(
        &self,
        s: &mut State,
        now: Instant,
        started: Instant,
        retry_after: Option<Duration>,
    ) -> Option<Instant> {
        // A try that was in flight when the last refusal came is of the same
        // burst: it does not lengthen the default pause again.
        if s.last_refused.is_none_or(|t| started > t) {
            s.refused_in_a_row += 1;
        }
        s.last_refused = Some(now);
        let pause = retry_after.map(|d| d.min(MAX_PAUSE)).unwrap_or_else(|| {
            let doubled = 1u32 << (s.refused_in_a_row.max(1) - 1).min(5);
            (WINDOW * doubled).min(MAX_DEFAULT_PAUSE)
        });
        let unpaused_since = s.paused_until.filter(|p| *p <= now);
        let until = now + pause;
        s.paused_until = Some(s.paused_until.map_or(until, |p| p.max(until)));
        unpaused_since
    }

    /// Lowers the limits unless they were lowered less than a window ago;
    /// whether it did.
    fn decrease(&self, s: &mut State, now: Instant, why: &str) -> bool {
        if s.last_decrease.is_some_and(|t| now - t < WINDOW) {
            return false;
        }
        s.last_decrease = Some(now);
        s.limit = (s.limit * self.settings.decrease).max(f64::from(self.settings.min));
        s.report.decreases += 1;
        s.report.last_decrease = Some(why.to_owned());
        tracing::debug!(limit = s.limit, why, "a host's adaptive limits lowered");
        true
    }

    /// What the gate stands at.
    pub(crate) fn limits(&self) -> HostLimits {
        self.lock().report.clone()
    }
}

/// The gates of one stage, one per host, made as hosts are met.
#[derive(Debug)]
pub(crate) struct Gates {
    settings: Adaptive,
    /// The fastest configured rate bucket the stage draws on.
    bucket: Option<f64>,
    by_host: Mutex<HashMap<String, Arc<HostGate>>>,
}

impl Gates {
    pub(crate) fn new(settings: Adaptive, bucket: Option<f64>) -> Self {
        Gates {
            settings,
            bucket,
            by_host: Mutex::new(HashMap::new()),
        }
    }

    /// The settings.
    pub(crate) fn settings(&self) -> &Adaptive {
        &self.settings
    }

    /// The gate of `host`.
    pub(crate) fn host(&self, host: &str) -> Arc<HostGate> {
        let mut map = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            map.entry(host.to_owned())
                .or_insert_with(|| Arc::new(HostGate::new(self.settings, self.bucket))),
        )
    }

    /// Every host's limits.
    pub(crate) fn snapshot(&self) -> Vec<(String, HostLimits)> {
        let map = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().map(|(h, g)| (h.clone(), g.limits())).collect()
    }
}

mod rate;
mod rtt;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
