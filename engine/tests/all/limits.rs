//! Limiters under load: a shared count limit is never exceeded, a byte
//! budget is never exceeded, oversize items follow their policy, opposite
//! listing orders cannot deadlock, an aborted run gives every permit back,
//! and token buckets keep their rate and their keys apart.

use crate::common;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use warpline_engine::limit::{Limiter, RateKey};
use warpline_engine::report::RunOutcome;
use warpline_engine::{ErrorKind, Pipeline};

/// Stages `a` and `b` of `kind`, `workers` each, sharing `permits` of
/// `cpu`, over `count` generated inputs.
fn two_sharing_cpu(kind: &str, count: u64, permits: u32, workers: u32) -> String {
    common::generated(
        &["a", "b"],
        count,
        &format!(
            r#"
            [limits.cpu]
            permits = {permits}
            [stages.a]
            kind = "{kind}"
            workers = {workers}
            limits = ["cpu"]
            [stages.b]
            kind = "{kind}"
            workers = {workers}
            limits = ["cpu"]
            "#
        ),
    )
}

#[tokio::test(start_paused = true)]
async fn a_limiter_shared_by_two_stages_is_held_by_at_most_its_permits() {
    let (_, _, inside, registry) = common::kinds(u64::MAX);
    let pipeline =
        Pipeline::from_toml_str(&two_sharing_cpu("measure", 300, 3, 8), &registry).unwrap();
    let report = pipeline.run().await.unwrap();
    assert_eq!(report.items.done, 300);
    let seen = inside.snapshot();
    assert_eq!(seen.peak_items, 3, "holders seen inside the stages at once");
    assert_eq!(report.limiter("cpu").unwrap().peak_in_use, Some(3));
    assert_eq!(pipeline.limits().get("cpu").unwrap().available(), 3);
}

#[test]
fn a_limiter_shared_by_blocking_stages_on_threads_is_never_exceeded() {
    let (_, _, inside, registry) = common::kinds(u64::MAX);
    let pipeline =
        Pipeline::from_toml_str(&two_sharing_cpu("measure_blocking", 400, 2, 4), &registry)
            .unwrap();
    let rt = common::runtime();
    let report = rt.block_on(pipeline.run()).unwrap();
    assert_eq!(report.items.done, 400);
    let seen = inside.snapshot();
    assert!(
        seen.peak_items <= 2,
        "{} holders at once over 2 permits",
        seen.peak_items
    );
    assert!(report.limiter("cpu").unwrap().peak_in_use.unwrap() <= 2);
}

