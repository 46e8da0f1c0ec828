//! Object stores as inputs and outputs, through the `object_store` crate
//! (signing, paginated listings, multipart uploads): `s3://BUCKET/KEY` on
//! Amazon S3 or an S3-compatible server, `az://CONTAINER/BLOB` on Azure
//! Blob Storage or Azurite, `gs://BUCKET/OBJECT` on Google Cloud Storage
//! or fake-gcs-server (read only: see `Scheme::writes`). Every path
//! below is the same for all three but the client's making (`clients`)
//! and the words of messages (`Scheme`).
//!
//! - `ObjectUrl`: an object's address;
//! - `Stores`: one client per bucket (container), made from the
//!   environment's credentials and an optional `endpoint` setting. S3:
//!   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//!   `AWS_REGION`, `AWS_ENDPOINT_URL`, ...; then the profile of the AWS
//!   shared files, see `profile`; then the container or instance metadata
//!   where `object_store` supports them. Azure: what
//!   `MicrosoftAzureBuilder::from_env` reads (`AZURE_STORAGE_ACCOUNT_NAME`,
//!   `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_KEY`,
//!   `AZURE_STORAGE_ENDPOINT`, `AZURE_STORAGE_USE_EMULATOR` with
//!   `AZURITE_BLOB_STORAGE_URL`, the client secret or managed identity).
//!   GCS: what `GoogleCloudStorageBuilder::from_env` reads
//!   (`GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_SERVICE_ACCOUNT_KEY`,
//!   `GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_BASE_URL`), then gcloud's
//!   application default credentials file, then the instance metadata.
//!   An `http://` endpoint on a loopback address is allowed without
//!   `AWS_ALLOW_HTTP` / `AZURE_ALLOW_HTTP` / `GOOGLE_ALLOW_HTTP`;
//! - `stage_error`: an `object_store` error as a stage error, classed for
//!   the retry policy as fetch classes HTTP errors, its text redacted;
//! - `list`: the `glob` source over a listing; `get`: fetch's reads;
//!   `put`: write's uploads; `create`: completing one only if no object
//!   has its name; [`Prefix`]: a prefix listed and copied out, for
//!   `warpline verify`.
//!
//! Secrets are never in a message: requests are signed in headers, and
//! every message passes through [`redact_text`] (which also hides a
//! service account key quoted in one).

mod address;
mod clients;
mod create;
mod get;
mod journal;
mod list;
mod parts;
mod prefix;
mod profile;
mod put;
mod siblings;
mod small;
#[cfg(test)]
mod testing;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use object_store::client::{HttpError, HttpErrorKind};
use object_store::multipart::MultipartStore;
use object_store::ObjectStore;
use warpline_engine::redact::redact_text;
#[cfg(test)]
use warpline_engine::ErrorKind;
use warpline_engine::StageError;

pub(crate) use address::{is_store, ObjectUrl, Scheme};
pub(crate) use clients::endpoint_of;
pub(crate) use create::{Put, Uploaded};
pub(crate) use get::Body;
pub(crate) use journal::default_staging;
pub(crate) use list::glob_source;
pub use prefix::{is_store_url, Prefix};
pub(crate) use put::Output;
pub(crate) use siblings::siblings;

/// A client of one bucket: reads, listings and multipart uploads.
pub(crate) trait Client: ObjectStore + MultipartStore {}

impl<T: ObjectStore + MultipartStore> Client for T {}

/// How the clients of a stage talk to the store.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    /// The server (`endpoint` setting); else `AWS_ENDPOINT_URL` or
    /// `AZURE_STORAGE_ENDPOINT`, else the cloud's.
    pub(crate) endpoint: Option<String>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    /// `object_store`'s own tries again: 0 where the engine's retry policy
    /// tries the item again (fetch), a few where nothing else would (a part
    /// of an upload, a page of a listing).
    pub(crate) retries: usize,
}

/// The clients of each bucket, by scheme and bucket.
type Clients = Mutex<HashMap<(Scheme, String), Arc<dyn Client>>>;

/// How a client of a bucket is made (see `clients`).
type Build = fn(&Config, &ObjectUrl) -> Result<Arc<dyn Client>, String>;

/// One client per bucket, made when the bucket is first met; and one that
/// completes uploads only if no object has the name, for the buckets
/// written with `Put::Create`.
#[derive(Debug, Default)]
pub(crate) struct Stores {
    config: Config,
    by_bucket: Clients,
    creating: Clients,
}

impl Stores {
    pub(crate) fn new(config: Config) -> Self {
        Stores {
            config,
            by_bucket: Mutex::new(HashMap::new()),
            creating: Mutex::new(HashMap::new()),
        }
    }

    /// The client of `url`'s bucket.
    pub(crate) fn bucket(&self, url: &ObjectUrl) -> Result<Arc<dyn Client>, StageError> {
        self.client(&self.by_bucket, url, clients::build)
    }

