//! Working-memory activation: load the neighbourhood of the current topic from long-term
//! memory (the store) as a subgraph, instead of the whole graph (design: 工作记忆 is the
//! activated subgraph of 长期记忆).

use super::{build_graph, db_err, Store};
use crate::error::Result;
use crate::graph::MemoryGraph;
use crate::model::{MemoryId, MemoryLink};
use std::collections::{BTreeSet, HashMap, HashSet};

/// An activated working-memory subgraph.
#[derive(Debug, Clone)]
pub struct Activation {
    /// The loaded notes. Outgoing links to notes that were not loaded (or are archived) wait
    /// as pending links, so loading those notes later attaches them.
    pub graph: MemoryGraph,
    /// Loaded notes that have at least one active neighbour (either link direction) that was
    /// not loaded: where a further expansion would continue.
    pub boundary: BTreeSet<MemoryId>,
    /// True when `cap` stopped the expansion before `k_hops` was exhausted.
    pub truncated: bool,
}

impl Store {
    /// Loads the `k_hops` neighbourhood (following links in both directions, never into
    /// archived notes) of `seeds`, breadth-first with stronger links first, plus every core
    /// memory (always resident, and not counted against `cap`). At most `cap` non-core notes
    /// are loaded; unknown or archived seeds are skipped.
    ///
    /// Complexity: O(loaded notes × their degree) indexed queries; independent of the total
    /// graph size.
    pub fn activate(&self, seeds: &[MemoryId], k_hops: usize, cap: usize) -> Result<Activation> {
        let mut order: Vec<MemoryId> = Vec::new();
        let mut loaded: HashSet<MemoryId> = HashSet::new();
        for id in self.active_ids("WHERE core=1 AND archived=0")? {
            if loaded.insert(id) {
                order.push(id);
            }
        }
        let mut budget = cap;
        let mut truncated = false;
        let mut frontier: Vec<MemoryId> = Vec::new();
        for s in seeds {
            if !self.is_active(s)? || frontier.contains(s) {
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
        let mut neighbours_of: HashMap<MemoryId, Vec<MemoryId>> = HashMap::new();
        'hops: for _ in 0..k_hops {
            let mut next = Vec::new();
            for id in &frontier {
                let nbs = self.neighbours(id)?;
                for nb in &nbs {
                    if loaded.contains(nb) {
                        continue;
                    }
                    if budget == 0 {
                        truncated = true;
                        neighbours_of.insert(*id, nbs);
                        break 'hops;
                    }
                    budget -= 1;
                    loaded.insert(*nb);
                    order.push(*nb);
                    next.push(*nb);
                }
                neighbours_of.insert(*id, nbs);
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }

        let mut boundary = BTreeSet::new();
        let mut notes = Vec::with_capacity(order.len());
        let mut links: HashMap<MemoryId, Vec<MemoryLink>> = HashMap::new();
        for id in &order {
            let nbs = match neighbours_of.remove(id) {
                Some(n) => n,
                None => self.neighbours(id)?,
            };
            if nbs.iter().any(|n| !loaded.contains(n)) {
                boundary.insert(*id);
            }
            if let Some(mut note) = self.note(id)? {
                links.insert(*id, std::mem::take(&mut note.links));
                notes.push((note, false));
            }
        }
        let graph = build_graph(self.character(), notes, &mut links)?;
        Ok(Activation {
            graph,
            boundary,
            truncated,
        })
    }

    /// Active neighbours of a note in both directions, strongest link first, deduplicated.
    fn neighbours(&self, id: &MemoryId) -> Result<Vec<MemoryId>> {
        let p = self.path();
        let mut st = self
            .conn()
            .prepare_cached(
                "SELECT nb, max(w) AS w FROM (
                    SELECT l.to_id AS nb, l.intensity AS w FROM links l
                      JOIN notes n ON n.id = l.to_id
                     WHERE l.from_id = ?1 AND n.archived = 0
                    UNION ALL
                    SELECT l.from_id AS nb, l.intensity AS w FROM links l
                      JOIN notes n ON n.id = l.from_id
                     WHERE l.to_id = ?1 AND n.archived = 0)
                 WHERE nb <> ?1
                 GROUP BY nb ORDER BY w DESC, nb",
            )
            .map_err(|e| db_err(p, e))?;
        let rows: Vec<String> = st
            .query_map([id.to_string()], |r| r.get(0))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(p, e))?;
        rows.into_iter()
            .map(|s| super::parse_id(p, &s).map(MemoryId))
            .collect()
    }

    fn is_active(&self, id: &MemoryId) -> Result<bool> {
        let n: i64 = self
            .conn()
            .query_row(
                "SELECT count(*) FROM notes WHERE id=?1 AND archived=0",
                [id.to_string()],
                |r| r.get(0),
            )
            .map_err(|e| db_err(self.path(), e))?;
        Ok(n > 0)
    }

    /// Ids of notes matching a WHERE clause (no parameters), in stored order.
    pub(super) fn active_ids(&self, filter: &str) -> Result<Vec<MemoryId>> {
        let p = self.path();
        let mut st = self
            .conn()
            .prepare_cached(&format!("SELECT id FROM notes {filter} ORDER BY pos"))
            .map_err(|e| db_err(p, e))?;
        let rows: Vec<String> = st
            .query_map([], |r| r.get(0))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(p, e))?;
        rows.into_iter()
            .map(|s| super::parse_id(p, &s).map(MemoryId))
            .collect()
    }
}
