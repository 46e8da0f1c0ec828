//! The `stac` source: the assets of STAC items as inputs, from one of
//!
//! - `items`: an ItemCollection file (local or http(s)), following its
//!   `next` links if it has any;
//! - `search`: a STAC API's `/search` with a query (`collections`, `bbox`,
//!   `datetime`, `limit`), page after page through the `next` links (GET,
//!   or POST with the body the link gives, merged when it says so);
//! - `catalog`: a static catalog, its `child` and `item` links followed
//!   depth first, in their order.
//!
//! One document (a page, a catalog, an item) is read at a time, when the
//! pipeline asks for more inputs than the last one gave: a listing of many
//! pages is never held whole. Each item gives one input per asset key in
//! `assets`, with the id `ITEM_ASSET` made safe for file names (and
//! unique, as every source's ids are). An asset href may be http(s)://,
//! s3:// (fetch reads it with its `endpoint`) or relative, resolved against
//! the item's `self` link, else where the item was read.
//!
//! Failures are failed items, never silent drops: an item without an asset
//! asked for (named `ITEM_ASSET`), a document that cannot be read or is not
//! STAC (named by its URL), a `next` link back to a page already read (a
//! loop: the source ends), and a source that found no items at all.

mod read;

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;
use warpline_engine::redact::redact;
use warpline_engine::{Input, Problem, Settings, Source, SourceError, SourceSpec};

use self::read::{link, location, resolve, Document, Item, Link, Reader, Request};
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
}

#[derive(Debug)]
struct Stac {
    kind: Kind,
    first: Request,
    assets: Vec<String>,
    schemes: Schemes,
    reader: Reader,
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
            reader: Reader { client },
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
    ]
    .into_iter()
    .filter_map(|(k, key, v)| v.as_ref().map(|v| (k, key, v)))
    .collect();
    let [(kind, key, text)] = given[..] else {
        return Err(vec![s.problem(
            "items",
            "give exactly one of `items` (an ItemCollection file or URL), `catalog` \
             (a static catalog's catalog.json) and `search` (a STAC API's /search URL)",
        )]);
    };
    let url = location(text).map_err(|m| vec![s.problem(key, m)])?;
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

impl SourceSpec for Stac {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        // Nothing is read yet: the first document with the first input asked for.
        Ok(Box::new(StacRun {
            kind: self.kind,
            origin: self.first.shown(),
            reader: self.reader.clone(),
            // A POST search's body, for `next` links that merge into it.
            todo: vec![(
                self.first.clone(),
                self.first
                    .body
                    .as_deref()
                    .and_then(|b| serde_json::from_str(b).ok()),
            )],
            read: HashSet::new(),
            pending: VecDeque::new(),
            assets: self.assets.clone(),
            schemes: self.schemes.clone(),
            ids: Ids::default(),
            items: 0,
            pages: 0,
            ended: false,
        }))
    }

    /// `validate --online`: the first document read over http(s) (a STAC
    /// API's first page, a remote ItemCollection or catalog) is there and
    /// is JSON. A document on this machine is not looked at: it is an
    /// input, which may be made just before the run (a failed item then).
    fn check_online(&self) -> Vec<String> {
        if !matches!(self.first.url.scheme(), "http" | "https") {
            return Vec::new();
        }
        let (reader, first) = (self.reader.clone(), self.first.clone());
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

/// A document to read, with the POST body it was asked with (a `next`
/// link may say to merge into it).
type Todo = (Request, Option<Map<String, Value>>);

struct StacRun {
    kind: Kind,
    /// The first document, as shown in messages.
    origin: String,
    reader: Reader,
    /// Documents still to read: a stack (the last pushed is read first).
    todo: Vec<Todo>,
    /// The documents read so far (a hash of each request), to stop at a
    /// loop: 8 bytes a page.
    read: HashSet<u64>,
    /// The inputs of the last document read, not yet taken.
    pending: VecDeque<Result<Input, SourceError>>,
    assets: Vec<String>,
    schemes: Schemes,
    ids: Ids,
    items: u64,
    pages: u64,
    ended: bool,
}

#[async_trait]
impl Source for StacRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        loop {
            if let Some(input) = self.pending.pop_front() {
                return Some(input);
            }
            if self.ended {
                return None;
            }
            let Some((req, body)) = self.todo.pop() else {
                self.ended = true;
                return (self.items == 0).then(|| {
                    Err(SourceError {
                        id: self.origin.clone(),
                        message: format!("{}: no STAC items found", self.origin),
                    })
                });
            };
            if !self.read.insert(hash(&req)) {
                return Some(Err(self.loop_error(&req)));
            }
            match self.reader.read(&req).await {
                Ok((doc, base)) => {
                    self.pages += 1;
                    if let Err(message) = self.take(doc, &req, &base, body) {
                        // Not a page: no `next` link to follow either.
                        if self.kind != Kind::Catalog {
                            self.ended = true;
                        }
                        self.pending.push_back(Err(SourceError {
                            id: req.shown(),
                            message,
                        }));
                    }
                }
                Err(message) => {
                    // A page of a search or collection holds the link to the
                    // next: without it the listing ends. A catalog goes on
                    // with its other documents.
                    if self.kind != Kind::Catalog {
                        self.ended = true;
                    }
                    let after = match self.items {
                        0 => String::new(),
                        n => format!(" (after {n} items)"),
                    };
                    return Some(Err(SourceError {
                        id: req.shown(),
                        message: format!("{message}{after}"),
                    }));
                }
            }
        }
    }
}

