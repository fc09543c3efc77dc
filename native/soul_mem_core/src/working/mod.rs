//! Working-memory activation (design: 工作记忆 is the activated subgraph of 长期记忆; the
//! seed's Beta retrieval flow). A character's long-term memory lives in its [`Store`]; the
//! [`Engine`] holds only a working subgraph of it, and [`WorkingMemory`] decides what is in it:
//!
//! 1. **Long-term vector index.** One vector per active stored note (its primary text, see
//!    [`primary_text`]) for the embedder in use, kept in memory as one contiguous, L2-normalised
//!    int8 matrix (per-row scale) and scanned brute-force. Built at [`WorkingMemory::open`]
//!    from the store's `embeddings` table; notes without a vector for the model, or whose
//!    text hash ([`crate::embedding_cache::text_hash`]) no longer matches, are embedded and
//!    written back in batches.
//! 2. **Seeds.** The top-k notes per query vector ([`WorkingConfig::seeds_per_query`]): the
//!    int8 scan proposes a few times more candidates, re-scored exactly on their stored f32
//!    vectors (one statement for those not read lately; the last few thousand read are held,
//!    `seed_vectors.rs`), so the seeds are those of an exact scan. The candidates of the
//!    last few hundred query vectors are remembered until a row of the index changes
//!    (`scan_memo.rs`): a message's keywords that came before are not scanned again.
//! 3. **k-hop activation.** Seeds not yet in the working graph bring in their
//!    [`WorkingConfig::k_hops`] neighbourhood ([`Store::activate_with`]): the walk reads an
//!    in-memory adjacency of the stored graph (`links.rs`: every stored link, whole, both
//!    directions, loaded at open, kept current by working memory's own writes and reloaded
//!    when another path wrote note or link rows), which also gives the loaded notes their
//!    links; the notes themselves come from the store. Links to notes
//!    not loaded stay pending in the graph and attach when the target loads. Core notes are
//!    always resident. One activation loads at most [`WorkingConfig::activation_budget`]
//!    notes, nearest first (the seeds, then hop by hop, stronger links first): a chat
//!    message's ~25 seeds have ~1,000 notes within two hops at three links per note — the
//!    whole cap — and loading them all would replace the working graph on every message.
//! 4. **Boundary.** A working note with an active stored neighbour that is not loaded is on the
//!    boundary. When a recall result ([`WorkingMemory::recall_at`]) contains boundary notes, they
//!    are expanded one hop and the recall is run once more IN THE SAME CALL, so PPR walks into
//!    what it reached ([`WorkingConfig::rerun`]; off: the expansion serves the next recall);
//!    a seed already resident on the boundary is expanded one hop by the activation too.
//! 5. **Cap and release.** At most [`WorkingConfig::cap`] non-core notes stay resident; beyond
//!    that the least recently activated ones are released — written to the store first when
//!    they changed since they were loaded (one transaction, [`Store::upsert_notes`]), together
//!    with their forgetting state — and removed from the graph. Links from resident notes to a
//!    released note go back to pending, so nothing is lost on the next write-back. A recall
//!    leaves the release for after its answer ([`WorkingMemory::settle`], which the service
//!    runs in the character's process once the recall is out; a recall that finds it did not
//!    run releases first), so the notes it loaded stay resident over the cap meanwhile.
//!    Released notes the release did not rewrite stay parsed in memory (`released.rs`, up to
//!    8× the cap, as the store holds them and only while it does): bringing one back reads
//!    neither its row nor its links again.
//!
//! Write-back in activation mode must use [`WorkingMemory::checkpoint`] (a partial checkpoint
//! that never deletes unloaded notes), never [`Store::checkpoint`], which would delete every
//! stored note absent from the (partial) graph.
//!
//! Costs that do not grow with the stored graph: the activation walks the in-memory adjacency
//! and reads notes, links and forgetting states in a few batched statements (not one per
//! note); the engine's index over the working graph keeps the vectors and word-index entries
//! of notes whose content revision did not change ([`crate::retrieval::VectorPlan`],
//! [`crate::graph::MemoryGraph::content_revision`]) — their metadata and identifiers too
//! ([`crate::retrieval::NodeFacts`]) — and the rows of the notes it dropped lately
//! ([`crate::retrieval::field_vectors::RECENT_NODES`]), so only notes new to working memory
//! (or changed) are embedded, and only those the word index does not remember are segmented;
//! the kept rows are compacted in place in the old snapshot's buffers rather than copied into
//! new ones; a release removes its whole batch in one pass over the working graph.
//!
//! Limits: the brute-force scan costs O(n·d) per query vector not remembered — about 1.5 ms
//! for one and 3 ms for five at 100k × 384 on two cores here — and the matrix takes
//! n·(d + 4) bytes (39 MB at 100k × 384); the adjacency about 280 bytes per note at 3 links
//! per note (28 MB at 100k). From [`WorkingConfig::ann_from`] notes on (default 200k) the
//! index is an HNSW graph instead (`ann.rs`): O(log n) per query vector, approximate (its
//! candidates are still re-scored exactly), saved beside the store (`ann_file.rs`) so that
//! opening a large character does not rebuild it.
//!
//! Files: `index.rs` (the long-term vector index), `block_rows.rs` (its int8 rows in blocks
//! for the integer dot-product instructions), `ann.rs` and `ann_file.rs` (its HNSW form
//! and the saved copy of it), `links.rs` (the stored adjacency), `released.rs` (released
//! notes kept parsed), `seed_vectors.rs` (the stored vectors of recent seed candidates),
//! `scan_memo.rs` (the index's answers to recent query vectors), `stored.rs` (what working
//! memory reads from the store directly), `open.rs` (building the index, the adjacency and
//! the working graph), `activate.rs` (seeds, k-hop activation, boundary expansion, recall)
//! and `checkpoint.rs` (partial write-back, cap and release).

