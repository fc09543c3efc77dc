//! Consolidation (巩固): what an LLM extracted from the cumulative summary becomes memory, all
//! or nothing, and the graph evolves with it.
//!
//! One call of [`consolidate`] applies one [`ChangeSet`] to a [`MemoryGraph`]:
//!
//! 1. **notes** of all four kinds get stable ids (UUIDv5 of character + a readable id derived
//!    from kind and normalised text); a new Semantic note whose content or an alias matches an
//!    existing concept (normalised string first, then embedding similarity) is **merged** into
//!    it (aliases union, description merged, its links moved), a Specific situation that
//!    repeats a known one on the same day is reused, likewise identical patterns and actions;
//! 2. **links** among new and existing notes (endpoint kinds checked);
//! 3. **Hebbian** learning from the retrieval records: frequency f = n / T picks the top-k
//!    active notes, which every new note is linked to; notes recalled together get LTP on their
//!    links (or a new link after repeated co-activation), other links of active notes get LTD,
//!    and a link that falls below the threshold is disconnected;
//! 4. **self-evolution**: when at least k specific situations share a participant, a location
//!    or an event (structured fields, merged by embedding similarity) an AbstractSituation is
//!    induced or reused with SpecificToAbstract / AbstractToSpecific edges, and behaviour the
//!    character shows repeatedly in them becomes a Procedure with a TrigToAction edge whose
//!    probability is the behaviour's share (normalised by sum, not softmax). Induced notes
//!    carry their evidence as `evidence:<readable id>` tags.
//!
//! Everything happens on a copy of the graph that replaces the original only when every step
//! succeeded, so an invalid change set (unknown kind, wrong type, too many notes, a link to an
//! unknown id) leaves the graph exactly as it was.

use crate::error::{Error, Result};
use crate::graph::{validate_intensity, MemoryGraph};
use crate::import::{validate_link_type, validate_mem_type, SELF_NODE_ID};
use crate::model::{
    AbstractSituation, Action, ActionType, ConceptType, Event, LinkId, LinkKind, Location,
    MemoryId, MemoryLink, MemoryLinkType, MemoryNote, MemoryType, NodeKind, Participant,
    ProcMemLink, ProcMemory, SemMemLink, SemMemory, Situation, SituationMemLink, SkillRecord,
    DEFAULT_INTENSITY,
};
use crate::retrieval::embedding::{dot, l2_normalise};
use crate::retrieval::{EmbedKind, TextEmbedder};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Prefix of the tags that record an induced note's evidence.
pub const EVIDENCE_TAG: &str = "evidence:";

/// Verb of the links Hebbian learning creates.
pub const HEBBIAN_VERB: &str = "联想";

/// Confidence of Hebbian links: association, not a stated fact.
const HEBBIAN_CONFIDENCE: f32 = 0.5;

/// Longest key of a change-set note.
const MAX_KEY_CHARS: usize = 128;

/// Co-activation partners considered per retrieval event, so a burst of records cannot make
/// the pair sweep quadratic.
const MAX_PARTNERS_PER_EVENT: usize = 64;

/// Parameters of consolidation. Unknown fields are rejected so a typo is an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsolidateConfig {
    /// Largest change set in bytes (JSON). Default 4 MB.
    pub max_bytes: u64,
    /// Most notes in one change set. Default 200.
    pub max_notes: usize,
    /// Most links in one change set. Default 1000.
    pub max_links: usize,
    /// Most retrieval timestamps in one change set. Default 100 000.
    pub max_records: usize,
    /// Longest string of a note, in characters. Default 2000.
    pub max_text_chars: usize,
    /// Longest list of a note (aliases, tags, participants …). Default 64.
    pub max_list_len: usize,
    /// Intensity of a change-set link that gives none. Default 1.0.
    pub default_intensity: f64,
    /// How many of the most frequently retrieved notes new notes are linked to. Default 5.
    pub top_k: usize,
    /// Floor of T (hours) in f = n / T, so one retrieval does not divide by zero. Default 1.
    pub min_span_hours: f64,
    /// Intensity of links created by Hebbian learning. Default 0.5.
    pub base_intensity: f64,
    /// Retrievals this close (ms) count as recalled together. Default 1000.
    pub coactivation_window_ms: i64,
    /// Co-activations after which two unlinked notes get a link. Default 2.
    pub wire_after: usize,
    /// LTP: intensity added per co-activation. Default 0.1.
    pub ltp_step: f64,
    /// LTP never raises an intensity above this (higher ones are kept). Default 1.0.
    pub intensity_cap: f64,
    /// LTD: factor applied to a link of an active note that was not co-activated. Default 0.9.
    pub ltd_factor: f64,
    /// A link weakened below this is disconnected. Default 0.05.
    pub disconnect_below: f64,
    /// Embedding similarity above which a new Semantic note is the same concept. Default 0.93.
    pub merge_similarity: f32,
    /// Embedding similarity above which a specific situation repeats a known one (same day).
    /// Default 0.95.
    pub situation_similarity: f32,
    /// Specific situations needed to induce a pattern (k). Default 3.
    pub pattern_min_support: usize,
    /// Embedding similarity above which two participant/location/event names are one pattern.
    /// Default 0.9.
    pub pattern_similarity: f32,
    /// Situations of a pattern in which a behaviour must show to become a habit. Default 3.
    pub behaviour_min_support: usize,
    /// Names the character is known by (besides "我", the graph's character and the self node).
    pub self_names: Vec<String>,
}

impl Default for ConsolidateConfig {
    fn default() -> Self {
        ConsolidateConfig {
            max_bytes: 4_000_000,
            max_notes: 200,
            max_links: 1000,
            max_records: 100_000,
            max_text_chars: 2000,
            max_list_len: 64,
            default_intensity: DEFAULT_INTENSITY,
            top_k: 5,
            min_span_hours: 1.0,
            base_intensity: 0.5,
            coactivation_window_ms: 1000,
            wire_after: 2,
            ltp_step: 0.1,
            intensity_cap: 1.0,
            ltd_factor: 0.9,
            disconnect_below: 0.05,
            merge_similarity: 0.93,
            situation_similarity: 0.95,
            pattern_min_support: 3,
            pattern_similarity: 0.9,
            behaviour_min_support: 3,
            self_names: Vec::new(),
        }
    }
}

fn check_range(name: &str, v: f64, lo: f64, hi: f64) -> Result<()> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(Error::invalid_argument(
            name,
            format!("must be a finite number in [{lo}, {hi}], got {v}"),
        ))
    }
}

impl ConsolidateConfig {
    /// Checks every field's domain.
    pub fn validate(&self) -> Result<()> {
        check_range("default_intensity", self.default_intensity, 0.0, 1e6)?;
        check_range("min_span_hours", self.min_span_hours, 1e-6, 1e6)?;
        check_range("base_intensity", self.base_intensity, 0.0, 1e6)?;
        check_range("ltp_step", self.ltp_step, 0.0, 1e6)?;
        check_range("intensity_cap", self.intensity_cap, 0.0, 1e6)?;
        check_range("ltd_factor", self.ltd_factor, 0.0, 1.0)?;
        check_range("disconnect_below", self.disconnect_below, 0.0, 1e6)?;
        for (name, v) in [
            ("merge_similarity", self.merge_similarity),
            ("situation_similarity", self.situation_similarity),
            ("pattern_similarity", self.pattern_similarity),
        ] {
            check_range(name, f64::from(v), -1.0, 1.0)?;
        }
        if self.coactivation_window_ms < 0 {
            return Err(Error::invalid_argument(
                "coactivation_window_ms",
                "must be >= 0",
            ));
        }
        for (name, v) in [
            ("max_notes", self.max_notes),
            ("max_text_chars", self.max_text_chars),
            ("max_list_len", self.max_list_len),
            ("wire_after", self.wire_after),
            ("pattern_min_support", self.pattern_min_support),
            ("behaviour_min_support", self.behaviour_min_support),
        ] {
            if v == 0 {
                return Err(Error::invalid_argument(name, "must be at least 1"));
            }
        }
        Ok(())
    }
}

