//! Forgetting: Ebbinghaus decay, deterministic monotone masking, the lazy forgetting decision,
//! semantic field alignment and the LLM-free idle sweep over links.
//!
//! The seed's design (遗忘算法): memories are never deleted by forgetting; a note's
//! *missing degree* grows along the Ebbinghaus curve, its text is progressively masked
//! (`[masked]`), and past a threshold an LLM "tries to remember" by guessing the masked words.
//! This module is pure: the LLM call is done by the caller (Elixir); here are the decisions,
//! the masking, the prompts and the merge of the answer.
//!
//! Differences from the seed, on purpose:
//! - the mask shuffle is keyed by the text alone (the seed mixed in the degree), so the words
//!   masked at a higher degree are a superset of those masked at a lower one: forgetting only
//!   ever progresses, it never "remembers" a word it had lost;
//! - links are pruned by the idle [`sweep`] (the seed only had the intensity function);
//! - core notes (the self node) never forget.

use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::{
    ConceptType, MemoryId, MemoryLink, MemoryNote, MemoryType, NodeKind, SemMemory, Situation,
};
use crate::rng::SplitMix64;
use crate::store::ForgetState;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// What replaces each forgotten word (the seed's `MASK_WORD`, spaces included).
pub const MASK_WORD: &str = " [masked] ";

/// The marker inside [`MASK_WORD`], for detecting masked text.
pub const MASK_MARKER: &str = "[masked]";

/// Which clock the decay runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DecayClock {
    /// Hours since the note was created (the seed).
    #[default]
    SinceCreation,
    /// Hours since the note was last recalled (each recall restarts the curve).
    SinceLastAccess,
}

/// Forgetting parameters. Defaults are the seed's constants.
///
/// Unknown fields are rejected so a typo in a config file is an error, not a silent default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForgetConfig {
    /// Half-life of a never-recalled memory, in hours (R = 0.5 there). Default 24.
    pub base_half_life_hours: f64,
    /// Each recall lengthens the half-life by this fraction. Default 0.1.
    pub active_factor: f64,
    /// Recalls beyond this count do not slow forgetting further. Default 50.
    pub max_activation_cap: u32,
    /// Below this missing degree nothing happens (the seed's `MASK_THRESHOLD`). Default 0.05.
    pub mask_threshold: f64,
    /// From this missing degree on, an LLM revision is wanted (`REVISE_THRESHOLD`). Default 0.15.
    pub revise_threshold: f64,
    /// Below this missing degree the aliases of a semantic note may not grow during alignment
    /// (`ALIGN_LENGTH_CAP_THRESHOLD`). Default 0.6.
    pub alias_growth_threshold: f64,
    /// The sweep removes links whose decayed intensity is below this. Default 0.05.
    pub prune_threshold: f64,
    /// Notes left without links whose missing degree reaches this are archive candidates.
    /// Default 0.95.
    pub archive_threshold: f64,
    /// Decay clock. Default: since creation (the seed).
    pub clock: DecayClock,
}

impl Default for ForgetConfig {
    fn default() -> Self {
        ForgetConfig {
            base_half_life_hours: 24.0,
            active_factor: 0.1,
            max_activation_cap: 50,
            mask_threshold: 0.05,
            revise_threshold: 0.15,
            alias_growth_threshold: 0.6,
            prune_threshold: 0.05,
            archive_threshold: 0.95,
            clock: DecayClock::SinceCreation,
        }
    }
}

