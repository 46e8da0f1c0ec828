//! A rate bucket against a strict server (issue 39): it paces its margin
//! under `per_second`; a refusal of a request it paced widens the margin,
//! which is kept, then narrows after a quiet spell; a `Retry-After` pauses
//! the bucket exactly that long, and no burst follows. Paused time, no
//! sleeps but virtual ones.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;

use serde_json::json;
use tokio::time::Instant;
use warpline_engine::limit::{Limiter, RateKey, MARGIN};
use warpline_engine::{
    async_trait, AsyncStage, Handler, Item, Outcome, PipelineBuilder, Registry, SourceSpec,
    StageError,
};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn one() -> NonZeroU32 {
    NonZeroU32::MIN
}

/// How long `n` tokens take, two taken before the clock starts (so every
/// timed token is paced: after a quiet spell the second may come up to
/// the bucket's catch-up early).
async fn time_tokens(rate: &Limiter, n: u32) -> Duration {
    rate.acquire(1, None).await.unwrap();
    rate.acquire(1, None).await.unwrap();
    let start = Instant::now();
    for _ in 0..n {
        rate.acquire(1, None).await.unwrap();
    }
    start.elapsed()
}

/// `d` within a millisecond of `expected` (a timer fires on the
/// millisecond at or after its time).
fn about(d: Duration, expected: Duration) -> bool {
    d >= expected.saturating_sub(MS(1)) && d <= expected + MS(1)
}

