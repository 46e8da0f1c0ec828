//! The `fetch` stage (async): reads each input's bytes over HTTP(S) with
//! reqwest and rustls, from an object store (`s3://`, `az://`, `gs://`, see
//! [`crate::store`]), or from a local file.
//!
//! - An `s3://`, `az://` or `gs://` object is charged by its size (the listing's, else a HEAD
//!   request's) before its body is asked for; its errors are classed as
//!   HTTP's are (a wrong secret, a missing bucket or key fail at once).
//!
//! - Before reading a body it charges the `memory` limiter (if named) by
//!   the Content-Length and refuses bodies over `max_bytes`; when the length
//!   is unknown the charge grows with the body (doubling, from 1 MiB)
//!   before each chunk that would pass it, so no byte is read outside the
//!   budget, and the read stops at `max_bytes`. The charge travels with the
//!   item, resized by the stages that charge it again.
//! - Timeouts (connect, whole request), a bounded number of redirects (only
//!   to http or https), a body checked against its Content-Length.
//! - Errors are classed for the engine's retry policy: timeouts, resets,
//!   bodies cut short, 5xx and 429 are transient (with `Retry-After`, which
//!   also pauses the host's rate bucket); other 4xx fail the item at once
//!   with the URL and status. By default a fetch is tried 6 times, over
//!   7.75 to 15.5 s, so a short outage costs no item.
//! - `read = "window"`: an http(s) or object store input is not read here; GDAL
//!   reads the blocks the warp needs by range requests (see `window`).
//! - `signer`: URLs signed with a token from a token endpoint, renewed
//!   before it expires and when a storage says it has (see `signer`).

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use warpline_engine::limit::{LimitError, LimiterKind};
use warpline_engine::pipeline::RetryPolicy;
use warpline_engine::report::redact;
use warpline_engine::units::{HumanDuration, Size};
use warpline_engine::{
    AsyncStage, ErrorKind, Handler, Item, Limiter, Outcome, Payload, Problem, Settings, StageError,
    Ticket,
};

use crate::http::{error_chain, request_error};
use crate::provenance::{self, Origin};
use crate::store::{self, Stores};

mod signer;
mod window;

pub use signer::Clock;
use signer::{Signer, SignerSettings};
use window::Read;

pub use crate::payloads::{Fetched, Sibling};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchSettings {
    connect_timeout: Option<HumanDuration>,
    timeout: Option<HumanDuration>,
    max_redirects: Option<u32>,
    max_bytes: Option<Size>,
    memory: Option<String>,
    user_agent: Option<String>,
    endpoint: Option<String>,
    read: Option<Read>,
    signer: Option<SignerSettings>,
}

/// The fetch stage.
#[derive(Debug)]
pub struct Fetch {
    client: reqwest::Client,
    max_redirects: usize,
    max_bytes: u64,
    memory: Option<Limiter>,
    stores: Stores,
    read: Read,
    /// The stage's limiters (its rate limiters pace range reads too).
    limits: Vec<Limiter>,
    /// The whole-request timeout (bounds a range read's wait).
    timeout: Duration,
    /// The object store's endpoint, as set (recorded in provenance).
    endpoint: Option<String>,
    /// Signs http(s) URLs with a token, if set.
    signer: Option<std::sync::Arc<Signer>>,
}

const DEFAULT_MAX_BYTES: u64 = 256 << 20;

pub(crate) fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    build(s, signer::system_clock())
}

/// The `fetch` kind, its `signer` telling the time by `clock`: for a test
/// that plays time faster than it runs, with a token server on the same
/// clock (`warpline_testkit::sas`). Register it in place of the stock kind
/// (`registry.register_stage("fetch", factory_with_clock(clock))`).
pub fn factory_with_clock(
    clock: Clock,
) -> impl Fn(&Settings) -> Result<Handler, Vec<Problem>> + Send + Sync + 'static {
    move |s| build(s, std::sync::Arc::clone(&clock))
}