impl ForgetConfig {
    /// Checks every parameter: positive finite half-life, finite non-negative active factor,
    /// thresholds in [0, 1] with `mask_threshold <= revise_threshold`, finite non-negative
    /// prune threshold. The other functions of this module assume a validated config.
    pub fn validate(&self) -> Result<()> {
        if !(self.base_half_life_hours.is_finite() && self.base_half_life_hours > 0.0) {
            return Err(Error::invalid_argument(
                "base_half_life_hours",
                format!(
                    "must be a positive finite number, got {}",
                    self.base_half_life_hours
                ),
            ));
        }
        if !(self.active_factor.is_finite() && self.active_factor >= 0.0) {
            return Err(Error::invalid_argument(
                "active_factor",
                format!("must be a finite number >= 0, got {}", self.active_factor),
            ));
        }
        for (name, v) in [
            ("mask_threshold", self.mask_threshold),
            ("revise_threshold", self.revise_threshold),
            ("alias_growth_threshold", self.alias_growth_threshold),
            ("archive_threshold", self.archive_threshold),
        ] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(Error::invalid_argument(
                    name,
                    format!("must be in [0, 1], got {v}"),
                ));
            }
        }
        if self.mask_threshold > self.revise_threshold {
            return Err(Error::invalid_argument(
                "mask_threshold",
                format!(
                    "must not exceed revise_threshold ({} > {})",
                    self.mask_threshold, self.revise_threshold
                ),
            ));
        }
        if !(self.prune_threshold.is_finite() && self.prune_threshold >= 0.0) {
            return Err(Error::invalid_argument(
                "prune_threshold",
                format!("must be a finite number >= 0, got {}", self.prune_threshold),
            ));
        }
        Ok(())
    }

    /// Parses a JSON config (unknown fields rejected) and validates it.
    pub fn from_json(json: &str) -> Result<Self> {
        let cfg: ForgetConfig =
            serde_json::from_str(json).map_err(|e| Error::InvalidJson(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The half-life in hours after `retrieval_count` recalls:
    /// `base × (1 + active_factor × min(count, cap))`.
    pub fn adjusted_half_life(&self, retrieval_count: u32) -> f64 {
        let n = f64::from(retrieval_count.min(self.max_activation_cap));
        self.base_half_life_hours * (1.0 + self.active_factor * n)
    }
}

// ---------------------------------------------------------------------------------------------
// Decay
// ---------------------------------------------------------------------------------------------

/// Retention `R(t) = e^(−t/τ)` with `τ = adjusted_half_life / ln 2`, `t` in hours.
/// `t <= 0` (or NaN) gives 1: a memory is whole when formed, and a clock skew must not make it
/// "more than remembered".
pub fn retention(elapsed_hours: f64, retrieval_count: u32, cfg: &ForgetConfig) -> f64 {
    // NaN is not greater than 0 either, so it also gets full retention.
    if elapsed_hours.is_nan() || elapsed_hours <= 0.0 {
        return 1.0;
    }
    let tau = cfg.adjusted_half_life(retrieval_count) / std::f64::consts::LN_2;
    (-elapsed_hours / tau).exp()
}

/// `1 − R(t)`: 0 = fully remembered, → 1 = nearly all forgotten.
pub fn missing_degree_at(elapsed_hours: f64, retrieval_count: u32, cfg: &ForgetConfig) -> f64 {
    1.0 - retention(elapsed_hours, retrieval_count, cfg)
}

/// The seed's `edge_decay_intensity`: a link fades with its source note.
pub fn edge_decay_intensity(intensity: f64, source_retention: f64) -> f64 {
    intensity * source_retention
}

/// Hours elapsed on the configured clock (creation or last access) up to `now`.
pub fn elapsed_hours(note: &MemoryNote, now: DateTime<Utc>, cfg: &ForgetConfig) -> f64 {
    let start = match cfg.clock {
        DecayClock::SinceCreation => note.create_time,
        DecayClock::SinceLastAccess => note.last_accessed_time.max(note.create_time),
    };
    // Milliseconds keep sub-second precision irrelevant and cannot overflow for real dates.
    (now - start).num_milliseconds() as f64 / 3_600_000.0
}

/// True for the kinds that forget (SpecificSituation and Semantic), excluding core notes.
/// Procedures (habits) and abstract situations (patterns) do not fade, as in the seed; core
/// notes (the self) are always resident and whole.
pub fn forgettable(note: &MemoryNote) -> bool {
    !note.core
        && matches!(
            note.kind(),
            NodeKind::SpecificSituation | NodeKind::Semantic
        )
}

/// Retention factor of `note` at `now`, for retrieval to multiply link intensities and scores
/// by at query time. 1 for notes that do not forget (see [`forgettable`]).
pub fn decay_factor(note: &MemoryNote, now: DateTime<Utc>, cfg: &ForgetConfig) -> f64 {
    if !forgettable(note) {
        return 1.0;
    }
    retention(elapsed_hours(note, now, cfg), note.retrieval_count, cfg)
}

/// Missing degree of `note` at `now` (`1 − decay_factor`); 0 for notes that do not forget.
pub fn missing_degree(note: &MemoryNote, now: DateTime<Utc>, cfg: &ForgetConfig) -> f64 {
    1.0 - decay_factor(note, now, cfg)
}

/// The decayed intensity of `link` whose source is `source` (`intensity × R(source)`).
/// The stored intensity stays the undecayed base; this is the value to use at query time.
pub fn decayed_intensity(
    link: &MemoryLink,
    source: &MemoryNote,
    now: DateTime<Utc>,
    cfg: &ForgetConfig,
) -> f64 {
    edge_decay_intensity(link.intensity, decay_factor(source, now, cfg))
}

// ---------------------------------------------------------------------------------------------
// Masking
// ---------------------------------------------------------------------------------------------

/// A masked text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MaskResult {
    /// The text with the chosen words replaced by [`MASK_WORD`].
    pub text: String,
    /// Indices (into the maskable-token list, ascending) of the masked tokens.
    pub masked_indices: Vec<usize>,
    /// Number of maskable tokens (`total` of `n = round(md × total)`).
    pub total: usize,
}

impl MaskResult {
    /// Number of masked tokens.
    pub fn masked(&self) -> usize {
        self.masked_indices.len()
    }
}

/// FNV-1a, 64 bit: a stable hash (unlike `DefaultHasher`, fixed across Rust versions), so the
/// same text masks the same words on every machine and release.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Punctuation carries no memory: masking "，" would spend the forgetting budget on nothing.
fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation()
        || ('\u{2000}'..='\u{206F}').contains(&c) // general punctuation
        || ('\u{3000}'..='\u{303F}').contains(&c) // CJK symbols and punctuation
        || ('\u{FF01}'..='\u{FF0F}').contains(&c)
        || ('\u{FF1A}'..='\u{FF20}').contains(&c)
        || ('\u{FF3B}'..='\u{FF40}').contains(&c)
        || ('\u{FF5B}'..='\u{FF65}').contains(&c)
}

/// A token can be masked when it is not whitespace and not only punctuation (words, numbers,
/// names, emoji).
fn maskable(token: &str) -> bool {
    token.chars().any(|c| !c.is_whitespace() && !is_punct(c))
}

