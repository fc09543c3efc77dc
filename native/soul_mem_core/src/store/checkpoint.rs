//! Writing the graph back: whole ([`Store::save_graph`]), as a checkpoint of what changed
//! ([`Store::checkpoint`]) or as a partial write-back of working memory
//! ([`Store::upsert_notes`]); and loading it ([`Store::load_graph`]).

use super::*;
use crate::model::IdSet;

impl Store {
    /// Replaces all active (non-archived) notes and their links with the graph's, in one
    /// transaction; buffered (pending) links are stored too. Archived notes are kept, unless
    /// the graph holds a note with the same id or readable id, which then replaces them.
    /// Always writes the whole graph and does not sync it (see [`Store::checkpoint`]).
    ///
    /// Complexity: O(nodes + links) rows written.
    pub fn save_graph(&mut self, graph: &MemoryGraph) -> Result<()> {
        self.write_graph(graph, &[], Plan::Full(FullReason::Requested))
            .map(|_| ())
    }

    /// Makes the stored active notes equal the graph, plus `extra` changes (summary, popped
    /// messages, archived notes, forgetting state …) in the SAME transaction: a write-back that
    /// lands whole or not at all. `extra` runs before the graph is written: a note archived
    /// there and absent from the graph stays archived (not deleted), which is how working
    /// memory releases notes. The result is that of [`Store::save_graph`] plus `extra`.
    ///
    /// Incremental when the graph carries this store's current [`Store::sync_tag`] (it was
    /// loaded from or checkpointed to this handle, and no other write touched note rows since):
    /// only the notes in its change log are written (an inserted note at the end of the stored
    /// order, so the order stays the graph's) and the active rows of notes that left it are
    /// deleted with their outgoing links. Otherwise — or when `extra` edits links or deletes a
    /// note the graph holds, or the rows do not match the log — the whole graph is written;
    /// the result says which ([`CheckpointStats`]). On success the graph is synced (its log
    /// emptied, its tag set); on failure nothing is written and the graph keeps its log, so
    /// the next checkpoint retries the same notes.
    ///
    /// Complexity: incremental O(changed notes + their links + pending links + extra) rows
    /// and in-memory work; full O(nodes + links + extra).
    pub fn checkpoint(
        &mut self,
        graph: &mut MemoryGraph,
        extra: &[Change],
    ) -> Result<CheckpointStats> {
        let plan = self.plan(graph, extra);
        let stats = self.write_graph(graph, extra, plan)?;
        graph.mark_synced(self.sync_tag());
        Ok(stats)
    }

    /// [`Store::put_note`] of `note` as [`MemoryGraph::upsert`] would keep it (history of an
    /// existing note preserved), then that upsert into `graph`: durable first, then in memory.
    /// Unlike a bare `put_note`, a graph synced with this store stays synced (the note is in
    /// its change log, so the next checkpoint stays incremental). Bad input changes nothing.
    ///
    /// Complexity: O(note size + its out-degree).
    pub fn upsert_note(&mut self, graph: &mut MemoryGraph, note: MemoryNote) -> Result<MemoryId> {
        let note = graph.prepare_upsert(note)?;
        let synced = graph.sync_tag() == Some(self.sync_tag());
        self.put_note(&note)?;
        let id = note.id;
        // Should the upsert fail, the graph's tag is left stale: the next checkpoint is full
        // and removes the stored note again.
        graph.upsert(note)?;
        if synced {
            graph.retag(self.sync_tag());
        }
        Ok(id)
    }

    /// What a checkpoint of `graph` with `extra` must write. Complexity: O(log + extra).
    fn plan(&self, graph: &MemoryGraph, extra: &[Change]) -> Plan {
        match graph.sync_tag() {
            None => return Plan::Full(FullReason::Untracked),
            Some(tag) if tag != self.sync_tag() => return Plan::Full(FullReason::Stale),
            Some(_) => {}
        }
        let mut touched: IdSet = graph.changed_ids().copied().collect();
        for ch in extra {
            match ch {
                // A full write lets the graph's version of these notes win (and deletes the
                // active ones it does not hold); rewriting or deleting them does the same.
                Change::PutNote(n) => {
                    touched.insert(n.id);
                }
                Change::ArchiveNote(id) => {
                    touched.insert(*id);
                }
                Change::DeleteNote(id) if graph.get(id).is_some() => {
                    return Plan::Full(FullReason::Extra)
                }
                // Deleting a note drops every stored link to it, pending links of graph notes
                // included: those notes are rewritten.
                Change::DeleteNote(id) => {
                    touched.extend(graph.pending_to(id).iter().map(|l| l.from));
                }
                // A link upsert may replace a link of any note (ids are global): rare, so not
                // tracked.
                Change::PutLink(_) | Change::DeleteLink(_) => return Plan::Full(FullReason::Extra),
                _ => {}
            }
        }
        Plan::Incremental(touched.into_iter().collect())
    }

