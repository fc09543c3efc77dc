//! Graph JSON import and export (the seed's format: a top-level array of
//! `{id, tags, mem_type, mem_links}` with readable string ids).
//!
//! Import is all-or-nothing: the whole file is parsed and validated before a graph is returned,
//! so bad input never yields a half-loaded character. Errors name the node and the field.

use crate::error::{Error, Result};
use crate::graph::{validate_intensity, MemoryGraph};
use crate::model::IdMap;
use crate::model::*;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// Readable id of the character's self node; it is a core memory unless the file says otherwise.
pub const SELF_NODE_ID: &str = "sem_self";

/// Default size limit of one import (50 MB).
pub const DEFAULT_MAX_BYTES: u64 = 50_000_000;

/// How to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// When true (default) every link target must be in the file; when false, links to absent
    /// ids are buffered until those notes are inserted (partial loads).
    pub complete: bool,
    /// Inputs larger than this are refused before parsing.
    pub max_bytes: u64,
    /// Creation/access time for notes whose file entry has none.
    pub now: DateTime<Utc>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            complete: true,
            max_bytes: DEFAULT_MAX_BYTES,
            now: Utc::now(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    id: String,
    #[serde(default, deserialize_with = "null_default")]
    tags: Vec<String>,
    mem_type: MemoryType,
    #[serde(default, deserialize_with = "null_default")]
    mem_links: Vec<RawLink>,
    #[serde(default)]
    retrieval_count: u32,
    #[serde(default)]
    create_time: Option<String>,
    #[serde(default)]
    last_accessed_time: Option<String>,
    #[serde(default)]
    core: Option<bool>,
    // Note bodies (`note_to_value`) and export documents carry these: a note can be put as
    // it was read. `uuid`: the note's identity (default: derived from the readable id).
    #[serde(default)]
    uuid: Option<uuid::Uuid>,
    #[serde(default)]
    archived: Option<bool>,
}

/// A link as files write it: Graph JSON's `{from, to, intensity, link_type}` or the export
/// document's `{to, intensity, link_type}` (`from` optional; when given it must be the note
/// itself), with readable ids; `id` only when it is not the derived one (see [`link_id`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLink {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<String>,
    pub(crate) to: String,
    #[serde(default = "default_intensity")]
    pub(crate) intensity: f64,
    pub(crate) link_type: MemoryLinkType,
}

/// The id of the `ordinal`-th link of a list: the one given, else the derived one
/// ([`LinkId::derive`]), so files need not carry link ids.
pub(crate) fn link_id(
    given: Option<uuid::Uuid>,
    from: MemoryId,
    to: MemoryId,
    ordinal: usize,
) -> LinkId {
    given
        .map(LinkId)
        .unwrap_or_else(|| LinkId::derive(from, to, ordinal))
}

/// The id to write for the `ordinal`-th link of a list: none when a reader derives it anyway.
pub(crate) fn written_link_id(l: &MemoryLink, ordinal: usize) -> Option<uuid::Uuid> {
    (LinkId::derive(l.from, l.to, ordinal) != l.id).then_some(l.id.0)
}

fn default_intensity() -> f64 {
    DEFAULT_INTENSITY
}

/// Only the id of a node, to name the culprit when full parsing failed.
#[derive(Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<serde_json::Value>,
}

/// Imports a Graph JSON file. The size limit is checked on the file's metadata before reading.
pub fn import_file(
    character: &str,
    path: impl AsRef<Path>,
    opts: &ImportOptions,
) -> Result<MemoryGraph> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, &e))?;
    let size = file.metadata().map_err(|e| Error::io(path, &e))?.len();
    check_size(size, opts.max_bytes)?;
    let mut bytes = Vec::with_capacity(size as usize);
    // Read at most one byte past the limit: the file may have grown since stat.
    file.take(opts.max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, &e))?;
    import_bytes(character, &bytes, opts)
}

fn check_size(size: u64, limit: u64) -> Result<()> {
    if size > limit {
        Err(Error::TooLarge { size, limit })
    } else {
        Ok(())
    }
}

