//! The character export document ([`Store::export_character`]) and its import
//! ([`Store::import_character`]): one JSON document with everything a character's store holds.
//!
//! Version 2 (written since issue 18) names every note by its readable id: link targets
//! (`mem_links[].to`, links in the export shape `{to, intensity, link_type}` or Graph JSON's
//! `{from, to, …}`), orphan links, records, feedback, forgetting state and embeddings. A
//! reference to a note the document does not hold (an orphan link's absent end, a record kept
//! for a note never stored) is that note's UUID text. Notes keep their `uuid` (optional on
//! import: derived from the readable id) so export → import → export is byte-identical; a link
//! carries `id` only when it is not [`LinkId::derive`] of its ends and its position in its
//! list, which is what an import derives for a link without one (nothing outside the links
//! table references link ids). A note may omit `tags`, `retrieval_count`, the times, `core`,
//! `archived` and `mem_links`, so a hand-written document imports. Version 1 (UUID references)
//! still imports: it is rewritten into version 2 first, then imported the same way.
//!
//! An import is checked as a whole before anything is written — the same checks a note put
//! and a Graph JSON import make (ids and UUIDs unique, links to notes of the document, unique
//! link ids, enum tags, ranges) plus the references of the side tables (window, records,
//! feedback, forgetting state, embeddings) — so a refused document changes nothing.

use super::*;
use crate::import::{link_id, written_link_id, RawLink, SELF_NODE_ID};
use crate::model::{IdMap, IdSet};

impl Store {
    /// Everything of the character as one JSON document (version [`EXPORT_VERSION`], see the
    /// module docs): all notes (archived included, with links), window, summary, retrieval
    /// records, forgetting state, embeddings and meta. [`Store::import_character`] restores it
    /// exactly.
    ///
    /// Complexity: O(file contents); the document is held in memory.
    pub fn export_character(&self) -> Result<serde_json::Value> {
        let notes = self.query_notes("")?;
        let mut links = self.query_links("")?;
        let readable: IdMap<String> = notes
            .iter()
            .map(|(n, _)| (n.id, n.readable_id.clone()))
            .collect();
        let name = |id: &MemoryId| readable.get(id).cloned().unwrap_or_else(|| id.to_string());
        // Links waiting for a note that is not stored (a partial Graph JSON import) and links
        // whose source is not stored travel apart, so `mem_links` always reach a note.
        let mut orphans: Vec<MemoryLink> = Vec::new();
        let notes: Vec<ExportNote> = notes
            .into_iter()
            .map(|(n, archived)| {
                let mut kept = Vec::new();
                for l in links.remove(&n.id).unwrap_or_default() {
                    if readable.contains_key(&l.to) {
                        kept.push(l);
                    } else {
                        orphans.push(l);
                    }
                }
                ExportNote {
                    uuid: Some(n.id.0),
                    tags: n.tags,
                    mem_type: n.mem_type,
                    retrieval_count: n.retrieval_count,
                    create_time: Some(n.create_time),
                    last_accessed_time: Some(n.last_accessed_time),
                    core: Some(n.core),
                    archived,
                    mem_links: kept
                        .iter()
                        .enumerate()
                        .map(|(j, l)| RawLink {
                            id: written_link_id(l, j),
                            from: None,
                            to: name(&l.to),
                            intensity: l.intensity,
                            link_type: l.link_type.clone(),
                        })
                        .collect(),
                    id: n.readable_id,
                }
            })
            .collect();
        orphans.extend(links.into_values().flatten());
        orphans.sort_by_key(|l| l.id);
        let orphan_links = orphans
            .iter()
            .enumerate()
            .map(|(k, l)| RawLink {
                id: written_link_id(l, k),
                from: Some(name(&l.from)),
                to: name(&l.to),
                intensity: l.intensity,
                link_type: l.link_type.clone(),
            })
            .collect();
        let window = self
            .window()?
            .into_iter()
            .map(|(seq, m)| ExportMessage {
                seq,
                role: m.role,
                text: m.text,
                at: m.at,
                tagged: m.tagged,
            })
            .collect();
        let records = self
            .records_where("", None)?
            .into_iter()
            .map(|(node, at)| ExportRecord {
                node: name(&node),
                at,
            })
            .collect();
        let forget = self
            .forget_states()?
            .into_iter()
            .map(|(node, state)| ExportForget {
                node: name(&node),
                missing_degree: state.missing_degree,
                band: state.band,
                revised_text: state.revised_text,
                original_text: state.original_text,
                updated_at: state.updated_at,
            })
            .collect();
        let feedback = self
            .feedback()?
            .into_iter()
            .map(|(node, value, at)| ExportFeedback {
                node: name(&node),
                value,
                at,
            })
            .collect();
        let embeddings = self
            .all_embeddings()?
            .into_iter()
            .map(|e| ExportEmbedding {
                node: name(&MemoryId(e.node)),
                model: e.model,
                text_hash: e.text_hash,
                vec: e.vec,
            })
            .collect();
        let mut meta = self.all_meta()?;
        meta.retain(|k, _| k != META_CHARACTER && k != META_SUMMARY);
        let doc = ExportDoc {
            format: EXPORT_FORMAT.into(),
            format_version: EXPORT_VERSION,
            character: self.character.clone(),
            notes,
            orphan_links,
            window,
            summary: self.summary()?,
            records,
            forget,
            feedback,
            embeddings,
            meta,
        };
        serde_json::to_value(doc).map_err(|e| Error::InvalidJson(e.to_string()))
    }

