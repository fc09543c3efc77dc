//! Card → Graph JSON (the seed's array format that `import::import_bytes` reads).
//!
//! The mapping is deterministic: the same card gives byte-identical Graph JSON.
//!
//! | card | note |
//! |---|---|
//! | `name`, `nickname` (+ `extensions.soul_mem.aliases`), `description`, `personality` | `sem_self`: Semantic Entity, content = name, aliases = nickname…, description = description and personality (blank line between) with `{{char}}` → `我` in text containing CJK ideographs, else → the name; core |
//! | `scenario` | `abs_scenario`: AbstractSituation Environment (atmosphere = scenario); `sem_self` → it (Sem `setting`) |
//! | `first_mes`, `alternate_greetings` | `proc_greeting_<i>`: Speak procedures, in that order; `spec_first_meeting` (SpecificSituation "<name> meets user for the first time", or `<name>第一次见到user。` for CJK cards) → each (Proc TrigToAction, prob 1/n), → `sem_self` (Sem `participant`), ↔ `abs_scenario` (SpecificToAbstract / AbstractToSpecific) |
//! | `mes_example` | `proc_example_<k>`: Speak procedures, one per utterance of the character (blocks split on `<START>`, user lines dropped); `sem_self` → each (Sem `speaks like`) |
//! | lorebook entry | `sem_lore_<uid>` (or the id in the entry's `extensions.soul_mem.id`, written by export): Semantic Entity, content = comment (else the first key, else the start of the text), aliases = keys then secondary keys, description = content without its leading decorator lines, tags = those decorators (`@@depth 4` → `decorator:depth=4`), core = `constant`. Disabled entries (`disable`, `enabled: false`) and entries without any text are skipped and counted |
//! | texts mentioning names | Sem `mentions` links from `sem_self`, `abs_scenario`, greetings, examples and lore notes to `sem_self` and lore notes whose content or alias they mention (see `mentions`), at most 16 per note |
//!
//! Macros: `{{char}}`/`<BOT>` become the name (or `我`, above), `{{user}}`/`<USER>` become
//! `user`; other macros stay as written. Notes carry no timestamps (the importer stamps them).

use super::mentions::{mention_targets, MentionNote};
use super::parse::Card;
use super::text::{example_lines, has_han, replace_macros, strip_decorators, USER_NAME};
use crate::error::{Error, Result};
use crate::import::SELF_NODE_ID;
use crate::model::*;
use serde::Serialize;
use std::collections::HashSet;

/// Id of the scenario's abstract situation.
pub const SCENARIO_ID: &str = "abs_scenario";
/// Id of the first meeting's specific situation.
pub const FIRST_MEETING_ID: &str = "spec_first_meeting";
/// Id prefix of greeting procedures.
pub const GREETING_PREFIX: &str = "proc_greeting_";
/// Id prefix of example-dialogue procedures.
pub const EXAMPLE_PREFIX: &str = "proc_example_";
/// Id prefix of lorebook notes.
pub const LORE_PREFIX: &str = "sem_lore_";
/// Verb of the `sem_self` → `abs_scenario` link.
pub const VERB_SETTING: &str = "setting";
/// Verb of `sem_self` → example links.
pub const VERB_SPEAKS_LIKE: &str = "speaks like";
/// Verb of mention links.
pub const VERB_MENTIONS: &str = "mentions";
const VERB_PARTICIPANT: &str = "participant";
const STRUCTURE_INTENSITY: f64 = 0.9;
const MENTION_INTENSITY: f64 = 0.6;
const MENTION_CONFIDENCE: f32 = 0.8;

/// What an import produced, for people and for the caller's checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CardReport {
    /// Container and spec, e.g. `png_v3`, `png_v2`, `json_v2`, `charx_v3`, `world_info`.
    pub format: String,
    /// The character's name.
    pub name: String,
    /// Notes in the graph.
    pub notes: usize,
    /// Links in the graph.
    pub links: usize,
    /// Lorebook entries imported as notes.
    pub lore_entries: usize,
    /// Disabled lorebook entries skipped.
    pub skipped_disabled: usize,
    /// Lorebook entries skipped because they had no keys, comment or content.
    pub skipped_empty: usize,
    /// Core notes (`sem_self` and constant entries).
    pub core_notes: usize,
}

#[derive(Serialize)]
struct DocNode {
    id: String,
    tags: Vec<String>,
    mem_type: MemoryType,
    mem_links: Vec<DocLink>,
    core: bool,
}

#[derive(Serialize)]
struct DocLink {
    from: String,
    to: String,
    intensity: f64,
    link_type: MemoryLinkType,
}

impl DocNode {
    fn new(id: impl Into<String>, mem_type: MemoryType) -> Self {
        DocNode {
            id: id.into(),
            tags: Vec::new(),
            mem_type,
            mem_links: Vec::new(),
            core: false,
        }
    }

