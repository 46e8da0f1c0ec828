//! Retries: transient errors are tried again with backoff up to the
//! configured attempts; permanent ones are not; a Retry-After pauses the
//! item's rate-limit bucket for every item.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use warpline_engine::{
    AsyncStage, ErrorKind, Handler, Item, Outcome, Pipeline, Registry, StageError,
};

/// Fails each item `fails` times (transiently, or permanently for ids
/// ending in 9), then succeeds; counts the tries per item.
struct Flaky {
    fails: u32,
    /// Only items whose id ends so fail transiently.
    only: &'static str,
    retry_after: Option<Duration>,
    tries: Arc<Mutex<HashMap<String, u32>>>,
}

impl warpline_engine::Stage for Flaky {}

#[async_trait]
impl AsyncStage for Flaky {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let tries = {
            let mut t = self.tries.lock().unwrap();
            let n = t.entry(item.id.clone()).or_default();
            *n += 1;
            *n
        };
        if item.id.ends_with('9') {
            return Err(StageError::permanent(format!("{}: gone", item.id)).with_status(404));
        }
        if tries <= self.fails && item.id.ends_with(self.only) {
            return Err(StageError::transient(format!("{}: busy", item.id))
                .with_status(503)
                .with_retry_after(self.retry_after));
        }
        Ok(Outcome::Continue)
    }
}

fn pipeline(
    fails: u32,
    only: &'static str,
    retry_after: Option<Duration>,
    extra: &str,
) -> (Pipeline, Arc<Mutex<HashMap<String, u32>>>) {
    let tries = Arc::new(Mutex::new(HashMap::new()));
    let mut registry = Registry::with_builtins();
    let t = Arc::clone(&tries);
    registry.register_stage("flaky", move |_| {
        Ok(Handler::from_async(Flaky {
            fails,
            only,
            retry_after,
            tries: Arc::clone(&t),
        }))
    });
    let toml = format!(
        r#"
        [pipeline]
        flow = ["fetch"]
        [source]
        kind = "generate"
        count = 20
        prefix = "http://tiles.example/t"
        [limits.api]
        per_second = 1000
        burst = 100
        per = "host"
        [stages.fetch]
        kind = "flaky"
        workers = 4
        limits = ["api"]
        {extra}
        "#
    );
    (Pipeline::from_toml_str(&toml, &registry).unwrap(), tries)
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_until_the_attempts_run_out() {
    let (p, tries) = pipeline(
        2,
        "",
        None,
        "retry = { attempts = 3, base_delay = \"100ms\", max_delay = \"1s\" }",
    );
    let start = tokio::time::Instant::now();
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 18, "{report}");
    assert_eq!(report.items.failed, 2, "ids ending in 9 fail permanently");
    let tries = tries.lock().unwrap();
    for (id, n) in tries.iter() {
        let expected = if id.ends_with('9') { 1 } else { 3 };
        assert_eq!(*n, expected, "{id}");
    }
    let f = &report.failures[0];
    assert_eq!(
        (f.kind, f.attempts, f.status),
        (ErrorKind::Permanent, 1, Some(404))
    );
    // Two backoffs per item, each at most min(1s, 100ms * 2^k): at most 300 ms
    // per item, 5 items per worker.
    assert!(
        start.elapsed() <= Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn without_enough_attempts_a_transient_error_fails_with_its_attempts() {
    let (p, _) = pipeline(
        5,
        "",
        None,
        "retry = { attempts = 2, base_delay = \"10ms\" }",
    );
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 0);
    assert!(report
        .failures
        .iter()
        .filter(|f| f.kind == ErrorKind::Transient)
        .all(|f| f.attempts == 2 && f.status == Some(503)));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_slows_the_hosts_bucket() {
    // Only item -01's first try is refused, with Retry-After: 7 s. The other
    // items would all pass at once; the pause holds every later one back.
    let (p, _) = pipeline(
        1,
        "-01",
        Some(Duration::from_secs(7)),
        "retry = { attempts = 2, base_delay = \"1ms\" }",
    );
    let start = tokio::time::Instant::now();
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 18);
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_secs(7), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(8), "{elapsed:?}");
}

#[test]
fn retry_settings_are_checked() {
    let e = common::errors(&common::generated(
        &["w"],
        1,
        r#"
        [stages.w]
        kind = "hold"
        retry = { attempts = 0, base_delay = "soon", on = ["transient", "sometimes"] }
        "#,
    ));
    for key in [
        "stages.w.retry.attempts",
        "stages.w.retry.base_delay",
        "stages.w.retry.on[1]",
    ] {
        common::assert_problem(&e, key, "");
    }
}
