//! Working-memory activation (design: 工作记忆 is the activated subgraph of 长期记忆; the
//! seed's Beta retrieval flow). A character's long-term memory lives in its [`Store`]; the
//! [`Engine`] holds only a working subgraph of it, and [`WorkingMemory`] decides what is in it:
//!
//! 1. **Long-term vector index.** One vector per active stored note (its primary text, see
//!    [`primary_text`]) for the embedder in use, kept in memory as one contiguous, L2-normalised
//!    `f32` matrix and scanned brute-force. Built at [`WorkingMemory::open`] from the store's
//!    `embeddings` table; notes without a vector for the model, or whose text hash
//!    ([`crate::cache::text_hash`]) no longer matches, are embedded and written back in batches.
//! 2. **Seeds.** The top-k notes per query vector ([`WorkingConfig::seeds_per_query`]).
//! 3. **k-hop activation.** Seeds not yet in the working graph bring in their
//!    [`WorkingConfig::k_hops`] neighbourhood through [`Store::activate`]. Links to notes not
//!    loaded stay pending in the graph and attach when the target loads. Core notes are always
//!    resident.
//! 4. **Boundary.** A working note with an active stored neighbour that is not loaded is on the
//!    boundary. When a recall result ([`WorkingMemory::recall`]) contains boundary notes, they
//!    are expanded one hop and the recall is run once more IN THE SAME CALL, so PPR walks into
//!    what it reached ([`WorkingConfig::rerun`]; off: the expansion serves the next recall);
//!    a seed already resident on the boundary is expanded one hop by the activation too.
//! 5. **Cap and release.** At most [`WorkingConfig::cap`] non-core notes stay resident; beyond
//!    that the least recently activated ones are released — written to the store first when
//!    they changed since they were loaded (one transaction, [`Store::upsert_notes`]), together
//!    with their forgetting state — and removed from the graph. Links from resident notes to a
//!    released note go back to pending, so nothing is lost on the next write-back.
//!
//! Write-back in activation mode must use [`WorkingMemory::checkpoint`] (a partial checkpoint
//! that never deletes unloaded notes), never [`Store::checkpoint`], which would delete every
//! stored note absent from the (partial) graph.
//!
//! Limits: the brute-force scan costs O(n·d) per query vector — about 0.8 ms at 10k × 512 and
//! ~10 ms at 100k × 384 here — and the matrix takes n·d·4 bytes (150 MB at 100k × 384). It is
//! meant for up to ~50k notes per character; beyond that use an ANN index (HNSW or IVF over the
//! same matrix) or int8 rows (4× less memory bandwidth, as `FieldMatrix` does for similarity).

use crate::cache::text_hash;
use crate::engine::{EmbedderChoice, Engine};
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::{MemoryId, MemoryLink, MemoryNote, MemoryType, Situation};
use crate::retrieval::embedding::dot;
use crate::retrieval::{
    EmbedKind, PipelineConfig, PipelineResult, QueryTexts, ShortContext, SubQuery, TextEmbedder,
};
use crate::store::{db_err, Change, Store};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Working-memory parameters. JSON: every field optional, unknown fields refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkingConfig {
    /// Hops of neighbourhood a new seed brings in (both link directions). Default 2.
    pub k_hops: usize,
    /// Resident non-core notes at most (core notes are not counted). Default 1000.
    pub cap: usize,
    /// Seeds taken per query vector from the long-term index. Default 5.
    pub seeds_per_query: usize,
    /// Seeds must reach this cosine similarity (none = any). Model-dependent: e5 puts unrelated
    /// texts around 0.7, the hash embedder around 0.
    pub min_score: Option<f32>,
    /// Texts per embedder call (and per embeddings transaction) when building the index.
    /// Default 256.
    pub embed_batch: usize,
    /// Expand boundary notes reached by a recall (and resident boundary seeds). Default true.
    pub expand_boundary: bool,
    /// After such an expansion, run the recall again in the same call so PPR walks into the
    /// new notes (default true). False: the expanded notes serve the NEXT recall, saving one
    /// pipeline run (and one re-embedding of the working graph) per recall.
    pub rerun: bool,
}

impl Default for WorkingConfig {
    fn default() -> Self {
        WorkingConfig {
            k_hops: 2,
            cap: 1000,
            seeds_per_query: 5,
            min_score: None,
            embed_batch: 256,
            expand_boundary: true,
            rerun: true,
        }
    }
}

