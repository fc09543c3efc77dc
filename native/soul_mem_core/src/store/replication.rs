//! Replication of a store: the rows each write changes, recorded by SQLite's session extension
//! as a changeset, and replayed in order on a copy of the store on another machine.
//!
//! A primary store turned to capture ([`Store::set_capture`]) records, for every write that
//! commits, the changeset of that one transaction. The runtime takes them
//! ([`Store::take_changes`]) after each acknowledged operation and has them applied to the
//! replica ([`apply_changes`]) before it acknowledges. A replica starts from a consistent copy
//! of the primary ([`Store::snapshot_to`], `VACUUM INTO`) stamped with a base id and sequence
//! number 0 ([`init_replica`]); each batch carries the next sequence number, so a replica that
//! missed one refuses it ([`Error::ReplicaMismatch`]) and is rebuilt from a fresh snapshot instead of
//! drifting.
//!
//! Changesets name rows by primary key (every table has one), so they replay on a copy made by
//! `VACUUM INTO` (which keeps `INTEGER PRIMARY KEY`s but not bare rowids). Replaying is
//! state-based: a row the changeset inserts or updates takes the primary's values even when the
//! replica's row differs (`REPLACE` on conflict), and a row it deletes that is already gone is
//! skipped, so the replica converges on the primary's rows for every row a write touched.
//!
//! Copies carry an epoch (meta [`META_EPOCH`]): a replica that takes over from a home that is
//! down is promoted ([`promote_replica`]) to the next epoch, so that when two copies meet again
//! (a home that comes back, a healed network split) the newer one is known.

use super::open::io_to_store_err;
use super::*;
use rusqlite::session::{ConflictAction, ConflictType, Session};
use rusqlite::Transaction;

/// Meta key of a copy's epoch (absent = 0): raised each time a replica takes over.
pub const META_EPOCH: &str = "epoch";
/// Meta key, on a replica only, of the base it was copied from (`<base id>`).
pub const META_REPLICA_BASE: &str = "replica_base";
/// Meta key, on a replica only, of the last batch applied.
pub const META_REPLICA_SEQ: &str = "replica_seq";

/// How long a replica waits for another writer of its file (only a promotion can race an
/// apply, and never while the home is alive).
const REPLICA_BUSY_MS: u64 = 5_000;

/// Where a replica stands: the base it was copied from, the last batch applied and its epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    /// Id of the snapshot the replica was made from.
    pub base: String,
    /// Sequence number of the last batch applied (0 right after the snapshot).
    pub seq: u64,
    /// The copy's epoch.
    pub epoch: u64,
}

impl Store {
    /// Turns change capture on or off. While on, every write that commits leaves its
    /// changeset for [`Store::take_changes`]; turning it off drops what was not taken.
    pub fn set_capture(&mut self, on: bool) {
        self.capture = on;
        self.captured.clear();
        self.capture_lost = false;
    }

    /// Whether change capture is on.
    pub fn capturing(&self) -> bool {
        self.capture
    }

    /// The changesets of the writes committed since the last call, oldest first (each one a
    /// whole transaction). [`Error::ReplicaMismatch`] when a committed write's changes could not be
    /// recorded: the replica can no longer follow and must be rebuilt from a snapshot.
    pub fn take_changes(&mut self) -> Result<Vec<Vec<u8>>> {
        let taken = std::mem::take(&mut self.captured);
        if std::mem::replace(&mut self.capture_lost, false) {
            return Err(Error::ReplicaMismatch(format!(
                "store {}: a write's changes were not recorded; the replica needs a new snapshot",
                self.path.display()
            )));
        }
        Ok(taken)
    }

    /// Writes a consistent, compacted copy of the store to `dest` (which must not exist) with
    /// `VACUUM INTO`, and drops the changes captured so far (the copy has them). Returns its
    /// size in bytes. Complexity: O(file size).
    pub fn snapshot_to(&mut self, dest: &Path) -> Result<u64> {
        if dest.exists() {
            return Err(Error::invalid_argument(
                "dest",
                format!("{} exists already", dest.display()),
            ));
        }
        let target = dest
            .to_str()
            .ok_or_else(|| Error::invalid_argument("dest", "must be valid UTF-8"))?;
        self.conn
            .execute("VACUUM INTO ?1", [target])
            .map_err(|e| db_err(&self.path, e))?;
        self.captured.clear();
        self.capture_lost = false;
        std::fs::metadata(dest)
            .map(|m| m.len())
            .map_err(|e| io_to_store_err(dest, &e))
    }

    /// This copy's epoch (0 until a replica of it was first promoted).
    pub fn epoch(&self) -> Result<u64> {
        Ok(parse_u64(self.meta(META_EPOCH)?.as_deref()))
    }

    /// Runs `f` in one IMMEDIATE transaction with a session recording its changes: on commit
    /// the changeset joins [`Store::take_changes`]. A commit whose changeset cannot be read
    /// stays committed (it is durable: the caller must hear `Ok`) and marks the capture lost.
    pub(super) fn write_captured<T>(
        &mut self,
        f: impl FnOnce(&Connection, &Path) -> Result<T>,
    ) -> Result<T> {
        let path = self.path.clone();
        let mut session = Session::new(&self.conn).map_err(|e| db_err(&path, e))?;
        session.attach(None::<&str>).map_err(|e| db_err(&path, e))?;
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| db_err(&path, e))?;
        let out = f(&tx, &path)?;
        tx.commit().map_err(|e| db_err(&path, e))?;
        self.after_commit();
        let mut changes = Vec::new();
        match session.changeset_strm(&mut changes) {
            Ok(()) if changes.is_empty() => {}
            Ok(()) => self.captured.push(changes),
            Err(_) => self.capture_lost = true,
        }
        Ok(out)
    }
}