/// Maskable tokens of `text` with their byte ranges, in order.
fn maskable_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut cursor = 0;
    for tok in crate::text::tokens(text) {
        // jieba yields the text's pieces in order; only whitespace is skipped between them, so
        // the next occurrence from the cursor is this token.
        let Some(off) = text.get(cursor..).and_then(|rest| rest.find(tok)) else {
            continue;
        };
        let start = cursor + off;
        let end = start + tok.len();
        cursor = end;
        if maskable(tok) {
            spans.push((start, end));
        }
    }
    spans
}

/// The forgetting order of `count` tokens of `text`: a permutation of `0..count` keyed only by
/// the text, so every degree masks a prefix of the same order (monotone forgetting).
fn forgetting_order(text: &str, count: usize) -> Vec<usize> {
    let seed = fnv1a(text.as_bytes());
    let mut order: Vec<usize> = (0..count).collect();
    // Sort by a hash of (text, index) — the first SplitMix64 output seeded with both, a
    // well-mixed key: a deterministic shuffle; ties (astronomically rare) fall back to the
    // index so the order is total.
    order.sort_by_key(|&i| {
        let key = SplitMix64::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9)).next_u64();
        (key, i)
    });
    order
}

/// Number of tokens to mask: `round(md × total)` (at most `total`).
pub fn mask_count(missing_degree: f64, total: usize) -> usize {
    ((missing_degree * total as f64).round() as usize).min(total)
}

/// Masks `text` to `missing_degree`: jieba segments it (HMM on), `n = round(md × total)` of its
/// maskable tokens (not whitespace, not pure punctuation) become [`MASK_WORD`].
///
/// Deterministic: same text and degree, same output. Monotone: the masked positions at a
/// higher degree include those at a lower one. Errors when `missing_degree` is not a finite
/// number in [0, 1].
///
/// Complexity: O(chars + t log t) for `t` tokens.
pub fn mask_text(text: &str, missing_degree: f64) -> Result<MaskResult> {
    if !(missing_degree.is_finite() && (0.0..=1.0).contains(&missing_degree)) {
        return Err(Error::invalid_argument(
            "missing_degree",
            format!("must be a finite number in [0, 1], got {missing_degree}"),
        ));
    }
    let spans = maskable_spans(text);
    let total = spans.len();
    let n = mask_count(missing_degree, total);
    let mut masked_indices: Vec<usize> =
        forgetting_order(text, total).into_iter().take(n).collect();
    masked_indices.sort_unstable();
    let mut out = String::with_capacity(text.len() + n * MASK_WORD.len());
    let mut cursor = 0;
    for &i in &masked_indices {
        let (s, e) = spans[i];
        out.push_str(&text[cursor..s]);
        out.push_str(MASK_WORD);
        cursor = e;
    }
    out.push_str(&text[cursor..]);
    Ok(MaskResult {
        text: out,
        masked_indices,
        total,
    })
}

// ---------------------------------------------------------------------------------------------
// Lazy forgetting decision
// ---------------------------------------------------------------------------------------------

/// What forgetting does to a note now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ForgetAction {
    /// Nothing (barely forgotten, or a kind that does not forget).
    NoAction,
    /// Mask the text; no LLM.
    MaskOnly,
    /// Mask, then let an LLM guess the gaps (falls back to `MaskOnly` when it fails).
    Revised,
}

impl ForgetAction {
    /// The seed's name ("NoAction" | "MaskOnly" | "Revised").
    pub fn as_str(self) -> &'static str {
        match self {
            ForgetAction::NoAction => "NoAction",
            ForgetAction::MaskOnly => "MaskOnly",
            ForgetAction::Revised => "Revised",
        }
    }

    /// Parses the seed's name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "NoAction" => Ok(ForgetAction::NoAction),
            "MaskOnly" => Ok(ForgetAction::MaskOnly),
            "Revised" => Ok(ForgetAction::Revised),
            other => Err(Error::invalid_argument(
                "action",
                format!("expected NoAction, MaskOnly or Revised, got {other:?}"),
            )),
        }
    }
}

/// The lazy forgetting decision for one note.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ForgetDecision {
    /// What to do.
    pub action: ForgetAction,
    /// The missing degree (0 for kinds that do not forget).
    pub missing_degree: f64,
    /// `floor(md × 10)` in 0..=10: a cached revision stays valid while the band is unchanged,
    /// so the LLM is asked again only when forgetting has visibly progressed.
    pub band: u8,
}

/// The band of a missing degree (`floor(md × 10)`, clamped to 0..=10).
pub fn band_of(missing_degree: f64) -> u8 {
    if !missing_degree.is_finite() || missing_degree <= 0.0 {
        return 0;
    }
    (missing_degree * 10.0).floor().min(10.0) as u8
}

/// The seed's three-way branch on a missing degree.
pub fn action_for(missing_degree: f64, cfg: &ForgetConfig) -> ForgetAction {
    if missing_degree < cfg.mask_threshold {
        ForgetAction::NoAction
    } else if missing_degree < cfg.revise_threshold {
        ForgetAction::MaskOnly
    } else {
        ForgetAction::Revised
    }
}

/// The decision for a note of `kind` after `elapsed_hours` with `retrieval_count` recalls
/// (the hour-based core of [`decide`], for evaluation without timestamps).
pub fn decide_at(
    kind: NodeKind,
    elapsed_hours: f64,
    retrieval_count: u32,
    cfg: &ForgetConfig,
) -> ForgetDecision {
    if !matches!(kind, NodeKind::SpecificSituation | NodeKind::Semantic) {
        return ForgetDecision {
            action: ForgetAction::NoAction,
            missing_degree: 0.0,
            band: 0,
        };
    }
    let md = missing_degree_at(elapsed_hours, retrieval_count, cfg);
    ForgetDecision {
        action: action_for(md, cfg),
        missing_degree: md,
        band: band_of(md),
    }
}