/// Parses ONE note in Graph JSON node shape (an object, as one element of a Graph JSON array;
/// links in Graph JSON shape `{from?, to, intensity, link_type}` or the export document's)
/// for `graph`'s character, with all of its outgoing links. Targets are readable ids or UUIDs
/// of notes of `graph` (or the note itself); another target is a
/// [`Error::MissingLinkTarget`] naming it as given. Same validation as an import.
///
/// Complexity: O(bytes + links).
pub fn parse_note(graph: &MemoryGraph, bytes: &[u8], max_bytes: u64) -> Result<MemoryNote> {
    let character = graph.character();
    check_size(bytes.len() as u64, max_bytes)?;
    let text = std::str::from_utf8(bytes).map_err(|e| Error::NotUtf8(e.valid_up_to()))?;
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Error::InvalidJson(e.to_string()))?;
    let Some(obj) = value.as_object_mut() else {
        return Err(Error::InvalidJson(
            "expected one note (a JSON object)".into(),
        ));
    };
    // Link targets name notes outside this one-note document: give them their UUIDs in the
    // graph so the import resolves them.
    let own = obj.get("id").and_then(|v| v.as_str()).map(str::to_owned);
    // Each link's target in file order (`None`: the note itself), to restore that order.
    let mut order: Vec<Option<MemoryId>> = Vec::new();
    if let Some(serde_json::Value::Array(links)) = obj.get_mut("mem_links") {
        for link in links.iter_mut() {
            let Some(to) = link.get_mut("to") else {
                continue;
            };
            let Some(t) = to.as_str() else { continue };
            if own.as_deref() == Some(t) {
                order.push(None);
                continue;
            }
            match graph.resolve(t) {
                Some(id) => {
                    order.push(Some(id));
                    *to = serde_json::Value::String(id.to_string());
                }
                None => {
                    return Err(Error::MissingLinkTarget {
                        node: own.unwrap_or_else(|| "(note)".into()),
                        target: t.to_owned(),
                    })
                }
            }
        }
    }
    let opts = ImportOptions {
        complete: false,
        max_bytes: u64::MAX,
        ..ImportOptions::default()
    };
    let doc = serde_json::Value::Array(vec![value]).to_string();
    let mut graph = import_bytes(character, doc.as_bytes(), &opts)?;
    let pending: Vec<MemoryLink> = graph.pending_links().cloned().collect();
    let id = graph
        .note_at(0)
        .map(|n| n.id)
        .ok_or_else(|| Error::InvalidJson("expected one note".into()))?;
    let mut note = graph
        .remove(&id)
        .ok_or_else(|| Error::InvalidJson("expected one note".into()))?;
    // Self-links were attached; the rest waited as pending links, grouped by target in no
    // particular order: put them back in file order.
    let mut by_target: IdMap<std::collections::VecDeque<MemoryLink>> = Default::default();
    for l in std::mem::take(&mut note.links).into_iter().chain(pending) {
        by_target.entry(l.to).or_default().push_back(l);
    }
    note.links = order
        .iter()
        .filter_map(|t| by_target.get_mut(&t.unwrap_or(id))?.pop_front())
        .collect();
    Ok(note)
}

/// Imports Graph JSON from memory.
///
/// Complexity: O(bytes + nodes + links).
pub fn import_bytes(character: &str, bytes: &[u8], opts: &ImportOptions) -> Result<MemoryGraph> {
    check_size(bytes.len() as u64, opts.max_bytes)?;
    let text = std::str::from_utf8(bytes).map_err(|e| Error::NotUtf8(e.valid_up_to()))?;
    if character.trim().is_empty() {
        return Err(Error::invalid_argument(
            "character",
            "must be a non-empty name",
        ));
    }
    let raw = parse_nodes(text)?;
    build_graph(character, raw, opts)
}

