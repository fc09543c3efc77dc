//! Graph → SillyTavern: a World Info file and a V2 character card.
//!
//! Every semantic note except `sem_self` becomes one lorebook entry: comment = content,
//! keys = aliases, content = the note's decorator tags as `@@` lines followed by its
//! description, constant = core. Entry uids: `N` for a note `sem_lore_N`; other notes get
//! the next free numbers after the largest and keep their id in
//! `extensions.soul_mem.id`. The card takes `sem_self` (name = content, description =
//! description, aliases in `extensions.soul_mem.aliases`), the scenario from
//! `abs_scenario`, the greetings from the Speak procedures `spec_first_meeting` triggers (in
//! link order) and `mes_example` from the other Speak procedures.
//!
//! The mapping inverts `mapping` on what it keeps: importing an export of an imported card
//! (or World Info file) gives identical notes — ids, contents, aliases, descriptions, tags,
//! core flags and links.

use super::mapping::{FIRST_MEETING_ID, LORE_PREFIX, SCENARIO_ID};
use super::text::decorator_lines;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::import::SELF_NODE_ID;
use crate::model::IdSet;
use crate::model::*;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

/// One lorebook entry as both formats need it.
struct ExportEntry<'a> {
    uid: u64,
    note: &'a MemoryNote,
    sem: &'a SemMemory,
    /// Set when the note id is not `sem_lore_<uid>`.
    note_id: Option<&'a str>,
}

impl ExportEntry<'_> {
    fn content(&self) -> String {
        let mut lines = decorator_lines(&self.note.tags);
        if !self.sem.description.is_empty() || lines.is_empty() {
            lines.push(self.sem.description.clone());
        }
        lines.join("\n")
    }

    fn extensions(&self) -> Value {
        match self.note_id {
            Some(id) => json!({ "soul_mem": { "id": id } }),
            None => json!({}),
        }
    }
}

/// The lorebook entries of `graph` with their uids (see the module documentation).
fn entries(graph: &MemoryGraph) -> Vec<ExportEntry<'_>> {
    let lore: Vec<(&MemoryNote, &SemMemory)> = graph
        .notes()
        .filter(|n| n.readable_id != SELF_NODE_ID)
        .filter_map(|n| match &n.mem_type {
            MemoryType::Semantic(s) => Some((n, s)),
            _ => None,
        })
        .collect();
    let own_uid = |n: &MemoryNote| {
        n.readable_id
            .strip_prefix(LORE_PREFIX)
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|u| format!("{LORE_PREFIX}{u}") == n.readable_id)
    };
    let mut used: HashSet<u64> = HashSet::new();
    let mut own: Vec<Option<u64>> = Vec::with_capacity(lore.len());
    for (n, _) in &lore {
        own.push(own_uid(n).filter(|u| used.insert(*u)));
    }
    let mut next = used.iter().max().map_or(0, |m| m.saturating_add(1));
    lore.into_iter()
        .zip(own)
        .map(|((note, sem), uid)| match uid {
            Some(uid) => ExportEntry {
                uid,
                note,
                sem,
                note_id: None,
            },
            None => {
                let uid = next;
                next = next.saturating_add(1);
                ExportEntry {
                    uid,
                    note,
                    sem,
                    note_id: Some(note.readable_id.as_str()),
                }
            }
        })
        .collect()
}

/// One SillyTavern World Info entry with the fields (and defaults) SillyTavern writes for a
/// new entry (`newWorldInfoEntryDefinition` in `public/scripts/world-info.js`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WorldInfoEntry {
    uid: u64,
    key: Vec<String>,
    keysecondary: Vec<String>,
    comment: String,
    content: String,
    constant: bool,
    vectorized: bool,
    selective: bool,
    selective_logic: u8,
    add_memo: bool,
    order: u32,
    position: u8,
    disable: bool,
    ignore_budget: bool,
    exclude_recursion: bool,
    prevent_recursion: bool,
    match_persona_description: bool,
    match_character_description: bool,
    match_character_personality: bool,
    match_character_depth_prompt: bool,
    match_scenario: bool,
    match_creator_notes: bool,
    delay_until_recursion: bool,
    probability: u8,
    use_probability: bool,
    depth: u32,
    outlet_name: String,
    group: String,
    group_override: bool,
    group_weight: u32,
    scan_depth: Option<u32>,
    case_sensitive: Option<bool>,
    match_whole_words: Option<bool>,
    use_group_scoring: Option<bool>,
    automation_id: String,
    role: Option<u8>,
    sticky: u32,
    cooldown: u32,
    delay: u32,
    triggers: Vec<String>,
    display_index: usize,
    extensions: Value,
}

