//! Single notes and links: reading one, counting, and the one-transaction writes of notes,
//! links and batches of [`Change`]s; plus the row readers the graph loader shares.

use super::*;
use crate::model::IdMap;

impl Store {
    /// One note (archived or not) with all its stored outgoing links.
    pub fn note(&self, id: &MemoryId) -> Result<Option<MemoryNote>> {
        Ok(self.notes_of(std::slice::from_ref(id))?.remove(id))
    }

    /// The stored notes (archived or not) of `ids` with their outgoing links, in two
    /// queries, by id; unknown ids are absent. Complexity: O(|ids| · (log rows + degree)).
    pub fn notes_of(&self, ids: &[MemoryId]) -> Result<IdMap<MemoryNote>> {
        self.notes_linked_by(ids, self)
    }

    /// [`Store::notes_of`] with the links from `links` ([`NeighbourSource::links_from`],
    /// which must reflect this store's links: the result is then the same): one query for
    /// the notes when `links` holds them in memory. Complexity: O(|ids| · log rows) plus what
    /// `links` costs.
    pub fn notes_linked_by(
        &self,
        ids: &[MemoryId],
        links: &dyn NeighbourSource,
    ) -> Result<IdMap<MemoryNote>> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let mut links = links.links_from(ids)?;
        Ok(self
            .query_notes_with(&format!("WHERE id IN {ID_LIST}"), &id_list(ids)?)?
            .into_iter()
            .map(|(mut note, _)| {
                note.links = links.remove(&note.id).unwrap_or_default();
                (note.id, note)
            })
            .collect())
    }

    /// The stored note (archived or not) named by `id` — its readable id or UUID text:
    /// `(uuid, readable id)`. Complexity: O(log rows).
    pub fn find_note(&self, id: &str) -> Result<Option<(MemoryId, String)>> {
        let row: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT id, readable_id FROM notes WHERE readable_id=?1 OR id=?1
                 ORDER BY readable_id=?1 DESC LIMIT 1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))?;
        row.map(|(uuid, readable)| Ok((MemoryId(parse_id(&self.path, &uuid)?), readable)))
            .transpose()
    }

    /// Ids of the stored links from or to `id`. Complexity: O(log rows + their number).
    pub fn link_ids_touching(&self, id: &MemoryId) -> Result<Vec<LinkId>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT id FROM links WHERE from_id=?1 OR to_id=?1")
            .map_err(|e| db_err(&self.path, e))?;
        let ids: Vec<String> = st
            .query_map([id.to_string()], |r| r.get(0))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        ids.iter()
            .map(|s| Ok(LinkId(parse_id(&self.path, s)?)))
            .collect()
    }

    /// True when the note is stored and archived.
    pub fn is_archived(&self, id: &MemoryId) -> Result<bool> {
        let v: Option<i64> = self
            .conn
            .query_row(
                "SELECT archived FROM notes WHERE id=?1",
                [id.to_string()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))?;
        Ok(v == Some(1))
    }

    /// Counts of stored notes: (active, archived, links).
    pub fn counts(&self) -> Result<(usize, usize, usize)> {
        self.conn
            .query_row(
                "SELECT (SELECT count(*) FROM notes WHERE archived=0),
                        (SELECT count(*) FROM notes WHERE archived=1),
                        (SELECT count(*) FROM links)",
                [],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)? as usize,
                        r.get::<_, i64>(1)? as usize,
                        r.get::<_, i64>(2)? as usize,
                    ))
                },
            )
            .map_err(|e| db_err(&self.path, e))
    }

    /// Upserts a note and replaces its outgoing links with `note.links`, in one transaction.
    /// An archived note stays archived. Errors when another note already has its readable id.
    pub fn put_note(&mut self, note: &MemoryNote) -> Result<()> {
        self.apply_one(ChangeRef::PutNote(note))
    }

    /// Upserts one link (its source must be stored), keeping the source's other links.
    pub fn put_link(&mut self, link: &MemoryLink) -> Result<()> {
        self.apply_one(ChangeRef::PutLink(link))
    }

    /// Deletes a link; returns whether it existed.
    pub fn delete_link(&mut self, id: &LinkId) -> Result<bool> {
        let id = id.to_string();
        self.write_rows(|c, p| {
            c.execute("DELETE FROM links WHERE id=?1", [&id])
                .map(|n| n > 0)
                .map_err(|e| db_err(p, e))
        })
    }

    /// Archives a note: it stays in the file (with its links and side data) but is no longer
    /// loaded or activated. Errors with [`Error::NotFound`] when absent.
    pub fn archive_note(&mut self, id: &MemoryId) -> Result<()> {
        self.apply(&[Change::ArchiveNote(*id)])
    }

    /// Makes an archived note active again. Errors with [`Error::NotFound`] when absent.
    pub fn unarchive_note(&mut self, id: &MemoryId) -> Result<()> {
        let s = id.to_string();
        self.write_rows(|c, p| {
            let n = c
                .execute("UPDATE notes SET archived=0 WHERE id=?1", [&s])
                .map_err(|e| db_err(p, e))?;
            if n == 0 {
                return Err(Error::NotFound(format!("note {s}")));
            }
            Ok(())
        })
    }

    /// Deletes a note for good, with its links in both directions, embeddings, forgetting state,
    /// retrieval records and feedback (they describe a memory that no longer exists), in one
    /// transaction. Returns whether it existed.
    pub fn delete_note(&mut self, id: &MemoryId) -> Result<bool> {
        let s = id.to_string();
        self.write_rows(|c, p| delete_note_rows(c, p, &s, true))
    }

    /// Commits several writes in ONE transaction: all of them or none.
    pub fn apply(&mut self, changes: &[Change]) -> Result<()> {
        for ch in changes {
            if let Change::PutNote(n) = ch {
                validate_note(n)?;
            }
            if let Change::PutLink(l) = ch {
                validate_link(l)?;
            }
        }
        let write = |c: &Connection, p: &Path| {
            for ch in changes {
                apply_change(c, p, ChangeRef::from(ch))?;
            }
            Ok(())
        };
        if changes.iter().any(|ch| ChangeRef::from(ch).writes_rows()) {
            self.write_rows(write)
        } else {
            self.write(write)
        }
    }

    fn apply_one(&mut self, ch: ChangeRef<'_>) -> Result<()> {
        match ch {
            ChangeRef::PutNote(n) => validate_note(n)?,
            ChangeRef::PutLink(l) => validate_link(l)?,
            _ => {}
        }
        if ch.writes_rows() {
            self.write_rows(|c, p| apply_change(c, p, ch))
        } else {
            self.write(|c, p| apply_change(c, p, ch))
        }
    }

    /// Notes matching a WHERE clause (no parameters), in stored order, with their archived flag.
    pub(super) fn query_notes(&self, filter: &str) -> Result<Vec<(MemoryNote, bool)>> {
        self.query_notes_inner(filter, None)
    }

    fn query_notes_with(&self, filter: &str, arg: &str) -> Result<Vec<(MemoryNote, bool)>> {
        self.query_notes_inner(filter, Some(arg))
    }

    fn query_notes_inner(
        &self,
        filter: &str,
        arg: Option<&str>,
    ) -> Result<Vec<(MemoryNote, bool)>> {
        let sql = format!(
            "SELECT id, readable_id, core, retrieval_count, create_time, last_accessed_time,
                    archived, tags, payload FROM notes {filter} ORDER BY pos"
        );
        let mut st = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| db_err(&self.path, e))?;
        let mut rows = st
            .query(rusqlite::params_from_iter(&arg))
            .map_err(|e| db_err(&self.path, e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| db_err(&self.path, e))? {
            out.push(self.note_from_row(r)?);
        }
        Ok(out)
    }

    fn note_from_row(&self, r: &rusqlite::Row<'_>) -> Result<(MemoryNote, bool)> {
        let p = &self.path;
        let g = |e| db_err(p, e);
        let readable_id: String = r.get(1).map_err(g)?;
        let core: bool = r.get(2).map_err(g)?;
        let count: i64 = r.get(3).map_err(g)?;
        let archived: bool = r.get(6).map_err(g)?;
        let mem_type: MemoryType = serde_json::from_str(text_column(p, r, 8)?)
            .map_err(|e| corrupt(p, format!("note {readable_id}: payload: {e}")))?;
        let tags: Vec<String> = serde_json::from_str(text_column(p, r, 7)?)
            .map_err(|e| corrupt(p, format!("note {readable_id}: tags: {e}")))?;
        Ok((
            MemoryNote {
                id: MemoryId(parse_id(p, text_column(p, r, 0)?)?),
                readable_id,
                tags,
                retrieval_count: u32::try_from(count)
                    .map_err(|_| corrupt(p, format!("bad retrieval_count {count}")))?,
                create_time: parse_ts(p, text_column(p, r, 4)?)?,
                last_accessed_time: parse_ts(p, text_column(p, r, 5)?)?,
                core,
                mem_type,
                links: Vec::new(),
            },
            archived,
        ))
    }

    /// Links matching a WHERE clause, grouped by source, each group in stored order.
    pub(super) fn query_links(&self, filter: &str) -> Result<IdMap<Vec<MemoryLink>>> {
        self.query_links_inner(filter, None)
    }

    pub(super) fn query_links_with(
        &self,
        filter: &str,
        arg: &str,
    ) -> Result<IdMap<Vec<MemoryLink>>> {
        self.query_links_inner(filter, Some(arg))
    }

    fn query_links_inner(&self, filter: &str, arg: Option<&str>) -> Result<IdMap<Vec<MemoryLink>>> {
        let sql =
            format!("SELECT id, from_id, to_id, intensity, link_type, ord FROM links {filter}");
        let p = &self.path;
        let mut st = self.conn.prepare_cached(&sql).map_err(|e| db_err(p, e))?;
        let mut rows = st
            .query(rusqlite::params_from_iter(&arg))
            .map_err(|e| db_err(p, e))?;
        let mut groups: IdMap<Vec<(i64, MemoryLink)>> = Default::default();
        while let Some(r) = rows.next().map_err(|e| db_err(p, e))? {
            let l = link_from_row(p, r)?;
            let ord: i64 = r.get(5).map_err(|e| db_err(p, e))?;
            groups.entry(l.from).or_default().push((ord, l));
        }
        // Unordered scan (sequential on disk); restore each source's link order here (ties
        // by link id, whichever plan SQLite chose).
        Ok(groups
            .into_iter()
            .map(|(from, mut v)| {
                v.sort_by_key(|(ord, l)| (*ord, l.id));
                (from, v.into_iter().map(|(_, l)| l).collect())
            })
            .collect())
    }
}
