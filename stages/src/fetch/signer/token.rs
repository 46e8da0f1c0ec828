//! Asking the token endpoint for a token: `GET` its URL, a JSON object
//! with the token and its expiry (an RFC 3339 time, or seconds since
//! 1970) in the fields the signer names; what goes wrong said without
//! quoting the answer, which holds the token.

use std::time::{Duration, SystemTime};

use super::{NoToken, Signer, Token, TOKEN_TRIES};
use crate::http::error_chain;

/// The largest answer read from the endpoint.
const ANSWER_BYTES: usize = 64 << 10;

/// The longest wait between requests for a token (a `Retry-After` is
/// obeyed up to this).
const MAX_WAIT: Duration = Duration::from_secs(30);

/// What one request for a token came to, when not a token.
struct Failed {
    message: String,
    /// Worth asking again (408, 429, 5xx, a lost connection, a token
    /// already expired).
    transient: bool,
    /// The endpoint's `Retry-After`.
    wait: Option<Duration>,
}

impl Failed {
    fn permanent(message: String) -> Self {
        Failed {
            message,
            transient: false,
            wait: None,
        }
    }
}

/// The wait before request `attempt + 1`: the endpoint's `Retry-After`,
/// else 0.5 s doubling, at most [`MAX_WAIT`].
fn wait(attempt: u32, asked: Option<Duration>) -> Duration {
    asked
        .unwrap_or(Duration::from_millis(250 << attempt.min(16)))
        .min(MAX_WAIT)
}

impl Signer {
    /// Up to [`TOKEN_TRIES`] requests for a token, waiting as asked between
    /// them: the token, or why not and how long before the endpoint is
    /// worth asking again.
    pub(super) async fn ask_until_answered(&self) -> Result<Token, (NoToken, Duration)> {
        let mut attempt = 1;
        loop {
            match self.ask().await {
                Ok(token) => {
                    tracing::debug!(
                        "a new token from {}, expiring {}",
                        self.shown,
                        crate::provenance::rfc3339(token.expiry)
                    );
                    return Ok(token);
                }
                Err(f) if f.transient && attempt < TOKEN_TRIES => {
                    tokio::time::sleep(wait(attempt, f.wait)).await;
                    attempt += 1;
                }
                Err(f) => {
                    let tries = if attempt == 1 {
                        String::new()
                    } else {
                        format!(" (after {attempt} tries)")
                    };
                    let failure = NoToken {
                        message: format!("no token from {}: {}{tries}", self.shown, f.message),
                        permanent: !f.transient,
                    };
                    return Err((failure, wait(attempt, f.wait)));
                }
            }
        }
    }

    /// One request for a token.
    async fn ask(&self) -> Result<Token, Failed> {
        let transient = |message| Failed {
            message,
            transient: true,
            wait: None,
        };
        let request = self
            .client
            .get(&self.url)
            .header(reqwest::header::ACCEPT, "application/json");
        let mut response = request
            .send()
            .await
            .map_err(|e| transient(error_chain(&e.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            return Err(Failed {
                message: format!("HTTP {status}"),
                transient: crate::http::transient_status(status),
                wait: crate::http::retry_after(response.headers()),
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| transient(format!("answer cut short: {}", error_chain(&e))))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > ANSWER_BYTES {
                return Err(Failed::permanent(format!(
                    "an answer of more than {ANSWER_BYTES} bytes"
                )));
            }
        }
        let token = self.read_answer(&body).map_err(Failed::permanent)?;
        let now = self.now();
        if token.expiry <= now {
            return Err(transient(format!(
                "the token handed out expired at {} (this machine's clock says {}: is it right?)",
                crate::provenance::rfc3339(token.expiry),
                crate::provenance::rfc3339(now)
            )));
        }
        Ok(token)
    }

    /// The token an answer holds, or what is wrong with it (never quoting
    /// it).
    pub(super) fn read_answer(&self, body: &[u8]) -> Result<Token, String> {
        let (tf, ef) = (&self.token_field, &self.expiry_field);
        let json: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
            format!(
                "the answer is not JSON (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        let query = json
            .get(tf)
            .and_then(|v| v.as_str())
            .map(|t| t.trim().trim_start_matches('?'))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("the answer has no `{tf}` (a string: `signer.token_field`)"))?;
        let expiry = match json.get(ef) {
            Some(serde_json::Value::String(text)) => chrono::DateTime::parse_from_rfc3339(text)
                .map(SystemTime::from)
                .map_err(|e| format!("the answer's `{ef}` is not an RFC 3339 time: {e}"))?,
            Some(serde_json::Value::Number(n)) => n
                .as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e11)
                .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(s))
                .ok_or_else(|| {
                    format!("the answer's `{ef}` is not a number of seconds since 1970")
                })?,
            _ => {
                return Err(format!(
                    "the answer has no `{ef}` (an RFC 3339 time or seconds since 1970: \
                     `signer.expiry_field`)"
                ))
            }
        };
        let names = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').map_or(p, |(n, _)| n).to_owned())
            .collect();
        // Renewed a tenth of its lifetime before it expires, or
        // `refresh_before`, whichever is less.
        let lifetime = expiry.duration_since(self.now()).unwrap_or_default();
        let margin = self.refresh_before.min(lifetime / 10);
        Ok(Token {
            query: query.to_owned(),
            names,
            expiry,
            renew_at: expiry - margin,
            refused: Default::default(),
        })
    }
}
