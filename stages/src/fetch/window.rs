//! `read = "window"`: an input is not downloaded; GDAL reads the bytes a
//! warp needs (a COG's header, then the tiles of the window and overview
//! level it warps from) through `/vsiwarpline/` (see `crate::gdal::vsi`),
//! each block a range request made here with fetch's own HTTP client
//! (its connections pool, timeouts, redirects and User-Agent), its rate
//! limiters, retries of transient failures, and URLs shown redacted.
//!
//! **Why a read cannot deadlock the runtime.** GDAL asks for bytes on the
//! thread of the blocking stage that opens or warps the raster: one of the
//! OS threads the engine gives each blocking worker (it runs the worker
//! loop with `Handle::block_on`, so a nested `block_on` there would panic).
//! The read spawns the request as a task on the runtime and waits for its
//! answer on a plain channel, blocking only that OS thread, exactly as a
//! long GDAL call does. The task needs nothing that thread holds: it runs
//! on the runtime's async workers (or, on a current-thread runtime, on the
//! thread in `Runtime::block_on`), and takes no `connections` permit (one
//! taken while the item holds its `memory` share would break the one
//! acquisition order) and no budget (the file's block cache,
//! [`CACHE_BYTES`](CACHE_BYTES), was charged by fetch): only
//! rate tokens, which are never held. Every request has the client's
//! `timeout`, a read makes at most [`TRIES`] of them, and the wait for the
//! task is bounded by the same sum, so a stalled server ends the read with
//! an error naming the input, never a hang; a runtime shutting down drops
//! the task and its sender, which ends the wait too.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use warpline_engine::report::redact;
use warpline_engine::{Limiter, LimiterKind, StageError};

use super::{Fetch, Fetched, Held};
use crate::provenance::Origin;
use crate::store;

use warpline_gdal::{RangeRead, RemoteFile, CACHE_BYTES};

/// How an input is read (fetch's `read`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Read {
    /// Every byte, before decode (the default).
    #[default]
    Whole,
    /// The bytes the warp needs, by range requests as it reads them.
    Window,
}

/// Requests per block read: the first and two retries of a transient
/// failure (a timeout, a reset, a body cut short, 408, 429, 5xx).
const TRIES: u32 = 3;

/// The longest wait before a retry (a `Retry-After` is obeyed up to this).
const MAX_WAIT: Duration = Duration::from_secs(10);

/// A remote object read by ranges.
pub(crate) struct RangeReader(Arc<Inner>);

/// Where the bytes come from.
pub(crate) enum Source {
    /// An http(s) URL, read with fetch's client, signed by its signer.
    Http {
        client: reqwest::Client,
        url: String,
        signer: Option<Arc<super::Signer>>,
    },
    /// An object in a store, read with the bucket's `object_store` client (ranged
    /// GetObject).
    S3 {
        store: Arc<dyn crate::store::Client>,
        path: object_store::path::Path,
    },
}

/// What a read's task needs (shared with it).
struct Inner {
    source: Source,
    shown: String,
    size: u64,
    runtime: tokio::runtime::Handle,
    /// Fetch's rate limiters, and the bucket key of this URL's host.
    rates: Vec<Limiter>,
    host: Option<String>,
    /// The client's whole-request timeout.
    timeout: Duration,
    failure: Mutex<Option<String>>,
}

/// What went wrong with one request: whether to try again, and why.
struct Failed {
    transient: bool,
    wait: Option<Duration>,
    message: String,
}

impl RangeReader {
    /// The object at `url` (`source`), of `size` bytes, read on this
    /// runtime; `limits` are fetch's (its rate limiters are used).
    pub(crate) fn new(
        source: Source,
        url: &str,
        size: u64,
        timeout: Duration,
        limits: &[Limiter],
    ) -> Self {
        RangeReader(Arc::new(Inner {
            source,
            shown: redact(url),
            size,
            rates: limits
                .iter()
                .filter(|l| l.kind() == LimiterKind::Rate)
                .cloned()
                .collect(),
            host: host_of(url),
            runtime: tokio::runtime::Handle::current(),
            timeout,
            failure: Mutex::new(None),
        }))
    }
}

impl Inner {
    /// Up to [`TRIES`] ranged GETs of `want` bytes from `offset`.
    async fn read(&self, offset: u64, want: usize) -> Result<Vec<u8>, String> {
        let mut buf = vec![0; want];
        let mut attempt = 1;
        loop {
            match self.get(offset, &mut buf).await {
                Ok(got) => {
                    buf.truncate(got);
                    return Ok(buf);
                }
                Err(f) if f.transient && attempt < TRIES => {
                    tokio::time::sleep(wait(attempt, f.wait)).await;
                    attempt += 1;
                }
                Err(f) => {
                    return Err(format!(
                        "{}: reading bytes {offset}-{} failed after {attempt} tries: {}",
                        self.shown,
                        offset + want as u64 - 1,
                        f.message
                    ))
                }
            }
        }
    }

