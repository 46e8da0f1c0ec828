//! An ingestion service that embeds warpline: every job is a pipeline
//! posted as TOML, run on the service's own tokio runtime, and all jobs
//! draw on one shared `connections` and one shared `memory` budget.
//!
//! ```text
//! cargo run --example service -- 127.0.0.1:8080
//! curl -X POST --data-binary @job.toml http://127.0.0.1:8080/jobs   -> {"id": 1}
//! curl http://127.0.0.1:8080/jobs/1                                  -> status, progress, report
//! curl -N http://127.0.0.1:8080/jobs/1/events                        -> server-sent events
//! curl -X DELETE http://127.0.0.1:8080/jobs/1                        -> cancels
//! ```
//!
//! A job's pipeline uses the shared limiters by declaring them:
//!
//! ```toml
//! [limits.connections]
//! shared = true
//! [limits.memory]
//! shared = true
//! ```
//!
//! A body that is not a valid pipeline gets `400` with every problem.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::json;
use warpline::engine::limit::{Limiter, Limits, Oversize};
use warpline::engine::{RunOptions, RunWatch};
use warpline::{Loader, Registry, RunReport};

/// One job: a view of its run, and its report once it has one.
struct Job {
    watch: RunWatch,
    outcome: Arc<Mutex<Option<Result<RunReport, String>>>>,
    cancelled: bool,
}

/// The service's state: the kinds it knows, the limiters every job shares,
/// and the jobs.
pub struct Service {
    registry: Registry,
    shared: Limits,
    jobs: Mutex<HashMap<u64, Job>>,
    next: AtomicU64,
}

impl Service {
    /// A service whose jobs share `shared`.
    pub fn new(shared: Limits) -> Arc<Self> {
        Arc::new(Service {
            registry: warpline::registry(),
            shared,
            jobs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        })
    }

    /// The limiters every job shares.
    pub fn shared(&self) -> &Limits {
        &self.shared
    }
}

/// The shared limiters of this example: 8 connections, 512 MiB.
pub fn default_limits() -> Limits {
    let mut shared = Limits::new();
    let eight = NonZeroU32::new(8).expect("8 is not zero");
    shared
        .add(Limiter::count("connections", eight))
        .expect("unique name");
    shared
        .add(Limiter::bytes("memory", 512 << 20, Oversize::Fail))
        .expect("unique name");
    shared
}

/// The routes.
pub fn app(service: Arc<Service>) -> Router {
    Router::new()
        .route("/jobs", post(create))
        .route("/jobs/{id}", get(status).delete(cancel))
        .route("/jobs/{id}/events", get(events))
        .with_state(service)
}

async fn create(State(service): State<Arc<Service>>, body: String) -> Response {
    let id = service.next.fetch_add(1, Ordering::Relaxed);
    // Problems are headed `job-N`, and a pipeline without a name is `job-N`.
    let pipeline = match Loader::from_toml_str(&body)
        .named(format!("job-{id}"))
        .with_limits(&service.shared)
        .load(&service.registry)
    {
        Ok(p) => p,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({ "errors": e.problems })),
            )
                .into_response()
        }
    };
    // Each job's metrics (if the service exports them) are its own series.
    let handle = pipeline.spawn(RunOptions {
        metrics_label: Some(format!("job-{id}")),
        ..RunOptions::default()
    });
    let outcome = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&outcome);
    let watch = handle.watch();
    tokio::spawn(async move {
        let result = handle.report().await.map_err(|e| e.to_string());
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
    });
    service
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            id,
            Job {
                watch,
                outcome,
                cancelled: false,
            },
        );
    (StatusCode::CREATED, Json(json!({ "id": id }))).into_response()
}

async fn status(State(service): State<Arc<Service>>, Path(id): Path<u64>) -> Response {
    let jobs = service.jobs.lock().unwrap_or_else(|p| p.into_inner());
    let Some(job) = jobs.get(&id) else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": format!("no job {id}") })),
        )
            .into_response();
    };
    let outcome = job.outcome.lock().unwrap_or_else(|p| p.into_inner());
    let (state, report, error) = match &*outcome {
        None if job.cancelled => ("cancelling", None, None),
        None => ("running", None, None),
        Some(Ok(r)) if job.cancelled => ("cancelled", Some(r.clone()), None),
        Some(Ok(r)) => ("finished", Some(r.clone()), None),
        Some(Err(e)) => ("error", None, Some(e.clone())),
    };
    Json(json!({
        "id": id,
        "status": state,
        "progress": job.watch.progress(),
        // Per stage items queued and working, per limiter its use; `null`
        // once the run has ended.
        "live": job.watch.snapshot(),
        "report": report,
        "error": error,
    }))
    .into_response()
}

async fn cancel(State(service): State<Arc<Service>>, Path(id): Path<u64>) -> Response {
    let mut jobs = service.jobs.lock().unwrap_or_else(|p| p.into_inner());
    match jobs.get_mut(&id) {
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": format!("no job {id}") })),
        )
            .into_response(),
        Some(job) => {
            job.cancelled = true;
            job.watch.abort();
            (
                StatusCode::ACCEPTED,
                Json(json!({ "id": id, "status": "cancelling" })),
            )
                .into_response()
        }
    }
}

async fn events(State(service): State<Arc<Service>>, Path(id): Path<u64>) -> Response {
    let stream = {
        let jobs = service.jobs.lock().unwrap_or_else(|p| p.into_inner());
        match jobs.get(&id) {
            None => {
                return (
                    StatusCode::NOT_FOUND,
                    Json(json!({ "error": format!("no job {id}") })),
                )
                    .into_response()
            }
            Some(job) => job.watch.events(),
        }
    };
    let stream = stream.map(|e| SseEvent::default().json_data(&e));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[allow(dead_code)] // the tests include this file for `app`, not `main`
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("warpline service on http://{}", listener.local_addr()?);
    axum::serve(listener, app(Service::new(default_limits()))).await?;
    Ok(())
}
