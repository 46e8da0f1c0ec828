//! A small HTTP server on loopback that serves tiles from memory: the demo's
//! tile server, and the tests' (it counts requests and the most served at
//! once).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
}

struct Shared {
    tiles: HashMap<String, Arc<Vec<u8>>>,
    stats: Stats,
}

/// A running tile server. Stops when dropped.
#[derive(Debug)]
pub struct TileServer {
    addr: SocketAddr,
    shared: Arc<SharedHandle>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Opaque handle to the server's state.
pub struct SharedHandle(Arc<Shared>);

impl std::fmt::Debug for SharedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedHandle")
            .field("tiles", &self.0.tiles.len())
            .finish()
    }
}

async fn tile(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    let s = &shared.stats;
    s.requests.fetch_add(1, Ordering::SeqCst);
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    s.peak_in_flight.fetch_max(now, Ordering::SeqCst);
    let response = match shared.tiles.get(&name) {
        Some(bytes) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "image/tiff")],
            bytes.as_ref().clone(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, format!("no tile {name}\n")).into_response(),
    };
    s.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

impl TileServer {
    /// Serves `tiles` (name, bytes) at `http://127.0.0.1:PORT/tiles/NAME` on
    /// the current tokio runtime.
    pub async fn start(
        tiles: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            tiles: tiles.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
            stats: Stats::default(),
        });
        let app = Router::new()
            .route("/tiles/{name}", get(tile))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(TileServer {
            addr,
            shared: Arc::new(SharedHandle(shared)),
            stop: Some(stop),
        })
    }

    /// The URL of a tile.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/tiles/{name}", self.addr)
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.shared.0.stats.requests.load(Ordering::SeqCst)
    }

    /// The most requests served at once.
    pub fn peak_in_flight(&self) -> u64 {
        self.shared.0.stats.peak_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for TileServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