fn budget_pipeline(oversize: &str, registry: &warpline_engine::Registry) -> Pipeline {
    Pipeline::from_toml_str(
        &common::generated(
            &["work"],
            400,
            &format!(
                r#"
            sizes = ["100KiB", "1MiB", "3MiB", "10KiB", "5MiB", "700KiB"]
            [limits.memory]
            budget = "4MiB"
            oversize = "{oversize}"
            [stages.work]
            kind = "measure"
            workers = 16
            mailbox = 4
            limits = ["memory"]
            "#
            ),
        ),
        registry,
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_byte_budget_is_never_exceeded_and_oversize_items_fail_by_policy() {
    let (_, _, inside, registry) = common::kinds(4 << 20);
    let pipeline = budget_pipeline("fail", &registry);
    let report = pipeline.run().await.unwrap();
    let seen = inside.snapshot();
    assert!(
        seen.peak_bytes <= 4 << 20,
        "held {} bytes over a 4 MiB budget",
        seen.peak_bytes
    );
    // One in six items is 5 MiB: more than the whole budget.
    let oversize = (0..400).filter(|n| n % 6 == 4).count() as u64;
    assert_eq!(report.items.failed, oversize);
    assert_eq!(report.items.done, 400 - report.items.failed);
    assert!(report
        .failures
        .iter()
        .all(|f| f.kind == ErrorKind::OverBudget
            && f.message.starts_with(&format!("{}: needs", f.id))
            && f.message.contains("memory")
            && f.message.contains("oversize")));
    assert_eq!(
        pipeline.limits().get("memory").unwrap().available(),
        4 << 20
    );
}

#[tokio::test(start_paused = true)]
async fn oversize_items_run_alone_when_the_policy_says_so() {
    let (_, _, inside, registry) = common::kinds(4 << 20);
    let pipeline = budget_pipeline("alone", &registry);
    let report = pipeline.run().await.unwrap();
    assert_eq!(report.items.done, 400);
    let seen = inside.snapshot();
    assert_eq!(
        seen.shared_while_oversize, 0,
        "an oversize item ran beside another"
    );
    // Other items still ran side by side (the budget is not a single slot).
    assert!(seen.peak_items > 1);
}

#[test]
fn stages_listing_overlapping_limiters_in_opposite_orders_finish() {
    let (_, _, _, registry) = common::kinds(u64::MAX);
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["ab", "ba", "ab2", "ba2"],
            2000,
            r#"
        [limits.a]
        permits = 1
        [limits.b]
        permits = 1
        [stages.ab]
        kind = "hold"
        mode = "spin"
        workers = 3
        limits = ["a", "b"]
        [stages.ba]
        kind = "hold"
        mode = "spin"
        workers = 3
        limits = ["b", "a"]
        [stages.ab2]
        kind = "hold"
        workers = 3
        limits = ["a", "b"]
        [stages.ba2]
        kind = "hold"
        workers = 3
        limits = ["b", "a"]
        "#,
        ),
        &registry,
    )
    .unwrap();
    for stage in pipeline.stages() {
        let order: Vec<&str> = stage.limits.iter().map(|l| l.name()).collect();
        assert_eq!(
            order,
            ["a", "b"],
            "stage {} acquires in the global order",
            stage.name
        );
    }
    let rt = common::runtime();
    // The timeout only turns a deadlock into a failure instead of a hang.
    let report = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(120), pipeline.run()).await })
        .expect("deadlock: the run did not finish")
        .unwrap();
    assert_eq!(report.items.done, 2000);
}

async fn abort_mid_flight(kind: &str) {
    let (_, gate, _, registry) = common::kinds(u64::MAX);
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["first", "blocked"],
            1000,
            &format!(
                r#"
            sizes = ["1KiB", "64KiB"]
            limits = ["units"]
            [limits.units]
            permits = 50
            [limits.memory]
            budget = "1MiB"
            [limits.cpu]
            permits = 3
            [stages.first]
            kind = "hold"
            workers = 2
            limits = ["cpu", "memory"]
            carry = ["memory"]
            [stages.blocked]
            kind = "{kind}"
            workers = 3
            mailbox = 5
            limits = ["cpu"]
            release = ["memory"]
            "#
            ),
        ),
        &registry,
    )
    .unwrap();
    let pipeline = Arc::new(pipeline);
    let (control, run) = common::spawn_run(&pipeline);
    gate.wait_entered(3).await;
    control.abort();
    gate.open();
    let report = run.await.unwrap().unwrap();

    assert_eq!(report.outcome, RunOutcome::Aborted);
    let i = report.items;
    assert_eq!(
        i.done + i.skipped + i.failed,
        i.total,
        "every admitted item is accounted for"
    );
    assert!(i.total < 1000, "the source stopped");
    assert!(report
        .failures
        .iter()
        .all(|f| f.kind == ErrorKind::Interrupted));
    for l in pipeline.limits().iter() {
        assert_eq!(l.available(), l.capacity(), "limiter {} leaked", l.name());
        assert_eq!(l.in_use(), 0, "limiter {} shows use", l.name());
    }
    // Every worker has ended: none still holds the stage's gate.
    drop(registry);
    drop(pipeline);
    assert_eq!(
        Arc::strong_count(&gate.entered),
        1,
        "a worker outlived the run"
    );
}

