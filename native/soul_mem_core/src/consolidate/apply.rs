//! Applying a change set: the [`Run`] over a working copy of the graph, its note step
//! (dedupe / merge / create) and link step. Hebbian learning (`hebbian.rs`) and
//! induction (`induce.rs`) are further steps of the same run.

use super::change_set::check_link_kinds;
use super::dedupe::{normalize_name, other_key, SemanticIndex, SituationIndex};
use super::{ChangeSet, ConsolidateConfig, Merged, Report};
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::import::SELF_NODE_ID;
use crate::model::{
    LinkId, LinkKind, MemoryId, MemoryLink, MemoryLinkType, MemoryNote, MemoryType, NodeKind,
    SemMemory, Situation,
};
use crate::retrieval::dot::l2_normalise;
use crate::retrieval::{EmbedKind, TextEmbedder};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

/// Unit vectors of `texts` (one embedder call).
pub(super) fn embed_unit(embedder: &dyn TextEmbedder, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let mut vs = embedder.embed(texts, EmbedKind::Passage)?;
    Error::check_vector_count("embedder", vs.len(), texts.len())?;
    vs.iter_mut().for_each(|v| l2_normalise(v));
    Ok(vs)
}

/// Readable id derived from its parts: `prefix_c` + 10 hex digits of their SHA-256, so
/// re-running a consolidation derives the same ids.
pub(super) fn hex_id(prefix: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}_c{hex}")
}

/// Whether `from` links to `to` (of `kind`, or of any kind).
pub(super) fn has_link(
    graph: &MemoryGraph,
    from: &MemoryId,
    to: &MemoryId,
    kind: Option<LinkKind>,
) -> bool {
    graph.get(from).is_some_and(|n| {
        n.links
            .iter()
            .any(|l| l.to == *to && kind.is_none_or(|k| l.link_type.kind() == k))
    })
}

