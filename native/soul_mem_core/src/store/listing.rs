//! Listing the stored notes ([`Store::list_notes`]): the filter and ranking of
//! [`crate::listing`] over the active rows of the notes table, for working-memory mode, where
//! the in-memory graph holds only the working set.

use super::*;
use crate::listing::{ListRequest, NoteFilter, NoteListing};

impl Store {
    /// Lists the active (not archived) stored notes, in stored order for ties, with their
    /// stored outgoing link counts. Same request, result and errors as
    /// [`crate::listing::list_graph`].
    ///
    /// Complexity: O(notes × text + links) — every active row is read and decoded.
    pub fn list_notes(&self, req: &ListRequest) -> Result<NoteListing> {
        let filter = NoteFilter::new(req)?;
        let notes = self.query_notes("WHERE archived=0")?;
        let mut st = self
            .conn
            .prepare_cached("SELECT from_id, count(*) FROM links GROUP BY from_id")
            .map_err(|e| db_err(&self.path, e))?;
        let counts: HashMap<String, i64> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        Ok(filter.list(notes.iter().map(|(n, _)| {
            let links = counts.get(&n.id.to_string()).copied().unwrap_or(0);
            (n, usize::try_from(links).unwrap_or(0))
        })))
    }
}
