//! The sliding window of recent messages and its running summary.

use super::*;

impl Store {
    /// Appends a message to the window; returns its sequence number (increasing, never reused).
    pub fn append_message(&mut self, m: &Message) -> Result<i64> {
        self.write(|c, p| insert_message(c, p, m))
    }

    /// Appends several messages in ONE transaction (all or none); returns their sequence
    /// numbers in order.
    pub fn append_messages(&mut self, ms: &[Message]) -> Result<Vec<i64>> {
        self.write(|c, p| ms.iter().map(|m| insert_message(c, p, m)).collect())
    }

    /// The window, oldest first, with sequence numbers.
    pub fn window(&self) -> Result<Vec<(i64, Message)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT seq, role, text, at, tagged FROM window ORDER BY seq")
            .map_err(|e| db_err(&self.path, e))?;
        let rows: Vec<(i64, String, String, String, bool)> = st
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        rows.into_iter()
            .map(|(seq, role, text, at, tagged)| {
                Ok((
                    seq,
                    Message {
                        role,
                        text,
                        at: parse_ts(&self.path, &at)?,
                        tagged,
                    },
                ))
            })
            .collect()
    }

    /// Drops window messages with `seq <= up_to_seq` (they slid out); returns how many.
    pub fn pop_messages(&mut self, up_to_seq: i64) -> Result<usize> {
        self.write(|c, p| {
            c.execute("DELETE FROM window WHERE seq <= ?1", [up_to_seq])
                .map_err(|e| db_err(p, e))
        })
    }

    /// Drops window messages with `seq >= from_seq` (the newest: a turn the client took back
    /// to edit or regenerate it); returns how many.
    pub fn retract_messages(&mut self, from_seq: i64) -> Result<usize> {
        self.write(|c, p| {
            c.execute("DELETE FROM window WHERE seq >= ?1", [from_seq])
                .map_err(|e| db_err(p, e))
        })
    }

    /// Replaces the running summary.
    pub fn set_summary(&mut self, text: &str) -> Result<()> {
        let t = text.to_owned();
        self.write(|c, p| set_meta_tx(c, p, META_SUMMARY, &t))
    }

    /// The running summary, if one was set.
    pub fn summary(&self) -> Result<Option<String>> {
        self.meta(META_SUMMARY)
    }
}
