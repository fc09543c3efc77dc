//! Stored embeddings of notes (per model, with the hash of the embedded text) and the
//! brute-force nearest-note search over them.

use super::*;

/// Stores one note's vector under a model (`?1` note id, `?2` model, `?3` text hash, `?4`
/// dimension, `?5` little-endian f32 bytes), replacing the one it had in place: the row keeps
/// its `id`, so a replica's changeset updates that row instead of deleting and inserting.
pub(super) const PUT_EMBEDDING: &str =
    "INSERT INTO embeddings (note_id, model, text_hash, dim, vec) VALUES (?1, ?2, ?3, ?4, ?5)
     ON CONFLICT (note_id, model) DO UPDATE
     SET text_hash = excluded.text_hash, dim = excluded.dim, vec = excluded.vec";

/// One stored vector: the note, the SHA-256 of the embedded text, the vector.
pub type StoredVector = (MemoryId, [u8; 32], Vec<f32>);

impl Store {
    /// Stores the embedding of a note under `model`, with the SHA-256 of the embedded text (so
    /// a changed text is detected; see [`crate::embedding_cache::text_hash`]).
    pub fn put_embedding(
        &mut self,
        id: &MemoryId,
        model: &str,
        text_hash: &[u8; 32],
        vector: &[f32],
    ) -> Result<()> {
        let (s, m) = (id.to_string(), model.to_owned());
        let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
        self.write(|c, p| {
            c.execute(
                PUT_EMBEDDING,
                params![s, m, &text_hash[..], vector.len() as i64, bytes],
            )
            .map(|_| ())
            .map_err(|e| db_err(p, e))
        })?;
        self.vectors_written += 1;
        Ok(())
    }

    /// The stored embedding of a note under `model`: (text hash, vector).
    pub fn embedding(&self, id: &MemoryId, model: &str) -> Result<Option<([u8; 32], Vec<f32>)>> {
        let found = self.vectors_of(model, std::slice::from_ref(id))?;
        Ok(found.into_iter().next().map(|(_, hash, v)| (hash, v)))
    }

