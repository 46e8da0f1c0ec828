//! fetch's `signer`: URLs signed with a token from a token endpoint before
//! they are fetched, as Planetary Computer's data is read (its SAS
//! endpoint, `GET .../api/sas/v1/token/{collection}`, answers
//! `{"msft:expiry": "...", "token": "st=...&se=...&sig=..."}`, and the
//! token is the query of every signed URL).
//!
//! - One token for the stage, shared by its workers and its range reads:
//!   asked for when first needed, and again when it has expired or is about
//!   to (less than `refresh_before` left, at most a tenth of the lifetime
//!   it was handed out with), by one request at a time: about to expire, in
//!   the background while every caller goes on with the token that still
//!   holds; expired (or none yet), the callers wait for its answer.
//! - A `403` whose body says the signature expired (Azure's "Signature not
//!   valid in the specified time frame", S3's "Request has expired") gets a
//!   fresh token (one request for it, whoever else was refused with the same
//!   token) and the request is made once more, instead of failing the item.
//! - The endpoint's own `429`, `408`, `5xx` and lost connections are waited
//!   out in here (its `Retry-After`, else 0.5 s doubling), up to
//!   [`TOKEN_TRIES`] requests; then the items waiting fail as `transient`,
//!   and the endpoint is not asked again before that wait has passed.
//! - The token is a secret: URLs are shown as the inputs were given
//!   (redacted), the endpoint's answer is never quoted, and the `Debug`
//!   forms leave the token out.
//!
//! Time is told by a [`Clock`], the system's unless a test plays time
//! faster than it runs (`fetch::factory_with_clock`).

mod token;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use warpline_engine::report::redact;
use warpline_engine::units::HumanDuration;
use warpline_engine::{Problem, Settings, StageError};

use super::Fetch;

/// What tells a signer the time: the expiry of a token is a time of day.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The system's clock.
pub(super) fn system_clock() -> Clock {
    Arc::new(SystemTime::now)
}

/// Requests for a token before the items waiting for it fail.
pub(crate) const TOKEN_TRIES: u32 = 5;

/// How much of a `403` body is read to see whether it says the signature
/// expired.
const REFUSAL_BYTES: usize = 16 << 10;

/// fetch's `signer` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignerSettings {
    url: String,
    prefixes: Option<Vec<String>>,
    token_field: Option<String>,
    expiry_field: Option<String>,
    refresh_before: Option<HumanDuration>,
}

/// Signs the URLs of a fetch stage with the token its endpoint hands out.
pub(crate) struct Signer {
    /// The token endpoint, and as shown.
    url: String,
    shown: String,
    /// URLs signed: those that start with one of these (none: every
    /// http(s) URL).
    prefixes: Vec<String>,
    token_field: String,
    expiry_field: String,
    refresh_before: Duration,
    clock: Clock,
    client: reqwest::Client,
    /// The token in use.
    current: Mutex<Option<Arc<Token>>>,
    /// Held by the one caller (or background renewal) asking for a token.
    asking: Arc<tokio::sync::Mutex<LastFailure>>,
}

/// A token, and when to ask for the next.
pub(crate) struct Token {
    /// The token as a query (without `?`).
    query: String,
    /// Its parameters' names: a URL's own are replaced.
    names: Vec<String>,
    expiry: SystemTime,
    /// When it is about to expire: ask for the next from then.
    renew_at: SystemTime,
    /// A storage said it expired.
    refused: AtomicBool,
}

/// The last request for a token that failed, and until when the endpoint
/// is not asked again.
#[derive(Default)]
struct LastFailure(Option<(tokio::time::Instant, NoToken)>);

