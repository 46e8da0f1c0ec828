//! STAC documents and how they are read: the few fields warpline uses of an
//! Item, an ItemCollection (a search's page), a Catalog or Collection and
//! their links, as serde types of our own; and one document read from a
//! local file or over HTTP(S) (GET, or POST with a JSON body as a `next`
//! link may say), at most [`MAX_DOCUMENT_BYTES`]. Requests go through the
//! engine's [`Requests`]: the host's adaptive gate (a 429 or 503 pauses it
//! for its `Retry-After`, and a rate is learnt) and a fetch stage's retry
//! policy for transient errors (resets, timeouts, 5xx).
//!
//! Own types rather than the `stac` crate's: `stac` 0.17 always pulls
//! `cql2` (with `geo`, `geozero`, `jsonschema`, `sqlparser`, `pest`): 93
//! crates new to warpline's build for the five fields read here.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;
use warpline_engine::redact::{redact, redact_text};
use warpline_engine::{Requests, StageError};

/// The largest document read (a page, a catalog, an item collection).
pub(super) const MAX_DOCUMENT_BYTES: u64 = 64 << 20;

/// Any STAC object: an Item (`Feature`), an ItemCollection
/// (`FeatureCollection`), a Catalog or a Collection. Other fields are
/// ignored.
#[derive(Debug, Deserialize)]
pub(super) struct Document {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) id: Option<String>,
    /// An ItemCollection's items.
    pub(super) features: Option<Vec<Item>>,
    /// An Item's assets (when the document is one item).
    #[serde(default)]
    pub(super) assets: BTreeMap<String, Asset>,
    #[serde(default)]
    pub(super) links: Vec<Link>,
    /// An Item's times (when the document is one item).
    #[serde(default)]
    pub(super) properties: Times,
    pub(super) collection: Option<String>,
}

/// An item of a collection, a page or a catalog.
#[derive(Debug, Deserialize)]
pub(super) struct Item {
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) assets: BTreeMap<String, Asset>,
    #[serde(default)]
    pub(super) links: Vec<Link>,
    #[serde(default)]
    pub(super) properties: Times,
    pub(super) collection: Option<String>,
}

/// An item's times (its other properties are not read): what an output
/// made of its asset is dated by.
#[derive(Debug, Default, Clone, Deserialize)]
pub(super) struct Times {
    pub(super) datetime: Option<String>,
    pub(super) start_datetime: Option<String>,
    pub(super) end_datetime: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Asset {
    pub(super) href: Option<String>,
}

/// A link, with the STAC API's extra fields for a `next` page (`method`,
/// `body`, `merge`, `headers`).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Link {
    pub(super) rel: Option<String>,
    pub(super) href: Option<String>,
    pub(super) method: Option<String>,
    pub(super) body: Option<Map<String, Value>>,
    #[serde(default)]
    pub(super) merge: bool,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, Value>,
}

impl Document {
    pub(super) fn into_item(self) -> Item {
        Item {
            id: self.id,
            assets: self.assets,
            links: self.links,
            properties: self.properties,
            collection: self.collection,
        }
    }
}

/// The first link of `rel`.
pub(super) fn link<'a>(links: &'a [Link], rel: &str) -> Option<&'a Link> {
    links.iter().find(|l| l.rel.as_deref() == Some(rel))
}

/// A document to read: where, how, and with what body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Request {
    pub(super) url: Url,
    /// `None` for GET; a JSON body for POST.
    pub(super) body: Option<String>,
    pub(super) headers: Vec<(String, String)>,
}

impl Request {
    pub(super) fn get(url: Url) -> Self {
        Request {
            url,
            body: None,
            headers: Vec::new(),
        }
    }

    /// The URL as it may be shown (no secrets).
    pub(super) fn shown(&self) -> String {
        let url = if self.url.scheme() == "file" {
            self.url
                .to_file_path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| self.url.to_string())
        } else {
            self.url.to_string()
        };
        match self.body {
            None => redact(&url),
            Some(_) => format!("POST {}", redact(&url)),
        }
    }
}

/// Reads documents: local files, and HTTP(S) through one client and the
/// run's per-host gates.
#[derive(Debug, Clone)]
pub(super) struct Reader {
    pub(super) client: reqwest::Client,
    pub(super) requests: Requests,
}

/// Why a document could not be read (transient errors were tried again).
pub(super) type ReadError = String;

impl Reader {
    /// Reads and parses one document; with the URL it was read from at
    /// last (a server's redirect moves it), which its relative links are
    /// relative to.
    pub(super) async fn read(&self, req: &Request) -> Result<(Document, Url), ReadError> {
        let shown = req.shown();
        let (bytes, at) = match req.url.scheme() {
            "file" => (read_file(&req.url, &shown).await?, req.url.clone()),
            "http" | "https" => {
                let host = warpline_engine::run::host_of(req.url.as_str());
                self.requests
                    .send(host.as_deref(), || self.http_once(req, &shown))
                    .await
                    .map_err(|e| e.message)?
            }
            other => {
                return Err(format!(
                    "{shown}: a STAC document is read from a local file or http(s), not {other}://"
                ))
            }
        };
        let doc = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{shown}: not a STAC JSON document: {e}"))?;
        Ok((doc, at))
    }

