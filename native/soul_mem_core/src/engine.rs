//! A character's live memory: its graph plus the retrieval index built from it, and the glue
//! from the real embedding model (with its persistent cache) to the retrieval layer. This is
//! what the NIF wraps in a resource handle.

pub use crate::embedder::{EmbedderChoice, ModelEmbedder, ProgressEmbedder};
use crate::error::{Error, Result};
use crate::forget::{self, ForgetAction, ForgetConfig, NoteView, Revision, SweepReport};
use crate::graph::MemoryGraph;
use crate::model::IdMap;
use crate::model::{MemoryId, MemoryType};
use crate::retrieval::{
    DefaultPipeline, EdgeDecay, LexicalIndex, NodeFacts, NodeVectors, PipelineConfig,
    PipelineResult, RetrievalIndex, ShortContext, SubQuery, VectorPlan,
};
use crate::store::{Change, CheckpointStats, ForgetState, Store};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// One character's graph and the retrieval index derived from it, with its forgetting
/// parameters and per-note forgetting states (the revision cache by band).
pub struct Engine {
    graph: MemoryGraph,
    index: Option<RetrievalIndex>,
    // The parts of the last index (its vectors, when of the current embedder, and its word
    // index synced to the graph) after an embedding error took it apart: the next build
    // reuses them as it would the index.
    spare: Option<(Option<NodeVectors>, LexicalIndex)>,
    embedder: Option<EmbedderChoice>,
    forget_config: ForgetConfig,
    forget_states: IdMap<ForgetState>,
    // Notes whose forgetting state or aligned semantic fields changed since the last
    // `take_forget_dirty`, so persistence can write only those.
    forget_dirty: BTreeSet<MemoryId>,
    // Bumped whenever a decay input may have changed without the graph version moving
    // (forgetting config, the sweep, direct graph access, an unpatched record): part of the
    // decay key. Per-note forgetting states do not enter retention, so they do not bump it.
    decay_epoch: u64,
    // The retention factors of the last recall, reused while the key holds (see
    // `Engine::recall_at`), so an unchanged graph reuses the index's decayed matrix.
    decay_cache: Option<DecayCache>,
    // Recalls that reused the cached factors, and that computed them. Atomic: a recall on a
    // shared borrow (`Engine::recall_shared`) counts its hit.
    decay_hits: AtomicU64,
    decay_misses: AtomicU64,
}

/// Retention factors evaluated at the start of one time bucket.
struct DecayCache {
    graph_version: u64,
    epoch: u64,
    bucket: i64,
    at: DateTime<Utc>,
    decay: EdgeDecay,
}

/// Longest decay time bucket: 60 s.
pub const DECAY_BUCKET_MAX_MS: i64 = 60_000;

/// Length of the time bucket recall evaluates retention at, for `cfg`: a 1/1440 of the base
/// half-life (60 s for the default 24 h), at most [`DECAY_BUCKET_MAX_MS`], at least 1 ms.
///
/// Recall evaluates every factor at the start of the bucket holding `now`, so consecutive
/// queries share one factor vector (and one PPR matrix). The error this makes is bounded:
/// retention `e^(−t·ln2/h)` moves by a relative `1 − e^(−Δ·ln2/h) < Δ·ln2/h` over `Δ` < one
/// bucket, with `h` ≥ the base half-life, so factors are at most `ln2/1440 ≈ 4.8e-4` (relative)
/// too high — far below what separates two memories' scores.
/// Complexity: O(1).
pub fn decay_bucket_ms(cfg: &ForgetConfig) -> i64 {
    let ms = cfg.base_half_life_hours * 3_600_000.0 / 1440.0;
    if ms.is_finite() {
        (ms as i64).clamp(1, DECAY_BUCKET_MAX_MS)
    } else {
        DECAY_BUCKET_MAX_MS
    }
}

