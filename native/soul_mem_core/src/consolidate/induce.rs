//! Self-evolution: specific situations that share a participant, location or event induce an
//! abstract situation (a pattern), and behaviour the character shows repeatedly in them
//! becomes a habit (a Procedure with a TrigToAction edge).

use super::apply::{embed_unit, hex_id, Run};
use super::dedupe::normalize_name;
use super::{InducedHabit, InducedPattern, EVIDENCE_TAG};
use crate::error::Result;
use crate::model::IdSet;
use crate::model::{
    AbstractSituation, Action, ActionType, Event, LinkKind, Location, MemoryId, MemoryLinkType,
    MemoryType, NodeKind, Participant, ProcMemLink, ProcMemory, Situation, SituationMemLink,
    SkillRecord, DEFAULT_INTENSITY,
};
use crate::retrieval::dot::dot;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The facet of an abstract situation and its name.
pub(super) fn abstract_facet(a: &AbstractSituation) -> (&'static str, String) {
    match a {
        AbstractSituation::Participant(p) => ("participant", p.name.clone()),
        AbstractSituation::Location(l) => ("location", l.name.clone()),
        AbstractSituation::Event(e) => ("event", e.action.clone()),
        AbstractSituation::Environment(e) => ("environment", e.atmosphere.clone()),
    }
}

/// Structured pattern keys of a specific situation: (facet, normalised name, surface). The
/// character's own names never form a participant pattern.
fn situation_facets(
    s: &crate::model::SpecificSituation,
    self_names: &HashSet<String>,
) -> Vec<(&'static str, String, String)> {
    let mut out: Vec<(&'static str, String, String)> = Vec::new();
    let mut push = |facet: &'static str, surface: &str| {
        let norm = normalize_name(surface);
        if !norm.is_empty() && !out.iter().any(|(f, n, _)| *f == facet && *n == norm) {
            out.push((facet, norm, surface.trim().to_owned()));
        }
    };
    for p in &s.context.participants {
        if !self_names.contains(&normalize_name(&p.name)) {
            push("participant", &p.name);
        }
    }
    if let Some(l) = &s.context.location {
        push("location", &l.name);
    }
    // What the character itself does is behaviour (habits), not a kind of event it meets.
    for e in &s.context.event {
        if !self_names.contains(&normalize_name(&e.initiator)) {
            push("event", &e.action);
        }
    }
    out
}

#[derive(Debug, Default)]
struct Group {
    members: Vec<MemoryId>,
    surfaces: BTreeMap<String, usize>,
}

impl Group {
    /// The most frequent surface form (ties: the smallest).
    fn representative(&self) -> String {
        self.surfaces
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(s, _)| s.clone())
            .unwrap_or_default()
    }
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind((0..n).collect())
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }

    /// Joins two sets; the smaller root wins so group ids are deterministic.
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        let (lo, hi) = (ra.min(rb), ra.max(rb));
        self.0[hi] = lo;
    }
}

