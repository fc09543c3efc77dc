//! Retrieval queries in the seed's Query JSON shape, the texts they need embedded, and their
//! embedded form.

use super::field_texts::{environment_text, event_text};
use super::field_vectors::QVec;
use super::text_embedder::{EmbedKind, TextEmbedder};
use crate::error::{Error, Result};
use crate::model::null_default;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One sub-query (seed `PrioritizedMemoryRetrieveQuery`): priority, tags and a variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubQuery {
    /// Larger is more important; only nudges merged scores (see `priority_offset`).
    #[serde(default)]
    pub priority: u32,
    /// Tags (tag channel).
    #[serde(default, deserialize_with = "null_default")]
    pub tag: Vec<String>,
    /// Structured part.
    pub variant: QueryVariant,
}

/// Semantic or situation query units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum QueryVariant {
    /// Concepts.
    Semantic(Vec<SemQueryUnit>),
    /// Situations.
    Situation(Vec<SitQueryUnit>),
}

/// A concept being asked about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SemQueryUnit {
    /// Name of the concept (also matched by the string channel).
    #[serde(deserialize_with = "null_default")]
    pub concept_identifier: String,
    /// Free description.
    #[serde(deserialize_with = "null_default")]
    pub description: String,
}

/// A place in a situation query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct QueryLocation {
    /// Name.
    #[serde(deserialize_with = "null_default")]
    pub name: String,
    /// Where it is, free text (the seed's `coordinates`). Accepted for the seed's Query JSON;
    /// not scored: locations match by name, as the seed did.
    #[serde(deserialize_with = "null_default")]
    pub coordinates: String,
}

/// A participant in a situation query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct QueryParticipant {
    /// Name.
    #[serde(deserialize_with = "null_default")]
    pub name: String,
    /// Role.
    #[serde(deserialize_with = "null_default")]
    pub role: String,
}

/// A time range; either end may be open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TimeRange {
    /// Inclusive start.
    pub start: Option<DateTime<Utc>>,
    /// Inclusive end.
    pub end: Option<DateTime<Utc>>,
}

impl TimeRange {
    /// True when `t` lies inside the range.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.start.is_none_or(|s| t >= s) && self.end.is_none_or(|e| t <= e)
    }
}

/// Atmosphere and tone in a situation query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct QueryEnvironment {
    /// Atmosphere.
    #[serde(deserialize_with = "null_default")]
    pub atmosphere: String,
    /// Tone.
    #[serde(deserialize_with = "null_default")]
    pub tone: String,
}

/// An event in a situation query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct QueryEvent {
    /// Action.
    #[serde(deserialize_with = "null_default")]
    pub action: String,
    /// Who acted.
    #[serde(deserialize_with = "null_default")]
    pub initiator: String,
    /// Acted upon.
    #[serde(deserialize_with = "null_default")]
    pub target: String,
}

/// A situation being asked about; every field optional (`null` = absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SitQueryUnit {
    /// Natural-language account.
    #[serde(deserialize_with = "null_default")]
    pub narrative: String,
    /// Places.
    #[serde(deserialize_with = "null_default")]
    pub location: Vec<QueryLocation>,
    /// Participants.
    #[serde(deserialize_with = "null_default")]
    pub participants: Vec<QueryParticipant>,
    /// Time ranges: specific situations inside one are preferred.
    #[serde(deserialize_with = "null_default")]
    pub time_span: Vec<TimeRange>,
    /// Atmosphere and tone.
    #[serde(deserialize_with = "null_default")]
    pub environment: QueryEnvironment,
    /// Events.
    #[serde(deserialize_with = "null_default")]
    pub event: Vec<QueryEvent>,
}

/// Where a query text's vector goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuerySlot {
    /// Tag `i`.
    Tag(usize),
    /// Semantic unit `u`: concept identifier.
    Concept(usize),
    /// Semantic unit `u`: description.
    Description(usize),
    /// Situation unit `u`: narrative.
    Narrative(usize),
    /// Situation unit `u`: location `j`.
    Location(usize, usize),
    /// Situation unit `u`: participant `j`'s name.
    ParticipantName(usize, usize),
    /// Situation unit `u`: participant `j`'s role.
    ParticipantRole(usize, usize),
    /// Situation unit `u`: environment.
    Environment(usize),
    /// Situation unit `u`: event `j`.
    Event(usize, usize),
}

/// The texts of one sub-query that must be embedded (query side), in a fixed order, each
/// with its slot. Empty texts are left out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryTexts {
    /// `(slot, text)` in embedding order.
    pub items: Vec<(QuerySlot, String)>,
}

