//! The `stac` source: the assets of STAC items as inputs, from one of
//!
//! - `items`: an ItemCollection file (local or http(s)), following its
//!   `next` links if it has any;
//! - `search`: a STAC API's `/search` with a query (`collections`, `bbox`,
//!   `datetime`, `limit`), page after page through the `next` links (GET,
//!   or POST with the body the link gives, merged when it says so);
//! - `catalog`: a static catalog, its `child` and `item` links followed
//!   depth first, in their order;
//! - `geoparquet`: a stac-geoparquet file, one row per item (`parquet`).
//!
//! One document (a page, a catalog, an item) is read at a time, the next
//! while the inputs of the one before are admitted (`run`), and rows of a
//! file a chunk at a time the same way: a listing of many pages or rows
//! is never held whole. HTTP requests go through the engine's per-host
//! adaptive gate and a fetch's retry policy (`read`). Each item gives one
//! input per asset key in
//! `assets`, with the id `ITEM_ASSET` made safe for file names (and
//! unique, as every source's ids are). An asset href may be http(s)://,
//! s3:// (fetch reads it with its `endpoint`) or relative, resolved against
//! the item's `self` link, else where the item was read.
//!
//! Failures are failed items, never silent drops: an item without an asset
//! asked for (named `ITEM_ASSET`), a document that cannot be read or is not
//! STAC (named by its URL), a `next` link back to a page already read (a
//! loop: the source ends), and a source that found no items at all.

mod inputs;
mod parquet;
mod read;
mod run;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;
use warpline_engine::{Problem, Requests, Settings, Source, SourceSpec};

use self::inputs::Maker;
use self::read::{location, Reader, Request};
use self::run::StacRun;
use super::{Ids, Schemes};

/// One asset key or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum AssetKeys {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StacSettings {
    items: Option<String>,
    catalog: Option<String>,
    search: Option<String>,
    geoparquet: Option<String>,
    collections: Option<Vec<String>>,
    bbox: Option<Vec<f64>>,
    datetime: Option<String>,
    limit: Option<u64>,
    method: Option<String>,
    assets: Option<AssetKeys>,
    schemes: Option<Vec<String>>,
}

/// Where the items come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Items,
    Catalog,
    Search,
    Geoparquet,
}

#[derive(Debug)]
struct Stac {
    kind: Kind,
    first: Request,
    assets: Vec<String>,
    schemes: Schemes,
    client: reqwest::Client,
}