/// What [`Engine::forget_store_revision`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRevision {
    /// The revision (revised field, aligned semantic fields, what the character sees).
    pub revision: Revision,
    /// The state now cached for the note.
    pub state: ForgetState,
    /// True when alignment changed the note's semantic fields in the graph.
    pub note_changed: bool,
}

impl Engine {
    /// Wraps a graph; nothing is embedded until [`Engine::embed_all`].
    pub fn new(graph: MemoryGraph) -> Self {
        Engine {
            graph,
            index: None,
            spare: None,
            embedder: None,
            forget_config: ForgetConfig::default(),
            forget_states: Default::default(),
            forget_dirty: BTreeSet::new(),
            decay_epoch: 0,
            decay_cache: None,
            decay_hits: AtomicU64::new(0),
            decay_misses: AtomicU64::new(0),
        }
    }

    /// The graph.
    pub fn graph(&self) -> &MemoryGraph {
        &self.graph
    }

    /// The graph, mutably (the index notices changes through the graph's version; cached
    /// retention factors are dropped, since recall counts may change without it).
    pub fn graph_mut(&mut self) -> &mut MemoryGraph {
        self.decay_epoch += 1;
        &mut self.graph
    }

    /// Writes the graph back to `store` with `extra` in one transaction ([`Store::checkpoint`]:
    /// incremental when the graph is synced with it). Only the graph's sync log changes — no
    /// note, link or recall count — so unlike [`Engine::graph_mut`] the cached retention
    /// factors stay valid and the next recall does not recompute them.
    ///
    /// Complexity: that of [`Store::checkpoint`].
    pub fn checkpoint(&mut self, store: &mut Store, extra: &[Change]) -> Result<CheckpointStats> {
        store.checkpoint(&mut self.graph, extra)
    }

    /// The retrieval index, when built (it may lag behind a changed graph until the next
    /// recall rebuilds it, see [`Engine::is_indexed`]; none after a failed
    /// [`Engine::embed_all`] until one succeeds). Complexity: O(1).
    pub fn index(&self) -> Option<&RetrievalIndex> {
        self.index.as_ref()
    }

    /// True when an index exists and matches the graph.
    pub fn is_indexed(&self) -> bool {
        self.index
            .as_ref()
            .is_some_and(|i| i.is_current(&self.graph))
    }

    /// The embedder the index was built with, if any (consolidation embeds new names and
    /// re-indexes with it).
    pub fn embedder(&self) -> Option<&EmbedderChoice> {
        self.embedder.as_ref()
    }

    /// Name of the embedder in use, if any.
    pub fn embedder_name(&self) -> Option<String> {
        self.embedder.as_ref().map(EmbedderChoice::name)
    }

    /// The distinct passage texts of the graph, as [`Self::embed_all`] embeds them: what a
    /// caller embeds ahead with [`ModelEmbedder::prefill`] while it holds no lock.
    pub fn passage_texts(&self) -> Vec<String> {
        NodeVectors::distinct_texts(&self.graph)
    }

