//! What a [`super::RetrievalIndex`] derives from each note's content alone — its
//! [`NodeMeta`] and its identifiers for the string channel — and how the next snapshot of a
//! changed graph carries them over ([`NodeFacts`]) instead of deriving them again.

use super::NodeMeta;
use crate::model::{AbstractSituation, IdMap, MemoryNote, MemoryType, Situation};
use crate::retrieval::field_texts::environment_text;
use crate::retrieval::query::Ident;

/// The per-note facts of a snapshot given up for the next one ([`super::RetrievalIndex::into_parts`]),
/// each with the content revision it was derived from
/// ([`crate::graph::MemoryGraph::content_revision`]): the next snapshot moves a note's facts
/// over when its revision did not change. A working graph keeps ~1,000 of its ~1,300 notes
/// from one recall to the next, and deriving their identifiers again (lower-casing and
/// joining every name and alias) was half of a snapshot's build.
#[derive(Debug, Default)]
pub struct NodeFacts {
    pub(super) nodes: Vec<NodeMeta>,
    pub(super) idents: Vec<Ident>,
    pub(super) ident_offsets: Vec<u32>,
    pub(super) revisions: Vec<u64>,
    pub(super) by_id: IdMap<u32>,
}

impl NodeFacts {
    /// Appends the facts of `note`, whose content revision is `rev` (0: unknown), to `nodes`
    /// and `idents`: moved out of `self` when it holds them for that revision, derived from
    /// the note otherwise. Complexity: O(its identifiers) moved, or O(its identifier text).
    pub(super) fn push(
        &mut self,
        note: &MemoryNote,
        rev: u64,
        nodes: &mut Vec<NodeMeta>,
        idents: &mut Vec<Ident>,
    ) {
        if let Some(meta) = self.take(note, rev, idents) {
            nodes.push(meta);
            return;
        }
        let (time, action) = match &note.mem_type {
            MemoryType::Situation(Situation::SpecificSituation(s)) => (s.time_span, String::new()),
            MemoryType::Procedure(p) => (None, p.action.content.clone()),
            _ => (None, String::new()),
        };
        nodes.push(NodeMeta {
            id: note.id,
            readable_id: note.readable_id.clone(),
            kind: note.kind(),
            time,
            action,
        });
        idents.extend(node_idents(&note.mem_type));
    }

    /// Moves the facts held for `note` at revision `rev` out (the identifiers onto `idents`);
    /// `None` when none are held for that revision.
    fn take(&mut self, note: &MemoryNote, rev: u64, idents: &mut Vec<Ident>) -> Option<NodeMeta> {
        if rev == 0 {
            return None;
        }
        let j = *self.by_id.get(&note.id)? as usize;
        if self.revisions.get(j) != Some(&rev) {
            return None;
        }
        let (a, b) = (
            *self.ident_offsets.get(j)? as usize,
            *self.ident_offsets.get(j + 1)? as usize,
        );
        let held = self.nodes.get_mut(j)?;
        // A note is taken once at most: its slot is left empty behind it.
        let meta = NodeMeta {
            id: held.id,
            readable_id: std::mem::take(&mut held.readable_id),
            kind: held.kind,
            time: held.time,
            action: std::mem::take(&mut held.action),
        };
        self.revisions[j] = 0;
        idents.extend(self.idents.get_mut(a..b)?.iter_mut().map(|i| Ident {
            text: std::mem::take(&mut i.text),
            chars: i.chars,
            bloom: i.bloom,
            first: i.first,
        }));
        Some(meta)
    }
}

