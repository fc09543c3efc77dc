//! Working-memory activation: load the neighbourhood of the current topic from long-term
//! memory (the store) as a subgraph, instead of the whole graph (design: 工作记忆 is the
//! activated subgraph of 长期记忆).
//!
//! Every step reads a whole batch of notes in one statement (the ids bound as one JSON array,
//! [`ID_LIST`]): one neighbour query per hop, one for the notes, one for their links, so an
//! activation costs a handful of statements whatever the number of notes it loads. A
//! [`NeighbourSource`] that holds the stored links in memory (working memory's) answers the
//! neighbour and link queries itself: then only the notes are read.

use super::{build_graph, db_err, id_list, Store, ID_LIST};
use crate::error::Result;
use crate::graph::MemoryGraph;
use crate::model::{IdMap, IdSet};
use crate::model::{MemoryId, MemoryLink};
use std::collections::BTreeSet;

/// An activated working-memory subgraph.
#[derive(Debug, Clone)]
pub struct Activation {
    /// The loaded notes. Outgoing links to notes that were not loaded (or are archived) wait
    /// as pending links, so loading those notes later attaches them.
    pub graph: MemoryGraph,
    /// Every note the walk reached, in its order (core, seeds, hop 1, …): those in `graph`
    /// and those [`Store::activate_skipping`] did not read.
    pub order: Vec<MemoryId>,
    /// Loaded notes that have at least one active neighbour (either link direction) that was
    /// not loaded: where a further expansion would continue.
    pub boundary: BTreeSet<MemoryId>,
    /// True when `cap` stopped the expansion before `k_hops` was exhausted.
    pub truncated: bool,
}

/// Where an activation reads the stored graph's neighbour lists from: the store itself
/// (one statement per hop) or an in-memory copy of its links kept by working memory.
pub trait NeighbourSource {
    /// The active stored neighbours of each of `ids` in both link directions, strongest link
    /// first (ties by id), deduplicated, never the note itself; every id gets a list (empty
    /// when it has none).
    fn neighbour_lists(&self, ids: &[MemoryId]) -> Result<IdMap<Vec<MemoryId>>>;

    /// Those of `ids` that are stored and not archived.
    fn active_of(&self, ids: &[MemoryId]) -> Result<IdSet>;

    /// The stored links from each of `ids` (a note's own `links`), each list in stored order
    /// (`ord`, ties by link id); ids without links are absent.
    fn links_from(&self, ids: &[MemoryId]) -> Result<IdMap<Vec<MemoryLink>>>;
}

impl NeighbourSource for Store {
    /// [`Store::neighbour_lists`].
    fn neighbour_lists(&self, ids: &[MemoryId]) -> Result<IdMap<Vec<MemoryId>>> {
        Store::neighbour_lists(self, ids)
    }

    /// One statement for the batch.
    fn active_of(&self, ids: &[MemoryId]) -> Result<IdSet> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let filter = format!("WHERE id IN {ID_LIST} AND +archived=0");
        Ok(self
            .note_ids(&filter, Some(&id_list(ids)?))?
            .into_iter()
            .collect())
    }

    /// One statement for the batch.
    fn links_from(&self, ids: &[MemoryId]) -> Result<IdMap<Vec<MemoryLink>>> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        self.query_links_with(&format!("WHERE from_id IN {ID_LIST}"), &id_list(ids)?)
    }
}

impl Store {
    /// [`Store::activate_with`] reading neighbours from the store.
    /// Complexity: `k_hops + 5` statements, O(loaded notes × their degree) index lookups in
    /// all; independent of the total graph size.
    pub fn activate(&self, seeds: &[MemoryId], k_hops: usize, cap: usize) -> Result<Activation> {
        self.activate_with(seeds, k_hops, cap, self)
    }

    /// Loads the `k_hops` neighbourhood (following links in both directions, never into
    /// archived notes) of `seeds`, breadth-first with stronger links first, plus every core
    /// memory (always resident, and not counted against `cap`). At most `cap` non-core notes
    /// are loaded; unknown or archived seeds are skipped. Neighbour lists come from `source`,
    /// which must reflect this store's current links (the result is then the same whatever
    /// the source); notes and links are read from the store.
    ///
    /// Complexity: 4 statements plus what `source` costs for O(loaded notes) lists.
    pub fn activate_with(
        &self,
        seeds: &[MemoryId],
        k_hops: usize,
        cap: usize,
        source: &dyn NeighbourSource,
    ) -> Result<Activation> {
        self.activate_skipping(seeds, k_hops, cap, source, &|_| false)
    }

