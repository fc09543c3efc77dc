//! Write-back in activation mode: the partial checkpoint, the index kept current, and the cap
//! that releases the least recently activated notes (written first when they changed).

use super::index::*;
use super::stored::*;
use super::*;
use crate::embedding_cache::text_hash;
use crate::engine::Engine;
use crate::error::Result;
use crate::model::IdSet;
use crate::model::{MemoryId, MemoryNote};
use crate::store::{pending_by_source, Change, Store};
use chrono::{DateTime, Utc};

/// A retrieval patch's retrieval count and last access time.
type RetrievalPatch = (u32, DateTime<Utc>);

impl WorkingMemory {
    /// Partial checkpoint of the whole working graph: forgetting states of resident notes,
    /// then `extra` (so its changes win), then every resident note upserted with its complete
    /// outgoing links (pending ones included), in ONE transaction ([`Store::upsert_notes`]);
    /// stored notes that are not resident are never deleted — a note removed from the working
    /// graph (e.g. merged away) must be deleted or archived through `extra`. Notes deleted by
    /// `extra` are not written back, nor are links to them. Before writing, notes (resident or
    /// put by `extra`) whose primary text is new or changed are embedded; their vectors are written right after
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
        let pending = pending_by_source(graph, |_| true);
        let notes: Vec<MemoryNote> = graph
            .notes()
            .filter(|n| !deleted.contains(&n.id))
            .filter_map(|n| full_note(graph, &n.id, &pending))
            .map(|mut n| {
                n.links.retain(|l| !deleted.contains(&l.to));
                n
            })
            .collect();
        // Notes `extra` puts that are not resident (a resident note's own version is written
        // after `extra` and wins) are indexed too: the index follows the store.
        let put: Vec<MemoryNote> = extra
            .iter()
            .filter_map(|c| match c {
                Change::PutNote(n) if graph.get(&n.id).is_none() && !deleted.contains(&n.id) => {
                    Some(n.clone())
                }
                _ => None,
            })
            .collect();
        let mut updates = self.index_updates(&notes)?;
        updates.extend(self.index_updates(&put)?);
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
        self.upsert_notes(store, &notes, &changes)?;
        // What the store now holds (`extra`'s states after the engine's: the later wins).
        for ch in &changes {
            match ch {
                Change::SetForgetState(id, s) => {
                    self.clean_states.insert(*id, s.clone());
                }
                Change::ClearForgetState(id) => {
                    self.clean_states.remove(id);
                }
                _ => {}
            }
        }
        if !updates.is_empty() {
            let before = store.vectors_tag();
            store.put_embeddings(&self.model, &updates)?;
            self.seed_vectors
                .wrote_vectors(store, before, updates.iter().map(|(id, ..)| id));
        }
        self.index.upsert_rows(&updates)?;
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
        let index_saved = self.save_index_if_due(store);
        Ok(CheckpointReport {
            notes: report_notes,
            embedded: updates.len(),
            dropped: gone.len(),
            index_saved,
        })
    }

    /// Vectors to (re-)write for `notes` whose primary text is not in the index as it is.
    pub(super) fn index_updates(&self, notes: &[MemoryNote]) -> Result<Vec<VectorRow>> {
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

    /// What follows a recall, off its path (the service runs it once the answer is out):
    /// releases the notes over the cap ([`Self::release_over_cap`]: the changed ones written
    /// first), then brings the engine's index up to the smaller graph
    /// ([`Engine::ensure_index`]): the next recall's build then only appends the notes it
    /// brings in, instead of also moving every kept row down over the released ones. Skipping
    /// it loses nothing: the next recall releases (and rebuilds) first.
    ///
    /// Errors: a failed release write removes nothing (the notes stay resident and are
    /// released by a later settle or recall); a failed index build leaves the next recall
    /// to build it.
    ///
    /// Complexity: as [`Self::release_over_cap`], plus an index build over the working graph
    /// when notes were released.
    pub fn settle(&mut self, engine: &mut Engine, store: &mut Store) -> Result<ActivationReport> {
        check_character(engine, store)?;
        let mut report = ActivationReport::default();
        self.release_over_cap(engine, store, &mut report)?;
        if !report.released.is_empty() && engine.embedder().is_some() {
            engine.ensure_index()?;
        }
        self.finish(engine, &mut report);
        Ok(report)
    }

    /// Releases least recently activated non-core notes until at most `cap` remain: the
    /// changed ones (and the forgetting states of all) are written in one transaction first.
    pub(super) fn release_over_cap(
        &mut self,
        engine: &mut Engine,
        store: &mut Store,
        report: &mut ActivationReport,
    ) -> Result<()> {
        let graph = engine.graph();
        // Counted first: a recall runs this on every message, and after a settle there is
        // nothing to release (the LRU keys are looked up only when something goes).
        if graph.notes().filter(|n| !n.core).count() <= self.cfg.cap {
            return Ok(());
        }
        let mut non_core: Vec<(u64, std::cmp::Reverse<u64>, MemoryId)> = graph
            .notes()
            .filter(|n| !n.core)
            .map(|n| {
                let (t, s) = self.last.get(&n.id).copied().unwrap_or((0, 0));
                (t, std::cmp::Reverse(s), n.id)
            })
            .collect();
        let excess = non_core.len() - self.cfg.cap;
        non_core.select_nth_unstable(excess - 1);
        non_core.truncate(excess);
        non_core.sort();
        let victims: Vec<MemoryId> = non_core.into_iter().map(|(_, _, id)| id).collect();

        let victim_set: IdSet = victims.iter().copied().collect();
        let pending = pending_by_source(graph, |id| victim_set.contains(id));
        let mut write = Vec::new();
        // Row patches: moved forgetting states and retrieval counts.
        let mut patches = Vec::new();
        // The victims the store will hold as loaded (with the retrieval patch, if any): their
        // clean copies are kept parsed once the write is done.
        let mut unchanged: Vec<(MemoryId, Option<RetrievalPatch>)> = Vec::new();
        for id in &victims {
            let Some(mut full) = full_note(graph, id, &pending) else {
                continue;
            };
            full.links.retain(|l| !self.deleted.contains(&l.to));
            // The store holds the state as loaded (or last written): write it only if it moved.
            if let Some(s) = engine
                .forget_state(id)
                .filter(|s| self.clean_states.get(id) != Some(*s))
            {
                patches.push(Change::SetForgetState(*id, s.clone()));
            }
            match self
                .clean
                .get(id)
                .map_or(Drift::Rewrite, |c| drift(c, &full))
            {
                Drift::Same => unchanged.push((*id, None)),
                // Most victims were only recalled: a patch of two columns, not the whole row
                // and its links again (a fraction of the pages, so of the log and its folds).
                Drift::Retrieval => {
                    let retrieval = (full.retrieval_count, full.last_accessed_time);
                    patches.push(Change::SetRetrieval(*id, retrieval.0, retrieval.1));
                    unchanged.push((*id, Some(retrieval)));
                }
                Drift::Rewrite => write.push(full),
            }
        }
        let updates = self.index_updates(&write)?;
        if !write.is_empty() || !patches.is_empty() {
            self.upsert_notes(store, &write, &patches)?;
        }
        if !updates.is_empty() {
            let before = store.vectors_tag();
            store.put_embeddings(&self.model, &updates)?;
            self.seed_vectors
                .wrote_vectors(store, before, updates.iter().map(|(id, ..)| id));
            self.index.upsert_rows(&updates)?;
        }
        let patched = patches
            .iter()
            .filter(|c| matches!(c, Change::SetRetrieval(..)))
            .count();
        report.persisted += write.len() + patched;
        for id in &victims {
            report.released.push(engine.graph().readable_of(id));
        }
        let unchanged = unchanged.into_iter().filter_map(|(id, retrieval)| {
            let mut n = self.clean.remove(&id)?;
            if let Some((count, at)) = retrieval {
                n.retrieval_count = count;
                n.last_accessed_time = at;
            }
            Some(n)
        });
        self.released.put(store, unchanged.collect());
        self.remove_resident(engine, &victims, true);
        Ok(())
    }

    /// Removes resident notes from the graph and the bookkeeping. With `keep_incoming`, links
    /// from remaining notes to them go back to pending, so a later write-back of the source
    /// keeps them. Complexity: O(resident notes + links) once for the batch.
    pub(super) fn remove_resident(
        &mut self,
        engine: &mut Engine,
        ids: &[MemoryId],
        keep_incoming: bool,
    ) {
        if ids.is_empty() {
            return;
        }
        engine.graph_mut().remove_many(ids, keep_incoming);
        for id in ids {
            engine.clear_forget_state(id);
            self.last.remove(id);
            self.clean.remove(id);
            self.clean_states.remove(id);
            self.released.unloaded(id);
        }
    }

    /// Forgets a note deleted for good (`crate::note_delete`), resident or not: its row of the
    /// long-term index and its activation bookkeeping go, and links to it are never written
    /// back; the stored adjacency is reloaded at the next activation (the deletion was written
    /// by another path). Complexity: O(1).
    pub fn note_deleted(&mut self, id: &MemoryId) {
        self.index.remove(id);
        self.released.unloaded(id);
        self.released.take(id);
        self.last.remove(id);
        self.clean.remove(id);
        self.clean_states.remove(id);
        self.deleted.insert(*id);
    }
}