    fn link(&mut self, to: &str, intensity: f64, link_type: MemoryLinkType) {
        self.mem_links.push(DocLink {
            from: self.id.clone(),
            to: to.to_owned(),
            intensity,
            link_type,
        });
    }

    fn sem_link(&mut self, to: &str, intensity: f64, verb: &str, confidence: f32) {
        let link_type = MemoryLinkType::Sem(SemMemLink {
            verb: verb.to_owned(),
            confidence,
        });
        self.link(to, intensity, link_type);
    }
}

fn semantic(content: String, aliases: Vec<String>, description: String) -> MemoryType {
    MemoryType::Semantic(SemMemory {
        content,
        aliases,
        concept_type: ConceptType::Entity,
        description,
    })
}

fn speak(content: String) -> MemoryType {
    MemoryType::Procedure(ProcMemory {
        action: Action {
            content,
            action_type: ActionType::Speak,
        },
    })
}

/// Maps `card` to a Graph JSON document and its report (`format` goes into the report).
///
/// Complexity: O(card text + entries), mention links included (see `mentions`).
pub fn card_to_graph(card: &Card, format: &str) -> Result<(String, CardReport)> {
    let name = card.name.as_str();
    let cjk = [
        name,
        &card.description,
        &card.personality,
        &card.scenario,
        &card.first_mes,
    ]
    .iter()
    .any(|t| has_han(t));
    let mut nodes = Vec::new();

    let description = [&card.description, &card.personality]
        .iter()
        .map(|t| self_text(t, name))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut me = DocNode::new(
        SELF_NODE_ID,
        semantic(name.to_owned(), dedup(card.aliases.clone()), description),
    );
    me.tags = vec![if cjk { "自我" } else { "self" }.to_owned()];
    me.core = true;
    nodes.push(me);

    let scenario = replace_macros(&card.scenario, name);
    if !scenario.is_empty() {
        nodes[0].sem_link(SCENARIO_ID, STRUCTURE_INTENSITY, VERB_SETTING, 1.0);
        let mut node = DocNode::new(
            SCENARIO_ID,
            MemoryType::Situation(Situation::AbstractSituation(
                AbstractSituation::Environment(Environment {
                    atmosphere: scenario.clone(),
                    tone: String::new(),
                }),
            )),
        );
        node.tags = vec![if cjk { "场景" } else { "scenario" }.to_owned()];
        nodes.push(node);
    }

    let greetings: Vec<String> = std::iter::once(&card.first_mes)
        .chain(&card.alternate_greetings)
        .map(|g| replace_macros(g, name))
        .filter(|g| !g.is_empty())
        .collect();
    if !greetings.is_empty() {
        if !scenario.is_empty() {
            nodes[1].link(
                FIRST_MEETING_ID,
                STRUCTURE_INTENSITY,
                MemoryLinkType::Situation(SituationMemLink::AbstractToSpecific {}),
            );
        }
        nodes.push(first_meeting(
            name,
            cjk,
            !scenario.is_empty(),
            greetings.len(),
        ));
    }
    for (i, g) in greetings.into_iter().enumerate() {
        nodes.push(DocNode::new(format!("{GREETING_PREFIX}{i}"), speak(g)));
    }
    for (k, line) in example_lines(&card.mes_example, name)
        .into_iter()
        .enumerate()
    {
        let id = format!("{EXAMPLE_PREFIX}{k}");
        nodes[0].sem_link(&id, STRUCTURE_INTENSITY, VERB_SPEAKS_LIKE, 1.0);
        nodes.push(DocNode::new(id, speak(line)));
    }

    let first_lore = nodes.len();
    let (skipped_disabled, skipped_empty) = add_lore(card, &mut nodes)?;
    add_mentions(&mut nodes, first_lore);

    let report = CardReport {
        format: format.to_owned(),
        name: name.to_owned(),
        notes: nodes.len(),
        links: nodes.iter().map(|n| n.mem_links.len()).sum(),
        lore_entries: nodes.len() - first_lore,
        skipped_disabled,
        skipped_empty,
        core_notes: nodes.iter().filter(|n| n.core).count(),
    };
    let json = serde_json::to_string(&nodes).map_err(|e| Error::InvalidJson(e.to_string()))?;
    Ok((json, report))
}

/// The self description: macros replaced, `{{char}}` as `我` in CJK text.
fn self_text(text: &str, name: &str) -> String {
    if has_han(text) {
        replace_macros(text, "我")
    } else {
        replace_macros(text, name)
    }
}

