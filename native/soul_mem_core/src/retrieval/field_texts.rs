//! What text of a note gets embedded: [`FieldKind`] (the field a text, and so its vector,
//! belongs to) and [`node_texts`] (every text of a note with its field). Text only: the
//! vectors made from these texts are stored in `field_vectors.rs`; the lexical index reads the
//! same texts.

use crate::model::{AbstractSituation, MemoryNote, MemoryType, Situation};

/// Which field of a note a vector encodes. Each kind has its own matrix in
/// [`NodeVectors`](super::NodeVectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldKind {
    /// A tag (all kinds). Stored once per distinct tag text.
    Tag,
    /// Semantic content and each alias (one row each).
    SemName,
    /// Semantic description.
    SemDescription,
    /// Specific-situation narrative; for abstract situations the rendered pattern
    /// ([`crate::model::abstract_text`]) as the narrative fallback.
    SitNarrative,
    /// Location name (and coordinates) of a specific situation or abstract location.
    SitLocation,
    /// Participant name (one row per participant).
    SitParticipantName,
    /// Participant role (one row per participant with a role).
    SitParticipantRole,
    /// Emotion name (one row per emotion).
    SitEmotion,
    /// Atmosphere and tone.
    SitEnvironment,
    /// Event: initiator, action, target (one row per event).
    SitEvent,
    /// Procedure action content.
    ProcAction,
}

impl FieldKind {
    /// Every kind that has a per-node matrix (all but [`FieldKind::Tag`]), in index order.
    pub const ROW_KINDS: [FieldKind; 10] = [
        FieldKind::SemName,
        FieldKind::SemDescription,
        FieldKind::SitNarrative,
        FieldKind::SitLocation,
        FieldKind::SitParticipantName,
        FieldKind::SitParticipantRole,
        FieldKind::SitEmotion,
        FieldKind::SitEnvironment,
        FieldKind::SitEvent,
        FieldKind::ProcAction,
    ];

    /// Index into [`FieldKind::ROW_KINDS`]; `None` for tags. O(1): it runs per scored row.
    #[inline]
    pub fn row_index(self) -> Option<usize> {
        Some(match self {
            FieldKind::Tag => return None,
            FieldKind::SemName => 0,
            FieldKind::SemDescription => 1,
            FieldKind::SitNarrative => 2,
            FieldKind::SitLocation => 3,
            FieldKind::SitParticipantName => 4,
            FieldKind::SitParticipantRole => 5,
            FieldKind::SitEmotion => 6,
            FieldKind::SitEnvironment => 7,
            FieldKind::SitEvent => 8,
            FieldKind::ProcAction => 9,
        })
    }
}

fn join(parts: &[&str], sep: &str) -> String {
    parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(sep)
}

/// The text of a location field ("name，coordinates").
pub(crate) fn location_text(name: &str, coordinates: &str) -> String {
    join(&[name, coordinates], "，")
}

/// The text of an environment field ("atmosphere，tone").
pub(crate) fn environment_text(atmosphere: &str, tone: &str) -> String {
    join(&[atmosphere, tone], "，")
}

/// The text of an event field ("initiator action target").
pub(crate) fn event_text(initiator: &str, action: &str, target: &str) -> String {
    join(&[initiator, action, target], " ")
}

/// Exactly the texts of `note` that must be embedded (passage side), with the field each
/// vector fills. Empty texts are left out.
///
/// Semantic: content, each alias, description (and its passages when long, see
/// [`crate::text::passages`]). Specific situation: narrative (and passages), location,
/// each participant's name and role, each emotion, environment, each event. Abstract
/// situation: its structured facet in the matching field(s) plus the rendered pattern as
/// narrative fallback. Procedure: action content. Every kind: each tag but machine tags
/// ([`crate::model::is_machine_tag`]: metadata such as a card's `decorator:depth=4`, not a topic).
pub fn node_texts(note: &MemoryNote) -> Vec<(FieldKind, String)> {
    let mut out: Vec<(FieldKind, String)> = Vec::new();
    let mut add = |k: FieldKind, t: String| {
        if !t.trim().is_empty() {
            out.push((k, t.trim().to_owned()));
        }
    };
    match &note.mem_type {
        MemoryType::Semantic(s) => {
            add(FieldKind::SemName, s.content.clone());
            for a in &s.aliases {
                add(FieldKind::SemName, a.clone());
            }
            add(FieldKind::SemDescription, s.description.clone());
            for p in crate::text::passages(&s.description) {
                add(FieldKind::SemDescription, p);
            }
        }
        MemoryType::Situation(Situation::SpecificSituation(s)) => {
            add(FieldKind::SitNarrative, s.narrative.clone());
            for p in crate::text::passages(&s.narrative) {
                add(FieldKind::SitNarrative, p);
            }
            let c = &s.context;
            if let Some(l) = &c.location {
                add(
                    FieldKind::SitLocation,
                    location_text(&l.name, &l.coordinates),
                );
            }
            for p in &c.participants {
                add(FieldKind::SitParticipantName, p.name.clone());
                add(FieldKind::SitParticipantRole, p.role.clone());
            }
            for e in &c.emotions {
                add(FieldKind::SitEmotion, e.name.clone());
            }
            add(
                FieldKind::SitEnvironment,
                environment_text(&c.environment.atmosphere, &c.environment.tone),
            );
            for e in &c.event {
                add(
                    FieldKind::SitEvent,
                    event_text(&e.initiator, &e.action, &e.target),
                );
            }
        }
        MemoryType::Situation(Situation::AbstractSituation(a)) => {
            match a {
                AbstractSituation::Location(l) => add(
                    FieldKind::SitLocation,
                    location_text(&l.name, &l.coordinates),
                ),
                AbstractSituation::Participant(p) => {
                    add(FieldKind::SitParticipantName, p.name.clone());
                    add(FieldKind::SitParticipantRole, p.role.clone());
                }
                AbstractSituation::Environment(e) => add(
                    FieldKind::SitEnvironment,
                    environment_text(&e.atmosphere, &e.tone),
                ),
                AbstractSituation::Event(e) => add(
                    FieldKind::SitEvent,
                    event_text(&e.initiator, &e.action, &e.target),
                ),
            }
            add(FieldKind::SitNarrative, crate::model::abstract_text(a));
        }
        MemoryType::Procedure(p) => add(FieldKind::ProcAction, p.action.content.clone()),
    }
    for t in note
        .tags
        .iter()
        .filter(|t| !crate::model::is_machine_tag(t))
    {
        add(FieldKind::Tag, t.clone());
    }
    out
}
