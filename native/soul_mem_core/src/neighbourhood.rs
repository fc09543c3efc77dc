//! The neighbourhood of some notes in the memory graph: the notes within a few links of them
//! (either direction) and the links among those notes — what a page draws as the graph of a
//! recall.

use crate::graph::MemoryGraph;
use crate::model::MemoryId;
use crate::model::{IdMap, IdSet};
use std::collections::VecDeque;

/// A note of a neighbourhood.
#[derive(Debug, Clone, PartialEq)]
pub struct NeighbourNote {
    /// Readable id.
    pub id: String,
    /// Kind (snake_case name).
    pub kind: &'static str,
    /// Display text.
    pub content: String,
    /// Whether the note is core.
    pub core: bool,
    /// Links from the nearest start note (0 for a start note).
    pub hops: usize,
}

/// A link between two notes of a neighbourhood.
#[derive(Debug, Clone, PartialEq)]
pub struct NeighbourLink {
    /// Readable id of the source.
    pub from: String,
    /// Readable id of the target.
    pub to: String,
    /// Link kind (snake_case name).
    pub kind: &'static str,
    /// Intensity.
    pub intensity: f64,
}

/// Notes and the links among them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Neighbourhood {
    /// Start notes first, then by distance (breadth first), at most the cap.
    pub notes: Vec<NeighbourNote>,
    /// Every link whose both ends are in `notes`.
    pub links: Vec<NeighbourLink>,
}

/// The notes within `hops` links of `start` (unknown ids skipped), at most `max_notes` of
/// them (nearest first; a start note always counts), and the links among them.
///
/// Complexity: O(links) to index incoming links, plus O(visited notes × degree).
pub fn neighbourhood(
    graph: &MemoryGraph,
    start: &[MemoryId],
    hops: usize,
    max_notes: usize,
) -> Neighbourhood {
    let mut incoming: IdMap<Vec<MemoryId>> = Default::default();
    for note in graph.notes() {
        for link in &note.links {
            incoming.entry(link.to).or_default().push(link.from);
        }
    }
    let mut seen: IdMap<usize> = Default::default();
    let mut order: Vec<MemoryId> = Vec::new();
    let mut queue: VecDeque<MemoryId> = VecDeque::new();
    for id in start {
        if graph.get(id).is_some() && !seen.contains_key(id) {
            seen.insert(*id, 0);
            order.push(*id);
            queue.push_back(*id);
        }
    }
    while let Some(id) = queue.pop_front() {
        let depth = seen.get(&id).copied().unwrap_or(0);
        if depth >= hops {
            continue;
        }
        let out = graph
            .get(&id)
            .map(|n| n.links.iter().map(|l| l.to).collect::<Vec<_>>())
            .unwrap_or_default();
        let inc = incoming.get(&id).cloned().unwrap_or_default();
        for next in out.into_iter().chain(inc) {
            if order.len() >= max_notes.max(start.len()) {
                break;
            }
            if graph.get(&next).is_some() && !seen.contains_key(&next) {
                seen.insert(next, depth + 1);
                order.push(next);
                queue.push_back(next);
            }
        }
    }
    let members: IdSet = order.iter().copied().collect();
    let notes = order
        .iter()
        .filter_map(|id| graph.get(id))
        .map(|n| NeighbourNote {
            id: n.readable_id.clone(),
            kind: n.kind().as_str(),
            content: n.display_text(),
            core: n.core,
            hops: seen.get(&n.id).copied().unwrap_or(0),
        })
        .collect();
    let links = order
        .iter()
        .filter_map(|id| graph.get(id))
        .flat_map(|n| n.links.iter())
        .filter(|l| members.contains(&l.to))
        .map(|l| NeighbourLink {
            from: graph.readable_of(&l.from),
            to: graph.readable_of(&l.to),
            kind: l.link_type.kind().as_str(),
            intensity: l.intensity,
        })
        .collect();
    Neighbourhood { notes, links }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::import::{import_file, ImportOptions};
    use std::collections::HashSet;
    use std::path::Path;

    #[test]
    fn one_hop_around_a_note_holds_its_linked_notes_both_ways() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/characters/demo.json");
        let g = import_file("demo", path, &ImportOptions::default()).unwrap();
        let xiaobai = g.resolve("sem_xiaobai").unwrap();
        let n = neighbourhood(&g, &[xiaobai], 1, 100);
        assert_eq!(n.notes[0].id, "sem_xiaobai");
        assert!(n.notes.len() > 1);
        assert!(n.notes[1..].iter().all(|x| x.hops == 1));
        // Every link has both ends among the notes, and one touches the start note.
        let ids: HashSet<&str> = n.notes.iter().map(|x| x.id.as_str()).collect();
        assert!(n
            .links
            .iter()
            .all(|l| ids.contains(l.from.as_str()) && ids.contains(l.to.as_str())));
        assert!(n
            .links
            .iter()
            .any(|l| l.from == "sem_xiaobai" || l.to == "sem_xiaobai"));
        // The cap holds, and hops 0 is the start notes only.
        assert_eq!(neighbourhood(&g, &[xiaobai], 2, 3).notes.len(), 3);
        assert_eq!(neighbourhood(&g, &[xiaobai], 0, 100).notes.len(), 1);
        assert!(neighbourhood(&g, &[MemoryId::random()], 1, 10)
            .notes
            .is_empty());
    }
}
