//! Dedupe: matching a new note against the existing ones — normalised names first, then
//! embedding similarity — so consolidation merges or reuses instead of duplicating.

use super::apply::embed_unit;
use super::induce::abstract_facet;
use crate::error::Result;
use crate::graph::MemoryGraph;
use crate::model::{ConceptType, MemoryId, MemoryType, NodeKind, SemMemory, Situation};
use crate::retrieval::dot::dot;
use crate::retrieval::TextEmbedder;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

/// Normalises a name for exact-match dedupe (NFKC-like for what matters here): trims,
/// folds full-width ASCII and the ideographic space to ASCII, lower-cases and drops
/// punctuation, symbols and white space. `"  小白！"`, `"小白"` and `"ＸＩＡＯ Bai"` /
/// `"xiaobai"` compare equal. Complexity: O(length).
pub fn normalize_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.trim().chars() {
        let c = match u32::from(c) {
            cp @ 0xFF01..=0xFF5E => char::from_u32(cp - 0xFEE0).unwrap_or(c),
            _ => c,
        };
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Groups of Semantic notes that share a normalised content or alias (the duplicates
/// consolidation must never create), by readable id, each group sorted, groups sorted.
/// Complexity: O(names).
pub fn duplicate_semantic_groups(graph: &MemoryGraph) -> Vec<Vec<String>> {
    let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
    for note in graph.notes() {
        if let MemoryType::Semantic(s) = &note.mem_type {
            let names: HashSet<String> = std::iter::once(&s.content)
                .chain(&s.aliases)
                .map(|n| normalize_name(n))
                .filter(|n| !n.is_empty())
                .collect();
            for n in names {
                by_name.entry(n).or_default().push(note.readable_id.clone());
            }
        }
    }
    let mut groups: Vec<Vec<String>> = by_name
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    groups.sort();
    groups.dedup();
    groups
}

/// Dedupe key of abstract situations and procedures: kind + normalised text.
pub(super) fn other_key(mem_type: &MemoryType) -> Option<(NodeKind, String)> {
    match mem_type {
        MemoryType::Situation(Situation::AbstractSituation(a)) => Some((
            NodeKind::AbstractSituation,
            format!(
                "{}:{}",
                abstract_facet(a).0,
                normalize_name(&crate::model::abstract_text(a))
            ),
        )),
        MemoryType::Procedure(p) => Some((NodeKind::Procedure, normalize_name(&p.action.content))),
        _ => None,
    }
}

/// Names of Semantic notes: exact (normalised) lookup and, once embedded, similarity.
pub(super) struct SemanticIndex {
    exact: HashMap<String, MemoryId>,
    names: Vec<(MemoryId, ConceptType, String)>,
    vectors: Vec<(MemoryId, ConceptType, Vec<f32>)>,
}

impl SemanticIndex {
    pub(super) fn build(graph: &MemoryGraph) -> Self {
        let mut idx = SemanticIndex {
            exact: HashMap::new(),
            names: Vec::new(),
            vectors: Vec::new(),
        };
        for n in graph.notes() {
            if let MemoryType::Semantic(s) = &n.mem_type {
                for name in std::iter::once(&s.content).chain(&s.aliases) {
                    let norm = normalize_name(name);
                    if !norm.is_empty() {
                        idx.exact.entry(norm).or_insert(n.id);
                        idx.names.push((n.id, s.concept_type, name.clone()));
                    }
                }
            }
        }
        idx
    }

    pub(super) fn exact(&self, s: &SemMemory) -> Option<MemoryId> {
        std::iter::once(&s.content)
            .chain(&s.aliases)
            .find_map(|n| self.exact.get(&normalize_name(n)).copied())
    }

    pub(super) fn embed_existing(&mut self, e: &dyn TextEmbedder) -> Result<()> {
        let texts: Vec<&str> = self.names.iter().map(|(_, _, t)| t.as_str()).collect();
        let vs = embed_unit(e, &texts)?;
        self.vectors = self
            .names
            .iter()
            .zip(vs)
            .map(|((id, ct, _), v)| (*id, *ct, v))
            .collect();
        Ok(())
    }

    pub(super) fn similar(
        &self,
        v: &[f32],
        ct: ConceptType,
        threshold: f32,
    ) -> Option<(MemoryId, f32)> {
        self.vectors
            .iter()
            .filter(|(_, c, _)| *c == ct)
            .map(|(id, _, w)| (*id, dot(v, w)))
            .filter(|(_, s)| *s >= threshold)
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Indexes the current names of `id` (after a create or merge) so later notes of the same
    /// change set match it too.
    pub(super) fn add_names(&mut self, graph: &MemoryGraph, id: MemoryId, vector: Option<&[f32]>) {
        if let Some(MemoryType::Semantic(s)) = graph.get(&id).map(|n| &n.mem_type) {
            for name in std::iter::once(&s.content).chain(&s.aliases) {
                let norm = normalize_name(name);
                if !norm.is_empty() {
                    self.exact.entry(norm).or_insert(id);
                }
            }
            if let Some(v) = vector {
                self.vectors.push((id, s.concept_type, v.to_vec()));
            }
        }
    }
}

/// Narratives of specific situations: a repeat is the same (normalised or similar) narrative
/// on the same day; the same narrative on another day is a new, repeated situation.
pub(super) struct SituationIndex {
    exact: HashMap<String, Vec<(MemoryId, DateTime<Utc>)>>,
    texts: Vec<(MemoryId, DateTime<Utc>, String)>,
    vectors: Vec<(MemoryId, DateTime<Utc>, Vec<f32>)>,
}

fn same_day(a: DateTime<Utc>, b: DateTime<Utc>) -> bool {
    (a - b).num_hours().abs() < 24
}

impl SituationIndex {
    pub(super) fn build(graph: &MemoryGraph) -> Self {
        let mut idx = SituationIndex {
            exact: HashMap::new(),
            texts: Vec::new(),
            vectors: Vec::new(),
        };
        for n in graph.notes() {
            if let MemoryType::Situation(Situation::SpecificSituation(s)) = &n.mem_type {
                let when = s.time_span.unwrap_or(n.create_time);
                idx.exact
                    .entry(normalize_name(&s.narrative))
                    .or_default()
                    .push((n.id, when));
                idx.texts.push((n.id, when, s.narrative.clone()));
            }
        }
        idx
    }

    pub(super) fn exact(
        &self,
        s: &crate::model::SpecificSituation,
        default: DateTime<Utc>,
    ) -> Option<MemoryId> {
        let when = s.time_span.unwrap_or(default);
        self.exact
            .get(&normalize_name(&s.narrative))?
            .iter()
            .find(|(_, t)| same_day(*t, when))
            .map(|(id, _)| *id)
    }

    pub(super) fn embed_existing(&mut self, e: &dyn TextEmbedder) -> Result<()> {
        let texts: Vec<&str> = self.texts.iter().map(|(_, _, t)| t.as_str()).collect();
        let vs = embed_unit(e, &texts)?;
        self.vectors = self
            .texts
            .iter()
            .zip(vs)
            .map(|((id, t, _), v)| (*id, *t, v))
            .collect();
        Ok(())
    }

    pub(super) fn similar(
        &self,
        v: &[f32],
        when: DateTime<Utc>,
        threshold: f32,
    ) -> Option<(MemoryId, f32)> {
        self.vectors
            .iter()
            .filter(|(_, t, _)| same_day(*t, when))
            .map(|(id, _, w)| (*id, dot(v, w)))
            .filter(|(_, s)| *s >= threshold)
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    pub(super) fn add(
        &mut self,
        id: MemoryId,
        s: &crate::model::SpecificSituation,
        when: DateTime<Utc>,
        vector: Option<&[f32]>,
    ) {
        self.exact
            .entry(normalize_name(&s.narrative))
            .or_default()
            .push((id, when));
        if let Some(v) = vector {
            self.vectors.push((id, when, v.to_vec()));
        }
    }
}