#[tokio::test]
async fn an_aborted_run_gives_every_permit_back_async_workers() {
    abort_mid_flight("gate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_run_gives_every_permit_back_blocking_workers() {
    abort_mid_flight("gate_blocking").await;
}

#[tokio::test(start_paused = true)]
async fn a_token_bucket_takes_the_expected_virtual_time() {
    let burst = NonZeroU32::new(5).unwrap();
    let rate = Limiter::rate_with_margin("api", 10.0, burst, RateKey::All, 0.0).unwrap();
    let start = tokio::time::Instant::now();
    for _ in 0..25 {
        rate.acquire(1, None).await.unwrap();
    }
    // 5 from the burst at once, then 20 at 10 per second.
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn keyed_token_buckets_do_not_share_tokens() {
    let burst = NonZeroU32::new(4).unwrap();
    let rate = Limiter::rate_with_margin("hosts", 2.0, burst, RateKey::Host, 0.0).unwrap();
    let start = tokio::time::Instant::now();
    for _ in 0..4 {
        rate.acquire(1, Some("a.example")).await.unwrap();
    }
    for _ in 0..4 {
        rate.acquire(1, Some("b.example")).await.unwrap();
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "b's bucket is full whatever a did"
    );
    rate.acquire(1, Some("a.example")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_paused_key_hands_out_no_token_until_the_pause_ends() {
    let burst = NonZeroU32::new(10).unwrap();
    let rate = Limiter::rate("hosts", 100.0, burst, RateKey::Host).unwrap();
    let start = tokio::time::Instant::now();
    rate.pause_key(Some("slow.example"), Duration::from_secs(3));
    rate.acquire(1, Some("fast.example")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    rate.acquire(1, Some("slow.example")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_stage_runs_at_the_rate() {
    let registry = warpline_engine::Registry::with_builtins();
    let pipeline = Pipeline::from_toml_str(
        &common::generated(
            &["fetch"],
            101,
            r#"
        [limits.requests]
        per_second = 50
        margin = 0
        [stages.fetch]
        kind = "hold"
        workers = 8
        limits = ["requests"]
        "#,
        ),
        &registry,
    )
    .unwrap();
    let start = tokio::time::Instant::now();
    let report = pipeline.run().await.unwrap();
    assert_eq!(report.items.done, 101);
    // One token at once, then 100 more at 50 per second (`margin = 0`:
    // exactly the rate).
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

struct PanickingBackend;

#[async_trait::async_trait]
impl warpline_engine::limit::RateBackend for PanickingBackend {
    async fn acquire(&self, _key: &str) -> Result<Duration, warpline_engine::RateBackendError> {
        panic!("backend boom")
    }
    async fn pause(
        &self,
        _key: &str,
        _delay: Duration,
    ) -> Result<(), warpline_engine::RateBackendError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_panicking_global_rate_backend_fails_tries_not_workers() {
    let factory: warpline_engine::limit::RateBackendFactory =
        Arc::new(|_: &str, _: f64, _: u32| {
            Arc::new(PanickingBackend) as Arc<dyn warpline_engine::limit::RateBackend>
        });
    let pipeline = warpline_engine::Loader::from_toml_str(&common::generated(
        &["work"],
        6,
        r#"
        [limits.api]
        per_second = 100
        scope = "global"
        [stages.work]
        kind = "hold"
        duration = "1ms"
        workers = 2
        limits = ["api"]
        retry = { attempts = 2, base_delay = "1ms" }
        "#,
    ))
    .with_global_rates(factory)
    .load(&warpline_engine::Registry::with_builtins())
    .unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), pipeline.run())
        .await
        .expect("the run ends")
        .unwrap();
    assert_eq!(report.items.failed, 6, "{report}");
    for f in &report.failures {
        assert_eq!((f.kind, f.attempts), (ErrorKind::Transient, 2), "{f:?}");
        assert!(
            f.message
                .contains("the rate backend panicked: backend boom"),
            "{f:?}"
        );
    }
}
