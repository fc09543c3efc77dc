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

mod activate;
mod bench;
mod export;
mod rows;
mod schema;

use rows::*;

pub use activate::Activation;
pub use bench::{bench_store, StoreBench};
pub use schema::{APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION};

use crate::error::{Error, Result};
use crate::graph::{validate_intensity, MemoryGraph, NoteChange, SyncTag};
use crate::import::{validate_link_type, validate_mem_type};
use crate::model::{LinkId, MemoryId, MemoryLink, MemoryLinkType, MemoryNote, MemoryType};
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
/// Version of the export document layout.
pub const EXPORT_VERSION: u32 = 1;

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
    /// What the last successful checkpoint did.
    last_checkpoint: Option<CheckpointStats>,
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

fn parse_id(path: &Path, s: &str) -> Result<uuid::Uuid> {
    uuid::Uuid::parse_str(s).map_err(|e| corrupt(path, format!("bad uuid {s:?}: {e}")))
}

fn to_json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::InvalidJson(e.to_string()))
}

/// Path of the advisory lock file of a database.
fn lock_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

fn io_to_store_err(path: &Path, e: &std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::PermissionDenied | K::ReadOnlyFilesystem => Error::ReadOnly {
            path: path.display().to_string(),
            message: e.to_string(),
        },
        K::StorageFull => Error::DiskFull {
            path: path.display().to_string(),
            message: e.to_string(),
        },
        _ => Error::io(path, e),
    }
}

/// Takes the exclusive advisory lock of `db`. flock locks belong to the open file description,
/// so a second open in the same process is refused as well as one from another process.
#[cfg(unix)]
fn take_lock(db: &Path) -> Result<File> {
    let lp = lock_path(db);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&lp)
        .map_err(|e| io_to_store_err(&lp, &e))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(Error::InUse {
            path: db.display().to_string(),
        }),
        Err(e) => Err(Error::io(&lp, &std::io::Error::from(e))),
    }
}

/// Non-unix builds have no advisory lock (SoulMem ships on unix); only the file is opened.
#[cfg(not(unix))]
fn take_lock(db: &Path) -> Result<File> {
    let lp = lock_path(db);
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lp)
        .map_err(|e| io_to_store_err(&lp, &e))
}

/// Refuses a read-write open up front when the file or its directory cannot be written (WAL
/// mode must create `-wal`/`-shm` next to the file), with a clearer error than SQLite's.
/// `access(2)` answers for the real caller, so root (which may write anyway) passes.
#[cfg(unix)]
fn check_writable(path: &Path, exists: bool) -> Result<()> {
    use rustix::fs::{access, Access};
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let refuse = |what: &Path, e: rustix::io::Errno| Error::ReadOnly {
        path: path.display().to_string(),
        message: format!(
            "{} is not writable: {}",
            what.display(),
            std::io::Error::from(e)
        ),
    };
    access(dir, Access::WRITE_OK).map_err(|e| refuse(dir, e))?;
    if exists {
        access(path, Access::WRITE_OK).map_err(|e| refuse(path, e))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_writable(_path: &Path, _exists: bool) -> Result<()> {
    Ok(())
}

/// Refuses files that are not SQLite databases before SQLite (or the lock) touches anything.
/// Returns whether a non-empty file exists.
fn check_header(path: &Path) -> Result<bool> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_to_store_err(path, &e)),
    };
    if !meta.is_file() {
        return Err(Error::Io {
            path: path.display().to_string(),
            message: "not a regular file".into(),
        });
    }
    if meta.len() == 0 {
        // SQLite treats an empty file as an empty database; nothing can be lost by using it.
        return Ok(false);
    }
    if meta.len() < 100 {
        return Err(corrupt(
            path,
            format!(
                "truncated header: {} bytes, an SQLite header needs 100",
                meta.len()
            ),
        ));
    }
    let mut header = [0u8; 100];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .map_err(|e| io_to_store_err(path, &e))?;
    if &header[..16] != b"SQLite format 3\0" {
        return Err(corrupt(path, "not an SQLite database (bad header magic)"));
    }
    Ok(true)
}