    /// Brute-force nearest active notes to `query` by cosine similarity under `model`, best
    /// first. Seeds for [`Store::activate`].
    ///
    /// Complexity: O(n·d) reading every vector of the model from disk — fine up to ~100k notes
    /// of 384–1024 dims (tens to a few hundred ms); beyond that keep an in-memory or ANN index.
    pub fn nearest(
        &self,
        model: &str,
        query: &[f32],
        top_k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        let qn = norm(query);
        if qn == 0.0 || top_k == 0 {
            return Ok(Vec::new());
        }
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT e.note_id, e.vec FROM embeddings e JOIN notes n ON n.id = e.note_id
                 WHERE e.model=?1 AND n.archived=0",
            )
            .map_err(|e| db_err(&self.path, e))?;
        let rows = st.query([model]).map_err(|e| db_err(&self.path, e))?;
        let mut out = [Vec::new()];
        self.cosines(rows, &[query], &[qn], &mut out)?;
        let [mut scored] = out;
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(top_k);
        Ok(scored)
    }

    /// The cosine similarity of each of `queries` to the stored vectors under `model` of the
    /// notes `ids` (archived or not; notes without a vector of a query's length are absent
    /// from its list), computed as [`Store::nearest`] does, reading the vectors in one
    /// statement: the exact re-ranking of candidates found on a quantised copy. One list per
    /// query, in order. Complexity: O(|ids| · (log rows + dim · queries)).
    pub fn cosines_of(
        &self,
        model: &str,
        queries: &[&[f32]],
        ids: &[MemoryId],
    ) -> Result<Vec<Vec<(MemoryId, f32)>>> {
        let mut out: Vec<Vec<(MemoryId, f32)>> = vec![Vec::new(); queries.len()];
        let norms = query_norms(queries);
        if ids.is_empty() || norms.iter().all(|&n| n == 0.0) {
            return Ok(out);
        }
        for (id, _, v) in self.vectors_of(model, ids)? {
            for (p, c) in stored_cosines(&v, queries, &norms) {
                if let Some(list) = out.get_mut(p) {
                    list.push((id, c));
                }
            }
        }
        Ok(out)
    }

    /// The stored vectors under `model` of the notes `ids` that have one, with the hash of the
    /// embedded text, in one statement (in no particular order): what
    /// [`Self::cosines_of`] scores, for a caller that also keeps them.
    /// Complexity: O(|ids| · (log rows + dim)).
    pub fn vectors_of(&self, model: &str, ids: &[MemoryId]) -> Result<Vec<StoredVector>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT note_id, text_hash, vec FROM embeddings WHERE model=?2 AND note_id IN {ID_LIST}"
            ))
            .map_err(|e| db_err(&self.path, e))?;
        let mut rows = st
            .query(params![id_list(ids)?, model])
            .map_err(|e| db_err(&self.path, e))?;
        let mut out = Vec::with_capacity(ids.len());
        while let Some(r) = rows.next().map_err(|e| db_err(&self.path, e))? {
            let id = MemoryId(parse_id(&self.path, text_column(&self.path, r, 0)?)?);
            let hash: [u8; 32] = blob_column(&self.path, r, 1)?
                .try_into()
                .map_err(|_| corrupt(&self.path, "embedding text hash is not 32 bytes"))?;
            out.push((
                id,
                hash,
                decode_vec(&self.path, blob_column(&self.path, r, 2)?)?,
            ));
        }
        Ok(out)
    }

    /// Appends to `out[p]` the cosine of query `p` (norm `norms[p]`) to each `(note_id, vec)`
    /// row of a vector of its length.
    fn cosines(
        &self,
        mut rows: rusqlite::Rows<'_>,
        queries: &[&[f32]],
        norms: &[f32],
        out: &mut [Vec<(MemoryId, f32)>],
    ) -> Result<()> {
        while let Some(r) = rows.next().map_err(|e| db_err(&self.path, e))? {
            let id = text_column(&self.path, r, 0)?;
            let v = decode_vec(&self.path, blob_column(&self.path, r, 1)?)?;
            // The id is parsed only for a row some query scores.
            let mut parsed = None;
            for (p, c) in stored_cosines(&v, queries, norms) {
                let id = match parsed {
                    Some(id) => id,
                    None => *parsed.insert(MemoryId(parse_id(&self.path, id)?)),
                };
                if let Some(list) = out.get_mut(p) {
                    list.push((id, c));
                }
            }
        }
        Ok(())
    }

    /// [`Store::put_embedding`] for many notes under one `model`, in ONE transaction:
    /// `(note, SHA-256 of the embedded text, vector)`.
    ///
    /// Complexity: O(rows × dim).
    pub fn put_embeddings(&mut self, model: &str, rows: &[StoredVector]) -> Result<()> {
        self.write(|c, p| {
            let mut st = c.prepare_cached(PUT_EMBEDDING).map_err(|e| db_err(p, e))?;
            for (id, hash, vector) in rows {
                let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
                st.execute(params![
                    id.to_string(),
                    model,
                    &hash[..],
                    vector.len() as i64,
                    bytes
                ])
                .map_err(|e| db_err(p, e))?;
            }
            Ok(())
        })?;
        self.vectors_written += 1;
        Ok(())
    }
}

/// The norms of `queries`, as [`stored_cosines`] takes them. Complexity: O(Σ dim).
pub(crate) fn query_norms(queries: &[&[f32]]) -> Vec<f32> {
    queries.iter().map(|q| norm(q)).collect()
}

/// The cosine of stored vector `v` with each of `queries` (norms `norms`, from
/// [`query_norms`]) as `(query position, cosine)`, skipping a query of another length and a
/// zero vector: how [`Store::cosines_of`] and [`Store::nearest`] score a row.
/// Complexity: O(dim · queries).
pub(crate) fn stored_cosines<'a>(
    v: &'a [f32],
    queries: &'a [&[f32]],
    norms: &'a [f32],
) -> impl Iterator<Item = (usize, f32)> + 'a {
    let vn = norm(v);
    queries
        .iter()
        .zip(norms)
        .enumerate()
        .filter_map(move |(p, (q, &qn))| cosine(v, vn, q, qn).map(|c| (p, c)))
}

/// The cosine of `v` (norm `vn`) and `query` (norm `qn`); `None` when their lengths differ or
/// either is zero.
fn cosine(v: &[f32], vn: f32, query: &[f32], qn: f32) -> Option<f32> {
    if v.len() != query.len() || vn <= 0.0 || qn == 0.0 {
        return None;
    }
    let dot: f32 = v.iter().zip(query).map(|(a, b)| a * b).sum();
    Some(dot / (vn * qn))
}