impl WorkingConfig {
    /// Checks the ranges: `cap`, `seeds_per_query` and `embed_batch` at least 1, `k_hops` at
    /// most 16, `min_score` finite.
    pub fn validate(&self) -> Result<()> {
        if self.cap == 0 {
            return Err(Error::invalid_argument("cap", "must be at least 1"));
        }
        if self.seeds_per_query == 0 {
            return Err(Error::invalid_argument(
                "seeds_per_query",
                "must be at least 1",
            ));
        }
        if self.embed_batch == 0 {
            return Err(Error::invalid_argument("embed_batch", "must be at least 1"));
        }
        if self.k_hops > 16 {
            return Err(Error::invalid_argument(
                "k_hops",
                format!("must be at most 16, got {}", self.k_hops),
            ));
        }
        if let Some(m) = self.min_score {
            if !m.is_finite() {
                return Err(Error::invalid_argument("min_score", "must be finite"));
            }
        }
        Ok(())
    }
}

/// The text of a note that goes into the long-term index: semantic content, specific
/// narrative, rendered abstract pattern, or procedure action (the primary field of
/// [`crate::retrieval::node_texts`]); trimmed; `None` when empty.
pub fn primary_text(mem_type: &MemoryType) -> Option<String> {
    let t = match mem_type {
        MemoryType::Semantic(s) => s.content.clone(),
        MemoryType::Situation(Situation::SpecificSituation(s)) => s.narrative.clone(),
        MemoryType::Situation(Situation::AbstractSituation(a)) => crate::model::abstract_text(a),
        MemoryType::Procedure(p) => p.action.content.clone(),
    };
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// (note, SHA-256 of its primary text, vector): one row of the `embeddings` table.
type VectorRow = (MemoryId, [u8; 32], Vec<f32>);

fn as_dyn(e: &EmbedderChoice) -> &dyn TextEmbedder {
    match e {
        EmbedderChoice::Model(m) => m.as_ref(),
        EmbedderChoice::Hash(h) => h,
    }
}

/// The in-memory long-term index: one normalised row per note, contiguous.
#[derive(Debug, Clone)]
struct LongTermIndex {
    dim: usize,
    ids: Vec<MemoryId>,
    hashes: Vec<[u8; 32]>,
    data: Vec<f32>,
    pos: HashMap<MemoryId, usize>,
}

impl LongTermIndex {
    fn new(dim: usize) -> Self {
        LongTermIndex {
            dim,
            ids: Vec::new(),
            hashes: Vec::new(),
            data: Vec::new(),
            pos: HashMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    fn hash_of(&self, id: &MemoryId) -> Option<&[u8; 32]> {
        self.pos.get(id).map(|&i| &self.hashes[i])
    }

    /// Inserts or replaces the row of `id`. A zero or non-finite vector removes it (it could
    /// never be a seed). Errors on a wrong dimension. Complexity: O(dim).
    fn upsert(&mut self, id: MemoryId, hash: [u8; 32], v: &[f32]) -> Result<()> {
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
    fn remove(&mut self, id: &MemoryId) -> bool {
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
    fn top_k(&self, q: &[f32], k: usize, min: Option<f32>) -> Vec<(MemoryId, f32)> {
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

/// What [`WorkingMemory::open`] did to the long-term index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexReport {
    /// Embedder (model id) of the index.
    pub model: String,
    /// Vector dimension.
    pub dim: usize,
    /// Active stored notes.
    pub notes: usize,
    /// Rows in the index (notes with a non-empty primary text).
    pub vectors: usize,
    /// Rows taken from the `embeddings` table as they were.
    pub reused: usize,
    /// Notes embedded now (no vector for the model, a changed text or a wrong dimension) and
    /// written to the table.
    pub embedded: usize,
    /// Core notes put into the working graph.
    pub core_loaded: usize,
}

/// One seed of an activation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seed {
    /// Identity.
    pub id: MemoryId,
    /// Readable id (the UUID text when the seed could not be loaded).
    pub readable_id: String,
    /// Cosine similarity to the best-matching query vector.
    pub score: f32,
}

/// What one activation (or recall) did to the working graph. Notes by readable id.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ActivationReport {
    /// Seeds from the long-term index, best first.
    pub seeds: Vec<Seed>,
    /// Notes newly loaded into the working graph.
    pub loaded: Vec<String>,
    /// Boundary notes expanded one hop.
    pub expanded: Vec<String>,
    /// Notes released (least recently activated beyond the cap).
    pub released: Vec<String>,
    /// Released notes that had changed and were written to the store first.
    pub persisted: usize,
    /// Resident notes on the boundary afterwards.
    pub boundary: usize,
    /// Resident notes afterwards.
    pub working_size: usize,
    /// Resident non-core notes afterwards.
    pub non_core: usize,
    /// True when the cap cut a neighbourhood short.
    pub truncated: bool,
    /// True when a recall was run again after a boundary expansion.
    pub rerun: bool,
}

/// What [`WorkingMemory::checkpoint`] wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointReport {
    /// Notes upserted (the whole working graph).
    pub notes: usize,
    /// Index rows (re-)embedded and written because a text was new or changed.
    pub embedded: usize,
    /// Notes archived or deleted by `extra` and dropped from the working graph and index.
    pub dropped: usize,
}

/// The working-memory policy of one character over its [`Engine`] and [`Store`]. Holds the
/// long-term index and the activation bookkeeping; the graph itself stays in the engine.
pub struct WorkingMemory {
    cfg: WorkingConfig,
    embedder: EmbedderChoice,
    model: String,
    character: String,
    index: LongTermIndex,
    tick: u64,
    seq: u64,
    // (activation tick, touch sequence) of each resident note.
    last: HashMap<MemoryId, (u64, u64)>,
    // Active stored neighbours (both directions) of each resident note, read when it loaded.
    nbrs: HashMap<MemoryId, Vec<MemoryId>>,
    // The note as loaded (links complete, sorted by id): a release writes only changed notes.
    clean: HashMap<MemoryId, MemoryNote>,
    // Notes deleted through a checkpoint: links to them that still wait as pending in the
    // graph are never written back.
    deleted: HashSet<MemoryId>,
}

impl std::fmt::Debug for WorkingMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkingMemory")
            .field("model", &self.model)
            .field("character", &self.character)
            .field("vectors", &self.index.len())
            .field("cfg", &self.cfg)
            .finish()
    }
}

fn parse_uuid(store: &Store, s: &str) -> Result<MemoryId> {
    uuid::Uuid::parse_str(s)
        .map(MemoryId)
        .map_err(|e| Error::Corrupt {
            path: store.path().display().to_string(),
            message: format!("bad note id {s:?}: {e}"),
        })
}

/// Every active stored note with its primary text: (id, text, core).
/// Complexity: O(notes) rows read, one payload parse each.
fn stored_texts(store: &Store) -> Result<Vec<(MemoryId, Option<String>)>> {
    let p = store.path();
    let mut st = store
        .conn()
        .prepare("SELECT id, payload FROM notes WHERE archived=0 ORDER BY pos")
        .map_err(|e| db_err(p, e))?;
    let mut rows = st.query([]).map_err(|e| db_err(p, e))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(|e| db_err(p, e))? {
        let id: String = r.get(0).map_err(|e| db_err(p, e))?;
        let payload: String = r.get(1).map_err(|e| db_err(p, e))?;
        let mt: MemoryType = serde_json::from_str(&payload).map_err(|e| Error::Corrupt {
            path: p.display().to_string(),
            message: format!("note {id}: payload: {e}"),
        })?;
        out.push((parse_uuid(store, &id)?, primary_text(&mt)));
    }
    Ok(out)
}

/// Active stored neighbours of a note in both directions (deduplicated).
/// Complexity: two indexed lookups.
fn stored_neighbours(store: &Store, id: &MemoryId) -> Result<Vec<MemoryId>> {
    let p = store.path();
    let mut st = store
        .conn()
        .prepare_cached(
            "SELECT DISTINCT nb FROM (
                SELECT l.to_id AS nb FROM links l JOIN notes n ON n.id = l.to_id
                 WHERE l.from_id = ?1 AND n.archived = 0
                UNION ALL
                SELECT l.from_id AS nb FROM links l JOIN notes n ON n.id = l.from_id
                 WHERE l.to_id = ?1 AND n.archived = 0)
             WHERE nb <> ?1",
        )
        .map_err(|e| db_err(p, e))?;
    let rows: Vec<String> = st
        .query_map([id.to_string()], |r| r.get(0))
        .and_then(|it| it.collect())
        .map_err(|e| db_err(p, e))?;
    rows.iter().map(|s| parse_uuid(store, s)).collect()
}

