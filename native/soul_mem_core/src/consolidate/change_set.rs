//! The change set: what one consolidation writes, decoded from JSON and checked (limits, keys,
//! payloads, sizes) before anything touches the graph.

use super::ConsolidateConfig;
use crate::error::{Error, Result};
use crate::graph::validate_intensity;
use crate::import::{validate_link_type, validate_mem_type};
use crate::model::{LinkKind, MemoryLinkType, MemoryType, NodeKind, Situation};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};

/// Longest key of a change-set note.
const MAX_KEY_CHARS: usize = 128;

/// A note to add: a key naming it inside the change set (links use it), tags and a payload in
/// Graph JSON shape (`{"Semantic": {...}}`, `{"Situation": {"SpecificSituation": {...}}}` …).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewNote {
    /// Name of the note inside the change set (not stored).
    pub key: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Payload.
    pub mem_type: MemoryType,
}

/// A link to add; `from`/`to` are change-set keys or existing readable ids / UUIDs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewLink {
    /// Source.
    pub from: String,
    /// Target.
    pub to: String,
    /// Strength; [`ConsolidateConfig::default_intensity`] when absent.
    #[serde(default)]
    pub intensity: Option<f64>,
    /// Typed payload (Graph JSON shape).
    pub link_type: MemoryLinkType,
}

/// Everything one consolidation writes, decoded and checked before anything is applied.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeSet {
    /// When the consolidation runs; nothing may happen after it.
    pub at: DateTime<Utc>,
    /// When the consolidated conversation happened (creation time of notes without a time of
    /// their own); `at` when absent.
    #[serde(default)]
    pub happened_at: Option<DateTime<Utc>>,
    /// New notes.
    #[serde(default)]
    pub notes: Vec<NewNote>,
    /// New links.
    #[serde(default)]
    pub links: Vec<NewLink>,
    /// Retrieval records since the last consolidation: note id → timestamps.
    #[serde(default)]
    pub records: BTreeMap<String, Vec<DateTime<Utc>>>,
}

impl ChangeSet {
    /// Decodes and validates a change set. Errors name the note (its key) and the field.
    /// Complexity: O(bytes).
    pub fn from_json(bytes: &[u8], cfg: &ConsolidateConfig) -> Result<Self> {
        if bytes.len() as u64 > cfg.max_bytes {
            return Err(Error::TooLarge {
                size: bytes.len() as u64,
                limit: cfg.max_bytes,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| Error::NotUtf8(e.valid_up_to()))?;
        let mut de = serde_json::Deserializer::from_str(text);
        let changes: ChangeSet = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            Error::InvalidJson(format!("change set field {}: {}", e.path(), e.inner()))
        })?;
        de.end()
            .map_err(|e| Error::InvalidJson(format!("trailing characters: {e}")))?;
        changes.validate(cfg)?;
        Ok(changes)
    }

    /// Checks limits, keys, payload values, string and list sizes and link payloads; what
    /// needs the graph (link targets, endpoint kinds) is checked by [`consolidate`](super::consolidate).
    pub fn validate(&self, cfg: &ConsolidateConfig) -> Result<()> {
        limit("notes", self.notes.len(), cfg.max_notes)?;
        limit("links", self.links.len(), cfg.max_links)?;
        let records: usize = self.records.values().map(Vec::len).sum();
        limit("record timestamps", records, cfg.max_records)?;
        if let Some(h) = self.happened_at {
            if h > self.at {
                return Err(Error::invalid_value(
                    "(change set)",
                    "happened_at",
                    "must not be later than at",
                ));
            }
        }
        let mut keys = HashSet::with_capacity(self.notes.len());
        for (i, n) in self.notes.iter().enumerate() {
            let key = n.key.as_str();
            if key.trim().is_empty() || key.chars().count() > MAX_KEY_CHARS {
                return Err(Error::invalid_value(
                    &format!("#{i}"),
                    "key",
                    format!("must be 1 to {MAX_KEY_CHARS} characters"),
                ));
            }
            if !keys.insert(key) {
                return Err(Error::DuplicateId {
                    id: key.to_owned(),
                    index: Some(i),
                });
            }
            validate_mem_type(key, &n.mem_type)?;
            let value = serde_json::to_value(&n.mem_type)
                .map_err(|e| Error::InvalidJson(format!("note {key:?}: {e}")))?;
            check_sizes(key, "mem_type", &value, cfg)?;
            check_list(key, "tags", &n.tags, cfg)?;
            if let MemoryType::Situation(Situation::SpecificSituation(s)) = &n.mem_type {
                if s.time_span.is_some_and(|t| t > self.at) {
                    return Err(Error::invalid_value(
                        key,
                        "mem_type.Situation.SpecificSituation.time_span",
                        "lies in the future",
                    ));
                }
            }
        }
        for (i, l) in self.links.iter().enumerate() {
            let label = format!("links[{i}]");
            if l.from.trim().is_empty() || l.to.trim().is_empty() {
                return Err(Error::invalid_value(&label, "from/to", "must not be empty"));
            }
            if l.from == l.to {
                return Err(Error::invalid_value(
                    &label,
                    "to",
                    "a note cannot link to itself",
                ));
            }
            if let Some(w) = l.intensity {
                validate_intensity(&label, w)?;
            }
            validate_link_type(&label, &l.link_type)?;
        }
        Ok(())
    }
}

