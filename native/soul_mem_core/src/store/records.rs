//! Retrieval records, forgetting state and user feedback: the per-note side data
//! consolidation and forgetting read.

use super::*;

impl Store {
    /// Appends retrieval records (node, time) in one transaction.
    pub fn append_records(&mut self, records: &[(MemoryId, DateTime<Utc>)]) -> Result<()> {
        self.write(|c, p| insert_records(c, p, records))
    }

    /// Records at or after `since`, oldest first.
    pub fn records_since(&self, since: DateTime<Utc>) -> Result<Vec<(MemoryId, DateTime<Utc>)>> {
        self.records_where("WHERE at >= ?1", Some(ts(&since)))
    }

    /// Records matching a WHERE clause with at most one parameter, in time order.
    pub(super) fn records_where(
        &self,
        filter: &str,
        arg: Option<String>,
    ) -> Result<Vec<(MemoryId, DateTime<Utc>)>> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT note_id, at FROM records {filter} ORDER BY at, seq"
            ))
            .map_err(|e| db_err(&self.path, e))?;
        let params: Vec<&dyn rusqlite::ToSql> = match &arg {
            Some(a) => vec![a],
            None => vec![],
        };
        let rows: Vec<(String, String)> = st
            .query_map(params.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        rows.into_iter()
            .map(|(id, at)| {
                Ok((
                    MemoryId(parse_id(&self.path, &id)?),
                    parse_ts(&self.path, &at)?,
                ))
            })
            .collect()
    }

    /// Deletes records older than `before`; returns how many.
    pub fn prune_records(&mut self, before: DateTime<Utc>) -> Result<usize> {
        let t = ts(&before);
        self.write(|c, p| {
            c.execute("DELETE FROM records WHERE at < ?1", [&t])
                .map_err(|e| db_err(p, e))
        })
    }

    /// Sets the forgetting state of a note (one transaction).
    pub fn set_forget_state(&mut self, id: &MemoryId, state: &ForgetState) -> Result<()> {
        let s = id.to_string();
        self.write(|c, p| set_forget_tx(c, p, &s, state))
    }

    /// The forgetting state of a note, if any.
    pub fn forget_state(&self, id: &MemoryId) -> Result<Option<ForgetState>> {
        self.conn
            .query_row(
                "SELECT missing_degree, band, revised_text, original_text, updated_at
                 FROM forget_state WHERE note_id=?1",
                [id.to_string()],
                |r| {
                    Ok((
                        r.get::<_, f64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))?
            .map(|(missing_degree, band, revised_text, original_text, at)| {
                Ok(ForgetState {
                    missing_degree,
                    band: u32::try_from(band)
                        .map_err(|_| corrupt(&self.path, format!("bad band {band}")))?,
                    revised_text,
                    original_text,
                    updated_at: parse_ts(&self.path, &at)?,
                })
            })
            .transpose()
    }

    /// Every stored forgetting state, by note id order.
    ///
    /// Complexity: O(states) indexed reads.
    pub fn forget_states(&self) -> Result<Vec<(MemoryId, ForgetState)>> {
        let ids: Vec<String> = {
            let mut st = self
                .conn
                .prepare("SELECT note_id FROM forget_state ORDER BY note_id")
                .map_err(|e| db_err(&self.path, e))?;
            let rows = st
                .query_map([], |r| r.get(0))
                .and_then(|it| it.collect::<rusqlite::Result<Vec<String>>>())
                .map_err(|e| db_err(&self.path, e))?;
            rows
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let node = MemoryId(parse_id(&self.path, &id)?);
            if let Some(state) = self.forget_state(&node)? {
                out.push((node, state));
            }
        }
        Ok(out)
    }

    /// Appends user feedback (`+1` / `-1`) on a note, in one transaction.
    pub fn append_feedback(&mut self, id: &MemoryId, value: i8, at: DateTime<Utc>) -> Result<()> {
        self.write(|c, p| insert_feedback(c, p, id, value, &at))
    }

    /// All feedback, oldest first: `(note, value, at)`.
    pub fn feedback(&self) -> Result<Vec<(MemoryId, i8, DateTime<Utc>)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT note_id, value, at FROM feedback ORDER BY seq")
            .map_err(|e| db_err(&self.path, e))?;
        let rows: Vec<(String, i64, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        rows.into_iter()
            .map(|(id, v, at)| {
                let v = i8::try_from(v)
                    .ok()
                    .filter(|v| *v == 1 || *v == -1)
                    .ok_or_else(|| corrupt(&self.path, format!("bad feedback value {v}")))?;
                Ok((
                    MemoryId(parse_id(&self.path, &id)?),
                    v,
                    parse_ts(&self.path, &at)?,
                ))
            })
            .collect()
    }
}
