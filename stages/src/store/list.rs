//! The `glob` source over a store's listing: `pattern =
//! "s3://BUCKET/PREFIX/*.tif"`, `"az://CONTAINER/PREFIX/*.tif"` or `"gs://BUCKET/PREFIX/*.tif"`.
//!
//! The bucket is listed from the pattern's directory (the part before its
//! first wildcard), page by page as the engine asks for inputs: a page of
//! at most 1,000 keys (Azure: 5,000) is held at a time, never the whole
//! listing. Keys come in the store's order (sorted by their bytes), and those the pattern matches are
//! inputs, with their listed size as the size hint (fetch charges it before
//! reading). `*`, `?` and `[...]` stay within one `/`-separated segment;
//! `**` crosses segments.

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore};
use warpline_engine::{Input, Problem, Settings, Source, SourceError, SourceSpec};

use super::{stage_error, Config, ObjectUrl, Stores};
use crate::ids::Ids;

#[derive(Debug)]
struct S3Glob {
    shown: String,
    /// The bucket, and the directory listed as its key.
    bucket: ObjectUrl,
    dir: ObjectPath,
    pattern: glob::Pattern,
    stores: Arc<Stores>,
}

/// The `glob` source for an `s3://`, `az://` or `gs://` pattern.
pub(crate) fn glob_source(
    s: &Settings,
    pattern: &str,
    endpoint: Option<String>,
) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> {
    let problem = |m: String| vec![s.problem("pattern", m)];
    let url = ObjectUrl::parse(pattern).map_err(problem)?;
    let key_pattern = glob::Pattern::new(&url.key)
        .map_err(|e| problem(format!("invalid pattern {pattern:?}: {e}")))?;
    // The literal part before the first wildcard, cut back to a whole
    // segment: object_store lists by segments.
    let literal = url.key.split(['*', '?', '[']).next().unwrap_or("");
    let dir = literal.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let dir = ObjectPath::parse(dir)
        .map_err(|e| problem(format!("{pattern:?}: not a key prefix: {e}")))?;
    Ok(Arc::new(S3Glob {
        shown: pattern.to_owned(),
        bucket: url.with_key(dir.as_ref()),
        dir,
        pattern: key_pattern,
        stores: Arc::new(Stores::new(Config {
            endpoint,
            // A page is asked for again a few times: nothing else would.
            retries: 3,
            ..Config::default()
        })),
    }))
}

impl SourceSpec for S3Glob {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        // Nothing is asked of the server yet: the first page comes with the
        // first input the engine asks for.
        Ok(Box::new(S3GlobRun {
            shown: self.shown.clone(),
            bucket: self.bucket.clone(),
            dir: self.dir.clone(),
            pattern: self.pattern.clone(),
            stores: Arc::clone(&self.stores),
            listing: None,
            listed: 0,
            ended: false,
            ids: Ids::default(),
        }))
    }

    /// `validate --online`: the bucket can be listed where the pattern
    /// starts, with the credentials at hand (one page is asked for).
    fn check_online(&self) -> Vec<String> {
        let store = match self.stores.bucket(&self.bucket) {
            Ok(s) => s,
            Err(e) => return vec![e.message],
        };
        let (dir, shown) = (self.dir.clone(), self.shown.clone());
        let listed = super::block_on(async move {
            match store.list(Some(&dir)).next().await {
                Some(Err(e)) => Err(stage_error(&shown, &e)),
                _ => Ok(()),
            }
        });
        match listed {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!(
                "the pattern's {} cannot be listed: {}",
                self.bucket.scheme.bucket_word(),
                e.message
            )],
        }
    }
}

struct S3GlobRun {
    shown: String,
    bucket: ObjectUrl,
    dir: ObjectPath,
    pattern: glob::Pattern,
    stores: Arc<Stores>,
    listing: Option<BoxStream<'static, object_store::Result<ObjectMeta>>>,
    listed: u64,
    ended: bool,
    ids: Ids,
}

const MATCH: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

impl S3GlobRun {
    /// The listing has failed: one failed input names the pattern and says
    /// how far it got, and the source ends.
    fn fail(&mut self, message: String) -> Option<Result<Input, SourceError>> {
        self.ended = true;
        Some(Err(SourceError {
            id: self.shown.clone(),
            message: format!(
                "the listing failed after {} objects: {message}",
                self.listed
            ),
        }))
    }
}

