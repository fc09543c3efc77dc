//! The in-memory long-term vector index: one L2-normalised row per active stored note,
//! contiguous, scanned brute-force; and the batched embedding of missing rows.

use crate::embedding_cache::text_hash;
use crate::engine::EmbedderChoice;
use crate::error::{Error, Result};
use crate::model::MemoryId;
use crate::retrieval::dot::dot;
use crate::retrieval::{EmbedKind, TextEmbedder};
use std::collections::HashMap;

/// (note, SHA-256 of its primary text, vector): one row of the `embeddings` table.
pub(super) type VectorRow = (MemoryId, [u8; 32], Vec<f32>);

pub(super) fn as_dyn(e: &EmbedderChoice) -> &dyn TextEmbedder {
    match e {
        EmbedderChoice::Model(m) => m.as_ref(),
        EmbedderChoice::Hash(h) => h,
    }
}

/// The in-memory long-term index: one normalised row per note, contiguous.
#[derive(Debug, Clone)]
pub(super) struct LongTermIndex {
    pub(super) dim: usize,
    ids: Vec<MemoryId>,
    hashes: Vec<[u8; 32]>,
    data: Vec<f32>,
    pos: HashMap<MemoryId, usize>,
}

impl LongTermIndex {
    pub(super) fn new(dim: usize) -> Self {
        LongTermIndex {
            dim,
            ids: Vec::new(),
            hashes: Vec::new(),
            data: Vec::new(),
            pos: HashMap::new(),
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
        let row = v.iter().map(|x| x / norm);
        match self.pos.get(&id) {
            Some(&i) => {
                for (d, s) in self.data[i * self.dim..(i + 1) * self.dim]
                    .iter_mut()
                    .zip(row)
                {
                    *d = s;
                }
                self.hashes[i] = hash;
            }
            None => {
                self.pos.insert(id, self.ids.len());
                self.ids.push(id);
                self.hashes.push(hash);
                self.data.extend(row);
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
            self.data.copy_within(last * d..(last + 1) * d, i * d);
            self.ids[i] = moved;
            self.hashes[i] = self.hashes[last];
            self.pos.insert(moved, i);
        }
        self.ids.pop();
        self.hashes.pop();
        self.data.truncate(last * self.dim);
        true
    }

    /// The `k` best rows for a normalised query, best first (ties by id).
    /// Complexity: O(n·dim + n·log k).
    pub(super) fn top_k(&self, q: &[f32], k: usize, min: Option<f32>) -> Vec<(MemoryId, f32)> {
        let mut best: Vec<(f32, MemoryId)> = Vec::with_capacity(k + 1);
        if k == 0 || q.len() != self.dim {
            return Vec::new();
        }
        for (i, row) in self.data.chunks_exact(self.dim).enumerate() {
            let s = dot(q, row);
            if min.is_some_and(|m| s < m) || !s.is_finite() {
                continue;
            }
            if best.len() == k {
                let worst = best[k - 1];
                if s < worst.0 || (s == worst.0 && self.ids[i] > worst.1) {
                    continue;
                }
            }
            let id = self.ids[i];
            let at = best.partition_point(|(bs, bid)| *bs > s || (*bs == s && *bid < id));
            best.insert(at, (s, id));
            best.truncate(k);
        }
        best.into_iter().map(|(s, id)| (id, s)).collect()
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