    /// Embeds every note (passage side) and builds the retrieval index, reporting progress.
    /// Notes whose texts are unchanged since the previous index of the same embedder keep
    /// their vectors (only new and changed notes reach the embedder); with a cached model,
    /// re-embedding an unchanged text computes nothing either.
    ///
    /// The word index is synced on rayon's pool while this thread makes the vectors. An
    /// embedding error leaves no index; the next call reuses the old one's parts as it would
    /// the index.
    pub fn embed_all(
        &mut self,
        embedder: EmbedderChoice,
        report: &dyn Fn(usize, usize),
    ) -> Result<()> {
        let progress = ProgressEmbedder::new(embedder.as_dyn(), 64, report);
        // Notes whose texts did not change keep their rows from the previous index of the
        // same embedder: a working graph that gained or lost a few notes embeds only those.
        let same = self
            .embedder
            .as_ref()
            .is_some_and(|e| e.name() == embedder.name());
        // The previous snapshot is taken apart: its vectors are what the plan reuses (notes
        // kept are compacted in place), its word index is synced to the graph on another core
        // while the plan embeds and assembles (only changed notes are segmented again).
        let (mut prev, mut lexical, facts) = match self
            .index
            .take()
            .map(RetrievalIndex::into_parts)
            .map(|(v, l, f)| (Some(v), l, f))
            .or_else(|| self.spare.take().map(|(v, l)| (v, l, NodeFacts::default())))
        {
            Some((vectors, lexical, facts)) => (vectors.filter(|_| same), lexical, facts),
            None => (None, LexicalIndex::default(), NodeFacts::default()),
        };
        let graph = &self.graph;
        let mut refused = Vec::new();
        let built = rayon::in_place_scope(|s| {
            s.spawn(|_| refused = lexical.sync(graph));
            // The old vectors are given up only once the plan (what can fail) is made.
            VectorPlan::new(graph, &progress, prev.as_ref()).map(|p| p.assemble_owned(prev.take()))
        });
        let vectors = match built {
            Ok(vectors) => vectors?,
            Err(e) => {
                // The next build reuses both parts, as it would the index.
                self.spare = Some((prev, lexical));
                return Err(e);
            }
        };
        self.index = Some(RetrievalIndex::build_synced(
            &self.graph,
            vectors,
            lexical,
            refused,
            facts,
        )?);
        self.embedder = Some(embedder);
        Ok(())
    }

    /// Rebuilds the index when the graph changed since it was built (with the embedder of the
    /// last [`Engine::embed_all`]), as a recall does first: what a caller runs off a recall's
    /// path after changing the graph, so the next recall finds it current. Errors before any
    /// `embed_all`. Complexity: O(1) when current, else as [`Engine::embed_all`].
    pub fn ensure_index(&mut self) -> Result<()> {
        if self.is_indexed() {
            return Ok(());
        }
        let embedder = self.embedder.clone().ok_or_else(|| {
            Error::invalid_argument("engine", "not embedded yet: call embed_all first")
        })?;
        self.embed_all(embedder, &|_, _| {})
    }

    /// Runs the DefaultPipeline for `queries` at the current time and returns the raw result
    /// (see [`Engine::recall_at`]).
    pub fn recall(
        &mut self,
        queries: &[SubQuery],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
    ) -> Result<PipelineResult> {
        self.recall_at(queries, cfg, short, Utc::now())
    }

    /// Runs the DefaultPipeline for `queries` as of `now`: every link's intensity is multiplied
    /// by its source note's retention (the forgetting curve with this engine's
    /// [`ForgetConfig`]) before it becomes a PPR weight, so faded memories spread less.
    ///
    /// Retention is evaluated at the start of the time bucket holding `now` (see
    /// [`decay_bucket_ms`] for the bucket and its error bound). The factors are keyed by
    /// (graph version, decay epoch, bucket): while the key holds they are reused, and with
    /// them the index's decayed PPR matrix, so the matrix is rebuilt only when the graph, the
    /// forgetting inputs or the bucket changed ([`Engine::record`] patches it in place).
    ///
    /// Complexity: the pipeline, plus O(1) for the decay on a key hit; on a miss O(nodes) for
    /// the factors and O(nodes + links) for the matrix.
    pub fn recall_at(
        &mut self,
        queries: &[SubQuery],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
        now: DateTime<Utc>,
    ) -> Result<PipelineResult> {
        self.prepare_recall(now)?;
        self.run_prepared(queries, cfg, short)
    }

    /// Builds what a recall at `now` needs and a shared borrow cannot: the index of a changed
    /// graph and the decay factors of `now`'s bucket. Counts a decay-cache hit or miss.
    /// Complexity: O(1) when both hold, else as [`Engine::recall_at`]'s miss.
    pub fn prepare_recall(&mut self, now: DateTime<Utc>) -> Result<()> {
        self.ensure_index()?;
        self.refresh_decay(now)
    }