pub(super) fn stac(s: &Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> {
    let t: StacSettings = s.parse()?;
    let schemes = Schemes::parse(s, t.schemes.clone()).map_err(|p| vec![p])?;
    let mut problems = Vec::new();
    let assets = match &t.assets {
        None => Vec::new(),
        Some(AssetKeys::One(k)) => vec![k.clone()],
        Some(AssetKeys::Many(k)) => k.clone(),
    };
    if assets.is_empty() || assets.iter().any(|k| k.is_empty()) {
        problems.push(s.problem(
            "assets",
            "missing: the asset keys to read, e.g. \"visual\" or [\"B04\", \"B08\"]",
        ));
    }
    let first = match first_request(s, &t) {
        Ok(r) => Some(r),
        Err(mut p) => {
            problems.append(&mut p);
            None
        }
    };
    let client = crate::http::client(Duration::from_secs(10), Duration::from_secs(60), 5, None)
        .map_err(|e| vec![s.problem("", format!("cannot build the HTTP client: {e}"))])?;
    match first {
        Some((kind, first)) if problems.is_empty() => Ok(Arc::new(Stac {
            kind,
            first,
            assets,
            schemes,
            client,
        })),
        _ => Err(problems),
    }
}

/// The first document to read, from exactly one of `items`, `catalog` and
/// `search`; the query keys only with `search`.
fn first_request(s: &Settings, t: &StacSettings) -> Result<(Kind, Request), Vec<Problem>> {
    let given: Vec<(Kind, &str, &String)> = [
        (Kind::Items, "items", &t.items),
        (Kind::Catalog, "catalog", &t.catalog),
        (Kind::Search, "search", &t.search),
        (Kind::Geoparquet, "geoparquet", &t.geoparquet),
    ]
    .into_iter()
    .filter_map(|(k, key, v)| v.as_ref().map(|v| (k, key, v)))
    .collect();
    let [(kind, key, text)] = given[..] else {
        return Err(vec![s.problem(
            "items",
            "give exactly one of `items` (an ItemCollection file or URL), `catalog` \
             (a static catalog's catalog.json), `search` (a STAC API's /search URL) and \
             `geoparquet` (a stac-geoparquet file)",
        )]);
    };
    let url = location(text).map_err(|m| vec![s.problem(key, m)])?;
    if kind == Kind::Geoparquet && url.scheme() != "file" {
        return Err(vec![s.problem(
            key,
            "a stac-geoparquet file on this machine (a path or file://): download it first",
        )]);
    }
    if kind != Kind::Search {
        let query = [
            ("collections", t.collections.is_some()),
            ("bbox", t.bbox.is_some()),
            ("datetime", t.datetime.is_some()),
            ("limit", t.limit.is_some()),
            ("method", t.method.is_some()),
        ];
        let problems: Vec<Problem> = query
            .iter()
            .filter(|(_, given)| *given)
            .map(|(k, _)| s.problem(k, "only with `search`: a file or catalog takes no query"))
            .collect();
        if !problems.is_empty() {
            return Err(problems);
        }
        return Ok((kind, Request::get(url)));
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err(vec![
            s.problem("search", "a STAC API's URL: http:// or https://")
        ]);
    }
    search_request(s, t, url).map(|r| (kind, r))
}

/// The search's first request: GET with the query in the URL, or POST
/// with it as a JSON body.
fn search_request(s: &Settings, t: &StacSettings, url: Url) -> Result<Request, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut body = Map::new();
    if let Some(c) = &t.collections {
        body.insert("collections".into(), c.clone().into());
    }
    if let Some(b) = &t.bbox {
        if b.len() != 4 && b.len() != 6 {
            problems.push(s.problem(
                "bbox",
                "4 numbers (west, south, east, north) or 6 (with heights)",
            ));
        }
        body.insert("bbox".into(), b.clone().into());
    }
    if let Some(d) = &t.datetime {
        body.insert("datetime".into(), d.clone().into());
    }
    match t.limit {
        Some(0) => problems.push(s.problem("limit", "at least 1 item per page")),
        Some(n) => {
            body.insert("limit".into(), n.into());
        }
        None => {}
    }
    let post = match t.method.as_deref() {
        None | Some("GET") => false,
        Some("POST") => true,
        Some(other) => {
            problems.push(s.problem("method", format!("{other:?}: \"GET\" or \"POST\"")));
            false
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    if post {
        return Ok(Request {
            url,
            body: Some(Value::Object(body).to_string()),
            headers: Vec::new(),
        });
    }
    let mut url = url;
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in &body {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Array(a) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| x.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            q.append_pair(k, &text);
        }
    }
    Ok(Request::get(url))
}

impl Stac {
    /// A reader with gates of its own: what a run learns of a host is
    /// learnt afresh each run, as a stage's gates are.
    fn reader(&self) -> Reader {
        Reader {
            client: self.client.clone(),
            requests: Requests::one_at_a_time(),
        }
    }

    fn maker(&self) -> Maker {
        Maker {
            assets: self.assets.clone(),
            schemes: self.schemes.clone(),
            ids: Ids::default(),
            items: 0,
        }
    }
}

impl SourceSpec for Stac {
    /// A document source reads nothing yet: the first document with the
    /// first input asked for. A stac-geoparquet file's footer and schema
    /// are read now (a file that is not one fails the run here).
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        if self.kind == Kind::Geoparquet {
            let path: PathBuf = self
                .first
                .url
                .to_file_path()
                .map_err(|()| format!("{}: not a local path", self.first.shown()))?;
            return Ok(Box::new(parquet::ParquetRun::open(&path, self.maker())?));
        }
        // A POST search's body, for `next` links that merge into it.
        let body = self
            .first
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str(b).ok());
        let first = (self.first.clone(), body);
        Ok(Box::new(StacRun::new(
            self.kind,
            self.reader(),
            first,
            self.maker(),
        )))
    }

    /// `validate --online`: the first document read over http(s) (a STAC
    /// API's first page, a remote ItemCollection or catalog) is there and
    /// is JSON. A document on this machine is not looked at: it is an
    /// input, which may be made just before the run (a failed item then).
    fn check_online(&self) -> Vec<String> {
        if !matches!(self.first.url.scheme(), "http" | "https") {
            return Vec::new();
        }
        let (reader, first) = (self.reader(), self.first.clone());
        let read = crate::store::block_on(async move {
            reader
                .read(&first)
                .await
                .map(|_| ())
                .map_err(warpline_engine::StageError::permanent)
        });
        match read {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!(
                "cannot read the first STAC document: {}",
                e.message
            )],
        }
    }
}

#[cfg(test)]
mod tests;