/// The lazy forgetting decision for `note` at `now`: only SpecificSituation and Semantic notes
/// (not core) forget; `md < mask_threshold` → NoAction, `< revise_threshold` → MaskOnly,
/// otherwise Revised.
pub fn decide(note: &MemoryNote, now: DateTime<Utc>, cfg: &ForgetConfig) -> ForgetDecision {
    if !forgettable(note) {
        return decide_at(NodeKind::Procedure, 0.0, 0, cfg);
    }
    decide_at(
        note.kind(),
        elapsed_hours(note, now, cfg),
        note.retrieval_count,
        cfg,
    )
}

/// Which field of a note forgetting works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ForgetField {
    /// `SpecificSituation.narrative`.
    Narrative,
    /// `SemMemory.content`.
    Content,
}

/// The text forgetting masks and revises, as in the seed's `get_summary`: a specific
/// situation's narrative, a semantic note's content. `None` for kinds that do not forget.
///
/// A semantic note's description, aliases and concept type are revised through
/// [`align_sem_fields`] instead.
pub fn summary(note: &MemoryNote) -> Option<(ForgetField, &str)> {
    match &note.mem_type {
        MemoryType::Situation(Situation::SpecificSituation(s)) => {
            Some((ForgetField::Narrative, s.narrative.as_str()))
        }
        MemoryType::Semantic(s) => Some((ForgetField::Content, s.content.as_str())),
        _ => None,
    }
}

/// What the character sees of a partly forgotten note.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedNote {
    /// The masked field (`None` when the note's kind does not forget).
    pub field: Option<ForgetField>,
    /// The mask applied to that field.
    pub mask: MaskResult,
    /// The missing degree used.
    pub missing_degree: f64,
    /// The note with the masked text in place of the original (a copy; the original is intact).
    pub view: MemoryNote,
}

fn with_summary(note: &MemoryNote, text: String) -> MemoryNote {
    let mut view = note.clone();
    match &mut view.mem_type {
        MemoryType::Situation(Situation::SpecificSituation(s)) => s.narrative = text,
        MemoryType::Semantic(s) => s.content = text,
        _ => {}
    }
    view
}

/// Masks the forgetting field of `note` (see [`summary`]) to `missing_degree`. Notes that do
/// not forget come back unchanged with an empty mask. Errors when `missing_degree` is not a
/// finite number in [0, 1].
pub fn masked_view(note: &MemoryNote, missing_degree: f64) -> Result<MaskedNote> {
    let Some((field, text)) = summary(note).filter(|_| forgettable(note)) else {
        // Validate the degree anyway so callers get the same error for every kind.
        mask_text("", missing_degree)?;
        return Ok(MaskedNote {
            field: None,
            mask: MaskResult {
                text: String::new(),
                masked_indices: Vec::new(),
                total: 0,
            },
            missing_degree,
            view: note.clone(),
        });
    };
    let mask = mask_text(text, missing_degree)?;
    let view = with_summary(note, mask.text.clone());
    Ok(MaskedNote {
        field: Some(field),
        mask,
        missing_degree,
        view,
    })
}

/// The revision prompt: `(system, user)`. The system message asks the model to restore a
/// partly forgotten memory in the character's own voice, guessing plausibly where it must; the
/// user message is the masked text itself.
pub fn revision_prompt(masked_text: &str, character_name: &str) -> (String, String) {
    let system = format!(
        "You are the memory of {character_name}, a helper that reconstructs partially masked \
         memories: some words of the memory below were forgotten and replaced by [masked]. Rewrite the \
         memory as {character_name} now recalls it, in {character_name}'s own voice and in the \
         language of the memory. Keep every word that is not masked. Fill each [masked] with \
         your best guess; a guess may be wrong or vague, the way people misremember, but do not \
         add events that the remaining words do not suggest. Reply with the recalled memory \
         only, with no [masked] left and no explanation."
    );
    (system, masked_text.to_owned())
}

/// The note as the character sees it after a revision: `revised_text` replaces the forgetting
/// field (narrative or content). Returns a copy; the caller keeps the original. Notes that do
/// not forget are returned unchanged. Errors on an empty revision (a failed LLM call must fall
/// back to the mask, not blank the memory).
pub fn apply_revision(note: &MemoryNote, revised_text: &str) -> Result<MemoryNote> {
    let revised = revised_text.trim();
    if revised.is_empty() {
        return Err(Error::invalid_argument(
            "revised_text",
            "is empty; fall back to the masked view",
        ));
    }
    if !forgettable(note) {
        return Ok(note.clone());
    }
    Ok(with_summary(note, revised.to_owned()))
}

/// The outcome of [`lazy_forget_text`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForgetOutcome {
    /// The decision (its action is downgraded to MaskOnly when the reviser fails).
    pub decision: ForgetDecision,
    /// The masked text (`None` for NoAction).
    pub masked: Option<String>,
    /// The revised text (`Some` only for Revised).
    pub revised: Option<String>,
}

