//! The in-memory long-term vector index: one L2-normalised row per active stored note, kept
//! as int8 (per-row scale) in one contiguous matrix and scanned brute-force; and the batched
//! embedding of missing rows.
//!
//! Int8 rows move a quarter of the bytes of f32 (38 MB instead of 150 MB at 100k × 384), and
//! the scan is bound by memory bandwidth. The cosine error is about 1e-3, so two notes within
//! that of each other at the k-th place may swap: the seeds therefore re-score a few times k
//! candidates on the stored f32 vectors (`WorkingMemory::seeds`); `soul_tune bench working`
//! measures the agreement with exact f32 seeds (see `bench/README.md`).

use crate::embedding_cache::text_hash;
use crate::engine::EmbedderChoice;
use crate::error::{Error, Result};
use crate::model::IdMap;
use crate::model::MemoryId;
use crate::retrieval::field_vectors::{quantise_q8, QVec};
use crate::retrieval::{EmbedKind, TextEmbedder};

/// (note, SHA-256 of its primary text, vector): one row of the `embeddings` table.
pub(super) type VectorRow = (MemoryId, [u8; 32], Vec<f32>);

pub(super) fn as_dyn(e: &EmbedderChoice) -> &dyn TextEmbedder {
    match e {
        EmbedderChoice::Model(m) => m.as_ref(),
        EmbedderChoice::Hash(h) => h,
    }
}

/// The in-memory long-term index: one normalised row per note, int8, contiguous.
#[derive(Debug, Clone)]
pub(super) struct LongTermIndex {
    pub(super) dim: usize,
    ids: Vec<MemoryId>,
    hashes: Vec<[u8; 32]>,
    q8: Vec<i8>,
    scales: Vec<f32>,
    pos: IdMap<usize>,
}

impl LongTermIndex {
    pub(super) fn new(dim: usize) -> Self {
        LongTermIndex {
            dim,
            ids: Vec::new(),
            hashes: Vec::new(),
            q8: Vec::new(),
            scales: Vec::new(),
            pos: Default::default(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    pub(super) fn hash_of(&self, id: &MemoryId) -> Option<&[u8; 32]> {
        self.pos.get(id).map(|&i| &self.hashes[i])
    }

    /// Inserts or replaces the row of `id`. A zero or non-finite vector removes it (it could
    /// never be a seed). Errors on a wrong dimension. Complexity: O(dim).
    pub(super) fn upsert(&mut self, id: MemoryId, hash: [u8; 32], v: &[f32]) -> Result<()> {
        if v.len() != self.dim {
            return Err(Error::invalid_argument(
                "embedder",
                format!(
                    "returned a {}-dim vector, the index has {}",
                    v.len(),
                    self.dim
                ),
            ));
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            self.remove(&id);
            return Ok(());
        }
        let row: Vec<f32> = v.iter().map(|x| x / norm).collect();
        match self.pos.get(&id) {
            Some(&i) => {
                let mut q = Vec::with_capacity(self.dim);
                self.scales[i] = quantise_q8(&row, &mut q);
                self.q8[i * self.dim..(i + 1) * self.dim].copy_from_slice(&q);
                self.hashes[i] = hash;
            }
            None => {
                self.pos.insert(id, self.ids.len());
                self.ids.push(id);
                self.hashes.push(hash);
                let scale = quantise_q8(&row, &mut self.q8);
                self.scales.push(scale);
            }
        }
        Ok(())
    }

    /// Removes the row of `id` (swap-remove). Complexity: O(dim).
    pub(super) fn remove(&mut self, id: &MemoryId) -> bool {
        let Some(i) = self.pos.remove(id) else {
            return false;
        };
        let last = self.ids.len() - 1;
        if i != last {
            let (d, moved) = (self.dim, self.ids[last]);
            self.q8.copy_within(last * d..(last + 1) * d, i * d);
            self.scales[i] = self.scales[last];
            self.ids[i] = moved;
            self.hashes[i] = self.hashes[last];
            self.pos.insert(moved, i);
        }
        self.ids.pop();
        self.hashes.pop();
        self.scales.pop();
        self.q8.truncate(last * self.dim);
        true
    }

    /// The `k` best rows for each normalised query of `queries`, best first (ties by id), by
    /// the int8 dot product, in one pass over the rows ([`QVec::for_each_dot_q8_many`]: a
    /// recall's several query vectors cost about one scan). Queries of another dimension get
    /// nothing. Complexity: O(n·dim·q + n·q·log k) for q queries.
    pub(super) fn top_k(
        &self,
        queries: &[&[f32]],
        k: usize,
        min: Option<f32>,
    ) -> Vec<Vec<(MemoryId, f32)>> {
        let mut best: Vec<Vec<(f32, MemoryId)>> = vec![Vec::with_capacity(k + 1); queries.len()];
        let usable: Vec<usize> = (0..queries.len())
            .filter(|&p| queries[p].len() == self.dim)
            .collect();
        if k > 0 && !usable.is_empty() {
            let qs: Vec<QVec> = usable
                .iter()
                .map(|&p| QVec::new(queries[p].to_vec()))
                .collect();
            QVec::for_each_dot_q8_many(&qs, &self.q8, &self.scales, |i, u, s| {
                if min.is_some_and(|m| s < m) || !s.is_finite() {
                    return;
                }
                let list = &mut best[usable[u]];
                if list.len() == k {
                    let worst = list[k - 1];
                    if s < worst.0 || (s == worst.0 && self.ids[i] > worst.1) {
                        return;
                    }
                }
                let id = self.ids[i];
                let at = list.partition_point(|(bs, bid)| *bs > s || (*bs == s && *bid < id));
                list.insert(at, (s, id));
                list.truncate(k);
            });
        }
        best.into_iter()
            .map(|l| l.into_iter().map(|(s, id)| (id, s)).collect())
            .collect()
    }

    /// Bytes of vector data held. Complexity: O(1).
    pub(super) fn vector_bytes(&self) -> usize {
        self.q8.len() + 4 * self.scales.len()
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
