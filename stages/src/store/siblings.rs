//! The siblings of an object store input (its `.msk`, `.ovr`, `.aux.xml`, world
//! file, `.prj`; see [`crate::names::sibling_candidates`]), found as GDAL's
//! `/vsis3/` finds them: one listing of the object's "directory", kept for
//! the directories seen last, so a batch of scenes under one prefix costs
//! one listing, not a request per candidate per scene. Only names that can
//! be siblings are kept from a listing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use warpline_engine::StageError;

use super::{stage_error, Body, ObjectUrl, Stores};
use crate::names::{is_companion, sibling_candidates};

/// Directories whose listings are kept (beyond, the cache starts afresh).
const KEPT: usize = 64;

/// How long a listing is trusted: a batch sees one listing per directory,
/// a long-running service sees siblings added since.
const FRESH: Duration = Duration::from_secs(60);

/// A directory's sibling-like objects: file name and size.
type Listing = Arc<Vec<(String, u64)>>;

fn cache() -> &'static Mutex<HashMap<String, (Instant, Listing)>> {
    static CACHE: std::sync::OnceLock<Mutex<HashMap<String, (Instant, Listing)>>> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The siblings of `source` that exist, each with its suffix, located (size
/// known) but not read.
pub(crate) async fn siblings(
    stores: &Stores,
    source: &str,
) -> Result<Vec<(String, Body)>, StageError> {
    let url = ObjectUrl::parse(source).map_err(StageError::permanent)?;
    let (dir, name) = url.key.rsplit_once('/').unwrap_or(("", url.key.as_str()));
    let listing = listing(stores, &url.with_key(dir)).await?;
    let mut found: Vec<(String, Body)> = Vec::new();
    for (candidate, suffix) in sibling_candidates(name) {
        if found.iter().any(|(s, _)| s.eq_ignore_ascii_case(&suffix)) {
            continue;
        }
        let Some((_, size)) = listing.iter().find(|(n, _)| *n == candidate) else {
            continue;
        };
        let key = if dir.is_empty() {
            candidate
        } else {
            format!("{dir}/{candidate}")
        };
        let at = url.with_key(key).to_string();
        found.push((suffix, Body::locate(stores, &at, Some(*size)).await?));
    }
    Ok(found)
}

/// The sibling-like objects directly in the directory `dir` (a bucket and
/// key), from the cache or one listing.
async fn listing(stores: &Stores, dir: &ObjectUrl) -> Result<Listing, StageError> {
    let key = dir.to_string();
    // A poisoned cache is still a valid map (one insert at a time).
    if let Some((at, l)) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        if at.elapsed() < FRESH {
            return Ok(Arc::clone(l));
        }
    }
    let store = stores.bucket(dir)?;
    let prefix = (!dir.key.is_empty()).then(|| ObjectPath::from(dir.key.as_str()));
    let shown = key.clone();
    let listed = store
        .list_with_delimiter(prefix.as_ref())
        .await
        .map_err(|e| stage_error(&shown, &e))?;
    let names: Vec<(String, u64)> = listed
        .objects
        .into_iter()
        .filter_map(|o| {
            let name = o.location.filename()?.to_owned();
            is_companion(&name).then_some((name, o.size))
        })
        .collect();
    let names = Arc::new(names);
    let mut map = cache().lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= KEPT {
        map.clear();
    }
    map.insert(key, (Instant::now(), Arc::clone(&names)));
    Ok(names)
}