#[tokio::test(start_paused = true)]
async fn a_bucket_paces_its_default_margin_under_per_second() {
    let rate = Limiter::rate("api", 20.0, one(), RateKey::All).unwrap();
    assert_eq!(rate.margin(), Some(0.02));
    // 19.6 a second: 98 tokens in 5 s.
    let took = time_tokens(&rate, 98).await;
    assert!(about(took, Duration::from_secs(5)), "{took:?}");
    let exact = Limiter::rate_with_margin("api", 20.0, one(), RateKey::All, 0.0).unwrap();
    let took = time_tokens(&exact, 100).await;
    assert!(about(took, Duration::from_secs(5)), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_refusal_at_the_rate_widens_the_margin_which_narrows_after_a_quiet_spell() {
    let rate = Limiter::rate("api", 20.0, one(), RateKey::All).unwrap();
    // Paced: the second token waited.
    rate.acquire(1, None).await.unwrap();
    rate.acquire(1, None).await.unwrap();
    let refused_at = Instant::now();
    assert!(rate.refused(None, Some(Duration::from_secs(1))));
    // Exactly the Retry-After, then at 0.98 x 0.98 of 20 a second.
    rate.acquire(1, None).await.unwrap();
    assert_eq!(refused_at.elapsed(), Duration::from_secs(1));
    let widened = 20.0 * 0.98 * 0.98;
    assert_paced(&rate, 96, widened).await;
    // Kept while the hold lasts...
    tokio::time::sleep_until(refused_at + MARGIN.hold - Duration::from_secs(2)).await;
    assert_paced(&rate, 19, widened).await;
    // ... then half of it is gone 20 s later, and all of it by 40 s.
    tokio::time::sleep_until(refused_at + MARGIN.hold + Duration::from_secs(20)).await;
    assert_paced(&rate, 10, 20.0 * 0.98 * 0.99).await;
    tokio::time::sleep_until(refused_at + MARGIN.hold + Duration::from_secs(41)).await;
    assert_paced(&rate, 98, 19.6).await;
}

/// `n` paced tokens come at `per_second`.
async fn assert_paced(rate: &Limiter, n: u32, per_second: f64) {
    let took = time_tokens(rate, n).await;
    let expected = Duration::from_secs_f64(f64::from(n) / per_second);
    assert!(
        about(took, expected),
        "{n} tokens took {took:?}, not {expected:?} ({per_second}/s)"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_of_a_token_that_did_not_wait_keeps_the_margin() {
    let rate = Limiter::rate("api", 20.0, one(), RateKey::All).unwrap();
    rate.acquire(1, None).await.unwrap();
    // Not at the bucket's rate (its token was due): someone else's limit.
    assert!(!rate.refused(None, None));
    let took = time_tokens(&rate, 98).await;
    assert!(about(took, Duration::from_secs(5)), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_of_one_second_pauses_exactly_one_second_and_no_burst_follows() {
    let burst = NonZeroU32::new(5).unwrap();
    let rate = Limiter::rate_with_margin("api", 20.0, burst, RateKey::Host, 0.0).unwrap();
    let start = Instant::now();
    rate.acquire(1, Some("a")).await.unwrap();
    rate.refused(Some("a"), Some(Duration::from_secs(1)));
    // Another host's bucket is not paused.
    rate.acquire(1, Some("b")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let mut at = Vec::new();
    for _ in 0..4 {
        rate.acquire(1, Some("a")).await.unwrap();
        at.push(start.elapsed());
    }
    // The burst is not refilled by the pause: one at its end, then the rate.
    assert_eq!(at, [MS(1000), MS(1050), MS(1100), MS(1150)]);
}

/// A server that accepts 20 requests in any sliding second (answering in
/// 10 ms) and refuses the rest, 429 with `Retry-After: 1`.
#[derive(Clone, Default)]
struct Strict {
    accepted: Arc<Mutex<VecDeque<Instant>>>,
    refused: Arc<AtomicU64>,
}

impl warpline_engine::Stage for Strict {
    fn counts_requests(&self) -> bool {
        true
    }
}

#[async_trait]
impl AsyncStage for Strict {
    async fn process(&self, _item: &mut Item) -> Result<Outcome, StageError> {
        let now = Instant::now();
        let ok = {
            let mut window = self.accepted.lock().unwrap();
            while window
                .front()
                .is_some_and(|t| now - *t >= Duration::from_secs(1))
            {
                window.pop_front();
            }
            let ok = window.len() < 20;
            if ok {
                window.push_back(now);
            }
            ok
        };
        if !ok {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StageError::transient("429 Too Many Requests")
                .with_status(429)
                .with_retry_after(Some(Duration::from_secs(1))));
        }
        tokio::time::sleep(MS(10)).await;
        Ok(Outcome::Continue)
    }
}

/// A bucket at the server's exact limit with a burst of 2 (and no margin)
/// puts 21 requests in the first second: refused once, it learns a
/// margin, and no refusal follows. The host's adaptive limits are left
/// alone: the refusal was the bucket's to learn from.
#[tokio::test(start_paused = true)]
async fn a_bucket_refused_at_its_rate_learns_its_margin_and_is_not_refused_again() {
    let server = Strict::default();
    let mut r = Registry::with_builtins();
    let s = server.clone();
    r.register_stage("strict", move |_| Ok(Handler::from_async(s.clone())));
    r.register_source("urls", |_| {
        Ok(Arc::new(common::Urls(300)) as Arc<dyn SourceSpec>)
    });
    let p = PipelineBuilder::new("strict")
        .limit(
            "api",
            json!({ "per_second": 20, "burst": 2, "per": "host", "margin": 0 }),
        )
        .source("urls", json!({}))
        .stage(
            "fetch",
            "strict",
            json!({ "workers": 4, "limits": ["api"] }),
        )
        .build(&r)
        .unwrap();
    let start = Instant::now();
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 300, "{report}");
    assert_eq!(server.refused.load(Ordering::SeqCst), 1);
    let h = &report.hosts[0];
    assert_eq!(h.throttled_429, 1);
    assert_eq!(h.adaptive.as_ref().unwrap().decreases, 0, "{h:?}");
    assert_eq!(h.adaptive.as_ref().unwrap().rate_per_s, None, "{h:?}");
    // 20 in the first 0.9 s and the 21st refused at 0.95 s, the 1 s pause,
    // then 280 at 0.98 of 20 a second from 1.95 s: the last at 1.95 +
    // 279 / 19.6 s, answered 10 ms later.
    let took = start.elapsed().as_secs_f64();
    let expected = 1.95 + 279.0 / 19.6 + 0.01;
    assert!(
        (took - expected).abs() < 0.005,
        "{took} s, not {expected} s"
    );
}
