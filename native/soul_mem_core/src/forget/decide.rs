//! The lazy forgetting decision: what to do with a note when it is recalled (band, action),
//! and the masked view, revision prompt and merge of the answer for one text.

use super::*;
use crate::error::{Error, Result};
use crate::model::{MemoryNote, MemoryType, NodeKind, Situation};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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
