//! The HTTP client every stage and source that speaks HTTP builds the same
//! way (fetch, the STAC API source): timeouts, bounded redirects to
//! http(s) only, warpline's User-Agent; a `Retry-After` read; and how
//! their failures are classed for the retry policy (one rule for fetch,
//! window reads, the signer's token endpoint and STAC reads).

use std::time::Duration;

use warpline_engine::redact::redact_text;
use warpline_engine::StageError;

/// The HTTP client: timeouts, at most `max_redirects` redirects and only
/// to http(s), the User-Agent.
pub(crate) fn client(
    connect_timeout: Duration,
    timeout: Duration,
    max_redirects: usize,
    user_agent: Option<String>,
) -> reqwest::Result<reqwest::Client> {
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > max_redirects {
            attempt.error(format!("more than {max_redirects} redirects"))
        } else if !matches!(attempt.url().scheme(), "http" | "https") {
            let scheme = attempt.url().scheme().to_owned();
            attempt.error(format!("redirect to a {scheme} URL refused"))
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .timeout(timeout)
        .redirect(redirects)
        .user_agent(user_agent.unwrap_or_else(|| format!("warpline/{}", env!("CARGO_PKG_VERSION"))))
        .build()
}

/// An error with its sources, `a: b: c`.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether an answer's status is worth another try: 408, 429 and 5xx.
pub(crate) fn transient_status(status: reqwest::StatusCode) -> bool {
    let code = status.as_u16();
    code == 408 || code == 429 || status.is_server_error()
}

/// The error for an answer that is not a success, `message` saying it:
/// transient for [`transient_status`] (with the server's `Retry-After`),
/// permanent otherwise; the status kept for the host's gate.
pub(crate) fn status_error(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    message: String,
) -> StageError {
    let code = status.as_u16();
    if transient_status(status) {
        StageError::transient(message)
            .with_status(code)
            .with_retry_after(retry_after(headers))
    } else {
        StageError::permanent(message).with_status(code)
    }
}

/// A request that got no answer, `shown` naming what was asked (redacted):
/// a request that could not be built or redirected is permanent; an
/// unreachable host is down (its gate pauses every try to it); a timeout
/// or a reset is worth another try.
pub(crate) fn request_error(shown: &str, e: reqwest::Error) -> StageError {
    // Without the URL: it may hold credentials.
    let e = e.without_url();
    let detail = redact_text(&error_chain(&e));
    if e.is_builder() || e.is_redirect() {
        StageError::permanent(format!("{shown}: {detail}"))
    } else if e.is_connect() {
        StageError::transient(format!("{shown}: cannot connect: {detail}")).host_is_down()
    } else if e.is_timeout() {
        StageError::transient(format!("{shown}: timed out: {detail}"))
    } else {
        StageError::transient(format!("{shown}: {detail}"))
    }
}

/// The longest `Retry-After` obeyed: a server that asks for more (a date
/// in the year 9999) is waited for this long.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// `Retry-After` as seconds or an HTTP date, at most [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            reqwest::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(
            retry_after(&h),
            Some(Duration::ZERO),
            "a date in the past: no wait"
        );
        h.insert(reqwest::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
        // Far in the future, by either form: capped, never parked forever.
        h.insert(
            reqwest::header::RETRY_AFTER,
            "Fri, 31 Dec 9999 23:59:59 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        h.insert(reqwest::header::RETRY_AFTER, "99999999".parse().unwrap());
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
    }
}
