//! The memory data model: three kinds of memory (situations, semantic knowledge, procedures)
//! stored as notes with typed outgoing links.
//!
//! Serialisation follows the seed's Graph JSON exactly: externally tagged enums
//! (`{"Semantic": {...}}`, `{"Situation": {"SpecificSituation": {...}}}`), snake_case fields.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use uuid::Uuid;

/// Namespace for deterministic node and link UUIDs (UUIDv5 of character + readable id).
const SOUL_MEM_NAMESPACE: Uuid = Uuid::from_u128(0x5f1c_6a2e_9d3b_4c71_a0e8_3b6f_12d4_9c55);

/// Treats an explicit JSON `null` like a missing field: the corpus writes `"event": null`,
/// `"environment": null` and so on where the seed's types have an empty default.
pub(crate) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Hasher state of maps and sets keyed by [`MemoryId`]: foldhash (hashbrown's default),
/// seeded at random per process. Ids are UUIDs, so a fast keyed hash loses nothing; std's
/// SipHash was ~7% of a working-memory recall at 100k notes.
pub type IdHasher = foldhash::fast::RandomState;

/// A hash map keyed by [`MemoryId`] (see [`IdHasher`]).
pub type IdMap<V> = std::collections::HashMap<MemoryId, V, IdHasher>;

/// A hash set of [`MemoryId`]s (see [`IdHasher`]).
pub type IdSet = std::collections::HashSet<MemoryId, IdHasher>;

/// Identity of one memory note. A UUID newtype, cheap to copy and hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(pub Uuid);

impl MemoryId {
    /// A random (v4) id, for notes created at run time without a readable id.
    pub fn random() -> Self {
        MemoryId(Uuid::new_v4())
    }

    /// The stable id of `readable_id` within `character`: the same inputs give the same UUID on
    /// every machine, so exports, stores and reports agree.
    pub fn derive(character: &str, readable_id: &str) -> Self {
        let name = format!("{character}\u{0}{readable_id}");
        MemoryId(Uuid::new_v5(&SOUL_MEM_NAMESPACE, name.as_bytes()))
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Identity of one link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LinkId(pub Uuid);

impl LinkId {
    /// A random (v4) link id.
    pub fn random() -> Self {
        LinkId(Uuid::new_v4())
    }

    /// Deterministic id of the `ordinal`-th link from `from` to `to`.
    pub fn derive(from: MemoryId, to: MemoryId, ordinal: usize) -> Self {
        let mut name = Vec::with_capacity(40);
        name.extend_from_slice(from.0.as_bytes());
        name.extend_from_slice(to.0.as_bytes());
        name.extend_from_slice(&(ordinal as u64).to_le_bytes());
        LinkId(Uuid::new_v5(&SOUL_MEM_NAMESPACE, &name))
    }
}

impl fmt::Display for LinkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether a semantic concept is a concrete thing or an idea.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConceptType {
    /// A person, place, object.
    Entity,
    /// An idea, value, relationship.
    Abstract,
}

/// Semantic memory: something the character knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SemMemory {
    /// The concept's name or the fact itself.
    pub content: String,
    /// Other names of the concept (used for matching and de-duplication).
    #[serde(default, deserialize_with = "null_default")]
    pub aliases: Vec<String>,
    /// Entity or abstract concept.
    pub concept_type: ConceptType,
    /// Free description.
    #[serde(default)]
    pub description: String,
}

/// A place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Location {
    /// Name of the place.
    pub name: String,
    /// Where it is (free text).
    #[serde(default)]
    pub coordinates: String,
}

/// Someone taking part in a situation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Participant {
    /// Name.
    pub name: String,
    /// Role in the situation.
    #[serde(default)]
    pub role: String,
}

/// A named feeling with an intensity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Emotion {
    /// Name of the emotion.
    pub name: String,
    /// Strength, finite and non-negative.
    pub intensity: f32,
}

/// A sensory impression with an intensity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensoryData {
    /// What was sensed.
    pub name: String,
    /// Strength, finite and non-negative.
    pub intensity: f32,
}

/// Atmosphere and tone of a situation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// Atmosphere.
    #[serde(default)]
    pub atmosphere: String,
    /// Tone.
    #[serde(default)]
    pub tone: String,
}

/// Something that happened: who did what to whom, how strongly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// The action.
    pub action: String,
    /// Strength, finite and non-negative.
    #[serde(default)]
    pub action_intensity: f32,
    /// Who acted.
    #[serde(default)]
    pub initiator: String,
    /// Who or what was acted upon.
    #[serde(default)]
    pub target: String,
}