/// The identifiers of a note's content: a semantic note's content and aliases, an abstract
/// situation's name (and a participant's role); specific situations and procedures have none
/// (free text only). Consecutive repeats (an alias equal to the name) are dropped.
fn node_idents(mem: &MemoryType) -> Vec<Ident> {
    let mut out = Vec::new();
    match mem {
        MemoryType::Semantic(s) => {
            out.extend(Ident::new(&s.content));
            out.extend(s.aliases.iter().filter_map(|a| Ident::new(a)));
        }
        MemoryType::Situation(Situation::AbstractSituation(a)) => match a {
            AbstractSituation::Location(l) => out.extend(Ident::new(&l.name)),
            AbstractSituation::Participant(p) => {
                out.extend(Ident::new(&p.name));
                out.extend(Ident::new(&p.role));
            }
            AbstractSituation::Environment(e) => {
                out.extend(Ident::new(&environment_text(&e.atmosphere, &e.tone)))
            }
            AbstractSituation::Event(e) => out.extend(Ident::new(&e.action)),
        },
        _ => {}
    }
    out.dedup_by(|a, b| a.text == b.text);
    out
}

#[cfg(test)]
mod tests {
    use super::super::RetrievalIndex;
    use crate::graph::MemoryGraph;
    use crate::model::{ConceptType, MemoryId, MemoryNote, MemoryType, SemMemory};
    use crate::retrieval::{HashEmbedder, NodeVectors};
    use chrono::{TimeZone, Utc};

    fn sem(name: &str, content: &str, aliases: &[&str]) -> MemoryNote {
        MemoryNote::new(
            "小蓝",
            name,
            MemoryType::Semantic(SemMemory {
                content: content.into(),
                aliases: aliases.iter().map(|a| a.to_string()).collect(),
                concept_type: ConceptType::Entity,
                description: String::new(),
            }),
            Utc.timestamp_opt(0, 0).unwrap(),
        )
    }

    fn build(g: &MemoryGraph, prev: Option<RetrievalIndex>) -> RetrievalIndex {
        let e = HashEmbedder::new(16).unwrap();
        let vectors = NodeVectors::embed_graph(g, &e).unwrap();
        let (mut lexical, facts) = match prev.map(RetrievalIndex::into_parts) {
            Some((_, l, f)) => (l, f),
            None => Default::default(),
        };
        let refused = lexical.sync(g);
        RetrievalIndex::build_synced(g, vectors, lexical, refused, facts).unwrap()
    }

    /// What a snapshot carries over is what it would derive: after notes were changed in
    /// place, removed, added and (one) given back, every node's metadata and identifiers
    /// equal a fresh build's, and an unchanged note's were moved, not derived again.
    #[test]
    fn carried_facts_equal_derived_ones() {
        let mut g = MemoryGraph::new("小蓝");
        for i in 0..5 {
            g.insert(sem(
                &format!("n{i}"),
                &format!("Name {i}"),
                &["Alias", "alias"],
            ))
            .unwrap();
        }
        let first = build(&g, None);
        let kept = first.idents(0).first().map(|i| i.text.as_ptr());
        if let Some(MemoryType::Semantic(s)) = g
            .get_mut(&MemoryId::derive("小蓝", "n1"))
            .map(|n| &mut n.mem_type)
        {
            s.content = "Renamed  ONE".into();
        }
        let n3 = g.get(&MemoryId::derive("小蓝", "n3")).cloned().unwrap();
        g.remove(&n3.id);
        g.insert(sem("n9", "Fresh", &[])).unwrap();
        g.insert(n3).unwrap();

        let carried = build(&g, Some(first));
        let fresh = build(&g, None);
        assert_eq!(carried.len(), fresh.len());
        for i in 0..fresh.len() {
            let (a, b) = (&carried.nodes()[i], &fresh.nodes()[i]);
            assert_eq!(
                (a.id, &a.readable_id, a.kind, a.time, &a.action),
                (b.id, &b.readable_id, b.kind, b.time, &b.action),
                "node {i}"
            );
            assert_eq!(
                carried.idents(i),
                fresh.idents(i),
                "identifiers of node {i}"
            );
        }
        assert_eq!(carried.ident_nodes(), fresh.ident_nodes());
        assert_eq!(carried.idents(1)[0].text, "renamed one");
        assert_eq!(
            carried.idents(0).first().map(|i| i.text.as_ptr()),
            kept,
            "an unchanged note's identifiers are moved over"
        );
    }
}