/// A note to add: a key naming it inside the change set (links use it), tags and a payload in
/// Graph JSON shape (`{"Semantic": {...}}`, `{"Situation": {"SpecificSituation": {...}}}` …).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewNote {
    /// Name of the note inside the change set (not stored).
    pub key: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Payload.
    pub mem_type: MemoryType,
}

/// A link to add; `from`/`to` are change-set keys or existing readable ids / UUIDs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewLink {
    /// Source.
    pub from: String,
    /// Target.
    pub to: String,
    /// Strength; [`ConsolidateConfig::default_intensity`] when absent.
    #[serde(default)]
    pub intensity: Option<f64>,
    /// Typed payload (Graph JSON shape).
    pub link_type: MemoryLinkType,
}

/// Everything one consolidation writes, decoded and checked before anything is applied.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeSet {
    /// When the consolidation runs; nothing may happen after it.
    pub at: DateTime<Utc>,
    /// When the consolidated conversation happened (creation time of notes without a time of
    /// their own); `at` when absent.
    #[serde(default)]
    pub happened_at: Option<DateTime<Utc>>,
    /// New notes.
    #[serde(default)]
    pub notes: Vec<NewNote>,
    /// New links.
    #[serde(default)]
    pub links: Vec<NewLink>,
    /// Retrieval records since the last consolidation: note id → timestamps.
    #[serde(default)]
    pub records: BTreeMap<String, Vec<DateTime<Utc>>>,
}

impl ChangeSet {
    /// Decodes and validates a change set. Errors name the note (its key) and the field.
    /// Complexity: O(bytes).
    pub fn from_json(bytes: &[u8], cfg: &ConsolidateConfig) -> Result<Self> {
        if bytes.len() as u64 > cfg.max_bytes {
            return Err(Error::TooLarge {
                size: bytes.len() as u64,
                limit: cfg.max_bytes,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| Error::NotUtf8(e.valid_up_to()))?;
        let mut de = serde_json::Deserializer::from_str(text);
        let changes: ChangeSet = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            Error::InvalidJson(format!("change set field {}: {}", e.path(), e.inner()))
        })?;
        de.end()
            .map_err(|e| Error::InvalidJson(format!("trailing characters: {e}")))?;
        changes.validate(cfg)?;
        Ok(changes)
    }

    /// Checks limits, keys, payload values, string and list sizes and link payloads; what
    /// needs the graph (link targets, endpoint kinds) is checked by [`consolidate`].
    pub fn validate(&self, cfg: &ConsolidateConfig) -> Result<()> {
        limit("notes", self.notes.len(), cfg.max_notes)?;
        limit("links", self.links.len(), cfg.max_links)?;
        let records: usize = self.records.values().map(Vec::len).sum();
        limit("record timestamps", records, cfg.max_records)?;
        if let Some(h) = self.happened_at {
            if h > self.at {
                return Err(Error::invalid_value(
                    "(change set)",
                    "happened_at",
                    "must not be later than at",
                ));
            }
        }
        let mut keys = HashSet::with_capacity(self.notes.len());
        for (i, n) in self.notes.iter().enumerate() {
            let key = n.key.as_str();
            if key.trim().is_empty() || key.chars().count() > MAX_KEY_CHARS {
                return Err(Error::invalid_value(
                    &format!("#{i}"),
                    "key",
                    format!("must be 1 to {MAX_KEY_CHARS} characters"),
                ));
            }
            if !keys.insert(key) {
                return Err(Error::DuplicateId {
                    id: key.to_owned(),
                    index: Some(i),
                });
            }
            validate_mem_type(key, &n.mem_type)?;
            let value = serde_json::to_value(&n.mem_type)
                .map_err(|e| Error::InvalidJson(format!("note {key:?}: {e}")))?;
            check_sizes(key, "mem_type", &value, cfg)?;
            check_list(key, "tags", &n.tags, cfg)?;
            if let MemoryType::Situation(Situation::SpecificSituation(s)) = &n.mem_type {
                if s.time_span.is_some_and(|t| t > self.at) {
                    return Err(Error::invalid_value(
                        key,
                        "mem_type.Situation.SpecificSituation.time_span",
                        "lies in the future",
                    ));
                }
            }
        }
        for (i, l) in self.links.iter().enumerate() {
            let label = format!("links[{i}]");
            if l.from.trim().is_empty() || l.to.trim().is_empty() {
                return Err(Error::invalid_value(&label, "from/to", "must not be empty"));
            }
            if l.from == l.to {
                return Err(Error::invalid_value(
                    &label,
                    "to",
                    "a note cannot link to itself",
                ));
            }
            if let Some(w) = l.intensity {
                validate_intensity(&label, w)?;
            }
            validate_link_type(&label, &l.link_type)?;
        }
        Ok(())
    }
}

fn limit(what: &str, count: usize, limit: usize) -> Result<()> {
    if count > limit {
        Err(Error::LimitExceeded {
            what: what.to_owned(),
            count,
            limit,
        })
    } else {
        Ok(())
    }
}

fn check_list(node: &str, field: &str, items: &[String], cfg: &ConsolidateConfig) -> Result<()> {
    if items.len() > cfg.max_list_len {
        return Err(Error::invalid_value(
            node,
            field,
            format!("more than {} entries", cfg.max_list_len),
        ));
    }
    for (i, s) in items.iter().enumerate() {
        if s.trim().is_empty() || s.chars().count() > cfg.max_text_chars {
            return Err(Error::invalid_value(
                node,
                &format!("{field}[{i}]"),
                format!("must be 1 to {} characters", cfg.max_text_chars),
            ));
        }
    }
    Ok(())
}

