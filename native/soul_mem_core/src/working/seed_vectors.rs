//! The stored f32 vectors of recent seed candidates, so the seeds' exact re-scoring reads from
//! the store only the candidates it has not read lately. A chat keeps returning to the same
//! people and places, and the int8 scan proposes ~100 candidates a message: reading each one's
//! row through SQLite (an index descent, a page-cache lookup or a read from the file, a blob
//! decoded) cost ~10 µs, ~1 ms a message at 100k notes.
//!
//! An entry is the row the store holds, or nothing:
//! - it is used only when its text hash is the one the long-term index holds for the note
//!   (working memory writes a note's vector together with its index row);
//! - any other writer of vectors or notes moves the store's [`Store::vectors_tag`] or
//!   [`SyncTag`] past the ones recorded, and the next use drops everything; working memory's
//!   own writes advance them ([`SeedVectors::wrote`], [`SeedVectors::wrote_vectors`]).
//!
//! Scores are those of [`Store::cosines_of`] to the bit: the same function computes them
//! (`stored_cosines`).

use crate::error::Result;
use crate::graph::SyncTag;
use crate::model::{IdMap, MemoryId};
use crate::store::{query_norms, stored_cosines, Store};
use std::num::NonZeroUsize;

/// Candidates kept: ~40 messages' worth, 1.5 KB each at 384 dimensions (~6 MB).
pub(super) const SEED_VECTORS: usize = 4096;

/// A held vector: the hash of its text, and its values.
type Held = ([u8; 32], Box<[f32]>);

/// The cache (see the module doc). Capacity 0 keeps nothing.
#[derive(Debug)]
pub(super) struct SeedVectors {
    rows: Option<lru::LruCache<MemoryId, Held>>,
    /// The store's state the entries match: its note and vector write counts.
    seen: Option<(SyncTag, u64)>,
}

impl SeedVectors {
    /// An empty cache of at most `capacity` vectors.
    pub(super) fn new(capacity: usize) -> Self {
        SeedVectors {
            rows: NonZeroUsize::new(capacity).map(lru::LruCache::new),
            seen: None,
        }
    }

    /// Drops everything unless the store is still as the entries know it.
    /// Complexity: O(1) when current, else O(entries).
    fn check(&mut self, store: &Store) {
        self.advance(store, None);
    }

    /// Records one successful note write of working memory (`before`: the store's tag before
    /// it): the entries stay when nothing else had written since they were read.
    /// Complexity: O(1), or O(entries) when another writer had.
    pub(super) fn wrote(&mut self, store: &Store, before: SyncTag) {
        self.advance(store, Some((before, store.vectors_tag())));
    }

    /// Records one successful write of the vectors of `ids` by working memory (`before`: the
    /// store's [`Store::vectors_tag`] before it): their entries go (their index rows take the
    /// new text hashes next, but an error in between must not serve an old vector), the
    /// others stay when nothing else had written since they were read.
    /// Complexity: O(ids), or O(entries) when another writer had.
    pub(super) fn wrote_vectors<'a>(
        &mut self,
        store: &Store,
        before: u64,
        ids: impl IntoIterator<Item = &'a MemoryId>,
    ) {
        self.advance(store, Some((store.sync_tag(), before)));
        if let Some(rows) = self.rows.as_mut() {
            for id in ids {
                rows.pop(id);
            }
        }
    }

    /// Keeps the entries when they match `expected` (the store as they know it; `None`: the
    /// store as it is now), else drops them; then records the store as it is now.
    fn advance(&mut self, store: &Store, expected: Option<(SyncTag, u64)>) {
        let now = (store.sync_tag(), store.vectors_tag());
        if self.seen != Some(expected.unwrap_or(now)) {
            if let Some(rows) = self.rows.as_mut() {
                rows.clear();
            }
        }
        self.seen = Some(now);
    }

    /// The cosine of each of `queries` to the stored vector under `model` of each candidate
    /// (`(note, the text hash the long-term index holds for it)`), one map per query, in
    /// order: what [`Store::cosines_of`] gives, reading only the candidates not held for that
    /// hash (in one statement) and keeping what it read.
    ///
    /// Complexity: O(candidates · dim · queries) plus the reads of the candidates not held.
    pub(super) fn cosines(
        &mut self,
        store: &Store,
        model: &str,
        queries: &[&[f32]],
        candidates: &[(MemoryId, Option<[u8; 32]>)],
    ) -> Result<Vec<IdMap<f32>>> {
        self.check(store);
        let mut out: Vec<IdMap<f32>> = vec![IdMap::default(); queries.len()];
        let norms = query_norms(queries);
        let score = |out: &mut [IdMap<f32>], id: MemoryId, v: &[f32]| {
            for (p, c) in stored_cosines(v, queries, &norms) {
                if let Some(scores) = out.get_mut(p) {
                    scores.insert(id, c);
                }
            }
        };
        let mut missing = Vec::new();
        for (id, hash) in candidates {
            let held = self.rows.as_mut().and_then(|rows| rows.get(id));
            match held {
                Some((h, v)) if Some(*h) == *hash => score(&mut out, *id, v),
                _ => missing.push(*id),
            }
        }
        for (id, hash, v) in store.vectors_of(model, &missing)? {
            score(&mut out, id, &v);
            if let Some(rows) = self.rows.as_mut() {
                rows.put(id, (hash, v.into_boxed_slice()));
            }
        }
        Ok(out)
    }
}