    /// The client of `url`'s bucket that completes an upload only if no
    /// object has its name (see [`create`]).
    pub(crate) fn creating(&self, url: &ObjectUrl) -> Result<Arc<dyn Client>, StageError> {
        self.client(&self.creating, url, clients::build_creating)
    }

    /// The client of `url`'s bucket in `clients`, made by `build` when the
    /// bucket is first met.
    fn client(
        &self,
        clients: &Clients,
        url: &ObjectUrl,
        build: Build,
    ) -> Result<Arc<dyn Client>, StageError> {
        let key = (url.scheme, url.bucket.clone());
        // A poisoned map is still a valid map: a panic cannot leave it half
        // changed (one insert).
        let mut map = clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = map.get(&key) {
            return Ok(Arc::clone(store));
        }
        let store = build(&self.config, url).map_err(|m| {
            StageError::permanent(format!(
                "{}{}: cannot make a client: {m}",
                url.scheme.prefix(),
                url.bucket
            ))
        })?;
        map.insert(key, Arc::clone(&store));
        Ok(store)
    }

    /// Uses `client` for `bucket` (tests: a client with test credentials).
    #[cfg(test)]
    pub(crate) fn insert(&self, scheme: Scheme, bucket: &str, client: Arc<dyn Client>) {
        let mut map = self.by_bucket.lock().unwrap_or_else(|p| p.into_inner());
        map.insert((scheme, bucket.to_owned()), client);
    }

    /// Uses `client` to complete the uploads to `bucket` made with
    /// `Put::Create` (tests: a client with test credentials).
    #[cfg(test)]
    pub(crate) fn insert_creating(&self, scheme: Scheme, bucket: &str, client: Arc<dyn Client>) {
        let mut map = self.creating.lock().unwrap_or_else(|p| p.into_inner());
        map.insert((scheme, bucket.to_owned()), client);
    }
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

/// The error code in a server's answer (`<Code>NoSuchBucket</Code>`, Azure's
/// `<Code>AuthenticationFailed</Code>`).
fn s3_code(text: &str) -> Option<&str> {
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(&text[start..start + len])
}

/// The metadata services `object_store` asks for credentials when the
/// environment has none: an instance's (IMDS, AWS's and Azure's managed
/// identity, Google's by name or address) and a container's (ECS).
const METADATA: &[&str] = &[
    "169.254.169.254",
    "169.254.170.2",
    "metadata.google.internal",
];

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
/// (`s3://BUCKET/KEY`, `az://CONTAINER/BLOB`, `gs://BUCKET/OBJECT`), classed as fetch classes
/// HTTP errors: 404, 403 and 401 (a wrong secret, a missing bucket or key)
/// fail at once, naming the bucket and key; 5xx, 429, 408, timeouts and
/// lost connections are tried again.
pub(crate) fn stage_error(shown: &str, e: &object_store::Error) -> StageError {
    use object_store::Error as E;
    let detail = chain(e);
    let code = s3_code(&detail)
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    let scheme = Scheme::of(shown).unwrap_or(Scheme::S3);
    let word = scheme.bucket_word();
    let bucket = shown
        .strip_prefix(scheme.prefix())
        .and_then(|rest| rest.split('/').next())
        .unwrap_or(shown);
    if METADATA.iter().any(|m| detail.contains(m)) {
        // No credentials in the environment, and the machine's metadata
        // service (an instance's, a container's) gave none either.
        let set = match scheme {
            Scheme::S3 => {
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile in ~/.aws/credentials \
                 (AWS_PROFILE) or a web identity token"
            }
            Scheme::Gs => {
                "GOOGLE_SERVICE_ACCOUNT (a service account key file), GOOGLE_SERVICE_ACCOUNT_KEY, \
                 GOOGLE_APPLICATION_CREDENTIALS or gcloud's application default credentials"
            }
            Scheme::Az => scheme.credentials(),
        };
        return StageError::permanent(format!(
            "{shown}: no credentials for {word} {bucket:?}: set {set}; the metadata service \
             gave none: {detail}"
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
            format!("{shown}: not found{code}: no such key in {word} {bucket:?}, or no such {word}")
        }
        Some(s @ (401 | 403)) => format!(
            "{shown}: access denied to {word} {bucket:?} (HTTP {s}){code}: check the credentials \
             ({}) and the {word}'s policy",
            scheme.credentials()
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
                .thread_name("warpline-store")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| StageError::transient(format!("cannot start the object store runtime: {e}")))
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
            .unwrap_or_else(|_| Err(StageError::permanent("an object store request panicked")))
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
        let u = ObjectUrl::parse("s3://my-bucket/a/b.tif").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.key.as_str()),
            ("my-bucket", "a/b.tif")
        );
        assert_eq!(u.to_string(), "s3://my-bucket/a/b.tif");
        assert_eq!(ObjectUrl::parse("s3://bkt").unwrap().key, "");
        assert!(ObjectUrl::parse("s3://Bad_Bucket/a").is_err());
        assert!(ObjectUrl::parse("s3://bkt/a.tif?x=1").is_err());
        assert!(ObjectUrl::parse("https://bkt/a").is_err());
        let a = ObjectUrl::parse("az://my-container/a/b.tif").unwrap();
        assert_eq!((a.scheme, a.bucket.as_str()), (Scheme::Az, "my-container"));
        assert_eq!(a.to_string(), "az://my-container/a/b.tif");
        // A container has no `.`.
        assert!(ObjectUrl::parse("az://my.container/a").is_err());
        assert!(ObjectUrl::parse("s3://my.bucket/a").is_ok());
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
        assert!(clients::loopback_http("http://127.0.0.1:9000"));
        assert!(clients::loopback_http("http://localhost:9000"));
        assert!(!clients::loopback_http("http://example.com"));
        assert!(!clients::loopback_http("https://127.0.0.1:9000"));
    }