fn build(s: &Settings, clock: Clock) -> Result<Handler, Vec<Problem>> {
    let mut problems = Vec::new();
    let Some(f) = s.read::<FetchSettings>(&mut problems) else {
        return Err(problems);
    };
    if f.read == Some(Read::Window) {
        // GDAL runs only on blocking threads and here, at compile time:
        // the range-read file system is installed now, not on the runtime.
        warpline_gdal::vsi::install();
    }
    let connect_timeout = f.connect_timeout.map_or(Duration::from_secs(10), |d| d.0);
    let timeout = f.timeout.map_or(Duration::from_secs(60), |d| d.0);
    let max_bytes = f.max_bytes.map_or(DEFAULT_MAX_BYTES, |b| b.0);
    let memory = f.memory.as_deref().and_then(|name| {
        s.limiter("memory", name, LimiterKind::Bytes)
            .map_err(|p| problems.push(p))
            .ok()
    });
    if let Some(l) = s
        .stage_limits()
        .iter()
        .find(|l| l.kind() == LimiterKind::Bytes)
    {
        problems.push(s.problem(
            "limits",
            format!(
                "fetch learns a body's size only from the server: name the byte limiter in \
                 `memory = \"{}\"` instead, and fetch charges it by Content-Length",
                l.name()
            ),
        ));
    }
    let max_redirects = f.max_redirects.unwrap_or(5) as usize;
    let client = match crate::http::client(connect_timeout, timeout, max_redirects, f.user_agent) {
        Ok(c) => c,
        Err(e) => {
            problems.push(s.problem("", format!("cannot build the HTTP client: {e}")));
            return Err(problems);
        }
    };
    let signer = f
        .signer
        .and_then(|set| Signer::new(s, set, client.clone(), clock, &mut problems));
    if !problems.is_empty() {
        return Err(problems);
    }
    let endpoint = f.endpoint.clone();
    let stores = Stores::new(store::Config {
        endpoint: f.endpoint,
        connect_timeout: Some(connect_timeout),
        timeout: Some(timeout),
        // The engine's retry policy tries the item again.
        retries: 0,
    });
    Ok(Handler::from_async(Fetch {
        client,
        max_redirects,
        max_bytes,
        memory,
        stores,
        read: f.read.unwrap_or_default(),
        limits: s.stage_limits().to_vec(),
        timeout,
        endpoint,
        signer: signer.map(std::sync::Arc::new),
    }))
}

/// The first charge for a body of unknown length; it doubles from there.
const FIRST_UNKNOWN_CHARGE: u64 = 1 << 20;

impl Fetch {
    /// Makes the item's share of `memory` (if named) `bytes`: `held` is what
    /// this try charged so far.
    async fn charge(
        &self,
        id: &str,
        held: Option<Ticket>,
        bytes: u64,
    ) -> Result<Option<Ticket>, StageError> {
        let Some(memory) = &self.memory else {
            return Ok(None);
        };
        match memory.resize(held, bytes).await {
            Ok(ticket) => Ok(Some(ticket)),
            Err(e @ LimitError::OverBudget { .. }) => {
                Err(StageError::new(ErrorKind::OverBudget, format!("{id}: {e}")))
            }
            Err(e) => Err(StageError::transient(format!("{id}: {e}"))),
        }
    }