/// Readable, collision-free file name for a character (names are often not ASCII).
fn file_name_for(character: &str) -> String {
    let safe: String = character
        .chars()
        .take(40)
        .map(|c| if c.is_alphanumeric() { c } else { '_' })
        .collect();
    let hash = MemoryId::derive(character, "\u{0}store")
        .0
        .simple()
        .to_string();
    format!("{safe}-{}.soulmem", &hash[..12])
}

impl Store {
    /// The database path of `character` under `data_dir` (one file per character).
    pub fn path_for(data_dir: impl AsRef<Path>, character: &str) -> PathBuf {
        data_dir.as_ref().join(file_name_for(character))
    }

    /// Opens the store of `character` under `data_dir`, creating it if needed.
    pub fn open_in(data_dir: impl AsRef<Path>, character: &str) -> Result<Store> {
        Store::open(Store::path_for(data_dir, character), character)
    }

    /// Opens (creating if needed) the store at `path` for `character`, read-write.
    ///
    /// Errors: [`Error::Corrupt`] for a damaged file or a non-SQLite file (then nothing is
    /// touched, not even the lock file), [`Error::Incompatible`] for a foreign SQLite database,
    /// a store of another character or one with a newer schema, [`Error::InUse`] when another
    /// process or handle holds it, [`Error::ReadOnly`] when it cannot be written.
    pub fn open(path: impl AsRef<Path>, character: &str) -> Result<Store> {
        Store::open_with(path, character, &StoreOptions::default())
    }