fn parse_nodes(text: &str) -> Result<Vec<RawNode>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed: std::result::Result<Vec<RawNode>, _> = serde_path_to_error::deserialize(&mut de);
    let nodes = match parsed {
        Ok(nodes) => nodes,
        Err(err) => return Err(describe_parse_error(text, err)),
    };
    de.end()
        .map_err(|e| Error::InvalidJson(format!("trailing characters: {e}")))?;
    Ok(nodes)
}

/// Turns a path-aware serde error into an error naming the node (by readable id when the
/// document is at least syntactically valid) and the field.
fn describe_parse_error(text: &str, err: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let path = err.path().to_string();
    let inner = err.into_inner();
    // serde_json reports an out-of-range number (1e999, i.e. infinite) as a syntax error,
    // but the path to it is known: name the node and field like any other bad value.
    let out_of_range = inner.is_syntax() && inner.to_string().starts_with("number out of range");
    if inner.is_eof() || (inner.is_syntax() && !out_of_range) {
        return Error::InvalidJson(format!("{inner}"));
    }
    // "[12].mem_type.Semantic.concept_type" → node #12, field "mem_type.Semantic.concept_type"
    let (index, field) = split_index(&path);
    let node = index
        .and_then(|i| {
            serde_json::from_str::<Vec<IdOnly>>(text)
                .ok()
                .and_then(|v| v.into_iter().nth(i))
                .and_then(|n| n.id)
                .map(|id| match id {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .or_else(|| Some(format!("#{i}")))
        })
        .unwrap_or_else(|| "(document)".to_owned());
    if out_of_range {
        return Error::InvalidValue {
            node,
            field,
            message: format!("must be a finite number ({inner})"),
        };
    }
    if field.ends_with("time_span") {
        return Error::InvalidTimestamp {
            node,
            field,
            value: inner.to_string(),
        };
    }
    Error::InvalidJson(format!("node {node:?} field {field}: {inner}"))
}

fn split_index(path: &str) -> (Option<usize>, String) {
    if let Some(rest) = path.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            let index = rest[..end].parse().ok();
            let field = rest[end + 1..].trim_start_matches('.').to_owned();
            return (index, field);
        }
    }
    (None, path.to_owned())
}

fn parse_time(node: &str, field: &str, value: &Option<String>) -> Result<Option<DateTime<Utc>>> {
    match value {
        None => Ok(None),
        Some(s) => DateTime::parse_from_rfc3339(s)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| Error::InvalidTimestamp {
                node: node.to_owned(),
                field: field.to_owned(),
                value: s.clone(),
            }),
    }
}

fn check_unit(node: &str, field: &str, v: f64) -> Result<()> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(Error::invalid_value(
            node,
            field,
            format!("must be a finite number in [0, 1], got {v}"),
        ))
    }
}

fn check_non_negative(node: &str, field: &str, v: f32) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid_value(
            node,
            field,
            format!("must be a finite number >= 0, got {v}"),
        ))
    }
}

fn check_non_empty(node: &str, field: &str, s: &str) -> Result<()> {
    if s.trim().is_empty() {
        Err(Error::invalid_value(node, field, "must not be empty"))
    } else {
        Ok(())
    }
}

fn check_event(node: &str, prefix: &str, e: &Event) -> Result<()> {
    check_non_negative(
        node,
        &format!("{prefix}.action_intensity"),
        e.action_intensity,
    )
}

/// Validates payload values that serde's types cannot express.
pub(crate) fn validate_mem_type(node: &str, mem_type: &MemoryType) -> Result<()> {
    match mem_type {
        MemoryType::Semantic(s) => check_non_empty(node, "mem_type.Semantic.content", &s.content),
        MemoryType::Procedure(p) => {
            check_non_empty(node, "mem_type.Procedure.action.content", &p.action.content)
        }
        MemoryType::Situation(Situation::SpecificSituation(s)) => {
            let base = "mem_type.Situation.SpecificSituation";
            check_non_empty(node, &format!("{base}.narrative"), &s.narrative)?;
            for (i, e) in s.context.emotions.iter().enumerate() {
                check_non_negative(
                    node,
                    &format!("{base}.context.emotions[{i}].intensity"),
                    e.intensity,
                )?;
            }
            for (i, e) in s.context.sensory_data.iter().enumerate() {
                check_non_negative(
                    node,
                    &format!("{base}.context.sensory_data[{i}].intensity"),
                    e.intensity,
                )?;
            }
            for (i, e) in s.context.event.iter().enumerate() {
                check_event(node, &format!("{base}.context.event[{i}]"), e)?;
            }
            Ok(())
        }
        MemoryType::Situation(Situation::AbstractSituation(a)) => match a {
            AbstractSituation::Event(e) => {
                check_event(node, "mem_type.Situation.AbstractSituation.Event", e)
            }
            _ => Ok(()),
        },
    }
}

