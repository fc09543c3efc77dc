//! The on-disk store of one character: long-term memory (notes, links, embeddings), retrieval
//! records, forgetting state, the sliding window and its running summary, in one SQLite file.
//!
//! Durability contract: a write that returned `Ok` survives `kill -9` (and, with the disk's
//! cooperation, power loss) — the file runs in WAL mode with `synchronous=FULL` and every
//! public write is exactly one transaction. A failed write changes nothing.
//!
//! One process owns a store at a time: [`Store::open`] takes an exclusive advisory lock on
//! `<db>.lock` for the lifetime of the [`Store`] (SQLite's own locking does not keep WAL readers
//! out, and two writers would interleave conversation state).
//!
//! Tables (see [`MIGRATIONS`]): `notes` (typed payload JSON + indexed id, readable_id, kind,
//! core, retrieval_count, times, archived), `links` (from/to indexed, link_type JSON, ord),
//! `embeddings` (note, model, text hash, f32 blob), `records` (retrieval records), `forget_state`,
//! `window` (sliding window) and `meta` (character, summary, free keys). The schema version is
//! `PRAGMA user_version`; `PRAGMA application_id` is [`APPLICATION_ID`].
//!
//! Files: `open.rs` (opening, locking, migrating), `checkpoint.rs` (writing the graph back and
//! loading it), `notes.rs` (single notes, links and batches of [`Change`]s), `embeddings.rs`,
//! `records.rs` (retrieval records, forgetting state, feedback), `window.rs` (sliding window
//! and summary), `activate.rs` (loading the neighbourhood of a topic as a working-memory subgraph),
//! `peek.rs` (who a file belongs to, read without its lock), `replication.rs` (changesets
//! of each write and their replay on a replica), `listing.rs` (note listing and
//! search over the notes table), `export.rs`
//! (whole-character export and import), `rows.rs` (the SQL row writers and readers all of them
//! share) and `schema.rs` (tables and migrations).

mod activate;
mod checkpoint;
mod embeddings;
mod export;
mod listing;
mod notes;
mod open;
mod peek;
mod records;
mod replication;
mod rows;
mod schema;
mod window;

use rows::*;

pub use activate::{Activation, NeighbourSource};
pub use embeddings::StoredVector;
pub(crate) use embeddings::{query_norms, stored_cosines};
pub use peek::{StorePeek, META_GRAPH_SAVED};
pub use replication::{
    apply_changes, init_replica, promote_replica, replica_state, ReplicaState, META_EPOCH,
    META_REPLICA_BASE, META_REPLICA_SEQ,
};
pub(crate) use rows::{blob_column, link_type_of, pending_by_source, text_column};
pub use schema::{APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION};

use crate::error::{Error, Result};
use crate::graph::{validate_intensity, MemoryGraph, NoteChange, SyncTag};
use crate::import::{validate_link_type, validate_mem_type};
use crate::model::{LinkId, MemoryId, MemoryLink, MemoryLinkType, MemoryNote, MemoryType};
use crate::wal_folder::WalFolder;
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Format tag of [`Store::export_character`] documents.
pub const EXPORT_FORMAT: &str = "soulmem-character";
/// Version of the export document layout written (1: UUID references; 2: readable ids).
pub const EXPORT_VERSION: u32 = 2;

/// Meta key holding the character name.
const META_CHARACTER: &str = "character";
/// Meta key holding the running summary of the sliding window.
const META_SUMMARY: &str = "summary";

/// Source of [`Store`] instance ids (a [`SyncTag`] names the handle, not the file: another
/// handle may have written the file in between).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// Whole-graph writes of more notes than this get a larger page cache for their duration.
const BIG_CACHE_NOTES: usize = 20_000;

/// How to open a store.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Refuse every write (`PRAGMA query_only`); the file must already exist at the current
    /// schema version. The lock is still exclusive.
    pub read_only: bool,
    /// Caps the file at this many pages (`PRAGMA max_page_count`, per connection): writes that
    /// would grow it fail with [`Error::DiskFull`]. A quota, and how tests simulate a full disk.
    pub max_pages: Option<u64>,
}