    /// Azure's answers name the container and Azure's variables, and are
    /// classed as S3's: a wrong key (403) fails at once, a 503 is tried
    /// again.
    #[test]
    fn azure_errors_name_the_container() {
        let error = |status: u16, code: &str| {
            let source = Box::new(std::io::Error::other(format!(
                "Server returned non-2xx status code: {status}: <Code>{code}</Code>"
            )));
            let path = "a/b.tif".to_owned();
            match status {
                403 => object_store::Error::PermissionDenied { path, source },
                _ => object_store::Error::Generic {
                    store: "MicrosoftAzure",
                    source,
                },
            }
        };
        let shown = "az://scenes/a/b.tif";
        let denied = stage_error(shown, &error(403, "AuthenticationFailed"));
        assert_eq!(
            (denied.kind, denied.status),
            (ErrorKind::Permanent, Some(403))
        );
        assert!(
            denied.message.starts_with(
                "az://scenes/a/b.tif: access denied to container \"scenes\" (HTTP 403) \
                 (AuthenticationFailed)"
            ),
            "{}",
            denied.message
        );
        assert!(
            denied.message.contains("AZURE_STORAGE_ACCOUNT_KEY"),
            "{}",
            denied.message
        );
        let busy = stage_error(shown, &error(503, "ServerBusy"));
        assert_eq!((busy.kind, busy.status), (ErrorKind::Transient, Some(503)));
    }

    /// `gs://` names a bucket as GCS does (`_` and `.` too), and is not
    /// an output.
    #[test]
    fn gs_urls_parse_and_are_not_written() {
        let g = ObjectUrl::parse("gs://my_bucket.v2/a/b.tif").unwrap();
        assert_eq!(
            (g.scheme, g.bucket.as_str(), g.key.as_str()),
            (Scheme::Gs, "my_bucket.v2", "a/b.tif")
        );
        assert_eq!(g.to_string(), "gs://my_bucket.v2/a/b.tif");
        assert!(is_store("gs://b-1/a.tif"));
        assert!(ObjectUrl::parse("gs://Bad/a").is_err());
        assert!(ObjectUrl::parse("s3://my_bucket/a").is_err());
        assert!(Scheme::S3.writes().is_ok() && Scheme::Az.writes().is_ok());
        let staging = std::path::Path::new("/nonexistent");
        let e = Output::parse("gs://b-1/out", None, staging).unwrap_err();
        assert!(e.starts_with("gs:// is read, not written"), "{e}");
    }

    /// GCS's answers name the bucket and Google's variables: a 403 fails
    /// at once, a 404 says the key or the bucket is missing.
    #[test]
    fn gcs_errors_name_the_bucket_and_googles_variables() {
        let error = |status: u16| {
            let source = Box::new(std::io::Error::other(format!(
                "Server returned non-2xx status code: {status}"
            )));
            let path = "a/b.tif".to_owned();
            match status {
                403 => object_store::Error::PermissionDenied { path, source },
                _ => object_store::Error::NotFound { path, source },
            }
        };
        let shown = "gs://scenes/a/b.tif";
        let denied = stage_error(shown, &error(403));
        assert_eq!(
            (denied.kind, denied.status),
            (ErrorKind::Permanent, Some(403))
        );
        assert!(
            denied
                .message
                .starts_with("gs://scenes/a/b.tif: access denied to bucket \"scenes\" (HTTP 403)"),
            "{}",
            denied.message
        );
        assert!(
            denied.message.contains("GOOGLE_SERVICE_ACCOUNT"),
            "{}",
            denied.message
        );
        let missing = stage_error(shown, &error(404));
        assert!(
            missing
                .message
                .contains("not found: no such key in bucket \"scenes\", or no such bucket"),
            "{}",
            missing.message
        );
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
                // As fetch's: the engine tries again, not the client.
                stores.insert(Scheme::S3, "bkt", server.client_trying(&server.endpoint, 0));
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