/// Validates a link's typed payload.
pub(crate) fn validate_link_type(node: &str, link_type: &MemoryLinkType) -> Result<()> {
    match link_type {
        MemoryLinkType::Sem(s) => check_unit(
            node,
            "mem_links.link_type.Sem.confidence",
            f64::from(s.confidence),
        ),
        MemoryLinkType::Proc(p) => check_unit(node, "mem_links.link_type.Proc.prob", p.prob()),
        MemoryLinkType::Situation(_) => Ok(()),
    }
}

/// Names the link by its position: `mem_links.x` → `mem_links[i].x`, so a node with many
/// links says which one is wrong.
fn at_link(e: Error, ordinal: usize) -> Error {
    match e {
        Error::InvalidValue {
            node,
            field,
            message,
        } => Error::InvalidValue {
            field: match field.strip_prefix("mem_links") {
                Some(rest) => format!("mem_links[{ordinal}]{rest}"),
                None => field,
            },
            node,
            message,
        },
        other => other,
    }
}

fn build_graph(character: &str, raw: Vec<RawNode>, opts: &ImportOptions) -> Result<MemoryGraph> {
    // Pass 1: ids, so links can resolve forward references.
    let mut ids: HashMap<&str, MemoryId> = HashMap::with_capacity(raw.len());
    for (i, n) in raw.iter().enumerate() {
        check_non_empty(&format!("#{i}"), "id", &n.id)?;
        if n.archived == Some(true) {
            return Err(Error::invalid_value(
                &n.id,
                "archived",
                "only a character export document can hold archived notes",
            ));
        }
        let uuid = n
            .uuid
            .map(MemoryId)
            .unwrap_or_else(|| MemoryId::derive(character, &n.id));
        if ids.insert(n.id.as_str(), uuid).is_some() {
            return Err(Error::DuplicateId {
                id: n.id.clone(),
                index: Some(i),
            });
        }
    }
    let resolve = |s: &str| -> Option<MemoryId> {
        ids.get(s)
            .copied()
            .or_else(|| uuid::Uuid::parse_str(s).ok().map(MemoryId))
    };

    // Pass 2: validate and convert every note before touching the graph.
    let mut notes = Vec::with_capacity(raw.len());
    for n in &raw {
        let node = n.id.as_str();
        validate_mem_type(node, &n.mem_type)?;
        let create = parse_time(node, "create_time", &n.create_time)?.unwrap_or(opts.now);
        let access =
            parse_time(node, "last_accessed_time", &n.last_accessed_time)?.unwrap_or(create);
        if access < create {
            return Err(Error::invalid_value(
                node,
                "last_accessed_time",
                "must not be earlier than create_time",
            ));
        }
        let from = ids[node];
        let mut links = Vec::with_capacity(n.mem_links.len());
        for (ordinal, l) in n.mem_links.iter().enumerate() {
            if let Some(given) = &l.from {
                if *given != n.id && resolve(given) != Some(from) {
                    return Err(Error::invalid_value(
                        node,
                        &format!("mem_links[{ordinal}].from"),
                        format!("must equal the node id, got {given:?}"),
                    ));
                }
            }
            validate_intensity(node, l.intensity)
                .and_then(|()| validate_link_type(node, &l.link_type))
                .map_err(|e| at_link(e, ordinal))?;
            let to = match (ids.get(l.to.as_str()), resolve(&l.to)) {
                (Some(id), _) => *id,
                (None, Some(id)) if !opts.complete => id,
                _ if opts.complete => {
                    return Err(Error::MissingLinkTarget {
                        node: n.id.clone(),
                        target: l.to.clone(),
                    })
                }
                _ => {
                    return Err(Error::invalid_value(
                        node,
                        &format!("mem_links[{ordinal}].to"),
                        format!("{:?} is neither an id in this file nor a UUID", l.to),
                    ))
                }
            };
            links.push(MemoryLink {
                id: link_id(l.id, from, to, ordinal),
                from,
                to,
                intensity: l.intensity,
                link_type: l.link_type.clone(),
            });
        }
        notes.push(MemoryNote {
            id: from,
            readable_id: n.id.clone(),
            tags: n.tags.clone(),
            retrieval_count: n.retrieval_count,
            create_time: create,
            last_accessed_time: access,
            core: n.core.unwrap_or(n.id == SELF_NODE_ID),
            mem_type: n.mem_type.clone(),
            links,
        });
    }

    let mut graph = MemoryGraph::new(character);
    for note in notes {
        graph.insert(note)?;
    }
    Ok(graph)
}