    /// Runs the pipeline on a shared borrow — concurrent recalls of one character, behind a
    /// read lock — when the index and the decay factors of `now`'s bucket are current
    /// (counted as a decay-cache hit); `Ok(None)` when they are not, and the caller runs
    /// [`Engine::prepare_recall`] (or [`Engine::recall_at`]) with an exclusive borrow first.
    /// Complexity: the pipeline.
    pub fn recall_shared(
        &self,
        queries: &[SubQuery],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
        now: DateTime<Utc>,
    ) -> Result<Option<PipelineResult>> {
        if !(self.is_indexed() && self.decay_holds(now)) {
            return Ok(None);
        }
        self.decay_hits.fetch_add(1, Ordering::Relaxed);
        self.run_prepared(queries, cfg, short).map(Some)
    }

    /// The pipeline on an engine [`Engine::prepare_recall`] has just prepared (what
    /// [`Engine::recall_at`] runs after it; working memory times the two apart).
    pub(crate) fn run_prepared(
        &self,
        queries: &[SubQuery],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
    ) -> Result<PipelineResult> {
        let (Some(index), Some(embedder), Some(cache)) =
            (&self.index, &self.embedder, &self.decay_cache)
        else {
            return Err(Error::invalid_argument("engine", "no index"));
        };
        DefaultPipeline::run_with_embedder_decayed(
            index,
            queries,
            embedder.as_dyn(),
            cfg,
            short,
            Some(&cache.decay),
        )
    }