impl StacRun {
    /// A document asked for again: a `next` link back to a page already
    /// read ends the listing; a catalog's link to a document already read
    /// is a failed item, and the catalog goes on.
    fn loop_error(&mut self, req: &Request) -> SourceError {
        let shown = req.shown();
        if self.kind != Kind::Catalog {
            self.ended = true;
            return SourceError {
                id: shown.clone(),
                message: format!(
                    "{}: the `next` link of page {} leads back to {shown}, read before: a loop; \
                     stopped after {} items",
                    self.origin, self.pages, self.items
                ),
            };
        }
        SourceError {
            id: shown.clone(),
            message: format!("{shown} is linked to twice in the catalog: read once"),
        }
    }

    /// The inputs and the links to follow of one document.
    fn take(
        &mut self,
        doc: Document,
        req: &Request,
        base: &Url,
        body: Option<Map<String, Value>>,
    ) -> Result<(), String> {
        let shown = req.shown();
        match doc.kind.as_deref() {
            Some("FeatureCollection") => {
                let next = link(&doc.links, "next").cloned();
                for (i, item) in doc.features.unwrap_or_default().into_iter().enumerate() {
                    self.item(item, base, &format!("{shown} item {i}"));
                }
                if let Some(next) = next {
                    let todo = next_request(&next, base, body)
                        .map_err(|m| format!("{shown}: its `next` link: {m}"))?;
                    self.todo.push(todo);
                }
                Ok(())
            }
            Some("Feature") => {
                let id = doc.id.clone().unwrap_or_default();
                self.item(doc.into_item(), base, &format!("{shown} item {id}"));
                Ok(())
            }
            Some("Catalog" | "Collection") if self.kind == Kind::Catalog => {
                // Depth first, in the document's order: pushed last to first.
                for l in doc.links.iter().rev() {
                    if !matches!(l.rel.as_deref(), Some("child" | "item")) {
                        continue;
                    }
                    let Some(href) = &l.href else { continue };
                    let url = base.join(href).map_err(|e| e.to_string());
                    match url.and_then(|u| read::not_local_from_remote(u, base)) {
                        Ok(url) => self.todo.push((Request::get(url), None)),
                        Err(e) => self.pending.push_back(Err(SourceError {
                            id: redact(href),
                            message: format!("{shown}: link {:?}: {e}", redact(href)),
                        })),
                    }
                }
                Ok(())
            }
            other => Err(format!(
                "{shown}: not what a STAC {} gives (its type is {}){}",
                match self.kind {
                    Kind::Catalog => "catalog",
                    _ => "ItemCollection",
                },
                other.map_or("missing".to_owned(), |t| format!("{t:?}")),
                if self.kind == Kind::Search {
                    ": is this the API's /search URL?"
                } else {
                    ""
                }
            )),
        }
    }