impl QueryTexts {
    /// Lists the texts of `q`. Complexity: O(size of the query).
    pub fn of(q: &SubQuery) -> Self {
        let mut items = Vec::new();
        let mut add = |slot: QuerySlot, t: String| {
            let t = t.trim();
            if !t.is_empty() {
                items.push((slot, t.to_owned()));
            }
        };
        for (i, t) in q.tag.iter().enumerate() {
            add(QuerySlot::Tag(i), t.clone());
        }
        match &q.variant {
            QueryVariant::Semantic(units) => {
                for (u, s) in units.iter().enumerate() {
                    add(QuerySlot::Concept(u), s.concept_identifier.clone());
                    add(QuerySlot::Description(u), s.description.clone());
                }
            }
            QueryVariant::Situation(units) => {
                for (u, s) in units.iter().enumerate() {
                    add(QuerySlot::Narrative(u), s.narrative.clone());
                    for (j, l) in s.location.iter().enumerate() {
                        add(QuerySlot::Location(u, j), l.name.clone());
                    }
                    for (j, p) in s.participants.iter().enumerate() {
                        add(QuerySlot::ParticipantName(u, j), p.name.clone());
                        add(QuerySlot::ParticipantRole(u, j), p.role.clone());
                    }
                    add(
                        QuerySlot::Environment(u),
                        environment_text(&s.environment.atmosphere, &s.environment.tone),
                    );
                    for (j, e) in s.event.iter().enumerate() {
                        add(
                            QuerySlot::Event(u, j),
                            event_text(&e.initiator, &e.action, &e.target),
                        );
                    }
                }
            }
        }
        QueryTexts { items }
    }

    /// The texts alone, in order (what to hand the embedding model).
    pub fn texts(&self) -> Vec<&str> {
        self.items.iter().map(|(_, t)| t.as_str()).collect()
    }
}

/// The distinct texts of a recall's sub-queries, in order of first appearance (what
/// activation embeds once each). Complexity: O(texts²) (a recall has a handful).
pub fn distinct_query_texts(qs: &[SubQuery]) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    for q in qs {
        for t in QueryTexts::of(q).texts() {
            if !texts.iter().any(|x| x == t) {
                texts.push(t.to_owned());
            }
        }
    }
    texts
}

/// Query vectors of one sub-query: one vector per [`QueryTexts`] item, same order.
pub type QueryVectors = Vec<Vec<f32>>;

/// Embeds the texts of `q` with `embedder` (query side).
pub fn embed_query(q: &SubQuery, embedder: &dyn TextEmbedder) -> Result<QueryVectors> {
    Ok(embed_queries(std::slice::from_ref(q), embedder)?
        .pop()
        .unwrap_or_default())
}

/// Embeds the texts of every sub-query of one recall in one call to `embedder` (one batch
/// for the model: a recall's sub-queries do not each pay a forward pass), split back per
/// sub-query.
pub fn embed_queries(qs: &[SubQuery], embedder: &dyn TextEmbedder) -> Result<Vec<QueryVectors>> {
    let texts: Vec<QueryTexts> = qs.iter().map(QueryTexts::of).collect();
    let refs: Vec<&str> = texts.iter().flat_map(QueryTexts::texts).collect();
    let mut vectors = if refs.is_empty() {
        Vec::new()
    } else {
        embedder.embed(&refs, EmbedKind::Query)?
    }
    .into_iter();
    Ok(texts
        .iter()
        .map(|t| vectors.by_ref().take(t.items.len()).collect())
        .collect())
}

/// An identifier normalised for the string channel, with a character bloom filter so pairs
/// that share no character are skipped without running the string metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    /// Lower-cased, whitespace-collapsed text.
    pub text: String,
    /// Length in chars.
    pub chars: usize,
    /// Bit `hash(c) % 64` set for every char `c`.
    pub bloom: u64,
    /// The first char (the Winkler prefix bonus needs the first chars equal).
    pub first: char,
}

/// The bloom bit of char `c` (see [`Ident::bloom`]).
#[inline]
fn bloom_bit(c: char) -> u64 {
    1u64 << ((c as u32).wrapping_mul(0x9E37_79B1) >> 26)
}

impl Ident {
    /// Normalises `s`; `None` when nothing is left.
    pub fn new(s: &str) -> Option<Self> {
        let text = s
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        if text.is_empty() {
            return None;
        }
        let mut bloom = 0u64;
        let mut chars = 0;
        for c in text.chars() {
            chars += 1;
            bloom |= bloom_bit(c);
        }
        let first = text.chars().next()?;
        Some(Ident {
            text,
            chars,
            bloom,
            first,
        })
    }

