//! What working memory reads from the store directly (texts, neighbours) and the note forms
//! it compares and writes back.

use super::primary_text;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::IdMap;
use crate::model::{MemoryId, MemoryLink, MemoryNote, MemoryType};
use crate::store::{db_err, Store};
use std::path::Path;

pub(super) fn parse_uuid(path: &Path, s: &str) -> Result<MemoryId> {
    uuid::Uuid::parse_str(s)
        .map(MemoryId)
        .map_err(|e| Error::Corrupt {
            path: path.display().to_string(),
            message: format!("bad note id {s:?}: {e}"),
        })
}

/// Every active stored note with its primary text: (id, text, core).
/// Complexity: O(notes) rows read, one payload parse each.
pub(super) fn stored_texts(store: &Store) -> Result<Vec<(MemoryId, Option<String>)>> {
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
        out.push((parse_uuid(p, &id)?, primary_text(&mt)));
    }
    Ok(out)
}

/// A note with ALL its outgoing links (attached and pending), as the store keeps it.
/// `pending`: the graph's pending links by source ([`crate::store::pending_by_source`]).
pub(super) fn full_note(
    graph: &MemoryGraph,
    id: &MemoryId,
    pending: &IdMap<Vec<&MemoryLink>>,
) -> Option<MemoryNote> {
    let mut n = graph.get(id)?.clone();
    if let Some(p) = pending.get(id) {
        n.links.extend(p.iter().map(|l| (*l).clone()));
    }
    Some(n)
}

/// The comparison form of a note: links sorted by id (attach order is not meaningful).
pub(super) fn canonical(mut n: MemoryNote) -> MemoryNote {
    n.links.sort_by_key(|l| l.id);
    n
}

/// How a resident note differs from its stored row (see [`drift`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drift {
    /// Nothing to write.
    Same,
    /// Only the retrieval count and last access time moved (a recall recorded it): the row is
    /// patched in place ([`crate::store::Change::SetRetrieval`]), its links untouched.
    Retrieval,
    /// Anything else: the note is written whole, with its links.
    Rewrite,
}

/// How `n` differs from `clean` (a note in [`canonical`] form), up to the order of its links:
/// what a release asks of every victim, without cloning it. Every field is named, so a new
/// one cannot be left out of the comparison. Complexity: O(note + links · log links).
pub(super) fn drift(clean: &MemoryNote, n: &MemoryNote) -> Drift {
    let MemoryNote {
        id,
        readable_id,
        tags,
        retrieval_count,
        create_time,
        last_accessed_time,
        core,
        mem_type,
        links,
    } = n;
    if links.len() != clean.links.len() {
        return Drift::Rewrite;
    }
    let mut sorted: Vec<&MemoryLink> = links.iter().collect();
    sorted.sort_by_key(|l| l.id);
    let rest_same = *id == clean.id
        && *readable_id == clean.readable_id
        && *tags == clean.tags
        && *create_time == clean.create_time
        && *core == clean.core
        && *mem_type == clean.mem_type
        && sorted.into_iter().eq(clean.links.iter());
    if !rest_same {
        Drift::Rewrite
    } else if *retrieval_count == clean.retrieval_count
        && *last_accessed_time == clean.last_accessed_time
    {
        Drift::Same
    } else {
        Drift::Retrieval
    }
}

pub(super) fn check_character(engine: &Engine, store: &Store) -> Result<()> {
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
