//! Making a client of one bucket (container): each store's builder, with
//! the environment's settings, then the stage's `endpoint`, timeouts and
//! retries.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::client::ClientConfigKey;
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{BackoffConfig, RetryConfig};
use warpline_engine::redact::redact_text;

use super::create::Creating;
use super::{profile, Client, Config, ObjectUrl, Scheme};

/// A client of `url`'s bucket (container), from the environment and
/// `config`; the error's text is redacted.
pub(super) fn build(config: &Config, url: &ObjectUrl) -> Result<Arc<dyn Client>, String> {
    match url.scheme {
        Scheme::S3 => build_s3(config, &url.bucket).map(|c| Arc::new(c) as _),
        Scheme::Az => build_azure(config, &url.bucket).map(|c| Arc::new(c) as _),
        Scheme::Gs => build_gcs(config, &url.bucket).map(|c| Arc::new(c) as _),
    }
}

/// A client of `url`'s bucket (container) made as [`build`]'s, that
/// completes uploads only if no object has the name (see
/// [`create`](super::create)). `gs://` is not written.
pub(super) fn build_creating(config: &Config, url: &ObjectUrl) -> Result<Arc<dyn Client>, String> {
    match url.scheme {
        Scheme::S3 => {
            let c = s3_client(config, &url.bucket, |b| b.with_http_connector(Creating::S3))?;
            Ok(Arc::new(c))
        }
        Scheme::Az => {
            // The credentials the request is signed again with are the
            // client's own.
            let plain = build_azure(config, &url.bucket)?;
            let credentials = plain.credentials().clone();
            let c = azure_client(config, &url.bucket, |b| {
                b.with_credentials(credentials.clone())
                    .with_http_connector(Creating::Azure(credentials))
            })?;
            Ok(Arc::new(c))
        }
        Scheme::Gs => Err(Scheme::Gs.writes().err().unwrap_or_default()),
    }
}

/// Whether `endpoint` is plain HTTP to this machine.
pub(super) fn loopback_http(endpoint: &str) -> bool {
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

impl Config {
    /// The client settings every store takes: timeouts.
    fn client_keys(&self) -> Vec<(ClientConfigKey, String)> {
        let millis = |d: Duration| format!("{}ms", d.as_millis());
        let mut keys = Vec::new();
        if let Some(t) = self.connect_timeout {
            keys.push((ClientConfigKey::ConnectTimeout, millis(t)));
        }
        if let Some(t) = self.timeout {
            keys.push((ClientConfigKey::Timeout, millis(t)));
        }
        keys
    }

    fn retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: self.retries,
            retry_timeout: Duration::from_secs(60),
        }
    }
}

fn build_s3(config: &Config, bucket: &str) -> Result<impl Client, String> {
    s3_client(config, bucket, |b| b)
}

/// An S3 client; `last` changes its builder last.
fn s3_client(
    config: &Config,
    bucket: &str,
    last: impl FnOnce(AmazonS3Builder) -> AmazonS3Builder,
) -> Result<AmazonS3, String> {
    let mut b = s3_builder(config, bucket)?;
    if b.get_config_value(&AmazonS3ConfigKey::Endpoint)
        .is_some_and(|e| loopback_http(&e))
    {
        b = b.with_allow_http(true);
    }
    for (key, value) in config.client_keys() {
        b = b.with_config(AmazonS3ConfigKey::Client(key), value);
    }
    b = b.with_retry(config.retry());
    last(b).build().map_err(|e| redact_text(&e.to_string()))
}

/// An Azure client: `MicrosoftAzureBuilder::from_env`'s variables, then
/// the `endpoint` setting (the account's URL, e.g.
/// `http://127.0.0.1:10000/devstoreaccount1` for Azurite).
fn build_azure(config: &Config, container: &str) -> Result<MicrosoftAzure, String> {
    azure_client(config, container, |b| b)
}

/// An Azure client; `last` changes its builder last.
fn azure_client(
    config: &Config,
    container: &str,
    last: impl FnOnce(MicrosoftAzureBuilder) -> MicrosoftAzureBuilder,
) -> Result<MicrosoftAzure, String> {
    let mut b = azure_builder(config, container);
    if b.get_config_value(&AzureConfigKey::Endpoint)
        .is_some_and(|e| loopback_http(&e))
    {
        b = b.with_allow_http(true);
    }
    for (key, value) in config.client_keys() {
        b = b.with_config(AzureConfigKey::Client(key), value);
    }
    b = b.with_retry(config.retry());
    last(b).build().map_err(|e| redact_text(&e.to_string()))
}

/// A Google Cloud Storage client: `GoogleCloudStorageBuilder::from_env`'s
/// variables, then the `endpoint` setting (the base URL, e.g.
/// `http://127.0.0.1:4443` for fake-gcs-server). `object_store` allows
/// plain HTTP to GCS by default; here, as for the others, only to a
/// loopback address or with `GOOGLE_ALLOW_HTTP=true`.
fn build_gcs(config: &Config, bucket: &str) -> Result<impl Client, String> {
    let b = gcs_builder(config, bucket);
    let allow_http = gcs_base_url(&b).is_some_and(|e| loopback_http(&e))
        || std::env::var("GOOGLE_ALLOW_HTTP").is_ok_and(|v| truthy(&v));
    let mut b = b.with_config(
        GoogleConfigKey::Client(ClientConfigKey::AllowHttp),
        allow_http.to_string(),
    );
    for (key, value) in config.client_keys() {
        b = b.with_config(GoogleConfigKey::Client(key), value);
    }
    b = b.with_retry(config.retry());
    b.build().map_err(|e| redact_text(&e.to_string()))
}