    /// One input per asset asked for, or a failed item saying what is
    /// missing.
    fn item(&mut self, item: Item, from: &Url, what: &str) {
        let Some(id) = item.id.clone().filter(|i| !i.is_empty()) else {
            self.pending.push_back(Err(SourceError {
                id: what.to_owned(),
                message: format!("{what}: a STAC item without an id"),
            }));
            return;
        };
        self.items += 1;
        // Relative hrefs are resolved against the item's own address.
        let base = link(&item.links, "self")
            .and_then(|l| l.href.as_deref())
            .and_then(|h| from.join(h).ok())
            .unwrap_or_else(|| from.clone());
        for key in &self.assets {
            let name = self.ids.named(&format!("{id}_{key}"));
            let input = match item.assets.get(key).and_then(|a| a.href.as_deref()) {
                None => Err(missing(&id, key, &item)),
                Some(href) => resolve(href, &base)
                    .and_then(|source| self.schemes.check(&source))
                    .map_err(|m| format!("item {id:?}, asset {key:?}: {m}")),
            };
            self.pending.push_back(match input {
                Ok(source) => Ok(Input {
                    id: name,
                    source,
                    size_hint: None,
                    meta: stac_meta(&item, &id, key),
                }),
                Err(message) => Err(SourceError { id: name, message }),
            });
        }
    }
}

/// What an input made of asset `key` of `item` carries to the write
/// stage: `meta["stac"]`, the item's id, collection, asset key and times
/// (an output's STAC item is dated by them).
fn stac_meta(item: &Item, id: &str, key: &str) -> warpline_engine::item::Meta {
    let times = &item.properties;
    let mut stac = Map::new();
    stac.insert("item".to_owned(), Value::from(id));
    stac.insert("asset".to_owned(), Value::from(key));
    let fields = [
        ("collection", &item.collection),
        ("datetime", &times.datetime),
        ("start_datetime", &times.start_datetime),
        ("end_datetime", &times.end_datetime),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            stac.insert(name.to_owned(), Value::from(v.as_str()));
        }
    }
    std::iter::once(("stac".to_owned(), Value::Object(stac))).collect()
}

fn hash(req: &Request) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(req)
}

fn missing(id: &str, key: &str, item: &Item) -> String {
    if item.assets.contains_key(key) {
        return format!("item {id:?}: asset {key:?} has no href");
    }
    let keys: Vec<&str> = item.assets.keys().map(String::as_str).collect();
    format!(
        "item {id:?} has no asset {key:?} (its assets: {})",
        if keys.is_empty() {
            "none".to_owned()
        } else {
            keys.join(", ")
        }
    )
}

/// The request a `next` link asks for: GET its href, or POST its body
/// (merged into the last body when it says `merge`), with its headers.
fn next_request(next: &Link, base: &Url, last: Option<Map<String, Value>>) -> Result<Todo, String> {
    let href = next.href.as_deref().ok_or("no href")?;
    let url = base
        .join(href)
        .map_err(|e| format!("href {:?}: {e}", redact(href)))?;
    let url = read::not_local_from_remote(url, base)?;
    let headers = next
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str().map_or_else(|| v.to_string(), str::to_owned),
            )
        })
        .collect();
    match next.method.as_deref().unwrap_or("GET") {
        "GET" => Ok((
            Request {
                url,
                body: None,
                headers,
            },
            None,
        )),
        "POST" => {
            let mut body = if next.merge {
                last.unwrap_or_default()
            } else {
                Map::new()
            };
            body.extend(next.body.clone().unwrap_or_default());
            Ok((
                Request {
                    url,
                    body: Some(Value::Object(body.clone()).to_string()),
                    headers,
                },
                Some(body),
            ))
        }
        other => Err(format!("method {other:?}: GET or POST")),
    }
}

#[cfg(test)]
mod tests;
