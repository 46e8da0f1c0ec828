//! Reading one object, for the fetch stage: its size first (from the
//! listing that found it, else a HEAD request), so fetch can charge the
//! byte budget before a byte of the body is read, then the body.

use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;
use warpline_engine::StageError;

use super::{stage_error, Client, ObjectUrl, Stores};

/// An object found, not read yet.
#[derive(Debug)]
pub(crate) struct Body {
    /// The object's URL, for messages.
    pub(crate) shown: String,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Whether the size is the listing's (else HEAD's, just now).
    listed: bool,
    store: Arc<dyn Client>,
    path: ObjectPath,
}

impl Body {
    /// Finds `source` and its size: `listed` (the listing's), else by a HEAD
    /// request. Reads nothing of the body.
    pub(crate) async fn locate(
        stores: &Stores,
        source: &str,
        listed: Option<u64>,
    ) -> Result<Self, StageError> {
        let url = ObjectUrl::parse(source).map_err(StageError::permanent)?;
        let shown = url.to_string();
        let store = stores.bucket(&url)?;
        let path = url.path()?;
        let size = match listed {
            Some(size) => size,
            None => {
                store
                    .head(&path)
                    .await
                    .map_err(|e| stage_error(&shown, &e))?
                    .size
            }
        };
        Ok(Body {
            shown,
            size,
            listed: listed.is_some(),
            store,
            path,
        })
    }

    /// Reads the body, which must be [`size`](Self::size) bytes: one that
    /// changed since it was looked at fails (permanently when the size was
    /// the listing's, which a retry would read again; else the retry looks
    /// again).
    pub(crate) async fn read(self) -> Result<Vec<u8>, StageError> {
        Ok(self.read_versioned().await?.0)
    }

    /// [`read`](Self::read), with the object's ETag and modification time
    /// as the store said them with the body.
    pub(crate) async fn read_versioned(
        self,
    ) -> Result<(Vec<u8>, Option<String>, Option<std::time::SystemTime>), StageError> {
        let shown = &self.shown;
        let got = self
            .store
            .get(&self.path)
            .await
            .map_err(|e| stage_error(shown, &e))?;
        let changed = |now: u64| {
            let message = format!(
                "{shown}: {now} bytes now, {} when {}: it changed",
                self.size,
                if self.listed { "listed" } else { "looked at" }
            );
            if self.listed {
                StageError::permanent(format!("{message}; run again to list it afresh"))
            } else {
                StageError::transient(message)
            }
        };
        if got.meta.size != self.size {
            return Err(changed(got.meta.size));
        }
        let etag = got.meta.e_tag.clone();
        let modified = std::time::SystemTime::from(got.meta.last_modified);
        let mut body = Vec::with_capacity(self.size as usize);
        let mut chunks = got.into_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| {
                let e = stage_error(shown, &e);
                let why = e
                    .message
                    .strip_prefix(&format!("{shown}: "))
                    .unwrap_or(&e.message);
                // A body cut short is worth another try, whatever its cause.
                StageError::transient(format!(
                    "{shown}: body cut short after {} bytes: {why}",
                    body.len()
                ))
            })?;
            if (body.len() + chunk.len()) as u64 > self.size {
                return Err(changed((body.len() + chunk.len()) as u64));
            }
            body.extend_from_slice(&chunk);
        }
        if body.len() as u64 != self.size {
            return Err(StageError::transient(format!(
                "{shown}: body of {} bytes, but the object has {}",
                body.len(),
                self.size
            )));
        }
        Ok((body, etag, Some(modified)))
    }
}