#[derive(Serialize)]
struct ExportNode<'a> {
    id: &'a str,
    tags: &'a [String],
    mem_type: &'a MemoryType,
    mem_links: Vec<RawLink>,
    retrieval_count: u32,
    create_time: String,
    last_accessed_time: String,
    core: bool,
}

fn export_node<'a>(graph: &MemoryGraph, note: &'a MemoryNote) -> ExportNode<'a> {
    let pending = graph.pending_links().filter(|l| l.from == note.id);
    ExportNode {
        id: &note.readable_id,
        tags: &note.tags,
        mem_type: &note.mem_type,
        mem_links: note
            .links
            .iter()
            .chain(pending)
            .map(|l| RawLink {
                id: Some(l.id.0),
                from: Some(note.readable_id.clone()),
                to: graph.readable_of(&l.to),
                intensity: l.intensity,
                link_type: l.link_type.clone(),
            })
            .collect(),
        retrieval_count: note.retrieval_count,
        create_time: note.create_time.to_rfc3339(),
        last_accessed_time: note.last_accessed_time.to_rfc3339(),
        core: note.core,
    }
}

/// One note as a Graph JSON node object, plus its `uuid`.
pub fn note_to_value(graph: &MemoryGraph, note: &MemoryNote) -> Result<serde_json::Value> {
    let mut value = serde_json::to_value(export_node(graph, note))
        .map_err(|e| Error::InvalidJson(e.to_string()))?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("uuid".into(), note.id.to_string().into());
    }
    Ok(value)
}