    /// Makes `decay_cache` hold the factors of the bucket of `now`. Complexity: O(1) on a hit,
    /// O(nodes) otherwise.
    fn refresh_decay(&mut self, now: DateTime<Utc>) -> Result<()> {
        if self.decay_holds(now) {
            self.decay_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.decay_misses.fetch_add(1, Ordering::Relaxed);
        let width = decay_bucket_ms(&self.forget_config);
        let bucket = now.timestamp_millis().div_euclid(width);
        let (version, epoch) = (self.graph.version(), self.decay_epoch);
        let at =
            DateTime::<Utc>::from_timestamp_millis(bucket.saturating_mul(width)).unwrap_or(now);
        // The index lists the notes in graph order (checked when it was built).
        let decay = EdgeDecay::new(
            self.graph
                .notes()
                .map(|n| forget::decay_factor(n, at, &self.forget_config))
                .collect(),
        )?;
        self.decay_cache = Some(DecayCache {
            graph_version: version,
            epoch,
            bucket,
            at,
            decay,
        });
        Ok(())
    }

    /// Whether the cached decay factors are those of `now`'s bucket for this graph and epoch.
    fn decay_holds(&self, now: DateTime<Utc>) -> bool {
        let bucket = now
            .timestamp_millis()
            .div_euclid(decay_bucket_ms(&self.forget_config));
        let key = (self.graph.version(), self.decay_epoch, bucket);
        self.decay_cache
            .as_ref()
            .is_some_and(|c| (c.graph_version, c.epoch, c.bucket) == key)
    }

    /// Records one retrieval of each of `ids` at `at`; unknown ids are ignored and counted
    /// out. Returns how many were recorded.
    ///
    /// A recall count changes the recorded notes' retention, so the cached factors are
    /// updated for those notes only and the index's decayed PPR matrix is patched row by row
    /// (falling back to a rebuild at the next recall when it cannot be).
    /// Complexity: O(ids + Σ out-degree of the recorded notes), plus an O(nodes) copy of the
    /// factors.
    pub fn record(&mut self, ids: &[MemoryId], at: DateTime<Utc>) -> usize {
        let recorded: Vec<MemoryId> = ids
            .iter()
            .copied()
            .filter(|id| self.graph.record_retrieval(id, at))
            .collect();
        if !recorded.is_empty() && !self.patch_decay(&recorded) {
            self.decay_epoch += 1;
            self.decay_cache = None;
        }
        recorded.len()
    }

    /// Updates the cached factors of `ids` (just recorded) and patches the index's decayed
    /// matrix; false when there was nothing valid to update (the caller invalidates).
    fn patch_decay(&mut self, ids: &[MemoryId]) -> bool {
        let (Some(cache), Some(index)) = (&mut self.decay_cache, &self.index) else {
            return false;
        };
        if cache.graph_version != self.graph.version()
            || cache.epoch != self.decay_epoch
            || !index.is_current(&self.graph)
        {
            return false;
        }
        let mut updates = Vec::with_capacity(ids.len());
        for id in ids {
            let (Some(pos), Some(note)) = (index.position(id), self.graph.get(id)) else {
                return false;
            };
            updates.push((
                pos as u32,
                forget::decay_factor(note, cache.at, &self.forget_config),
            ));
        }
        let Ok(decay) = cache.decay.with_updates(&updates) else {
            return false;
        };
        let changed: Vec<u32> = updates.iter().map(|u| u.0).collect();
        // A failed patch only means the next recall rebuilds the matrix from `decay`.
        let _ = index.update_decay(&cache.decay, &decay, &changed);
        cache.decay = decay;
        true
    }

    // ---- forgetting ---------------------------------------------------------------------

    /// The forgetting parameters retrieval decays link weights with (default: the seed's).
    pub fn forget_config(&self) -> &ForgetConfig {
        &self.forget_config
    }

    /// Replaces the forgetting parameters; errors (nothing changed) when they are invalid.
    /// Setting the config it already has changes nothing (the cached decay factors stay
    /// valid), so a caller may set it on every recall.
    pub fn set_forget_config(&mut self, cfg: ForgetConfig) -> Result<()> {
        cfg.validate()?;
        if cfg != self.forget_config {
            self.forget_config = cfg;
            self.decay_epoch += 1;
        }
        Ok(())
    }

    /// How many recalls reused the cached decay factors and how many computed them
    /// (hits, misses) since the engine was made.
    pub fn decay_cache_counters(&self) -> (u64, u64) {
        (
            self.decay_hits.load(Ordering::Relaxed),
            self.decay_misses.load(Ordering::Relaxed),
        )
    }

    /// The forgetting state of a note (degree, band, cached revision, original text).
    pub fn forget_state(&self, id: &MemoryId) -> Option<&ForgetState> {
        self.forget_states.get(id)
    }

    /// Sets the forgetting state of a note (e.g. loaded from the store). Errors, changing
    /// nothing, when the note is not in the graph, the degree is not in [0, 1] or the band
    /// is above 10. Does not mark the note dirty: the caller is the one persisting.
    pub fn set_forget_state(&mut self, id: MemoryId, state: ForgetState) -> Result<()> {
        if self.graph.get(&id).is_none() {
            return Err(Error::NotFound(format!("note {id}")));
        }
        if !(state.missing_degree.is_finite() && (0.0..=1.0).contains(&state.missing_degree)) {
            return Err(Error::invalid_value(
                &self.graph.readable_of(&id),
                "forget_state.missing_degree",
                format!(
                    "must be a finite number in [0, 1], got {}",
                    state.missing_degree
                ),
            ));
        }
        if state.band > 10 {
            return Err(Error::invalid_value(
                &self.graph.readable_of(&id),
                "forget_state.band",
                format!("must be in 0..=10, got {}", state.band),
            ));
        }
        self.forget_states.insert(id, state);
        Ok(())
    }

    /// Removes the forgetting state of a note; returns it.
    pub fn clear_forget_state(&mut self, id: &MemoryId) -> Option<ForgetState> {
        self.forget_states.remove(id)
    }

    /// Every forgetting state (unordered).
    pub fn forget_states(&self) -> impl ExactSizeIterator<Item = (&MemoryId, &ForgetState)> {
        self.forget_states.iter()
    }

    /// The notes whose forgetting state or aligned semantic fields changed since the last
    /// call (in id order), clearing the list: what an incremental save writes
    /// (`Change::SetForgetState` with [`Engine::forget_state`], or `ClearForgetState` when
    /// there is none; `Change::PutNote` for the note).
    pub fn take_forget_dirty(&mut self) -> Vec<MemoryId> {
        std::mem::take(&mut self.forget_dirty).into_iter().collect()
    }

    /// The forgetting view of each note of `ids` at `now` with `cfg` (see
    /// [`forget::view_note`]): what the character sees, and for Revised notes without a
    /// revision cached for the current band, the prompt to ask an LLM. Read-only.
    /// Errors on an unknown id (naming it) or an invalid `cfg`.
    /// Complexity: O(Σ text) (jieba) over the requested notes.
    pub fn forget_view(
        &self,
        ids: &[MemoryId],
        now: DateTime<Utc>,
        cfg: &ForgetConfig,
    ) -> Result<Vec<NoteView>> {
        cfg.validate()?;
        let name = forget::character_name(&self.graph);
        ids.iter()
            .map(|id| {
                let note = self
                    .graph
                    .get(id)
                    .ok_or_else(|| Error::NotFound(format!("note {id}")))?;
                forget::view_note(note, self.forget_states.get(id), now, cfg, &name)
            })
            .collect()
    }

    /// Merges an LLM `answer` to the note's revision prompt at `now` and caches it for the
    /// current band: a specific situation's revised narrative; a semantic note's recalled
    /// content, with its aliases, description and concept type aligned in the graph (the
    /// original display text is kept in the state). The graph's narrative/content is never
    /// replaced. Errors, changing nothing, on an unknown note, an invalid `cfg`, a note that
    /// is not due for revision at `now` (not Revised), or an answer with no revision.
    pub fn forget_store_revision(
        &mut self,
        id: &MemoryId,
        answer: &str,
        now: DateTime<Utc>,
        cfg: &ForgetConfig,
    ) -> Result<StoredRevision> {
        cfg.validate()?;
        let note = self
            .graph
            .get(id)
            .ok_or_else(|| Error::NotFound(format!("note {id}")))?;
        let d = forget::decide(note, now, cfg);
        if d.action != ForgetAction::Revised {
            return Err(Error::invalid_argument(
                "note",
                format!(
                    "{:?} is not due for revision (action {} at missing degree {:.3})",
                    note.readable_id,
                    d.action.as_str(),
                    d.missing_degree
                ),
            ));
        }
        let revision = forget::revise_note(note, answer, d.missing_degree.clamp(0.0, 1.0), cfg)?;
        let state = forget::next_state(
            note,
            self.forget_states.get(id),
            &d,
            Some(revision.revised_text.clone()),
            now,
        );
        let mut note_changed = false;
        if let Some(aligned) = &revision.aligned {
            let unchanged = matches!(&note.mem_type, MemoryType::Semantic(s) if s == aligned);
            if !unchanged {
                // get_mut bumps the graph version: the index re-embeds the new fields.
                if let Some(MemoryType::Semantic(s)) =
                    self.graph.get_mut(id).map(|n| &mut n.mem_type)
                {
                    *s = aligned.clone();
                    note_changed = true;
                }
            }
        }
        self.forget_states.insert(*id, state.clone());
        self.forget_dirty.insert(*id);
        Ok(StoredRevision {
            revision,
            state,
            note_changed,
        })
    }

    /// The idle sweep at `now` with `cfg`, no LLM: [`forget::sweep`] (prunes links whose
    /// decayed intensity fell below the threshold, lists archive candidates), then brings the
    /// existing forgetting states up to date — degree and band refreshed, a cached revision
    /// dropped when the band moved on, states of notes no longer in the graph removed. Notes
    /// without a state get none: their degree is computed on the fly at recall, so only
    /// recalled notes carry (and persist) a state. Sets `states_updated` in the report.
    /// Errors (nothing changed) on an invalid `cfg`.
    /// Complexity: O(nodes + links).
    pub fn forget_sweep(&mut self, now: DateTime<Utc>, cfg: &ForgetConfig) -> Result<SweepReport> {
        cfg.validate()?;
        // Pruning moves the graph version; the epoch covers any other decay input.
        self.decay_epoch += 1;
        let mut report = forget::sweep(&mut self.graph, now, cfg);
        let graph = &self.graph;
        self.forget_states.retain(|id, _| graph.get(id).is_some());
        let mut updated = 0;
        for note in graph.notes().filter(|n| forget::forgettable(n)) {
            let d = forget::decide(note, now, cfg);
            let Some(previous) = self.forget_states.get(&note.id) else {
                continue;
            };
            let next = forget::next_state(note, Some(previous), &d, None, now);
            let same = previous.band == next.band
                && previous.revised_text == next.revised_text
                && (previous.missing_degree - next.missing_degree).abs() < 1e-9;
            if !same {
                self.forget_states.insert(note.id, next);
                self.forget_dirty.insert(note.id);
                updated += 1;
            }
        }
        report.states_updated = updated;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::import::{import_file, ImportOptions};
    use crate::retrieval::HashEmbedder;
    use std::cell::RefCell;
    use std::path::Path;

    fn demo() -> Engine {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/characters/demo.json");
        Engine::new(import_file("demo", path, &ImportOptions::default()).unwrap())
    }

    #[test]
    fn recall_needs_embedding_first_then_returns_traced_items() {
        let mut e = demo();
        let q: Vec<SubQuery> = crate::text::text_queries("小白把麻辣烫打翻了", 3);
        assert!(e.recall(&q, &PipelineConfig::default(), None).is_err());

        let seen = RefCell::new(Vec::new());
        let report = |d, t| seen.borrow_mut().push((d, t));
        e.embed_all(
            EmbedderChoice::Hash(HashEmbedder::new(256).unwrap()),
            &report,
        )
        .unwrap();
        let seen = seen.into_inner();
        assert_eq!(seen.first().map(|p| p.0), Some(0));
        assert_eq!(seen.last().map(|p| p.0), seen.last().map(|p| p.1));

        let r = e.recall(&q, &PipelineConfig::default(), None).unwrap();
        let items = e.items(&r);
        assert!(!items.memories.is_empty());
        assert!(items
            .memories
            .iter()
            .all(|m| !m.id.is_empty() && m.stage != "Core"));
        assert_eq!(items.core[0].id, "sem_self");
    }

    #[test]
    fn core_items_come_from_the_index_and_follow_the_graph() {
        let mut e = demo();
        let ids =
            |e: &Engine| -> Vec<String> { e.core_items().into_iter().map(|i| i.id).collect() };
        let scanned = ids(&e);
        assert!(scanned.contains(&"sem_self".to_string()), "{scanned:?}");
        e.embed_all(
            EmbedderChoice::Hash(HashEmbedder::new(64).unwrap()),
            &|_, _| {},
        )
        .unwrap();
        assert_eq!(ids(&e), scanned);
        // A note flagged core after the index was built: the stale index is not used.
        let other = e.graph().notes().find(|n| !n.core).unwrap().id;
        e.graph_mut().get_mut(&other).unwrap().core = true;
        assert!(!e.is_indexed());
        assert_eq!(ids(&e).len(), scanned.len() + 1);
    }

    #[test]
    fn recording_does_not_invalidate_the_index() {
        let mut e = demo();
        e.embed_all(
            EmbedderChoice::Hash(HashEmbedder::new(64).unwrap()),
            &|_, _| {},
        )
        .unwrap();
        let id = e.graph().resolve("sem_self").unwrap();
        let now = Utc::now();
        assert_eq!(e.record(&[id, MemoryId::random()], now), 1);
        assert!(e.is_indexed());
        assert_eq!(e.graph().get(&id).unwrap().retrieval_count, 1);
    }
}
