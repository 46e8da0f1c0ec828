//! A simulated rate-limited host on paused tokio time, for the gate's
//! tests: workers take items from one queue and pass the gate; the host
//! answers after a fixed latency (plus, if set, a jitter drawn from a
//! seeded generator), refusing (429, `Retry-After: 1`) what is beyond its
//! limit (GCRA with a burst of 3, as the test tile server), a limit that
//! may change at set times; or refusing as a strict server does (the test
//! tile server's [`StrictLimit`]: a sliding window, a token bucket, a
//! fixed window), with its whole-second `Retry-After`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use warpline_testkit::tileserver::{Strict, StrictLimit};

use super::{Answer, HostGate};

/// The host: its limit over time and what it answered.
pub(super) struct Host {
    /// From `.0` after the start, `.1` requests a second.
    pub(super) limits: Vec<(Duration, f64)>,
    pub(super) latency: Duration,
    /// Latency grows by `.1` per request in flight beyond `.0`.
    pub(super) knee: Option<(u64, Duration)>,
    in_flight: AtomicU64,
    /// Refuses each item's first request (429, `Retry-After: 1`), whatever
    /// the rate.
    pub(super) refuse_first: bool,
    /// Refuses everything (503, no `Retry-After`) from `.0` for `.1`.
    pub(super) down: Option<(Duration, Duration)>,
    /// A strict limit instead of `limits`.
    strict: Option<Mutex<StrictLimit>>,
    /// Each answer takes up to this much longer than `latency`.
    pub(super) jitter: Duration,
    rng: Mutex<fastrand::Rng>,
    start: Instant,
    tat: Mutex<Option<Instant>>,
    /// Each answer: when, after the start, and whether it was served.
    pub(super) log: Mutex<Vec<(Duration, bool)>>,
}

impl Host {
    pub(super) fn new(limits: Vec<(Duration, f64)>, latency: Duration) -> Self {
        Host {
            limits,
            latency,
            knee: None,
            in_flight: AtomicU64::new(0),
            down: None,
            refuse_first: false,
            strict: None,
            jitter: Duration::ZERO,
            rng: Mutex::new(fastrand::Rng::with_seed(39)),
            start: Instant::now(),
            tat: Mutex::new(None),
            log: Mutex::new(Vec::new()),
        }
    }

    /// A host that refuses as `strict` says, its answers taking `latency`
    /// plus up to `jitter`.
    pub(super) fn strict(strict: Strict, latency: Duration, jitter: Duration) -> Self {
        let mut host = Host::new(Vec::new(), latency);
        host.strict = Some(Mutex::new(StrictLimit::new(strict)));
        host.jitter = jitter;
        host
    }

    /// The same host, its jitter drawn from `seed`.
    pub(super) fn seeded(self, seed: u64) -> Self {
        *self.rng.lock().unwrap() = fastrand::Rng::with_seed(seed);
        self
    }

    /// Served answers per second from the first served to the last, and
    /// the share of all answers refused.
    pub(super) fn whole_run(&self) -> (f64, f64) {
        let log = self.log.lock().unwrap();
        let served: Vec<Duration> = log
            .iter()
            .filter(|(_, ok)| *ok)
            .map(|(at, _)| *at)
            .collect();
        let (Some(first), Some(last)) = (served.first(), served.last()) else {
            return (0.0, 1.0);
        };
        let rate = served.len() as f64 / (*last - *first).as_secs_f64().max(1e-9);
        (rate, (log.len() - served.len()) as f64 / log.len() as f64)
    }

    fn limit(&self, since: Duration) -> f64 {
        let now = self.limits.iter().rev().find(|(at, _)| *at <= since);
        now.map_or(f64::INFINITY, |(_, r)| *r)
    }

    /// Waits as long as the host takes to answer, with the requests in
    /// flight now.
    async fn answer(&self) {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let extra = self.knee.map_or(Duration::ZERO, |(knee, each)| {
            each * u32::try_from(n.saturating_sub(knee)).unwrap_or(u32::MAX)
        });
        let jitter = self.jitter.mul_f64(self.rng.lock().unwrap().f64());
        tokio::time::sleep(self.latency + extra + jitter).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether the host is down now.
    fn is_down(&self) -> bool {
        let since = Instant::now() - self.start;
        self.down
            .is_some_and(|(from, long)| since >= from && since < from + long)
    }

    /// Whether a request arriving now is served (`first`: the item's first).
    fn allows(&self, first: bool) -> bool {
        let now = Instant::now();
        if self.is_down() || (first && self.refuse_first) {
            self.log.lock().unwrap().push((now - self.start, false));
            return false;
        }
        if let Some(strict) = &self.strict {
            let served = strict.lock().unwrap().admit(now).is_ok();
            self.log.lock().unwrap().push((now - self.start, served));
            return served;
        }
        let period = Duration::from_secs_f64(1.0 / self.limit(now - self.start));
        let mut tat = self.tat.lock().unwrap();
        let served = !tat.is_some_and(|t| t > now + period * 2);
        if served {
            *tat = Some(now.max(tat.unwrap_or(now)) + period);
        }
        self.log.lock().unwrap().push((now - self.start, served));
        served
    }

    /// Served answers per second in `[from, from + span)`.
    pub(super) fn served_in(&self, from: Duration, span: Duration) -> f64 {
        let log = self.log.lock().unwrap();
        let to = from + span;
        let n = log.iter().filter(|(at, ok)| *ok && *at >= from && *at < to);
        n.count() as f64 / span.as_secs_f64()
    }

    /// How long after `change` the served rate over a 2 s window first is
    /// within 25% of `limit` (the window's end, from the change).
    pub(super) fn follows_after(&self, change: Duration, limit: f64) -> Option<Duration> {
        let step = Duration::from_millis(100);
        let window = Duration::from_secs(2);
        (0..300).map(|i| step * i + window).find(|end| {
            let r = self.served_in(change + *end - window, window);
            r >= 0.75 * limit && r <= 1.25 * limit
        })
    }

    /// Answers refused in `[from, to)`.
    pub(super) fn refused_in(&self, from: Duration, to: Duration) -> usize {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(at, ok)| !*ok && *at >= from && *at < to)
            .count()
    }
}

/// `workers` workers fetch `items` items from `host` through `gate`; a
/// refused try is tried again at once (the gate holds it), as the worker
/// does.
pub(super) async fn run(gate: Arc<HostGate>, host: Arc<Host>, workers: usize, items: u64) {
    let left = Arc::new(AtomicU64::new(items));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (gate, host, left) = (Arc::clone(&gate), Arc::clone(&host), Arc::clone(&left));
            tokio::spawn(async move {
                while left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let mut first = true;
                    loop {
                        let t = gate.enter().await;
                        host.answer().await;
                        if host.allows(std::mem::take(&mut first)) {
                            t.finish(Answer::Ok);
                            break;
                        }
                        let retry_after = (!host.is_down()).then(|| Duration::from_secs(1));
                        t.finish(Answer::Refused(retry_after));
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}