/// Exports the whole graph as Graph JSON (readable ids, every field, buffered links included),
/// so that importing the output restores the same graph.
///
/// Complexity: O(nodes + links).
pub fn export_json(graph: &MemoryGraph, pretty: bool) -> Result<String> {
    let nodes: Vec<ExportNode<'_>> = graph.notes().map(|n| export_node(graph, n)).collect();
    let out = if pretty {
        serde_json::to_string_pretty(&nodes)
    } else {
        serde_json::to_string(&nodes)
    };
    out.map_err(|e| Error::InvalidJson(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"[
      {"id":"sem_a","tags":["甲"],"mem_type":{"Semantic":{"content":"甲","aliases":["A"],"concept_type":"Entity","description":"d"}},
       "mem_links":[{"from":"sem_a","to":"sit_b","intensity":0.8,"link_type":{"Sem":{"verb":"参与","confidence":0.7}}}]},
      {"id":"sit_b","tags":[],"mem_type":{"Situation":{"SpecificSituation":{"narrative":"乙","time_span":"2026-06-01T08:00:00Z","context":{"location":null,"participants":[],"emotions":[{"name":"喜","intensity":0.5}],"sensory_data":[],"environment":{"atmosphere":"","tone":""},"event":[]}}}},
       "mem_links":[{"from":"sit_b","to":"proc_c","intensity":0.9,"link_type":{"Proc":{"prob":0.6}}}]},
      {"id":"proc_c","tags":[],"mem_type":{"Procedure":{"action":{"content":"笑","action_type":{"Skill":{}}}}},"mem_links":[]}
    ]"#;

    fn opts() -> ImportOptions {
        ImportOptions {
            now: DateTime::parse_from_rfc3339("2026-07-01T00:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            ..ImportOptions::default()
        }
    }

    #[test]
    fn imports_and_counts() {
        let g = import_bytes("c", SMALL.as_bytes(), &opts()).unwrap();
        let s = g.stats();
        assert_eq!((s.nodes, s.links, s.pending_links), (3, 2, 0));
        assert_eq!(s.links_by_kind["proc"], 1);
        assert_eq!(s.nodes_by_kind["specific_situation"], 1);
    }

    #[test]
    fn export_import_round_trips_identically() {
        let g = import_bytes("c", SMALL.as_bytes(), &opts()).unwrap();
        let once = export_json(&g, false).unwrap();
        let g2 = import_bytes("c", once.as_bytes(), &opts()).unwrap();
        assert_eq!(once, export_json(&g2, false).unwrap());
        for (a, b) in g.notes().zip(g2.notes()) {
            assert_eq!(a, b);
        }
    }

    fn err_of(json: &str) -> Error {
        import_bytes("c", json.as_bytes(), &opts()).unwrap_err()
    }

    #[test]
    fn bad_inputs_name_node_and_field() {
        let dup = SMALL.replace("\"id\":\"sit_b\"", "\"id\":\"sem_a\"");
        assert!(
            matches!(err_of(&dup), Error::DuplicateId { ref id, index: Some(1) } if id == "sem_a")
        );

        let missing = SMALL.replace("\"to\":\"proc_c\"", "\"to\":\"proc_x\"");
        let e = err_of(&missing);
        assert!(matches!(e, Error::MissingLinkTarget { .. }), "{e}");
        assert!(e.to_string().contains("sit_b") && e.to_string().contains("proc_x"));

        let tag = SMALL.replace("\"Entity\"", "\"Person\"");
        let e = err_of(&tag);
        assert_eq!(e.kind(), "invalid_json");
        assert!(e.to_string().contains("sem_a"), "{e}");
        assert!(e.to_string().contains("concept_type"), "{e}");

        let neg = SMALL.replace("\"intensity\":0.8", "\"intensity\":-0.8");
        assert_eq!(err_of(&neg).kind(), "invalid_value");

        let prob = SMALL.replace("\"prob\":0.6", "\"prob\":1.6");
        let e = err_of(&prob);
        assert!(e.to_string().contains("Proc.prob"), "{e}");

        let ts = SMALL.replace("2026-06-01T08:00:00Z", "yesterday");
        let e = err_of(&ts);
        assert_eq!(e.kind(), "invalid_timestamp", "{e}");
        assert!(e.to_string().contains("sit_b"), "{e}");

        let trunc = &SMALL[..SMALL.len() / 2];
        assert_eq!(err_of(trunc).kind(), "invalid_json");

        let huge = SMALL.replace("\"intensity\":0.8", "\"intensity\":1e999");
        let e = err_of(&huge);
        assert_eq!(e.kind(), "invalid_value", "{e}");
        assert!(e.to_string().contains("sem_a"), "{e}");
        assert!(e.to_string().contains("intensity"), "{e}");

        let e = err_of(&neg);
        assert!(e.to_string().contains("mem_links[0].intensity"), "{e}");
        let e = err_of(&prob);
        assert!(
            e.to_string().contains("mem_links[0].link_type.Proc.prob"),
            "{e}"
        );

        let neg_prob = SMALL.replace("\"prob\":0.6", "\"prob\":-0.1");
        assert_eq!(err_of(&neg_prob).kind(), "invalid_value");
        let conf = SMALL.replace("\"confidence\":0.7", "\"confidence\":2.5");
        let e = err_of(&conf);
        assert!(e.to_string().contains("Sem.confidence"), "{e}");

        let emotion = SMALL.replace("\"intensity\":0.5", "\"intensity\":-0.5");
        let e = err_of(&emotion);
        assert_eq!(e.kind(), "invalid_value", "{e}");
        assert!(e.to_string().contains("emotions[0].intensity"), "{e}");

        let bad_create = SMALL.replace(
            "\"id\":\"proc_c\",",
            "\"id\":\"proc_c\",\"create_time\":\"31/12/2026\",",
        );
        let e = err_of(&bad_create);
        assert_eq!(e.kind(), "invalid_timestamp", "{e}");
        assert!(e.to_string().contains("proc_c") && e.to_string().contains("create_time"));

        let bad_bytes = [b"[".as_slice(), &[0xff, 0xfe], b"]"].concat();
        assert!(matches!(
            import_bytes("c", &bad_bytes, &opts()),
            Err(Error::NotUtf8(1))
        ));

        let small_limit = ImportOptions {
            max_bytes: 10,
            ..opts()
        };
        assert!(matches!(
            import_bytes("c", SMALL.as_bytes(), &small_limit),
            Err(Error::TooLarge { .. })
        ));

        let create_after = SMALL.replace(
            "\"id\":\"proc_c\",",
            "\"id\":\"proc_c\",\"create_time\":\"2026-01-02T00:00:00Z\",\"last_accessed_time\":\"2026-01-01T00:00:00Z\",",
        );
        assert!(err_of(&create_after)
            .to_string()
            .contains("last_accessed_time"));

        let unknown_field = SMALL.replace("\"tags\":[\"甲\"]", "\"tagz\":[\"甲\"]");
        assert_eq!(err_of(&unknown_field).kind(), "invalid_json");
    }

    #[test]
    fn a_200_mb_file_is_refused_before_it_is_read() {
        let path = std::env::temp_dir().join(format!("soulmem-huge-{}.json", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: no 200 MB are written, but the size is what the limit sees.
        file.set_len(200_000_000).unwrap();
        let err = import_file("c", &path, &opts()).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(
                err,
                Error::TooLarge {
                    size: 200_000_000,
                    limit: DEFAULT_MAX_BYTES
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn only_create_time_is_not_a_time_conflict() {
        // The seed's builder rejected this (None < Some); we must not.
        let json = SMALL.replace(
            "\"id\":\"proc_c\",",
            "\"id\":\"proc_c\",\"create_time\":\"2026-01-02T00:00:00Z\",",
        );
        let g = import_bytes("c", json.as_bytes(), &opts()).unwrap();
        let n = g.get_by_readable("proc_c").unwrap();
        assert_eq!(n.create_time, n.last_accessed_time);
    }

    #[test]
    fn incomplete_imports_buffer_uuid_targets() {
        let target = MemoryId::derive("c", "elsewhere").to_string();
        let json = SMALL.replace("\"to\":\"proc_c\"", &format!("\"to\":\"{target}\""));
        let partial = ImportOptions {
            complete: false,
            ..opts()
        };
        let g = import_bytes("c", json.as_bytes(), &partial).unwrap();
        assert_eq!(g.stats().pending_links, 1);
        // The buffered link survives export/import.
        let out = export_json(&g, false).unwrap();
        let g2 = import_bytes("c", out.as_bytes(), &partial).unwrap();
        assert_eq!(g2.stats().pending_links, 1);
        assert_eq!(err_of(&json).kind(), "missing_link_target");
    }

    #[test]
    fn self_node_is_core_by_default() {
        let json = SMALL.replace("sem_a", SELF_NODE_ID);
        let g = import_bytes("c", json.as_bytes(), &opts()).unwrap();
        assert!(g.get_by_readable(SELF_NODE_ID).unwrap().core);
        assert!(!g.get_by_readable("sit_b").unwrap().core);
    }
}