/// Why there is no token: said to the items that needed one.
#[derive(Debug, Clone)]
pub(crate) struct NoToken {
    pub(crate) message: String,
    /// The endpoint refused for good (404, 401, an answer without a
    /// token), not for now.
    pub(crate) permanent: bool,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("url", &self.shown)
            .field("prefixes", &self.prefixes)
            .field("refresh_before", &self.refresh_before)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// The signer `set` describes, with fetch's `client`; its mistakes
    /// added to `problems`, each at its key.
    pub(super) fn new(
        s: &Settings,
        set: SignerSettings,
        client: reqwest::Client,
        clock: Clock,
        problems: &mut Vec<Problem>,
    ) -> Option<Signer> {
        let before = problems.len();
        match url::Url::parse(&set.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            Ok(u) => problems.push(s.problem(
                "signer.url",
                format!(
                    "{:?}: a {} URL; the token endpoint must be http(s)",
                    redact(&set.url),
                    u.scheme()
                ),
            )),
            Err(e) => problems.push(s.problem(
                "signer.url",
                format!("{:?}: not a URL: {e}", redact(&set.url)),
            )),
        }
        let prefixes = set.prefixes.unwrap_or_default();
        for p in &prefixes {
            if !(p.starts_with("http://") || p.starts_with("https://"))
                || p.len() < "http://x".len()
            {
                problems.push(s.problem(
                    "signer.prefixes",
                    format!(
                        "{:?}: a prefix of the URLs to sign starts with http:// or https:// and \
                         names a host",
                        redact(p)
                    ),
                ));
            }
        }
        for (key, field) in [
            ("signer.token_field", &set.token_field),
            ("signer.expiry_field", &set.expiry_field),
        ] {
            if field.as_deref().is_some_and(|f| f.trim().is_empty()) {
                problems.push(s.problem(key, "empty: name the field of the endpoint's answer"));
            }
        }
        if problems.len() > before {
            return None;
        }
        Some(Signer {
            shown: redact(&set.url),
            url: set.url,
            prefixes,
            token_field: set.token_field.unwrap_or_else(|| "token".to_owned()),
            expiry_field: set.expiry_field.unwrap_or_else(|| "msft:expiry".to_owned()),
            refresh_before: set.refresh_before.map_or(Duration::from_secs(60), |d| d.0),
            clock,
            client,
            current: Mutex::new(None),
            asking: Arc::new(tokio::sync::Mutex::new(LastFailure::default())),
        })
    }

    /// Whether `url` is signed.
    pub(crate) fn signs(&self, url: &str) -> bool {
        let http = url.starts_with("http://") || url.starts_with("https://");
        http && (self.prefixes.is_empty() || self.prefixes.iter().any(|p| url.starts_with(p)))
    }

    /// The token endpoint, as shown.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    fn now(&self) -> SystemTime {
        (self.clock)()
    }

    fn current(&self) -> Option<Arc<Token>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A token to sign with: the one in use while it is not about to
    /// expire. One about to expire that still holds is renewed in the
    /// background (one renewal at a time) while every caller goes on with
    /// it: no item waits for the endpoint. An expired one (or none) is
    /// renewed by one caller at a time, the others waiting for its answer.
    pub(crate) async fn token(self: &Arc<Self>) -> Result<Arc<Token>, NoToken> {
        let held = self.current();
        if let Some(t) = &held {
            let now = self.now();
            if t.fresh(now) {
                return Ok(Arc::clone(t));
            }
            if t.holds(now) {
                if let Ok(mut last) = Arc::clone(&self.asking).try_lock_owned() {
                    let signer = Arc::clone(self);
                    tokio::spawn(async move {
                        // A failure stays in `last` for the callers that
                        // find the token expired.
                        let _ = signer.renewed(&mut last).await;
                    });
                }
                return Ok(Arc::clone(t));
            }
        }
        let mut last = self.asking.lock().await;
        self.renewed(&mut last).await
    }

    /// A token after `refused` was refused as expired by a storage: the
    /// one in use if a newer one came meanwhile, else a new one.
    pub(crate) async fn renew(&self, refused: &Token) -> Result<Arc<Token>, NoToken> {
        refused.refused.store(true, Ordering::SeqCst);
        let mut last = self.asking.lock().await;
        self.renewed(&mut last).await
    }

    /// With the right to ask held: the token in use if it is fresh (asked
    /// for while this caller waited), else the last failure while it
    /// stands, else a new token from the endpoint.
    async fn renewed(&self, last: &mut LastFailure) -> Result<Arc<Token>, NoToken> {
        if let Some(t) = self.current().filter(|t| t.fresh(self.now())) {
            return Ok(t);
        }
        if let Some((until, failure)) = &last.0 {
            if tokio::time::Instant::now() < *until {
                return Err(failure.clone());
            }
        }
        match self.ask_until_answered().await {
            Ok(token) => {
                last.0 = None;
                let token = Arc::new(token);
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&token));
                Ok(token)
            }
            Err((failure, wait)) => {
                last.0 = Some((tokio::time::Instant::now() + wait, failure.clone()));
                Err(failure)
            }
        }
    }
}

impl Token {
    /// Not about to expire at `now`, nor refused.
    fn fresh(&self, now: SystemTime) -> bool {
        now < self.renew_at && !self.refused.load(Ordering::SeqCst)
    }

