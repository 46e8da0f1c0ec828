//! A real STAC API on loopback: rustac's own server (`stac-server`, the
//! one `rustac serve` runs, with its in-memory backend) serving a
//! collection of items, with a count of the `/search` requests it answered.
//!
//! Why in the test process and not `rustac serve` started by
//! scripts/test.sh: the `rustac` CLI always links DuckDB (`stac-duckdb`),
//! which Debian 12 does not package and whose bundled C++ build is far over
//! the set-up's budget; the server library is the same code without it.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use stac::api::TransactionClient;

use crate::common;

pub struct StacApi {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    searches: Arc<AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

impl StacApi {
    /// The `/search` requests answered so far.
    pub fn searches(&self) -> usize {
        self.searches.load(Ordering::SeqCst)
    }
}

/// Serves `items` (each with `"collection": collection`).
pub fn serve(collection: &str, items: Vec<Value>) -> StacApi {
    let rt = common::runtime();
    let searches = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&searches);
    let url = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut backend = stac_server::MemoryBackend::new();
        backend
            .add_collection(stac::Collection::new(collection, "test scenes"))
            .await
            .unwrap();
        for item in items {
            backend
                .add_item(serde_json::from_value(item).unwrap())
                .await
                .unwrap();
        }
        let api = stac_server::Api::new(backend, &format!("{url}/")).unwrap();
        let count = axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                if req.uri().path() == "/search" {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                next.run(req)
            },
        );
        let app = stac_server::routes::from_api(api).layer(count);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    });
    StacApi {
        url,
        searches,
        _rt: rt,
    }
}

/// A STAC item over the square `[x, y, x+1, y+1]` at `datetime`, with
/// `assets` as (key, href).
pub fn item(
    id: &str,
    collection: &str,
    x: f64,
    y: f64,
    datetime: &str,
    assets: &[(&str, String)],
) -> Value {
    let assets: serde_json::Map<String, Value> = assets
        .iter()
        .map(|(k, href)| {
            (
                (*k).to_owned(),
                json!({ "href": href, "type": "image/tiff" }),
            )
        })
        .collect();
    json!({
        "type": "Feature",
        "stac_version": "1.1.0",
        "id": id,
        "collection": collection,
        "geometry": {
            "type": "Polygon",
            "coordinates": [[[x, y], [x + 1.0, y], [x + 1.0, y + 1.0], [x, y + 1.0], [x, y]]]
        },
        "bbox": [x, y, x + 1.0, y + 1.0],
        "properties": { "datetime": datetime },
        "links": [],
        "assets": assets
    })
}

/// Writes an ItemCollection of `items` to `path`, with `extra` links.
pub fn write_collection(path: &Path, items: &[Value], links: Value) {
    let doc = json!({ "type": "FeatureCollection", "features": items, "links": links });
    std::fs::write(path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
}