/// Structured context of a specific situation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Context {
    /// Where it happened.
    #[serde(default)]
    pub location: Option<Location>,
    /// Who took part.
    #[serde(default, deserialize_with = "null_default")]
    pub participants: Vec<Participant>,
    /// What the character felt.
    #[serde(default, deserialize_with = "null_default")]
    pub emotions: Vec<Emotion>,
    /// What the character sensed.
    #[serde(default, deserialize_with = "null_default")]
    pub sensory_data: Vec<SensoryData>,
    /// Atmosphere and tone.
    #[serde(default, deserialize_with = "null_default")]
    pub environment: Environment,
    /// Events.
    #[serde(default, deserialize_with = "null_default")]
    pub event: Vec<Event>,
}

/// A situation the character lived, at a point in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecificSituation {
    /// Natural-language account.
    pub narrative: String,
    /// When it happened (a point in time; `null` when unknown).
    #[serde(default)]
    pub time_span: Option<DateTime<Utc>>,
    /// Structured context.
    #[serde(default)]
    pub context: Context,
}

/// A pattern abstracted from specific situations: one structured facet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AbstractSituation {
    /// A kind of place.
    Location(Location),
    /// A kind of person.
    Participant(Participant),
    /// A kind of atmosphere.
    Environment(Environment),
    /// A kind of event.
    Event(Event),
}

/// Specific or abstract situation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Situation {
    /// A pattern.
    AbstractSituation(AbstractSituation),
    /// A lived episode.
    SpecificSituation(SpecificSituation),
}

/// Placeholder payload of a skill action (empty in the seed format: `{"Skill": {}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SkillRecord {}

/// How an action is carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActionType {
    /// Says something.
    Speak,
    /// Uses a skill.
    Skill(SkillRecord),
    /// Thinks something.
    Think,
}

/// An action of a procedure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// What the character does.
    pub content: String,
    /// How.
    pub action_type: ActionType,
}

/// Procedural memory: a habit; its triggers are incoming `TrigToAction` links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcMemory {
    /// The action.
    pub action: Action,
}

/// The three kinds of memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MemoryType {
    /// Knowledge.
    Semantic(SemMemory),
    /// Lived situation or situation pattern.
    Situation(Situation),
    /// Habit.
    Procedure(ProcMemory),
}

/// The four node kinds that algorithms distinguish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    /// [`MemoryType::Semantic`].
    Semantic,
    /// [`Situation::SpecificSituation`].
    SpecificSituation,
    /// [`Situation::AbstractSituation`].
    AbstractSituation,
    /// [`MemoryType::Procedure`].
    Procedure,
}

impl NodeKind {
    /// snake_case name (used in stats and reports).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Semantic => "semantic",
            NodeKind::SpecificSituation => "specific_situation",
            NodeKind::AbstractSituation => "abstract_situation",
            NodeKind::Procedure => "procedure",
        }
    }

    /// All kinds, in a fixed order.
    pub const ALL: [NodeKind; 4] = [
        NodeKind::Semantic,
        NodeKind::SpecificSituation,
        NodeKind::AbstractSituation,
        NodeKind::Procedure,
    ];

    /// True for both situation kinds.
    pub fn is_situation(self) -> bool {
        matches!(
            self,
            NodeKind::SpecificSituation | NodeKind::AbstractSituation
        )
    }
}

impl MemoryType {
    /// Which of the four kinds this is.
    pub fn kind(&self) -> NodeKind {
        match self {
            MemoryType::Semantic(_) => NodeKind::Semantic,
            MemoryType::Situation(Situation::SpecificSituation(_)) => NodeKind::SpecificSituation,
            MemoryType::Situation(Situation::AbstractSituation(_)) => NodeKind::AbstractSituation,
            MemoryType::Procedure(_) => NodeKind::Procedure,
        }
    }
}

/// Semantic link payload: a verb with a confidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SemMemLink {
    /// Relation, e.g. "好朋友".
    pub verb: String,
    /// Confidence in [0, 1].
    pub confidence: f32,
}

/// Trigger→action link payload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ProcMemLink {
    /// From a situation to a procedure with a probability in [0, 1].
    TrigToAction {
        /// Probability of the action given the trigger.
        prob: f64,
    },
}

impl ProcMemLink {
    /// The trigger probability.
    pub fn prob(&self) -> f64 {
        match self {
            ProcMemLink::TrigToAction { prob } => *prob,
        }
    }
}