    /// The error for an answer that is not a success: transient for 408,
    /// 429 and 5xx (with the server's Retry-After), permanent otherwise;
    /// where a redirect led, and a redirect not followed, said.
    fn status_error(&self, response: &reqwest::Response, url: &str, shown: &str) -> StageError {
        let status = response.status();
        let mut message = format!("{shown}: HTTP {status}");
        if response.url().as_str() != url {
            // The answer came from where a redirect led: say where.
            let at = redact(response.url().as_str());
            message.push_str(&format!(" (from {at}, after a redirect)"));
        }
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(redact)
                .unwrap_or_default();
            message.push_str(&format!(
                ": redirect to {location:?} not followed (only http and https are, at most {} times)",
                self.max_redirects
            ));
        }
        crate::http::status_error(status, response.headers(), message)
    }

    async fn http(
        &self,
        id: &str,
        url: &str,
        held: &mut Held,
    ) -> Result<(Vec<u8>, Origin), StageError> {
        let shown = redact(url);
        let get = |url: &str| self.client.get(url);
        let mut response = self.signed(url, &shown, get).await?;
        let mut origin = http_origin(&shown, response.headers());
        let declared = response.content_length();
        if let Some(len) = declared {
            if len > self.max_bytes {
                return Err(StageError::permanent(format!(
                    "{shown}: body of {len} bytes is over max_bytes ({} bytes)",
                    self.max_bytes
                )));
            }
        }
        let mut charged = declared.unwrap_or(0);
        self.charge_to(id, held, charged).await?;
        let mut body = Vec::with_capacity(charged as usize);
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let need = (body.len() + chunk.len()) as u64;
                    if need > self.max_bytes {
                        return Err(StageError::permanent(format!(
                            "{shown}: body is over max_bytes ({} bytes)",
                            self.max_bytes
                        )));
                    }
                    if need > charged {
                        // Only a body longer than it said, or of unknown
                        // length: charge before holding more.
                        charged = (charged * 2)
                            .max(need)
                            .max(FIRST_UNKNOWN_CHARGE)
                            .min(self.max_bytes);
                        self.charge_to(id, held, charged).await?;
                        body.reserve_exact(charged as usize - body.len());
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(StageError::transient(format!(
                        "{shown}: body cut short after {} bytes: {}",
                        body.len(),
                        error_chain(&e)
                    )))
                }
            }
        }
        if let Some(len) = declared.filter(|len| *len != body.len() as u64) {
            return Err(StageError::transient(format!(
                "{shown}: body of {} bytes, but Content-Length said {len}",
                body.len()
            )));
        }
        // What the body holds, exactly (a body of unknown length was
        // charged by doubling).
        self.charge_to(id, held, body.len() as u64).await?;
        held.bytes += body.len() as u64;
        origin.size = Some(body.len() as u64);
        Ok((body, origin))
    }

    async fn s3(
        &self,
        id: &str,
        source: &str,
        size_hint: Option<u64>,
        held: &mut Held,
    ) -> Result<(Fetched, Origin), StageError> {
        let body = store::Body::locate(&self.stores, source, size_hint).await?;
        if body.size > self.max_bytes {
            return Err(StageError::permanent(format!(
                "{}: {} bytes is over max_bytes ({} bytes)",
                body.shown, body.size, self.max_bytes
            )));
        }
        // A listing refused for good (a policy that allows GetObject but
        // not ListBucket) reads no sibling, and says so; a transient error
        // fails the try, so a retry does not make other pixels silently.
        let siblings = match store::siblings(&self.stores, source).await {
            Ok(found) => found,
            Err(e) if e.kind == ErrorKind::Transient => return Err(e),
            Err(e) => {
                tracing::warn!("{}: siblings not read: {}", body.shown, e.message);
                Vec::new()
            }
        };
        let siblings: Vec<_> = siblings
            .into_iter()
            .filter(|(_, b)| b.size <= self.max_bytes)
            .collect();
        let total = body.size + siblings.iter().map(|(_, b)| b.size).sum::<u64>();
        self.charge_to(id, held, total).await?;
        let shown = body.shown.clone();
        let (bytes, etag, modified) = body.read_versioned().await?;
        let origin = Origin {
            href: redact(source),
            size: Some(bytes.len() as u64),
            etag,
            modified: modified.map(provenance::rfc3339),
        };
        let mut kept = Vec::with_capacity(siblings.len());
        for (suffix, sibling) in siblings {
            let at = sibling.shown.clone();
            let data = sibling.read().await?;
            if crate::siblings::acceptable(&suffix, &data, &at, &shown) {
                kept.push(Sibling {
                    suffix,
                    bytes: data,
                });
            }
        }
        held.bytes += total;
        let fetched = Fetched {
            bytes,
            siblings: kept,
            ..Fetched::default()
        };
        Ok((fetched, origin))
    }

    async fn file(
        &self,
        id: &str,
        source: &str,
        held: &mut Held,
    ) -> Result<(Fetched, Origin), StageError> {
        let Some(path) = crate::names::local_path(source) else {
            let shown = redact(source);
            return Err(StageError::permanent(format!(
                "{shown}: not a local file URL (file:///PATH)"
            )));
        };
        let shown = path.display().to_string();
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| StageError::permanent(format!("{shown}: {e}")))?;
        if !meta.is_file() {
            return Err(StageError::permanent(format!("{shown}: not a file")));
        }
        if meta.len() > self.max_bytes {
            return Err(StageError::permanent(format!(
                "{shown}: {} bytes is over max_bytes ({} bytes)",
                meta.len(),
                self.max_bytes
            )));
        }
        let found = crate::siblings::find(&path, self.max_bytes).await;
        let total = meta.len() + found.iter().map(|f| f.len()).sum::<u64>();
        self.charge_to(id, held, total).await?;
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| StageError::permanent(format!("{shown}: {e}")))?;
        let siblings = crate::siblings::read(&path, found).await;
        held.bytes += total;
        // An absolute path: the record is read later, from anywhere.
        let href = std::path::absolute(&path).map_or(shown, |p| p.display().to_string());
        let origin = Origin {
            href,
            size: Some(bytes.len() as u64),
            etag: None,
            modified: meta.modified().ok().map(provenance::rfc3339),
        };
        let fetched = Fetched {
            bytes,
            siblings,
            ..Fetched::default()
        };
        Ok((fetched, origin))
    }

    /// Makes the try's share `held.bytes + more` (what earlier parts hold,
    /// and this one so far): one ticket, resized.
    async fn charge_to(&self, id: &str, held: &mut Held, more: u64) -> Result<(), StageError> {
        held.ticket = self
            .charge(id, held.ticket.take(), held.bytes + more)
            .await?;
        Ok(())
    }

    /// One input: a URL, an `s3://` object or a local file (an archive's
    /// member is read by decode: fetch gets the archive).
    async fn one(
        &self,
        id: &str,
        line: &str,
        size_hint: Option<u64>,
        held: &mut Held,
    ) -> Result<(Fetched, Origin), StageError> {
        let source = crate::names::split_member(line).0;
        let http = source.starts_with("http://") || source.starts_with("https://");
        if http && self.read == Read::Window {
            self.window(id, source, held).await
        } else if http {
            let (bytes, origin) = self.http(id, source, held).await?;
            Ok((Fetched::new(bytes), origin))
        } else if store::is_store(source) && self.read == Read::Window {
            self.s3_window(id, source, size_hint, held).await
        } else if store::is_store(source) {
            self.s3(id, source, size_hint, held).await
        } else {
            self.file(id, source, held).await
        }
    }
}

