//! The in-memory long-term vector index: one L2-normalised row per active stored note, kept
//! as int8 (per-row scale) in one contiguous matrix and scanned brute-force, or — for
//! characters above [`super::WorkingConfig::ann_from`] notes — in an HNSW graph (`ann.rs`,
//! saved beside the store by `ann_file.rs`); and the batched embedding of missing rows.
//!
//! Int8 rows move a quarter of the bytes of f32 (38 MB instead of 150 MB at 100k × 384), and
//! the scan multiplies them by an int8 copy of each query, sixteen rows per instruction
//! (`block_rows.rs`). The cosine error is a few 1e-3, so notes that close to each other at
//! the k-th place may swap: the seeds therefore re-score a few times k candidates on the
//! stored f32 vectors (`WorkingMemory::seeds`); `soul_tune bench working --check` and `bench
//! recall --working --check` measure the agreement with exact f32 seeds (`bench/README.md`).

use super::ann::AnnRows;
use super::ann_file;
use super::block_rows::{BlockRows, ScanQuery, BLOCK};
use super::scan_memo::{ScanMemo, SCAN_MEMO};
use crate::embedding_cache::text_hash;
use crate::engine::EmbedderChoice;
use crate::error::{Error, Result};
use crate::model::IdMap;
use crate::model::MemoryId;
use crate::retrieval::dot::unit_vector;
use crate::retrieval::top_k::push_top;
use crate::retrieval::{EmbedKind, TextEmbedder};
use rayon::prelude::*;
use serde::Serialize;

/// From this many rows on, [`LongTermIndex::top_k`] scans on the rayon pool (below, one
/// thread: the task overhead would outweigh the split).
const PARALLEL_ROWS: usize = 20_000;

/// Blocks of rows per parallel scan task (8,192 rows: 3 MB of int8 rows at 384 dimensions).
const SCAN_BLOCKS: usize = 8_192 / BLOCK;

/// The seeds' order: higher score first, ties by lower id (a total order on the finite
/// scores kept, so the best k of any split of the rows are the same).
fn best_first(a: &(f32, MemoryId), b: &(f32, MemoryId)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// (note, SHA-256 of its primary text, vector): one row of the `embeddings` table.
pub(super) type VectorRow = crate::store::StoredVector;

pub(super) fn as_dyn(e: &EmbedderChoice) -> &dyn TextEmbedder {
    match e {
        EmbedderChoice::Model(m) => m.as_ref(),
        EmbedderChoice::Hash(h) => h,
    }
}

/// The in-memory long-term index: one normalised row per note, with its note id and text hash
/// in slot order; the rows themselves either scanned brute-force or in an HNSW graph.
#[derive(Debug)]
pub(super) struct LongTermIndex {
    pub(super) dim: usize,
    ids: Vec<MemoryId>,
    hashes: Vec<[u8; 32]>,
    rows: Rows,
    pos: IdMap<usize>,
    // Rows inserted, replaced or removed since the HNSW graph was last saved.
    unsaved: usize,
    // What the rows gave recent query vectors; forgotten whenever a row changes.
    memo: ScanMemo,
}

#[derive(Debug)]
enum Rows {
    /// int8 rows (per-row scale) in blocks of 16 (`block_rows.rs`), scanned brute force.
    Scan(BlockRows),
    /// An HNSW graph keyed by slot ([`AnnRows`]): approximate, O(log n) per query.
    Graph(AnnRows),
}

/// Which kind of long-term index a character has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// Brute-force int8 scan.
    Scan,
    /// HNSW graph (approximate).
    Hnsw,
}

impl LongTermIndex {
    /// An empty brute-force index.
    pub(super) fn new(dim: usize) -> Self {
        Self::with_rows(dim, Rows::Scan(BlockRows::new(dim)))
    }

    /// An empty HNSW index with room for `capacity` rows.
    pub(super) fn new_graph(dim: usize, capacity: usize) -> Result<Self> {
        Ok(Self::with_rows(
            dim,
            Rows::Graph(AnnRows::new(dim, capacity)?),
        ))
    }

