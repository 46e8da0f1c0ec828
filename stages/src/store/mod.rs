//! Object stores as inputs and outputs: `s3://BUCKET/KEY` on Amazon S3 or
//! an S3-compatible server, through the `object_store` crate (SigV4
//! signing, paginated listings, multipart uploads).
//!
//! - `S3Url`: an object's address;
//! - `Stores`: one client per bucket, made from the environment's
//!   credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`, ...; then the
//!   profile of the AWS shared files, see `profile`; then the
//!   container or instance metadata where `object_store` supports them) and
//!   an optional `endpoint` setting; an `http://` endpoint on a loopback
//!   address is allowed without `AWS_ALLOW_HTTP`;
//! - `stage_error`: an `object_store` error as a stage error, classed for
//!   the retry policy as fetch classes HTTP errors, its text redacted;
//! - `list`: the `glob` source over a listing; `get`: fetch's reads;
//!   `put`: write's uploads.
//!
//! Secrets are never in a message: requests are signed in headers, and
//! every message passes through [`redact_text`].

mod get;
mod journal;
mod list;
mod profile;
mod put;
mod siblings;
#[cfg(test)]
mod testing;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{ClientConfigKey, HttpError, HttpErrorKind};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, RetryConfig};
use warpline_engine::redact::redact_text;
#[cfg(test)]
use warpline_engine::ErrorKind;
use warpline_engine::StageError;

pub(crate) use get::Body;
pub(crate) use journal::default_staging;
pub(crate) use list::glob_source;
pub(crate) use put::Output;
pub(crate) use siblings::siblings;

/// Whether an input or output names an object in S3.
pub(crate) fn is_s3(text: &str) -> bool {
    text.starts_with("s3://")
}

/// An object's address, `s3://BUCKET/KEY`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Url {
    pub(crate) bucket: String,
    pub(crate) key: String,
}

impl S3Url {
    /// Parses `s3://BUCKET/KEY` (the key may be empty: a bucket or prefix).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let rest = text
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{text:?} is not an s3:// URL"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !bucket_ok {
            return Err(format!(
                "{:?}: {bucket:?} is not a bucket name (3 to 63 lower-case letters, digits, `-`, `.`)",
                redact_text(text)
            ));
        }
        if key.contains(['?', '#']) {
            return Err(format!(
                "{:?}: an s3:// URL has no query or fragment",
                redact_text(text)
            ));
        }
        Ok(S3Url {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }

    /// The key as `object_store` names it.
    pub(crate) fn path(&self) -> Result<ObjectPath, StageError> {
        ObjectPath::parse(&self.key)
            .map_err(|e| StageError::permanent(format!("{self}: not an object key: {e}")))
    }
}

impl std::fmt::Display for S3Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// How the clients of a stage talk to the store.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    /// The server (`endpoint` setting); else `AWS_ENDPOINT_URL`, else AWS.
    pub(crate) endpoint: Option<String>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    /// `object_store`'s own tries again: 0 where the engine's retry policy
    /// tries the item again (fetch), a few where nothing else would (a part
    /// of an upload, a page of a listing).
    pub(crate) retries: usize,
}

/// One client per bucket, made when the bucket is first met.
#[derive(Debug, Default)]
pub(crate) struct Stores {
    config: Config,
    by_bucket: Mutex<HashMap<String, Arc<AmazonS3>>>,
}

impl Stores {
    pub(crate) fn new(config: Config) -> Self {
        Stores {
            config,
            by_bucket: Mutex::new(HashMap::new()),
        }
    }

    /// The client of `bucket`.
    pub(crate) fn bucket(&self, bucket: &str) -> Result<Arc<AmazonS3>, StageError> {
        // A poisoned map is still a valid map: a panic cannot leave it half
        // changed (one insert).
        let mut map = self.by_bucket.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = map.get(bucket) {
            return Ok(Arc::clone(store));
        }
        let store = Arc::new(build(&self.config, bucket).map_err(|m| {
            StageError::permanent(format!("s3://{bucket}: cannot make an S3 client: {m}"))
        })?);
        map.insert(bucket.to_owned(), Arc::clone(&store));
        Ok(store)
    }
}

/// Whether `endpoint` is plain HTTP to this machine.
fn loopback_http(endpoint: &str) -> bool {
    let Ok(url) = url::Url::parse(endpoint) else {
        return false;
    };
    url.scheme() == "http"
        && match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            None => false,
        }
}