    /// One ranged GET of `buf.len()` bytes from `offset`.
    async fn get(&self, offset: u64, buf: &mut [u8]) -> Result<usize, Failed> {
        for rate in &self.rates {
            rate.acquire(0, self.host.as_deref())
                .await
                .map_err(|e| Failed {
                    transient: true,
                    wait: None,
                    message: e.to_string(),
                })?;
        }
        match &self.source {
            Source::Http {
                client,
                url,
                signer,
            } => {
                self.get_http(client, url, signer.as_ref(), offset, buf)
                    .await
            }
            Source::S3 { store, path } => self.get_object(store, path, offset, buf).await,
        }
    }

    /// One ranged GET of an object in a store.
    async fn get_object(
        &self,
        store: &Arc<dyn crate::store::Client>,
        path: &object_store::path::Path,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, Failed> {
        use object_store::ObjectStoreExt;
        let range = offset..offset + buf.len() as u64;
        let bytes = store.get_range(path, range).await.map_err(|e| {
            let e = crate::store::stage_error(&self.shown, &e);
            Failed {
                transient: e.kind == warpline_engine::ErrorKind::Transient,
                wait: e.retry_after,
                message: e.message,
            }
        })?;
        if bytes.len() != buf.len() {
            return Err(Failed {
                transient: true,
                wait: None,
                message: format!("{} bytes of the {} asked for", bytes.len(), buf.len()),
            });
        }
        buf.copy_from_slice(&bytes);
        Ok(buf.len())
    }

    /// One HTTP range request.
    async fn get_http(
        &self,
        client: &reqwest::Client,
        url: &str,
        signer: Option<&Arc<super::Signer>>,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, Failed> {
        let last = offset + buf.len() as u64 - 1;
        let transient = |message: String| Failed {
            transient: true,
            wait: None,
            message,
        };
        let range = |url: &str| {
            client
                .get(url)
                .header(reqwest::header::RANGE, format!("bytes={offset}-{last}"))
        };
        let (mut response, _) = super::signer::send(signer, url, range).await.map_err(|e| {
            let e = e.stage_error(&self.shown, signer.map(|s| &**s));
            Failed {
                transient: e.kind == warpline_engine::ErrorKind::Transient,
                wait: None,
                message: e.message,
            }
        })?;
        let status = response.status();
        if status != reqwest::StatusCode::PARTIAL_CONTENT {
            return Err(Failed {
                transient: crate::http::transient_status(status),
                wait: crate::http::retry_after(response.headers()),
                message: if status.is_success() {
                    format!(
                        "HTTP {status} to a range request: the server does not serve byte ranges"
                    )
                } else {
                    format!("HTTP {status}")
                },
            });
        }
        let mut got = 0;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| transient(format!("body cut short after {got} bytes: {e}")))?
        {
            let end = got + chunk.len();
            if end > buf.len() {
                return Err(transient(format!(
                    "more than the {} bytes asked for",
                    buf.len()
                )));
            }
            buf[got..end].copy_from_slice(&chunk);
            got = end;
        }
        // Fewer bytes than asked for within the file (a body cut short
        // cleanly, a server that caps its ranges) is this input's failure,
        // tried again, not a short read GDAL would report without the URL.
        if got < buf.len() {
            return Err(transient(format!(
                "{got} bytes of the {} asked for",
                buf.len()
            )));
        }
        Ok(got)
    }
}

impl Fetch {
    /// An input GDAL will read by ranges: its size (HEAD, else a request
    /// for its first byte), and a file in `/vsiwarpline/` under its own
    /// safe name. Charged GDAL's cache for it, not its size.
    pub(super) async fn window(
        &self,
        id: &str,
        url: &str,
        held: &mut Held,
    ) -> Result<(Fetched, Origin), StageError> {
        let shown = redact(url);
        let head = |url: &str| self.client.head(url);
        let (response, sent) = self.send_signed(url, &shown, head).await?;
        let status = response.status();
        // A URL signed for GET alone (S3's presigned URLs) refuses HEAD;
        // a server may not say Accept-Ranges to HEAD, yet serve ranges.
        let size = match by_head(&response) {
            Some(size) => size,
            None if status.is_success() || matches!(status.as_u16(), 403 | 405 | 501) => {
                self.size_by_range(url, &shown).await?
            }
            None => return Err(self.status_error(&response, &sent, &shown)),
        };
        let mut origin = super::http_origin(&shown, response.headers());
        origin.size = Some(size);
        let source = Source::Http {
            client: self.client.clone(),
            url: url.to_owned(),
            signer: self.signer.clone(),
        };
        let fetched = self.remote(id, url, source, size, held).await?;
        Ok((fetched, origin))
    }

