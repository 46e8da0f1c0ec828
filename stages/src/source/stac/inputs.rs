//! An item's inputs: one per asset key asked for, named `ITEM_ASSET`, its
//! href resolved and checked, with what the write stage dates an output
//! by; or a failed item saying what is missing. The same for an item of a
//! JSON document and a row of a stac-geoparquet file.

use std::collections::VecDeque;

use serde_json::{Map, Value};
use url::Url;
use warpline_engine::{Input, SourceError};

use super::read::{link, resolve, Item};
use crate::source::{Ids, Schemes};

/// What an input or a failed item is, as the source hands it on.
pub(super) type Taken = Result<Input, SourceError>;

/// Makes the inputs of items, with ids unique over the run.
pub(super) struct Maker {
    pub(super) assets: Vec<String>,
    pub(super) schemes: Schemes,
    pub(super) ids: Ids,
    /// Items seen (with an id).
    pub(super) items: u64,
}

impl Maker {
    /// One input per asset asked for, or a failed item saying what is
    /// missing, onto `out`; `what` says where the item is (a document's
    /// item, or a file's row: `row` says so, and a missing asset's
    /// message names it, as the row is no document of its own).
    pub(super) fn item(
        &mut self,
        item: Item,
        from: &Url,
        what: &str,
        row: bool,
        out: &mut VecDeque<Taken>,
    ) {
        let Some(id) = item.id.clone().filter(|i| !i.is_empty()) else {
            out.push_back(Err(SourceError {
                id: what.to_owned(),
                message: format!("{what}: a STAC item without an id"),
            }));
            return;
        };
        self.items += 1;
        // Relative hrefs are resolved against the item's own address.
        let base = link(&item.links, "self")
            .and_then(|l| l.href.as_deref())
            .and_then(|h| from.join(h).ok())
            .unwrap_or_else(|| from.clone());
        for key in &self.assets {
            let name = self.ids.named(&format!("{id}_{key}"));
            let input = match item.assets.get(key).and_then(|a| a.href.as_deref()) {
                None => Err(missing(&id, key, &item, row.then_some(what))),
                Some(href) => resolve(href, &base)
                    .and_then(|source| self.schemes.check(&source))
                    .map_err(|m| format!("item {id:?}, asset {key:?}: {m}")),
            };
            out.push_back(match input {
                Ok(source) => Ok(Input {
                    id: name,
                    source,
                    size_hint: None,
                    meta: stac_meta(&item, &id, key),
                }),
                Err(message) => Err(SourceError { id: name, message }),
            });
        }
    }
}

/// What an input made of asset `key` of `item` carries to the write
/// stage: `meta["stac"]`, the item's id, collection, asset key and times
/// (an output's STAC item is dated by them).
fn stac_meta(item: &Item, id: &str, key: &str) -> warpline_engine::item::Meta {
    let times = &item.properties;
    let mut stac = Map::new();
    stac.insert("item".to_owned(), Value::from(id));
    stac.insert("asset".to_owned(), Value::from(key));
    let fields = [
        ("collection", &item.collection),
        ("datetime", &times.datetime),
        ("start_datetime", &times.start_datetime),
        ("end_datetime", &times.end_datetime),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            stac.insert(name.to_owned(), Value::from(v.as_str()));
        }
    }
    std::iter::once(("stac".to_owned(), Value::Object(stac))).collect()
}

/// Why an item gives no input for `key`; `row` says which row of which
/// file it is.
fn missing(id: &str, key: &str, item: &Item, row: Option<&str>) -> String {
    let at = row.map_or_else(String::new, |r| format!(" ({r})"));
    if item.assets.contains_key(key) {
        return format!("item {id:?}: asset {key:?} has no href{at}");
    }
    let keys: Vec<&str> = item.assets.keys().map(String::as_str).collect();
    format!(
        "item {id:?} has no asset {key:?} (its assets: {}){at}",
        if keys.is_empty() {
            "none".to_owned()
        } else {
            keys.join(", ")
        }
    )
}