impl WorldInfoEntry {
    fn new(e: &ExportEntry<'_>, display_index: usize) -> Self {
        WorldInfoEntry {
            uid: e.uid,
            key: e.sem.aliases.clone(),
            keysecondary: Vec::new(),
            comment: e.sem.content.clone(),
            content: e.content(),
            constant: e.note.core,
            vectorized: false,
            selective: true,
            selective_logic: 0,
            add_memo: true,
            order: 100,
            position: 0,
            disable: false,
            ignore_budget: false,
            exclude_recursion: false,
            prevent_recursion: false,
            match_persona_description: false,
            match_character_description: false,
            match_character_personality: false,
            match_character_depth_prompt: false,
            match_scenario: false,
            match_creator_notes: false,
            delay_until_recursion: false,
            probability: 100,
            use_probability: true,
            depth: 4,
            outlet_name: String::new(),
            group: String::new(),
            group_override: false,
            group_weight: 100,
            scan_depth: None,
            case_sensitive: None,
            match_whole_words: None,
            use_group_scoring: None,
            automation_id: String::new(),
            role: None,
            sticky: 0,
            cooldown: 0,
            delay: 0,
            triggers: Vec::new(),
            display_index,
            extensions: e.extensions(),
        }
    }
}

/// The semantic notes of `graph` (except `sem_self`) as a SillyTavern World Info file:
/// `{"entries": {"<uid>": {uid, key, keysecondary, comment, content, constant, disable,
/// order, position, …}}}` with the fields and defaults SillyTavern writes.
///
/// Complexity: O(notes + text).
pub fn export_world_info(graph: &MemoryGraph) -> Result<Value> {
    let mut map = Map::new();
    for (display, e) in entries(graph).iter().enumerate() {
        let entry = serde_json::to_value(WorldInfoEntry::new(e, display))
            .map_err(|err| Error::InvalidJson(err.to_string()))?;
        map.insert(e.uid.to_string(), entry);
    }
    Ok(json!({ "entries": map }))
}

/// The graph as a V2 character card (`{spec: "chara_card_v2", spec_version: "2.0", data:
/// {…, character_book: {entries: […]}}}`). Needs a semantic `sem_self` (`not_found`
/// otherwise).
///
/// Complexity: O(notes + links + text).
pub fn export_card_v2(graph: &MemoryGraph) -> Result<Value> {
    let me = match graph.get_by_readable(SELF_NODE_ID).map(|n| &n.mem_type) {
        Some(MemoryType::Semantic(s)) => s,
        _ => {
            return Err(Error::NotFound(format!(
                "semantic note {SELF_NODE_ID:?} (the character) to export as a card"
            )))
        }
    };
    let scenario = match graph.get_by_readable(SCENARIO_ID).map(|n| &n.mem_type) {
        Some(MemoryType::Situation(Situation::AbstractSituation(a))) => abstract_text(a),
        _ => String::new(),
    };
    let greetings = greeting_notes(graph);
    let greeting_ids: IdSet = greetings.iter().map(|(id, _)| *id).collect();
    let examples: Vec<String> = graph
        .notes()
        .filter(|n| !greeting_ids.contains(&n.id))
        .filter_map(|n| speech(n).map(|t| format!("<START>\n{{{{char}}}}: {t}")))
        .collect();
    let mut texts = greetings.into_iter().map(|(_, t)| t.to_owned());
    let first_mes = texts.next().unwrap_or_default();
    let alternate: Vec<String> = texts.collect();
    let book: Vec<Value> = entries(graph)
        .iter()
        .map(|e| {
            json!({
                "id": e.uid,
                "keys": e.sem.aliases,
                "secondary_keys": [],
                "comment": e.sem.content,
                "content": e.content(),
                "constant": e.note.core,
                "selective": false,
                "insertion_order": 100,
                "enabled": true,
                "position": "before_char",
                "use_regex": false,
                "extensions": e.extensions(),
            })
        })
        .collect();
    let extensions = if me.aliases.is_empty() {
        json!({})
    } else {
        json!({ "soul_mem": { "aliases": me.aliases } })
    };
    Ok(json!({
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {
            "name": me.content,
            "description": me.description,
            "personality": "",
            "scenario": scenario,
            "first_mes": first_mes,
            "mes_example": examples.join("\n"),
            "creator_notes": "",
            "system_prompt": "",
            "post_history_instructions": "",
            "alternate_greetings": alternate,
            "character_book": { "extensions": {}, "entries": book },
            "tags": [],
            "creator": "",
            "character_version": "",
            "extensions": extensions,
        }
    }))
}

/// The Speak procedures `spec_first_meeting` triggers, in link order.
fn greeting_notes(graph: &MemoryGraph) -> Vec<(MemoryId, &str)> {
    let Some(meeting) = graph.get_by_readable(FIRST_MEETING_ID) else {
        return Vec::new();
    };
    meeting
        .links
        .iter()
        .filter(|l| matches!(l.link_type, MemoryLinkType::Proc(_)))
        .filter_map(|l| graph.get(&l.to))
        .filter_map(|n| speech(n).map(|t| (n.id, t)))
        .collect()
}

/// The text of a Speak procedure.
fn speech(note: &MemoryNote) -> Option<&str> {
    match &note.mem_type {
        MemoryType::Procedure(p) if p.action.action_type == ActionType::Speak => {
            Some(p.action.content.as_str())
        }
        _ => None,
    }
}
