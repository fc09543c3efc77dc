//! Opening a store: refusing what is not a SoulMem file of this character, the exclusive
//! lock, WAL and pragmas, and migrating an older schema.

use super::*;

/// Path of the advisory lock file of a database.
fn lock_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

pub(super) fn io_to_store_err(path: &Path, e: &std::io::Error) -> Error {
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
pub(super) fn check_header(path: &Path) -> Result<bool> {
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
        // allocation. The file is not memory-mapped: every page a map touches would count in
        // the process's resident set (560 MiB peak at 100k notes, against 182 without:
        // `soul_tune bench working`), for no measurable gain in a recall.
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
        // The writer's log is folded on a thread of its own, not inside its commits.
        let folder = (!opts.read_only).then(|| WalFolder::watch(&conn, &path));
        let mut store = Store {
            folder,
            conn,
            path,
            character: character.to_owned(),
            read_only: opts.read_only,
            _lock: lock,
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            generation: 0,
            vectors_written: 0,
            last_checkpoint: None,
            capture: false,
            captured: Vec::new(),
            capture_lost: false,
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
        migrate_steps(&mut self.conn, &self.path, from, MIGRATIONS)?;
        // A migration may rewrite a whole table (4: the embeddings) into the log: copy it into
        // the file now and empty the log, rather than leave every read of the session looking
        // pages up in a log of hundreds of MB. Best effort: the data is committed either way.
        let _ = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        Ok(())
    }
}
