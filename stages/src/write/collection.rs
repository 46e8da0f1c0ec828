//! The run's STAC Collection, `collection.json` at the root of the write
//! stage's `dir` (local or a bucket's prefix): derived from the items that
//! are there, never edited in place, so it cannot hold a link to an item
//! that is gone nor two links to one.
//!
//! A rebuild lists the item files (the output template with `.json`),
//! reads those it has not read yet (a cache keyed by name and version),
//! makes the collection (links sorted, extent the union of the items'),
//! and compares it with the one there: equal, it is done; else it writes
//! its own (a temporary name renamed into place; an object PUT, which a
//! store shows whole) and looks again. Any number of processes may do
//! this at once: the last to finish looks after its last write, and its
//! listing has every item written before it, so the collection ends equal
//! to the items present. After a `kill -9`, the rerun's rebuild mends it.
//!
//! Rebuilt at most every [`EVERY`] while items are written (a listing per
//! item would cost O(n²) for a large run), and always when a run ends.
//! Then, if asked (`item_collection`), every item present is also written
//! into one ItemCollection (a GeoJSON FeatureCollection) at the root, its
//! relative hrefs made relative to the root: one file to load for a large
//! run.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warpline_gdal::GeoBounds;

use super::stac::STAC_VERSION;

/// The shortest time between two rebuilds while items are written.
pub(crate) const EVERY: Duration = Duration::from_secs(2);

/// The collection's file name, at the root of `dir`.
pub(crate) const FILE: &str = "collection.json";

/// Where items and the collection live: a local directory or a bucket's
/// prefix. Names are relative to it, `/`-separated.
pub(crate) trait Place: Send + Sync + std::fmt::Debug {
    /// The names matching `pattern` (a glob whose `*` stays within a
    /// path segment), each with a version that changes when it is
    /// rewritten.
    fn list(&self, pattern: &glob::Pattern) -> Result<Vec<(String, String)>, String>;
    /// The file's bytes, `None` if it is not there.
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String>;
    /// Replaces the file whole (never seen half written).
    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), String>;
}

/// What the collection says of its own (the `collection` table).
#[derive(Debug, Clone)]
pub(crate) struct Describe {
    pub(crate) id: String,
    pub(crate) title: Option<String>,
    pub(crate) description: String,
    pub(crate) license: String,
}

/// What the collection needs of an item.
#[derive(Debug, Clone, PartialEq)]
struct Summary {
    bbox: Option<[f64; 4]>,
    /// The item's first and last time.
    start: Option<String>,
    end: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    /// Items read: name -> (version, summary).
    read: HashMap<String, (String, Option<Summary>)>,
    last: Option<Instant>,
}

/// The collection of one write stage.
#[derive(Debug)]
pub(crate) struct Collection {
    place: Box<dyn Place>,
    items: glob::Pattern,
    describe: Describe,
    /// The ItemCollection's name at the root, if one is written.
    item_collection: Option<String>,
    state: Mutex<State>,
}

impl Collection {
    /// The collection of the items named by `item_template` (`{id}` for
    /// the id) in `place`.
    pub(crate) fn new(
        place: Box<dyn Place>,
        item_template: &str,
        describe: Describe,
        item_collection: Option<String>,
    ) -> Result<Self, String> {
        let pattern = glob::Pattern::escape(item_template).replace("{id}", "*");
        let items = glob::Pattern::new(&pattern).map_err(|e| e.to_string())?;
        Ok(Collection {
            place,
            items,
            describe,
            item_collection,
            state: Mutex::new(State::default()),
        })
    }

    /// The collection's href from an item named `item` (`../collection.json`
    /// for `tiles/a.json`).
    pub(crate) fn href_from(item: &str) -> String {
        let depth = item.matches('/').count();
        if depth == 0 {
            format!("./{FILE}")
        } else {
            format!("{}{FILE}", "../".repeat(depth))
        }
    }

    /// Whether `name` is the ItemCollection's (no item may take it).
    pub(crate) fn is_item_collection(&self, name: &str) -> bool {
        self.item_collection.as_deref() == Some(name)
    }