    /// Runs one checkpoint transaction: `extra`, then the graph as `plan` says. On success the
    /// generation moves on and the stats are kept.
    fn write_graph(
        &mut self,
        graph: &MemoryGraph,
        extra: &[Change],
        plan: Plan,
    ) -> Result<CheckpointStats> {
        for ch in extra {
            if let Change::PutNote(n) = ch {
                validate_note(n)?;
            }
            if let Change::PutLink(l) = ch {
                validate_link(l)?;
            }
        }
        if graph.character() != self.character {
            return Err(Error::invalid_argument(
                "graph",
                format!(
                    "graph of {:?} saved to the store of {:?}",
                    graph.character(),
                    self.character
                ),
            ));
        }
        // A whole-graph save touches every index page; give it a large page cache for the
        // duration (a ceiling, released below) instead of thrashing the 32 MiB default.
        let big_cache = matches!(plan, Plan::Full(_)) && graph.len() > BIG_CACHE_NOTES;
        if big_cache {
            self.conn
                .execute_batch("PRAGMA cache_size=-262144;")
                .map_err(|e| db_err(&self.path, e))?;
        }
        let result = self.write(|c, p| {
            for ch in extra {
                apply_change(c, p, ChangeRef::from(ch))?;
            }
            match plan {
                Plan::Full(reason) => write_full(c, p, graph, reason),
                Plan::Incremental(touched) => match write_incremental(c, p, graph, touched)? {
                    Some(stats) => Ok(stats),
                    // Everything written so far is what a full write does too (or overwrites).
                    None => write_full(c, p, graph, FullReason::Mismatch),
                },
            }
        });
        if big_cache {
            // Shrinking the cache also frees the pages beyond the limit.
            self.conn
                .execute_batch("PRAGMA cache_size=-32768;")
                .map_err(|e| db_err(&self.path, e))?;
        }
        let stats = result?;
        self.generation += 1;
        self.last_checkpoint = Some(stats.clone());
        Ok(stats)
    }

    /// Loads the active (non-archived) notes into a graph, in stored order. Links to archived
    /// or unstored notes become pending links (not attached, so algorithms ignore them), which
    /// keeps `load_graph` → edit → [`Store::save_graph`] lossless. The graph is synced with
    /// this handle: its next [`Store::checkpoint`] writes only what changed.
    ///
    /// Complexity: O(nodes + links).
    pub fn load_graph(&self) -> Result<MemoryGraph> {
        let notes = self.query_notes("WHERE archived=0")?;
        let active: IdSet = notes.iter().map(|(n, _)| n.id).collect();
        // One sequential scan of the link table beats index-ordered random reads (3x at 100k
        // notes); filtering happens here.
        let mut links = self.query_links("")?;
        links.retain(|from, _| active.contains(from));
        let mut graph = build_graph(&self.character, notes, &mut links)?;
        graph.mark_synced(self.sync_tag());
        Ok(graph)
    }

    /// Partial checkpoint: `extra` changes, then an upsert of each of `notes` (as
    /// [`Change::PutNote`]: the note row is replaced, its outgoing links become exactly
    /// `note.links`, an archived note stays archived), in ONE transaction. Unlike
    /// [`Store::checkpoint`], stored notes absent from `notes` are left untouched: in
    /// working-memory mode the in-memory graph is a subset of the store, so `notes` must carry
    /// their complete outgoing links (pending ones included).
    ///
    /// Complexity: O(notes + their links + extra) rows written.
    pub fn upsert_notes(&mut self, notes: &[MemoryNote], extra: &[Change]) -> Result<()> {
        for ch in extra {
            if let Change::PutNote(n) = ch {
                validate_note(n)?;
            }
            if let Change::PutLink(l) = ch {
                validate_link(l)?;
            }
        }
        for n in notes {
            validate_note(n)?;
        }
        self.write_rows(|c, p| {
            for ch in extra {
                apply_change(c, p, ChangeRef::from(ch))?;
            }
            for n in notes {
                apply_change(c, p, ChangeRef::PutNote(n))?;
            }
            Ok(())
        })
    }
}