/// The seed's `lazy_forget` on plain text, with the LLM as a closure: decide, mask, and for
/// Revised ask `reviser(masked_text)`; a `None` or empty answer downgrades to MaskOnly.
/// Errors only on an invalid degree (impossible with a validated config).
pub fn lazy_forget_text(
    kind: NodeKind,
    text: &str,
    elapsed_hours: f64,
    retrieval_count: u32,
    cfg: &ForgetConfig,
    reviser: impl FnOnce(&str) -> Option<String>,
) -> Result<ForgetOutcome> {
    let mut decision = decide_at(kind, elapsed_hours, retrieval_count, cfg);
    if decision.action == ForgetAction::NoAction {
        return Ok(ForgetOutcome {
            decision,
            masked: None,
            revised: None,
        });
    }
    let masked = mask_text(text, decision.missing_degree.clamp(0.0, 1.0))?.text;
    let mut revised = None;
    if decision.action == ForgetAction::Revised {
        revised = reviser(&masked)
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty());
        if revised.is_none() {
            decision.action = ForgetAction::MaskOnly;
        }
    }
    Ok(ForgetOutcome {
        decision,
        masked: Some(masked),
        revised,
    })
}

// ---------------------------------------------------------------------------------------------
// Semantic field alignment
// ---------------------------------------------------------------------------------------------

/// Lower-cased letters only: "Concept Type", "concept_type", "**ConceptType**" → "concepttype".
fn key_of(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphabetic())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Splits `line` at its first ASCII or full-width colon.
fn split_colon(line: &str) -> Option<(&str, &str)> {
    let i = line.find([':', '：'])?;
    let colon_len = line[i..].chars().next().map_or(1, char::len_utf8);
    Some((&line[..i], &line[i + colon_len..]))
}

/// Words an LLM uses to say "no change" or "nothing": such values keep the old field.
fn is_placeholder(v: &str) -> bool {
    let k: String = v
        .chars()
        .filter(|c| !c.is_whitespace() && !is_punct(*c))
        .flat_map(char::to_lowercase)
        .collect();
    matches!(
        k.as_str(),
        "" | "none"
            | "null"
            | "na"
            | "n"
            | "unchanged"
            | "same"
            | "nochange"
            | "无"
            | "无变化"
            | "不变"
            | "同上"
            | "未知"
            | "unknown"
    )
}

