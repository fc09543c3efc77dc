//! Lorebook entries: a card's embedded `character_book` (`{entries: [{id, keys,
//! secondary_keys, comment, content, constant, enabled, …}]}`) and a SillyTavern World Info
//! file (`{entries: {"<uid>": {uid, key, keysecondary, comment, content, constant, disable,
//! …}}}`) read into one typed [`LoreEntry`].
//!
//! Entry ids: the entry's `uid`/`id` (a non-negative integer, or a string: kept when it is
//! made of `[A-Za-z0-9_-]`, at most 64 bytes, otherwise replaced by `h` + 16 hex digits of
//! its SHA-256). A character book whose entries carry no ids numbers them by position; one
//! where only some do gives the rest the next free numbers after the largest. World Info
//! entries are ordered by uid (numbers first, numerically), so the result does not depend
//! on the JSON object's key order. Two entries with one id are refused, naming both.

use super::fields::{type_name, Obj};
use super::limits::MAX_LORE_ENTRIES;
use crate::error::{Error, Result};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// One lorebook entry, as read (macros and decorators still in the text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoreEntry {
    /// Normalised id (see the module documentation).
    pub uid: String,
    /// Primary keys (`key` / `keys`), blank ones dropped.
    pub keys: Vec<String>,
    /// Secondary keys (`keysecondary` / `secondary_keys`).
    pub secondary_keys: Vec<String>,
    /// `comment` (or, when empty, the V2 entry `name`).
    pub comment: String,
    /// `content`.
    pub content: String,
    /// Always inserted by SillyTavern (`constant`).
    pub constant: bool,
    /// `disable: true` or `enabled: false`.
    pub disabled: bool,
    /// The SoulMem note id this entry was exported from (`extensions.soul_mem.id`), if any.
    pub note_id: Option<String>,
}

impl LoreEntry {
    /// How errors name this entry: its uid and its comment or first key.
    pub fn label(&self) -> String {
        entry_label(
            &self.uid,
            &self.comment,
            self.keys.first().map(String::as_str),
        )
    }
}

fn entry_label(uid: &str, comment: &str, first_key: Option<&str>) -> String {
    let name = if comment.trim().is_empty() {
        first_key.unwrap_or("")
    } else {
        comment
    };
    let short: String = name.chars().take(40).collect();
    format!("lorebook entry uid {uid} ({short:?})")
}

/// Reads a card's `character_book` object (`path` names it in errors).
///
/// Complexity: O(entries + text).
pub fn parse_character_book(book: &Value, path: &str) -> Result<Vec<LoreEntry>> {
    let book = Obj::new(book, path)?;
    let entries = match book.map.get("entries") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(Error::invalid_card(format!(
                "field {path}.entries must be an array, found {}",
                type_name(other)
            )))
        }
    };
    check_count(entries.len())?;
    let explicit: Vec<Option<String>> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| raw_uid(e, &["id", "uid"], &format!("{path}.entries[{i}]")))
        .collect::<Result<_>>()?;
    let uids = fill_missing_uids(explicit);
    let mut out = Vec::with_capacity(entries.len());
    for (i, (entry, uid)) in entries.iter().zip(uids).enumerate() {
        out.push(parse_entry(entry, uid, &format!("{path}.entries[{i}]"))?);
    }
    check_duplicates(&out)?;
    Ok(out)
}

/// Reads a World Info file's `entries` (an object keyed by uid, or an array).
///
/// Complexity: O(entries · log entries + text).
pub fn parse_world_info(entries: &Value) -> Result<Vec<LoreEntry>> {
    let items: Vec<(Option<&str>, &Value)> = match entries {
        Value::Object(map) => map.iter().map(|(k, v)| (Some(k.as_str()), v)).collect(),
        Value::Array(items) => items.iter().map(|v| (None, v)).collect(),
        other => {
            return Err(Error::invalid_card(format!(
                "field entries must be an object or an array, found {}",
                type_name(other)
            )))
        }
    };
    check_count(items.len())?;
    let mut out = Vec::with_capacity(items.len());
    for (i, (key, entry)) in items.into_iter().enumerate() {
        let at = match key {
            Some(k) => format!("entries[{k:?}]"),
            None => format!("entries[{i}]"),
        };
        let uid = match raw_uid(entry, &["uid", "id"], &at)? {
            Some(uid) => uid,
            None => normalise_uid(key.map_or_else(|| i.to_string(), str::to_owned)),
        };
        out.push(parse_entry(entry, uid, &at)?);
    }
    out.sort_by(|a, b| uid_order(&a.uid, &b.uid));
    check_duplicates(&out)?;
    Ok(out)
}

