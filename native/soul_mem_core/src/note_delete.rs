//! Deleting a note for good ([`Engine::delete_note`]): the note and every link from or to it
//! leave the graph (and so the retrieval index, which is rebuilt from the graph's version at
//! the next recall) and, in the same call, the store — note row, links in both directions,
//! embeddings, forgetting state, retrieval records and feedback, in one transaction
//! ([`Store::delete_note`]). The store is written first, so an acknowledged delete is durable;
//! a failed store write changes nothing.
//!
//! The self node (`sem_self`) is refused: it is the character itself, other notes and the
//! recall's core section hang off it. Unlike archiving (kept on disk, out of the graph), a
//! delete leaves nothing behind.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::import::SELF_NODE_ID;
use crate::model::{LinkId, MemoryId};
use crate::store::Store;
use crate::working::WorkingMemory;
use serde::Serialize;
use std::collections::HashSet;

/// What [`Engine::delete_note`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// The note's readable id.
    pub id: String,
    /// Distinct links removed (from and to the note, in the graph and the store).
    pub links_removed: usize,
}

impl Engine {
    /// Deletes the note named `id` (readable id or UUID text) from the graph and, when given,
    /// the store (where it may be archived, or not loaded in working-memory mode); `working`,
    /// when given, forgets it too. Errors: [`Error::NotFound`] naming `id` when neither holds
    /// it, [`Error::InvalidArgument`] for the self node, or the store's error (nothing
    /// changed).
    ///
    /// Complexity: O(nodes + links) for the graph's incoming links, plus the store's indexed
    /// deletes.
    pub fn delete_note(
        &mut self,
        store: Option<&mut Store>,
        working: Option<&mut WorkingMemory>,
        id: &str,
    ) -> Result<DeleteReport> {
        let (uuid, readable) = match self.graph().resolve(id) {
            Some(uuid) => (uuid, self.graph().readable_of(&uuid)),
            None => match store.as_deref().map(|s| s.find_note(id)).transpose()? {
                Some(Some(found)) => found,
                _ => return Err(Error::NotFound(format!("note {id:?}"))),
            },
        };
        if readable == SELF_NODE_ID {
            return Err(Error::invalid_argument(
                "id",
                format!("{SELF_NODE_ID:?} is the character's self node and cannot be deleted"),
            ));
        }
        let mut links = self.graph_links_touching(&uuid);
        if let Some(store) = store {
            links.extend(store.link_ids_touching(&uuid)?);
            let synced = self.graph().sync_tag() == Some(store.sync_tag());
            store.delete_note(&uuid)?;
            self.remove_from_graph(&uuid);
            // The graph's log covers the removal (the note and the sources of its incoming
            // links): the next checkpoint stays incremental.
            if synced {
                self.graph_mut().retag(store.sync_tag());
            }
        } else {
            self.remove_from_graph(&uuid);
        }
        if let Some(wm) = working {
            wm.note_deleted(&uuid);
        }
        Ok(DeleteReport {
            id: readable,
            links_removed: links.len(),
        })
    }

    /// Ids of the graph's links from or to `id`, attached or pending. Complexity: O(nodes +
    /// links).
    fn graph_links_touching(&self, id: &MemoryId) -> HashSet<LinkId> {
        let g = self.graph();
        g.notes()
            .flat_map(|n| n.links.iter())
            .chain(g.pending_links())
            .filter(|l| l.from == *id || l.to == *id)
            .map(|l| l.id)
            .collect()
    }

    fn remove_from_graph(&mut self, id: &MemoryId) {
        let graph = self.graph_mut();
        graph.remove(id);
        graph.remove_pending_to(id);
        self.clear_forget_state(id);
    }
}

#[cfg(test)]
mod tests;