/// One message of the sliding window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Who spoke (`"user"`, `"assistant"`, … — free text).
    pub role: String,
    /// What was said.
    pub text: String,
    /// When.
    pub at: DateTime<Utc>,
    /// Tagged messages trigger a summary (see the design's sliding window).
    pub tagged: bool,
}

/// Forgetting state of one note: how much of it is lost and what it reads like now. The
/// original text is kept so forgetting can be undone or audited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetState {
    /// Missing degree in [0, 1] (0 = intact).
    pub missing_degree: f64,
    /// Discrete band the degree falls in (meaning defined by the forgetting module).
    pub band: u32,
    /// Text shown instead of the original, when revised.
    pub revised_text: Option<String>,
    /// The original text, kept.
    pub original_text: Option<String>,
    /// When this state was written.
    pub updated_at: DateTime<Utc>,
}

/// One write of a batch committed by [`Store::apply`].
// Batches hold a handful of changes; boxing notes would only add noise at call sites.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Upsert a note and replace its outgoing links ([`Store::put_note`]).
    PutNote(MemoryNote),
    /// Upsert one link ([`Store::put_link`]).
    PutLink(MemoryLink),
    /// Delete one link ([`Store::delete_link`]); absent links are not an error.
    DeleteLink(LinkId),
    /// Archive a note ([`Store::archive_note`]); must exist.
    ArchiveNote(MemoryId),
    /// Delete a note, its links in both directions and its side data ([`Store::delete_note`]).
    DeleteNote(MemoryId),
    /// Append retrieval records ([`Store::append_records`]).
    AppendRecords(Vec<(MemoryId, DateTime<Utc>)>),
    /// Set a stored note's retrieval count and last access time in place, the rest of its row
    /// and its links untouched (a note gone from the store stays gone).
    SetRetrieval(MemoryId, u32, DateTime<Utc>),
    /// Set the forgetting state of a note ([`Store::set_forget_state`]).
    SetForgetState(MemoryId, ForgetState),
    /// Clear the forgetting state of a note.
    ClearForgetState(MemoryId),
    /// Append a window message ([`Store::append_message`]).
    AppendMessage(Message),
    /// Drop window messages up to a sequence number ([`Store::pop_messages`]).
    PopMessages(i64),
    /// Replace the running summary ([`Store::set_summary`]).
    SetSummary(String),
    /// Set a meta key ([`Store::set_meta`]).
    SetMeta(String, String),
    /// Append user feedback (`+1` / `-1`) on a note ([`Store::append_feedback`]).
    AppendFeedback(MemoryId, i8, DateTime<Utc>),
}

/// How [`Store::checkpoint`] wrote the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointMode {
    /// Every active note row was deleted and the whole graph written again: O(graph).
    Full,
    /// Only the notes the graph logged as changed since its last sync with this store were
    /// rewritten or deleted: O(changed notes).
    Incremental,
}

/// Why a checkpoint wrote the whole graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FullReason {
    /// [`Store::save_graph`], which always writes the whole graph.
    Requested,
    /// The graph was never synced with a store (new, imported from JSON …).
    Untracked,
    /// The graph was synced with another store handle, or note rows of this store were written
    /// since by something other than this graph's checkpoints.
    Stale,
    /// `extra` edits links directly, or deletes a note the graph still holds.
    Extra,
    /// The stored rows did not match the change log (a readable id held by an active row the
    /// log does not explain, a logged note without a row): written whole to stay exact.
    Mismatch,
}

