//! Small objects beside the outputs in a bucket (a STAC item, the
//! collection): listed under the output prefix, read and written whole
//! (one PUT, which a store shows only complete).

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::{block_on, stage_error, Output};

impl Output {
    /// The objects under the output prefix whose name (relative to the
    /// prefix) `keep` accepts, each with its version (ETag, else size and
    /// time).
    pub(crate) fn list_names(
        &self,
        keep: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<Vec<(String, String)>, String> {
        let (store, root, shown) = self.target("").map_err(|e| e.message)?;
        let prefix = root.as_ref().trim_end_matches('/').to_owned();
        let listed = block_on(async move {
            let at = (!prefix.is_empty()).then(|| ObjectPath::from(prefix.as_str()));
            let mut out = Vec::new();
            let mut pages = ObjectStore::list(store.as_ref(), at.as_ref());
            while let Some(meta) = pages.next().await {
                let meta = meta.map_err(|e| stage_error(&shown, &e))?;
                let key = meta.location.as_ref();
                let name = match prefix.as_str() {
                    "" => key,
                    p => key
                        .strip_prefix(p)
                        .map_or(key, |k| k.trim_start_matches('/')),
                };
                if keep(name) {
                    let version = meta
                        .e_tag
                        .unwrap_or_else(|| format!("{} {}", meta.size, meta.last_modified));
                    out.push((name.to_owned(), version));
                }
            }
            Ok(out)
        });
        listed.map_err(|e| e.message)
    }

    /// The object `name`'s bytes, `None` if it is not there.
    pub(crate) fn read_small(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        let (store, path, shown) = self.target(name).map_err(|e| e.message)?;
        let got = block_on(async move {
            match store.get(&path).await {
                Ok(got) => got
                    .bytes()
                    .await
                    .map(|b| Some(b.to_vec()))
                    .map_err(|e| stage_error(&shown, &e)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(stage_error(&shown, &e)),
            }
        });
        got.map_err(|e| e.message)
    }

    /// Writes `bytes` as the object `name` (one PUT).
    pub(crate) fn write_small(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        let (store, path, shown) = self.target(name).map_err(|e| e.message)?;
        let payload = PutPayload::from(bytes.to_vec());
        let put = block_on(async move {
            store
                .put(&path, payload)
                .await
                .map(|_| ())
                .map_err(|e| stage_error(&shown, &e))
        });
        put.map_err(|e| e.message)
    }

    /// Removes the object `name` (gone already is fine).
    pub(crate) fn remove_small(&self, name: &str) -> Result<(), String> {
        let (store, path, shown) = self.target(name).map_err(|e| e.message)?;
        let removed = block_on(async move {
            match store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(stage_error(&shown, &e)),
            }
        });
        removed.map_err(|e| e.message)
    }
}