    /// Not expired at `now`, nor refused.
    fn holds(&self, now: SystemTime) -> bool {
        now < self.expiry && !self.refused.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("names", &self.names)
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

/// `url` signed with `token`: its query's parameters that the token also
/// has replaced by the token's (an expired signature of its own, too),
/// the rest kept as written; the fragment kept.
pub(crate) fn sign(url: &str, token: &Token) -> String {
    let (rest, fragment) = match url.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (url, None),
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut signed = format!("{path}?");
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let name = param.split_once('=').map_or(param, |(n, _)| n);
        if !token.names.iter().any(|t| t == name) {
            signed.push_str(param);
            signed.push('&');
        }
    }
    signed.push_str(&token.query);
    if let Some(fragment) = fragment {
        signed.push('#');
        signed.push_str(fragment);
    }
    signed
}

/// Whether a `403` body says the signature expired: Azure's
/// `AuthenticationFailed` "Signature not valid in the specified time
/// frame", S3's "Request has expired", or any other that says "expired".
pub(crate) fn says_expired(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    body.contains("expired") || body.contains("not valid in the specified time frame")
}

/// Why a signed request has no answer to give.
#[derive(Debug)]
pub(crate) enum Unsent {
    /// No token to sign it with.
    NoToken(NoToken),
    /// The request failed (not the answer).
    Request(reqwest::Error),
    /// Refused as expired, and again with a fresh token.
    StillExpired,
}

/// The answer to the request `build` makes of `url`, signed when `signer`
/// signs it, and the URL it was sent to. A `403` that says the signature
/// expired is made once more with a fresh token; any other answer is
/// given back as it is (a `403` with its body read in part).
pub(crate) async fn send(
    signer: Option<&Arc<Signer>>,
    url: &str,
    build: impl Fn(&str) -> reqwest::RequestBuilder,
) -> Result<(reqwest::Response, String), Unsent> {
    let Some(signer) = signer.filter(|s| s.signs(url)) else {
        let response = build(url).send().await.map_err(Unsent::Request)?;
        return Ok((response, url.to_owned()));
    };
    let token = signer.token().await.map_err(Unsent::NoToken)?;
    let signed = sign(url, &token);
    let mut response = build(&signed).send().await.map_err(Unsent::Request)?;
    if !refused_as_expired(&mut response).await {
        return Ok((response, signed));
    }
    tracing::debug!(
        "{}: the signature expired; a new token from {}",
        redact(url),
        signer.shown()
    );
    let token = signer.renew(&token).await.map_err(Unsent::NoToken)?;
    let signed = sign(url, &token);
    let mut response = build(&signed).send().await.map_err(Unsent::Request)?;
    if refused_as_expired(&mut response).await {
        return Err(Unsent::StillExpired);
    }
    Ok((response, signed))
}

/// Whether `response` is a `403` that says the signature expired (its
/// body read, in part, to see).
async fn refused_as_expired(response: &mut reqwest::Response) -> bool {
    if response.status() != reqwest::StatusCode::FORBIDDEN {
        return false;
    }
    let mut body = Vec::new();
    while body.len() < REFUSAL_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    says_expired(&String::from_utf8_lossy(&body))
}

impl Unsent {
    /// The item's error, for the input shown as `shown`.
    pub(crate) fn stage_error(self, shown: &str, signer: Option<&Signer>) -> StageError {
        match self {
            Unsent::NoToken(e) if e.permanent => {
                StageError::permanent(format!("{shown}: {}", e.message))
            }
            Unsent::NoToken(e) => StageError::transient(format!("{shown}: {}", e.message)),
            Unsent::Request(e) => super::request_error(shown, e),
            Unsent::StillExpired => StageError::permanent(format!(
                "{shown}: HTTP 403 Forbidden: the signature expired, and again with a new \
                 token from {}: is this machine's clock right?",
                signer.map_or("the signer", Signer::shown)
            ))
            .with_status(403),
        }
    }
}

impl Fetch {
    /// The answer to `build`'s request of `url` (shown as `shown`), signed
    /// by the stage's signer if it signs `url` (see [`send`]), and the URL
    /// it was sent to.
    pub(super) async fn send_signed(
        &self,
        url: &str,
        shown: &str,
        build: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<(reqwest::Response, String), StageError> {
        let signer = self.signer.as_ref();
        send(signer, url, build)
            .await
            .map_err(|e| e.stage_error(shown, signer.map(|s| &**s)))
    }

    /// As [`send_signed`](Self::send_signed), for an answer that must be
    /// a success: the error for any other.
    pub(super) async fn signed(
        &self,
        url: &str,
        shown: &str,
        build: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, StageError> {
        let (response, sent) = self.send_signed(url, shown, build).await?;
        if !response.status().is_success() {
            return Err(self.status_error(&response, &sent, shown));
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests;
