//! Retries: transient errors are tried again with backoff up to the
//! configured attempts; permanent ones are not; a Retry-After pauses the
//! item's rate-limit bucket for every item, and, in a stage that makes
//! requests, the host itself, limiters or not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use warpline_engine::{
    AsyncStage, ErrorKind, Handler, Input, Item, Outcome, Pipeline, Registry, Source, SourceError,
    SourceSpec, StageError,
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

/// Makes "requests": item `-01` of host `busy.example` is refused once with
/// Retry-After: 7 s. Records when each try began (tokio's paused clock).
struct Requests {
    tries: Arc<Mutex<Vec<(String, tokio::time::Instant)>>>,
}

#[async_trait]
impl AsyncStage for Requests {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let first = {
            let mut t = self.tries.lock().unwrap();
            let first = !t.iter().any(|(id, _)| *id == item.id);
            t.push((item.id.clone(), tokio::time::Instant::now()));
            first
        };
        if first && item.id == "http://busy.example/t-01" {
            return Err(StageError::transient("busy")
                .with_status(429)
                .with_retry_after(Some(Duration::from_secs(7))));
        }
        Ok(Outcome::Continue)
    }

    fn counts_requests(&self) -> bool {
        true
    }
}

/// These URLs, in order, each its own id.
struct Urls(Vec<String>);

impl SourceSpec for Urls {
    fn open(&self) -> Result<Box<dyn Source>, String> {
        Ok(Box::new(UrlsRun(self.0.clone().into_iter())))
    }
}

struct UrlsRun(std::vec::IntoIter<String>);

#[async_trait]
impl Source for UrlsRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        self.0.next().map(|url| {
            Ok(Input {
                id: url.clone(),
                source: url,
                size_hint: None,
            })
        })
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_pauses_the_host_for_every_item_without_any_limiter() {
    let tries = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::with_builtins();
    let t = Arc::clone(&tries);
    registry.register_stage("requests", move |_| {
        Ok(Handler::from_async(Requests {
            tries: Arc::clone(&t),
        }))
    });
    // Two items of the busy host (the second refused), 10 of another host,
    // 8 more of the busy one; no limiter at all. (Workers waiting for a
    // paused host hold their items, so the other host's items come first
    // in the list: the mailbox is first in, first out.)
    registry.register_source("urls", |_| {
        let urls: Vec<String> = (0..2)
            .map(|i| format!("http://busy.example/t-{i:02}"))
            .chain((0..10).map(|i| format!("http://calm.example/t-{i:02}")))
            .chain((2..10).map(|i| format!("http://busy.example/t-{i:02}")))
            .collect();
        Ok(Arc::new(Urls(urls)) as Arc<dyn SourceSpec>)
    });
    let toml = r#"
        [pipeline]
        flow = ["fetch"]
        [source]
        kind = "urls"
        [stages.fetch]
        kind = "requests"
        workers = 4
        retry = { attempts = 2, base_delay = "1ms" }
        "#;
    let p = Pipeline::from_toml_str(toml, &registry).unwrap();
    let start = tokio::time::Instant::now();
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 20, "{report}");
    let tries = tries.lock().unwrap();
    let refused = tries
        .iter()
        .find(|(id, _)| id.ends_with("busy.example/t-01"))
        .map(|(_, at)| *at)
        .unwrap();
    let pause_ends = refused + Duration::from_secs(7);
    // Items of the busy host that had not begun when the refusal came
    // (t-02 on, and t-01's retry) waited for the pause; the other host's
    // items did not.
    let busy_late = tries
        .iter()
        .filter(|(id, at)| id.contains("busy.example") && *at >= pause_ends)
        .count();
    assert!(
        busy_late >= 9,
        "only {busy_late} tries of the busy host came after its pause: {tries:?}"
    );
    assert!(
        tries
            .iter()
            .filter(|(id, _)| id.contains("busy.example"))
            .all(|(_, at)| *at <= refused + Duration::from_millis(10) || *at >= pause_ends),
        "a try of the busy host during its pause: {tries:?}"
    );
    assert!(
        tries
            .iter()
            .filter(|(id, _)| id.contains("calm.example"))
            .all(|(_, at)| *at < pause_ends),
        "the other host waited too: {tries:?}"
    );
    assert!(start.elapsed() >= Duration::from_secs(7));
    let busy = report
        .hosts
        .iter()
        .find(|h| h.host == "busy.example")
        .unwrap();
    assert_eq!((busy.requests, busy.throttled_429), (11, 1));
}

#[test]
fn retry_settings_are_checked() {
    let registry = Registry::with_builtins();
    let e = Pipeline::from_toml_str(
        r#"
        [pipeline]
        flow = ["w"]
        [source]
        kind = "generate"
        count = 1
        [stages.w]
        kind = "hold"
        retry = { attempts = 0, base_delay = "soon", on = ["transient", "sometimes"] }
        "#,
        &registry,
    )
    .unwrap_err();
    let text = e.to_string();
    for key in [
        "stages.w.retry.attempts",
        "stages.w.retry.base_delay",
        "stages.w.retry.on[1]",
    ] {
        assert!(text.contains(key), "{key} missing:\n{text}");
    }
}