/// One consolidation in progress over a working copy of the graph; [`Run::run`] applies the
/// steps in order.
pub(super) struct Run<'a> {
    pub(super) graph: &'a mut MemoryGraph,
    pub(super) changes: &'a ChangeSet,
    pub(super) cfg: &'a ConsolidateConfig,
    pub(super) embedder: Option<&'a dyn TextEmbedder>,
    pub(super) report: Report,
    pub(super) keys: HashMap<String, MemoryId>,
    pub(super) created: Vec<MemoryId>,
    pub(super) new_links: HashSet<LinkId>,
    pub(super) self_names: HashSet<String>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        graph: &'a mut MemoryGraph,
        changes: &'a ChangeSet,
        cfg: &'a ConsolidateConfig,
        embedder: Option<&'a dyn TextEmbedder>,
    ) -> Self {
        let mut self_names: HashSet<String> = ["我".to_owned(), graph.character().to_owned()]
            .iter()
            .chain(&cfg.self_names)
            .map(|n| normalize_name(n))
            .collect();
        if let Some(MemoryType::Semantic(s)) =
            graph.get_by_readable(SELF_NODE_ID).map(|n| &n.mem_type)
        {
            self_names.extend(
                std::iter::once(&s.content)
                    .chain(&s.aliases)
                    .map(|n| normalize_name(n)),
            );
        }
        self_names.remove("");
        Run {
            graph,
            changes,
            cfg,
            embedder,
            report: Report::default(),
            keys: HashMap::new(),
            created: Vec::new(),
            new_links: HashSet::new(),
            self_names,
        }
    }

    pub(super) fn run(mut self) -> Result<Report> {
        self.notes()?;
        self.links()?;
        self.hebbian()?;
        self.induce()?;
        self.report.records_until = self.changes.records.values().flatten().max().copied();
        Ok(self.report)
    }

    pub(super) fn at(&self) -> DateTime<Utc> {
        self.changes.at
    }

    fn happened(&self) -> DateTime<Utc> {
        self.changes.happened_at.unwrap_or(self.changes.at)
    }

    /// A readable id not yet in the graph: the derived one, or it with a counter.
    fn fresh_readable(&self, base: String) -> String {
        if self.graph.get_by_readable(&base).is_none() {
            return base;
        }
        (2..)
            .map(|i| format!("{base}_{i}"))
            .find(|c| self.graph.get_by_readable(c).is_none())
            .unwrap_or(base)
    }

    pub(super) fn insert_note(
        &mut self,
        readable: String,
        mem_type: MemoryType,
        tags: Vec<String>,
        created: DateTime<Utc>,
    ) -> Result<MemoryId> {
        let readable = self.fresh_readable(readable);
        let mut note = MemoryNote::new(self.graph.character(), readable, mem_type, created);
        let mut seen = HashSet::new();
        note.tags = tags
            .into_iter()
            .map(|t| t.trim().to_owned())
            .filter(|t| seen.insert(t.clone()))
            .collect();
        let id = note.id;
        self.graph.insert(note)?;
        Ok(id)
    }

    /// Adds a link unless one of the same kind already goes from `from` to `to`.
    pub(super) fn link(
        &mut self,
        from: MemoryId,
        to: MemoryId,
        intensity: f64,
        link_type: MemoryLinkType,
    ) -> Result<bool> {
        if from == to || has_link(self.graph, &from, &to, Some(link_type.kind())) {
            return Ok(false);
        }
        let degree = self.graph.get(&from).map_or(0, |n| n.links.len());
        let id = (degree..)
            .map(|o| LinkId::derive(from, to, o))
            .find(|id| !self.new_links.contains(id) && !self.link_exists(&from, id))
            .unwrap_or_else(LinkId::random);
        self.graph.add_link(MemoryLink {
            id,
            from,
            to,
            intensity,
            link_type,
        })?;
        self.new_links.insert(id);
        self.report.linked += 1;
        Ok(true)
    }

    fn link_exists(&self, from: &MemoryId, id: &LinkId) -> bool {
        self.graph
            .get(from)
            .is_some_and(|n| n.links.iter().any(|l| l.id == *id))
    }

    pub(super) fn add_tags(&mut self, id: &MemoryId, tags: impl IntoIterator<Item = String>) {
        let cap = self.cfg.max_list_len;
        if let Some(note) = self.graph.get_mut(id) {
            for t in tags {
                if note.tags.len() >= cap {
                    break;
                }
                if !note.tags.contains(&t) {
                    note.tags.push(t);
                }
            }
        }
    }

    // ---- 1. notes: dedupe / merge / create ----

    fn notes(&mut self) -> Result<()> {
        let mut sem = SemanticIndex::build(self.graph);
        let mut sit = SituationIndex::build(self.graph);
        let mut other: HashMap<(NodeKind, String), MemoryId> = HashMap::new();
        for n in self.graph.notes() {
            if let Some(k) = other_key(&n.mem_type) {
                other.entry(k).or_insert(n.id);
            }
        }

        // Vectors only when some note has no exact match (embedding is the slow part).
        let needs_vectors = self.embedder.is_some()
            && self.changes.notes.iter().any(|n| match &n.mem_type {
                MemoryType::Semantic(s) => sem.exact(s).is_none(),
                MemoryType::Situation(Situation::SpecificSituation(s)) => {
                    sit.exact(s, self.happened()).is_none()
                }
                _ => false,
            });
        let new_vectors = if needs_vectors {
            if let Some(e) = self.embedder {
                sem.embed_existing(e)?;
                sit.embed_existing(e)?;
                let texts: Vec<&str> = self
                    .changes
                    .notes
                    .iter()
                    .map(|n| match &n.mem_type {
                        MemoryType::Semantic(s) => s.content.as_str(),
                        MemoryType::Situation(Situation::SpecificSituation(s)) => {
                            s.narrative.as_str()
                        }
                        _ => "",
                    })
                    .collect();
                embed_unit(e, &texts)?
            } else {
                Vec::new()
            }
        } else {
            Vec::new()
        };

        for (i, n) in self.changes.notes.iter().enumerate() {
            let vector = new_vectors.get(i).map(Vec::as_slice);
            let id = match &n.mem_type {
                MemoryType::Semantic(s) => {
                    let found = sem.exact(s).map(|id| (id, "exact", 1.0)).or_else(|| {
                        vector.and_then(|v| {
                            sem.similar(v, s.concept_type, self.cfg.merge_similarity)
                                .map(|(id, score)| (id, "similarity", score))
                        })
                    });
                    match found {
                        Some((into, by, score)) => {
                            self.merge_semantic(into, s, &n.tags)?;
                            self.merged(&n.key, into, by, score);
                            sem.add_names(self.graph, into, vector);
                            into
                        }
                        None => {
                            let rid = hex_id("sem", &[&normalize_name(&s.content)]);
                            let id = self.insert_note(
                                rid,
                                n.mem_type.clone(),
                                n.tags.clone(),
                                self.happened(),
                            )?;
                            self.created_note(&n.key, id);
                            sem.add_names(self.graph, id, vector);
                            id
                        }
                    }
                }
                MemoryType::Situation(Situation::SpecificSituation(s)) => {
                    let when = s.time_span.unwrap_or(self.happened());
                    let found = sit
                        .exact(s, self.happened())
                        .map(|id| (id, "exact", 1.0))
                        .or_else(|| {
                            vector.and_then(|v| {
                                sit.similar(v, when, self.cfg.situation_similarity)
                                    .map(|(id, score)| (id, "similarity", score))
                            })
                        });
                    match found {
                        Some((into, by, score)) => {
                            self.add_tags(&into, n.tags.clone());
                            self.merged(&n.key, into, by, score);
                            into
                        }
                        None => {
                            let day = when.format("%Y-%m-%d").to_string();
                            let rid = hex_id("sit", &[&normalize_name(&s.narrative), &day]);
                            let id =
                                self.insert_note(rid, n.mem_type.clone(), n.tags.clone(), when)?;
                            self.created_note(&n.key, id);
                            sit.add(id, s, when, vector);
                            id
                        }
                    }
                }
                mem_type => {
                    let key = other_key(mem_type).ok_or_else(|| {
                        Error::invalid_value(&n.key, "mem_type", "unsupported payload")
                    })?;
                    match other.get(&key) {
                        Some(&into) => {
                            self.add_tags(&into, n.tags.clone());
                            self.merged(&n.key, into, "exact", 1.0);
                            into
                        }
                        None => {
                            let prefix = if key.0 == NodeKind::Procedure {
                                "proc"
                            } else {
                                "abs"
                            };
                            let rid = hex_id(prefix, &[key.0.as_str(), &key.1]);
                            let id = self.insert_note(
                                rid,
                                mem_type.clone(),
                                n.tags.clone(),
                                self.happened(),
                            )?;
                            self.created_note(&n.key, id);
                            other.insert(key, id);
                            id
                        }
                    }
                }
            };
            self.keys.insert(n.key.clone(), id);
        }
        Ok(())
    }

    fn created_note(&mut self, key: &str, id: MemoryId) {
        let rid = self.graph.readable_of(&id);
        self.report.created.push(rid.clone());
        self.report.keys.insert(key.to_owned(), rid);
        self.created.push(id);
    }

    fn merged(&mut self, key: &str, into: MemoryId, by: &'static str, score: f32) {
        let rid = self.graph.readable_of(&into);
        self.report.keys.insert(key.to_owned(), rid.clone());
        self.report.merged.push(Merged {
            key: key.to_owned(),
            into: rid,
            by,
            score,
        });
    }

    /// Aliases union (the new content becomes an alias when it differs), description merged
    /// (appended unless already contained), tags union; lists stay within the limits.
    fn merge_semantic(&mut self, into: MemoryId, new: &SemMemory, tags: &[String]) -> Result<()> {
        let (cap, max_chars) = (self.cfg.max_list_len, self.cfg.max_text_chars);
        let note = self
            .graph
            .get_mut(&into)
            .ok_or_else(|| Error::NotFound(format!("note {into}")))?;
        if let MemoryType::Semantic(s) = &mut note.mem_type {
            let mut seen: HashSet<String> = std::iter::once(&s.content)
                .chain(&s.aliases)
                .map(|n| normalize_name(n))
                .collect();
            for name in std::iter::once(&new.content).chain(&new.aliases) {
                let norm = normalize_name(name);
                if !norm.is_empty() && s.aliases.len() < cap && seen.insert(norm) {
                    s.aliases.push(name.trim().to_owned());
                }
            }
            let add = new.description.trim();
            if !add.is_empty() {
                if s.description.trim().is_empty() {
                    s.description = add.to_owned();
                } else if !normalize_name(&s.description).contains(&normalize_name(add))
                    && s.description.chars().count() + add.chars().count() < max_chars
                {
                    s.description = format!("{}；{}", s.description.trim_end(), add);
                }
            }
        }
        for t in tags {
            if note.tags.len() < cap && !note.tags.contains(t) {
                note.tags.push(t.trim().to_owned());
            }
        }
        Ok(())
    }

    // ---- 2. change-set links ----

    fn resolve(&self, s: &str, label: &str) -> Result<MemoryId> {
        self.keys
            .get(s)
            .copied()
            .or_else(|| self.graph.resolve(s))
            .ok_or_else(|| Error::MissingLinkTarget {
                node: label.to_owned(),
                target: s.to_owned(),
            })
    }

    fn links(&mut self) -> Result<()> {
        for (i, l) in self.changes.links.iter().enumerate() {
            let label = format!("links[{i}] ({} -> {})", l.from, l.to);
            let from = self.resolve(&l.from, &label)?;
            let to = self.resolve(&l.to, &label)?;
            let kind_of = |id: &MemoryId| self.graph.get(id).map(MemoryNote::kind);
            check_link_kinds(&label, kind_of(&from), kind_of(&to), &l.link_type)?;
            let intensity = l.intensity.unwrap_or(self.cfg.default_intensity);
            if !self.link(from, to, intensity, l.link_type.clone())? {
                self.report.skipped_links += 1;
            }
        }
        Ok(())
    }
}