fn build(config: &Config, bucket: &str) -> Result<AmazonS3, String> {
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    b = with_profile(b)?;
    if let Some(endpoint) = &config.endpoint {
        b = b.with_endpoint(endpoint);
    }
    if b.get_config_value(&AmazonS3ConfigKey::Endpoint)
        .is_some_and(|e| loopback_http(&e))
    {
        b = b.with_allow_http(true);
    }
    let millis = |d: Duration| format!("{}ms", d.as_millis());
    if let Some(t) = config.connect_timeout {
        b = b.with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            millis(t),
        );
    }
    if let Some(t) = config.timeout {
        b = b.with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            millis(t),
        );
    }
    b = b.with_retry(RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: config.retries,
        retry_timeout: Duration::from_secs(60),
    });
    b.build().map_err(|e| redact_text(&e.to_string()))
}

/// What the AWS shared files' profile sets and the environment does not.
fn with_profile(mut b: AmazonS3Builder) -> Result<AmazonS3Builder, String> {
    let Some(p) = profile::load(|k| std::env::var(k).ok())? else {
        return Ok(b);
    };
    let unset = |b: &AmazonS3Builder, key| b.get_config_value(&key).is_none();
    if unset(&b, AmazonS3ConfigKey::AccessKeyId) {
        if let (Some(key), Some(secret)) = (p.access_key_id, p.secret_access_key) {
            b = b.with_access_key_id(key).with_secret_access_key(secret);
            if let Some(token) = p.session_token {
                b = b.with_token(token);
            }
        }
    }
    if let Some(region) = p.region.filter(|_| unset(&b, AmazonS3ConfigKey::Region)) {
        b = b.with_region(region);
    }
    if let Some(e) = p
        .endpoint_url
        .filter(|_| unset(&b, AmazonS3ConfigKey::Endpoint))
    {
        b = b.with_endpoint(e);
    }
    Ok(b)
}

/// The error's text and its causes', redacted.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    redact_text(&text)
}

/// The S3 error code in a server's answer (`<Code>NoSuchBucket</Code>`).
fn s3_code(text: &str) -> Option<&str> {
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(&text[start..start + len])
}

/// The metadata services `object_store` asks for credentials when the
/// environment has none: an instance's (IMDS) and a container's (ECS).
const METADATA: &[&str] = &["169.254.169.254", "169.254.170.2"];

/// The HTTP status a failed request was answered with, from its text
/// (`object_store` does not expose it).
fn status_in(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

/// The transport failure under `e`, if it is one.
fn transport(e: &(dyn std::error::Error + 'static)) -> Option<HttpErrorKind> {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        if let Some(h) = err.downcast_ref::<HttpError>() {
            return Some(h.kind());
        }
        at = err.source();
    }
    None
}

/// An `object_store` error for the object or prefix `shown`
/// (`s3://BUCKET/KEY`), classed as fetch classes HTTP errors: 404, 403 and
/// 401 (a wrong secret, a missing bucket or key) fail at once, naming the
/// bucket and key; 5xx, 429, 408, timeouts and lost connections are tried
/// again.
pub(crate) fn stage_error(shown: &str, e: &object_store::Error) -> StageError {
    use object_store::Error as E;
    let detail = chain(e);
    let code = s3_code(&detail)
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    let bucket = shown
        .strip_prefix("s3://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or(shown);
    if METADATA.iter().any(|m| detail.contains(m)) {
        // No credentials in the environment, and the machine's metadata
        // service (an instance's, a container's) gave none either.
        return StageError::permanent(format!(
            "{shown}: no credentials for bucket {bucket:?}: set AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, a profile in ~/.aws/credentials (AWS_PROFILE) or a web \
             identity token; the metadata service gave none: {detail}"
        ));
    }
    let status = match e {
        E::NotFound { .. } => Some(404),
        E::PermissionDenied { .. } => Some(403),
        E::Unauthenticated { .. } => Some(401),
        _ => status_in(&detail),
    };
    let message = match status {
        Some(404) => {
            format!("{shown}: not found{code}: no such key in bucket {bucket:?}, or no such bucket")
        }
        Some(s @ (401 | 403)) => format!(
            "{shown}: access denied to bucket {bucket:?} (HTTP {s}){code}: check the credentials \
             (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) and the bucket's policy"
        ),
        Some(s) => format!("{shown}: HTTP {s}{code}: {detail}"),
        None => format!("{shown}: {detail}"),
    };
    if let Some(s) = status {
        let again = s >= 500 || s == 429 || s == 408;
        let error = if again {
            StageError::transient(message)
        } else {
            StageError::permanent(message)
        };
        return error.with_status(s);
    }
    match (e, transport(e)) {
        (_, Some(HttpErrorKind::Connect)) => {
            StageError::transient(format!("{shown}: cannot connect: {detail}")).host_is_down()
        }
        (_, Some(HttpErrorKind::Timeout)) => {
            StageError::transient(format!("{shown}: timed out: {detail}"))
        }
        (E::Generic { .. }, Some(_)) => StageError::transient(message),
        _ => StageError::permanent(message),
    }
}

/// The runtime every upload runs on: write's workers are OS threads, not
/// tasks, and its clients stay on one runtime (their connections live
/// there). Made once, never dropped.
fn runtime() -> Result<&'static tokio::runtime::Runtime, StageError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("warpline-s3")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| StageError::transient(format!("cannot start the S3 upload runtime: {e}")))
}