    /// [`Store::open`] with options.
    pub fn open_with(
        path: impl AsRef<Path>,
        character: &str,
        opts: &StoreOptions,
    ) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        if character.trim().is_empty() {
            return Err(Error::invalid_argument(
                "character",
                "must be a non-empty name",
            ));
        }
        let existed = check_header(&path)?;
        if opts.read_only && !existed {
            return Err(Error::NotFound(format!("store {}", path.display())));
        }
        if !existed {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| io_to_store_err(dir, &e))?;
            }
        }
        if !opts.read_only {
            check_writable(&path, existed)?;
        }
        let lock = take_lock(&path)?;
        // Re-check under the lock: another process may have been writing the file.
        check_header(&path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).map_err(|e| db_err(&path, e))?;
        // Reading the schema makes SQLite validate the file (and read any WAL) before we
        // change anything.
        let app_id: i32 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| db_err(&path, e))?;
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| db_err(&path, e))?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| db_err(&path, e))?;
        let incompatible = |message: String| Error::Incompatible {
            path: path.display().to_string(),
            message,
        };
        if app_id != APPLICATION_ID && (app_id != 0 || tables != 0 || version != 0) {
            return Err(incompatible(format!(
                "not a SoulMem store (application_id {app_id:#x}, {tables} schema objects)"
            )));
        }
        if version > SCHEMA_VERSION {
            return Err(incompatible(format!(
                "schema version {version} is newer than this build's {SCHEMA_VERSION}; upgrade SoulMem"
            )));
        }
        if opts.read_only && version < SCHEMA_VERSION {
            return Err(incompatible(format!(
                "schema version {version} needs migration to {SCHEMA_VERSION}; open it read-write once"
            )));
        }
        if !opts.read_only {
            let mode: String = conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                .map_err(|e| db_err(&path, e))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::Io {
                    path: path.display().to_string(),
                    message: format!("could not enable WAL (journal_mode is {mode})"),
                });
            }
        }
        // cache_size: 32 MiB (negative = KiB) instead of 2 MiB, so whole-graph saves and loads
        // of 100k-note characters do not thrash the page cache; it is a ceiling, not an
        // allocation.
        conn.execute_batch(
            "PRAGMA synchronous=FULL; PRAGMA foreign_keys=OFF; PRAGMA cache_size=-32768;",
        )
        .map_err(|e| db_err(&path, e))?;
        if let Some(pages) = opts.max_pages {
            // The pragma answers with the limit in force (never below the current size).
            let _: i64 = conn
                .query_row(&format!("PRAGMA max_page_count={pages}"), [], |r| r.get(0))
                .map_err(|e| db_err(&path, e))?;
        }
        let mut store = Store {
            conn,
            path,
            character: character.to_owned(),
            read_only: opts.read_only,
            _lock: lock,
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            generation: 0,
            last_checkpoint: None,
        };
        if version < SCHEMA_VERSION {
            store.migrate(version)?;
        }
        let stored = store.meta(META_CHARACTER)?;
        match stored {
            Some(c) if c == character => {}
            Some(c) => {
                return Err(incompatible_at(
                    &store.path,
                    format!("store belongs to character {c:?}, not {character:?}"),
                ))
            }
            None if store.read_only => {
                return Err(incompatible_at(&store.path, "store has no character"))
            }
            None => store.set_meta(META_CHARACTER, character)?,
        }
        if opts.read_only {
            store
                .conn
                .execute_batch("PRAGMA query_only=1;")
                .map_err(|e| db_err(&store.path, e))?;
        }
        Ok(store)
    }

    /// Applies `MIGRATIONS[from..]` and stamps the ids, all in one transaction.
    fn migrate(&mut self, from: i64) -> Result<()> {
        migrate_steps(&mut self.conn, &self.path, from, MIGRATIONS)
    }

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
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_err(&path, e))?;
        let out = f(&tx, &path)?;
        tx.commit().map_err(|e| db_err(&path, e))?;
        Ok(out)
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

    // ---- graph ------------------------------------------------------------------------------

    /// Replaces all active (non-archived) notes and their links with the graph's, in one
    /// transaction; buffered (pending) links are stored too. Archived notes are kept, unless
    /// the graph holds a note with the same id or readable id, which then replaces them.
    /// Always writes the whole graph and does not sync it (see [`Store::checkpoint`]).
    ///
    /// Complexity: O(nodes + links) rows written.
    pub fn save_graph(&mut self, graph: &MemoryGraph) -> Result<()> {
        self.write_graph(graph, &[], Plan::Full(FullReason::Requested))
            .map(|_| ())
    }

    /// Makes the stored active notes equal the graph, plus `extra` changes (summary, popped
    /// messages, archived notes, forgetting state …) in the SAME transaction: a write-back that
    /// lands whole or not at all. `extra` runs before the graph is written: a note archived
    /// there and absent from the graph stays archived (not deleted), which is how working
    /// memory releases notes. The result is that of [`Store::save_graph`] plus `extra`.
    ///
    /// Incremental when the graph carries this store's current [`Store::sync_tag`] (it was
    /// loaded from or checkpointed to this handle, and no other write touched note rows since):
    /// only the notes in its change log are written (an inserted note at the end of the stored
    /// order, so the order stays the graph's) and the active rows of notes that left it are
    /// deleted with their outgoing links. Otherwise — or when `extra` edits links or deletes a
    /// note the graph holds, or the rows do not match the log — the whole graph is written;
    /// the result says which ([`CheckpointStats`]). On success the graph is synced (its log
    /// emptied, its tag set); on failure nothing is written and the graph keeps its log, so
    /// the next checkpoint retries the same notes.
    ///
    /// Complexity: incremental O(changed notes + their links + pending links + extra) rows
    /// and in-memory work; full O(nodes + links + extra).
    pub fn checkpoint(
        &mut self,
        graph: &mut MemoryGraph,
        extra: &[Change],
    ) -> Result<CheckpointStats> {
        let plan = self.plan(graph, extra);
        let stats = self.write_graph(graph, extra, plan)?;
        graph.mark_synced(self.sync_tag());
        Ok(stats)
    }

    /// [`Store::put_note`] of `note` as [`MemoryGraph::upsert`] would keep it (history of an
    /// existing note preserved), then that upsert into `graph`: durable first, then in memory.
    /// Unlike a bare `put_note`, a graph synced with this store stays synced (the note is in
    /// its change log, so the next checkpoint stays incremental). Bad input changes nothing.
    ///
    /// Complexity: O(note size + its out-degree).
    pub fn upsert_note(&mut self, graph: &mut MemoryGraph, note: MemoryNote) -> Result<MemoryId> {
        let note = graph.prepare_upsert(note)?;
        let synced = graph.sync_tag() == Some(self.sync_tag());
        self.put_note(&note)?;
        let id = note.id;
        // Should the upsert fail, the graph's tag is left stale: the next checkpoint is full
        // and removes the stored note again.
        graph.upsert(note)?;
        if synced {
            graph.retag(self.sync_tag());
        }
        Ok(id)
    }

    /// What a checkpoint of `graph` with `extra` must write. Complexity: O(log + extra).
    fn plan(&self, graph: &MemoryGraph, extra: &[Change]) -> Plan {
        match graph.sync_tag() {
            None => return Plan::Full(FullReason::Untracked),
            Some(tag) if tag != self.sync_tag() => return Plan::Full(FullReason::Stale),
            Some(_) => {}
        }
        let mut touched: HashSet<MemoryId> = graph.changed_ids().copied().collect();
        for ch in extra {
            match ch {
                // A full write lets the graph's version of these notes win (and deletes the
                // active ones it does not hold); rewriting or deleting them does the same.
                Change::PutNote(n) => {
                    touched.insert(n.id);
                }
                Change::ArchiveNote(id) => {
                    touched.insert(*id);
                }
                Change::DeleteNote(id) if graph.get(id).is_some() => {
                    return Plan::Full(FullReason::Extra)
                }
                // Deleting a note drops every stored link to it, pending links of graph notes
                // included: those notes are rewritten.
                Change::DeleteNote(id) => {
                    touched.extend(graph.pending_to(id).iter().map(|l| l.from));
                }
                // A link upsert may replace a link of any note (ids are global): rare, so not
                // tracked.
                Change::PutLink(_) | Change::DeleteLink(_) => return Plan::Full(FullReason::Extra),
                _ => {}
            }
        }
        Plan::Incremental(touched.into_iter().collect())
    }

    /// Runs one checkpoint transaction: `extra`, then the graph as `plan` says. On success the
    /// generation moves on and the stats are kept.
    fn write_graph(
        &mut self,
        graph: &MemoryGraph,
        extra: &[Change],
        plan: Plan,
    ) -> Result<CheckpointStats> {
        for ch in extra {
            if let Change::PutNote(n) = ch {
                validate_note(n)?;
            }
            if let Change::PutLink(l) = ch {
                validate_link(l)?;
            }
        }
        if graph.character() != self.character {
            return Err(Error::invalid_argument(
                "graph",
                format!(
                    "graph of {:?} saved to the store of {:?}",
                    graph.character(),
                    self.character
                ),
            ));
        }
        // A whole-graph save touches every index page; give it a large page cache for the
        // duration (a ceiling, released below) instead of thrashing the 32 MiB default.
        let big_cache = matches!(plan, Plan::Full(_)) && graph.len() > BIG_CACHE_NOTES;
        if big_cache {
            self.conn
                .execute_batch("PRAGMA cache_size=-262144;")
                .map_err(|e| db_err(&self.path, e))?;
        }
        let result = self.write(|c, p| {
            for ch in extra {
                apply_change(c, p, ChangeRef::from(ch))?;
            }
            match plan {
                Plan::Full(reason) => write_full(c, p, graph, reason),
                Plan::Incremental(touched) => match write_incremental(c, p, graph, touched)? {
                    Some(stats) => Ok(stats),
                    // Everything written so far is what a full write does too (or overwrites).
                    None => write_full(c, p, graph, FullReason::Mismatch),
                },
            }
        });
        if big_cache {
            // Shrinking the cache also frees the pages beyond the limit.
            self.conn
                .execute_batch("PRAGMA cache_size=-32768;")
                .map_err(|e| db_err(&self.path, e))?;
        }
        let stats = result?;
        self.generation += 1;
        self.last_checkpoint = Some(stats.clone());
        Ok(stats)
    }

    /// Loads the active (non-archived) notes into a graph, in stored order. Links to archived
    /// or unstored notes become pending links (not attached, so algorithms ignore them), which
    /// keeps `load_graph` → edit → [`Store::save_graph`] lossless. The graph is synced with
    /// this handle: its next [`Store::checkpoint`] writes only what changed.
    ///
    /// Complexity: O(nodes + links).
    pub fn load_graph(&self) -> Result<MemoryGraph> {
        let notes = self.query_notes("WHERE archived=0")?;
        let active: std::collections::HashSet<MemoryId> = notes.iter().map(|(n, _)| n.id).collect();
        // One sequential scan of the link table beats index-ordered random reads (3x at 100k
        // notes); filtering happens here.
        let mut links = self.query_links("")?;
        links.retain(|from, _| active.contains(from));
        let mut graph = build_graph(&self.character, notes, &mut links)?;
        graph.mark_synced(self.sync_tag());
        Ok(graph)
    }

    /// One note (archived or not) with all its stored outgoing links.
    pub fn note(&self, id: &MemoryId) -> Result<Option<MemoryNote>> {
        let mut notes = self.query_notes_with("WHERE id=?1", &id.to_string())?;
        let Some((mut note, _)) = notes.pop() else {
            return Ok(None);
        };
        note.links = self
            .query_links_with("WHERE from_id=?1", &id.to_string())?
            .remove(&note.id)
            .unwrap_or_default();
        Ok(Some(note))
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

    /// Deletes a note for good, with its links in both directions, embeddings, forgetting state
    /// and retrieval records. Returns whether it existed.
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

    // ---- embeddings -------------------------------------------------------------------------

    /// Stores the embedding of a note under `model`, with the SHA-256 of the embedded text (so
    /// a changed text is detected; see [`crate::cache::text_hash`]).
    pub fn put_embedding(
        &mut self,
        id: &MemoryId,
        model: &str,
        text_hash: &[u8; 32],
        vector: &[f32],
    ) -> Result<()> {
        let (s, m) = (id.to_string(), model.to_owned());
        let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
        self.write(|c, p| {
            c.execute(
                "INSERT OR REPLACE INTO embeddings (note_id, model, text_hash, dim, vec)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![s, m, &text_hash[..], vector.len() as i64, bytes],
            )
            .map(|_| ())
            .map_err(|e| db_err(p, e))
        })
    }

    /// The stored embedding of a note under `model`: (text hash, vector).
    pub fn embedding(&self, id: &MemoryId, model: &str) -> Result<Option<([u8; 32], Vec<f32>)>> {
        let row: Option<(Vec<u8>, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT text_hash, vec FROM embeddings WHERE note_id=?1 AND model=?2",
                params![id.to_string(), model],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| db_err(&self.path, e))?;
        row.map(|(h, v)| {
            let hash: [u8; 32] = h
                .as_slice()
                .try_into()
                .map_err(|_| corrupt(&self.path, "embedding text hash is not 32 bytes"))?;
            Ok((hash, decode_vec(&self.path, &v)?))
        })
        .transpose()
    }

    /// Brute-force nearest active notes to `query` by cosine similarity under `model`, best
    /// first. Seeds for [`Store::activate`].
    ///
    /// Complexity: O(n·d) reading every vector of the model from disk — fine up to ~100k notes
    /// of 384–1024 dims (tens to a few hundred ms); beyond that keep an in-memory or ANN index.
    pub fn nearest(
        &self,
        model: &str,
        query: &[f32],
        top_k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        let qn = norm(query);
        if qn == 0.0 || top_k == 0 {
            return Ok(Vec::new());
        }
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT e.note_id, e.vec FROM embeddings e JOIN notes n ON n.id = e.note_id
                 WHERE e.model=?1 AND n.archived=0",
            )
            .map_err(|e| db_err(&self.path, e))?;
        let mut rows = st.query([model]).map_err(|e| db_err(&self.path, e))?;
        let mut scored: Vec<(MemoryId, f32)> = Vec::new();
        while let Some(r) = rows.next().map_err(|e| db_err(&self.path, e))? {
            let id: String = r.get(0).map_err(|e| db_err(&self.path, e))?;
            let v: Vec<u8> = r.get(1).map_err(|e| db_err(&self.path, e))?;
            let v = decode_vec(&self.path, &v)?;
            if v.len() != query.len() {
                continue;
            }
            let dot: f32 = v.iter().zip(query).map(|(a, b)| a * b).sum();
            let vn = norm(&v);
            if vn > 0.0 {
                scored.push((MemoryId(parse_id(&self.path, &id)?), dot / (vn * qn)));
            }
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(top_k);
        Ok(scored)
    }

    // ---- retrieval records and forgetting ---------------------------------------------------

    /// Appends retrieval records (node, time) in one transaction.
    pub fn append_records(&mut self, records: &[(MemoryId, DateTime<Utc>)]) -> Result<()> {
        self.write(|c, p| insert_records(c, p, records))
    }

    /// Records at or after `since`, oldest first.
    pub fn records_since(&self, since: DateTime<Utc>) -> Result<Vec<(MemoryId, DateTime<Utc>)>> {
        self.records_where("WHERE at >= ?1", Some(ts(&since)))
    }

    /// Records matching a WHERE clause with at most one parameter, in time order.
    fn records_where(
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

    // ---- sliding window and summary ---------------------------------------------------------

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

    /// Replaces the running summary.
    pub fn set_summary(&mut self, text: &str) -> Result<()> {
        let t = text.to_owned();
        self.write(|c, p| set_meta_tx(c, p, META_SUMMARY, &t))
    }

    /// The running summary, if one was set.
    pub fn summary(&self) -> Result<Option<String>> {
        self.meta(META_SUMMARY)
    }

    // ---- feedback ---------------------------------------------------------------------------

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

    // ---- row readers ------------------------------------------------------------------------

    /// Notes matching a WHERE clause (no parameters), in stored order, with their archived flag.
    fn query_notes(&self, filter: &str) -> Result<Vec<(MemoryNote, bool)>> {
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
        let params: Vec<&dyn rusqlite::ToSql> = match &arg {
            Some(a) => vec![a],
            None => vec![],
        };
        let mut rows = st
            .query(params.as_slice())
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
        let id: String = r.get(0).map_err(g)?;
        let readable_id: String = r.get(1).map_err(g)?;
        let core: bool = r.get(2).map_err(g)?;
        let count: i64 = r.get(3).map_err(g)?;
        let create: String = r.get(4).map_err(g)?;
        let access: String = r.get(5).map_err(g)?;
        let archived: bool = r.get(6).map_err(g)?;
        let tags: String = r.get(7).map_err(g)?;
        let payload: String = r.get(8).map_err(g)?;
        let mem_type: MemoryType = serde_json::from_str(&payload)
            .map_err(|e| corrupt(p, format!("note {readable_id}: payload: {e}")))?;
        let tags: Vec<String> = serde_json::from_str(&tags)
            .map_err(|e| corrupt(p, format!("note {readable_id}: tags: {e}")))?;
        Ok((
            MemoryNote {
                id: MemoryId(parse_id(p, &id)?),
                readable_id,
                tags,
                retrieval_count: u32::try_from(count)
                    .map_err(|_| corrupt(p, format!("bad retrieval_count {count}")))?,
                create_time: parse_ts(p, &create)?,
                last_accessed_time: parse_ts(p, &access)?,
                core,
                mem_type,
                links: Vec::new(),
            },
            archived,
        ))
    }

    /// Links matching a WHERE clause, grouped by source, each group in stored order.
    fn query_links(&self, filter: &str) -> Result<HashMap<MemoryId, Vec<MemoryLink>>> {
        self.query_links_inner(filter, None)
    }

    fn query_links_with(
        &self,
        filter: &str,
        arg: &str,
    ) -> Result<HashMap<MemoryId, Vec<MemoryLink>>> {
        self.query_links_inner(filter, Some(arg))
    }

    fn query_links_inner(
        &self,
        filter: &str,
        arg: Option<&str>,
    ) -> Result<HashMap<MemoryId, Vec<MemoryLink>>> {
        let sql =
            format!("SELECT id, from_id, to_id, intensity, link_type, ord FROM links {filter}");
        let p = &self.path;
        let mut st = self.conn.prepare_cached(&sql).map_err(|e| db_err(p, e))?;
        let params: Vec<&dyn rusqlite::ToSql> = match &arg {
            Some(a) => vec![a],
            None => vec![],
        };
        let mut rows = st.query(params.as_slice()).map_err(|e| db_err(p, e))?;
        let mut groups: HashMap<MemoryId, Vec<(i64, MemoryLink)>> = HashMap::new();
        while let Some(r) = rows.next().map_err(|e| db_err(p, e))? {
            let l = link_from_row(p, r)?;
            let ord: i64 = r.get(5).map_err(|e| db_err(p, e))?;
            groups.entry(l.from).or_default().push((ord, l));
        }
        // Unordered scan (sequential on disk); restore each source's link order here.
        Ok(groups
            .into_iter()
            .map(|(from, mut v)| {
                v.sort_by_key(|(ord, _)| *ord);
                (from, v.into_iter().map(|(_, l)| l).collect())
            })
            .collect())
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

    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    // ---- working memory (partial write-back) ------------------------------------------------

    /// Partial checkpoint: `extra` changes, then an upsert of each of `notes` (as
    /// [`Change::PutNote`]: the note row is replaced, its outgoing links become exactly
    /// `note.links`, an archived note stays archived), in ONE transaction. Unlike
    /// [`Store::checkpoint`], stored notes absent from `notes` are left untouched: in
    /// working-memory mode the in-memory graph is a subset of the store, so `notes` must carry
    /// their complete outgoing links (pending ones included).
    ///
    /// Complexity: O(notes + their links + extra) rows written.
    pub fn upsert_notes(&mut self, notes: &[MemoryNote], extra: &[Change]) -> Result<()> {
        for ch in extra {
            if let Change::PutNote(n) = ch {
                validate_note(n)?;
            }
            if let Change::PutLink(l) = ch {
                validate_link(l)?;
            }
        }
        for n in notes {
            validate_note(n)?;
        }
        self.write_rows(|c, p| {
            for ch in extra {
                apply_change(c, p, ChangeRef::from(ch))?;
            }
            for n in notes {
                apply_change(c, p, ChangeRef::PutNote(n))?;
            }
            Ok(())
        })
    }

    /// [`Store::put_embedding`] for many notes under one `model`, in ONE transaction:
    /// `(note, SHA-256 of the embedded text, vector)`.
    ///
    /// Complexity: O(rows × dim).
    pub fn put_embeddings(
        &mut self,
        model: &str,
        rows: &[(MemoryId, [u8; 32], Vec<f32>)],
    ) -> Result<()> {
        self.write(|c, p| {
            let mut st = c
                .prepare_cached(
                    "INSERT OR REPLACE INTO embeddings (note_id, model, text_hash, dim, vec)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(|e| db_err(p, e))?;
            for (id, hash, vector) in rows {
                let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
                st.execute(params![
                    id.to_string(),
                    model,
                    &hash[..],
                    vector.len() as i64,
                    bytes
                ])
                .map_err(|e| db_err(p, e))?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(c: &Connection) -> i64 {
        c.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn migrations_run_forward_in_one_transaction() {
        let dir = std::env::temp_dir().join(format!("soulmem-store-mig-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = Store::path_for(&dir, "c");
        let mut s = Store::open(&path, "c").unwrap();
        let p = path.clone();
        assert_eq!(version(&s.conn), SCHEMA_VERSION);

        // A future step that fails half-way leaves version and schema as they were.
        let mut bad: Vec<&str> = MIGRATIONS.to_vec();
        bad.push("ALTER TABLE notes ADD COLUMN mood TEXT; SELECT * FROM no_such_table;");
        assert!(migrate_steps(&mut s.conn, &p, SCHEMA_VERSION, &bad).is_err());
        assert_eq!(version(&s.conn), SCHEMA_VERSION);
        assert!(s.conn.prepare("SELECT mood FROM notes").is_err());

        // A good one applies only the new step.
        let mut good: Vec<&str> = MIGRATIONS.to_vec();
        good.push("ALTER TABLE notes ADD COLUMN mood TEXT;");
        migrate_steps(&mut s.conn, &p, SCHEMA_VERSION, &good).unwrap();
        assert_eq!(version(&s.conn), SCHEMA_VERSION + 1);
        assert!(s.conn.prepare("SELECT mood FROM notes").is_ok());
        drop(s);
        // This build now refuses the file as newer.
        assert_eq!(Store::open(&path, "c").unwrap_err().kind(), "incompatible");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