fn first_meeting(name: &str, cjk: bool, with_scenario: bool, greetings: usize) -> DocNode {
    let (narrative, me_role, user_role) = if cjk {
        (format!("{name}第一次见到{USER_NAME}。"), "我", "对话者")
    } else {
        (
            format!("{name} meets {USER_NAME} for the first time."),
            "self",
            "interlocutor",
        )
    };
    let participant = |n: &str, role: &str| Participant {
        name: n.to_owned(),
        role: role.to_owned(),
    };
    let mut node = DocNode::new(
        FIRST_MEETING_ID,
        MemoryType::Situation(Situation::SpecificSituation(SpecificSituation {
            narrative,
            time_span: None,
            context: Context {
                participants: vec![
                    participant(name, me_role),
                    participant(USER_NAME, user_role),
                ],
                ..Context::default()
            },
        })),
    );
    node.sem_link(SELF_NODE_ID, STRUCTURE_INTENSITY, VERB_PARTICIPANT, 1.0);
    if with_scenario {
        node.link(
            SCENARIO_ID,
            STRUCTURE_INTENSITY,
            MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {}),
        );
    }
    let prob = 1.0 / greetings as f64;
    for i in 0..greetings {
        node.link(
            &format!("{GREETING_PREFIX}{i}"),
            STRUCTURE_INTENSITY,
            MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob }),
        );
    }
    node
}

/// Appends one note per usable lorebook entry; returns (disabled, empty) skip counts.
fn add_lore(card: &Card, nodes: &mut Vec<DocNode>) -> Result<(usize, usize)> {
    let name = card.name.as_str();
    let mut ids: HashSet<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let (mut disabled, mut empty) = (0, 0);
    for entry in &card.lorebook {
        if entry.disabled {
            disabled += 1;
            continue;
        }
        let aliases = dedup(
            entry
                .keys
                .iter()
                .chain(&entry.secondary_keys)
                .map(|k| replace_macros(k, name))
                .filter(|k| !k.is_empty())
                .collect(),
        );
        let (tags, body) = strip_decorators(&entry.content);
        let description = replace_macros(&body, name);
        let comment = replace_macros(&entry.comment, name);
        let content = if !comment.is_empty() {
            comment
        } else if let Some(key) = aliases.first() {
            key.clone()
        } else {
            let head: String = description
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(48)
                .collect();
            head.trim().to_owned()
        };
        if content.is_empty() {
            empty += 1;
            continue;
        }
        let id = entry
            .note_id
            .clone()
            .filter(|id| usable_note_id(id))
            .unwrap_or_else(|| format!("{LORE_PREFIX}{}", entry.uid));
        if !ids.insert(id.clone()) {
            return Err(Error::invalid_card(format!(
                "{}: note id {id:?} is used by another entry",
                entry.label()
            )));
        }
        let mut node = DocNode::new(id, semantic(content, aliases, description));
        node.tags = tags;
        node.core = entry.constant;
        nodes.push(node);
    }
    Ok((disabled, empty))
}

/// An id from `extensions.soul_mem.id` is used when it is a plausible semantic note id.
fn usable_note_id(id: &str) -> bool {
    id.starts_with("sem_")
        && id != SELF_NODE_ID
        && id.len() <= 128
        && !id.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn dedup(items: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// Adds `mentions` links: targets are `sem_self` (index 0) and the lore notes (from
/// `first_lore` on); every note is a source.
fn add_mentions(nodes: &mut [DocNode], first_lore: usize) {
    let targets = {
        let views: Vec<MentionNote<'_>> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| mention_view(n, i == 0 || i >= first_lore))
            .collect();
        mention_targets(&views)
    };
    for (i, found) in targets.into_iter().enumerate() {
        for t in found {
            let to = nodes[t].id.clone();
            nodes[i].sem_link(&to, MENTION_INTENSITY, VERB_MENTIONS, MENTION_CONFIDENCE);
        }
    }
}

fn mention_view(node: &DocNode, is_target: bool) -> MentionNote<'_> {
    match &node.mem_type {
        MemoryType::Semantic(s) => MentionNote {
            names: if is_target {
                std::iter::once(s.content.as_str())
                    .chain(s.aliases.iter().map(String::as_str))
                    .collect()
            } else {
                Vec::new()
            },
            texts: if node.id == SELF_NODE_ID {
                vec![s.description.as_str()]
            } else {
                vec![s.content.as_str(), s.description.as_str()]
            },
        },
        MemoryType::Situation(Situation::AbstractSituation(AbstractSituation::Environment(e))) => {
            MentionNote {
                names: Vec::new(),
                texts: vec![e.atmosphere.as_str()],
            }
        }
        MemoryType::Procedure(p) => MentionNote {
            names: Vec::new(),
            texts: vec![p.action.content.as_str()],
        },
        MemoryType::Situation(_) => MentionNote {
            names: Vec::new(),
            texts: Vec::new(),
        },
    }
}