#[async_trait::async_trait]
impl Source for S3GlobRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        if self.ended {
            return None;
        }
        if self.listing.is_none() {
            match self.stores.bucket(&self.bucket) {
                Ok(store) => self.listing = Some(store.list(Some(&self.dir))),
                Err(e) => return self.fail(e.message),
            }
        }
        let listing = self.listing.as_mut()?;
        loop {
            match listing.next().await {
                None => {
                    self.ended = true;
                    return None;
                }
                Some(Err(e)) => {
                    let shown = self.bucket.to_string();
                    let mut message = stage_error(&shown, &e).message;
                    if let object_store::Error::InvalidPath { .. } = e {
                        // object_store reads a page whole: one key it cannot
                        // name fails the page, and the listing cannot be
                        // asked to go on after a key it cannot name.
                        message.push_str(
                            "; object_store refuses a whole page of a listing for one key it \
                             cannot name (an empty, `.` or `..` segment, or a control \
                             character), so the listing stops there: rename that key or \
                             narrow the pattern",
                        );
                    }
                    return self.fail(message);
                }
                Some(Ok(meta)) => {
                    self.listed += 1;
                    if self.pattern.matches_with(meta.location.as_ref(), MATCH) {
                        let source = self.bucket.with_key(meta.location.as_ref()).to_string();
                        return Some(Ok(Input {
                            id: self.ids.next(&source),
                            source,
                            size_hint: Some(meta.size),
                            meta: Default::default(),
                        }));
                    }
                }
            }
        }
    }
}

/// For the tests: `s3://BUCKET/{prefix}/*.tif` on the test server, listed
/// through `endpoint` (the server's, or a proxy's).
#[cfg(test)]
fn tif_glob(server: &crate::store::testing::Server, endpoint: &str, prefix: &str) -> S3Glob {
    let stores = Stores::default();
    stores.insert(super::Scheme::S3, &server.bucket, server.client(endpoint));
    S3Glob {
        shown: format!("s3://{}/{prefix}/*.tif", server.bucket),
        bucket: ObjectUrl::parse(&format!("s3://{}/{prefix}", server.bucket)).unwrap(),
        dir: ObjectPath::from(prefix),
        pattern: glob::Pattern::new(&format!("{prefix}/*.tif")).unwrap(),
        stores: Arc::new(stores),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;
    use crate::store::testing;

    /// 2,100 keys are three pages: the first is asked for with the first
    /// input (not when the source is opened), the next only when the
    /// inputs of the one before are all taken.
    #[test]
    fn the_listing_is_asked_for_page_by_page_as_inputs_are_taken() {
        let Some(server) = testing::server("the listing test is") else {
            return;
        };
        let rt = testing::runtime();
        rt.block_on(async {
            let prefix = testing::unique("pages");
            let direct = server.client(&server.endpoint);
            futures::stream::iter(0..2100)
                .map(|i| {
                    let store = Arc::clone(&direct);
                    let path = ObjectPath::from(format!("{prefix}/k{i:05}.tif"));
                    async move { store.put(&path, PutPayload::from_static(b"x")).await }
                })
                .buffer_unordered(16)
                .for_each(|r| async move {
                    r.unwrap();
                })
                .await;
            let (endpoint, lists) = server.counting_proxy(b"list-type=2").await;
            let spec = tif_glob(&server, &endpoint, &prefix);
            let mut source = spec.open().unwrap();
            let asked = || lists.load(Ordering::SeqCst);
            assert_eq!(asked(), 0, "opening the source asks nothing");
            let first = source.next().await.unwrap().unwrap();
            assert_eq!(
                first.source,
                format!("s3://{}/{prefix}/k00000.tif", server.bucket)
            );
            assert_eq!((first.id.as_str(), first.size_hint), ("k00000", Some(1)));
            for _ in 1..1000 {
                source.next().await.unwrap().unwrap();
            }
            assert_eq!(asked(), 1, "1,000 inputs from the first page");
            let next = source.next().await.unwrap().unwrap();
            assert_eq!(next.id, "k01000");
            assert_eq!(asked(), 2, "the second page for the 1,001st input");
            let mut rest = 0;
            while let Some(input) = source.next().await {
                input.unwrap();
                rest += 1;
            }
            assert_eq!(rest, 1099);
            assert_eq!(asked(), 3);
        });
    }
}

#[cfg(test)]
mod bad_key {
    use super::*;
    use crate::store::testing;

    /// A key object_store cannot name (a control character, put straight
    /// into the test server's directory) fails the listing with one failed
    /// item that names the key and says why the listing stops.
    #[test]
    fn a_key_object_store_cannot_name_is_named() {
        let Some(server) = testing::server("the bad key test is") else {
            return;
        };
        let Ok(root) = std::env::var("WARPLINE_TEST_S3_ROOT") else {
            eprintln!("WARPLINE_TEST_S3_ROOT is not set: the bad key test is skipped");
            return;
        };
        let prefix = testing::unique("badkey");
        let dir = std::path::Path::new(&root)
            .join(&server.bucket)
            .join(&prefix);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.tif"), b"x").unwrap();
        std::fs::write(dir.join("b\u{1}.tif"), b"x").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let spec = tif_glob(&server, &server.endpoint, &prefix);
        let mut source = spec.open().unwrap();
        let failed = rt.block_on(source.next()).unwrap().unwrap_err();
        assert!(failed.message.contains("b\u{1}.tif"), "{}", failed.message);
        assert!(
            failed.message.contains("the listing stops there"),
            "{}",
            failed.message
        );
        assert!(rt.block_on(source.next()).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
