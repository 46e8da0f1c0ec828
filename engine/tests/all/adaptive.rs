//! Adaptive per-host limits (issue 20): a refusal (429, 503) pauses every
//! try to the host, with or without a rate bucket, and is not a failed try;
//! the limits fall on refusals and rise again. Paused time, no sleeps.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use warpline_engine::{
    async_trait, AsyncStage, Handler, Item, Outcome, Pipeline, PipelineBuilder, Registry,
    SourceSpec, StageError,
};

/// A host that refuses its first `refusals` requests (429, with
/// `Retry-After` when `retry_after` is set), then answers each in 10 ms.
/// Records when each request arrived and whether it was refused.
#[derive(Clone, Default)]
struct Host {
    refusals: u64,
    retry_after: Option<Duration>,
    seen: Arc<AtomicU64>,
    log: Arc<Mutex<Vec<(Instant, bool)>>>,
}

impl warpline_engine::Stage for Host {
    fn counts_requests(&self) -> bool {
        true
    }
}

#[async_trait]
impl AsyncStage for Host {
    async fn process(&self, _item: &mut Item) -> Result<Outcome, StageError> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst);
        let refused = n < self.refusals;
        self.log.lock().unwrap().push((Instant::now(), refused));
        if refused {
            return Err(StageError::transient("429 Too Many Requests")
                .with_status(429)
                .with_retry_after(self.retry_after));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(Outcome::Continue)
    }
}

fn pipeline(host: &Host, count: u64, fetch: serde_json::Value) -> Pipeline {
    let mut r = Registry::with_builtins();
    let h = host.clone();
    r.register_stage("host", move |_| Ok(Handler::from_async(h.clone())));
    r.register_source("urls", move |s| {
        #[derive(serde::Deserialize)]
        struct C {
            count: u64,
        }
        let c: C = s.parse()?;
        Ok(Arc::new(common::Urls(c.count)) as Arc<dyn SourceSpec>)
    });
    PipelineBuilder::new("adaptive")
        .source("urls", json!({ "count": count }))
        .stage("fetch", "host", fetch)
        .build(&r)
        .expect("valid test pipeline")
}

#[tokio::test(start_paused = true)]
async fn a_refusal_pauses_every_try_to_the_host_without_a_bucket() {
    let host = Host {
        refusals: 1,
        retry_after: Some(Duration::from_secs(2)),
        ..Host::default()
    };
    let p = pipeline(&host, 8, json!({ "workers": 4 }));
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 8, "{report}");
    let log = host.log.lock().unwrap().clone();
    let (refused_at, _) = *log.iter().find(|(_, refused)| *refused).unwrap();
    for (at, _) in &log {
        // Tries already in flight when the host refused, then nothing
        // until its Retry-After is over.
        let after = at.saturating_duration_since(refused_at);
        assert!(
            *at <= refused_at || after >= Duration::from_secs(2),
            "a try started {after:?} after the refusal"
        );
    }
    let h = &report.hosts[0];
    assert_eq!(h.host, "http://127.0.0.1:8931");
    assert_eq!(h.throttled_429, 1);
    assert_eq!(h.adaptive.as_ref().unwrap().decreases, 1, "{h:?}");
}

#[tokio::test(start_paused = true)]
async fn refusals_are_not_failed_tries_up_to_max_throttled() {
    // No retries at all, and the host refuses the first ten requests.
    let host = Host {
        refusals: 10,
        ..Host::default()
    };
    let fetch = json!({ "workers": 2, "retry": { "attempts": 1 } });
    let report = pipeline(&host, 4, fetch).run().await.unwrap();
    assert_eq!(report.items.done, 4, "{report}");
    assert_eq!(report.items.failed, 0, "{report}");

    // A cap on refusals: past it, the item fails and says why.
    let host = Host {
        refusals: 1000,
        ..Host::default()
    };
    let fetch = json!({
        "workers": 1,
        "retry": { "attempts": 1 },
        "adaptive": { "max_throttled": 3 },
    });
    let report = pipeline(&host, 1, fetch).run().await.unwrap();
    assert_eq!(report.items.failed, 1, "{report}");
    assert!(
        report.failures[0].message.contains("max_throttled"),
        "{:?}",
        report.failures[0]
    );
    assert_eq!(
        host.seen.load(Ordering::SeqCst),
        4,
        "3 refusals, then a failed try"
    );
}

#[tokio::test(start_paused = true)]
async fn without_adaptive_a_refusal_uses_up_a_try() {
    let host = Host {
        refusals: 10,
        ..Host::default()
    };
    let fetch = json!({ "workers": 2, "retry": { "attempts": 1 }, "adaptive": false });
    let report = pipeline(&host, 4, fetch).run().await.unwrap();
    assert!(report.items.failed > 0, "{report}");
    assert!(report.hosts[0].adaptive.is_none());
}

#[test]
fn adaptive_is_only_for_stages_that_make_requests() {
    let e = common::errors(&common::generated(
        &["work"],
        1,
        "[stages.work]\nkind = \"hold\"\nadaptive = true\n",
    ));
    common::assert_problem(&e, "stages.work.adaptive", "requests");
}

/// A host that cannot be reached for five seconds, then answers: its items
/// wait at the host's gate instead of each spending its tries, so the
/// outage takes few tries in all and costs no item.
#[tokio::test(start_paused = true)]
async fn an_unreachable_host_is_paused_not_hammered() {
    #[derive(Clone)]
    struct Down {
        until: Instant,
        tries_while_down: Arc<AtomicU64>,
    }
    impl warpline_engine::Stage for Down {
        fn counts_requests(&self) -> bool {
            true
        }
    }

    #[async_trait]
    impl AsyncStage for Down {
        async fn process(&self, _item: &mut Item) -> Result<Outcome, StageError> {
            if Instant::now() < self.until {
                self.tries_while_down.fetch_add(1, Ordering::SeqCst);
                return Err(StageError::transient("connection refused").host_is_down());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(Outcome::Continue)
        }
    }
    let down = Down {
        until: Instant::now() + Duration::from_secs(5),
        tries_while_down: Arc::new(AtomicU64::new(0)),
    };
    let mut r = Registry::with_builtins();
    let d = down.clone();
    r.register_stage("down", move |_| Ok(Handler::from_async(d.clone())));
    r.register_source("urls", |_| {
        Ok(Arc::new(common::Urls(16)) as Arc<dyn SourceSpec>)
    });
    let p = PipelineBuilder::new("down")
        .source("urls", json!({}))
        .stage(
            "fetch",
            "down",
            json!({ "workers": 8, "retry": { "attempts": 6 } }),
        )
        .build(&r)
        .unwrap();
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 16, "{report}");
    // Without the pause: 8 workers x about 4 tries each within 5 s of
    // backoff (over 30). With it: the first 8, then a few per pause.
    let tries = down.tries_while_down.load(Ordering::SeqCst);
    assert!(tries <= 16, "{tries} tries while the host was down");
}