    /// After an item was written: a rebuild, unless one ran less than
    /// [`EVERY`] ago or another worker is rebuilding now.
    pub(crate) fn item_written(&self) -> Result<(), String> {
        let Ok(mut state) = self.state.try_lock() else {
            return Ok(());
        };
        if state.last.is_some_and(|t| t.elapsed() < EVERY) {
            return Ok(());
        }
        self.rebuild(&mut state, 2)
    }

    /// When the run ends: rebuilt until it equals the items present.
    pub(crate) fn finish(&self) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.rebuild(&mut state, 20)?;
        match &self.item_collection {
            Some(name) => self.write_item_collection(&state, name),
            None => Ok(()),
        }
    }

    /// Every item the last rebuild found, whole, in one FeatureCollection
    /// named `name` (items read again: one may have been rewritten since).
    fn write_item_collection(&self, state: &State, name: &str) -> Result<(), String> {
        let mut names: Vec<&String> = state
            .read
            .iter()
            .filter(|(_, (_, summary))| summary.is_some())
            .map(|(n, _)| n)
            .collect();
        names.sort();
        let mut features = Vec::with_capacity(names.len());
        for item in names {
            let Some(bytes) = self.place.read(item)? else {
                continue; // gone since listed
            };
            let Ok(mut feature) = serde_json::from_slice::<Value>(&bytes) else {
                continue;
            };
            rebase(&mut feature, parent(item));
            features.push(feature);
        }
        let doc = json!({
            "type": "FeatureCollection",
            "features": features,
            "links": [{ "rel": "root", "href": format!("./{FILE}"), "type": "application/json" }],
        });
        let mut bytes = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
        bytes.push(b'\n');
        self.place.write(name, &bytes)
    }

    fn rebuild(&self, state: &mut State, rounds: u32) -> Result<(), String> {
        state.last = Some(Instant::now());
        for _ in 0..rounds {
            let doc = self.document(state)?;
            let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
            bytes.push(b'\n');
            if self.place.read(FILE)?.as_deref() == Some(&bytes[..]) {
                return Ok(());
            }
            self.place.write(FILE, &bytes)?;
        }
        // Still changing (items are being written): the next rebuild, at
        // the latest the one at the run's end, goes on.
        Ok(())
    }

    /// The collection of the items present now.
    fn document(&self, state: &mut State) -> Result<Value, String> {
        let mut listed = self.place.list(&self.items)?;
        listed.sort();
        let mut present = HashMap::with_capacity(listed.len());
        let mut items = Vec::with_capacity(listed.len());
        for (name, version) in listed {
            if name == FILE || self.is_item_collection(&name) {
                continue;
            }
            let summary = match state.read.remove(&name) {
                Some((v, s)) if v == version => s,
                _ => self.summary(&name)?,
            };
            if let Some(s) = &summary {
                items.push((name.clone(), s.clone()));
            }
            present.insert(name, (version, summary));
        }
        state.read = present;
        Ok(self.json(&items))
    }

    /// What the item `name` says, `None` if it is not a STAC item (or
    /// went away since it was listed).
    fn summary(&self, name: &str) -> Result<Option<Summary>, String> {
        let Some(bytes) = self.place.read(name)? else {
            return Ok(None);
        };
        let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
            tracing::warn!("{name}: not JSON; left out of the collection");
            return Ok(None);
        };
        if v["type"] != "Feature" || v.get("stac_version").is_none() {
            tracing::warn!("{name}: not a STAC item; left out of the collection");
            return Ok(None);
        }
        let bbox = v["bbox"].as_array().and_then(|b| {
            let n: Vec<f64> = b.iter().filter_map(Value::as_f64).collect();
            (n.len() == 4).then(|| [n[0], n[1], n[2], n[3]])
        });
        let p = &v["properties"];
        let text = |k: &str| p[k].as_str().map(str::to_owned);
        let start = text("datetime").or_else(|| text("start_datetime"));
        let end = text("datetime").or_else(|| text("end_datetime"));
        Ok(Some(Summary { bbox, start, end }))
    }

    fn json(&self, items: &[(String, Summary)]) -> Value {
        let bbox = items
            .iter()
            .filter_map(|(_, s)| s.bbox)
            .reduce(union)
            .unwrap_or([-180.0, -90.0, 180.0, 90.0]);
        // RFC 3339 in UTC sorts as text.
        let start = items.iter().filter_map(|(_, s)| s.start.clone()).min();
        let end = items.iter().filter_map(|(_, s)| s.end.clone()).max();
        let mut links =
            vec![json!({ "rel": "root", "href": format!("./{FILE}"), "type": "application/json" })];
        links.extend(items.iter().map(|(name, _)| {
            json!({ "rel": "item", "href": format!("./{name}"), "type": "application/geo+json" })
        }));
        let d = &self.describe;
        let mut doc = json!({
            "type": "Collection",
            "stac_version": STAC_VERSION,
            "stac_extensions": [],
            "id": d.id,
            "description": d.description,
            "license": d.license,
            "extent": {
                "spatial": { "bbox": [bbox] },
                "temporal": { "interval": [[start, end]] },
            },
            "links": links,
        });
        if let (Some(title), Some(m)) = (&d.title, doc.as_object_mut()) {
            m.insert("title".into(), title.clone().into());
        }
        doc
    }
}