mod activate;
mod ann;
mod ann_file;
mod block_rows;
mod checkpoint;
mod index;
mod links;
mod open;
mod released;
mod scan_memo;
mod seed_vectors;
mod stored;
#[cfg(test)]
mod tests;

use crate::engine::EmbedderChoice;
use crate::error::{Error, Result};
use crate::model::{IdMap, IdSet};
use crate::model::{MemoryId, MemoryNote, MemoryType, Situation};
pub use ann_file::remove_files as remove_saved_index;
pub use index::IndexKind;
use index::LongTermIndex;
use links::StoredLinks;
use serde::{Deserialize, Serialize};

/// Notes kept parsed after their release, per note of [`WorkingConfig::cap`]
/// (`released.rs`): ~8 MB at the default cap, and what a conversation moving among a dozen
/// topics brings back.
const RELEASED_PER_CAP: usize = 8;

/// Working-memory parameters. JSON: every field optional, unknown fields refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkingConfig {
    /// Hops of neighbourhood a new seed brings in (both link directions). Default 2.
    pub k_hops: usize,
    /// Resident non-core notes at most (core notes are not counted). Default 1000.
    pub cap: usize,
    /// Notes one activation (or boundary expansion) takes in at most, nearest first: the
    /// seeds (or the expanded notes) themselves, then their neighbours hop by hop, stronger
    /// links first; at most `cap`. Default 256: room for a message's ~25 seeds, their direct
    /// neighbours and the strongest of the second hop; what a recall reaches past them is
    /// expanded on demand (the boundary).
    pub activation_budget: usize,
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
    /// From this many indexed notes on, the long-term index is an HNSW graph (approximate,
    /// saved beside the store and reused by the next open) instead of the brute-force int8
    /// scan; `null`: always the scan. Chosen at open. Default 200 000: below it the scan
    /// costs a few milliseconds and is exact; above it, its reading grows past the rest of a
    /// recall (`bench/README.md`).
    pub ann_from: Option<usize>,
}

impl Default for WorkingConfig {
    fn default() -> Self {
        WorkingConfig {
            k_hops: 2,
            cap: 1000,
            activation_budget: 256,
            seeds_per_query: 5,
            min_score: None,
            embed_batch: 256,
            expand_boundary: true,
            rerun: true,
            ann_from: Some(200_000),
        }
    }
}