/// Pending links of `graph` grouped by source.
fn pending_by_source(graph: &MemoryGraph) -> HashMap<MemoryId, Vec<MemoryLink>> {
    let mut out: HashMap<MemoryId, Vec<MemoryLink>> = HashMap::new();
    for l in graph.pending_links() {
        out.entry(l.from).or_default().push(l.clone());
    }
    out
}

/// A note with ALL its outgoing links (attached and pending), as the store keeps it.
fn full_note(
    graph: &MemoryGraph,
    id: &MemoryId,
    pending: &HashMap<MemoryId, Vec<MemoryLink>>,
) -> Option<MemoryNote> {
    let mut n = graph.get(id)?.clone();
    if let Some(p) = pending.get(id) {
        n.links.extend(p.iter().cloned());
    }
    Some(n)
}

/// The comparison form of a note: links sorted by id (attach order is not meaningful).
fn canonical(mut n: MemoryNote) -> MemoryNote {
    n.links.sort_by_key(|l| l.id);
    n
}

impl WorkingMemory {
    /// Builds the long-term index of `store` for `embedder` and makes `engine`'s graph a
    /// working graph: stored core notes missing from it are inserted (with their forgetting
    /// state), notes already in it become resident (and are written back on release, since
    /// their stored version is unknown). When the engine has no embedder yet it gets this one
    /// (recall needs it). `progress(done, total)` follows the embedding of missing vectors.
    ///
    /// Errors: invalid `cfg`, a graph of another character, store or embedder failures. A
    /// failure while embedding keeps the batches already written, so a retry resumes.
    ///
    /// Complexity: O(n) payload parses and vector rows read for n active notes, plus the
    /// embedding of the notes lacking a current vector (the model embeds ~60 texts/s on a CPU:
    /// ~30 min for 100k notes; the hash embedder ~1 s), written `cfg.embed_batch` per
    /// transaction.
    pub fn open(
        engine: &mut Engine,
        store: &mut Store,
        embedder: EmbedderChoice,
        cfg: WorkingConfig,
        progress: &dyn Fn(usize, usize),
    ) -> Result<(Self, IndexReport)> {
        cfg.validate()?;
        check_character(engine, store)?;
        let model = embedder.name();
        let dim = as_dyn(&embedder).dim();
        let texts = stored_texts(store)?;
        let notes = texts.len();
        let mut index = LongTermIndex::new(dim);
        let mut want: HashMap<MemoryId, [u8; 32]> = HashMap::with_capacity(texts.len());
        for (id, t) in &texts {
            if let Some(t) = t {
                want.insert(*id, text_hash(t));
            }
        }
        // Stream the stored vectors straight into the matrix.
        let mut reused = 0;
        {
            let p = store.path();
            let mut st = store
                .conn()
                .prepare("SELECT note_id, text_hash, vec FROM embeddings WHERE model=?1")
                .map_err(|e| db_err(p, e))?;
            let mut rows = st.query([&model]).map_err(|e| db_err(p, e))?;
            let mut row_buf: Vec<f32> = Vec::with_capacity(dim);
            while let Some(r) = rows.next().map_err(|e| db_err(p, e))? {
                let id: String = r.get(0).map_err(|e| db_err(p, e))?;
                let Ok(uuid) = uuid::Uuid::parse_str(&id) else {
                    continue;
                };
                let id = MemoryId(uuid);
                let Some(expected) = want.get(&id) else {
                    continue;
                };
                let hash: Vec<u8> = r.get(1).map_err(|e| db_err(p, e))?;
                if hash.as_slice() != expected.as_slice() {
                    continue;
                }
                let blob = r.get_ref(2).map_err(|e| db_err(p, e))?;
                let bytes = blob.as_blob().map_err(|e| db_err(p, e.into()))?;
                if bytes.len() != dim * 4 {
                    continue;
                }
                row_buf.clear();
                row_buf.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
                index.upsert(id, *expected, &row_buf)?;
                reused += 1;
            }
        }
        let missing: Vec<(MemoryId, &str)> = texts
            .iter()
            .filter_map(|(id, t)| {
                let t = t.as_deref()?;
                (index.hash_of(id) != want.get(id)).then_some((*id, t))
            })
            .collect();
        let total = missing.len();
        progress(0, total);
        let mut done = 0;
        for chunk in missing.chunks(cfg.embed_batch) {
            let batch: Vec<&str> = chunk.iter().map(|(_, t)| *t).collect();
            let rows = embed_rows(&embedder, chunk.iter().map(|(id, _)| *id), &batch)?;
            store.put_embeddings(&model, &rows)?;
            for (id, h, v) in &rows {
                index.upsert(*id, *h, v)?;
            }
            done += chunk.len();
            progress(done, total);
        }
        drop(texts);

        let mut wm = WorkingMemory {
            cfg,
            embedder,
            model: model.clone(),
            character: store.character().to_owned(),
            index,
            tick: 1,
            seq: 0,
            last: HashMap::new(),
            nbrs: HashMap::new(),
            clean: HashMap::new(),
            deleted: HashSet::new(),
        };
        let resident: Vec<MemoryId> = engine.graph().notes().map(|n| n.id).collect();
        for id in &resident {
            let nb = stored_neighbours(store, id)?;
            wm.nbrs.insert(*id, nb);
            wm.touch_one(*id);
        }
        let core = store.activate(&[], 0, 0)?;
        let mut report = ActivationReport::default();
        wm.merge(engine, store, &core.graph, &mut report)?;
        wm.ensure_engine_embedder(engine)?;
        let vectors = wm.index.len();
        Ok((
            wm,
            IndexReport {
                model,
                dim,
                notes,
                vectors,
                reused,
                embedded: total,
                core_loaded: report.loaded.len(),
            },
        ))
    }