/// Every string and list of a payload within the size limits (one walk covers all fields).
fn check_sizes(
    node: &str,
    path: &str,
    v: &serde_json::Value,
    cfg: &ConsolidateConfig,
) -> Result<()> {
    use serde_json::Value;
    match v {
        Value::String(s) if s.chars().count() > cfg.max_text_chars => Err(Error::invalid_value(
            node,
            path,
            format!("longer than {} characters", cfg.max_text_chars),
        )),
        Value::Array(items) => {
            if items.len() > cfg.max_list_len {
                return Err(Error::invalid_value(
                    node,
                    path,
                    format!("more than {} entries", cfg.max_list_len),
                ));
            }
            for (i, x) in items.iter().enumerate() {
                check_sizes(node, &format!("{path}[{i}]"), x, cfg)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, x) in map {
                check_sizes(node, &format!("{path}.{k}"), x, cfg)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

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

/// How often a note was retrieved since the last consolidation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Activity {
    /// The note.
    #[serde(skip)]
    pub id: MemoryId,
    /// Its readable id.
    pub readable_id: String,
    /// Its kind (snake_case).
    pub kind: &'static str,
    /// What it is about ([`MemoryNote::display_text`]).
    pub text: String,
    /// n: retrievals.
    pub retrievals: usize,
    /// f = n / T, per hour, T = last − first retrieval (floored, see
    /// [`ConsolidateConfig::min_span_hours`]).
    pub frequency: f64,
}

/// Retrieval frequency f = n / T of every recorded note that exists (core notes excluded:
/// they are always shown, never "activated"), most frequent first (ties: more retrievals,
/// then readable id). Records of unknown ids are skipped. Complexity: O(records + m log m).
pub fn activity(
    graph: &MemoryGraph,
    records: &BTreeMap<String, Vec<DateTime<Utc>>>,
    min_span_hours: f64,
) -> Vec<Activity> {
    let mut by_id: HashMap<MemoryId, Vec<DateTime<Utc>>> = HashMap::new();
    for (key, times) in records {
        if let Some(id) = graph.resolve(key) {
            by_id.entry(id).or_default().extend(times.iter().copied());
        }
    }
    let mut out: Vec<Activity> = by_id
        .into_iter()
        .filter_map(|(id, times)| {
            let note = graph.get(&id).filter(|n| !n.core)?;
            let first = times.iter().min()?;
            let last = times.iter().max()?;
            let hours = (*last - *first).num_milliseconds() as f64 / 3_600_000.0;
            Some(Activity {
                id,
                readable_id: note.readable_id.clone(),
                kind: note.kind().as_str(),
                text: note.display_text(),
                retrievals: times.len(),
                frequency: times.len() as f64 / hours.max(min_span_hours),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.frequency
            .total_cmp(&a.frequency)
            .then(b.retrievals.cmp(&a.retrievals))
            .then(a.readable_id.cmp(&b.readable_id))
    });
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

/// A new note merged into (or reused as) an existing one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Merged {
    /// The change-set key.
    pub key: String,
    /// Readable id of the note it became part of.
    pub into: String,
    /// `"exact"` (normalised string) or `"similarity"` (embedding).
    pub by: &'static str,
    /// Similarity for `"similarity"` merges, 1 for exact ones.
    pub score: f32,
}

/// An induced (or reused and extended) abstract situation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InducedPattern {
    /// Readable id.
    pub id: String,
    /// `"participant"`, `"location"` or `"event"`.
    pub facet: &'static str,
    /// The pattern's name.
    pub name: String,
    /// The specific situations it was induced from (readable ids).
    pub evidence: Vec<String>,
    /// True when an existing abstract situation was reused.
    pub reused: bool,
}

/// An induced (or reused) habit of a pattern.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InducedHabit {
    /// Readable id of the procedure.
    pub id: String,
    /// Readable id of the abstract situation that triggers it.
    pub trigger: String,
    /// TrigToAction probability: the behaviour's share among the pattern's behaviours.
    pub prob: f64,
    /// The specific situations that show it (readable ids).
    pub evidence: Vec<String>,
    /// True when an existing procedure was reused.
    pub reused: bool,
}

/// What one consolidation did.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Report {
    /// Readable ids of the notes created from the change set, in order.
    pub created: Vec<String>,
    /// New notes merged into or reused as existing ones.
    pub merged: Vec<Merged>,
    /// Change-set key → readable id, for every note.
    pub keys: BTreeMap<String, String>,
    /// Links added in total (change set, Hebbian, induction).
    pub linked: usize,
    /// Change-set links skipped because the same link already existed (or a merge made them a
    /// self-loop).
    pub skipped_links: usize,
    /// The top-k active notes new notes were linked to (readable ids).
    pub active: Vec<String>,
    /// Links from new notes to active ones and back.
    pub hebbian_links: usize,
    /// Links created between notes recalled together repeatedly.
    pub wired: usize,
    /// Links strengthened (LTP).
    pub strengthened: usize,
    /// Links weakened (LTD).
    pub weakened: usize,
    /// Links removed because LTD took them below the threshold.
    pub disconnected: usize,
    /// Induced or extended patterns.
    pub induced: Vec<InducedPattern>,
    /// Induced or updated habits.
    pub habits: Vec<InducedHabit>,
    /// Record keys that name no note.
    pub unknown_records: usize,
    /// The newest retrieval timestamp consumed (records up to it can be dropped).
    pub records_until: Option<DateTime<Utc>>,
}

/// Applies `changes` to `graph`, all or nothing (see the module docs). `embedder` enables the
/// similarity steps (dedupe after exact matching, pattern names); without it only structured
/// fields and normalised strings are compared.
///
/// Complexity: O(nodes + links) for the working copy and the name indexes, plus embedding the
/// new texts and the existing Semantic names, specific narratives and pattern names once.
pub fn consolidate(
    graph: &mut MemoryGraph,
    changes: &ChangeSet,
    cfg: &ConsolidateConfig,
    embedder: Option<&dyn TextEmbedder>,
) -> Result<Report> {
    cfg.validate()?;
    changes.validate(cfg)?;
    let mut work = graph.clone();
    let report = Run::new(&mut work, changes, cfg, embedder).run()?;
    *graph = work;
    Ok(report)
}

/// Unit vectors of `texts` (one embedder call).
fn embed_unit(embedder: &dyn TextEmbedder, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let mut vs = embedder.embed(texts, EmbedKind::Passage)?;
    Error::check_vector_count("embedder", vs.len(), texts.len())?;
    vs.iter_mut().for_each(|v| l2_normalise(v));
    Ok(vs)
}

fn hex_id(prefix: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}_c{hex}")
}

fn abstract_facet(a: &AbstractSituation) -> (&'static str, String) {
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

fn has_link(graph: &MemoryGraph, from: &MemoryId, to: &MemoryId, kind: Option<LinkKind>) -> bool {
    graph.get(from).is_some_and(|n| {
        n.links
            .iter()
            .any(|l| l.to == *to && kind.is_none_or(|k| l.link_type.kind() == k))
    })
}

struct Run<'a> {
    graph: &'a mut MemoryGraph,
    changes: &'a ChangeSet,
    cfg: &'a ConsolidateConfig,
    embedder: Option<&'a dyn TextEmbedder>,
    report: Report,
    keys: HashMap<String, MemoryId>,
    created: Vec<MemoryId>,
    new_links: HashSet<LinkId>,
    self_names: HashSet<String>,
}

impl<'a> Run<'a> {
    fn new(
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

    fn run(mut self) -> Result<Report> {
        self.notes()?;
        self.links()?;
        self.hebbian()?;
        self.induce()?;
        self.report.records_until = self.changes.records.values().flatten().max().copied();
        Ok(self.report)
    }

    fn at(&self) -> DateTime<Utc> {
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

    fn insert_note(
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
    fn link(
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

    fn add_tags(&mut self, id: &MemoryId, tags: impl IntoIterator<Item = String>) {
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

    // ---- 3. Hebbian learning ----

    fn hebbian(&mut self) -> Result<()> {
        let records = &self.changes.records;
        self.report.unknown_records = records
            .keys()
            .filter(|k| self.graph.resolve(k).is_none())
            .count();
        let activity = activity(self.graph, records, self.cfg.min_span_hours);
        let active: Vec<MemoryId> = activity.iter().take(self.cfg.top_k).map(|a| a.id).collect();
        self.report.active = activity
            .iter()
            .take(self.cfg.top_k)
            .map(|a| a.readable_id.clone())
            .collect();

        // New notes ↔ the top-k active notes, both ways (PPR walks directed edges).
        let hebbian = || {
            MemoryLinkType::Sem(SemMemLink {
                verb: HEBBIAN_VERB.to_owned(),
                confidence: HEBBIAN_CONFIDENCE,
            })
        };
        let created = self.created.clone();
        for c in &created {
            for a in &active {
                if has_link(self.graph, c, a, None) || has_link(self.graph, a, c, None) {
                    continue;
                }
                let there = self.link(*c, *a, self.cfg.base_intensity, hebbian())?;
                let back = self.link(*a, *c, self.cfg.base_intensity, hebbian())?;
                self.report.hebbian_links += usize::from(there) + usize::from(back);
            }
        }

        let pairs = coactivations(self.graph, records, self.cfg.coactivation_window_ms);
        let mut partners: HashMap<MemoryId, HashSet<MemoryId>> = HashMap::new();
        for ((a, b), count) in &pairs {
            partners.entry(*a).or_default().insert(*b);
            partners.entry(*b).or_default().insert(*a);
            let mut linked = false;
            for (x, y) in [(*a, *b), (*b, *a)] {
                linked |= has_link(self.graph, &x, &y, None);
                self.strengthen(x, y, *count)?;
            }
            let core = |id: &MemoryId| self.graph.get(id).is_some_and(|n| n.core);
            if !linked && *count >= self.cfg.wire_after && !core(a) && !core(b) {
                let there = self.link(*a, *b, self.cfg.base_intensity, hebbian())?;
                let back = self.link(*b, *a, self.cfg.base_intensity, hebbian())?;
                self.report.wired += usize::from(there) + usize::from(back);
            }
        }

        // LTD: the other association links of every active note.
        let recorded: Vec<MemoryId> = activity.iter().map(|a| a.id).collect();
        for a in recorded {
            let with = partners.get(&a);
            let targets: Vec<(LinkId, f64)> = self
                .graph
                .get(&a)
                .map(|n| {
                    n.links
                        .iter()
                        .filter(|l| {
                            l.link_type.kind() == LinkKind::Sem
                                && !self.new_links.contains(&l.id)
                                && !with.is_some_and(|w| w.contains(&l.to))
                        })
                        .map(|l| (l.id, l.intensity))
                        .collect()
                })
                .unwrap_or_default();
            for (link, w) in targets {
                let weakened = w * self.cfg.ltd_factor;
                if weakened < self.cfg.disconnect_below {
                    self.graph.remove_link(&a, &link);
                    self.report.disconnected += 1;
                } else if weakened < w {
                    self.graph.set_link_intensity(&a, &link, weakened)?;
                    self.report.weakened += 1;
                }
            }
        }
        Ok(())
    }

    /// LTP on the association links `x → y`: + step per co-activation, capped (an intensity
    /// already above the cap is kept).
    fn strengthen(&mut self, x: MemoryId, y: MemoryId, count: usize) -> Result<()> {
        let targets: Vec<(LinkId, f64)> = self
            .graph
            .get(&x)
            .map(|n| {
                n.links
                    .iter()
                    .filter(|l| l.to == y && l.link_type.kind() == LinkKind::Sem)
                    .map(|l| (l.id, l.intensity))
                    .collect()
            })
            .unwrap_or_default();
        for (link, w) in targets {
            let raised = (w + self.cfg.ltp_step * count as f64).min(self.cfg.intensity_cap);
            if raised > w {
                self.graph.set_link_intensity(&x, &link, raised)?;
                self.report.strengthened += 1;
            }
        }
        Ok(())
    }

    // ---- 4. self-evolution: patterns and habits ----

    fn induce(&mut self) -> Result<()> {
        let created: HashSet<MemoryId> = self.created.iter().copied().collect();
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

fn check_link_kinds(
    label: &str,
    from: Option<NodeKind>,
    to: Option<NodeKind>,
    link_type: &MemoryLinkType,
) -> Result<()> {
    let (Some(from), Some(to)) = (from, to) else {
        return Err(Error::NotFound(format!("{label}: endpoint")));
    };
    let ok = match link_type.kind() {
        LinkKind::Sem => true,
        LinkKind::Proc => to == NodeKind::Procedure && from != NodeKind::Procedure,
        LinkKind::SpecificToAbstract => {
            from == NodeKind::SpecificSituation && to == NodeKind::AbstractSituation
        }
        LinkKind::AbstractToSpecific => {
            from == NodeKind::AbstractSituation && to == NodeKind::SpecificSituation
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_value(
            label,
            "link_type",
            format!(
                "a {} link cannot go from a {} to a {}",
                link_type.kind().as_str(),
                from.as_str(),
                to.as_str()
            ),
        ))
    }
}

/// Dedupe key of abstract situations and procedures: kind + normalised text.
fn other_key(mem_type: &MemoryType) -> Option<(NodeKind, String)> {
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

/// Pairs of notes recalled together (retrievals within `window_ms`), with how often. Keys are
/// ordered pairs (smaller id first). Complexity: O(r log r + r × partners), partners per
/// event capped at [`MAX_PARTNERS_PER_EVENT`].
pub fn coactivations(
    graph: &MemoryGraph,
    records: &BTreeMap<String, Vec<DateTime<Utc>>>,
    window_ms: i64,
) -> BTreeMap<(MemoryId, MemoryId), usize> {
    let mut events: Vec<(i64, MemoryId)> = Vec::new();
    for (key, times) in records {
        if let Some(id) = graph.resolve(key) {
            events.extend(times.iter().map(|t| (t.timestamp_millis(), id)));
        }
    }
    events.sort();
    let mut pairs: BTreeMap<(MemoryId, MemoryId), usize> = BTreeMap::new();
    for (i, (t, a)) in events.iter().enumerate() {
        for (_, b) in events[i + 1..]
            .iter()
            .take(MAX_PARTNERS_PER_EVENT)
            .take_while(|(u, _)| u - t <= window_ms)
        {
            if a != b {
                *pairs.entry((*a.min(b), *a.max(b))).or_default() += 1;
            }
        }
    }
    pairs
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

/// Names of Semantic notes: exact (normalised) lookup and, once embedded, similarity.
struct SemanticIndex {
    exact: HashMap<String, MemoryId>,
    names: Vec<(MemoryId, ConceptType, String)>,
    vectors: Vec<(MemoryId, ConceptType, Vec<f32>)>,
}

impl SemanticIndex {
    fn build(graph: &MemoryGraph) -> Self {
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

    fn exact(&self, s: &SemMemory) -> Option<MemoryId> {
        std::iter::once(&s.content)
            .chain(&s.aliases)
            .find_map(|n| self.exact.get(&normalize_name(n)).copied())
    }

    fn embed_existing(&mut self, e: &dyn TextEmbedder) -> Result<()> {
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

    fn similar(&self, v: &[f32], ct: ConceptType, threshold: f32) -> Option<(MemoryId, f32)> {
        self.vectors
            .iter()
            .filter(|(_, c, _)| *c == ct)
            .map(|(id, _, w)| (*id, dot(v, w)))
            .filter(|(_, s)| *s >= threshold)
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Indexes the current names of `id` (after a create or merge) so later notes of the same
    /// change set match it too.
    fn add_names(&mut self, graph: &MemoryGraph, id: MemoryId, vector: Option<&[f32]>) {
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
struct SituationIndex {
    exact: HashMap<String, Vec<(MemoryId, DateTime<Utc>)>>,
    texts: Vec<(MemoryId, DateTime<Utc>, String)>,
    vectors: Vec<(MemoryId, DateTime<Utc>, Vec<f32>)>,
}

fn same_day(a: DateTime<Utc>, b: DateTime<Utc>) -> bool {
    (a - b).num_hours().abs() < 24
}

impl SituationIndex {
    fn build(graph: &MemoryGraph) -> Self {
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

    fn exact(
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

    fn embed_existing(&mut self, e: &dyn TextEmbedder) -> Result<()> {
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

    fn similar(&self, v: &[f32], when: DateTime<Utc>, threshold: f32) -> Option<(MemoryId, f32)> {
        self.vectors
            .iter()
            .filter(|(_, t, _)| same_day(*t, when))
            .map(|(id, _, w)| (*id, dot(v, w)))
            .filter(|(_, s)| *s >= threshold)
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn add(
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::import::{export_json, import_bytes, ImportOptions};
    use crate::retrieval::HashEmbedder;
    use serde_json::{json, Value};

    const AT: &str = "2026-06-10T12:00:00Z";

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn sem_node(id: &str, content: &str, aliases: &[&str], links: Value) -> Value {
        json!({"id": id, "tags": [], "mem_type": {"Semantic": {"content": content,
            "aliases": aliases, "concept_type": "Entity", "description": "旧描述"}},
            "mem_links": links})
    }

    fn sit_node(id: &str, narrative: &str, who: &str, time: &str, actions: &[&str]) -> Value {
        let events: Vec<Value> = actions
            .iter()
            .map(|a| json!({"action": a, "initiator": "我", "target": "", "action_intensity": 0.5}))
            .collect();
        json!({"id": id, "tags": [], "mem_type": {"Situation": {"SpecificSituation": {
            "narrative": narrative, "time_span": time,
            "context": {"participants": [{"name": who, "role": "朋友"}], "event": events}}}},
            "mem_links": []})
    }

    fn sem_link(from: &str, to: &str, w: f64) -> Value {
        json!({"from": from, "to": to, "intensity": w,
               "link_type": {"Sem": {"verb": "认识", "confidence": 0.9}}})
    }

    fn graph(nodes: Value) -> MemoryGraph {
        let opts = ImportOptions {
            now: t("2026-06-01T00:00:00Z"),
            ..ImportOptions::default()
        };
        import_bytes("小红", nodes.to_string().as_bytes(), &opts).unwrap()
    }

    fn base() -> MemoryGraph {
        graph(json!([
            sem_node("sem_self", "小红", &["我"], json!([])),
            sem_node(
                "sem_xiaobai",
                "小白",
                &["白白"],
                json!([sem_link("sem_xiaobai", "sem_tea", 0.5)])
            ),
            sem_node("sem_tea", "奶茶", &[], json!([])),
        ]))
    }

    fn sem(key: &str, content: &str, aliases: &[&str], description: &str) -> Value {
        json!({"key": key, "mem_type": {"Semantic": {"content": content, "aliases": aliases,
               "concept_type": "Entity", "description": description}}})
    }

    fn sit(key: &str, narrative: &str, who: &str, time: &str, actions: &[&str]) -> Value {
        let mut n = sit_node(key, narrative, who, time, actions);
        let obj = n.as_object_mut().unwrap();
        obj.remove("id");
        obj.remove("mem_links");
        obj.remove("tags");
        obj.insert("key".into(), key.into());
        n
    }

    fn apply(g: &mut MemoryGraph, v: Value, cfg: &ConsolidateConfig) -> Result<Report> {
        let cs = ChangeSet::from_json(v.to_string().as_bytes(), cfg)?;
        consolidate(g, &cs, cfg, Some(&HashEmbedder::new(256).unwrap()))
    }

    fn semantic<'a>(g: &'a MemoryGraph, rid: &str) -> &'a SemMemory {
        match &g.get_by_readable(rid).unwrap().mem_type {
            MemoryType::Semantic(s) => s,
            other => panic!("not semantic: {other:?}"),
        }
    }

    fn link_between(g: &MemoryGraph, from: &str, to: &str) -> Option<MemoryLink> {
        let (f, t) = (g.resolve(from).unwrap(), g.resolve(to).unwrap());
        g.get(&f).unwrap().links.iter().find(|l| l.to == t).cloned()
    }

    /// Asserts that `v` is refused and the graph did not change at all.
    fn assert_rejected(v: Value, cfg: &ConsolidateConfig) -> Error {
        let mut g = base();
        let before = export_json(&g, false).unwrap();
        let version = g.version();
        let err = apply(&mut g, v, cfg).unwrap_err();
        assert_eq!(export_json(&g, false).unwrap(), before);
        assert_eq!(g.version(), version);
        err
    }

    #[test]
    fn consolidate_normalize_name_folds_width_case_and_punctuation() {
        assert_eq!(normalize_name("  小白！ "), "小白");
        assert_eq!(normalize_name("ＸＩＡＯ　Bai"), "xiaobai");
        assert_eq!(normalize_name("Milk-Tea."), "milktea");
        assert_eq!(normalize_name("「奶茶」"), "奶茶");
        assert_eq!(normalize_name("!!!"), "");
    }

    #[test]
    fn consolidate_creates_all_four_kinds_with_derived_ids_and_links() {
        let v = json!({"at": AT, "happened_at": "2026-06-10T10:00:00Z", "notes": [
          sem("n1", "麻辣烫", &["麻辣烫店"], "很辣"),
          sit("n2", "我和小白去吃麻辣烫", "小白", "2026-06-10T09:00:00Z", &["吃麻辣烫"]),
          {"key": "n3", "mem_type": {"Situation": {"AbstractSituation": {"Location": {"name": "老街"}}}}},
          {"key": "n4", "mem_type": {"Procedure": {"action": {"content": "紧张时摸辫子", "action_type": "Speak"}}}}
        ], "links": [
          {"from": "n2", "to": "n1", "link_type": {"Sem": {"verb": "吃了", "confidence": 0.8}}},
          {"from": "n2", "to": "sem_xiaobai", "intensity": 0.7, "link_type": {"Sem": {"verb": "和", "confidence": 1.0}}},
          {"from": "n3", "to": "n4", "link_type": {"Proc": {"TrigToAction": {"prob": 0.6}}}}
        ]});
        let mut g = base();
        let r = apply(&mut g, v.clone(), &ConsolidateConfig::default()).unwrap();
        assert_eq!(r.created.len(), 4);
        assert_eq!(r.linked, 3);
        assert!(r.merged.is_empty());
        let rid = &r.keys["n2"];
        assert!(rid.starts_with("sit_c"));
        let note = g.get_by_readable(rid).unwrap();
        assert_eq!(note.id, MemoryId::derive("小红", rid));
        // The situation is created when it happened; other notes when the talk happened.
        assert_eq!(note.create_time, t("2026-06-10T09:00:00Z"));
        assert_eq!(
            g.get_by_readable(&r.keys["n1"]).unwrap().create_time,
            t("2026-06-10T10:00:00Z")
        );
        assert_eq!(link_between(&g, rid, "sem_xiaobai").unwrap().intensity, 0.7);
        // Same input on a fresh graph: same ids.
        let mut g2 = base();
        let r2 = apply(&mut g2, v, &ConsolidateConfig::default()).unwrap();
        assert_eq!(r.keys, r2.keys);
        // The result still round-trips through Graph JSON.
        let json = export_json(&g, false).unwrap();
        let back = import_bytes("小红", json.as_bytes(), &ImportOptions::default()).unwrap();
        assert_eq!(export_json(&back, false).unwrap(), json);
    }

    #[test]
    fn consolidate_merges_semantic_by_normalised_name_and_moves_links() {
        let v = json!({"at": AT, "notes": [
          sem("x", "  小白！", &["白团子"], "喜欢奶茶"),
          sem("y", "ＸＩＡＯＢＡＩ", &["小白"], ""),
          sit("s", "小白请我喝奶茶", "小白", "2026-06-09T09:00:00Z", &[])
        ], "links": [
          {"from": "s", "to": "x", "link_type": {"Sem": {"verb": "和", "confidence": 1.0}}}
        ]});
        let mut g = base();
        let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
        assert_eq!(r.created.len(), 1, "only the situation is new");
        assert_eq!(r.merged.len(), 2);
        assert!(r
            .merged
            .iter()
            .all(|m| m.into == "sem_xiaobai" && m.by == "exact"));
        let s = semantic(&g, "sem_xiaobai");
        assert_eq!(s.content, "小白");
        assert!(s.aliases.contains(&"白团子".to_owned()));
        assert!(s.aliases.contains(&"ＸＩＡＯＢＡＩ".to_owned()));
        assert_eq!(
            s.aliases
                .iter()
                .filter(|a| normalize_name(a) == "小白")
                .count(),
            0
        );
        assert_eq!(s.description, "旧描述；喜欢奶茶");
        // The link that named the new note now points at the existing one.
        assert!(link_between(&g, &r.keys["s"], "sem_xiaobai").is_some());
        assert!(duplicate_semantic_groups(&g).is_empty());
    }

    #[test]
    fn consolidate_merges_semantic_by_embedding_only_above_threshold() {
        let v = json!({"at": AT, "notes": [sem("x", "奶茶们", &[], "")]});
        let strict = ConsolidateConfig::default();
        let mut g = base();
        let r = apply(&mut g, v.clone(), &strict).unwrap();
        assert_eq!(r.created.len(), 1, "0.93 is conservative");

        let loose = ConsolidateConfig {
            merge_similarity: 0.5,
            ..ConsolidateConfig::default()
        };
        let mut g = base();
        let r = apply(&mut g, v.clone(), &loose).unwrap();
        assert_eq!(r.created.len(), 0);
        assert_eq!(r.merged[0].into, "sem_tea");
        assert_eq!(r.merged[0].by, "similarity");
        assert!(r.merged[0].score >= 0.5 && r.merged[0].score < 1.0);

        // Without an embedder only strings are compared.
        let mut g = base();
        let cs = ChangeSet::from_json(v.to_string().as_bytes(), &loose).unwrap();
        let r = consolidate(&mut g, &cs, &loose, None).unwrap();
        assert_eq!(r.created.len(), 1);

        // An abstract concept never merges into an entity.
        let abs = json!({"at": AT, "notes": [{"key": "x", "mem_type": {"Semantic": {
            "content": "奶茶们", "concept_type": "Abstract"}}}]});
        let mut g = base();
        assert_eq!(apply(&mut g, abs, &loose).unwrap().created.len(), 1);
    }

    #[test]
    fn consolidate_dedupes_within_one_change_set() {
        let v = json!({"at": AT, "notes": [sem("a", "烤红薯", &[], "甜"), sem("b", "烤红薯。", &["红薯"], "")],
            "links": [{"from": "b", "to": "sem_tea", "link_type": {"Sem": {"verb": "配", "confidence": 0.5}}}]});
        let mut g = base();
        let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
        assert_eq!(r.created.len(), 1);
        assert_eq!(r.keys["a"], r.keys["b"]);
        assert!(semantic(&g, &r.keys["a"])
            .aliases
            .contains(&"红薯".to_owned()));
        assert!(link_between(&g, &r.keys["a"], "sem_tea").is_some());
    }

    #[test]
    fn consolidate_reuses_a_situation_repeated_the_same_day_only() {
        let mut g = base();
        let first = json!({"at": AT, "notes": [sit("s", "我和小白去吃麻辣烫", "小白", "2026-06-10T09:00:00Z", &[])]});
        let r1 = apply(&mut g, first, &ConsolidateConfig::default()).unwrap();
        let same = json!({"at": AT, "notes": [sit("s", "我和小白去吃麻辣烫。", "小白", "2026-06-10T11:00:00Z", &[])]});
        let r2 = apply(&mut g, same, &ConsolidateConfig::default()).unwrap();
        assert!(r2.created.is_empty());
        assert_eq!(r2.keys["s"], r1.keys["s"]);
        let later = json!({"at": AT, "notes": [sit("s", "我和小白去吃麻辣烫", "小白", "2026-06-03T09:00:00Z", &[])]});
        let r3 = apply(&mut g, later, &ConsolidateConfig::default()).unwrap();
        assert_eq!(r3.created.len(), 1);
        assert_ne!(r3.keys["s"], r1.keys["s"]);
    }

    #[test]
    fn consolidate_rejects_invalid_change_sets_leaving_the_graph_unchanged() {
        let cfg = ConsolidateConfig::default();
        let unknown_kind =
            json!({"at": AT, "notes": [{"key": "a", "mem_type": {"Dream": {"content": "x"}}}]});
        assert!(matches!(
            assert_rejected(unknown_kind, &cfg),
            Error::InvalidJson(_)
        ));
        let wrong_type = json!({"at": AT, "notes": [{"key": "a", "mem_type": {"Semantic": {"content": 5, "concept_type": "Entity"}}}]});
        assert!(matches!(
            assert_rejected(wrong_type, &cfg),
            Error::InvalidJson(_)
        ));
        let extra_field = json!({"at": AT, "notes": [], "drop_table": true});
        assert!(matches!(
            assert_rejected(extra_field, &cfg),
            Error::InvalidJson(_)
        ));
        let many: Vec<Value> = (0..10_000)
            .map(|i| sem(&format!("k{i}"), &format!("概念{i}"), &[], ""))
            .collect();
        let err = assert_rejected(json!({"at": AT, "notes": many}), &cfg);
        assert!(
            matches!(
                err,
                Error::LimitExceeded {
                    count: 10_000,
                    limit: 200,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.kind(), "limit_exceeded");
        let dangling = json!({"at": AT, "notes": [sem("a", "新东西", &[], "")],
            "links": [{"from": "a", "to": "sem_nobody", "link_type": {"Sem": {"verb": "r", "confidence": 1.0}}}]});
        assert!(matches!(
            assert_rejected(dangling, &cfg),
            Error::MissingLinkTarget { .. }
        ));
        let bad_kinds = json!({"at": AT, "notes": [sem("a", "新东西", &[], "")],
            "links": [{"from": "a", "to": "sem_tea", "link_type": {"Proc": {"TrigToAction": {"prob": 0.5}}}}]});
        assert!(matches!(
            assert_rejected(bad_kinds, &cfg),
            Error::InvalidValue { .. }
        ));
        let bad_prob = json!({"at": AT, "links": [{"from": "sem_tea", "to": "sem_xiaobai",
            "link_type": {"Sem": {"verb": "r", "confidence": 7.0}}}]});
        assert!(matches!(
            assert_rejected(bad_prob, &cfg),
            Error::InvalidValue { .. }
        ));
        let self_loop = json!({"at": AT, "links": [{"from": "sem_tea", "to": "sem_tea",
            "link_type": {"Sem": {"verb": "r", "confidence": 1.0}}}]});
        assert!(matches!(
            assert_rejected(self_loop, &cfg),
            Error::InvalidValue { .. }
        ));
        let dup_key =
            json!({"at": AT, "notes": [sem("a", "甲", &[], ""), sem("a", "乙", &[], "")]});
        assert!(matches!(
            assert_rejected(dup_key, &cfg),
            Error::DuplicateId { .. }
        ));
        let empty = json!({"at": AT, "notes": [sem("a", "  ", &[], "")]});
        assert!(matches!(
            assert_rejected(empty, &cfg),
            Error::InvalidValue { .. }
        ));
        let long = json!({"at": AT, "notes": [sem("a", &"长".repeat(2001), &[], "")]});
        assert!(matches!(
            assert_rejected(long, &cfg),
            Error::InvalidValue { .. }
        ));
        let future =
            json!({"at": AT, "notes": [sit("s", "明天的事", "小白", "2026-06-11T09:00:00Z", &[])]});
        assert!(matches!(
            assert_rejected(future, &cfg),
            Error::InvalidValue { .. }
        ));
        let bad_time = json!({"at": "yesterday", "notes": []});
        assert!(matches!(
            assert_rejected(bad_time, &cfg),
            Error::InvalidJson(_)
        ));
        let small = ConsolidateConfig {
            max_bytes: 10,
            ..cfg.clone()
        };
        assert!(matches!(
            assert_rejected(json!({"at": AT}), &small),
            Error::TooLarge { .. }
        ));
        let few = ConsolidateConfig {
            max_records: 2,
            ..cfg
        };
        let records = json!({"at": AT, "records": {"sem_tea": [AT, AT, AT]}});
        assert!(matches!(
            assert_rejected(records, &few),
            Error::LimitExceeded { .. }
        ));
    }

    #[test]
    fn consolidate_late_failure_rolls_back_notes_already_inserted() {
        // The notes are valid and inserted first; the link step then fails.
        let v = json!({"at": AT, "notes": [sem("a", "新东西", &[], ""), sem("b", "小白", &[], "新描述")],
            "links": [{"from": "a", "to": "b", "link_type": {"Situation": {"SpecificToAbstract": {}}}}]});
        let err = assert_rejected(v, &ConsolidateConfig::default());
        assert!(err.to_string().contains("specific_to_abstract"), "{err}");
    }

    fn records(v: Value) -> BTreeMap<String, Vec<DateTime<Utc>>> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn consolidate_frequency_is_n_over_t_with_a_floor() {
        let g = base();
        let r = records(json!({
            "sem_xiaobai": ["2026-06-10T08:00:00Z", "2026-06-10T09:00:00Z", "2026-06-10T09:30:00Z", "2026-06-10T10:00:00Z"],
            "sem_tea": ["2026-06-10T08:00:00Z"],
            "sem_self": ["2026-06-10T08:00:00Z", "2026-06-10T08:00:01Z"],
            "sem_gone": ["2026-06-10T08:00:00Z"]
        }));
        let a = activity(&g, &r, 1.0);
        let got: Vec<(&str, f64)> = a
            .iter()
            .map(|x| (x.readable_id.as_str(), x.frequency))
            .collect();
        // 4 in 2 h = 2/h; 1 retrieval: T floored at 1 h; the core self node is never "active".
        assert_eq!(got, vec![("sem_xiaobai", 2.0), ("sem_tea", 1.0)]);
        assert_eq!(a[0].retrievals, 4);
    }

    #[test]
    fn consolidate_links_new_notes_to_the_top_k_active_notes() {
        let mut g = base();
        let v = json!({"at": AT, "notes": [sem("a", "烤红薯", &[], "")],
        "records": {
            "sem_xiaobai": ["2026-06-10T08:00:00Z", "2026-06-10T08:10:00Z", "2026-06-10T08:20:00Z"],
            "sem_tea": ["2026-06-10T09:00:00Z"],
            "nobody": ["2026-06-10T11:00:00Z"]
        }});
        let cfg = ConsolidateConfig {
            top_k: 1,
            ..ConsolidateConfig::default()
        };
        let r = apply(&mut g, v, &cfg).unwrap();
        assert_eq!(r.active, vec!["sem_xiaobai"]);
        let new = &r.keys["a"];
        let there = link_between(&g, new, "sem_xiaobai").unwrap();
        assert_eq!(there.intensity, 0.5);
        assert!(link_between(&g, "sem_xiaobai", new).is_some());
        assert!(link_between(&g, new, "sem_tea").is_none());
        assert_eq!(r.hebbian_links, 2);
        assert_eq!(r.unknown_records, 1);
        assert_eq!(r.records_until, Some(t("2026-06-10T11:00:00Z")));
    }

    #[test]
    fn consolidate_ltp_strengthens_coactivated_links_capped_and_wires_new_pairs() {
        let mut g = graph(json!([
            sem_node("a", "甲", &[], json!([sem_link("a", "b", 0.5)])),
            sem_node("b", "乙", &[], json!([sem_link("b", "a", 0.95)])),
            sem_node("c", "丙", &[], json!([sem_link("c", "a", 1.5)])),
            sem_node("d", "丁", &[], json!([])),
        ]));
        // a, b and c recalled together three times (one recall records all at one instant);
        // d with c twice.
        let times = [
            "2026-06-10T08:00:00Z",
            "2026-06-10T09:00:00Z",
            "2026-06-10T10:00:00Z",
        ];
        let v = json!({"at": AT, "records": {"a": times, "b": times, "c": times,
                                              "d": ["2026-06-10T08:00:00.300Z", "2026-06-10T09:00:00Z"]}});
        let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
        assert!((link_between(&g, "a", "b").unwrap().intensity - 0.8).abs() < 1e-9);
        assert_eq!(link_between(&g, "b", "a").unwrap().intensity, 1.0, "capped");
        assert_eq!(
            link_between(&g, "c", "a").unwrap().intensity,
            1.5,
            "never lowered by LTP"
        );
        assert_eq!(r.strengthened, 2);
        // c–d: twice together, unlinked → wired both ways; d was also with a and b.
        assert_eq!(link_between(&g, "c", "d").unwrap().intensity, 0.5);
        assert!(link_between(&g, "d", "c").is_some());
        assert_eq!(
            r.weakened + r.disconnected,
            0,
            "every link was co-activated"
        );
    }

    #[test]
    fn consolidate_ltd_weakens_unused_links_and_disconnects_below_threshold() {
        let mut g = graph(json!([
            sem_node(
                "a",
                "甲",
                &[],
                json!([
                    sem_link("a", "x", 0.5),
                    sem_link("a", "y", 0.05),
                    sem_link("a", "b", 0.5)
                ])
            ),
            sem_node("b", "乙", &[], json!([])),
            sem_node("x", "戊", &[], json!([])),
            sem_node("y", "己", &[], json!([])),
        ]));
        let v = json!({"at": AT, "records": {"a": ["2026-06-10T08:00:00Z"], "b": ["2026-06-10T08:00:00Z"]}});
        let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
        assert!((link_between(&g, "a", "x").unwrap().intensity - 0.45).abs() < 1e-9);
        assert!(
            link_between(&g, "a", "y").is_none(),
            "0.045 < 0.05: disconnected"
        );
        assert!(
            (link_between(&g, "a", "b").unwrap().intensity - 0.6).abs() < 1e-9,
            "LTP"
        );
        assert_eq!((r.weakened, r.disconnected, r.strengthened), (1, 1, 1));
        // Notes without records keep their links.
        assert!(link_between(&g, "a", "x").is_some());
    }

    fn three_days(g: &mut MemoryGraph) {
        let v = json!({"at": AT, "notes": [
            sit("s1", "放学后和小白吃麻辣烫", "小白", "2026-06-01T17:00:00Z", &["摸辫子"]),
            sit("s2", "周末和小白逛书店", "小白", "2026-06-05T10:00:00Z", &["摸辫子", "笑"]),
        ]});
        apply(g, v, &ConsolidateConfig::default()).unwrap();
    }

    #[test]
    fn consolidate_induces_a_pattern_from_k_situations_with_evidence() {
        let mut g = base();
        three_days(&mut g);
        assert!(
            g.notes().all(|n| n.kind() != NodeKind::AbstractSituation),
            "2 < k"
        );
        let v = json!({"at": AT, "notes": [
            sit("s3", "小白来我家写作业", "小白", "2026-06-09T19:00:00Z", &["摸辫子"]),
            sit("s4", "一个人去图书馆", "图书管理员", "2026-06-09T09:00:00Z", &[])
        ]});
        let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
        assert_eq!(r.induced.len(), 1, "{:?}", r.induced);
        let p = &r.induced[0];
        assert_eq!(
            (p.facet, p.name.as_str(), p.reused),
            ("participant", "小白", false)
        );
        assert_eq!(p.evidence.len(), 3);
        let abs = g.get_by_readable(&p.id).unwrap();
        assert!(
            matches!(&abs.mem_type, MemoryType::Situation(Situation::AbstractSituation(AbstractSituation::Participant(x))) if x.name == "小白")
        );
        for e in &p.evidence {
            assert!(abs.tags.contains(&format!("{EVIDENCE_TAG}{e}")));
            let up = link_between(&g, e, &p.id).unwrap();
            assert_eq!(up.link_type.kind(), LinkKind::SpecificToAbstract);
            let down = link_between(&g, &p.id, e).unwrap();
            assert_eq!(down.link_type.kind(), LinkKind::AbstractToSpecific);
        }
        // The self participant "我" never forms a pattern; events: 摸辫子 shows 3 times.
        assert_eq!(r.habits.len(), 1);
        let h = &r.habits[0];
        assert_eq!(h.trigger, p.id);
        assert_eq!(h.evidence.len(), 3);
        // 摸辫子 ×3, 笑 ×1 → 3/4 by sum.
        assert!((h.prob - 0.75).abs() < 1e-9, "{}", h.prob);
        let trig = link_between(&g, &p.id, &h.id).unwrap();
        assert!(
            matches!(trig.link_type, MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob }) if (prob - 0.75).abs() < 1e-9)
        );

        // A fourth situation reuses the pattern and the habit, adding evidence.
        let v = json!({"at": AT, "notes": [sit("s5", "和小白去看电影", "小白", "2026-06-10T08:00:00Z", &["摸辫子"])]});
        let r2 = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
        assert_eq!(r2.induced.len(), 1);
        assert!(r2.induced[0].reused);
        assert_eq!(r2.induced[0].id, p.id);
        assert_eq!(r2.induced[0].evidence.len(), 4);
        assert!(r2.habits[0].reused);
        assert!((r2.habits[0].prob - 0.8).abs() < 1e-9, "4 of 5");
        let n_abs = g
            .notes()
            .filter(|n| n.kind() == NodeKind::AbstractSituation)
            .count();
        assert_eq!(n_abs, 1);
    }

    #[test]
    fn consolidate_habit_probabilities_are_normalised_by_sum_not_softmax() {
        let mut g = base();
        let mut notes = Vec::new();
        for i in 0..10 {
            let action = if i < 9 { "递纸巾" } else { "转身走开" };
            notes.push(sit(
                &format!("s{i}"),
                &format!("小白哭了第{i}次"),
                "小白",
                &format!("2026-06-0{}T08:00:00Z", 1 + i % 9),
                &[action],
            ));
        }
        let cfg = ConsolidateConfig {
            behaviour_min_support: 1,
            ..ConsolidateConfig::default()
        };
        let r = apply(&mut g, json!({"at": AT, "notes": notes}), &cfg).unwrap();
        let mut probs: Vec<f64> = r.habits.iter().map(|h| h.prob).collect();
        probs.sort_by(f64::total_cmp);
        assert_eq!(probs.len(), 2);
        assert!(
            (probs[0] - 0.1).abs() < 1e-9 && (probs[1] - 0.9).abs() < 1e-9,
            "{probs:?}"
        );
    }

    #[test]
    fn consolidate_groups_pattern_names_by_embedding() {
        let mut g = base();
        let v = json!({"at": AT, "notes": [
            sit("s1", "甲", "小白同学", "2026-06-01T08:00:00Z", &[]),
            sit("s2", "乙", "小白同学们", "2026-06-02T08:00:00Z", &[]),
            sit("s3", "丙", "小白同学", "2026-06-03T08:00:00Z", &[]),
        ]});
        // Structured names differ ("小白同学" ×2, "小白同学们" ×1): only embedding makes it 3.
        let strict = ConsolidateConfig {
            pattern_similarity: 0.99,
            ..ConsolidateConfig::default()
        };
        assert!(apply(&mut g.clone(), v.clone(), &strict)
            .unwrap()
            .induced
            .is_empty());
        let loose = ConsolidateConfig {
            pattern_similarity: 0.7,
            ..ConsolidateConfig::default()
        };
        let r = apply(&mut g, v, &loose).unwrap();
        assert_eq!(r.induced.len(), 1);
        assert_eq!(
            r.induced[0].name, "小白同学",
            "the most frequent surface names it"
        );
        assert_eq!(r.induced[0].evidence.len(), 3);
    }

    #[test]
    fn consolidate_duplicate_groups_find_shared_names() {
        let g = graph(json!([
            sem_node("a", "小白", &[], json!([])),
            sem_node("b", "白白", &["小白！"], json!([])),
            sem_node("c", "奶茶", &[], json!([])),
        ]));
        assert_eq!(
            duplicate_semantic_groups(&g),
            vec![vec!["a".to_owned(), "b".to_owned()]]
        );
    }

    #[test]
    fn consolidate_config_rejects_out_of_range_values() {
        let bad = ConsolidateConfig {
            ltd_factor: 1.5,
            ..ConsolidateConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = ConsolidateConfig {
            pattern_min_support: 0,
            ..ConsolidateConfig::default()
        };
        assert!(bad.validate().is_err());
        assert!(serde_json::from_str::<ConsolidateConfig>(r#"{"top_kk": 3}"#).is_err());
        assert!(ConsolidateConfig::default().validate().is_ok());
    }
}