    /// The size a `Range: bytes=0-0` request's `Content-Range` says.
    async fn size_by_range(&self, url: &str, shown: &str) -> Result<u64, StageError> {
        let first = |url: &str| {
            self.client
                .get(url)
                .header(reqwest::header::RANGE, "bytes=0-0")
        };
        let response = self.signed(url, shown, first).await?;
        let status = response.status();
        let total = response
            .headers()
            .get(reqwest::header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit_once('/'))
            .and_then(|(_, total)| total.trim().parse::<u64>().ok())
            .filter(|n| *n > 0);
        match total {
            Some(size) if status == reqwest::StatusCode::PARTIAL_CONTENT => Ok(size),
            _ => Err(StageError::permanent(format!(
                "{shown}: the server does not serve byte ranges (HTTP {status} to a request \
                 for the first byte, no Content-Range with the size): read it with \
                 read = \"whole\""
            ))),
        }
    }

    /// An `s3://`, `az://` or `gs://` object GDAL will read by ranges (ranged GET): its
    /// size from the listing or a HEAD request.
    pub(super) async fn s3_window(
        &self,
        id: &str,
        source: &str,
        size_hint: Option<u64>,
        held: &mut Held,
    ) -> Result<(Fetched, Origin), StageError> {
        let url = store::ObjectUrl::parse(source).map_err(StageError::permanent)?;
        let store = self.stores.bucket(&url)?;
        let path = url.path()?;
        let mut origin = Origin {
            href: redact(source),
            ..Origin::default()
        };
        let size = match size_hint {
            Some(size) => size,
            None => {
                use object_store::ObjectStoreExt;
                let shown = url.to_string();
                let head = store.head(&path).await;
                let meta = head.map_err(|e| store::stage_error(&shown, &e))?;
                origin.etag = meta.e_tag;
                origin.modified = Some(crate::provenance::rfc3339(meta.last_modified.into()));
                meta.size
            }
        };
        origin.size = Some(size);
        let from = Source::S3 { store, path };
        let fetched = self.remote(id, source, from, size, held).await?;
        Ok((fetched, origin))
    }

    /// The input as a file of `/vsiwarpline/` under its own safe name,
    /// charged GDAL's cache for it.
    async fn remote(
        &self,
        id: &str,
        url: &str,
        source: Source,
        size: u64,
        held: &mut Held,
    ) -> Result<Fetched, StageError> {
        self.charge_to(id, held, CACHE_BYTES).await?;
        held.bytes += CACHE_BYTES;
        let reader = RangeReader::new(source, url, size, self.timeout, &self.limits);
        let name = crate::names::safe_file_name(crate::names::last_component(url));
        Ok(Fetched {
            remote: Some(RemoteFile::new(&name, std::sync::Arc::new(reader))),
            ..Fetched::default()
        })
    }
}

/// The wait before try `attempt + 1`: the server's `Retry-After`, else
/// 400 ms doubling, at most [`MAX_WAIT`].
fn wait(attempt: u32, asked: Option<Duration>) -> Duration {
    asked
        .unwrap_or(Duration::from_millis(200 << attempt))
        .min(MAX_WAIT)
}

impl RangeRead for RangeReader {
    fn size(&self) -> u64 {
        self.0.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, String> {
        let inner = &self.0;
        let left = inner.size.saturating_sub(offset);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        // After a read failed for good, the others of this try fail at
        // once (GDAL would go on asking for other blocks, each costing
        // every retry's timeout); taking the failure starts afresh.
        if let Some(failed) = inner
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(failed);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let task = Arc::clone(inner);
        let request = inner.runtime.spawn(async move {
            // The reader may have given up: nobody to tell then.
            let _ = tx.send(task.read(offset, want).await);
        });
        // Every try's timeout and every wait between tries, and a margin.
        let bound = (1..TRIES)
            .map(|a| wait(a, Some(MAX_WAIT)))
            .sum::<Duration>()
            + inner.timeout * TRIES
            + Duration::from_secs(5);
        let result = match rx.recv_timeout(bound) {
            Ok(read) => read.map(|bytes| {
                buf[..bytes.len()].copy_from_slice(&bytes);
                bytes.len()
            }),
            Err(e) => {
                // Given up on: its request (maybe still waiting for a
                // rate token) is not sent for nobody.
                request.abort();
                Err(format!("{}: no answer from the read: {e}", inner.shown))
            }
        };
        if let Err(message) = &result {
            // The first failure is the one to tell: GDAL may read on.
            let mut failure = inner.failure.lock().unwrap_or_else(|p| p.into_inner());
            failure.get_or_insert_with(|| message.clone());
        }
        result
    }

    fn take_failure(&self) -> Option<String> {
        self.0
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// The rate limiters' bucket key of `url`: its origin, as the engine keys
/// `per = "host"` buckets (`scheme://host:port`).
fn host_of(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let origin = url.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// The size a HEAD answer says, if it also says it serves byte ranges.
fn by_head(response: &reqwest::Response) -> Option<u64> {
    if !response.status().is_success() {
        return None;
    }
    let headers = response.headers();
    let ranges = headers
        .get(reqwest::header::ACCEPT_RANGES)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("bytes"));
    // From the header: reqwest's `content_length` is the (empty) body's.
    let size = headers
        .get(reqwest::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n > 0);
    size.filter(|_| ranges)
}