impl Run<'_> {
    pub(super) fn induce(&mut self) -> Result<()> {
        let created: IdSet = self.created.iter().copied().collect();
        // (facet, norm) → members, surface counts.
        let mut groups: BTreeMap<(&'static str, String), Group> = BTreeMap::new();
        for note in self.graph.notes() {
            if let MemoryType::Situation(Situation::SpecificSituation(s)) = &note.mem_type {
                for (facet, norm, surface) in situation_facets(s, &self.self_names) {
                    let g = groups.entry((facet, norm)).or_default();
                    g.members.push(note.id);
                    *g.surfaces.entry(surface).or_default() += 1;
                }
            }
        }
        if !created.iter().any(|id| {
            self.graph
                .get(id)
                .is_some_and(|n| n.kind() == NodeKind::SpecificSituation)
        }) {
            return Ok(());
        }
        let keys: Vec<(&'static str, String)> = groups.keys().cloned().collect();
        let touched: Vec<bool> = keys
            .iter()
            .map(|k| groups[k].members.iter().any(|m| created.contains(m)))
            .collect();

        // Union names of one facet whose embeddings are close (only pairs with a name the new
        // situations use: older pairs were compared by earlier consolidations).
        let mut uf = UnionFind::new(keys.len());
        if let Some(e) = self.embedder {
            let reps: Vec<String> = keys.iter().map(|k| groups[k].representative()).collect();
            let refs: Vec<&str> = reps.iter().map(String::as_str).collect();
            let vs = embed_unit(e, &refs)?;
            for i in (0..keys.len()).filter(|&i| touched[i]) {
                for j in 0..keys.len() {
                    if i != j
                        && keys[i].0 == keys[j].0
                        && dot(&vs[i], &vs[j]) >= self.cfg.pattern_similarity
                    {
                        uf.union(i, j);
                    }
                }
            }
        }
        let mut merged: BTreeMap<usize, Group> = BTreeMap::new();
        let mut names: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let root = uf.find(i);
            let g = merged.entry(root).or_default();
            for m in &groups[k].members {
                if !g.members.contains(m) {
                    g.members.push(*m);
                }
            }
            for (s, c) in &groups[k].surfaces {
                *g.surfaces.entry(s.clone()).or_default() += c;
            }
            names.entry(root).or_default().push(k.1.clone());
        }
        for (root, group) in merged {
            let facet = keys[root].0;
            if group.members.len() < self.cfg.pattern_min_support
                || !group.members.iter().any(|m| created.contains(m))
            {
                continue;
            }
            let norms = names.remove(&root).unwrap_or_default();
            self.pattern(facet, &norms, &group)?;
        }
        Ok(())
    }

    fn find_abstract(&self, facet: &str, norms: &[String], name: &str) -> Result<Option<MemoryId>> {
        let candidates: Vec<(MemoryId, String)> = self
            .graph
            .notes()
            .filter_map(|n| match &n.mem_type {
                MemoryType::Situation(Situation::AbstractSituation(a)) => {
                    let (f, text) = abstract_facet(a);
                    (f == facet).then_some((n.id, text))
                }
                _ => None,
            })
            .collect();
        if let Some((id, _)) = candidates
            .iter()
            .find(|(_, t)| norms.contains(&normalize_name(t)))
        {
            return Ok(Some(*id));
        }
        let Some(e) = self.embedder else {
            return Ok(None);
        };
        if candidates.is_empty() {
            return Ok(None);
        }
        let mut texts: Vec<&str> = vec![name];
        texts.extend(candidates.iter().map(|(_, t)| t.as_str()));
        let vs = embed_unit(e, &texts)?;
        Ok(candidates
            .iter()
            .zip(&vs[1..])
            .map(|((id, _), v)| (*id, dot(&vs[0], v)))
            .filter(|(_, s)| *s >= self.cfg.pattern_similarity)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(id, _)| id))
    }

    fn pattern(&mut self, facet: &'static str, norms: &[String], group: &Group) -> Result<()> {
        let name = group.representative();
        let evidence: Vec<String> = group
            .members
            .iter()
            .map(|m| self.graph.readable_of(m))
            .collect();
        let evidence_tags = evidence.iter().map(|e| format!("{EVIDENCE_TAG}{e}"));
        let (abs, reused) = match self.find_abstract(facet, norms, &name)? {
            Some(id) => (id, true),
            None => {
                let a = match facet {
                    "participant" => AbstractSituation::Participant(Participant {
                        name: name.clone(),
                        role: String::new(),
                    }),
                    "location" => AbstractSituation::Location(Location {
                        name: name.clone(),
                        coordinates: String::new(),
                    }),
                    _ => AbstractSituation::Event(Event {
                        action: name.clone(),
                        action_intensity: 0.0,
                        initiator: String::new(),
                        target: String::new(),
                    }),
                };
                let rid = hex_id("abs", &[facet, &normalize_name(&name)]);
                let mem_type = MemoryType::Situation(Situation::AbstractSituation(a));
                let id = self.insert_note(rid, mem_type, Vec::new(), self.at())?;
                (id, false)
            }
        };
        self.add_tags(&abs, evidence_tags);
        for m in &group.members {
            let up = MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {});
            let down = MemoryLinkType::Situation(SituationMemLink::AbstractToSpecific {});
            self.link(*m, abs, DEFAULT_INTENSITY, up)?;
            self.link(abs, *m, DEFAULT_INTENSITY, down)?;
        }
        self.report.induced.push(InducedPattern {
            id: self.graph.readable_of(&abs),
            facet,
            name,
            evidence,
            reused,
        });
        self.habits(abs, &group.members)
    }

    /// Behaviours the character shows in the pattern's situations: its own events (initiator
    /// is one of its names) and habits already linked from a situation. A behaviour shown in
    /// at least `behaviour_min_support` situations becomes a TrigToAction edge from the
    /// pattern with probability count / Σ counts — normalised by sum: softmax would flatten
    /// 0.9 / 0.1 to 0.69 / 0.31.
    fn habits(&mut self, abs: MemoryId, members: &[MemoryId]) -> Result<()> {
        let mut procs_by_text: HashMap<String, MemoryId> = HashMap::new();
        for n in self.graph.notes() {
            if let MemoryType::Procedure(p) = &n.mem_type {
                procs_by_text
                    .entry(normalize_name(&p.action.content))
                    .or_insert(n.id);
            }
        }
        // behaviour → (surface, existing procedure, members showing it)
        let mut shown: BTreeMap<String, (String, Option<MemoryId>, Vec<MemoryId>)> =
            BTreeMap::new();
        for m in members {
            let Some(note) = self.graph.get(m) else {
                continue;
            };
            let mut mine: Vec<(String, String, Option<MemoryId>)> = Vec::new();
            if let MemoryType::Situation(Situation::SpecificSituation(s)) = &note.mem_type {
                for e in &s.context.event {
                    let norm = normalize_name(&e.action);
                    if !norm.is_empty() && self.self_names.contains(&normalize_name(&e.initiator)) {
                        let proc = procs_by_text.get(&norm).copied();
                        mine.push((norm, e.action.trim().to_owned(), proc));
                    }
                }
            }
            for l in &note.links {
                if let (LinkKind::Proc, Some(MemoryType::Procedure(p))) = (
                    l.link_type.kind(),
                    self.graph.get(&l.to).map(|n| &n.mem_type),
                ) {
                    let content = p.action.content.clone();
                    mine.push((normalize_name(&content), content, Some(l.to)));
                }
            }
            for (norm, surface, proc) in mine {
                let entry = shown.entry(norm).or_insert((surface, None, Vec::new()));
                entry.1 = entry.1.or(proc);
                if !entry.2.contains(m) {
                    entry.2.push(*m);
                }
            }
        }
        let total: usize = shown.values().map(|(_, _, ms)| ms.len()).sum();
        if total == 0 {
            return Ok(());
        }
        for (norm, (surface, proc, ms)) in shown {
            if ms.len() < self.cfg.behaviour_min_support {
                continue;
            }
            let prob = ms.len() as f64 / total as f64;
            let evidence: Vec<String> = ms.iter().map(|m| self.graph.readable_of(m)).collect();
            let (pid, reused) = match proc {
                Some(p) => (p, true),
                None => {
                    let mem_type = MemoryType::Procedure(ProcMemory {
                        action: Action {
                            content: surface,
                            action_type: ActionType::Skill(SkillRecord {}),
                        },
                    });
                    let rid = hex_id("proc", &["procedure", &norm]);
                    (
                        self.insert_note(rid, mem_type, Vec::new(), self.at())?,
                        false,
                    )
                }
            };
            self.add_tags(&pid, evidence.iter().map(|e| format!("{EVIDENCE_TAG}{e}")));
            let trig = MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob });
            if !self.link(abs, pid, DEFAULT_INTENSITY, trig.clone())? {
                if let Some(note) = self.graph.get_mut(&abs) {
                    for l in note
                        .links
                        .iter_mut()
                        .filter(|l| l.to == pid && l.link_type.kind() == LinkKind::Proc)
                    {
                        l.link_type = trig.clone();
                    }
                }
            }
            self.report.habits.push(InducedHabit {
                id: self.graph.readable_of(&pid),
                trigger: self.graph.readable_of(&abs),
                prob,
                evidence,
                reused,
            });
        }
        Ok(())
    }
}