/// The folder of a name relative to the root (`""` at the root).
fn parent(name: &str) -> &str {
    name.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Makes an item's relative hrefs (links, assets) relative to the root
/// instead of its folder `dir`.
fn rebase(item: &mut Value, dir: &str) {
    if dir.is_empty() {
        return;
    }
    let fix = |v: &mut Value| {
        if let Some(href) = v.get("href").and_then(Value::as_str) {
            if !href.contains("://") && !href.starts_with('/') {
                v["href"] = Value::from(join(dir, href));
            }
        }
    };
    if let Some(links) = item["links"].as_array_mut() {
        links.iter_mut().for_each(fix);
    }
    if let Some(assets) = item["assets"].as_object_mut() {
        assets.values_mut().for_each(fix);
    }
}

/// `href` relative to `dir`, as a path from the root (`./a/b.tif`).
fn join(dir: &str, href: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    for segment in href.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("./{}", parts.join("/"))
}

/// The smallest box holding both, `[west, south, east, north]` (across
/// the antimeridian when that is the shorter way: `west > east`).
fn union(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    let bounds = |[west, south, east, north]: [f64; 4]| GeoBounds {
        west,
        south,
        east,
        north,
    };
    let u = bounds(a).union(&bounds(b));
    [u.west, u.south, u.east, u.north]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extent_crosses_the_antimeridian_when_the_items_do() {
        let east = [170.0, -10.0, 179.0, 0.0];
        let west = [-179.0, 0.0, -170.0, 10.0];
        assert_eq!(union(east, west), [170.0, -10.0, -170.0, 10.0]);
        assert_eq!(
            union([1.0, 2.0, 3.0, 4.0], [5.0, 0.0, 6.0, 3.0]),
            [1.0, 0.0, 6.0, 4.0]
        );
    }

    #[test]
    fn an_items_hrefs_are_made_relative_to_the_root() {
        let mut item = json!({
            "links": [{"rel": "collection", "href": "../../collection.json"},
                      {"rel": "via", "href": "https://example.com/x"}],
            "assets": {"data": {"href": "./a.tif"}},
        });
        rebase(&mut item, "t/u");
        assert_eq!(item["links"][0]["href"], "./collection.json");
        assert_eq!(item["links"][1]["href"], "https://example.com/x");
        assert_eq!(item["assets"]["data"]["href"], "./t/u/a.tif");
    }

    #[test]
    fn an_item_finds_the_collection_at_the_root() {
        assert_eq!(Collection::href_from("a.json"), "./collection.json");
        assert_eq!(Collection::href_from("t/a.json"), "../collection.json");
        assert_eq!(Collection::href_from("t/u/a.json"), "../../collection.json");
    }
}
