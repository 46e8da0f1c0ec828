//! The example service (examples/service.rs), driven over loopback: two
//! jobs at once finish, the shared connection limit holds across both (as
//! counted at the tile server), a cancel frees every permit, and a bad
//! pipeline gets 400 with every problem.

#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/service.rs"]
mod example;

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use warpline_testkit::{Faults, TileServer};

struct Running {
    base: String,
    service: Arc<example::Service>,
    client: reqwest::Client,
}

impl Running {
    /// GETs `path` (after the base URL): the status and the JSON body.
    async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        json(self.client.get(self.url(path)).send().await.unwrap()).await
    }

    /// POSTs `body` to `path`: the status and the JSON body.
    async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, serde_json::Value) {
        json(
            self.client
                .post(self.url(path))
                .body(body)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// DELETEs `path`: the status and the JSON body.
    async fn delete(&self, path: &str) -> (u16, serde_json::Value) {
        json(self.client.delete(self.url(path)).send().await.unwrap()).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

async fn start_service() -> Running {
    let service = example::Service::new(example::default_limits());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = example::app(Arc::clone(&service));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Running {
        base,
        service,
        client: reqwest::Client::new(),
    }
}

/// A tile server answering after `latency_ms`, with `per_crs` x 4 tiles,
/// and their URLs.
async fn slow_tiles(per_crs: usize, latency_ms: u64) -> (TileServer, Vec<String>) {
    let tiles = common::tiles(per_crs, 64);
    let faults = Faults {
        latency: Some(Duration::from_millis(latency_ms)),
        ..Faults::default()
    };
    let server = TileServer::start_with(tiles.clone(), faults).await.unwrap();
    let urls = tiles.iter().map(|(n, _)| server.url(n)).collect();
    (server, urls)
}

fn job_toml(urls: &[String], out: &std::path::Path) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "write"]
[source]
kind = "inline"
inputs = {}
[limits.connections]
shared = true
[limits.memory]
shared = true
[stages.fetch]
kind = "fetch"
workers = 16
limits = ["connections"]
memory = "memory"
[stages.decode]
kind = "decode"
workers = 2
limits = ["memory"]
release = ["memory"]
carry = ["memory"]
[stages.write]
kind = "write"
workers = 2
dir = {:?}
"#,
        common::toml_list(urls),
        out.display().to_string()
    )
}

async fn json(resp: reqwest::Response) -> (u16, serde_json::Value) {
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}")),
    )
}

/// Polls a job until `done(status)` (a condition; the deadline only turns a
/// hang into a failure).
async fn wait_for(
    r: &Running,
    id: u64,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (code, body) = r.get(&format!("/jobs/{id}")).await;
        assert_eq!(code, 200);
        if done(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never got there: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_at_once_finish_within_one_shared_connection_limit() {
    let r = start_service().await;
    let (server, urls) = slow_tiles(5, 15).await;
    let work = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for job in ["a", "b"] {
        let body = job_toml(&urls, &work.path().join(job));
        let (code, v) = r.post("/jobs", body).await;
        assert_eq!(code, 201, "{v}");
        ids.push(v["id"].as_u64().unwrap());
    }
    // Follow one job's events over SSE while both run.
    let sse = r
        .client
        .get(format!("{}/jobs/{}/events", r.base, ids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    for id in &ids {
        let v = wait_for(&r, *id, |v| v["status"] == "finished").await;
        assert_eq!(v["report"]["items"]["done"], 20, "{v}");
        assert_eq!(v["progress"]["done"], 20);
    }
    let events = sse.text().await.unwrap();
    assert!(
        events.contains("data:") && events.contains("\"event\":\"done\""),
        "{events}"
    );
    let permits = r.service.shared().get("connections").unwrap().capacity();
    assert_eq!(server.requests(), 40);
    assert!(
        server.peak_in_flight() <= permits,
        "{} requests at once over {permits} shared connections",
        server.peak_in_flight()
    );
    assert!(server.peak_in_flight() > 1, "the jobs did run side by side");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_job_frees_every_permit() {
    let r = start_service().await;
    let (_server, urls) = slow_tiles(10, 100).await;
    let work = tempfile::tempdir().unwrap();
    let (_, v) = r.post("/jobs", job_toml(&urls, work.path())).await;
    let id = v["id"].as_u64().unwrap();
    wait_for(&r, id, |v| v["progress"]["done"].as_u64().unwrap_or(0) >= 1).await;
    let (code, _) = r.delete(&format!("/jobs/{id}")).await;
    assert_eq!(code, 202);
    let v = wait_for(&r, id, |v| v["status"] == "cancelled").await;
    let items = &v["report"]["items"];
    assert!(items["done"].as_u64().unwrap() < 40, "{v}");
    assert_eq!(
        items["done"].as_u64().unwrap() + items["failed"].as_u64().unwrap(),
        items["total"].as_u64().unwrap()
    );
    for l in r.service.shared().iter() {
        assert_eq!(l.available(), l.capacity(), "shared `{}` leaked", l.name());
    }
    let (code, _) = r.get("/jobs/999").await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn a_bad_pipeline_gets_400_with_every_problem() {
    let r = start_service().await;
    let body = r#"
[pipeline]
flow = ["work"]
[source]
kind = "generate"
count = 0
[limits.connections]
shared = true
permits = 4
[limits.gpu]
shared = true
[stages.work]
kind = "hold"
workers = 0
"#;
    let (code, v) = r.post("/jobs", body).await;
    assert_eq!(code, 400);
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    for p in ["limits.connections", "limits.gpu", "stages.work.workers"] {
        assert!(paths.contains(&p), "{p} missing from {v}");
    }
    let (code, v) = r.post("/jobs", "not toml [").await;
    assert_eq!(code, 400, "{v}");
}