/// What a checkpoint wrote, for callers, tests and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointStats {
    /// Whole graph or changed notes only.
    pub mode: CheckpointMode,
    /// Why the whole graph was written (`None` when incremental).
    pub full_reason: Option<FullReason>,
    /// Note rows written (every note of the graph when full).
    pub notes_written: usize,
    /// Links written with them (pending links included).
    pub links_written: usize,
    /// Active note rows deleted: those that left the graph when incremental, every active row
    /// (then written again) when full.
    pub notes_deleted: usize,
}

/// What a checkpoint writes besides `extra`.
enum Plan {
    /// The whole graph.
    Full(FullReason),
    /// These notes: rewritten when in the graph, their active row deleted when not.
    Incremental(Vec<MemoryId>),
}

/// An open store. Not `Sync`: one owner (the character's process) at a time.
#[derive(Debug)]
pub struct Store {
    /// Folds the log into the file off the writer's path (`None` read-only). Declared before
    /// `conn`: dropped first, so the writer's connection is the file's last and its close
    /// folds what is left and removes the log.
    folder: Option<WalFolder>,
    conn: Connection,
    path: PathBuf,
    character: String,
    read_only: bool,
    // Held for the lifetime of the store; closing the file releases the lock (also on kill -9).
    _lock: File,
    /// Process-unique id of this handle (see [`Store::sync_tag`]).
    instance: u64,
    /// Successful writes to note or link rows through this handle; a graph synced at an
    /// older generation may miss some of them, so it is written whole.
    generation: u64,
    /// Successful writes of the `embeddings` table through this handle
    /// ([`Store::vectors_tag`]).
    vectors_written: u64,
    /// What the last successful checkpoint did.
    last_checkpoint: Option<CheckpointStats>,
    /// Whether writes record their changesets (replication, `replication.rs`).
    capture: bool,
    /// Changesets of committed writes not yet taken, oldest first.
    captured: Vec<Vec<u8>>,
    /// A committed write's changeset could not be read: the replica must be rebuilt.
    capture_lost: bool,
}

/// Converts a SQLite error into the crate error, keeping the failure classes callers act on.
pub(crate) fn db_err(path: &Path, e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode as C;
    let p = path.display().to_string();
    let message = e.to_string();
    match e.sqlite_error_code() {
        Some(C::DatabaseCorrupt) | Some(C::NotADatabase) => Error::Corrupt { path: p, message },
        Some(C::DiskFull) => Error::DiskFull { path: p, message },
        Some(C::ReadOnly) => Error::ReadOnly { path: p, message },
        Some(C::DatabaseBusy) | Some(C::DatabaseLocked) => Error::InUse { path: p },
        Some(C::PermissionDenied) => Error::ReadOnly { path: p, message },
        _ => Error::Io { path: p, message },
    }
}

/// A value read back from the file that does not parse: the file is damaged or was edited.
fn corrupt(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        path: path.display().to_string(),
        message: what.to_string(),
    }
}

/// Fixed-width RFC 3339 (nanoseconds, `Z`): text order equals time order.
pub(crate) fn ts(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

fn parse_ts(path: &Path, s: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| corrupt(path, format!("bad timestamp {s:?}: {e}")))
}

/// A UUID column's text parsed; one that does not parse is a damaged file.
pub(crate) fn parse_id(path: &Path, s: &str) -> Result<uuid::Uuid> {
    uuid::Uuid::parse_str(s).map_err(|e| corrupt(path, format!("bad uuid {s:?}: {e}")))
}

/// SQL for "the note ids of the JSON array bound as `?1`" (SQLite's `json_each`): one
/// statement reads a whole batch of notes instead of one statement per note.
pub(super) const ID_LIST: &str = "(SELECT value FROM json_each(?1))";

/// The `CREATE` statement SQLite keeps for table `name` of `conn`, if there is one (how a file
/// written by an older build is recognised). Complexity: O(schema objects).
pub(crate) fn table_sql(conn: &Connection, name: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get(0),
    )
    .optional()
}

/// The JSON array of `ids` (UUID text) to bind for [`ID_LIST`]. Complexity: O(|ids|).
pub(super) fn id_list(ids: &[MemoryId]) -> Result<String> {
    to_json(&ids)
}