impl WorkingConfig {
    /// Checks the ranges: `cap`, `activation_budget`, `seeds_per_query` and `embed_batch` at
    /// least 1, `k_hops` at most 16, `min_score` finite.
    pub fn validate(&self) -> Result<()> {
        if self.cap == 0 {
            return Err(Error::invalid_argument("cap", "must be at least 1"));
        }
        if self.activation_budget == 0 {
            return Err(Error::invalid_argument(
                "activation_budget",
                "must be at least 1",
            ));
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
    /// The kind of index: `scan` (brute force, exact) or `hnsw` (approximate).
    pub kind: IndexKind,
    /// Rows taken from the HNSW graph saved beside the store (0: none usable, or a scan).
    pub from_saved: usize,
    /// True when the HNSW graph was written beside the store by this open.
    pub saved: bool,
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
    /// How many of `loaded` were held parsed since their release (not read from the store).
    pub from_released: usize,
    /// Boundary notes expanded one hop.
    pub expanded: Vec<String>,
    /// Notes released (least recently activated beyond the cap).
    pub released: Vec<String>,
    /// Released notes that had changed and were written to the store first.
    pub persisted: usize,
    /// Resident notes on the boundary afterwards; `None` in a recall's report: counting
    /// reads every resident note's stored links, so [`WorkingMemory::settle`] counts them
    /// after the answer.
    pub boundary: Option<usize>,
    /// Resident notes afterwards.
    pub working_size: usize,
    /// Resident non-core notes afterwards.
    pub non_core: usize,
    /// True when the activation budget cut a neighbourhood short.
    pub truncated: bool,
    /// True when a recall was run again after a boundary expansion.
    pub rerun: bool,
    /// Where the time went: [`WorkingMemory::recall_at`] fills every stage,
    /// [`WorkingMemory::activate`] the seeds and the loading; the rest stay zero.
    pub timings: RecallTimings,
}

/// Wall time of each stage of one working-memory recall, in microseconds: what an operator
/// (or `soul_tune bench recall --working`) reads to see where a message's time goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RecallTimings {
    /// Releasing notes a previous settle left over the cap (0 when it ran).
    pub release_us: u64,
    /// Embedding the query texts (query side; cached texts cost a lookup).
    pub embed_us: u64,
    /// Seeds: the long-term index's scan and the exact re-scoring of its candidates.
    pub seeds_us: u64,
    /// Reading the seeds' neighbourhoods from the store and inserting them (and expanding
    /// resident boundary seeds).
    pub load_us: u64,
    /// Indexing the notes new to the working graph and the decay factors (the first run).
    pub index_us: u64,
    /// The pipeline over the working graph (the first run).
    pub pipeline_us: u64,
    /// Expanding the boundary notes the result reached.
    pub expand_us: u64,
    /// The run after an expansion: indexing and pipeline again (0 without one).
    pub rerun_us: u64,
    /// Closing counts (resident and non-core notes; the boundary is the settle's).
    pub finish_us: u64,
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
    /// True when the HNSW graph was saved beside the store (it had changed in 1 % of its rows
    /// since the last save).
    pub index_saved: bool,
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
    last: IdMap<(u64, u64)>,
    // Every stored link in memory (both directions): the k-hop walk and the boundary.
    links: StoredLinks,
    // The note as loaded (links complete, sorted by id): a release writes only changed notes.
    clean: IdMap<MemoryNote>,
    // The forgetting state as loaded or last written: a release writes only changed ones.
    clean_states: IdMap<crate::store::ForgetState>,
    // Notes deleted through a checkpoint: links to them that still wait as pending in the
    // graph are never written back.
    deleted: IdSet,
    // Notes released lately, parsed as the store holds them (`released.rs`).
    released: released::Released,
    // Stored vectors of recent seed candidates, for the exact re-scoring (`seed_vectors.rs`).
    seed_vectors: seed_vectors::SeedVectors,
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
