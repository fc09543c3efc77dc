//! Card JSON (V1, V2 `chara_card_v2`, V3 `chara_card_v3`) and World Info JSON into one typed
//! [`Card`].
//!
//! A V1 card is the flat object `{name, description, personality, scenario, first_mes,
//! mes_example}` (the TavernAI spellings `char_name`, `char_persona`, `world_scenario`,
//! `char_greeting`, `example_dialogue` are read too). V2 and V3 put the same fields, plus
//! `alternate_greetings`, `character_book` and (V3) `nickname`, under `data`. A World Info
//! file is an object with `entries` and no `name`/`spec`.

use super::fields::Obj;
use super::lorebook::{self, LoreEntry};
use crate::error::{Error, Result};
use serde_json::Value;

/// Which JSON shape a card had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardSpec {
    /// Flat V1 card.
    V1,
    /// `chara_card_v2`.
    V2,
    /// `chara_card_v3`.
    V3,
    /// A SillyTavern World Info file (lorebook only).
    WorldInfo,
}

impl CardSpec {
    /// `v1`, `v2`, `v3` or `world_info` (the second half of a report's `format`).
    pub fn as_str(self) -> &'static str {
        match self {
            CardSpec::V1 => "v1",
            CardSpec::V2 => "v2",
            CardSpec::V3 => "v3",
            CardSpec::WorldInfo => "world_info",
        }
    }
}

/// A character card as read: texts still carry their macros (`{{char}}`, `{{user}}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// The JSON shape it came in.
    pub spec: CardSpec,
    /// The character's name (for a World Info file: the `name` option).
    pub name: String,
    /// Other names: V3 `nickname`, then `extensions.soul_mem.aliases` (written by export).
    pub aliases: Vec<String>,
    /// `description`.
    pub description: String,
    /// `personality`.
    pub personality: String,
    /// `scenario`.
    pub scenario: String,
    /// `first_mes`.
    pub first_mes: String,
    /// `alternate_greetings`.
    pub alternate_greetings: Vec<String>,
    /// `mes_example`.
    pub mes_example: String,
    /// The embedded `character_book` entries, or a World Info file's entries.
    pub lorebook: Vec<LoreEntry>,
}

/// Parses card or World Info JSON. `name` is the character's name for a World Info file
/// (required there, ignored for cards).
///
/// Complexity: O(bytes).
pub fn parse_json(json: &str, name: Option<&str>) -> Result<Card> {
    let value: Value = serde_json::from_str(json)
        .map_err(|e| Error::invalid_card(format!("card is not valid JSON: {e}")))?;
    let root = Obj::new(&value, "card")?;
    if let Some(spec) = root.map.get("spec").filter(|v| !v.is_null()) {
        let spec = match spec.as_str() {
            Some("chara_card_v2") => CardSpec::V2,
            Some("chara_card_v3") => CardSpec::V3,
            _ => {
                return Err(Error::invalid_card(format!(
                    "unsupported card spec {spec} (expected \"chara_card_v2\" or \"chara_card_v3\")"
                )))
            }
        };
        let data = root
            .map
            .get("data")
            .ok_or_else(|| Error::invalid_card("missing required field data"))?;
        return read_card(Obj::new(data, "data")?, spec);
    }
    let has_name = root.get_any(&["name", "char_name"]).is_some();
    if let (false, Some(entries)) = (has_name, root.map.get("entries")) {
        let name = name
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                Error::invalid_card(
                    "a World Info file has no character: pass the character's name (option name)",
                )
            })?;
        return Ok(Card {
            spec: CardSpec::WorldInfo,
            name: name.to_owned(),
            aliases: Vec::new(),
            description: String::new(),
            personality: String::new(),
            scenario: String::new(),
            first_mes: String::new(),
            alternate_greetings: Vec::new(),
            mes_example: String::new(),
            lorebook: lorebook::parse_world_info(entries)?,
        });
    }
    let root = Obj::new(&value, "")?;
    read_card(root, CardSpec::V1)
}

fn read_card(data: Obj<'_>, spec: CardSpec) -> Result<Card> {
    let name = data.string(&["name", "char_name"])?.trim().to_owned();
    if name.is_empty() {
        let field = if spec == CardSpec::V1 {
            "name"
        } else {
            "data.name"
        };
        return Err(Error::invalid_card(format!(
            "missing required field {field} (the character's name)"
        )));
    }
    let mut aliases = Vec::new();
    let nickname = data.string(&["nickname"])?;
    if !nickname.trim().is_empty() {
        aliases.push(nickname.trim().to_owned());
    }
    if let Some(ext) = data.object("extensions")? {
        if let Some(soul) = ext.get("soul_mem") {
            let path = format!("{}.extensions.soul_mem", data.path);
            for alias in Obj::new(soul, &path)?.string_list(&["aliases"])? {
                if !aliases.contains(&alias) {
                    aliases.push(alias);
                }
            }
        }
    }
    let lorebook = match data.map.get("character_book") {
        None | Some(Value::Null) => Vec::new(),
        Some(book) => {
            lorebook::parse_character_book(book, &format!("{}.character_book", data.path))?
        }
    };
    Ok(Card {
        spec,
        name,
        aliases,
        description: data.string(&["description"])?,
        personality: data.string(&["personality", "char_persona"])?,
        scenario: data.string(&["scenario", "world_scenario"])?,
        first_mes: data.string(&["first_mes", "char_greeting"])?,
        alternate_greetings: data.string_list_exact("alternate_greetings")?,
        mes_example: data.string(&["mes_example", "example_dialogue"])?,
        lorebook,
    })
}
