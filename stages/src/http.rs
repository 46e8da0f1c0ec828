//! The HTTP client every stage and source that speaks HTTP builds the same
//! way (fetch, the STAC API source): timeouts, bounded redirects to
//! http(s) only, warpline's User-Agent.

use std::time::Duration;

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
