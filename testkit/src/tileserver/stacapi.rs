//! A STAC API the tile server answers at `/search` ([`StacApi`]): a search
//! of generated items, page after page through `next` links
//! (`/search?page=K`), each item with one asset that is a tile of the
//! server. Pages go through the server's faults as tiles do: the strict
//! limit and the spell of 503s count them, and a [`Fault`](super::Fault)
//! on a page's name (`search?page=K`) resets, fails or throttles it.

use std::sync::atomic::{AtomicU64, Ordering};

/// The items a tile server's `/search` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StacApi {
    /// Items in all, `item-00000` on.
    pub items: u32,
    /// Items a page.
    pub per_page: u32,
    /// The asset key of each item's one asset.
    pub asset: String,
}

impl StacApi {
    /// `items` items, `per_page` a page, each with asset `B04` at the
    /// server's tile named by [`StacApi::tile`].
    pub fn new(items: u32, per_page: u32) -> Self {
        StacApi {
            items,
            per_page: per_page.max(1),
            asset: "B04".to_owned(),
        }
    }

    /// The tile item `n`'s asset is (serve one of this name per item).
    pub fn tile(n: u32) -> String {
        format!("item-{n:05}.tif")
    }

    /// The pages the search has.
    pub fn pages(&self) -> u32 {
        self.items.div_ceil(self.per_page).max(1)
    }

    /// The page number a request's path asks for (`/search`,
    /// `/search?page=K&...`), from 1; `None` for another path.
    pub(super) fn page_of(path: &str) -> Option<u32> {
        let rest = path.strip_prefix("/search")?;
        if !(rest.is_empty() || rest.starts_with('?')) {
            return None;
        }
        let page = rest
            .trim_start_matches('?')
            .split('&')
            .find_map(|kv| kv.strip_prefix("page="))
            .map_or(Some(1), |k| k.parse().ok())?;
        Some(page)
    }

    /// Page `page` (from 1) as an ItemCollection, `None` past the last.
    pub(super) fn page(&self, page: u32) -> Option<Vec<u8>> {
        if page == 0 || page > self.pages() {
            return None;
        }
        let first = (page - 1) * self.per_page;
        let last = (first + self.per_page).min(self.items);
        let features: Vec<String> = (first..last)
            .map(|n| {
                format!(
                    r#"{{"type":"Feature","stac_version":"1.0.0","id":"item-{n:05}","collection":"generated","properties":{{"datetime":"2024-06-01T00:00:00Z"}},"links":[],"assets":{{"{}":{{"href":"/tiles/{}"}}}}}}"#,
                    self.asset,
                    Self::tile(n)
                )
            })
            .collect();
        let next = if page < self.pages() {
            format!(r#"{{"rel":"next","href":"/search?page={}"}}"#, page + 1)
        } else {
            String::new()
        };
        let body = format!(
            r#"{{"type":"FeatureCollection","features":[{}],"links":[{next}]}}"#,
            features.join(",")
        );
        Some(body.into_bytes())
    }
}

/// What the server did with page requests.
#[derive(Debug, Default)]
pub(super) struct PageStats {
    pub(super) asked: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) served: AtomicU64,
}

/// What the server did with page requests, so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCounts {
    /// Page requests that arrived.
    pub asked: u64,
    /// Answered 429 or 503 (the strict limit, a throttle fault, a spell
    /// of 503s).
    pub refused: u64,
    /// Answered with the whole page.
    pub served: u64,
}

impl PageStats {
    pub(super) fn counts(&self) -> PageCounts {
        PageCounts {
            asked: self.asked.load(Ordering::SeqCst),
            refused: self.refused.load(Ordering::SeqCst),
            served: self.served.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_link_to_the_next() {
        let api = StacApi::new(5, 2);
        assert_eq!(api.pages(), 3);
        assert_eq!(StacApi::page_of("/search"), Some(1));
        assert_eq!(StacApi::page_of("/search?limit=2&page=3"), Some(3));
        assert_eq!(StacApi::page_of("/searching"), None);
        let last = String::from_utf8(api.page(3).unwrap()).unwrap();
        assert!(last.contains(r#""id":"item-00004""#), "{last}");
        assert!(!last.contains("next"), "{last}");
        let first = String::from_utf8(api.page(1).unwrap()).unwrap();
        assert!(first.contains("/search?page=2"), "{first}");
        assert!(api.page(4).is_none());
    }
}