    /// Replaces the whole store content with an [`Store::export_character`] document (version
    /// 1 or 2), in one transaction. The document must belong to this store's character.
    /// Everything is parsed and validated before anything is written.
    pub fn import_character(&mut self, value: &serde_json::Value) -> Result<()> {
        let header: DocHeader = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::InvalidJson(format!("{}: {}", e.path(), e.inner())))?;
        if header.format != EXPORT_FORMAT || !(1..=EXPORT_VERSION).contains(&header.format_version)
        {
            return Err(Error::InvalidJson(format!(
                "expected format {EXPORT_FORMAT:?} version 1 to {EXPORT_VERSION}, got {:?} version {}",
                header.format, header.format_version
            )));
        }
        let doc: ExportDoc = if header.format_version == 1 {
            let v1: ExportDocV1 = serde_path_to_error::deserialize(value)
                .map_err(|e| Error::InvalidJson(format!("{}: {}", e.path(), e.inner())))?;
            v1_to_v2(v1)
        } else {
            serde_path_to_error::deserialize(value)
                .map_err(|e| Error::InvalidJson(format!("{}: {}", e.path(), e.inner())))?
        };
        if doc.character != self.character {
            return Err(Error::invalid_argument(
                "character",
                format!(
                    "document of {:?} imported into the store of {:?}",
                    doc.character, self.character
                ),
            ));
        }
        let doc = resolve_document(doc, Utc::now())?;
        for (note, _) in &doc.notes {
            validate_note(note)?;
        }
        for l in &doc.orphans {
            validate_link(l)?;
        }
        self.write_rows(|c, p| {
            c.execute_batch(
                "DELETE FROM notes; DELETE FROM links; DELETE FROM embeddings;
                 DELETE FROM records; DELETE FROM forget_state; DELETE FROM window;
                 DELETE FROM feedback; DELETE FROM meta WHERE key <> 'character';",
            )
            .map_err(|e| db_err(p, e))?;
            for (n, archived) in &doc.notes {
                write_note(c, p, n, n.links.iter(), *archived)?;
            }
            for l in &doc.orphans {
                insert_link(c, p, l, None)?;
            }
            for m in &doc.window {
                c.execute(
                    "INSERT INTO window (seq, role, text, at, tagged) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![m.seq, m.role, m.text, ts(&m.at), m.tagged],
                )
                .map_err(|e| db_err(p, e))?;
            }
            if let Some(s) = &doc.summary {
                set_meta_tx(c, p, META_SUMMARY, s)?;
            }
            insert_records(c, p, &doc.records)?;
            for (id, value, at) in &doc.feedback {
                insert_feedback(c, p, id, *value, at)?;
            }
            for (id, state) in &doc.forget {
                set_forget_tx(c, p, &id.to_string(), state)?;
            }
            for (id, model, hash, vec) in &doc.embeddings {
                let bytes: Vec<u8> = vec.iter().flat_map(|f| f.to_le_bytes()).collect();
                c.execute(
                    super::embeddings::PUT_EMBEDDING,
                    params![id.to_string(), model, &hash[..], vec.len() as i64, bytes],
                )
                .map_err(|e| db_err(p, e))?;
            }
            for (k, v) in &doc.meta {
                if k != META_CHARACTER && k != META_SUMMARY {
                    set_meta_tx(c, p, k, v)?;
                }
            }
            Ok(())
        })
    }

    fn all_embeddings(&self) -> Result<Vec<ExportEmbedding<uuid::Uuid>>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT note_id, model, text_hash, vec FROM embeddings ORDER BY note_id, model",
            )
            .map_err(|e| db_err(&self.path, e))?;
        let rows: Vec<(String, String, Vec<u8>, Vec<u8>)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        rows.into_iter()
            .map(|(id, model, hash, vec)| {
                Ok(ExportEmbedding {
                    node: parse_id(&self.path, &id)?,
                    model,
                    text_hash: hash.iter().map(|b| format!("{b:02x}")).collect(),
                    vec: decode_vec(&self.path, &vec)?,
                })
            })
            .collect()
    }

    fn all_meta(&self) -> Result<std::collections::BTreeMap<String, String>> {
        let mut st = self
            .conn
            .prepare("SELECT key, value FROM meta")
            .map_err(|e| db_err(&self.path, e))?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        Ok(rows)
    }
}

