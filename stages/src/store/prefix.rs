//! A prefix of a bucket read from outside a pipeline, for `warpline
//! verify` of outputs in a store: the objects under it listed (names
//! relative to it), and one at a time copied to a local file, streamed (an
//! output can be larger than memory). Read only, so `gs://` too; the
//! clients are made as a stage's are (`clients`: the environment's
//! credentials, an optional endpoint).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use warpline_engine::StageError;

use super::{block_on, stage_error, Config, ObjectUrl, Stores};

/// The objects under `s3://BUCKET/PREFIX`, `az://CONTAINER/PREFIX` or
/// `gs://BUCKET/PREFIX`.
#[derive(Debug)]
pub struct Prefix {
    /// The bucket, with the prefix (no `/` at either end) as its key.
    at: ObjectUrl,
    stores: Arc<Stores>,
}

impl Prefix {
    /// `url`: a store URL whose key is the prefix (empty: the whole
    /// bucket); `endpoint`: the server, else the environment's
    /// (`AWS_ENDPOINT_URL`, `AZURE_STORAGE_ENDPOINT`, `GOOGLE_BASE_URL`),
    /// else the cloud's.
    pub fn parse(url: &str, endpoint: Option<String>) -> Result<Self, String> {
        let parsed = ObjectUrl::parse(url)?;
        let key = parsed.key.trim_matches('/').to_owned();
        let config = Config {
            endpoint,
            // A page or an object is asked again a few times: nothing
            // else would.
            retries: 3,
            ..Config::default()
        };
        Ok(Prefix {
            at: parsed.with_key(key),
            stores: Arc::new(Stores::new(config)),
        })
    }

    /// The object `name` (relative to the prefix) as a URL.
    pub fn url(&self, name: &str) -> String {
        self.object(name).to_string()
    }

    fn object(&self, name: &str) -> ObjectUrl {
        match self.at.key.as_str() {
            "" => self.at.with_key(name),
            prefix => self.at.with_key(format!("{prefix}/{name}")),
        }
    }

    /// The names (relative to the prefix) of the objects under it, at any
    /// depth, sorted.
    pub fn list(&self) -> Result<Vec<String>, String> {
        let store = self.stores.bucket(&self.at).map_err(|e| e.message)?;
        let shown = self.at.to_string();
        let prefix = self.at.key.clone();
        let listed = block_on(async move {
            let at = (!prefix.is_empty()).then(|| ObjectPath::from(prefix.as_str()));
            let mut names = Vec::new();
            let mut pages = ObjectStore::list(store.as_ref(), at.as_ref());
            while let Some(meta) = pages.next().await {
                let meta = meta.map_err(|e| stage_error(&shown, &e))?;
                let key = meta.location.as_ref();
                let name = match prefix.as_str() {
                    "" => key,
                    p => key.strip_prefix(p).unwrap_or(key).trim_start_matches('/'),
                };
                names.push(name.to_owned());
            }
            Ok(names)
        });
        let mut names = listed.map_err(|e| e.message)?;
        names.sort();
        Ok(names)
    }

    /// Copies the object `name` (relative to the prefix) into the file
    /// `to`, chunk by chunk.
    pub fn download(&self, name: &str, to: &Path) -> Result<(), String> {
        let url = self.object(name);
        let shown = url.to_string();
        let store = self.stores.bucket(&url).map_err(|e| e.message)?;
        let path = url.path().map_err(|e| e.message)?;
        let mut file = std::fs::File::create(to)
            .map_err(|e| format!("cannot create {}: {e}", to.display()))?;
        let target = to.display().to_string();
        let copied = block_on(async move {
            let got = store
                .get(&path)
                .await
                .map_err(|e| stage_error(&shown, &e))?;
            let mut chunks = got.into_stream();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|e| stage_error(&shown, &e))?;
                // A small write to a local file, on the store's own
                // runtime: no other work of this process waits on it.
                file.write_all(&chunk).map_err(|e| {
                    StageError::permanent(format!("{shown}: cannot write {target}: {e}"))
                })?;
            }
            file.sync_all()
                .map_err(|e| StageError::permanent(format!("cannot write {target}: {e}")))
        });
        copied.map_err(|e| e.message)
    }
}

/// Whether `text` names an object or prefix in a store (`s3://`, `az://`,
/// `gs://`).
pub fn is_store_url(text: &str) -> bool {
    super::is_store(text)
}