    /// The configuration.
    pub fn config(&self) -> &WorkingConfig {
        &self.cfg
    }

    /// The embedder (model id) of the long-term index.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The embedder of the long-term index.
    pub fn embedder(&self) -> &EmbedderChoice {
        &self.embedder
    }

    /// Rows in the long-term index.
    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Vector dimension of the long-term index.
    pub fn dim(&self) -> usize {
        self.index.dim
    }

    /// Embeds query texts (query side) with the index's embedder.
    /// Complexity: one embedder call.
    pub fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        as_dyn(&self.embedder).embed(texts, EmbedKind::Query)
    }

    /// Seeds for `query_vectors`: the top [`WorkingConfig::seeds_per_query`] notes of the
    /// long-term index per vector (cosine, at least `min_score`), merged by best score, best
    /// first. Zero vectors give nothing; a vector of the wrong dimension is an error.
    ///
    /// Complexity: O(q · n · d) for q vectors over n rows of dimension d.
    pub fn seeds(&self, query_vectors: &[Vec<f32>]) -> Result<Vec<(MemoryId, f32)>> {
        let mut best: HashMap<MemoryId, f32> = HashMap::new();
        for q in query_vectors {
            if q.len() != self.index.dim {
                return Err(Error::invalid_argument(
                    "query_vectors",
                    format!("{}-dim vector for a {}-dim index", q.len(), self.index.dim),
                ));
            }
            let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
            if !(norm.is_finite() && norm > 0.0) {
                continue;
            }
            let qn: Vec<f32> = q.iter().map(|x| x / norm).collect();
            for (id, s) in self
                .index
                .top_k(&qn, self.cfg.seeds_per_query, self.cfg.min_score)
            {
                let e = best.entry(id).or_insert(s);
                if s > *e {
                    *e = s;
                }
            }
        }
        let mut out: Vec<(MemoryId, f32)> = best.into_iter().collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(out)
    }

    /// [`WorkingMemory::activate`] from plain texts (embedded query side).
    /// Complexity: embedding the texts plus the activation.
    pub fn activate_texts(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        texts: &[&str],
    ) -> Result<ActivationReport> {
        let vectors = self.embed_queries(texts)?;
        self.activate(engine, store, &vectors)
    }

    /// Activates working memory for `query_vectors` (query-side vectors of the index's
    /// embedder): seeds from the long-term index; seeds not resident bring in their `k_hops`
    /// neighbourhood ([`Store::activate`], at most `cap` notes per call); resident seeds on the
    /// boundary are expanded one hop (when `expand_boundary`); then the least recently
    /// activated non-core notes beyond `cap` are released (changed ones persisted first).
    ///
    /// Errors leave the graph consistent (possibly with part of the new notes loaded); a
    /// failed release write removes nothing.
    ///
    /// Complexity: O(q·n·d) seeding + O(loaded × degree) indexed store reads + the release
    /// (O(released × (nodes + links)) in memory, one transaction for the changed ones).
    pub fn activate(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        query_vectors: &[Vec<f32>],
    ) -> Result<ActivationReport> {
        check_character(engine, store)?;
        self.tick += 1;
        let seeds = self.seeds(query_vectors)?;
        let mut report = ActivationReport::default();
        let mut new_seeds = Vec::new();
        let mut boundary_seeds = Vec::new();
        for (id, _) in &seeds {
            if engine.graph().get(id).is_some() {
                self.touch_one(*id);
                if self.is_boundary(engine.graph(), id) {
                    boundary_seeds.push(*id);
                }
            } else {
                new_seeds.push(*id);
            }
        }
        if !new_seeds.is_empty() {
            let act = store.activate(&new_seeds, self.cfg.k_hops, self.cfg.cap)?;
            report.truncated |= act.truncated;
            self.merge(engine, store, &act.graph, &mut report)?;
        }
        if self.cfg.expand_boundary && !boundary_seeds.is_empty() {
            self.expand_inner(engine, store, &boundary_seeds, &mut report)?;
        }
        self.release_over_cap(engine, store, &mut report)?;
        self.ensure_engine_embedder(engine)?;
        report.seeds = seeds
            .into_iter()
            .map(|(id, score)| Seed {
                id,
                readable_id: engine.graph().readable_of(&id),
                score,
            })
            .collect();
        self.finish(engine, &mut report);
        Ok(report)
    }

    /// Expands, one hop, those of `ids` that are resident boundary notes, then applies the
    /// cap. What a caller runs before the next recall when a result contained boundary notes
    /// (and what [`WorkingMemory::recall`] does by itself).
    ///
    /// Complexity: O(new notes × degree) store reads plus the release.
    pub fn expand(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        ids: &[MemoryId],
    ) -> Result<ActivationReport> {
        check_character(engine, store)?;
        self.tick += 1;
        let hits: Vec<MemoryId> = ids
            .iter()
            .copied()
            .filter(|id| self.is_boundary(engine.graph(), id))
            .collect();
        let mut report = ActivationReport::default();
        self.touch(ids);
        self.expand_inner(engine, store, &hits, &mut report)?;
        self.release_over_cap(engine, store, &mut report)?;
        self.finish(engine, &mut report);
        Ok(report)
    }

    /// One recall in activation mode: activates for the texts of `queries` (every
    /// [`QueryTexts`] item, embedded query side), runs [`Engine::recall`] on the working
    /// graph, and when the result contains boundary notes (and `expand_boundary`), expands them
    /// one hop and — with [`WorkingConfig::rerun`] — recalls once more in the same call
    /// (`report.rerun`); otherwise the expansion serves the next recall. Recalled notes count
    /// as activated for the LRU order.
    ///
    /// Complexity: the activation plus one or two pipeline runs over the working graph (each
    /// re-embeds the working graph when it changed — cached with the model).
    pub fn recall(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        queries: &[SubQuery],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
    ) -> Result<(PipelineResult, ActivationReport)> {
        let mut texts: Vec<String> = Vec::new();
        for q in queries {
            for t in QueryTexts::of(q).texts() {
                if !texts.iter().any(|x| x == t) {
                    texts.push(t.to_owned());
                }
            }
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut report = self.activate_texts(engine, store, &refs)?;
        let mut result = engine.recall(queries, cfg, short.clone())?;
        let ids = result_ids(&result);
        self.touch(&ids);
        if self.cfg.expand_boundary {
            let hits: Vec<MemoryId> = ids
                .iter()
                .copied()
                .filter(|id| self.is_boundary(engine.graph(), id))
                .collect();
            if !hits.is_empty() {
                let before = report.loaded.len();
                self.expand_inner(engine, store, &hits, &mut report)?;
                self.release_over_cap(engine, store, &mut report)?;
                if self.cfg.rerun && report.loaded.len() > before {
                    result = engine.recall(queries, cfg, short)?;
                    self.touch(&result_ids(&result));
                    report.rerun = true;
                }
            }
        }
        self.finish(engine, &mut report);
        Ok((result, report))
    }

    /// Marks resident notes as just activated (LRU order); unknown ids are ignored.
    /// Complexity: O(ids).
    pub fn touch(&mut self, ids: &[MemoryId]) {
        for id in ids {
            if self.last.contains_key(id) {
                self.touch_one(*id);
            }
        }
    }

    /// Resident notes with an active stored neighbour that is not resident.
    /// Complexity: O(Σ stored degree of the resident notes).
    pub fn boundary(&self, engine: &Engine) -> BTreeSet<MemoryId> {
        engine
            .graph()
            .notes()
            .map(|n| n.id)
            .filter(|id| self.is_boundary(engine.graph(), id))
            .collect()
    }

    /// Partial checkpoint of the whole working graph: forgetting states of resident notes,
    /// then `extra` (so its changes win), then every resident note upserted with its complete
    /// outgoing links (pending ones included), in ONE transaction ([`Store::upsert_notes`]);
    /// stored notes that are not resident are never deleted — a note removed from the working
    /// graph (e.g. merged away) must be deleted or archived through `extra`. Notes deleted by
    /// `extra` are not written back, nor are links to them. Before writing, notes whose
    /// primary text is new or changed are embedded; their vectors are written right after
    /// (a second transaction — a derived cache) and the long-term index is updated. Notes
    /// archived or deleted by `extra` leave the working graph and the index.
    ///
    /// Errors: a graph of another character, an embedder failure (nothing written), a store
    /// failure (the note transaction wrote nothing).
    ///
    /// Complexity: O(resident notes + links) rows written plus embedding the changed texts.
    pub fn checkpoint(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        extra: &[Change],
    ) -> Result<CheckpointReport> {
        check_character(engine, store)?;
        let mut deleted = self.deleted.clone();
        deleted.extend(extra.iter().filter_map(|c| match c {
            Change::DeleteNote(id) => Some(*id),
            _ => None,
        }));
        let graph = engine.graph();
        let pending = pending_by_source(graph);
        let notes: Vec<MemoryNote> = graph
            .notes()
            .filter(|n| !deleted.contains(&n.id))
            .filter_map(|n| full_note(graph, &n.id, &pending))
            .map(|mut n| {
                n.links.retain(|l| !deleted.contains(&l.to));
                n
            })
            .collect();
        let updates = self.index_updates(&notes)?;
        let mut changes: Vec<Change> = engine
            .forget_states()
            .filter(|(id, _)| graph.get(id).is_some() && !deleted.contains(id))
            .map(|(id, s)| Change::SetForgetState(*id, s.clone()))
            .collect();
        changes.sort_by_key(|c| match c {
            Change::SetForgetState(id, _) => Some(*id),
            _ => None,
        });
        changes.extend(extra.iter().cloned());
        store.upsert_notes(&notes, &changes)?;
        if !updates.is_empty() {
            store.put_embeddings(&self.model, &updates)?;
        }
        for (id, h, v) in &updates {
            self.index.upsert(*id, *h, v)?;
        }
        let report_notes = notes.len();
        for n in notes {
            self.clean.insert(n.id, canonical(n));
        }
        let mut gone: Vec<MemoryId> = Vec::new();
        for ch in extra {
            match ch {
                Change::ArchiveNote(id) | Change::DeleteNote(id) => gone.push(*id),
                _ => {}
            }
        }
        for id in &gone {
            self.index.remove(id);
        }
        let resident = |ids: &mut dyn Iterator<Item = &MemoryId>| -> Vec<MemoryId> {
            ids.copied()
                .filter(|id| engine.graph().get(id).is_some())
                .collect()
        };
        // Links to an archived note stay (stored and pending, as the store keeps them); links
        // to a deleted one go.
        let archived = resident(&mut gone.iter().filter(|id| !deleted.contains(id)));
        let removed = resident(&mut gone.iter().filter(|id| deleted.contains(id)));
        self.remove_resident(engine, &archived, true);
        self.remove_resident(engine, &removed, false);
        self.deleted = deleted;
        Ok(CheckpointReport {
            notes: report_notes,
            embedded: updates.len(),
            dropped: gone.len(),
        })
    }

    // ---- internals ----------------------------------------------------------------------

    fn touch_one(&mut self, id: MemoryId) {
        self.seq += 1;
        self.last.insert(id, (self.tick, self.seq));
    }

    fn is_boundary(&self, graph: &MemoryGraph, id: &MemoryId) -> bool {
        self.nbrs
            .get(id)
            .is_some_and(|nb| nb.iter().any(|n| graph.get(n).is_none()))
    }

    fn ensure_engine_embedder(&self, engine: &mut Engine) -> Result<()> {
        if engine.embedder().is_none() {
            engine.embed_all(self.embedder.clone(), &|_, _| {})?;
        }
        Ok(())
    }

    fn finish(&self, engine: &Engine, report: &mut ActivationReport) {
        let g = engine.graph();
        report.working_size = g.len();
        report.non_core = g.notes().filter(|n| !n.core).count();
        report.boundary = g.notes().filter(|n| self.is_boundary(g, &n.id)).count();
    }

    /// Inserts the notes of an activation graph that are not resident (with all their stored
    /// links, their forgetting state and their stored neighbour list) and touches every note
    /// of it, in its BFS order (core, seeds, hop 1, hop 2, …).
    fn merge(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        act: &MemoryGraph,
        report: &mut ActivationReport,
    ) -> Result<()> {
        let pending = pending_by_source(act);
        for n in act.notes() {
            if engine.graph().get(&n.id).is_some() {
                self.touch_one(n.id);
                continue;
            }
            let Some(note) = full_note(act, &n.id, &pending) else {
                continue;
            };
            let nb = stored_neighbours(store, &note.id)?;
            let state = store.forget_state(&note.id)?;
            let id = note.id;
            let readable = note.readable_id.clone();
            self.clean.insert(id, canonical(note.clone()));
            engine.graph_mut().insert(note)?;
            if let Some(s) = state {
                // A stored state the engine refuses (out of range) is dropped, not fatal.
                let _ = engine.set_forget_state(id, s);
            }
            self.nbrs.insert(id, nb);
            self.touch_one(id);
            report.loaded.push(readable);
        }
        Ok(())
    }

    /// Loads the one-hop neighbourhood of the boundary notes `ids`.
    fn expand_inner(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        ids: &[MemoryId],
        report: &mut ActivationReport,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let act = store.activate(ids, 1, self.cfg.cap)?;
        report.truncated |= act.truncated;
        self.merge(engine, store, &act.graph, report)?;
        report
            .expanded
            .extend(ids.iter().map(|id| engine.graph().readable_of(id)));
        Ok(())
    }

    /// Vectors to (re-)write for `notes` whose primary text is not in the index as it is.
    fn index_updates(&self, notes: &[MemoryNote]) -> Result<Vec<VectorRow>> {
        let mut ids = Vec::new();
        let mut texts = Vec::new();
        for n in notes {
            if let Some(t) = primary_text(&n.mem_type) {
                if self.index.hash_of(&n.id) != Some(&text_hash(&t)) {
                    ids.push(n.id);
                    texts.push(t);
                }
            }
        }
        let mut out = Vec::with_capacity(ids.len());
        for (ci, chunk) in texts.chunks(self.cfg.embed_batch).enumerate() {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let start = ci * self.cfg.embed_batch;
            out.extend(embed_rows(
                &self.embedder,
                ids[start..start + chunk.len()].iter().copied(),
                &refs,
            )?);
        }
        Ok(out)
    }

    /// Releases least recently activated non-core notes until at most `cap` remain: the
    /// changed ones (and the forgetting states of all) are written in one transaction first.
    fn release_over_cap(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        report: &mut ActivationReport,
    ) -> Result<()> {
        let graph = engine.graph();
        let mut non_core: Vec<(u64, std::cmp::Reverse<u64>, MemoryId)> = graph
            .notes()
            .filter(|n| !n.core)
            .map(|n| {
                let (t, s) = self.last.get(&n.id).copied().unwrap_or((0, 0));
                (t, std::cmp::Reverse(s), n.id)
            })
            .collect();
        if non_core.len() <= self.cfg.cap {
            return Ok(());
        }
        let excess = non_core.len() - self.cfg.cap;
        non_core.select_nth_unstable(excess - 1);
        non_core.truncate(excess);
        non_core.sort();
        let victims: Vec<MemoryId> = non_core.into_iter().map(|(_, _, id)| id).collect();

        let pending = pending_by_source(graph);
        let mut write = Vec::new();
        let mut states = Vec::new();
        for id in &victims {
            let Some(mut full) = full_note(graph, id, &pending) else {
                continue;
            };
            full.links.retain(|l| !self.deleted.contains(&l.to));
            if let Some(s) = engine.forget_state(id) {
                states.push(Change::SetForgetState(*id, s.clone()));
            }
            let changed = self
                .clean
                .get(id)
                .is_none_or(|c| *c != canonical(full.clone()));
            if changed {
                write.push(full);
            }
        }
        let updates = self.index_updates(&write)?;
        if !write.is_empty() || !states.is_empty() {
            store.upsert_notes(&write, &states)?;
        }
        if !updates.is_empty() {
            store.put_embeddings(&self.model, &updates)?;
            for (id, h, v) in &updates {
                self.index.upsert(*id, *h, v)?;
            }
        }
        report.persisted += write.len();
        for id in &victims {
            report.released.push(engine.graph().readable_of(id));
        }
        self.remove_resident(engine, &victims, true);
        Ok(())
    }

    /// Removes resident notes from the graph and the bookkeeping. With `keep_incoming`, links
    /// from remaining notes to them go back to pending (MemoryGraph::remove drops them), so a
    /// later write-back of the source keeps them.
    fn remove_resident(&mut self, engine: &mut Engine, ids: &[MemoryId], keep_incoming: bool) {
        if ids.is_empty() {
            return;
        }
        let set: HashSet<MemoryId> = ids.iter().copied().collect();
        let incoming: Vec<MemoryLink> = if keep_incoming {
            engine
                .graph()
                .notes()
                .filter(|n| !set.contains(&n.id))
                .flat_map(|n| n.links.iter().filter(|l| set.contains(&l.to)).cloned())
                .collect()
        } else {
            Vec::new()
        };
        let graph = engine.graph_mut();
        for id in ids {
            graph.remove(id);
        }
        for l in incoming {
            // The source is resident and the intensity was valid: this only buffers.
            let _ = graph.add_link(l);
        }
        for id in ids {
            engine.clear_forget_state(id);
            self.last.remove(id);
            self.nbrs.remove(id);
            self.clean.remove(id);
        }
    }
}

