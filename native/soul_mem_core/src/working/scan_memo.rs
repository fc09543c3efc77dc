//! The long-term index's answers to recent query vectors, kept until the index changes.
//!
//! A chat message is embedded as its text and up to four keywords, and the keywords come back
//! (names, places, the topic of the week): their vectors come from the embedding cache and
//! are the same to the bit, and so is what the scan of an unchanged index proposes for them.
//! Scanning 100k rows costs the same for every query vector of a pass (sixteen rows per
//! instruction per query, `block_rows.rs`), so a message whose keywords were asked before
//! scans for its text alone. Any change of the index's rows forgets every answer
//! ([`ScanMemo::clear`], called by the index's writers), so a remembered list is always the
//! one a scan would give.

use std::num::NonZeroUsize;

use crate::model::MemoryId;

/// Query vectors remembered (a few hundred keywords; ~2 KB each with their lists).
pub(super) const SCAN_MEMO: usize = 512;

/// One question asked of the index: the query's bits, how many it wanted, above what floor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Asked {
    query: Box<[u32]>,
    k: usize,
    floor: Option<u32>,
}

impl Asked {
    fn new(query: &[f32], k: usize, floor: Option<f32>) -> Self {
        Asked {
            query: query.iter().map(|x| x.to_bits()).collect(),
            k,
            floor: floor.map(f32::to_bits),
        }
    }
}

/// A query's candidates, best first (what [`super::index::LongTermIndex::top_k`] gives).
type Candidates = Vec<(MemoryId, f32)>;

/// The candidate lists of the last [`SCAN_MEMO`] query vectors, by the query's exact bits,
/// `k` and floor.
#[derive(Debug)]
pub(super) struct ScanMemo {
    lists: Option<lru::LruCache<Asked, Candidates, foldhash::fast::RandomState>>,
}

impl ScanMemo {
    /// Room for `capacity` lists (0: remembers nothing).
    pub(super) fn new(capacity: usize) -> Self {
        ScanMemo {
            lists: NonZeroUsize::new(capacity)
                .map(|c| lru::LruCache::with_hasher(c, foldhash::fast::RandomState::default())),
        }
    }

    /// The list remembered for `query` (asked with the same `k` and `floor`).
    /// Complexity: O(dim) to hash the query.
    pub(super) fn get(
        &mut self,
        query: &[f32],
        k: usize,
        floor: Option<f32>,
    ) -> Option<Candidates> {
        self.lists
            .as_mut()?
            .get(&Asked::new(query, k, floor))
            .cloned()
    }

    /// Remembers `list` as the answer to `query`, forgetting the least recently used.
    pub(super) fn put(&mut self, query: &[f32], k: usize, floor: Option<f32>, list: Candidates) {
        if let Some(lists) = self.lists.as_mut() {
            lists.put(Asked::new(query, k, floor), list);
        }
    }

    /// Forgets every list: the index changed.
    pub(super) fn clear(&mut self) {
        if let Some(lists) = self.lists.as_mut() {
            lists.clear();
        }
    }
}