    /// [`Store::activate_with`] that walks through the notes `resident` accepts as any other
    /// (they count against `cap` and stay in `order`) but does not read them: what working
    /// memory already holds. Links of the notes read to them wait as pending links in
    /// `graph`. Complexity: as [`Store::activate_with`], the notes read only those not
    /// resident.
    pub fn activate_skipping(
        &self,
        seeds: &[MemoryId],
        k_hops: usize,
        cap: usize,
        source: &dyn NeighbourSource,
        resident: &dyn Fn(&MemoryId) -> bool,
    ) -> Result<Activation> {
        let mut order: Vec<MemoryId> = Vec::new();
        let mut loaded: IdSet = Default::default();
        for id in self.note_ids("WHERE core=1 AND archived=0", None)? {
            if loaded.insert(id) {
                order.push(id);
            }
        }
        // `+archived` (in the store's `active_of`): see `neighbour_lists`.
        let active = source.active_of(seeds)?;
        let mut budget = cap;
        let mut truncated = false;
        let mut frontier: Vec<MemoryId> = Vec::new();
        for s in seeds {
            if !active.contains(s) || frontier.contains(s) {
                continue;
            }
            if !loaded.contains(s) {
                if budget == 0 {
                    truncated = true;
                    continue;
                }
                budget -= 1;
                loaded.insert(*s);
                order.push(*s);
            }
            frontier.push(*s);
        }
        let mut neighbours: IdMap<Vec<MemoryId>> = Default::default();
        'hops: for _ in 0..k_hops {
            if frontier.is_empty() {
                break;
            }
            neighbours.extend(source.neighbour_lists(&frontier)?);
            let mut next = Vec::new();
            for id in &frontier {
                for nb in neighbours.get(id).map(Vec::as_slice).unwrap_or_default() {
                    if loaded.contains(nb) {
                        continue;
                    }
                    if budget == 0 {
                        truncated = true;
                        break 'hops;
                    }
                    budget -= 1;
                    loaded.insert(*nb);
                    order.push(*nb);
                    next.push(*nb);
                }
            }
            frontier = next;
        }
        let unread: Vec<MemoryId> = order
            .iter()
            .filter(|id| !neighbours.contains_key(id))
            .copied()
            .collect();
        neighbours.extend(source.neighbour_lists(&unread)?);

        let boundary = order
            .iter()
            .filter(|id| {
                neighbours
                    .get(id)
                    .is_some_and(|nbs| nbs.iter().any(|n| !loaded.contains(n)))
            })
            .copied()
            .collect();
        let read: Vec<MemoryId> = order.iter().filter(|id| !resident(id)).copied().collect();
        let mut stored = self.notes_linked_by(&read, source)?;
        let mut notes = Vec::with_capacity(order.len());
        let mut links: IdMap<Vec<MemoryLink>> = Default::default();
        for id in &order {
            if let Some(mut note) = stored.remove(id) {
                links.insert(*id, std::mem::take(&mut note.links));
                notes.push((note, false));
            }
        }
        let graph = build_graph(self.character(), notes, &mut links)?;
        Ok(Activation {
            graph,
            order,
            boundary,
            truncated,
        })
    }

    /// The active stored neighbours of each of `ids` in both link directions, strongest link
    /// first (ties by id), deduplicated, never the note itself; every id gets a list (empty
    /// when it has none). One statement for the batch.
    ///
    /// Complexity: O(Σ degree · log rows).
    pub fn neighbour_lists(&self, ids: &[MemoryId]) -> Result<IdMap<Vec<MemoryId>>> {
        let mut out: IdMap<Vec<MemoryId>> = ids.iter().map(|id| (*id, Vec::new())).collect();
        if ids.is_empty() {
            return Ok(out);
        }
        let p = self.path();
        // `+archived`: without statistics SQLite would drive the join from the low-selectivity
        // `notes_archived` index (every active note) instead of the id list.
        let mut st = self
            .conn()
            .prepare_cached(&format!(
                "SELECT src, nb, max(w) AS w FROM (
                    SELECT l.from_id AS src, l.to_id AS nb, l.intensity AS w FROM links l
                      JOIN notes n ON n.id = l.to_id
                     WHERE l.from_id IN {ID_LIST} AND +n.archived = 0
                    UNION ALL
                    SELECT l.to_id AS src, l.from_id AS nb, l.intensity AS w FROM links l
                      JOIN notes n ON n.id = l.from_id
                     WHERE l.to_id IN {ID_LIST} AND +n.archived = 0)
                 WHERE nb <> src
                 GROUP BY src, nb ORDER BY src, w DESC, nb"
            ))
            .map_err(|e| db_err(p, e))?;
        let rows: Vec<(String, String)> = st
            .query_map([id_list(ids)?], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(p, e))?;
        for (src, nb) in rows {
            let src = MemoryId(super::parse_id(p, &src)?);
            let nb = MemoryId(super::parse_id(p, &nb)?);
            out.entry(src).or_default().push(nb);
        }
        Ok(out)
    }

    /// Ids of notes matching a WHERE clause with at most one parameter, in stored order.
    pub(super) fn note_ids(&self, filter: &str, arg: Option<&str>) -> Result<Vec<MemoryId>> {
        let p = self.path();
        let mut st = self
            .conn()
            .prepare_cached(&format!("SELECT id FROM notes {filter} ORDER BY pos"))
            .map_err(|e| db_err(p, e))?;
        let rows: Vec<String> = st
            .query_map(rusqlite::params_from_iter(&arg), |r| r.get(0))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(p, e))?;
        rows.into_iter()
            .map(|s| super::parse_id(p, &s).map(MemoryId))
            .collect()
    }
}