    /// One try, its error classed as a fetch's are: 408, 429, 5xx, resets,
    /// timeouts and bodies cut short are transient (a 429's or 503's
    /// `Retry-After` kept), a host that cannot be reached is down, other
    /// answers fail at once.
    async fn http_once(&self, req: &Request, shown: &str) -> Result<(Vec<u8>, Url), StageError> {
        let mut builder = match &req.body {
            None => self.client.get(req.url.clone()),
            Some(body) => self
                .client
                .post(req.url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone()),
        };
        builder = builder.header(
            reqwest::header::ACCEPT,
            "application/geo+json, application/json",
        );
        for (k, v) in &req.headers {
            builder = builder.header(k, v);
        }
        let mut response = builder
            .send()
            .await
            .map_err(|e| crate::http::request_error(shown, e))?;
        let at = response.url().clone();
        let status = response.status();
        if !status.is_success() {
            return Err(status_error(response, shown).await);
        }
        if let Some(len) = response.content_length() {
            if len > MAX_DOCUMENT_BYTES {
                return Err(StageError::permanent(too_big(shown)));
            }
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            let text = redact_text(&crate::http::error_chain(&e.without_url()));
            StageError::transient(format!(
                "{shown}: body cut short after {} bytes: {text}",
                bytes.len()
            ))
        })? {
            if (bytes.len() + chunk.len()) as u64 > MAX_DOCUMENT_BYTES {
                return Err(StageError::permanent(too_big(shown)));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((bytes, at))
    }
}

/// An answer that is not a success, with what the server said in short
/// (an API says why it refused).
async fn status_error(response: reqwest::Response, shown: &str) -> StageError {
    let status = response.status();
    let headers = response.headers().clone();
    let said = response.text().await.unwrap_or_default();
    let said: String = said.trim().chars().take(300).collect();
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(": {}", redact_text(&said))
    };
    let message = format!("{shown}: HTTP {status}{said}");
    crate::http::status_error(status, &headers, message)
}

fn too_big(shown: &str) -> String {
    format!(
        "{shown}: a STAC document over {} MiB is not read",
        MAX_DOCUMENT_BYTES >> 20
    )
}

async fn read_file(url: &Url, shown: &str) -> Result<Vec<u8>, ReadError> {
    let path = url
        .to_file_path()
        .map_err(|()| format!("{shown}: not a local path"))?;
    let meta = tokio::fs::metadata(&path)
        .await
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if meta.len() > MAX_DOCUMENT_BYTES {
        return Err(too_big(shown));
    }
    tokio::fs::read(&path)
        .await
        .map_err(|e| format!("cannot read {shown}: {e}"))
}

/// Where `text` (a URL or a local path) is, as a URL; a relative path is
/// taken from the working directory.
pub(super) fn location(text: &str) -> Result<Url, String> {
    match super::super::scheme_of(text) {
        Some("http" | "https" | "file") => {
            Url::parse(text).map_err(|e| format!("malformed URL {:?}: {e}", redact(text)))
        }
        Some(other) => Err(format!(
            "{:?}: a STAC document is read from a local file or http(s), not {other}://",
            redact(text)
        )),
        None => {
            let path = std::path::absolute(text).map_err(|e| format!("{text:?}: {e}"))?;
            Url::from_file_path(&path).map_err(|()| format!("{text:?}: not a usable path"))
        }
    }
}

/// `url`, linked from a document read at `base`, unless it is a local
/// file and `base` is not: a document from a server never leads to this
/// machine's files (a local document may lead anywhere).
pub(super) fn not_local_from_remote(url: Url, base: &Url) -> Result<Url, String> {
    if url.scheme() == "file" && base.scheme() != "file" {
        return Err(format!(
            "{:?}: a document read from {} cannot lead to a local file",
            redact(url.as_str()),
            redact(base.as_str())
        ));
    }
    Ok(url)
}

/// The source of an asset: an absolute `href` as it is, a relative one
/// resolved against `base` (the item's `self` link, else where it was
/// read); `file://` URLs become local paths (only from a local document).
pub(super) fn resolve(href: &str, base: &Url) -> Result<String, String> {
    let absolute = super::super::scheme_of(href).is_some();
    if absolute && !href.starts_with("file:") {
        return Ok(href.to_owned());
    }
    let url = if absolute {
        Url::parse(href)
    } else {
        base.join(href)
    }
    .map_err(|e| format!("asset href {:?}: {e}", redact(href)))?;
    let url = not_local_from_remote(url, base).map_err(|m| format!("asset href {m}"))?;
    if url.scheme() == "file" {
        return url
            .to_file_path()
            .map(|p| p.display().to_string())
            .map_err(|()| format!("asset href {:?}: not a local path", redact(href)));
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_resolve_against_the_base() {
        let http = Url::parse("https://h/stac/items/a.json").unwrap();
        assert_eq!(
            resolve("b04.tif", &http).unwrap(),
            "https://h/stac/items/b04.tif"
        );
        assert_eq!(
            resolve("../x/b.tif", &http).unwrap(),
            "https://h/stac/x/b.tif"
        );
        assert_eq!(
            resolve("s3://bkt/k/b.tif", &http).unwrap(),
            "s3://bkt/k/b.tif"
        );
        let file = Url::from_file_path("/data/cat/item/item.json").unwrap();
        assert_eq!(
            resolve("./b04.tif", &file).unwrap(),
            "/data/cat/item/b04.tif"
        );
        assert_eq!(resolve("file:///d/b.tif", &file).unwrap(), "/d/b.tif");
        assert_eq!(
            resolve("https://h/b.tif?sig=1", &file).unwrap(),
            "https://h/b.tif?sig=1"
        );
        // A server's document never names this machine's files.
        let refused = resolve("file:///etc/passwd", &http).unwrap_err();
        assert!(refused.contains("cannot lead to a local file"), "{refused}");
    }

    #[test]
    fn a_request_is_shown_without_secrets() {
        let r = Request::get(Url::parse("https://u:p@h/search?token=abc").unwrap());
        assert!(!r.shown().contains("u:p"), "{}", r.shown());
        assert!(!r.shown().contains("abc"), "{}", r.shown());
    }
}