impl Fetch {
    /// Records the inputs read and the settings that decide which bytes
    /// are read (see [`provenance`]).
    fn record(&self, item: &mut Item, origins: Vec<Origin>) {
        let origins = serde_json::to_value(origins).unwrap_or_default();
        item.meta.insert(provenance::INPUTS.to_owned(), origins);
        let mut settings = serde_json::Map::new();
        if let Some(endpoint) = &self.endpoint {
            settings.insert("endpoint".to_owned(), redact(endpoint).into());
        }
        if self.read == Read::Window {
            settings.insert("read".to_owned(), "window".into());
        }
        let settings = serde_json::Value::Object(settings);
        provenance::record_stage(item, "fetch", settings, serde_json::Map::new());
    }
}

/// An input's origin as an HTTP answer's headers say it (its size is the
/// body's, set once read).
pub(crate) fn http_origin(shown: &str, headers: &reqwest::header::HeaderMap) -> Origin {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    Origin {
        href: shown.to_owned(),
        size: None,
        etag: text(reqwest::header::ETAG),
        modified: text(reqwest::header::LAST_MODIFIED)
            .and_then(|d| httpdate::parse_http_date(&d).ok())
            .map(provenance::rfc3339),
    }
}

/// What one try has charged so far, over all the parts it fetched: one
/// ticket on the `memory` limiter, resized as parts arrive.
#[derive(Default)]
struct Held {
    ticket: Option<Ticket>,
    bytes: u64,
}

impl warpline_engine::Stage for Fetch {
    fn hands_on(&self) -> Payload {
        crate::payloads::fetched()
    }

    fn counts_requests(&self) -> bool {
        true
    }

    /// `plan` may read local files (to size what the stages after hold),
    /// never a URL or an object.
    fn dry_run(&self, item: &Item) -> bool {
        item.source.lines().all(|line| {
            let source = crate::names::split_member(line).0;
            !source.starts_with("http://")
                && !source.starts_with("https://")
                && !store::is_store(source)
                && crate::names::local_path(source).is_some()
        })
    }

    fn retry_default(&self) -> RetryPolicy {
        // Waits of 7.75 to 15.5 s in all: a server down for a few seconds
        // (a restart, a failover) costs no item.
        RetryPolicy::patient(6)
    }
}

#[async_trait]
impl AsyncStage for Fetch {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        // A retry starts afresh: give back what an earlier try charged.
        if let Some(m) = &self.memory {
            item.release(m.name());
        }
        let mut held = Held::default();
        let mut origins = Vec::new();
        let fetched = if item.source.contains('\n') {
            // A mosaic: its inputs, one per line, charged as they arrive.
            let mut parts = Vec::new();
            for line in item.source.lines() {
                let (part, origin) = self.one(&item.id, line, None, &mut held).await?;
                parts.push(part);
                origins.push(origin);
            }
            Fetched {
                parts,
                ..Fetched::default()
            }
        } else {
            let (fetched, origin) = self
                .one(&item.id, &item.source, item.size_hint, &mut held)
                .await?;
            origins.push(origin);
            fetched
        };
        self.record(item, origins);
        if let Some(ticket) = held.ticket {
            item.keep(ticket);
        }
        item.bytes_in += fetched.len();
        item.set_payload(fetched);
        Ok(Outcome::Continue)
    }
}