/// Text compared without whitespace, punctuation and case: equal means the meaning is unchanged.
fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && !is_punct(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

fn trim_value(v: &str) -> &str {
    v.trim()
        .trim_matches(|c: char| c == '*' || c == '`' || c == '"' || c == '“' || c == '”')
        .trim()
}

fn parse_aliases(v: &str) -> Vec<String> {
    let v = v.trim().trim_start_matches('[').trim_end_matches(']');
    let mut seen = HashSet::new();
    v.split([',', '，', '、', ';', '；', '|', '/'])
        .map(|a| {
            a.trim()
                .trim_matches(|c: char| c == '"' || c == '\'' || c == '“' || c == '”')
                .trim()
        })
        .filter(|a| !a.is_empty() && !is_placeholder(a) && !a.contains(MASK_MARKER))
        .filter(|a| seen.insert(norm(a)))
        .map(str::to_owned)
        .collect()
}

fn parse_concept_type(v: &str) -> Option<ConceptType> {
    let k = v.to_lowercase();
    let entity = k.contains("entity") || k.contains("实体");
    let abstract_ = k.contains("abstract") || k.contains("抽象");
    match (entity, abstract_) {
        (true, false) => Some(ConceptType::Entity),
        (false, true) => Some(ConceptType::Abstract),
        // Both or neither: ambiguous, keep the old type.
        _ => None,
    }
}

/// Merges an LLM's `Aliases:` / `Description:` / `ConceptType:` answer into a semantic memory.
///
/// Tolerant parsing: keys in any case, with spaces or underscores, markdown bullets or bold,
/// ASCII or full-width colons, other lines ignored; the first occurrence of a key wins.
/// Rules (the seed's, plus guards):
/// - a value equal to the old one up to case, spaces and punctuation keeps the old value, as
///   does a placeholder ("unchanged", "none", "无", …) or a value still containing `[masked]`;
/// - aliases are split on `, ， 、 ; ； | /`, de-duplicated; while `missing_degree` is below
///   0.6 (the seed's `ALIGN_LENGTH_CAP_THRESHOLD`, see [`align_sem_fields_with`] to change
///   it) a longer alias list is rejected and the old kept — a barely-forgotten memory cannot
///   gain knowledge;
/// - a description is written back only when non-empty;
/// - a concept type is written back only when it parses unambiguously (Entity/Abstract, 实体/抽象).
///
/// The content is never changed here (it is the concept's identity; see [`apply_revision`]).
pub fn align_sem_fields(old: &SemMemory, llm_output: &str, missing_degree: f64) -> SemMemory {
    align_sem_fields_with(
        old,
        llm_output,
        missing_degree,
        ForgetConfig::default().alias_growth_threshold,
    )
}

/// [`align_sem_fields`] with an explicit alias-growth threshold (e.g. from [`ForgetConfig`]).
pub fn align_sem_fields_with(
    old: &SemMemory,
    llm_output: &str,
    missing_degree: f64,
    alias_growth_threshold: f64,
) -> SemMemory {
    let mut aliases = None;
    let mut description = None;
    let mut concept = None;
    for line in llm_output.lines() {
        let Some((k, v)) = split_colon(line) else {
            continue;
        };
        match key_of(k).as_str() {
            "aliases" | "alias" if aliases.is_none() => aliases = Some(v),
            "description" if description.is_none() => description = Some(v),
            "concepttype" | "type" if concept.is_none() => concept = Some(v),
            _ => {}
        }
    }
    let mut out = old.clone();

    if let Some(v) = aliases.filter(|v| !is_placeholder(v)) {
        let new = parse_aliases(v);
        let old_norm: Vec<String> = old.aliases.iter().map(|a| norm(a)).collect();
        let new_norm: Vec<String> = new.iter().map(|a| norm(a)).collect();
        let unchanged = {
            let mut a = old_norm.clone();
            let mut b = new_norm.clone();
            a.sort();
            b.sort();
            a == b
        };
        // NaN degree counts as "low": the conservative side of the guard.
        let low = missing_degree.is_nan() || missing_degree < alias_growth_threshold;
        let grows = new.len() > old.aliases.len();
        let rejected = low && grows;
        if !new.is_empty() && !unchanged && !rejected {
            out.aliases = new;
        }
    }

    if let Some(v) = description.map(trim_value) {
        if !v.is_empty()
            && !is_placeholder(v)
            && !v.contains(MASK_MARKER)
            && norm(v) != norm(&old.description)
        {
            out.description = v.to_owned();
        }
    }

    if let Some(ct) = concept.and_then(parse_concept_type) {
        out.concept_type = ct;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Idle sweep
// ---------------------------------------------------------------------------------------------

/// One link removed by the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrunedLink {
    /// Source note.
    pub from: MemoryId,
    /// Target note.
    pub to: MemoryId,
    /// The link's id.
    pub link_id: crate::model::LinkId,
    /// Its stored (undecayed) intensity.
    pub intensity: f64,
    /// Its decayed intensity at sweep time.
    pub decayed_intensity: f64,
}

/// What an idle sweep found and did.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct SweepReport {
    /// Notes examined.
    pub notes: usize,
    /// Notes per decided action: `[NoAction, MaskOnly, Revised]`.
    pub actions: [usize; 3],
    /// Mean missing degree over forgettable notes (0 when there are none).
    pub mean_missing_degree: f64,
    /// Links removed from the graph.
    pub pruned: Vec<PrunedLink>,
    /// Forgettable notes left with no link in or out and `md >= archive_threshold`, in graph
    /// order. Never deleted here: the caller archives them.
    pub archive: Vec<MemoryId>,
    /// Forgetting states written or changed ([`crate::engine::Engine::forget_sweep`]; 0 from
    /// [`sweep`] alone).
    pub states_updated: usize,
}

/// The idle sweep, with no LLM: computes every note's decay, removes links whose decayed
/// intensity (`intensity × R(source)`) is below `prune_threshold`, and lists archive
/// candidates (see [`SweepReport::archive`]).
///
/// Stored intensities are not rewritten: they are the undecayed base that LTP raises;
/// retrieval multiplies by [`decay_factor`] at query time, so the sweep is idempotent at a
/// given `now` and a later recall (which slows decay) is not fighting an already-lowered value.
///
/// Complexity: O(nodes + links).
pub fn sweep(graph: &mut MemoryGraph, now: DateTime<Utc>, cfg: &ForgetConfig) -> SweepReport {
    let mut report = SweepReport {
        notes: graph.len(),
        ..SweepReport::default()
    };
    let mut md_sum = 0.0;
    let mut md_n = 0usize;
    let mut to_prune = Vec::new();
    let mut degree_md = Vec::with_capacity(graph.len());
    for note in graph.notes() {
        let d = decide(note, now, cfg);
        report.actions[d.action as usize] += 1;
        if forgettable(note) {
            md_sum += d.missing_degree;
            md_n += 1;
        }
        degree_md.push((note.id, forgettable(note), d.missing_degree));
        let r = decay_factor(note, now, cfg);
        for link in &note.links {
            let decayed = edge_decay_intensity(link.intensity, r);
            if decayed < cfg.prune_threshold {
                to_prune.push(PrunedLink {
                    from: link.from,
                    to: link.to,
                    link_id: link.id,
                    intensity: link.intensity,
                    decayed_intensity: decayed,
                });
            }
        }
    }
    for p in &to_prune {
        graph.remove_link(&p.from, &p.link_id);
    }
    report.pruned = to_prune;
    report.mean_missing_degree = if md_n == 0 { 0.0 } else { md_sum / md_n as f64 };

    // Degree after pruning: a note is isolated when no attached link starts or ends at it.
    let mut linked: HashSet<MemoryId> = HashSet::new();
    for note in graph.notes() {
        for l in &note.links {
            linked.insert(l.from);
            linked.insert(l.to);
        }
    }
    for l in graph.pending_links() {
        linked.insert(l.from);
    }
    report.archive = degree_md
        .into_iter()
        .filter(|(id, f, md)| *f && *md >= cfg.archive_threshold && !linked.contains(id))
        .map(|(id, _, _)| id)
        .collect();
    report
}

// ---------------------------------------------------------------------------------------------
// Recall: what the character sees, revision prompts and answers
// ---------------------------------------------------------------------------------------------

/// The name the character calls itself, for the revision prompt: the content of the self node
/// (`sem_self`), else of the first core semantic note, else the graph's character id.
pub fn character_name(graph: &MemoryGraph) -> String {
    let name_of = |n: &MemoryNote| match &n.mem_type {
        MemoryType::Semantic(s) if !s.content.trim().is_empty() => {
            Some(s.content.trim().to_owned())
        }
        _ => None,
    };
    graph
        .get_by_readable(crate::import::SELF_NODE_ID)
        .and_then(name_of)
        .or_else(|| graph.notes().filter(|n| n.core).find_map(name_of))
        .unwrap_or_else(|| graph.character().to_owned())
}

/// What the character sees of `note` at `missing_degree` before any revision.
///
/// A specific situation shows its masked narrative. A semantic note shows
/// `masked content：masked description` — the description is masked at the same degree (with
/// its own, equally monotone, forgetting order) because it would otherwise spell out the
/// concept whose name was forgotten. Notes that do not forget show their display text.
/// Errors when `missing_degree` is not a finite number in [0, 1].
pub fn masked_display(note: &MemoryNote, missing_degree: f64) -> Result<String> {
    let view = masked_view(note, missing_degree)?;
    match &view.view.mem_type {
        MemoryType::Semantic(s) if forgettable(note) && !s.description.is_empty() => Ok(format!(
            "{}：{}",
            s.content,
            mask_text(&s.description, missing_degree)?.text
        )),
        _ => Ok(view.view.display_text()),
    }
}

/// The chat messages `(system, user)` that ask an LLM to revise `note` at `missing_degree` in
/// the voice of `character_name`; `None` for notes that do not forget.
///
/// A specific situation gets [`revision_prompt`] on its masked narrative. A semantic note gets
/// the same system prompt plus the field-alignment instructions (the seed's
/// `align_sem_fields`, done in the same call to save a round trip): the user message holds the
/// masked content and the masked aliases and description, and the answer is the recalled
/// name/fact followed by `Aliases:` / `Description:` / `ConceptType:` lines, which
/// [`revise_note`] merges. Errors when `missing_degree` is not a finite number in [0, 1].
pub fn revision_prompt_for(
    note: &MemoryNote,
    missing_degree: f64,
    character_name: &str,
) -> Result<Option<(String, String)>> {
    if !forgettable(note) {
        mask_text("", missing_degree)?;
        return Ok(None);
    }
    match &note.mem_type {
        MemoryType::Semantic(s) => {
            let (system, content) =
                revision_prompt(&mask_text(&s.content, missing_degree)?.text, character_name);
            let system = format!(
                "{system} This memory is a concept {character_name} knows. First write the \
                 recalled concept on one line. Then write exactly these three lines:\n\
                 Aliases: other names of the concept, separated by commas\n\
                 Description: what {character_name} now remembers about it, one or two \
                 sentences\n\
                 ConceptType: Entity or Abstract\n\
                 Where the meaning of a field is unchanged, repeat it as it is."
            );
            let user = format!(
                "{content}\nAliases: {}\nDescription: {}\nConceptType: {}",
                mask_text(&s.aliases.join("、"), missing_degree)?.text,
                mask_text(&s.description, missing_degree)?.text,
                match s.concept_type {
                    ConceptType::Entity => "Entity",
                    ConceptType::Abstract => "Abstract",
                }
            );
            Ok(Some((system, user)))
        }
        _ => {
            let masked = masked_view(note, missing_degree)?;
            Ok(Some(revision_prompt(&masked.mask.text, character_name)))
        }
    }
}

/// True when `line` starts a field of the alignment answer (`Aliases:`, `Description:`,
/// `ConceptType:`, in the tolerant spelling of [`align_sem_fields`]).
fn is_field_line(line: &str) -> bool {
    split_colon(line).is_some_and(|(k, _)| {
        matches!(
            key_of(k).as_str(),
            "aliases" | "alias" | "description" | "concepttype" | "type"
        )
    })
}

/// Splits a semantic revision answer into the recalled concept (the lines before the first
/// field line, joined, with a leading `Content:`/`Concept:` label dropped) and the field
/// lines.
pub fn split_semantic_answer(answer: &str) -> (String, String) {
    let mut head = Vec::new();
    let mut fields = Vec::new();
    for line in answer.lines() {
        if !fields.is_empty() || is_field_line(line) {
            fields.push(line);
        } else {
            let line = match split_colon(line) {
                Some((k, v)) if matches!(key_of(k).as_str(), "content" | "concept" | "memory") => v,
                _ => line,
            };
            let line = trim_value(line);
            if !line.is_empty() {
                head.push(line);
            }
        }
    }
    (head.join(" "), fields.join("\n"))
}

/// An LLM revision merged into a note (see [`revise_note`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    /// The revised forgetting field (narrative or content): what is cached for the band.
    pub revised_text: String,
    /// For a semantic note, its fields after alignment (content unchanged).
    pub aligned: Option<SemMemory>,
    /// What the character sees: the revised note's display text.
    pub view: String,
}