/// Links between abstract and specific situations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SituationMemLink {
    /// Pattern → instance.
    AbstractToSpecific {},
    /// Instance → pattern (how PPR reaches the abstract node from a specific seed).
    SpecificToAbstract {},
}

/// The three link families.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum MemoryLinkType {
    /// Trigger → action.
    Proc(ProcMemLink),
    /// Semantic relation.
    Sem(SemMemLink),
    /// Situation abstraction.
    Situation(SituationMemLink),
}

/// Accepts both the seed specification's `{"Proc": {"TrigToAction": {"prob": p}}}` and the
/// corpus' flattened `{"Proc": {"prob": p}}`.
impl<'de> Deserialize<'de> for MemoryLinkType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FlatProc {
            prob: f64,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum AnyProc {
            Tagged(ProcMemLink),
            Flat(FlatProc),
        }
        #[derive(Deserialize)]
        enum Raw {
            Proc(AnyProc),
            Sem(SemMemLink),
            Situation(SituationMemLink),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::Proc(AnyProc::Tagged(p)) => MemoryLinkType::Proc(p),
            Raw::Proc(AnyProc::Flat(FlatProc { prob })) => {
                MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob })
            }
            Raw::Sem(s) => MemoryLinkType::Sem(s),
            Raw::Situation(s) => MemoryLinkType::Situation(s),
        })
    }
}

/// The four link kinds that stats distinguish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkKind {
    /// Semantic relation.
    Sem,
    /// Trigger → action.
    Proc,
    /// Pattern → instance.
    AbstractToSpecific,
    /// Instance → pattern.
    SpecificToAbstract,
}

impl LinkKind {
    /// snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Sem => "sem",
            LinkKind::Proc => "proc",
            LinkKind::AbstractToSpecific => "abstract_to_specific",
            LinkKind::SpecificToAbstract => "specific_to_abstract",
        }
    }

    /// All kinds, in a fixed order.
    pub const ALL: [LinkKind; 4] = [
        LinkKind::Sem,
        LinkKind::Proc,
        LinkKind::AbstractToSpecific,
        LinkKind::SpecificToAbstract,
    ];
}

impl MemoryLinkType {
    /// Which of the four kinds this is.
    pub fn kind(&self) -> LinkKind {
        match self {
            MemoryLinkType::Sem(_) => LinkKind::Sem,
            MemoryLinkType::Proc(_) => LinkKind::Proc,
            MemoryLinkType::Situation(SituationMemLink::AbstractToSpecific {}) => {
                LinkKind::AbstractToSpecific
            }
            MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {}) => {
                LinkKind::SpecificToAbstract
            }
        }
    }
}

/// Default link intensity when a file does not give one.
pub const DEFAULT_INTENSITY: f64 = 1.0;

/// Whether a note tag is a machine tag — `namespace:value` with an ASCII lower-case namespace,
/// like the `decorator:depth=4` a SillyTavern card import keeps: metadata about the note, not a
/// topic, so recall does not match on it.
pub fn is_machine_tag(tag: &str) -> bool {
    tag.split_once(':').is_some_and(|(ns, _)| {
        ns.starts_with(|c: char| c.is_ascii_lowercase())
            && ns
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
    })
}

/// A directed, typed, weighted link between two notes.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryLink {
    /// Identity.
    pub id: LinkId,
    /// Source note.
    pub from: MemoryId,
    /// Target note.
    pub to: MemoryId,
    /// Shared strength (decayed by forgetting, raised by LTP), finite and non-negative.
    pub intensity: f64,
    /// Typed payload.
    pub link_type: MemoryLinkType,
}

/// One memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryNote {
    /// Identity.
    pub id: MemoryId,
    /// The human-readable id from the Graph JSON (e.g. `sem_self`), kept for reports.
    pub readable_id: String,
    /// Tags (take part in similarity).
    pub tags: Vec<String>,
    /// How often it was recalled.
    pub retrieval_count: u32,
    /// When the memory was formed.
    pub create_time: DateTime<Utc>,
    /// When it was last recalled (never before `create_time`).
    pub last_accessed_time: DateTime<Utc>,
    /// Core memories are always resident and always shown (e.g. the self node).
    pub core: bool,
    /// Payload.
    pub mem_type: MemoryType,
    /// Outgoing links.
    pub links: Vec<MemoryLink>,
}