    /// An upper bound of [`Self::similarity`] from the lengths, the first chars and the
    /// bloom filters alone (no string metric runs). Why it holds: the normalised
    /// Levenshtein similarity is at most `min(len) / max(len)` (the distance is at least the
    /// length difference); Jaro counts `m` matching chars, each of `self` present in
    /// `other` (so its bloom bit is set there), and is at most `(m/len₁ + m/len₂ + 1) / 3`
    /// (no transpositions); Winkler adds `0.1·p·(1 − jaro)` for a common prefix of `p ≤ 4`
    /// chars, none when the first chars differ. Complexity: O(len of `self`).
    pub fn similarity_bound(&self, other: &Ident) -> f32 {
        if self.bloom & other.bloom == 0 {
            return 0.0;
        }
        let (l1, l2) = (self.chars.max(1) as f64, other.chars.max(1) as f64);
        let m = self
            .text
            .chars()
            .filter(|&c| other.bloom & bloom_bit(c) != 0)
            .count()
            .min(self.chars)
            .min(other.chars) as f64;
        let jaro = if m == 0.0 {
            0.0
        } else {
            (m / l1 + m / l2 + 1.0) / 3.0
        };
        let prefix = if self.first == other.first {
            self.chars.min(other.chars).min(4) as f64
        } else {
            0.0
        };
        let jw = jaro + 0.1 * prefix * (1.0 - jaro);
        let lev = l1.min(l2) / l1.max(l2);
        jw.max(lev).min(1.0) as f32
    }

    /// String similarity in [0, 1]: max of Jaro–Winkler and normalised Levenshtein; 0 without
    /// shared characters. Complexity: O(len₁·len₂) worst case.
    pub fn similarity(&self, other: &Ident) -> f32 {
        if self.bloom & other.bloom == 0 {
            return 0.0;
        }
        if self.text == other.text {
            return 1.0;
        }
        let jw = strsim::jaro_winkler(&self.text, &other.text);
        let lev = strsim::normalized_levenshtein(&self.text, &other.text);
        jw.max(lev) as f32
    }
}

/// One semantic unit, embedded.
#[derive(Debug, Clone, Default)]
pub struct EmbeddedSemUnit {
    /// Concept vector.
    pub concept: Option<QVec>,
    /// Description vector.
    pub description: Option<QVec>,
    /// Concept identifier for the string channel.
    pub ident: Option<Ident>,
}

/// A queried participant's (name, role) vectors.
pub type ParticipantVectors = (Option<QVec>, Option<QVec>);

/// One situation unit, embedded.
#[derive(Debug, Clone, Default)]
pub struct EmbeddedSitUnit {
    /// Narrative vector.
    pub narrative: Option<QVec>,
    /// Location vectors.
    pub locations: Vec<QVec>,
    /// Per participant: (name vector, role vector).
    pub participants: Vec<ParticipantVectors>,
    /// Environment vector.
    pub environment: Option<QVec>,
    /// Event vectors.
    pub events: Vec<QVec>,
    /// Time ranges.
    pub time_span: Vec<TimeRange>,
    /// Structured identifiers (locations, participants, environment, events).
    pub idents: Vec<Ident>,
}

/// Embedded variant.
#[derive(Debug, Clone)]
pub enum EmbeddedVariant {
    /// Semantic units.
    Semantic(Vec<EmbeddedSemUnit>),
    /// Situation units.
    Situation(Vec<EmbeddedSitUnit>),
}

/// A sub-query with its vectors in place, ready for scoring.
#[derive(Debug, Clone)]
pub struct EmbeddedQuery {
    /// Priority of the sub-query.
    pub priority: u32,
    /// Tag vectors.
    pub tags: Vec<QVec>,
    /// Structured part.
    pub variant: EmbeddedVariant,
}