/// A setting's value read as `object_store` reads a boolean.
fn truthy(value: &str) -> bool {
    ["true", "1", "yes", "on"]
        .iter()
        .any(|t| value.trim().eq_ignore_ascii_case(t))
}

/// A GCS client's settings for `bucket`: the `endpoint` setting, then the
/// environment.
fn gcs_builder(config: &Config, bucket: &str) -> GoogleCloudStorageBuilder {
    let b = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
    match &config.endpoint {
        Some(endpoint) => b.with_base_url(endpoint),
        None => b,
    }
}

/// The base URL a GCS client talks to, when not Google's: the builder's
/// (`endpoint`, `GOOGLE_BASE_URL`), else the `gcs_base_url` of the service
/// account key (an emulator's), read from `GOOGLE_SERVICE_ACCOUNT_KEY` or
/// the file `GOOGLE_SERVICE_ACCOUNT` names. Nothing of the key but that
/// field is kept; a key that cannot be read is `None` here and fails when
/// the client is made.
fn gcs_base_url(b: &GoogleCloudStorageBuilder) -> Option<String> {
    if let Some(url) = b.get_config_value(&GoogleConfigKey::BaseUrl) {
        return Some(url);
    }
    let json = match b.get_config_value(&GoogleConfigKey::ServiceAccountKey) {
        Some(key) => key,
        None => {
            std::fs::read_to_string(b.get_config_value(&GoogleConfigKey::ServiceAccount)?).ok()?
        }
    };
    let key: serde_json::Value = serde_json::from_str(&json).ok()?;
    key.get("gcs_base_url")?.as_str().map(str::to_owned)
}

/// An S3 client's settings for `bucket`, in the order they win: the
/// `endpoint` setting, the environment, the AWS profile.
fn s3_builder(config: &Config, bucket: &str) -> Result<AmazonS3Builder, String> {
    let b = with_profile(AmazonS3Builder::from_env().with_bucket_name(bucket))?;
    Ok(match &config.endpoint {
        Some(endpoint) => b.with_endpoint(endpoint),
        None => b,
    })
}

/// An Azure client's settings for `container`: the `endpoint` setting,
/// then the environment.
fn azure_builder(config: &Config, container: &str) -> MicrosoftAzureBuilder {
    let b = MicrosoftAzureBuilder::from_env().with_container_name(container);
    match &config.endpoint {
        Some(endpoint) => b.with_endpoint(endpoint.clone()),
        None => b,
    }
}

/// The server a client for `url`'s bucket talks to, as its builder
/// resolves it (`None`: the cloud's own, or settings that cannot be read,
/// which fail when the client is made).
pub(crate) fn endpoint_of(config: &Config, url: &ObjectUrl) -> Option<String> {
    match url.scheme {
        Scheme::S3 => s3_builder(config, &url.bucket)
            .ok()?
            .get_config_value(&AmazonS3ConfigKey::Endpoint),
        Scheme::Az => {
            azure_builder(config, &url.bucket).get_config_value(&AzureConfigKey::Endpoint)
        }
        Scheme::Gs => gcs_base_url(&gcs_builder(config, &url.bucket)),
    }
    .filter(|e| !e.is_empty())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The server a GCS client talks to: the builder's base URL, else the
    /// service account key's `gcs_base_url` (an emulator's), from the key
    /// or its file; plain HTTP is allowed to it only on loopback.
    #[test]
    fn a_gcs_base_url_is_the_settings_else_the_keys() {
        let key = |url: &str| {
            format!(
                r#"{{"gcs_base_url": "{url}", "disable_oauth": true, "client_email": "",
                "private_key": "", "private_key_id": ""}}"#
            )
        };
        let b =
            GoogleCloudStorageBuilder::new().with_service_account_key(key("http://127.0.0.1:4443"));
        assert_eq!(gcs_base_url(&b).as_deref(), Some("http://127.0.0.1:4443"));
        let b = b.with_base_url("http://127.0.0.1:9");
        assert_eq!(gcs_base_url(&b).as_deref(), Some("http://127.0.0.1:9"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key.json");
        std::fs::write(&file, key("http://10.1.2.3:4443")).unwrap();
        let b =
            GoogleCloudStorageBuilder::new().with_service_account_path(file.display().to_string());
        let url = gcs_base_url(&b).unwrap();
        assert_eq!(url, "http://10.1.2.3:4443");
        assert!(!loopback_http(&url));
        assert_eq!(gcs_base_url(&GoogleCloudStorageBuilder::new()), None);
        assert!(truthy(" TRUE") && truthy("1") && !truthy("false") && !truthy(""));
    }
}