impl MemoryNote {
    /// A note created now-ish with the given payload.
    pub fn new(
        character: &str,
        readable_id: impl Into<String>,
        mem_type: MemoryType,
        created: DateTime<Utc>,
    ) -> Self {
        let readable_id = readable_id.into();
        MemoryNote {
            id: MemoryId::derive(character, &readable_id),
            readable_id,
            tags: Vec::new(),
            retrieval_count: 0,
            create_time: created,
            last_accessed_time: created,
            core: false,
            mem_type,
            links: Vec::new(),
        }
    }

    /// Which of the four kinds this note is.
    pub fn kind(&self) -> NodeKind {
        self.mem_type.kind()
    }

    /// Records one retrieval at `at`: bumps the count and the access time (never moving it
    /// before the creation time).
    pub fn record_retrieval(&mut self, at: DateTime<Utc>) {
        self.retrieval_count = self.retrieval_count.saturating_add(1);
        if at > self.last_accessed_time {
            self.last_accessed_time = at;
        }
    }

    /// The text a person would say this memory "is": content, narrative, pattern or action.
    pub fn display_text(&self) -> String {
        match &self.mem_type {
            MemoryType::Semantic(s) => {
                if s.description.is_empty() {
                    s.content.clone()
                } else {
                    format!("{}：{}", s.content, s.description)
                }
            }
            MemoryType::Situation(Situation::SpecificSituation(s)) => s.narrative.clone(),
            MemoryType::Situation(Situation::AbstractSituation(a)) => abstract_text(a),
            MemoryType::Procedure(p) => p.action.content.clone(),
        }
    }
}

/// Renders an abstract situation's structured facet as one line of text.
pub fn abstract_text(a: &AbstractSituation) -> String {
    fn join(parts: &[&str]) -> String {
        parts
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("，")
    }
    match a {
        AbstractSituation::Location(l) => join(&[&l.name, &l.coordinates]),
        AbstractSituation::Participant(p) => join(&[&p.name, &p.role]),
        AbstractSituation::Environment(e) => join(&[&e.atmosphere, &e.tone]),
        AbstractSituation::Event(e) => join(&[&e.initiator, &e.action, &e.target]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_tags_have_a_lower_case_namespace() {
        for t in ["decorator:depth=4", "st:uid-3", "x_1:y"] {
            assert!(is_machine_tag(t), "{t}");
        }
        for t in ["朋友", "时间：早上", "Note: x", ":x", "a b:c", "雨天"] {
            assert!(!is_machine_tag(t), "{t}");
        }
    }

    #[test]
    fn derived_ids_are_stable_and_scoped_by_character() {
        let a = MemoryId::derive("小红", "sem_self");
        assert_eq!(a, MemoryId::derive("小红", "sem_self"));
        assert_ne!(a, MemoryId::derive("小白", "sem_self"));
        assert_ne!(a, MemoryId::derive("小红", "sem_self2"));
    }

    #[test]
    fn link_type_accepts_both_proc_shapes_and_emits_tagged_form() {
        let flat: MemoryLinkType = serde_json::from_str(r#"{"Proc":{"prob":0.6}}"#).unwrap();
        let tagged: MemoryLinkType =
            serde_json::from_str(r#"{"Proc":{"TrigToAction":{"prob":0.6}}}"#).unwrap();
        assert_eq!(flat, tagged);
        assert_eq!(flat.kind(), LinkKind::Proc);
        let sit: MemoryLinkType =
            serde_json::from_str(r#"{"Situation":{"SpecificToAbstract":{}}}"#).unwrap();
        assert_eq!(sit.kind(), LinkKind::SpecificToAbstract);
        assert!(serde_json::from_str::<MemoryLinkType>(r#"{"Proc":{"odds":0.6}}"#).is_err());
        assert!(serde_json::from_str::<MemoryLinkType>(r#"{"Foo":{}}"#).is_err());
    }

    #[test]
    fn action_types_serialise_like_the_seed() {
        let skill = ActionType::Skill(SkillRecord {});
        assert_eq!(serde_json::to_string(&skill).unwrap(), r#"{"Skill":{}}"#);
        assert_eq!(
            serde_json::to_string(&ActionType::Speak).unwrap(),
            r#""Speak""#
        );
    }

    #[test]
    fn record_retrieval_never_moves_access_time_backwards() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-02T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let earlier = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut n = MemoryNote::new(
            "c",
            "p",
            MemoryType::Procedure(ProcMemory {
                action: Action {
                    content: "x".into(),
                    action_type: ActionType::Think,
                },
            }),
            t0,
        );
        n.record_retrieval(earlier);
        assert_eq!(n.retrieval_count, 1);
        assert_eq!(n.last_accessed_time, t0);
    }
}
