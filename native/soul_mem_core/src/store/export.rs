//! The character export document ([`Store::export_character`]) and its import
//! ([`Store::import_character`]): one JSON document with everything a character's store holds.
//!
//! An import is checked as a whole before anything is written — the same checks a note put
//! and a Graph JSON import make (ids and UUIDs unique, links to notes of the document, unique
//! link ids, enum tags, ranges) plus the references of the side tables (window, records,
//! feedback, forgetting state, embeddings) — so a refused document changes nothing.

use super::*;

impl Store {
    /// Everything of the character as one JSON document: all notes (archived included, with
    /// links), window, summary, retrieval records, forgetting state, embeddings and meta.
    /// [`Store::import_character`] restores it exactly.
    ///
    /// Complexity: O(file contents); the document is held in memory.
    pub fn export_character(&self) -> Result<serde_json::Value> {
        let notes = self.query_notes("")?;
        let mut links = self.query_links("")?;
        let stored: HashSet<MemoryId> = notes.iter().map(|(n, _)| n.id).collect();
        // Links waiting for a note that is not stored (a partial Graph JSON import) and links
        // whose source is not stored travel apart, so `mem_links` always reach a note.
        let mut orphan_links: Vec<ExportOrphanLink> = Vec::new();
        let mut detach = |l: MemoryLink| {
            orphan_links.push(ExportOrphanLink {
                id: l.id.0,
                from: l.from.0,
                to: l.to.0,
                intensity: l.intensity,
                link_type: l.link_type,
            })
        };
        let notes: Vec<ExportNote> = notes
            .into_iter()
            .map(|(n, archived)| {
                let mut mem_links = Vec::new();
                for l in links.remove(&n.id).unwrap_or_default() {
                    if stored.contains(&l.to) {
                        mem_links.push(ExportLink {
                            id: l.id.0,
                            to: l.to.0,
                            intensity: l.intensity,
                            link_type: l.link_type,
                        });
                    } else {
                        detach(l);
                    }
                }
                ExportNote {
                    uuid: n.id.0,
                    id: n.readable_id,
                    tags: n.tags,
                    mem_type: n.mem_type,
                    retrieval_count: n.retrieval_count,
                    create_time: n.create_time,
                    last_accessed_time: n.last_accessed_time,
                    core: n.core,
                    archived,
                    mem_links,
                }
            })
            .collect();
        links.into_values().flatten().for_each(&mut detach);
        orphan_links.sort_by_key(|l| l.id);
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
            .map(|(node, at)| ExportRecord { node: node.0, at })
            .collect();
        let forget = self.all_forget()?;
        let feedback = self
            .feedback()?
            .into_iter()
            .map(|(node, value, at)| ExportFeedback {
                node: node.0,
                value,
                at,
            })
            .collect();
        let embeddings = self.all_embeddings()?;
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

    /// Replaces the whole store content with an [`Store::export_character`] document, in one
    /// transaction. The document must belong to this store's character. Everything is parsed
    /// and validated before anything is written.
    pub fn import_character(&mut self, value: &serde_json::Value) -> Result<()> {
        let doc: ExportDoc = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::InvalidJson(format!("{}: {}", e.path(), e.inner())))?;
        if doc.format != EXPORT_FORMAT || doc.format_version != EXPORT_VERSION {
            return Err(Error::InvalidJson(format!(
                "expected format {EXPORT_FORMAT:?} version {EXPORT_VERSION}, got {:?} version {}",
                doc.format, doc.format_version
            )));
        }
        if doc.character != self.character {
            return Err(Error::invalid_argument(
                "character",
                format!(
                    "document of {:?} imported into the store of {:?}",
                    doc.character, self.character
                ),
            ));
        }
        validate_document(&doc)?;
        let mut notes = Vec::with_capacity(doc.notes.len());
        for n in doc.notes {
            let id = MemoryId(n.uuid);
            let note = MemoryNote {
                id,
                readable_id: n.id,
                tags: n.tags,
                retrieval_count: n.retrieval_count,
                create_time: n.create_time,
                last_accessed_time: n.last_accessed_time,
                core: n.core,
                mem_type: n.mem_type,
                links: n
                    .mem_links
                    .into_iter()
                    .map(|l| MemoryLink {
                        id: LinkId(l.id),
                        from: id,
                        to: MemoryId(l.to),
                        intensity: l.intensity,
                        link_type: l.link_type,
                    })
                    .collect(),
            };
            validate_note(&note)?;
            notes.push((note, n.archived));
        }
        let orphans: Vec<MemoryLink> = doc
            .orphan_links
            .into_iter()
            .map(|l| MemoryLink {
                id: LinkId(l.id),
                from: MemoryId(l.from),
                to: MemoryId(l.to),
                intensity: l.intensity,
                link_type: l.link_type,
            })
            .collect();
        for l in &orphans {
            validate_link(l)?;
        }
        let mut embeddings = Vec::with_capacity(doc.embeddings.len());
        for e in &doc.embeddings {
            // Checked by validate_document; a bad hash cannot reach here.
            if let Some(hash) = decode_hex32(&e.text_hash) {
                embeddings.push((e, hash));
            }
        }
        let (window, summary, records, forget, feedback, meta) = (
            doc.window,
            doc.summary,
            doc.records,
            doc.forget,
            doc.feedback,
            doc.meta,
        );
        self.write_rows(|c, p| {
            c.execute_batch(
                "DELETE FROM notes; DELETE FROM links; DELETE FROM embeddings;
                 DELETE FROM records; DELETE FROM forget_state; DELETE FROM window;
                 DELETE FROM feedback; DELETE FROM meta WHERE key <> 'character';",
            )
            .map_err(|e| db_err(p, e))?;
            for (n, archived) in &notes {
                write_note(c, p, n, n.links.iter(), *archived)?;
            }
            for l in &orphans {
                insert_link(c, p, l, None)?;
            }
            for m in &window {
                c.execute(
                    "INSERT INTO window (seq, role, text, at, tagged) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![m.seq, m.role, m.text, ts(&m.at), m.tagged],
                )
                .map_err(|e| db_err(p, e))?;
            }
            if let Some(s) = &summary {
                set_meta_tx(c, p, META_SUMMARY, s)?;
            }
            let recs: Vec<(MemoryId, DateTime<Utc>)> =
                records.iter().map(|r| (MemoryId(r.node), r.at)).collect();
            insert_records(c, p, &recs)?;
            for f in &feedback {
                insert_feedback(c, p, &MemoryId(f.node), f.value, &f.at)?;
            }
            for f in &forget {
                let state = ForgetState {
                    missing_degree: f.missing_degree,
                    band: f.band,
                    revised_text: f.revised_text.clone(),
                    original_text: f.original_text.clone(),
                    updated_at: f.updated_at,
                };
                set_forget_tx(c, p, &f.node.to_string(), &state)?;
            }
            for (e, hash) in &embeddings {
                let bytes: Vec<u8> = e.vec.iter().flat_map(|f| f.to_le_bytes()).collect();
                c.execute(
                    "INSERT OR REPLACE INTO embeddings (note_id, model, text_hash, dim, vec)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        e.node.to_string(),
                        e.model,
                        &hash[..],
                        e.vec.len() as i64,
                        bytes
                    ],
                )
                .map_err(|e| db_err(p, e))?;
            }
            for (k, v) in &meta {
                if k != META_CHARACTER && k != META_SUMMARY {
                    set_meta_tx(c, p, k, v)?;
                }
            }
            Ok(())
        })
    }

    fn all_forget(&self) -> Result<Vec<ExportForget>> {
        Ok(self
            .forget_states()?
            .into_iter()
            .map(|(node, state)| ExportForget {
                node: node.0,
                missing_degree: state.missing_degree,
                band: state.band,
                revised_text: state.revised_text,
                original_text: state.original_text,
                updated_at: state.updated_at,
            })
            .collect())
    }

    fn all_embeddings(&self) -> Result<Vec<ExportEmbedding>> {
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

/// Checks a whole export document before anything is written: what note puts and Graph JSON
/// import refuse (duplicate UUIDs or readable ids, `mem_links` to notes the document does not
/// have, duplicate link ids, out-of-range values). Links may point at archived notes (they are
/// in the document); links waiting for an absent note travel in `orphan_links`, declared as
/// detached, and stay detached after import.
///
/// Complexity: O(notes + links + side rows).
fn validate_document(doc: &ExportDoc) -> Result<()> {
    let mut uuids: HashMap<uuid::Uuid, &str> = HashMap::with_capacity(doc.notes.len());
    let mut readable: HashSet<&str> = HashSet::with_capacity(doc.notes.len());
    for (i, n) in doc.notes.iter().enumerate() {
        if uuids.insert(n.uuid, &n.id).is_some() {
            return Err(Error::DuplicateField {
                node: n.id.clone(),
                field: "uuid".into(),
                value: n.uuid.to_string(),
            });
        }
        if !readable.insert(&n.id) {
            return Err(Error::DuplicateId {
                id: n.id.clone(),
                index: Some(i),
            });
        }
    }
    let mut link_ids: HashSet<uuid::Uuid> = HashSet::new();
    let mut unique_link = |node: &str, field: String, id: uuid::Uuid| {
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
    for n in &doc.notes {
        for (j, l) in n.mem_links.iter().enumerate() {
            unique_link(&n.id, format!("mem_links[{j}].id"), l.id)?;
            if !uuids.contains_key(&l.to) {
                return Err(Error::MissingLinkTarget {
                    node: n.id.clone(),
                    target: l.to.to_string(),
                });
            }
        }
    }
    for (k, l) in doc.orphan_links.iter().enumerate() {
        unique_link(&format!("orphan_links[{k}]"), "id".into(), l.id)?;
    }
    // Side rows may name notes the document lacks (feedback or records kept for a note that
    // was never stored are harmless), but their values must be in range.
    for (i, f) in doc.feedback.iter().enumerate() {
        if f.value != 1 && f.value != -1 {
            return Err(Error::invalid_value(
                &format!("feedback[{i}]"),
                "value",
                format!("must be +1 or -1, got {}", f.value),
            ));
        }
    }
    for (i, f) in doc.forget.iter().enumerate() {
        if !(f.missing_degree.is_finite() && (0.0..=1.0).contains(&f.missing_degree)) {
            return Err(Error::invalid_value(
                &format!("forget[{i}]"),
                "missing_degree",
                format!(
                    "must be a finite number in [0, 1], got {}",
                    f.missing_degree
                ),
            ));
        }
    }
    let mut dims: HashMap<&str, usize> = HashMap::new();
    for (i, e) in doc.embeddings.iter().enumerate() {
        let row = format!("embeddings[{i}]");
        if decode_hex32(&e.text_hash).is_none() {
            return Err(Error::invalid_value(
                &row,
                "text_hash",
                "must be 64 hex digits",
            ));
        }
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
    Ok(())
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportDoc {
    format: String,
    format_version: u32,
    character: String,
    notes: Vec<ExportNote>,
    #[serde(default)]
    orphan_links: Vec<ExportOrphanLink>,
    window: Vec<ExportMessage>,
    summary: Option<String>,
    records: Vec<ExportRecord>,
    forget: Vec<ExportForget>,
    // Added with schema 2; older exports have none.
    #[serde(default)]
    feedback: Vec<ExportFeedback>,
    #[serde(default)]
    embeddings: Vec<ExportEmbedding>,
    #[serde(default)]
    meta: std::collections::BTreeMap<String, String>,
}

/// A note in Graph JSON shape (readable `id`, `mem_type`, `mem_links`) plus `uuid`/`archived`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportNote {
    uuid: uuid::Uuid,
    id: String,
    tags: Vec<String>,
    mem_type: MemoryType,
    retrieval_count: u32,
    create_time: DateTime<Utc>,
    last_accessed_time: DateTime<Utc>,
    core: bool,
    archived: bool,
    mem_links: Vec<ExportLink>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportLink {
    id: uuid::Uuid,
    to: uuid::Uuid,
    intensity: f64,
    link_type: MemoryLinkType,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportOrphanLink {
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
struct ExportRecord {
    node: uuid::Uuid,
    at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportFeedback {
    node: uuid::Uuid,
    value: i8,
    at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportForget {
    node: uuid::Uuid,
    missing_degree: f64,
    band: u32,
    revised_text: Option<String>,
    original_text: Option<String>,
    updated_at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportEmbedding {
    node: uuid::Uuid,
    model: String,
    text_hash: String,
    vec: Vec<f32>,
}