impl EmbeddedQuery {
    /// Puts `vectors` (one per [`QueryTexts::of`] item, same order) into place and normalises
    /// them. Errors when the count or a dimension does not match `dim`.
    pub fn assemble(q: &SubQuery, vectors: &[Vec<f32>], dim: usize) -> Result<Self> {
        let texts = QueryTexts::of(q);
        if texts.items.len() != vectors.len() {
            return Err(Error::invalid_argument(
                "query_vectors",
                format!(
                    "{} vectors for {} query texts",
                    vectors.len(),
                    texts.items.len()
                ),
            ));
        }
        let mut tags = Vec::new();
        let mut variant = match &q.variant {
            QueryVariant::Semantic(units) => EmbeddedVariant::Semantic(
                units
                    .iter()
                    .map(|u| EmbeddedSemUnit {
                        ident: Ident::new(&u.concept_identifier),
                        ..Default::default()
                    })
                    .collect(),
            ),
            QueryVariant::Situation(units) => EmbeddedVariant::Situation(
                units
                    .iter()
                    .map(|u| {
                        let mut idents: Vec<Ident> = Vec::new();
                        idents.extend(u.location.iter().filter_map(|l| Ident::new(&l.name)));
                        for p in &u.participants {
                            idents.extend(Ident::new(&p.name));
                            idents.extend(Ident::new(&p.role));
                        }
                        idents.extend(Ident::new(&environment_text(
                            &u.environment.atmosphere,
                            &u.environment.tone,
                        )));
                        idents.extend(u.event.iter().filter_map(|e| Ident::new(&e.action)));
                        EmbeddedSitUnit {
                            participants: vec![(None, None); u.participants.len()],
                            time_span: u.time_span.clone(),
                            idents,
                            ..Default::default()
                        }
                    })
                    .collect(),
            ),
        };
        for ((slot, _), v) in texts.items.iter().zip(vectors) {
            if v.len() != dim {
                return Err(Error::invalid_argument(
                    "query_vectors",
                    format!("vector of length {} but dim is {dim}", v.len()),
                ));
            }
            let mut v = v.clone();
            super::dot::l2_normalise(&mut v);
            let v = QVec::new(v);
            match (&mut variant, *slot) {
                (_, QuerySlot::Tag(_)) => tags.push(v),
                (EmbeddedVariant::Semantic(us), QuerySlot::Concept(u)) => us[u].concept = Some(v),
                (EmbeddedVariant::Semantic(us), QuerySlot::Description(u)) => {
                    us[u].description = Some(v)
                }
                (EmbeddedVariant::Situation(us), QuerySlot::Narrative(u)) => {
                    us[u].narrative = Some(v)
                }
                (EmbeddedVariant::Situation(us), QuerySlot::Location(u, _)) => {
                    us[u].locations.push(v)
                }
                (EmbeddedVariant::Situation(us), QuerySlot::ParticipantName(u, j)) => {
                    us[u].participants[j].0 = Some(v)
                }
                (EmbeddedVariant::Situation(us), QuerySlot::ParticipantRole(u, j)) => {
                    us[u].participants[j].1 = Some(v)
                }
                (EmbeddedVariant::Situation(us), QuerySlot::Environment(u)) => {
                    us[u].environment = Some(v)
                }
                (EmbeddedVariant::Situation(us), QuerySlot::Event(u, _)) => us[u].events.push(v),
                _ => {
                    return Err(Error::invalid_argument(
                        "query_vectors",
                        "slot does not match the query variant",
                    ))
                }
            }
        }
        Ok(EmbeddedQuery {
            priority: q.priority,
            tags,
            variant,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Ident;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    #[test]
    fn the_similarity_bound_is_never_below_the_similarity() {
        // Small alphabets (CJK, Latin, mixed) so that strings share chars and the string
        // metrics actually run; lengths like identifiers'.
        let word = "[王小红明白猫狗咖啡馆abcde ]{1,9}";
        let mut runner = TestRunner::new(Config {
            cases: 4000,
            ..Config::default()
        });
        runner
            .run(&(word, word), |(a, b)| {
                if let (Some(a), Some(b)) = (Ident::new(&a), Ident::new(&b)) {
                    let (s, bound) = (a.similarity(&b), a.similarity_bound(&b));
                    prop_assert!(
                        bound >= s,
                        "{:?} vs {:?}: {s} > bound {bound}",
                        a.text,
                        b.text
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn the_similarity_bound_separates_what_cannot_match() {
        let q = Ident::new("咖啡").unwrap();
        // No shared char: 0, like the similarity.
        assert_eq!(q.similarity_bound(&Ident::new("小红").unwrap()), 0.0);
        // One shared char of two, first chars differ: Jaro ≤ (1/2 + 1/4 + 1)/3.
        let far = Ident::new("小红啡馆").unwrap();
        assert!(q.similarity_bound(&far) <= 0.59);
        assert!(q.similarity(&far) <= q.similarity_bound(&far));
        // Identical text: the bound is 1.
        assert_eq!(q.similarity_bound(&Ident::new("咖啡").unwrap()), 1.0);
    }
}
