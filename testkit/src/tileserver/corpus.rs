//! The tile server's corpus: every tile's bytes in one mapping.

use std::collections::HashMap;
use std::sync::Arc;

/// Every distinct tile's bytes, packed in one anonymous mapping, and where
/// each name's bytes lie in it.
///
/// One mapping on transparent huge pages rather than a vector per tile: in
/// the raster bench the server reads each tile from memory that the
/// pipeline's work has pushed out of the caches, and on 4 KiB pages most of
/// that read was page walks (the server's CPU per tile 0.46-0.89 ms on 4 KiB
/// pages, 0.29-0.38 on 2 MiB pages). The hint is advice: where the kernel
/// gives no huge pages the corpus works the same.
pub(super) struct Corpus {
    pub(super) bytes: memmap2::Mmap,
    pub(super) tiles: HashMap<String, std::ops::Range<usize>>,
}

impl Corpus {
    pub(super) fn pack(
        tiles: impl IntoIterator<Item = (String, impl Into<Arc<Vec<u8>>>)>,
    ) -> std::io::Result<Self> {
        let tiles: Vec<(String, Arc<Vec<u8>>)> =
            tiles.into_iter().map(|(k, v)| (k, v.into())).collect();
        // Names that share one `Arc` share one copy of its bytes.
        let mut at: HashMap<*const Vec<u8>, std::ops::Range<usize>> = HashMap::new();
        let mut distinct = Vec::new();
        let mut len = 0;
        for (_, bytes) in &tiles {
            at.entry(Arc::as_ptr(bytes)).or_insert_with(|| {
                let range = len..len + bytes.len();
                len = range.end;
                distinct.push((Arc::clone(bytes), range.clone()));
                range
            });
        }
        // A mapping cannot be empty.
        let mut map = memmap2::MmapMut::map_anon(len.max(1))?;
        // Advice only: without transparent huge pages the bytes are the same.
        let _ = map.advise(memmap2::Advice::HugePage);
        for (bytes, range) in distinct {
            map[range].copy_from_slice(&bytes);
        }
        let tiles = tiles
            .iter()
            .map(|(name, bytes)| (name.clone(), at[&Arc::as_ptr(bytes)].clone()))
            .collect();
        Ok(Corpus {
            bytes: map.make_read_only()?,
            tiles,
        })
    }

    pub(super) fn get(&self, name: &str) -> Option<&[u8]> {
        self.tiles.get(name).map(|r| &self.bytes[r.clone()])
    }
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus")
            .field("tiles", &self.tiles.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}