/// Merges an LLM `answer` to [`revision_prompt_for`] into `note` at `missing_degree`: the
/// revised narrative of a specific situation, or for a semantic note the recalled content plus
/// the aligned fields ([`align_sem_fields_with`] with `cfg.alias_growth_threshold`).
///
/// Errors (the caller falls back to the mask) when the note does not forget, when the answer
/// holds no revised text, or when it is the masked text returned unchanged.
pub fn revise_note(
    note: &MemoryNote,
    answer: &str,
    missing_degree: f64,
    cfg: &ForgetConfig,
) -> Result<Revision> {
    if !forgettable(note) {
        return Err(Error::invalid_argument(
            "note",
            format!(
                "{:?} is a {} note, which does not forget",
                note.readable_id,
                note.kind().as_str()
            ),
        ));
    }
    let (revised, aligned) = match &note.mem_type {
        MemoryType::Semantic(s) => {
            let (content, fields) = split_semantic_answer(answer);
            let aligned =
                align_sem_fields_with(s, &fields, missing_degree, cfg.alias_growth_threshold);
            (content, Some(aligned))
        }
        _ => (answer.trim().to_owned(), None),
    };
    let masked = masked_view(note, missing_degree)?;
    // A reply that only echoes the gaps restored nothing: keep the mask instead.
    if revised.is_empty() || (masked.mask.masked() > 0 && revised == masked.mask.text.trim()) {
        return Err(Error::invalid_argument(
            "revised_text",
            "holds no revision; fall back to the masked view",
        ));
    }
    let mut view_note = apply_revision(note, &revised)?;
    if let (MemoryType::Semantic(v), Some(a)) = (&mut view_note.mem_type, &aligned) {
        v.aliases = a.aliases.clone();
        v.description = a.description.clone();
        v.concept_type = a.concept_type;
    }
    Ok(Revision {
        view: view_note.display_text(),
        revised_text: revised,
        aligned,
    })
}

