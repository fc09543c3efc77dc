//! Retrieval records, forgetting state and user feedback: the per-note side data
//! consolidation and forgetting read.

use super::*;
use crate::model::IdMap;

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
        let rows: Vec<(String, String)> = st
            .query_map(rusqlite::params_from_iter(&arg), |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
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
        Ok(self
            .forget_states_where("WHERE note_id=?1", Some(&id.to_string()))?
            .pop()
            .map(|(_, s)| s))
    }

    /// Every stored forgetting state, in note id order.
    ///
    /// Complexity: O(states) rows read in one query.
    pub fn forget_states(&self) -> Result<Vec<(MemoryId, ForgetState)>> {
        self.forget_states_where("", None)
    }

    /// The stored forgetting states of the notes `ids` (those that have one), in one query.
    /// Complexity: O(|ids| · log rows).
    pub fn forget_states_of(&self, ids: &[MemoryId]) -> Result<IdMap<ForgetState>> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        Ok(self
            .forget_states_where(&format!("WHERE note_id IN {ID_LIST}"), Some(&id_list(ids)?))?
            .into_iter()
            .collect())
    }

    /// Forgetting states matching a WHERE clause with at most one parameter, by note id.
    fn forget_states_where(
        &self,
        filter: &str,
        arg: Option<&str>,
    ) -> Result<Vec<(MemoryId, ForgetState)>> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT note_id, missing_degree, band, revised_text, original_text, updated_at
                 FROM forget_state {filter} ORDER BY note_id"
            ))
            .map_err(|e| db_err(&self.path, e))?;
        type Row = (String, f64, i64, Option<String>, Option<String>, String);
        let rows: Vec<Row> = st
            .query_map(rusqlite::params_from_iter(&arg), |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        rows.into_iter()
            .map(
                |(id, missing_degree, band, revised_text, original_text, at)| {
                    Ok((
                        MemoryId(parse_id(&self.path, &id)?),
                        ForgetState {
                            missing_degree,
                            band: u32::try_from(band)
                                .map_err(|_| corrupt(&self.path, format!("bad band {band}")))?,
                            revised_text,
                            original_text,
                            updated_at: parse_ts(&self.path, &at)?,
                        },
                    ))
                },
            )
            .collect()
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