/// A version-2 document with every reference resolved to a note id and every default
/// filled in: what the import writes.
struct Resolved {
    notes: Vec<(MemoryNote, bool)>,
    orphans: Vec<MemoryLink>,
    window: Vec<ExportMessage>,
    summary: Option<String>,
    records: Vec<(MemoryId, DateTime<Utc>)>,
    forget: Vec<(MemoryId, ForgetState)>,
    feedback: Vec<(MemoryId, i8, DateTime<Utc>)>,
    embeddings: Vec<(MemoryId, String, [u8; 32], Vec<f32>)>,
    meta: std::collections::BTreeMap<String, String>,
}

/// Checks a whole export document before anything is written and resolves its references:
/// what note puts and Graph JSON import refuse (duplicate UUIDs or readable ids, `mem_links`
/// to notes the document does not have, a `from` that is not the note, duplicate link ids,
/// out-of-range values), plus references of orphan links and side rows that are neither a
/// readable id of the document nor a UUID. Links may point at archived notes (they are in the
/// document); links waiting for an absent note travel in `orphan_links`, declared as detached,
/// and stay detached after import. Side rows may name notes the document lacks (by UUID).
/// `now` is the creation time of notes that give none.
///
/// Complexity: O(notes + links + side rows).
fn resolve_document(doc: ExportDoc, now: DateTime<Utc>) -> Result<Resolved> {
    let character = doc.character.as_str();
    let mut uuids: IdSet = IdSet::with_capacity_and_hasher(doc.notes.len(), Default::default());
    let mut readable: HashMap<&str, MemoryId> = HashMap::with_capacity(doc.notes.len());
    for (i, n) in doc.notes.iter().enumerate() {
        if n.id.trim().is_empty() {
            return Err(Error::invalid_value(
                &format!("notes[{i}]"),
                "id",
                "must not be empty",
            ));
        }
        let uuid = note_uuid(character, n);
        if !uuids.insert(uuid) {
            return Err(Error::DuplicateField {
                node: n.id.clone(),
                field: "uuid".into(),
                value: uuid.to_string(),
            });
        }
        if readable.insert(&n.id, uuid).is_some() {
            return Err(Error::DuplicateId {
                id: n.id.clone(),
                index: Some(i),
            });
        }
    }
    // A readable id of the document first, then any UUID.
    let resolve = |s: &str| -> Option<MemoryId> {
        readable
            .get(s)
            .copied()
            .or_else(|| uuid::Uuid::parse_str(s).ok().map(MemoryId))
    };
    let side_ref = |row: String, s: &str| -> Result<MemoryId> {
        resolve(s).ok_or_else(|| {
            Error::invalid_value(
                &row,
                "node",
                format!("{s:?} is neither a note id of the document nor a UUID"),
            )
        })
    };
    let mut link_ids: HashSet<LinkId> = HashSet::new();
    let mut unique_link = |node: &str, field: String, id: LinkId| {
        if link_ids.insert(id) {
            Ok(())
        } else {
            Err(Error::DuplicateField {
                node: node.to_owned(),
                field,
                value: id.to_string(),
            })
        }
    };
    let mut notes = Vec::with_capacity(doc.notes.len());
    for n in &doc.notes {
        let id = note_uuid(character, n);
        let mut links = Vec::with_capacity(n.mem_links.len());
        for (j, l) in n.mem_links.iter().enumerate() {
            if let Some(from) = &l.from {
                if resolve(from) != Some(id) {
                    return Err(Error::invalid_value(
                        &n.id,
                        &format!("mem_links[{j}].from"),
                        format!("must be the note itself, got {from:?}"),
                    ));
                }
            }
            let to = resolve(&l.to)
                .filter(|t| uuids.contains(t))
                .ok_or_else(|| Error::MissingLinkTarget {
                    node: n.id.clone(),
                    target: l.to.clone(),
                })?;
            let link = link_id(l.id, id, to, j);
            unique_link(&n.id, format!("mem_links[{j}].id"), link)?;
            links.push(MemoryLink {
                id: link,
                from: id,
                to,
                intensity: l.intensity,
                link_type: l.link_type.clone(),
            });
        }
        let create = n.create_time.unwrap_or(now);
        notes.push((
            MemoryNote {
                id,
                readable_id: n.id.clone(),
                tags: n.tags.clone(),
                retrieval_count: n.retrieval_count,
                create_time: create,
                last_accessed_time: n.last_accessed_time.unwrap_or(create),
                core: n.core.unwrap_or(n.id == SELF_NODE_ID),
                mem_type: n.mem_type.clone(),
                links,
            },
            n.archived,
        ));
    }
    let mut orphans = Vec::with_capacity(doc.orphan_links.len());
    for (k, l) in doc.orphan_links.iter().enumerate() {
        let row = format!("orphan_links[{k}]");
        let end = |field: &str, s: Option<&str>| -> Result<MemoryId> {
            s.and_then(resolve).ok_or_else(|| {
                Error::invalid_value(
                    &row,
                    field,
                    format!("{s:?} is neither a note id of the document nor a UUID"),
                )
            })
        };
        let (from, to) = (end("from", l.from.as_deref())?, end("to", Some(&l.to))?);
        let link = link_id(l.id, from, to, k);
        unique_link(&row, "id".into(), link)?;
        orphans.push(MemoryLink {
            id: link,
            from,
            to,
            intensity: l.intensity,
            link_type: l.link_type.clone(),
        });
    }
    let mut records = Vec::with_capacity(doc.records.len());
    for (i, r) in doc.records.iter().enumerate() {
        records.push((side_ref(format!("records[{i}]"), &r.node)?, r.at));
    }
    let mut feedback = Vec::with_capacity(doc.feedback.len());
    for (i, f) in doc.feedback.iter().enumerate() {
        let row = format!("feedback[{i}]");
        if f.value != 1 && f.value != -1 {
            return Err(Error::invalid_value(
                &row,
                "value",
                format!("must be +1 or -1, got {}", f.value),
            ));
        }
        feedback.push((side_ref(row, &f.node)?, f.value, f.at));
    }
    let mut forget = Vec::with_capacity(doc.forget.len());
    for (i, f) in doc.forget.iter().enumerate() {
        let row = format!("forget[{i}]");
        if !(f.missing_degree.is_finite() && (0.0..=1.0).contains(&f.missing_degree)) {
            return Err(Error::invalid_value(
                &row,
                "missing_degree",
                format!(
                    "must be a finite number in [0, 1], got {}",
                    f.missing_degree
                ),
            ));
        }
        let state = ForgetState {
            missing_degree: f.missing_degree,
            band: f.band,
            revised_text: f.revised_text.clone(),
            original_text: f.original_text.clone(),
            updated_at: f.updated_at,
        };
        forget.push((side_ref(row, &f.node)?, state));
    }
    let mut dims: HashMap<&str, usize> = HashMap::new();
    let mut embeddings = Vec::with_capacity(doc.embeddings.len());
    for (i, e) in doc.embeddings.iter().enumerate() {
        let row = format!("embeddings[{i}]");
        let Some(hash) = decode_hex32(&e.text_hash) else {
            return Err(Error::invalid_value(
                &row,
                "text_hash",
                "must be 64 hex digits",
            ));
        };
        if e.vec.is_empty() || e.vec.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid_value(
                &row,
                "vec",
                "must be a non-empty list of finite numbers",
            ));
        }
        let dim = *dims.entry(&e.model).or_insert(e.vec.len());
        if dim != e.vec.len() {
            return Err(Error::invalid_value(
                &row,
                "vec",
                format!(
                    "has {} dimensions, other vectors of {:?} have {dim}",
                    e.vec.len(),
                    e.model
                ),
            ));
        }
        let node = side_ref(row, &e.node)?;
        embeddings.push((node, e.model.clone(), hash, e.vec.clone()));
    }
    let mut seqs: HashSet<i64> = HashSet::with_capacity(doc.window.len());
    for (i, m) in doc.window.iter().enumerate() {
        let row = format!("window[{i}]");
        if m.role != "user" && m.role != "assistant" {
            return Err(Error::invalid_value(
                &row,
                "role",
                format!("must be \"user\" or \"assistant\", got {:?}", m.role),
            ));
        }
        if m.seq <= 0 || !seqs.insert(m.seq) {
            return Err(Error::invalid_value(
                &row,
                "seq",
                format!("must be a positive number used once, got {}", m.seq),
            ));
        }
    }
    Ok(Resolved {
        notes,
        orphans,
        window: doc.window,
        summary: doc.summary,
        records,
        forget,
        feedback,
        embeddings,
        meta: doc.meta,
    })
}