/// Stamps a fresh snapshot at `path` as replica `base` at sequence 0 (and removes nothing
/// else: the rows are the primary's).
pub fn init_replica(path: &Path, base: &str) -> Result<()> {
    let mut conn = open_replica(path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| db_err(path, e))?;
    set_meta_tx(&tx, path, META_REPLICA_BASE, base)?;
    set_meta_tx(&tx, path, META_REPLICA_SEQ, "0")?;
    tx.commit().map_err(|e| db_err(path, e))
}

/// Where the replica at `path` stands.
pub fn replica_state(path: &Path) -> Result<ReplicaState> {
    let conn = open_replica(path)?;
    let base = meta_of(&conn, path, META_REPLICA_BASE)?
        .ok_or_else(|| Error::ReplicaMismatch(format!("{} is not a replica", path.display())))?;
    Ok(ReplicaState {
        base,
        seq: parse_u64(meta_of(&conn, path, META_REPLICA_SEQ)?.as_deref()),
        epoch: parse_u64(meta_of(&conn, path, META_EPOCH)?.as_deref()),
    })
}

/// A meta value read through `conn` (a replica's connection or transaction).
fn meta_of(conn: &Connection, path: &Path, key: &str) -> Result<Option<String>> {
    conn.query_row("SELECT value FROM meta WHERE key=?1", [key], |r| r.get(0))
        .optional()
        .map_err(|e| db_err(path, e))
}

/// Applies batch `seq` of replica `base` (its changesets in order) to the replica at `path`,
/// in one transaction, durable when it returns. [`Error::ReplicaMismatch`] (nothing applied) when the
/// replica was made from another base or the last batch it applied is not `seq - 1`; a batch
/// applied already (`seq` not above the replica's) is acknowledged without applying it again.
/// Complexity: O(changed rows).
pub fn apply_changes(path: &Path, base: &str, seq: u64, changes: &[Vec<u8>]) -> Result<()> {
    let mut conn = open_replica(path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| db_err(path, e))?;
    if meta_of(&tx, path, META_REPLICA_BASE)?.as_deref() != Some(base) {
        return Err(Error::ReplicaMismatch(format!(
            "{} is not a replica of base {base}",
            path.display()
        )));
    }
    let at = parse_u64(meta_of(&tx, path, META_REPLICA_SEQ)?.as_deref());
    if seq <= at {
        return Ok(());
    }
    if seq != at + 1 {
        return Err(Error::ReplicaMismatch(format!(
            "{}: batch {seq} after {at}: a batch is missing",
            path.display()
        )));
    }
    for changeset in changes {
        let mut input: &[u8] = changeset;
        tx.apply_strm(&mut input, None::<fn(&str) -> bool>, |conflict, _item| {
            match conflict {
                // The primary's row is the truth: take its values.
                ConflictType::SQLITE_CHANGESET_DATA | ConflictType::SQLITE_CHANGESET_CONFLICT => {
                    ConflictAction::SQLITE_CHANGESET_REPLACE
                }
                // A row to update or delete that is not here: nothing to do for it.
                ConflictType::SQLITE_CHANGESET_NOTFOUND => ConflictAction::SQLITE_CHANGESET_OMIT,
                _ => ConflictAction::SQLITE_CHANGESET_ABORT,
            }
        })
        .map_err(|e| db_err(path, e))?;
    }
    set_meta_tx(&tx, path, META_REPLICA_SEQ, &seq.to_string())?;
    tx.commit().map_err(|e| db_err(path, e))
}

/// Turns the replica at `path` into a primary copy at the next epoch: the replica marks go
/// and the epoch rises by one. Returns the new epoch.
pub fn promote_replica(path: &Path) -> Result<u64> {
    let mut conn = open_replica(path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| db_err(path, e))?;
    let next = parse_u64(meta_of(&tx, path, META_EPOCH)?.as_deref()) + 1;
    tx.execute(
        "DELETE FROM meta WHERE key IN (?1, ?2)",
        [META_REPLICA_BASE, META_REPLICA_SEQ],
    )
    .map_err(|e| db_err(path, e))?;
    set_meta_tx(&tx, path, META_EPOCH, &next.to_string())?;
    tx.commit().map_err(|e| db_err(path, e))?;
    Ok(next)
}

/// A connection to a replica file: it must exist and be a SoulMem store; WAL and
/// `synchronous=FULL` like a primary, so an applied batch survives a crash.
fn open_replica(path: &Path) -> Result<Connection> {
    if !path.is_file() {
        return Err(Error::NotFound(format!("replica {}", path.display())));
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| db_err(path, e))?;
    conn.busy_timeout(std::time::Duration::from_millis(REPLICA_BUSY_MS))
        .map_err(|e| db_err(path, e))?;
    let app_id: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| db_err(path, e))?;
    if app_id != APPLICATION_ID {
        return Err(incompatible_at(path, "not a SoulMem store"));
    }
    let _mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(|e| db_err(path, e))?;
    conn.execute_batch("PRAGMA synchronous=FULL;")
        .map_err(|e| db_err(path, e))?;
    Ok(conn)
}

fn parse_u64(value: Option<&str>) -> u64 {
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}