/// Ids of the memories, actions and self-knowledge of a recall result.
fn result_ids(r: &PipelineResult) -> Vec<MemoryId> {
    r.memories
        .iter()
        .map(|m| m.id)
        .chain(r.actions.iter().map(|a| a.id))
        .chain(r.self_knowledge.iter().map(|a| a.id))
        .collect()
}

fn check_character(engine: &Engine, store: &Store) -> Result<()> {
    if engine.graph().character() != store.character() {
        return Err(Error::invalid_argument(
            "graph",
            format!(
                "graph of {:?} with the store of {:?}",
                engine.graph().character(),
                store.character()
            ),
        ));
    }
    Ok(())
}

/// Embeds `texts` (passage side) and pairs the vectors with `ids` and text hashes.
fn embed_rows(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mid(i: u128) -> MemoryId {
        MemoryId(uuid::Uuid::from_u128(i))
    }

    #[test]
    fn index_top_k_and_swap_remove() -> Result<()> {
        let mut ix = LongTermIndex::new(2);
        ix.upsert(mid(1), [1; 32], &[1.0, 0.0])?;
        ix.upsert(mid(2), [2; 32], &[0.7, 0.7])?;
        ix.upsert(mid(3), [3; 32], &[0.0, 2.0])?;
        let q = [1.0 / 2f32.sqrt(), 1.0 / 2f32.sqrt()];
        let top = ix.top_k(&q, 2, None);
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].0, mid(2));
        assert!(ix.remove(&mid(1)));
        assert_eq!(ix.len(), 2);
        assert_eq!(ix.top_k(&[0.0, 1.0], 1, None)[0].0, mid(3));
        assert_eq!(ix.hash_of(&mid(3)), Some(&[3; 32]));
        assert!(ix.upsert(mid(4), [0; 32], &[1.0]).is_err());
        ix.upsert(mid(2), [9; 32], &[0.0, 0.0])?;
        assert_eq!(ix.len(), 1, "a zero vector removes the row");
        Ok(())
    }

    #[test]
    fn config_validation() {
        assert!(WorkingConfig::default().validate().is_ok());
        let bad = WorkingConfig {
            cap: 0,
            ..WorkingConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = WorkingConfig {
            min_score: Some(f32::NAN),
            ..WorkingConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