/// The UUID of a document note: its `uuid`, else derived from its readable id.
fn note_uuid(character: &str, n: &ExportNote) -> MemoryId {
    n.uuid
        .map(MemoryId)
        .unwrap_or_else(|| MemoryId::derive(character, &n.id))
}

/// Rewrites a version-1 document (UUID references) as version 2: references to notes of the
/// document become their readable ids, others stay UUID text; link ids are kept.
/// Complexity: O(document).
fn v1_to_v2(v1: ExportDocV1) -> ExportDoc {
    let names: HashMap<uuid::Uuid, String> =
        v1.notes.iter().map(|n| (n.uuid, n.id.clone())).collect();
    let name = |u: &uuid::Uuid| names.get(u).cloned().unwrap_or_else(|| u.to_string());
    ExportDoc {
        format: v1.format,
        format_version: EXPORT_VERSION,
        character: v1.character,
        notes: v1
            .notes
            .into_iter()
            .map(|n| ExportNote {
                uuid: Some(n.uuid),
                mem_links: n
                    .mem_links
                    .into_iter()
                    .map(|l| RawLink {
                        id: Some(l.id),
                        from: None,
                        to: name(&l.to),
                        intensity: l.intensity,
                        link_type: l.link_type,
                    })
                    .collect(),
                id: n.id,
                tags: n.tags,
                mem_type: n.mem_type,
                retrieval_count: n.retrieval_count,
                create_time: Some(n.create_time),
                last_accessed_time: Some(n.last_accessed_time),
                core: Some(n.core),
                archived: n.archived,
            })
            .collect(),
        orphan_links: v1
            .orphan_links
            .into_iter()
            .map(|l| RawLink {
                id: Some(l.id),
                from: Some(name(&l.from)),
                to: name(&l.to),
                intensity: l.intensity,
                link_type: l.link_type,
            })
            .collect(),
        window: v1.window,
        summary: v1.summary,
        records: v1
            .records
            .into_iter()
            .map(|r| ExportRecord {
                node: name(&r.node),
                at: r.at,
            })
            .collect(),
        forget: v1
            .forget
            .into_iter()
            .map(|f| ExportForget {
                node: name(&f.node),
                missing_degree: f.missing_degree,
                band: f.band,
                revised_text: f.revised_text,
                original_text: f.original_text,
                updated_at: f.updated_at,
            })
            .collect(),
        feedback: v1
            .feedback
            .into_iter()
            .map(|f| ExportFeedback {
                node: name(&f.node),
                value: f.value,
                at: f.at,
            })
            .collect(),
        embeddings: v1
            .embeddings
            .into_iter()
            .map(|e| ExportEmbedding {
                node: name(&e.node),
                model: e.model,
                text_hash: e.text_hash,
                vec: e.vec,
            })
            .collect(),
        meta: v1.meta,
    }
}