fn limit(what: &str, count: usize, limit: usize) -> Result<()> {
    if count > limit {
        Err(Error::LimitExceeded {
            what: what.to_owned(),
            count,
            limit,
        })
    } else {
        Ok(())
    }
}

fn check_list(node: &str, field: &str, items: &[String], cfg: &ConsolidateConfig) -> Result<()> {
    if items.len() > cfg.max_list_len {
        return Err(Error::invalid_value(
            node,
            field,
            format!("more than {} entries", cfg.max_list_len),
        ));
    }
    for (i, s) in items.iter().enumerate() {
        if s.trim().is_empty() || s.chars().count() > cfg.max_text_chars {
            return Err(Error::invalid_value(
                node,
                &format!("{field}[{i}]"),
                format!("must be 1 to {} characters", cfg.max_text_chars),
            ));
        }
    }
    Ok(())
}

/// Every string and list of a payload within the size limits (one walk covers all fields).
fn check_sizes(
    node: &str,
    path: &str,
    v: &serde_json::Value,
    cfg: &ConsolidateConfig,
) -> Result<()> {
    use serde_json::Value;
    match v {
        Value::String(s) if s.chars().count() > cfg.max_text_chars => Err(Error::invalid_value(
            node,
            path,
            format!("longer than {} characters", cfg.max_text_chars),
        )),
        Value::Array(items) => {
            if items.len() > cfg.max_list_len {
                return Err(Error::invalid_value(
                    node,
                    path,
                    format!("more than {} entries", cfg.max_list_len),
                ));
            }
            for (i, x) in items.iter().enumerate() {
                check_sizes(node, &format!("{path}[{i}]"), x, cfg)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, x) in map {
                check_sizes(node, &format!("{path}.{k}"), x, cfg)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Endpoint kinds a change-set link's type allows (needs the graph, so checked while
/// applying, not in [`ChangeSet::validate`]).
pub(super) fn check_link_kinds(
    label: &str,
    from: Option<NodeKind>,
    to: Option<NodeKind>,
    link_type: &MemoryLinkType,
) -> Result<()> {
    let (Some(from), Some(to)) = (from, to) else {
        return Err(Error::NotFound(format!("{label}: endpoint")));
    };
    let ok = match link_type.kind() {
        LinkKind::Sem => true,
        LinkKind::Proc => to == NodeKind::Procedure && from != NodeKind::Procedure,
        LinkKind::SpecificToAbstract => {
            from == NodeKind::SpecificSituation && to == NodeKind::AbstractSituation
        }
        LinkKind::AbstractToSpecific => {
            from == NodeKind::AbstractSituation && to == NodeKind::SpecificSituation
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_value(
            label,
            "link_type",
            format!(
                "a {} link cannot go from a {} to a {}",
                link_type.kind().as_str(),
                from.as_str(),
                to.as_str()
            ),
        ))
    }
}
