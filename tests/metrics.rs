//! The Prometheus metrics of two jobs in one process: each series carries
//! its run's `pipeline` label, every metric has a `# HELP` line, byte
//! budgets are in `_bytes` metrics, and each limiter's capacity is a gauge.
//!
//! One test in this file: it installs the process's metrics recorder.

use std::num::NonZeroU32;
use std::time::Duration;

use warpline::engine::observe::METRICS;
use warpline::{Limiter, Limits, Oversize};
use warpline::{Loader, RunControl, RunOptions};

fn job(count: u32) -> String {
    format!(
        r#"
        [pipeline]
        name = "ingest"
        flow = ["work"]
        [source]
        kind = "generate"
        count = {count}
        [limits.connections]
        shared = true
        [limits.memory]
        shared = true
        [stages.work]
        kind = "hold"
        duration = "5ms"
        limits = ["connections", "memory"]
        "#
    )
}

/// The value of the series `name{labels...}`, whatever the labels' order.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The limits the two jobs share: 4 `connections`, 64 MiB of `memory`.
fn shared_limits() -> Limits {
    let mut shared = Limits::new();
    shared
        .add(Limiter::count("connections", NonZeroU32::new(4).unwrap()))
        .unwrap();
    shared
        .add(Limiter::bytes("memory", 64 << 20, Oversize::Fail))
        .unwrap();
    shared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_of_one_pipeline_write_their_own_series() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .unwrap();
    let shared = shared_limits();
    let registry = warpline::registry();
    // The same pipeline (same name) for two jobs, told apart by their label.
    for (label, count) in [("job-1", 3), ("job-2", 5)] {
        let pipeline = Loader::from_toml_str(&job(count))
            .with_limits(&shared)
            .load(&registry)
            .unwrap();
        let options = RunOptions {
            sample: Some(Duration::from_secs(60)),
            metrics_label: Some(label.to_owned()),
            ..RunOptions::default()
        };
        let report = pipeline
            .run_with_options(&RunControl::new(), &options)
            .await
            .unwrap();
        assert_eq!(report.items.done, u64::from(count));
    }
    let text = handle.render();
    let done = |job| {
        value(
            &text,
            "warpline_items_total",
            &[("pipeline", job), ("outcome", "done")],
        )
    };
    assert_eq!(done("job-1"), Some(3.0), "{text}");
    assert_eq!(done("job-2"), Some(5.0), "{text}");
    for job in ["job-1", "job-2"] {
        let at = [("pipeline", job), ("limiter", "memory")];
        assert_eq!(
            value(&text, "warpline_limiter_capacity_bytes", &at),
            Some((64u64 << 20) as f64),
            "{text}"
        );
        assert!(
            value(&text, "warpline_limiter_in_use_bytes", &at).is_some(),
            "{text}"
        );
        let at = [("pipeline", job), ("limiter", "connections")];
        assert_eq!(
            value(&text, "warpline_limiter_capacity", &at),
            Some(4.0),
            "{text}"
        );
        let at = [("pipeline", job), ("stage", "work")];
        assert!(
            value(&text, "warpline_stage_queue_depth", &at).is_some(),
            "{text}"
        );
    }
    // A byte budget is never in the unitless gauge.
    assert!(
        value(&text, "warpline_limiter_in_use", &[("limiter", "memory")]).is_none(),
        "{text}"
    );
    // No series without its run's label.
    for line in text.lines().filter(|l| l.starts_with("warpline_")) {
        assert!(line.contains("pipeline=\""), "{line}");
    }
    // Every metric the exporter shows has its help text, and every metric
    // listed is documented in docs/pipeline.md.
    let docs = include_str!("../docs/pipeline.md");
    for (name, _, _) in METRICS {
        if text.contains(&format!("\n{name}")) || text.starts_with(name) {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
        }
        assert!(docs.contains(&format!("`{name}`")), "{name} not documented");
    }
}