    /// The saved HNSW index `ann` whose slots hold `rows` (nothing unsaved).
    pub(super) fn from_saved(dim: usize, ann: AnnRows, rows: Vec<(MemoryId, [u8; 32])>) -> Self {
        let mut index = Self::with_rows(dim, Rows::Graph(ann));
        index.pos.reserve(rows.len());
        for (slot, (id, hash)) in rows.into_iter().enumerate() {
            index.pos.insert(id, slot);
            index.ids.push(id);
            index.hashes.push(hash);
        }
        index
    }

    fn with_rows(dim: usize, rows: Rows) -> Self {
        LongTermIndex {
            dim,
            ids: Vec::new(),
            hashes: Vec::new(),
            rows,
            pos: Default::default(),
            unsaved: 0,
            memo: ScanMemo::new(SCAN_MEMO),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    pub(super) fn kind(&self) -> IndexKind {
        match self.rows {
            Rows::Scan(_) => IndexKind::Scan,
            Rows::Graph(_) => IndexKind::Hnsw,
        }
    }

    pub(super) fn hash_of(&self, id: &MemoryId) -> Option<&[u8; 32]> {
        self.pos.get(id).map(|&i| &self.hashes[i])
    }

    /// (note, text hash) of every row, in slot order.
    pub(super) fn slots(&self) -> impl Iterator<Item = (&MemoryId, &[u8; 32])> {
        self.ids.iter().zip(&self.hashes)
    }

    /// Inserts or replaces the row of each (note, hash, vector). A zero or non-finite vector
    /// removes the note's row (it could never be a seed). Errors on a wrong dimension, before
    /// changing anything. Complexity: O(r·dim) for the scan; for the graph O(r · log n)
    /// searches, on two threads.
    pub(super) fn upsert_rows(&mut self, rows: &[VectorRow]) -> Result<()> {
        if let Some((_, _, v)) = rows.iter().find(|(_, _, v)| v.len() != self.dim) {
            return Err(Error::invalid_argument(
                "embedder",
                format!(
                    "returned a {}-dim vector, the index has {}",
                    v.len(),
                    self.dim
                ),
            ));
        }
        if !rows.is_empty() {
            self.memo.clear();
        }
        let units: Vec<Option<Vec<f32>>> = rows.iter().map(|(_, _, v)| unit_vector(v)).collect();
        // Removals first: a swap-remove moves a slot, which must not happen to a slot queued
        // for the graph below.
        for ((id, _, _), unit) in rows.iter().zip(&units) {
            if unit.is_none() {
                self.remove(id);
            }
        }
        let mut normalised: Vec<(usize, Vec<f32>)> = Vec::with_capacity(rows.len());
        for ((id, hash, _), unit) in rows.iter().zip(units) {
            let Some(row) = unit else {
                continue;
            };
            self.unsaved += 1;
            let slot = match self.pos.get(id) {
                Some(&i) => {
                    self.hashes[i] = *hash;
                    if let Rows::Graph(ann) = &self.rows {
                        ann.remove(i)?;
                    }
                    i
                }
                None => {
                    self.pos.insert(*id, self.ids.len());
                    self.ids.push(*id);
                    self.hashes.push(*hash);
                    self.ids.len() - 1
                }
            };
            match &mut self.rows {
                Rows::Scan(rows) => {
                    if slot == rows.len() {
                        rows.push(&row);
                    } else {
                        rows.set(slot, &row);
                    }
                }
                Rows::Graph(_) => normalised.push((slot, row)),
            }
        }
        if let Rows::Graph(ann) = &self.rows {
            let refs: Vec<(usize, &[f32])> =
                normalised.iter().map(|(s, r)| (*s, r.as_slice())).collect();
            ann.add_many(&refs)?;
        }
        Ok(())
    }

    /// Removes the row of `id` (swap-remove: the last row takes its slot). Complexity: O(dim).
    pub(super) fn remove(&mut self, id: &MemoryId) -> bool {
        let Some(i) = self.pos.remove(id) else {
            return false;
        };
        self.unsaved += 1;
        self.memo.clear();
        let last = self.ids.len() - 1;
        match &mut self.rows {
            Rows::Scan(rows) => rows.swap_remove(i),
            Rows::Graph(ann) => {
                // usearch refuses these only for a read-only (viewed) index or a key it does
                // not hold, neither of which the slot bookkeeping allows. Were it to, a search
                // could return a stale row for a slot: the seeds' exact re-scoring reads the
                // note's real vector, so a recall would still not be wrong, only less sharp.
                let removed = ann.remove(i);
                debug_assert!(removed.is_ok(), "{removed:?}");
                if i != last {
                    let renamed = ann.rename(last, i);
                    debug_assert!(renamed.is_ok(), "{renamed:?}");
                }
            }
        }
        if i != last {
            let moved = self.ids[last];
            self.ids[i] = moved;
            self.hashes[i] = self.hashes[last];
            self.pos.insert(moved, i);
        }
        self.ids.pop();
        self.hashes.pop();
        true
    }

    /// The `k` best rows for each normalised query of `queries`, best first (ties by id).
    /// Scan: by the int8 dot product of the int8 copies, in one pass over the rows
    /// ([`BlockRows::scan`]: all query vectors of a recall against each block of rows while
    /// it is in cache; from [`PARALLEL_ROWS`] rows in chunks on the rayon pool),
    /// O(n·dim·q + n·q·log k).
    /// Graph: one HNSW search per query, O(q · log n). Queries of another dimension get
    /// nothing.
    pub(super) fn top_k(
        &self,
        queries: &[&[f32]],
        k: usize,
        min: Option<f32>,
    ) -> Result<Vec<Vec<(MemoryId, f32)>>> {
        let mut best: Vec<Vec<(f32, MemoryId)>> = vec![Vec::with_capacity(k + 1); queries.len()];
        let usable: Vec<usize> = (0..queries.len())
            .filter(|&p| queries[p].len() == self.dim)
            .collect();
        let keep = |s: f32| min.is_none_or(|m| s >= m) && s.is_finite();
        match &self.rows {
            _ if k == 0 || usable.is_empty() => {}
            Rows::Scan(rows) => {
                let qs: Vec<ScanQuery> =
                    usable.iter().map(|&p| ScanQuery::new(queries[p])).collect();
                let n = rows.len();
                // The best k of blocks lo..hi for each query (score first, ties by id). A
                // score below a full list's last cannot enter it: checked before the id is
                // looked up, so most rows cost one comparison.
                let scan = |(lo, hi): (usize, usize)| -> Vec<Vec<(f32, MemoryId)>> {
                    let mut best = vec![Vec::with_capacity(k + 1); qs.len()];
                    rows.scan(&qs, lo..hi, |first, scores| {
                        for (list, lanes) in best.iter_mut().zip(scores) {
                            let floor = |list: &Vec<(f32, MemoryId)>| match list.last() {
                                Some(l) if list.len() == k => l.0,
                                _ => f32::NEG_INFINITY,
                            };
                            if lanes.iter().all(|&s| s < floor(list)) {
                                continue;
                            }
                            for (lane, &s) in lanes.iter().enumerate() {
                                if s < floor(list) {
                                    continue;
                                }
                                let Some(&id) = self.ids.get(first + lane) else {
                                    break;
                                };
                                if keep(s) {
                                    push_top(list, k, (s, id), best_first);
                                }
                            }
                        }
                    });
                    best
                };
                // A large index is scanned in chunks on the rayon pool; the best k of the
                // union of each chunk's best k are the best k of all (a total order).
                let blocks = rows.blocks();
                let parts: Vec<Vec<Vec<(f32, MemoryId)>>> = if n >= PARALLEL_ROWS {
                    (0..blocks.div_ceil(SCAN_BLOCKS))
                        .into_par_iter()
                        .map(|c| scan((c * SCAN_BLOCKS, ((c + 1) * SCAN_BLOCKS).min(blocks))))
                        .collect()
                } else {
                    vec![scan((0, blocks))]
                };
                for part in parts {
                    for (u, list) in part.into_iter().enumerate() {
                        let Some(into) = usable.get(u).and_then(|&p| best.get_mut(p)) else {
                            continue;
                        };
                        for x in list {
                            push_top(into, k, x, best_first);
                        }
                    }
                }
            }
            Rows::Graph(ann) => {
                for &p in &usable {
                    let list = &mut best[p];
                    for (slot, s) in ann.search(queries[p], k)? {
                        if keep(s) {
                            if let Some(id) = self.ids.get(slot) {
                                list.push((s, *id));
                            }
                        }
                    }
                    list.sort_by(best_first);
                    list.truncate(k);
                }
            }
        }
        Ok(best
            .into_iter()
            .map(|l| l.into_iter().map(|(s, id)| (id, s)).collect())
            .collect())
    }

    /// [`Self::top_k`], with the lists of query vectors asked before (the same bits, `k` and
    /// `min`, the rows unchanged since: `scan_memo.rs`) taken from memory: only the others are
    /// scanned, together. The same lists as [`Self::top_k`] (a query's list does not depend
    /// on the others of its pass). Complexity: O(q·dim) to look the queries up, plus
    /// [`Self::top_k`] for those not remembered.
    pub(super) fn top_k_remembered(
        &mut self,
        queries: &[&[f32]],
        k: usize,
        min: Option<f32>,
    ) -> Result<Vec<Vec<(MemoryId, f32)>>> {
        let mut lists: Vec<Option<Vec<(MemoryId, f32)>>> =
            queries.iter().map(|q| self.memo.get(q, k, min)).collect();
        let asked: Vec<usize> = (0..queries.len()).filter(|&p| lists[p].is_none()).collect();
        if !asked.is_empty() {
            let scanned: Vec<&[f32]> = asked.iter().map(|&p| queries[p]).collect();
            for (&p, list) in asked.iter().zip(self.top_k(&scanned, k, min)?) {
                self.memo.put(queries[p], k, min, list.clone());
                lists[p] = Some(list);
            }
        }
        Ok(lists.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Bytes of vector data held (int8 rows and scales; for the graph, its own accounting of
    /// rows and links). Complexity: O(1).
    pub(super) fn vector_bytes(&self) -> usize {
        match &self.rows {
            Rows::Scan(rows) => rows.bytes(),
            Rows::Graph(ann) => ann.bytes(),
        }
    }

    /// True when the HNSW graph has changed in at least 1 % of its rows since it was saved (or
    /// was never saved): below that, opening repairs the difference cheaply from the store.
    pub(super) fn save_due(&self) -> bool {
        matches!(self.rows, Rows::Graph(_)) && self.unsaved > 0 && self.unsaved * 100 >= self.len()
    }

    /// Saves the HNSW graph beside the store at `store` (nothing for a scan index).
    pub(super) fn save(&mut self, store: &std::path::Path, model: &str) -> Result<()> {
        if let Rows::Graph(ann) = &self.rows {
            let rows: Vec<(MemoryId, [u8; 32])> = self.slots().map(|(id, h)| (*id, *h)).collect();
            ann_file::save(store, model, ann, &rows)?;
            self.unsaved = 0;
        }
        Ok(())
    }
}

/// Embeds `texts` (passage side) and pairs the vectors with `ids` and text hashes.
pub(super) fn embed_rows(
    embedder: &EmbedderChoice,
    ids: impl Iterator<Item = MemoryId>,
    texts: &[&str],
) -> Result<Vec<VectorRow>> {
    let vectors = as_dyn(embedder).embed(texts, EmbedKind::Passage)?;
    Error::check_vector_count("embedder", vectors.len(), texts.len())?;
    Ok(ids
        .zip(texts)
        .zip(vectors)
        .map(|((id, t), v)| (id, text_hash(t), v))
        .collect())
}