/// Just the format and version, read first to pick the document type.
#[derive(Deserialize)]
struct DocHeader {
    format: String,
    format_version: u32,
}

/// The document: notes and links of version `N`/`L`, side rows naming notes by `R` (readable
/// id text in version 2, UUIDs in version 1).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc<N, L, R> {
    format: String,
    format_version: u32,
    character: String,
    notes: Vec<N>,
    #[serde(default = "Vec::new")]
    orphan_links: Vec<L>,
    #[serde(default)]
    window: Vec<ExportMessage>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default = "Vec::new")]
    records: Vec<ExportRecord<R>>,
    #[serde(default = "Vec::new")]
    forget: Vec<ExportForget<R>>,
    // Added with schema 2; older exports have none.
    #[serde(default = "Vec::new")]
    feedback: Vec<ExportFeedback<R>>,
    #[serde(default = "Vec::new")]
    embeddings: Vec<ExportEmbedding<R>>,
    #[serde(default)]
    meta: std::collections::BTreeMap<String, String>,
}

/// Version 2 (see the module docs).
type ExportDoc = Doc<ExportNote, RawLink, String>;
/// Version 1: UUID references everywhere.
type ExportDocV1 = Doc<ExportNoteV1, ExportOrphanLinkV1, uuid::Uuid>;