fn check_count(count: usize) -> Result<()> {
    if count > MAX_LORE_ENTRIES {
        return Err(Error::LimitExceeded {
            what: "lorebook entries".into(),
            count,
            limit: MAX_LORE_ENTRIES,
        });
    }
    Ok(())
}

/// Numeric uids first in numeric order, then the others by text.
fn uid_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

/// The entry's own id (the first of `keys` present), normalised; `None` when it has none.
fn raw_uid(entry: &Value, keys: &[&str], at: &str) -> Result<Option<String>> {
    let Some(obj) = entry.as_object() else {
        return Err(Error::invalid_card(format!(
            "{at} must be a JSON object, found {}",
            type_name(entry)
        )));
    };
    let Some((key, value)) = keys
        .iter()
        .find_map(|k| obj.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    else {
        return Ok(None);
    };
    match value {
        Value::Number(n) => n.as_u64().map(|u| Some(u.to_string())).ok_or_else(|| {
            Error::invalid_card(format!(
                "field {at}.{key} must be a non-negative integer, found {n}"
            ))
        }),
        Value::String(s) if !s.trim().is_empty() => Ok(Some(normalise_uid(s.trim().to_owned()))),
        other => Err(Error::invalid_card(format!(
            "field {at}.{key} must be an integer or a string, found {}",
            type_name(other)
        ))),
    }
}

/// Keeps a uid made of `[A-Za-z0-9_-]` (≤ 64 bytes); hashes any other into `h<16 hex>`, so
/// note ids stay readable and safe.
fn normalise_uid(uid: String) -> String {
    let safe = !uid.is_empty()
        && uid.len() <= 64
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if safe {
        return uid;
    }
    let digest = Sha256::digest(uid.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("h{hex}")
}

/// Positions when no entry has an id; otherwise the next free numbers after the largest.
fn fill_missing_uids(explicit: Vec<Option<String>>) -> Vec<String> {
    if explicit.iter().all(Option::is_none) {
        return (0..explicit.len()).map(|i| i.to_string()).collect();
    }
    let mut next = explicit
        .iter()
        .flatten()
        .filter_map(|u| u.parse::<u64>().ok())
        .max()
        .map_or(0, |m| m.saturating_add(1));
    explicit
        .into_iter()
        .map(|u| {
            u.unwrap_or_else(|| {
                let n = next;
                next = next.saturating_add(1);
                n.to_string()
            })
        })
        .collect()
}

fn parse_entry(entry: &Value, uid: String, at: &str) -> Result<LoreEntry> {
    // Name the entry by uid and comment or first key in every error; read leniently first.
    let peek = entry.as_object();
    let peek_str = |k: &str| {
        peek.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let first_key = peek
        .and_then(|m| m.get("key").or_else(|| m.get("keys")))
        .and_then(|v| match v {
            Value::Array(a) => a.first().and_then(Value::as_str),
            Value::String(s) => Some(s.as_str()),
            _ => None,
        });
    let path = format!(
        "{} at {at}",
        entry_label(&uid, peek_str("comment"), first_key)
    );
    let obj = Obj::new(entry, &path)?;
    let mut comment = obj.string(&["comment"])?;
    if comment.trim().is_empty() {
        comment = obj.string(&["name"])?;
    }
    let note_id = match obj.object("extensions")? {
        Some(ext) => match ext.get("soul_mem") {
            Some(v @ Value::Object(_)) => {
                let p = format!("{path}.extensions.soul_mem");
                Some(Obj::new(v, &p)?.string(&["id"])?).filter(|s| !s.is_empty())
            }
            _ => None,
        },
        None => None,
    };
    Ok(LoreEntry {
        keys: obj.string_list(&["key", "keys"])?,
        secondary_keys: obj.string_list(&["keysecondary", "secondary_keys"])?,
        comment: comment.trim().to_owned(),
        content: obj.string(&["content"])?,
        constant: obj.boolean("constant", false)?,
        disabled: obj.boolean("disable", false)? || !obj.boolean("enabled", true)?,
        note_id,
        uid,
    })
}

fn check_duplicates(entries: &[LoreEntry]) -> Result<()> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        if let Some(first) = seen.insert(e.uid.as_str(), i) {
            return Err(Error::invalid_card(format!(
                "{}: duplicate entry id {:?}, also used by {}",
                e.label(),
                e.uid,
                entries[first].label()
            )));
        }
    }
    Ok(())
}