/// A revision prompt as chat messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prompt {
    /// The system message.
    pub system: String,
    /// The user message.
    pub user: String,
}

/// What forgetting makes of one recalled note now (see [`view_note`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoteView {
    /// Readable id.
    pub id: String,
    /// UUID.
    pub uuid: String,
    /// Kind (snake_case name).
    pub kind: &'static str,
    /// Whether the note forgets at all.
    pub forgettable: bool,
    /// Missing degree now (0 for notes that do not forget).
    pub missing_degree: f64,
    /// Band of the degree (`floor(md × 10)`).
    pub band: u8,
    /// The decision: Revised means a revision is wanted (cached or not).
    pub action: ForgetAction,
    /// What the character sees now: the original display text (NoAction), the masked text
    /// (MaskOnly, or Revised without a cached revision), or the cached revision.
    pub visible_text: String,
    /// The masked display text (`None` for NoAction).
    pub masked_text: Option<String>,
    /// The original display text, for operators; never to be shown to the character.
    pub original_text: String,
    /// The revised field cached for this band, if any.
    pub cached_revision: Option<String>,
    /// True when the action is Revised and no revision is cached for this band: the caller
    /// asks an LLM with `prompt` and stores the answer.
    pub needs_revision: bool,
    /// The revision prompt when `needs_revision`.
    pub prompt: Option<Prompt>,
}

/// The forgetting view of `note` at `now`, using the cached `state` when its band is the
/// current one (a revision is reused until forgetting moves to another band).
///
/// Errors only on an impossible degree (not with a validated `cfg`).
/// Complexity: O(text) for the masks (jieba).
pub fn view_note(
    note: &MemoryNote,
    state: Option<&ForgetState>,
    now: DateTime<Utc>,
    cfg: &ForgetConfig,
    character_name: &str,
) -> Result<NoteView> {
    let d = decide(note, now, cfg);
    let md = d.missing_degree.clamp(0.0, 1.0);
    let original_text = note.display_text();
    let masked_text = match d.action {
        ForgetAction::NoAction => None,
        _ => Some(masked_display(note, md)?),
    };
    let cached = state
        .filter(|s| d.action == ForgetAction::Revised && s.band == u32::from(d.band))
        .and_then(|s| s.revised_text.clone());
    // The cached revision replaces the field; a semantic note shows it with its current
    // (already aligned) description.
    let cached_view = cached
        .as_deref()
        .map(|r| apply_revision(note, r).map(|v| v.display_text()))
        .transpose()?;
    let needs_revision = d.action == ForgetAction::Revised && cached.is_none();
    let prompt = if needs_revision {
        revision_prompt_for(note, md, character_name)?.map(|(system, user)| Prompt { system, user })
    } else {
        None
    };
    let visible_text = cached_view
        .or_else(|| masked_text.clone())
        .unwrap_or_else(|| original_text.clone());
    Ok(NoteView {
        id: note.readable_id.clone(),
        uuid: note.id.to_string(),
        kind: note.kind().as_str(),
        forgettable: forgettable(note),
        missing_degree: d.missing_degree,
        band: d.band,
        action: d.action,
        visible_text,
        masked_text,
        original_text,
        cached_revision: cached,
        needs_revision,
        prompt,
    })
}

/// The forgetting state to keep for `note` after the decision `d` at `now`: the degree and
/// band, the revision when it belongs to this band (`revision`, else the previous state's
/// when its band is unchanged), and the original text — the first one recorded, so a
/// semantic description rewritten by alignment can still be restored.
pub fn next_state(
    note: &MemoryNote,
    previous: Option<&ForgetState>,
    d: &ForgetDecision,
    revision: Option<String>,
    now: DateTime<Utc>,
) -> ForgetState {
    let band = u32::from(d.band);
    let revised_text = revision.or_else(|| {
        previous
            .filter(|p| p.band == band)
            .and_then(|p| p.revised_text.clone())
    });
    ForgetState {
        missing_degree: d.missing_degree.clamp(0.0, 1.0),
        band,
        revised_text,
        original_text: previous
            .and_then(|p| p.original_text.clone())
            .or_else(|| Some(note.display_text())),
        updated_at: now,
    }
}
