//! The rows of the notes a graph's vectors lost lately ([`RecentRows`]): working memory
//! releases a few hundred notes after every message and loads most of them again a few
//! messages later (four in five at 100k notes), and a note whose texts did not change then
//! gets its rows back as they were instead of its texts going through the embedder again
//! (hashing each text, a cache lookup, a copy, normalising and quantising: half of the index
//! rebuild a recall waits for).

use super::{NodeVectors, ROW_KINDS_LEN};
use crate::model::MemoryId;

/// How many removed notes keep their rows: ~1 KB each at 384 dimensions (two rows of int8
/// and a tag text), ~8 MB in all — some twenty messages' worth of released notes.
pub const RECENT_NODES: usize = 8_192;

/// One removed note's rows: the fingerprint of its texts, its int8 rows and scales field by
/// field, and its tag texts (their vectors are the vocabulary's, looked up when it returns).
#[derive(Debug, Clone)]
pub(super) struct Removed {
    pub(super) signature: u64,
    pub(super) counts: [u32; ROW_KINDS_LEN],
    pub(super) q8: Vec<i8>,
    pub(super) scales: Vec<f32>,
    pub(super) tags: Vec<String>,
}

/// The rows of the [`RECENT_NODES`] notes removed last, by id (made on first use). A cache
/// beside the vectors, not part of them: two [`NodeVectors`] of the same notes are equal
/// whatever they remember, and a copy of the vectors starts with an empty one (up to ~8 MB
/// not copied for what only the vectors' own next rebuild uses).
#[derive(Debug, Default)]
pub(super) struct RecentRows(Option<lru::LruCache<MemoryId, Removed>>);

impl PartialEq for RecentRows {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Clone for RecentRows {
    fn clone(&self) -> Self {
        RecentRows(None)
    }
}

impl RecentRows {
    /// The rows kept for `id` when they were made from the texts of fingerprint `signature`.
    /// Complexity: O(1).
    pub(super) fn get(&self, id: &MemoryId, signature: u64) -> Option<&Removed> {
        self.0
            .as_ref()?
            .peek(id)
            .filter(|r| r.signature == signature)
    }

    /// Remembers the rows of node `j` of `v`, forgetting the oldest beyond [`RECENT_NODES`].
    /// Complexity: O(its rows × dim).
    pub(super) fn put(&mut self, v: &NodeVectors, j: usize) {
        let Some(&id) = v.ids.get(j) else {
            return;
        };
        let mut removed = Removed {
            signature: v.signatures[j],
            counts: [0; ROW_KINDS_LEN],
            q8: Vec::new(),
            scales: Vec::new(),
            tags: v
                .node_tags(j)
                .iter()
                .filter_map(|&t| v.tag_vocab.get(t as usize).cloned())
                .collect(),
        };
        for (ri, f) in v.fields.iter().enumerate() {
            if let Some((a, b)) = v.range(ri, j) {
                let (q8, scales) = f.row_range_q8(a, b, v.dim);
                removed.q8.extend_from_slice(q8);
                removed.scales.extend_from_slice(scales);
                removed.counts[ri] = scales.len() as u32;
            }
        }
        let cap = std::num::NonZeroUsize::new(RECENT_NODES).unwrap_or(std::num::NonZeroUsize::MIN);
        self.0
            .get_or_insert_with(|| lru::LruCache::new(cap))
            .put(id, removed);
    }
}