fn to_json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::InvalidJson(e.to_string()))
}

impl Store {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The character this store belongs to.
    pub fn character(&self) -> &str {
        &self.character
    }

    /// Schema version of the file (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<i64> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| db_err(&self.path, e))
    }

    /// Runs SQLite's `quick_check`; returns the problems found (empty when healthy).
    /// Complexity: O(file size).
    pub fn check_integrity(&self) -> Result<Vec<String>> {
        let mut st = self
            .conn
            .prepare("PRAGMA quick_check")
            .map_err(|e| db_err(&self.path, e))?;
        let rows: Vec<String> = st
            .query_map([], |r| r.get(0))
            .and_then(|it| it.collect())
            .map_err(|e| db_err(&self.path, e))?;
        Ok(rows.into_iter().filter(|r| r != "ok").collect())
    }

    /// Runs `f` in one IMMEDIATE transaction: everything it wrote commits, or (on any error,
    /// including a failed commit) nothing does.
    fn write<T>(&mut self, f: impl FnOnce(&Connection, &Path) -> Result<T>) -> Result<T> {
        if self.read_only {
            return Err(Error::ReadOnly {
                path: self.path.display().to_string(),
                message: "store was opened read-only".into(),
            });
        }
        if self.capture {
            return self.write_captured(f);
        }
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_err(&path, e))?;
        let out = f(&tx, &path)?;
        tx.commit().map_err(|e| db_err(&path, e))?;
        self.after_commit();
        Ok(out)
    }

    /// After a commit on this handle's connection: the log may be due a fold.
    pub(super) fn after_commit(&self) {
        if let Some(f) = &self.folder {
            f.after_commit();
        }
    }

    /// [`Self::write`] for writes that may change note or link rows outside a checkpoint: once
    /// one commits, graphs synced before no longer match the store and their next checkpoint
    /// is a full one. (A failed write changed nothing, so it keeps them in sync.)
    fn write_rows<T>(&mut self, f: impl FnOnce(&Connection, &Path) -> Result<T>) -> Result<T> {
        let out = self.write(f)?;
        self.generation += 1;
        Ok(out)
    }

    /// The current state of this handle's note and link rows. A graph carrying it (see
    /// [`MemoryGraph::sync_tag`]) is checkpointed incrementally.
    pub fn sync_tag(&self) -> SyncTag {
        SyncTag {
            store: self.instance,
            generation: self.generation,
        }
    }

    /// The count of this handle's successful writes of stored vectors ([`Store::put_embedding`],
    /// [`Store::put_embeddings`]): a copy of stored vectors read at one count is the store's
    /// while the count (and [`Self::sync_tag`], for notes deleted with their vectors) holds.
    pub fn vectors_tag(&self) -> u64 {
        self.vectors_written
    }

    /// What the last successful [`Store::checkpoint`] or [`Store::save_graph`] of this handle
    /// did, if any.
    pub fn last_checkpoint(&self) -> Option<&CheckpointStats> {
        self.last_checkpoint.as_ref()
    }

    // ---- meta -------------------------------------------------------------------------------

    /// A meta value.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key=?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| db_err(&self.path, e))
    }

    /// Sets a meta value (one transaction). The keys `character` and `summary` are reserved.
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (key.to_owned(), value.to_owned());
        self.write(|c, p| set_meta_tx(c, p, &k, &v))
    }

    /// The connection, for crate-internal readers that have no method here.
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// A second, read-only connection to the file, for a bulk read on another thread while
    /// this handle reads too (WAL: it sees the last committed state; the caller holds the
    /// store, so nothing commits in between). Default page cache: a scan does not reuse
    /// pages. Dropped when the read is done.
    /// Complexity: O(1).
    pub(crate) fn reader(&self) -> Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| db_err(&self.path, e))?;
        Ok(conn)
    }
}

#[cfg(test)]
mod tests;
