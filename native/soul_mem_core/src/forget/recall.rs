//! Recall: what the character sees of a note, the revision prompts and the handling of
//! their answers, and the next forgetting state.

use super::*;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::{ConceptType, MemoryNote, MemoryType, SemMemory};
use crate::store::ForgetState;
use chrono::{DateTime, Utc};
use serde::Serialize;

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
