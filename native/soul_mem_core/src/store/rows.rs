//! Row-level SQL of the store: migrations, decoding, the writers behind every public write
//! (notes, links, records, window, meta, forgetting state), full and incremental graph
//! write-back, and the validation a row must pass before it is written.

use super::*;
use crate::model::{IdMap, IdSet};

/// Applies `steps[from..]` and sets `user_version = steps.len()` and the application id in
/// one transaction: a failing step leaves the file at its old version, untouched.
pub(super) fn migrate_steps(
    conn: &mut Connection,
    path: &Path,
    from: i64,
    steps: &[&str],
) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| db_err(path, e))?;
    for step in steps.iter().skip(from.max(0) as usize) {
        tx.execute_batch(step).map_err(|e| db_err(path, e))?;
    }
    tx.execute_batch(&format!(
        "PRAGMA user_version={}; PRAGMA application_id={APPLICATION_ID};",
        steps.len()
    ))
    .map_err(|e| db_err(path, e))?;
    tx.commit().map_err(|e| db_err(path, e))
}

pub(super) fn incompatible_at(path: &Path, message: impl Into<String>) -> Error {
    Error::Incompatible {
        path: path.display().to_string(),
        message: message.into(),
    }
}

pub(super) fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

pub(super) fn decode_vec(path: &Path, b: &[u8]) -> Result<Vec<f32>> {
    let chunks = b.chunks_exact(4);
    if !chunks.remainder().is_empty() {
        return Err(corrupt(
            path,
            "embedding blob length is not a multiple of 4",
        ));
    }
    Ok(chunks
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

pub(super) fn decode_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

pub(super) fn link_from_row(p: &Path, r: &rusqlite::Row<'_>) -> Result<MemoryLink> {
    let id = text_column(p, r, 0)?;
    let intensity: f64 = r.get(3).map_err(|e| db_err(p, e))?;
    Ok(MemoryLink {
        id: LinkId(parse_id(p, id)?),
        from: MemoryId(parse_id(p, text_column(p, r, 1)?)?),
        to: MemoryId(parse_id(p, text_column(p, r, 2)?)?),
        intensity,
        link_type: link_type_of(p, id, text_column(p, r, 4)?)?,
    })
}

/// A link's stored `link_type` column parsed; `link` (its id text) names it in the error.
pub(crate) fn link_type_of(p: &Path, link: &str, text: &str) -> Result<MemoryLinkType> {
    serde_json::from_str::<MemoryLinkType>(text)
        .map_err(|e| corrupt(p, format!("link {link}: link_type: {e}")))
}

/// Text column `i` of `r`, borrowed from the row: what is parsed at once needs no copy (a
/// message's activation reads a few hundred notes and their links).
pub(crate) fn text_column<'r>(p: &Path, r: &'r rusqlite::Row<'_>, i: usize) -> Result<&'r str> {
    r.get_ref(i)
        .map_err(|e| db_err(p, e))?
        .as_str()
        .map_err(|e| db_err(p, e.into()))
}

/// Blob column `i` of `r`, borrowed from the row (a vector is decoded from it directly).
pub(crate) fn blob_column<'r>(p: &Path, r: &'r rusqlite::Row<'_>, i: usize) -> Result<&'r [u8]> {
    r.get_ref(i)
        .map_err(|e| db_err(p, e))?
        .as_blob()
        .map_err(|e| db_err(p, e.into()))
}

/// Builds a graph from notes and their links: all notes first, then links in stored order, so
/// each note's attached links keep their stored order; links to absent notes become pending.
pub(crate) fn build_graph(
    character: &str,
    notes: Vec<(MemoryNote, bool)>,
    links: &mut IdMap<Vec<MemoryLink>>,
) -> Result<MemoryGraph> {
    let mut graph = MemoryGraph::new(character);
    let order: Vec<MemoryId> = notes.iter().map(|(n, _)| n.id).collect();
    for (n, _) in notes {
        graph.insert(n)?;
    }
    for id in order {
        for l in links.remove(&id).unwrap_or_default() {
            graph.add_link(l)?;
        }
    }
    Ok(graph)
}

pub(super) fn validate_link(l: &MemoryLink) -> Result<()> {
    let node = l.from.to_string();
    validate_intensity(&node, l.intensity)?;
    validate_link_type(&node, &l.link_type)
}

/// The same checks Graph JSON import applies, so the store never holds what import refuses.
pub(super) fn validate_note(n: &MemoryNote) -> Result<()> {
    let node = n.readable_id.as_str();
    if node.trim().is_empty() {
        return Err(Error::invalid_value(
            &n.id.to_string(),
            "id",
            "must not be empty",
        ));
    }
    validate_mem_type(node, &n.mem_type)?;
    if n.last_accessed_time < n.create_time {
        return Err(Error::invalid_value(
            node,
            "last_accessed_time",
            "must not be earlier than create_time",
        ));
    }
    for (i, l) in n.links.iter().enumerate() {
        if l.from != n.id {
            return Err(Error::invalid_value(
                node,
                &format!("mem_links[{i}].from"),
                format!("must equal the note id {}, got {}", n.id, l.from),
            ));
        }
        validate_intensity(node, l.intensity)?;
        validate_link_type(node, &l.link_type)?;
    }
    Ok(())
}

/// Borrowed form of [`Change`], so single-write methods need not clone their argument.
#[derive(Clone, Copy)]
pub(super) enum ChangeRef<'a> {
    PutNote(&'a MemoryNote),
    PutLink(&'a MemoryLink),
    DeleteLink(&'a LinkId),
    ArchiveNote(&'a MemoryId),
    DeleteNote(&'a MemoryId),
    AppendRecords(&'a [(MemoryId, DateTime<Utc>)]),
    SetRetrieval(&'a MemoryId, u32, &'a DateTime<Utc>),
    SetForgetState(&'a MemoryId, &'a ForgetState),
    ClearForgetState(&'a MemoryId),
    AppendMessage(&'a Message),
    PopMessages(i64),
    SetSummary(&'a str),
    SetMeta(&'a str, &'a str),
    AppendFeedback(&'a MemoryId, i8, &'a DateTime<Utc>),
}

impl ChangeRef<'_> {
    /// True when the change writes note or link rows (which a synced graph must know of).
    pub(super) fn writes_rows(&self) -> bool {
        matches!(
            self,
            ChangeRef::PutNote(_)
                | ChangeRef::PutLink(_)
                | ChangeRef::DeleteLink(_)
                | ChangeRef::ArchiveNote(_)
                | ChangeRef::DeleteNote(_)
                | ChangeRef::SetRetrieval(..)
        )
    }
}

impl<'a> From<&'a Change> for ChangeRef<'a> {
    fn from(c: &'a Change) -> Self {
        match c {
            Change::PutNote(n) => ChangeRef::PutNote(n),
            Change::PutLink(l) => ChangeRef::PutLink(l),
            Change::DeleteLink(l) => ChangeRef::DeleteLink(l),
            Change::ArchiveNote(i) => ChangeRef::ArchiveNote(i),
            Change::DeleteNote(i) => ChangeRef::DeleteNote(i),
            Change::AppendRecords(r) => ChangeRef::AppendRecords(r),
            Change::SetRetrieval(i, n, at) => ChangeRef::SetRetrieval(i, *n, at),
            Change::SetForgetState(i, s) => ChangeRef::SetForgetState(i, s),
            Change::ClearForgetState(i) => ChangeRef::ClearForgetState(i),
            Change::AppendMessage(m) => ChangeRef::AppendMessage(m),
            Change::PopMessages(s) => ChangeRef::PopMessages(*s),
            Change::SetSummary(s) => ChangeRef::SetSummary(s),
            Change::SetMeta(k, v) => ChangeRef::SetMeta(k, v),
            Change::AppendFeedback(i, v, at) => ChangeRef::AppendFeedback(i, *v, at),
        }
    }
}

pub(super) fn apply_change(c: &Connection, p: &Path, ch: ChangeRef<'_>) -> Result<()> {
    let e = |err| db_err(p, err);
    match ch {
        ChangeRef::PutNote(n) => {
            let clash: Option<String> = c
                .query_row(
                    "SELECT id FROM notes WHERE readable_id=?1 AND id<>?2",
                    params![n.readable_id, n.id.to_string()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(e)?;
            if clash.is_some() {
                return Err(Error::DuplicateId {
                    id: n.readable_id.clone(),
                    index: None,
                });
            }
            let archived: Option<bool> = c
                .query_row(
                    "SELECT archived FROM notes WHERE id=?1",
                    [n.id.to_string()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(e)?;
            write_note(c, p, n, n.links.iter(), archived.unwrap_or(false)).map(|_| ())
        }
        ChangeRef::PutLink(l) => {
            let exists: bool = c
                .query_row(
                    "SELECT count(*) FROM notes WHERE id=?1",
                    [l.from.to_string()],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(e)?
                > 0;
            if !exists {
                return Err(Error::NotFound(format!("link source {}", l.from)));
            }
            // Keep the position of an existing link; append a new one.
            let ord: i64 = c
                .query_row(
                    "SELECT coalesce((SELECT ord FROM links WHERE id=?1),
                                     (SELECT max(ord) + 1 FROM links WHERE from_id=?2), 0)",
                    params![l.id.to_string(), l.from.to_string()],
                    |r| r.get(0),
                )
                .map_err(e)?;
            insert_link(c, p, l, Some(ord))
        }
        ChangeRef::DeleteLink(id) => c
            .execute("DELETE FROM links WHERE id=?1", [id.to_string()])
            .map(|_| ())
            .map_err(e),
        ChangeRef::ArchiveNote(id) => {
            let n = c
                .execute("UPDATE notes SET archived=1 WHERE id=?1", [id.to_string()])
                .map_err(e)?;
            if n == 0 {
                return Err(Error::NotFound(format!("note {id}")));
            }
            Ok(())
        }
        ChangeRef::DeleteNote(id) => delete_note_rows(c, p, &id.to_string(), true).map(|_| ()),
        ChangeRef::AppendRecords(r) => insert_records(c, p, r),
        ChangeRef::SetRetrieval(id, count, at) => c
            .prepare_cached(
                "UPDATE notes SET retrieval_count=?2, last_accessed_time=?3 WHERE id=?1",
            )
            .and_then(|mut st| st.execute(params![id.to_string(), i64::from(count), ts(at)]))
            .map(|_| ())
            .map_err(e),
        ChangeRef::SetForgetState(id, s) => set_forget_tx(c, p, &id.to_string(), s),
        ChangeRef::ClearForgetState(id) => c
            .execute(
                "DELETE FROM forget_state WHERE note_id=?1",
                [id.to_string()],
            )
            .map(|_| ())
            .map_err(e),
        ChangeRef::AppendMessage(m) => insert_message(c, p, m).map(|_| ()),
        ChangeRef::PopMessages(s) => c
            .execute("DELETE FROM window WHERE seq <= ?1", [s])
            .map(|_| ())
            .map_err(e),
        ChangeRef::SetSummary(s) => set_meta_tx(c, p, META_SUMMARY, s),
        ChangeRef::SetMeta(k, v) => set_meta_tx(c, p, k, v),
        ChangeRef::AppendFeedback(id, v, at) => insert_feedback(c, p, id, v, at),
    }
}

pub(super) fn insert_feedback(
    c: &Connection,
    p: &Path,
    id: &MemoryId,
    v: i8,
    at: &DateTime<Utc>,
) -> Result<()> {
    if v != 1 && v != -1 {
        return Err(Error::invalid_argument(
            "feedback",
            format!("must be +1 or -1, got {v}"),
        ));
    }
    c.prepare_cached("INSERT INTO feedback (note_id, value, at) VALUES (?1, ?2, ?3)")
        .and_then(|mut st| st.execute(params![id.to_string(), v, ts(at)]))
        .map(|_| ())
        .map_err(|e| db_err(p, e))
}

/// Pending links of the graph whose source passes `keep`, by source, each group in link id
/// order (the pending buffer is a hash map seeded at random per process; this keeps files —
/// and working memory's write-backs — the same from run to run).
/// Complexity: O(pending links).
pub(crate) fn pending_by_source(
    graph: &MemoryGraph,
    keep: impl Fn(&MemoryId) -> bool,
) -> IdMap<Vec<&MemoryLink>> {
    let mut pending: IdMap<Vec<&MemoryLink>> = Default::default();
    for l in graph.pending_links().filter(|l| keep(&l.from)) {
        pending.entry(l.from).or_default().push(l);
    }
    for group in pending.values_mut() {
        group.sort_by_key(|l| l.id);
    }
    pending
}

/// The stored rows, archived or not, holding `n`'s id or readable id: `(id, archived)`.
/// Complexity: O(log rows).
pub(super) fn rows_holding(
    c: &Connection,
    p: &Path,
    n: &MemoryNote,
) -> Result<Vec<(String, bool)>> {
    let mut st = c
        .prepare_cached("SELECT id, archived FROM notes WHERE id=?1 OR readable_id=?2")
        .map_err(|e| db_err(p, e))?;
    let rows = st
        .query_map(params![n.id.to_string(), n.readable_id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .and_then(|it| it.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| db_err(p, e))?;
    Ok(rows)
}

/// The whole-graph write of a checkpoint: deletes every active note and its links, then
/// writes every note of the graph with its links (pending ones included). Archived rows with
/// the id or readable id of a graph note are replaced by it.
///
/// Complexity: O(nodes + links) rows written.
pub(super) fn write_full(
    c: &Connection,
    p: &Path,
    graph: &MemoryGraph,
    reason: FullReason,
) -> Result<CheckpointStats> {
    for n in graph.notes() {
        validate_note(n)?;
    }
    let pending = pending_by_source(graph, |_| true);
    let deleted = c
        .execute(
            "DELETE FROM links WHERE from_id IN (SELECT id FROM notes WHERE archived=0)",
            [],
        )
        .and_then(|_| c.execute("DELETE FROM notes WHERE archived=0", []))
        .map_err(|e| db_err(p, e))?;
    let archived: i64 = c
        .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))
        .map_err(|e| db_err(p, e))?;
    let mut links_written = 0;
    for n in graph.notes() {
        // Only archived rows can collide now; the graph's version wins.
        if archived > 0 {
            for (id, _) in rows_holding(c, p, n)? {
                delete_note_rows(c, p, &id, false)?;
            }
        }
        let links = n
            .links
            .iter()
            .chain(pending.get(&n.id).into_iter().flatten().copied());
        links_written += write_note(c, p, n, links, false)?;
    }
    Ok(CheckpointStats {
        mode: CheckpointMode::Full,
        full_reason: Some(reason),
        notes_written: graph.len(),
        links_written,
        notes_deleted: deleted,
    })
}

/// The incremental write of a checkpoint: for each of `touched` (the graph's change log plus
/// what `extra` touched) absent from the graph, its active row and outgoing links are deleted;
/// each one in the graph is written with its links (pending ones included), in dense order —
/// an updated note in place, an inserted one as a new row at the end, so the stored order of
/// active notes stays the graph's. Archived rows with the same readable id are replaced, as
/// in [`write_full`].
///
/// Returns `None`, having written only what a full write also does or overwrites, when the
/// rows do not match the log: the caller then writes the whole graph.
///
/// Complexity: O(touched · log(touched) + their links + pending links).
pub(super) fn write_incremental(
    c: &Connection,
    p: &Path,
    graph: &MemoryGraph,
    touched: Vec<MemoryId>,
) -> Result<Option<CheckpointStats>> {
    let e = |err| db_err(p, err);
    let mut present: Vec<(usize, &MemoryNote)> = Vec::with_capacity(touched.len());
    let mut absent: Vec<MemoryId> = Vec::new();
    for id in touched {
        match graph.index_of(&id).zip(graph.get(&id)) {
            Some(found) => present.push(found),
            None => absent.push(id),
        }
    }
    present.sort_unstable_by_key(|(i, _)| *i);
    for (_, n) in &present {
        validate_note(n)?;
    }
    // Removals first, so a readable id freed by a removed note can be taken by another.
    let mut deleted = 0;
    for id in &absent {
        let s = id.to_string();
        let n = c
            .prepare_cached("DELETE FROM notes WHERE id=?1 AND archived=0")
            .and_then(|mut st| st.execute([&s]))
            .map_err(e)?;
        if n > 0 {
            deleted += 1;
            c.prepare_cached("DELETE FROM links WHERE from_id=?1")
                .and_then(|mut st| st.execute([&s]))
                .map_err(e)?;
        }
    }
    let wanted: IdSet = present.iter().map(|(_, n)| n.id).collect();
    let pending = pending_by_source(graph, |from| wanted.contains(from));
    let mut links_written = 0;
    for (_, n) in &present {
        let id = n.id.to_string();
        let mut has_row = false;
        for (other, archived) in rows_holding(c, p, n)? {
            if other == id {
                has_row = true;
            } else if archived {
                delete_note_rows(c, p, &other, false)?;
            } else {
                // An active row holds the readable id and the log does not say it went.
                return Ok(None);
            }
        }
        if graph.change_of(&n.id) == Some(NoteChange::Inserted) {
            if has_row {
                // A new row takes the next position: the note is last in the graph too.
                delete_note_rows(c, p, &id, false)?;
            }
        } else if !has_row {
            // Updated (or touched by `extra` only) notes were stored at the last sync.
            return Ok(None);
        }
        let links = n
            .links
            .iter()
            .chain(pending.get(&n.id).into_iter().flatten().copied());
        links_written += write_note(c, p, n, links, false)?;
    }
    Ok(Some(CheckpointStats {
        mode: CheckpointMode::Incremental,
        full_reason: None,
        notes_written: present.len(),
        links_written,
        notes_deleted: deleted,
    }))
}

/// Upserts the note row (keeping `pos`, so order is stable) and replaces its outgoing links.
/// Returns the number of links written.
pub(super) fn write_note<'a>(
    c: &Connection,
    p: &Path,
    n: &MemoryNote,
    links: impl Iterator<Item = &'a MemoryLink>,
    archived: bool,
) -> Result<usize> {
    let id = n.id.to_string();
    let tags = to_json(&n.tags)?;
    let payload = to_json(&n.mem_type)?;
    c.prepare_cached(
        "INSERT INTO notes (id, readable_id, kind, core, retrieval_count, create_time,
                            last_accessed_time, archived, tags, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT(id) DO UPDATE SET
            readable_id=excluded.readable_id, kind=excluded.kind, core=excluded.core,
            retrieval_count=excluded.retrieval_count, create_time=excluded.create_time,
            last_accessed_time=excluded.last_accessed_time, archived=excluded.archived,
            tags=excluded.tags, payload=excluded.payload",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            n.readable_id,
            n.kind().as_str(),
            n.core,
            i64::from(n.retrieval_count),
            ts(&n.create_time),
            ts(&n.last_accessed_time),
            archived,
            tags,
            payload,
        ])
    })
    .map_err(|e| db_err(p, e))?;
    c.prepare_cached("DELETE FROM links WHERE from_id=?1")
        .and_then(|mut st| st.execute([&id]))
        .map_err(|e| db_err(p, e))?;
    let mut written = 0;
    for (ord, l) in links.enumerate() {
        insert_link(c, p, l, Some(ord as i64))?;
        written += 1;
    }
    Ok(written)
}

/// Inserts (or replaces, by id) one link at position `ord` (`None`: after the source's last).
pub(super) fn insert_link(
    c: &Connection,
    p: &Path,
    l: &MemoryLink,
    ord: Option<i64>,
) -> Result<()> {
    let lt = to_json(&l.link_type)?;
    let from = l.from.to_string();
    let ord = match ord {
        Some(o) => o,
        None => c
            .query_row(
                "SELECT coalesce(max(ord) + 1, 0) FROM links WHERE from_id=?1",
                [&from],
                |r| r.get(0),
            )
            .map_err(|e| db_err(p, e))?,
    };
    c.prepare_cached(
        "INSERT OR REPLACE INTO links (id, from_id, to_id, ord, intensity, link_type)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut st| {
        st.execute(params![
            l.id.to_string(),
            from,
            l.to.to_string(),
            ord,
            l.intensity,
            lt
        ])
    })
    .map(|_| ())
    .map_err(|e| db_err(p, e))
}

/// Deletes a note row and its outgoing links; with `everything`, also incoming links and its
/// side data. Returns whether the note existed.
pub(super) fn delete_note_rows(
    c: &Connection,
    p: &Path,
    id: &str,
    everything: bool,
) -> Result<bool> {
    let e = |err| db_err(p, err);
    let n = c
        .execute("DELETE FROM notes WHERE id=?1", [id])
        .map_err(e)?;
    c.execute("DELETE FROM links WHERE from_id=?1", [id])
        .map_err(e)?;
    if everything {
        c.execute("DELETE FROM links WHERE to_id=?1", [id])
            .map_err(e)?;
        c.execute("DELETE FROM embeddings WHERE note_id=?1", [id])
            .map_err(e)?;
        c.execute("DELETE FROM forget_state WHERE note_id=?1", [id])
            .map_err(e)?;
        c.execute("DELETE FROM records WHERE note_id=?1", [id])
            .map_err(e)?;
        c.execute("DELETE FROM feedback WHERE note_id=?1", [id])
            .map_err(e)?;
    }
    Ok(n > 0)
}

pub(super) fn insert_records(
    c: &Connection,
    p: &Path,
    records: &[(MemoryId, DateTime<Utc>)],
) -> Result<()> {
    let mut st = c
        .prepare_cached("INSERT INTO records (note_id, at) VALUES (?1, ?2)")
        .map_err(|e| db_err(p, e))?;
    for (id, at) in records {
        st.execute(params![id.to_string(), ts(at)])
            .map_err(|e| db_err(p, e))?;
    }
    Ok(())
}

pub(super) fn insert_message(c: &Connection, p: &Path, m: &Message) -> Result<i64> {
    c.prepare_cached("INSERT INTO window (role, text, at, tagged) VALUES (?1, ?2, ?3, ?4)")
        .and_then(|mut st| st.execute(params![m.role, m.text, ts(&m.at), m.tagged]))
        .map_err(|e| db_err(p, e))?;
    Ok(c.last_insert_rowid())
}

pub(super) fn set_meta_tx(c: &Connection, p: &Path, key: &str, value: &str) -> Result<()> {
    c.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")
        .and_then(|mut st| st.execute(params![key, value]))
        .map(|_| ())
        .map_err(|e| db_err(p, e))
}

pub(super) fn set_forget_tx(c: &Connection, p: &Path, id: &str, s: &ForgetState) -> Result<()> {
    if !(s.missing_degree.is_finite() && (0.0..=1.0).contains(&s.missing_degree)) {
        return Err(Error::invalid_value(
            id,
            "forget_state.missing_degree",
            format!(
                "must be a finite number in [0, 1], got {}",
                s.missing_degree
            ),
        ));
    }
    c.prepare_cached(
        "INSERT OR REPLACE INTO forget_state
            (note_id, missing_degree, band, revised_text, original_text, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            s.missing_degree,
            i64::from(s.band),
            s.revised_text,
            s.original_text,
            ts(&s.updated_at)
        ])
    })
    .map(|_| ())
    .map_err(|e| db_err(p, e))
}