/// Runs `work` on the upload runtime and waits for it, from any thread: a
/// write worker, or a task of the run's own runtime (the `exists` check at
/// admission runs in the first stage's worker), which is not this one. On
/// a multi-threaded runtime the wait tells it to move its other tasks off
/// this thread meanwhile.
pub(crate) fn block_on<T: Send + 'static>(
    work: impl Future<Output = Result<T, StageError>> + Send + 'static,
) -> Result<T, StageError> {
    let (tx, rx) = std::sync::mpsc::channel();
    runtime()?.spawn(async move {
        let _ = tx.send(work.await);
    });
    let wait = || {
        rx.recv()
            .unwrap_or_else(|_| Err(StageError::permanent("an S3 request panicked")))
    };
    let on_many_threads = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_many_threads {
        tokio::task::block_in_place(wait)
    } else {
        wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let u = S3Url::parse("s3://my-bucket/a/b.tif").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.key.as_str()),
            ("my-bucket", "a/b.tif")
        );
        assert_eq!(u.to_string(), "s3://my-bucket/a/b.tif");
        assert_eq!(S3Url::parse("s3://bkt").unwrap().key, "");
        assert!(S3Url::parse("s3://Bad_Bucket/a").is_err());
        assert!(S3Url::parse("s3://bkt/a.tif?x=1").is_err());
        assert!(S3Url::parse("https://bkt/a").is_err());
    }

    #[test]
    fn errors_are_read() {
        assert_eq!(
            s3_code("x <Error><Code>NoSuchBucket</Code></Error>"),
            Some("NoSuchBucket")
        );
        assert_eq!(
            status_in("Server returned non-2xx status code: 503 Service"),
            Some(503)
        );
        assert!(loopback_http("http://127.0.0.1:9000"));
        assert!(loopback_http("http://localhost:9000"));
        assert!(!loopback_http("http://example.com"));
        assert!(!loopback_http("https://127.0.0.1:9000"));
    }

    /// What a server answers is classed as fetch classes HTTP answers:
    /// 503 and 500 are tried again (with the status, so a 503 pauses the
    /// bucket's gate), 403 and 404 are not.
    #[test]
    fn answers_are_classed_for_the_retry_policy() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            for (status, code, kind, number) in [
                ("503 Slow Down", "SlowDown", ErrorKind::Transient, 503),
                (
                    "500 Internal Server Error",
                    "InternalError",
                    ErrorKind::Transient,
                    500,
                ),
                ("403 Forbidden", "AccessDenied", ErrorKind::Permanent, 403),
                ("404 Not Found", "NoSuchBucket", ErrorKind::Permanent, 404),
            ] {
                let endpoint = testing::refusing_server(status, code).await;
                let server = testing::Server {
                    endpoint,
                    bucket: "bkt".to_owned(),
                };
                let stores = Stores::default();
                stores
                    .by_bucket
                    .lock()
                    .unwrap()
                    // As fetch's: the engine tries again, not the client.
                    .insert("bkt".to_owned(), server.client_trying(&server.endpoint, 0));
                // The listed size skips the HEAD: the GET is answered.
                let e = get::Body::locate(&stores, "s3://bkt/a.tif", Some(1))
                    .await
                    .unwrap()
                    .read()
                    .await
                    .unwrap_err();
                assert_eq!((e.kind, e.status), (kind, Some(number)), "{}", e.message);
                assert!(e.message.starts_with("s3://bkt/a.tif: "), "{}", e.message);
                if number != 404 && number != 403 {
                    assert!(e.message.contains(code), "{}", e.message);
                }
            }
        });
    }
}
