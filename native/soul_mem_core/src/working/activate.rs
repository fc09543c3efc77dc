//! Activation: seeds from the long-term index, their k-hop neighbourhood loaded from the
//! store, boundary expansion, and recall over the working graph.

use super::stored::*;
use super::*;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::IdMap;
use crate::model::MemoryId;
use crate::retrieval::{
    distinct_query_texts, PipelineConfig, PipelineResult, ShortContext, SubQuery,
};
use crate::store::{pending_by_source, Activation, Store};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use std::time::Instant;

/// Candidates the int8 long-term index proposes per seed, re-scored exactly from the store.
pub const RERANK_OVERSAMPLE: usize = 4;

impl WorkingMemory {
    /// Seeds for `query_vectors`: the top [`WorkingConfig::seeds_per_query`] notes of the
    /// long-term index per vector (cosine, at least `min_score`), merged by best score, best
    /// first. Zero vectors give nothing; a vector of the wrong dimension is an error.
    ///
    /// The int8 index proposes [`RERANK_OVERSAMPLE`]× as many candidates per vector, in one
    /// pass over its rows for all vectors; they are scored again exactly on the stored f32
    /// vectors (those not read lately in one statement, the others held since:
    /// `seed_vectors.rs`), so the seeds are those of an exact f32 scan
    /// ([`Store::nearest`]) unless a true seed ranks below the candidates on the int8 copy
    /// (cosine error ~1e-3). The candidates of a vector asked before, the index unchanged
    /// since, come from memory (`scan_memo.rs`), the same as a scan's.
    ///
    /// Complexity: O(q · n · d) compute for the q vectors not remembered over n rows of
    /// dimension d, one pass of memory traffic, plus indexed reads of the candidates' vectors.
    pub fn seeds(
        &mut self,
        store: &Store,
        query_vectors: &[Vec<f32>],
    ) -> Result<Vec<(MemoryId, f32)>> {
        let k = self.cfg.seeds_per_query;
        let mut usable: Vec<(&[f32], Vec<f32>)> = Vec::with_capacity(query_vectors.len());
        for q in query_vectors {
            if q.len() != self.index.dim {
                return Err(Error::invalid_argument(
                    "query_vectors",
                    format!("{}-dim vector for a {}-dim index", q.len(), self.index.dim),
                ));
            }
            if let Some(unit) = crate::retrieval::dot::unit_vector(q) {
                usable.push((q, unit));
            }
        }
        // The int8 score may sit ~1e-3 below the exact one: widen the floor by that.
        let floor = self.cfg.min_score.map(|m| m - 0.01);
        let normalised: Vec<&[f32]> = usable.iter().map(|(_, n)| n.as_slice()).collect();
        let candidates = self
            .index
            .top_k_remembered(&normalised, k * RERANK_OVERSAMPLE, floor)?;
        let mut ids: Vec<MemoryId> = candidates.iter().flatten().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        let raw: Vec<&[f32]> = usable.iter().map(|(q, _)| *q).collect();
        let held: Vec<(MemoryId, Option<[u8; 32]>)> = ids
            .iter()
            .map(|id| (*id, self.index.hash_of(id).copied()))
            .collect();
        let exact = self.seed_vectors.cosines(store, &self.model, &raw, &held)?;
        let mut best: IdMap<f32> = Default::default();
        for (approx, exact) in candidates.into_iter().zip(exact) {
            let mut scored: Vec<(MemoryId, f32)> = approx
                .into_iter()
                .map(|(id, s)| (id, exact.get(&id).copied().unwrap_or(s)))
                .filter(|(_, s)| self.cfg.min_score.is_none_or(|m| *s >= m))
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            scored.truncate(k);
            for (id, s) in scored {
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
    /// neighbourhood ([`Store::activate`], at most [`WorkingConfig::activation_budget`] notes
    /// per call, nearest first); resident seeds on the boundary are expanded one hop (when
    /// `expand_boundary`); then the least recently activated non-core notes beyond `cap` are
    /// released (changed ones persisted first).
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
        let mut report = ActivationReport::default();
        let mut clock = Stopwatch::start();
        self.activate_unfinished(engine, store, query_vectors, &mut report, &mut clock)?;
        self.release_over_cap(engine, store, &mut report)?;
        self.finish(engine, &mut report);
        Ok(report)
    }

    /// [`Self::activate`] without the release and the report's closing counts (a recall
    /// releases in [`Self::settle`], after its answer, and counts once, at its end: counting
    /// the boundary visits every resident note). Times the seeds and the loading on `clock`.
    fn activate_unfinished(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        query_vectors: &[Vec<f32>],
        report: &mut ActivationReport,
        clock: &mut Stopwatch,
    ) -> Result<()> {
        check_character(engine, store)?;
        self.refresh_from_store(store)?;
        self.tick += 1;
        let seeds = self.seeds(store, query_vectors)?;
        report.timings.seeds_us = clock.lap();
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
            let (g, released) = (engine.graph(), &self.released);
            // Released notes held parsed are not read again (`merge` takes them).
            let act = store.activate_skipping(
                &new_seeds,
                self.cfg.k_hops,
                self.budget(),
                &self.links,
                &|id| g.get(id).is_some() || released.contains(id),
            )?;
            report.truncated |= act.truncated;
            self.merge(engine, store, &act, report)?;
        }
        if self.cfg.expand_boundary && !boundary_seeds.is_empty() {
            self.expand_inner(engine, store, &boundary_seeds, report)?;
        }
        self.ensure_engine_embedder(engine)?;
        report.timings.load_us = clock.lap();
        report.seeds = seeds
            .into_iter()
            .map(|(id, score)| Seed {
                id,
                readable_id: engine.graph().readable_of(&id),
                score,
            })
            .collect();
        Ok(())
    }

    /// Expands, one hop, those of `ids` that are resident boundary notes, then applies the
    /// cap. What a caller runs before the next recall when a result contained boundary notes
    /// (and what [`WorkingMemory::recall_at`] does by itself).
    ///
    /// Complexity: O(new notes × degree) store reads plus the release.
    pub fn expand(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        ids: &[MemoryId],
    ) -> Result<ActivationReport> {
        check_character(engine, store)?;
        self.refresh_from_store(store)?;
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

    /// One recall in activation mode as of `now` (forgetting and decay as
    /// [`Engine::recall_at`]'s): activates for the texts of `queries` (every
    /// [`crate::retrieval::QueryTexts`] item, embedded query side), runs the pipeline on the
    /// working graph, and when the result contains boundary notes (and `expand_boundary`),
    /// expands them one hop and — with [`WorkingConfig::rerun`] — recalls once more in the
    /// same call (`report.rerun`); otherwise the expansion serves the next recall. Recalled
    /// notes count as activated for the LRU order. `report.timings` says where the time went.
    ///
    /// The notes it loads stay resident over the cap (by at most what one activation loads):
    /// releasing them is [`Self::settle`]'s, after the answer. Notes a settle did not release
    /// (it did not run) are released here first. The settle's report counts the boundary
    /// too; this one leaves it out (`None`).
    ///
    /// Complexity: the activation plus one or two pipeline runs over the working graph (each
    /// indexes the notes new to it — their vectors cached with the model).
    pub fn recall_at(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        queries: &[SubQuery],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
        now: DateTime<Utc>,
    ) -> Result<(PipelineResult, ActivationReport)> {
        let mut clock = Stopwatch::start();
        let mut report = ActivationReport::default();
        self.release_over_cap(engine, store, &mut report)?;
        report.timings.release_us = clock.lap();
        let texts = distinct_query_texts(queries);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = self.embed_queries(&refs)?;
        report.timings.embed_us = clock.lap();
        self.activate_unfinished(engine, store, &vectors, &mut report, &mut clock)?;
        engine.prepare_recall(now)?;
        report.timings.index_us = clock.lap();
        let mut result = engine.run_prepared(queries, cfg, short.clone())?;
        report.timings.pipeline_us = clock.lap();
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
                report.timings.expand_us = clock.lap();
                if self.cfg.rerun && report.loaded.len() > before {
                    result = engine.recall_at(queries, cfg, short, now)?;
                    self.touch(&result_ids(&result));
                    report.rerun = true;
                    report.timings.rerun_us = clock.lap();
                }
            }
        }
        // The boundary is left to the settle: counting it reads the stored links of every
        // resident note (~0.4 ms at a 1,300-note working graph), and the settle changes the
        // graph again before anything reads the residency flags.
        count_resident(engine, &mut report);
        report.timings.finish_us = clock.lap();
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

    /// Notes one activation may load: [`WorkingConfig::activation_budget`], at most the cap.
    fn budget(&self) -> usize {
        self.cfg.activation_budget.min(self.cfg.cap)
    }

    pub(super) fn touch_one(&mut self, id: MemoryId) {
        self.seq += 1;
        self.last.insert(id, (self.tick, self.seq));
    }

    pub(super) fn is_boundary(&self, graph: &MemoryGraph, id: &MemoryId) -> bool {
        self.links.on_boundary(graph, id)
    }

    /// The report's closing counts, the boundary included (its residency flags marked for
    /// the graph as it is now). Complexity: O(Σ stored degree of the resident notes).
    pub(super) fn finish(&mut self, engine: &Engine, report: &mut ActivationReport) {
        let g = engine.graph();
        self.links.mark_resident(g);
        count_resident(engine, report);
        report.boundary = Some(g.notes().filter(|n| self.is_boundary(g, &n.id)).count());
    }

    /// Inserts the notes of an activation that are not resident (with all their stored
    /// links, by link id, and their forgetting state; those it skipped because they were
    /// held since their release come from there) and touches every note the walk
    /// reached, resident or not, in its BFS order (core, seeds, hop 1, hop 2, …). The
    /// forgetting states are read in one statement.
    pub(super) fn merge(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        act: &Activation,
        report: &mut ActivationReport,
    ) -> Result<()> {
        let pending = pending_by_source(&act.graph, |_| true);
        let new: Vec<MemoryId> = act
            .order
            .iter()
            .copied()
            .filter(|id| engine.graph().get(id).is_none())
            .filter(|id| act.graph.get(id).is_some() || self.released.contains(id))
            .collect();
        let mut states = store.forget_states_of(&new)?;
        for id in &act.order {
            if engine.graph().get(id).is_some() {
                self.touch_one(*id);
                continue;
            }
            // Links by id: the same order whichever of the note's neighbours were read with
            // it (the walk's matrix rows, and so its sums, follow this order).
            // Read with the activation, or held since its release (the same note, links
            // sorted by id as `canonical` sorts them).
            let note = match full_note(&act.graph, id, &pending) {
                Some(n) => canonical(n),
                None => match self.released.take(id) {
                    Some(n) => {
                        report.from_released += 1;
                        n
                    }
                    None => continue,
                },
            };
            let id = note.id;
            let readable = note.readable_id.clone();
            self.released.loaded(id);
            self.clean.insert(id, note.clone());
            engine.graph_mut().insert(note)?;
            if let Some(s) = states.remove(&id) {
                // A stored state the engine refuses (out of range) is dropped, not fatal.
                if engine.set_forget_state(id, s.clone()).is_ok() {
                    self.clean_states.insert(id, s);
                }
            }
            self.touch_one(id);
            report.loaded.push(readable);
        }
        Ok(())
    }

    /// Loads the one-hop neighbourhood of the boundary notes `ids`.
    pub(super) fn expand_inner(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        ids: &[MemoryId],
        report: &mut ActivationReport,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.refresh_from_store(store)?;
        let (g, released) = (engine.graph(), &self.released);
        let act = store.activate_skipping(ids, 1, self.budget(), &self.links, &|id| {
            g.get(id).is_some() || released.contains(id)
        })?;
        report.truncated |= act.truncated;
        self.merge(engine, store, &act, report)?;
        report
            .expanded
            .extend(ids.iter().map(|id| engine.graph().readable_of(id)));
        Ok(())
    }
}

/// Resident and non-core notes of the working graph into `report`. Complexity: O(resident).
fn count_resident(engine: &Engine, report: &mut ActivationReport) {
    let g = engine.graph();
    report.working_size = g.len();
    report.non_core = g.notes().filter(|n| !n.core).count();
}

/// Ids of the memories, actions and self-knowledge of a recall result.
pub(super) fn result_ids(r: &PipelineResult) -> Vec<MemoryId> {
    r.memories
        .iter()
        .map(|m| m.id)
        .chain(r.actions.iter().map(|a| a.id))
        .chain(r.self_knowledge.iter().map(|a| a.id))
        .collect()
}

/// Laps of wall time for [`RecallTimings`].
pub(super) struct Stopwatch(Instant);

impl Stopwatch {
    pub(super) fn start() -> Self {
        Stopwatch(Instant::now())
    }

    /// Microseconds since the start or the previous lap.
    pub(super) fn lap(&mut self) -> u64 {
        let now = Instant::now();
        let us = now.duration_since(self.0).as_micros();
        self.0 = now;
        u64::try_from(us).unwrap_or(u64::MAX)
    }
}