/// A note in Graph JSON shape (readable `id`, `mem_type`, `mem_links`) plus `uuid`/`archived`.
/// Optional fields are always written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportNote {
    #[serde(default)]
    uuid: Option<uuid::Uuid>,
    id: String,
    #[serde(default, deserialize_with = "crate::model::null_default")]
    tags: Vec<String>,
    mem_type: MemoryType,
    #[serde(default)]
    retrieval_count: u32,
    #[serde(default)]
    create_time: Option<DateTime<Utc>>,
    #[serde(default)]
    last_accessed_time: Option<DateTime<Utc>>,
    #[serde(default)]
    core: Option<bool>,
    #[serde(default)]
    archived: bool,
    #[serde(default, deserialize_with = "crate::model::null_default")]
    mem_links: Vec<RawLink>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportNoteV1 {
    uuid: uuid::Uuid,
    id: String,
    tags: Vec<String>,
    mem_type: MemoryType,
    retrieval_count: u32,
    create_time: DateTime<Utc>,
    last_accessed_time: DateTime<Utc>,
    core: bool,
    archived: bool,
    mem_links: Vec<ExportLinkV1>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportLinkV1 {
    id: uuid::Uuid,
    to: uuid::Uuid,
    intensity: f64,
    link_type: MemoryLinkType,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportOrphanLinkV1 {
    id: uuid::Uuid,
    from: uuid::Uuid,
    to: uuid::Uuid,
    intensity: f64,
    link_type: MemoryLinkType,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportMessage {
    seq: i64,
    role: String,
    text: String,
    at: DateTime<Utc>,
    tagged: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportRecord<R> {
    node: R,
    at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportFeedback<R> {
    node: R,
    value: i8,
    at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportForget<R> {
    node: R,
    missing_degree: f64,
    band: u32,
    revised_text: Option<String>,
    original_text: Option<String>,
    updated_at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportEmbedding<R> {
    node: R,
    model: String,
    text_hash: String,
    vec: Vec<f32>,
}
