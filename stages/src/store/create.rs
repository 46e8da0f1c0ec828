//! Completing an upload only if no object has its name yet: `If-None-Match:
//! *` on the request that makes the object appear (S3's
//! CompleteMultipartUpload, Azure's Put Block List), so two writers of one
//! output (a reclaimed item finished twice) never replace each other's
//! complete object. The store refuses the second (S3: 412, Azure: 409);
//! see docs/design/no-clobber.md.
//!
//! `object_store` 0.14 sends the header on a single PUT (`PutMode::Create`)
//! but not on a multipart completion (apache/arrow-rs-object-store#289),
//! so the completion goes through a client of its own whose HTTP layer
//! ([`Creating`]) adds the header to that one request. A Shared Key
//! signature covers `If-None-Match`, so an Azure request is signed again,
//! by `object_store`'s own `AzureAuthorizer` with the client's credentials;
//! SigV4 needs only the `x-amz-*` headers signed, and a bearer token or a
//! SAS signs no header.

use object_store::azure::{AzureAuthorizer, AzureCredentialProvider};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::multipart::PartId;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStoreExt};
use reqwest::header::{HeaderValue, AUTHORIZATION, IF_NONE_MATCH};
use reqwest::Method;
use warpline_engine::StageError;

use super::{s3_code, stage_error, status_in, Client};

/// How an upload's object takes its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// Whatever is there is replaced (`exists = "overwrite"`, an output
    /// without its STAC item made again, side files,
    /// `conditional_create = false`).
    Overwrite,
    /// Only if nothing is there: a refusal is
    /// [`Uploaded::Refused`].
    Create,
}

/// What became of an upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Uploaded {
    /// The object is this upload's; the bytes sent.
    Created(u64),
    /// The store refused to create it: another writer's object has the
    /// name (a HEAD saw it after the refusal). This upload was aborted.
    Refused,
}

/// The HTTP layer of the client that completes uploads with `Put::Create`.
#[derive(Debug, Clone)]
pub(super) enum Creating {
    S3,
    /// With the credentials the Azure client signs with.
    Azure(AzureCredentialProvider),
}

impl HttpConnector for Creating {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(CreatingService {
            inner,
            kind: self.clone(),
        }))
    }
}

#[derive(Debug)]
struct CreatingService {
    inner: HttpClient,
    kind: Creating,
}

/// Whether the request makes an upload's object appear: S3's `POST
/// KEY?uploadId=ID` (not `?uploads`, which begins one), Azure's `PUT
/// BLOB?comp=blocklist`.
fn completes(kind: &Creating, method: &Method, query: Option<&str>) -> bool {
    let mut keys = query.unwrap_or_default().split('&');
    match kind {
        Creating::S3 => {
            *method == Method::POST && keys.any(|p| p.split('=').next() == Some("uploadId"))
        }
        Creating::Azure(_) => *method == Method::PUT && keys.any(|p| p == "comp=blocklist"),
    }
}

#[async_trait::async_trait]
impl HttpService for CreatingService {
    async fn call(&self, mut request: HttpRequest) -> Result<HttpResponse, HttpError> {
        if completes(&self.kind, request.method(), request.uri().query()) {
            request
                .headers_mut()
                .insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
            if let Creating::Azure(credentials) = &self.kind {
                sign_again(&mut request, credentials).await?;
            }
        }
        self.inner.execute(request).await
    }
}

/// Signs a Shared Key request again, now that it holds `If-None-Match`
/// (one with a bearer token or a SAS is left as it is).
async fn sign_again(
    request: &mut HttpRequest,
    credentials: &AzureCredentialProvider,
) -> Result<(), HttpError> {
    let account = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.strip_prefix("SharedKey "))
        .and_then(|a| a.split_once(':'))
        .map(|(account, _)| account.to_owned());
    let Some(account) = account else {
        return Ok(());
    };
    let failed = |e: object_store::Error| HttpError::new(HttpErrorKind::Unknown, e);
    let credential = credentials.get_credential().await.map_err(failed)?;
    request.headers_mut().remove(AUTHORIZATION);
    AzureAuthorizer::new(&credential, &account)
        .try_authorize(request)
        .map_err(failed)
}

/// How many times a refused completion that finds no object is sent again
/// (the other writer's object went, or S3 answered 409 to two conditional
/// completions at once: the upload is still open).
const REFUSED_TRIES: usize = 3;

/// Completes the upload `id` of `path` through `creating` (the client that
/// sends `If-None-Match: *`); `Ok(false)`: refused, and another object has
/// the name (a HEAD through `store` saw it).
pub(super) async fn complete_if_absent(
    creating: &dyn Client,
    store: &dyn Client,
    (path, id, parts): (&ObjectPath, &String, Vec<PartId>),
    shown: &str,
) -> Result<bool, StageError> {
    let mut tries = 0;
    loop {
        tries += 1;
        let refusal = match creating.complete_multipart(path, id, parts.clone()).await {
            Ok(_) => return Ok(true),
            Err(
                e @ (object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }),
            ) => e,
            // Azure drops the blocks staged for a blob when another upload
            // of it commits its list: the blob there is the other's.
            Err(e) if s3_code(&super::chain(&e)) == Some("InvalidBlockList") => {
                tries = REFUSED_TRIES;
                e
            }
            Err(e) => return Err(not_taken(shown, &e)),
        };
        match store.head(path).await {
            Ok(_) => return Ok(false),
            Err(object_store::Error::NotFound { .. }) if tries < REFUSED_TRIES => continue,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(StageError::transient(format!(
                    "{shown}: the store refused to create it, yet no object is there: {}",
                    super::chain(&refusal)
                )))
            }
            Err(e) => return Err(stage_error(shown, &e)),
        }
    }
}

/// A completion that failed: a server that does not take the condition
/// (501 Not Implemented, or S3's `NotImplemented` code) is told how to do
/// without it.
fn not_taken(shown: &str, e: &object_store::Error) -> StageError {
    let error = stage_error(shown, e);
    let text = super::chain(e);
    if status_in(&text) == Some(501) || s3_code(&text) == Some("NotImplemented") {
        return StageError::permanent(format!(
            "{}; the server does not take a conditional create (If-None-Match: *): set \
             `conditional_create = false` in the write stage to complete uploads \
             unconditionally (two writers of one output may then replace each other's)",
            error.message
        ));
    }
    error
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Only the request that makes the object appear carries the
    /// condition: not the upload's beginning, its parts, its abort, nor
    /// another store's completion.
    #[test]
    fn only_the_completing_request_is_conditional() {
        let s3 = Creating::S3;
        assert!(completes(&s3, &Method::POST, Some("uploadId=abc")));
        assert!(!completes(&s3, &Method::POST, Some("uploads")));
        assert!(!completes(
            &s3,
            &Method::PUT,
            Some("partNumber=1&uploadId=abc")
        ));
        assert!(!completes(&s3, &Method::DELETE, Some("uploadId=abc")));
        assert!(!completes(&s3, &Method::POST, None));
        assert!(!completes(&s3, &Method::PUT, Some("comp=blocklist")));
        let provider: AzureCredentialProvider =
            Arc::new(object_store::StaticCredentialProvider::new(
                object_store::azure::AzureCredential::BearerToken("t".into()),
            ));
        let az = Creating::Azure(provider);
        assert!(completes(&az, &Method::PUT, Some("comp=blocklist")));
        assert!(!completes(&az, &Method::PUT, Some("comp=block&blockid=AA")));
        assert!(!completes(&az, &Method::PUT, None));
        assert!(!completes(&az, &Method::POST, Some("uploadId=abc")));
    }
}
