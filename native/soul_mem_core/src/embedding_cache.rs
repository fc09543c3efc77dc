//! Persistent embedding cache on SQLite: the model's output vectors (from `embed/`) stored
//! per exact text, so an unchanged text is never embedded twice. It keeps vectors of single
//! texts, not of notes: the per-field vectors of a graph are `retrieval::field_vectors`, built
//! in memory from what the embedder (`embedder.rs`) returns through this cache.
//!
//! Entries are keyed by (model id incl. version, text kind / prefix, SHA-256 of the exact text) —
//! never by anything else. (The seed keyed its cache by implementation version only, so it went
//! stale when graphs changed and corrupted measurements.) Re-embedding an unchanged graph
//! therefore computes nothing.

use crate::error::{Error, Result};
use crate::store::table_sql;
use crate::wal_folder::WalFolder;
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Which side of retrieval a text is embedded for (models prefix them differently).
pub type KindTag = &'static str;

/// What [`EmbeddingCache::lookup`] found: a slot per text (its vector when cached) and the
/// distinct texts that were not, in order of first appearance.
type Lookup<'t> = (Vec<Option<Vec<f32>>>, Vec<&'t str>);

/// Vectors kept in memory by the newest use (see [`EmbeddingCache`]'s `memo`): ~24 MiB of
/// 384-dimensional vectors, several times the texts of a working graph of 1,000 notes.
const MEMO_ENTRIES: usize = 16_384;

/// What the memo is keyed by: the number of the (model, kind) pair in
/// [`EmbeddingCache`]'s `spaces` and the text's SHA-256. Nothing to allocate per lookup: a
/// working-memory recall looks up a thousand texts, and formatting a string key for each,
/// then hashing it with SipHash, was a third of the lookups' time.
type MemoKey = (u32, [u8; 32]);

/// A cache file. Not `Sync`: wrap it in a `Mutex` to share.
pub struct EmbeddingCache {
    /// Folds the log off the path of a recall's query embedding (see [`WalFolder`]); before
    /// `conn`, so it is dropped first.
    folder: WalFolder,
    conn: Connection,
    path: PathBuf,
    hits: u64,
    misses: u64,
    /// The vectors read or stored last, in memory. A read from the file costs ~8 µs (the
    /// key's index and a leaf page, see [`SCHEMA`]); working memory looks up the texts of the
    /// hundreds of notes each recall brings in, and brings the same notes in again and again.
    memo: lru::LruCache<MemoKey, Vec<f32>, foldhash::fast::RandomState>,
    /// The (model, kind) pairs seen, numbered by position: a handful per process.
    spaces: Vec<(String, String)>,
}

impl std::fmt::Debug for EmbeddingCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingCache")
            .field("path", &self.path)
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .field("in_memory", &self.memo.len())
            .finish()
    }
}

fn db_err(path: &Path, e: rusqlite::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// SHA-256 of the exact text (no normalisation: a changed comma is a changed text).
pub fn text_hash(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// A rowid table, the key in an index: a row with its vector is ~1.6 KB, and in a WITHOUT
/// ROWID table every B-tree cell, the inner ones too, holds a whole row — three or four a
/// page, a deep tree, ~20 µs a lookup at 100k vectors (SQLite advises WITHOUT ROWID only for
/// rows under about a twentieth of a page). In this layout a lookup reads a small index and
/// one leaf: ~8 µs, and the rows take half the pages (a migrated file keeps the pages it
/// freed for later writes).
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS embeddings (
       model TEXT NOT NULL,
       kind  TEXT NOT NULL,
       hash  BLOB NOT NULL,
       dim   INTEGER NOT NULL,
       vec   BLOB NOT NULL,
       UNIQUE (model, kind, hash)
     );";

/// Moves a cache file written before [`SCHEMA`]'s layout (a WITHOUT ROWID table) to it, in
/// one transaction, keeping every vector: the old table renamed, [`SCHEMA`], the rows copied.
fn migrate_from_without_rowid(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         ALTER TABLE embeddings RENAME TO embeddings_without_rowid;
         {SCHEMA}
         INSERT INTO embeddings (model, kind, hash, dim, vec)
           SELECT model, kind, hash, dim, vec FROM embeddings_without_rowid;
         DROP TABLE embeddings_without_rowid;
         COMMIT;"
    ))
}

impl EmbeddingCache {
    /// Opens (creating if needed) the cache at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, &e))?;
        }
        let conn = Connection::open(&path).map_err(|e| db_err(&path, e))?;
        // A cache may lose its last writes on power loss without harm: NORMAL is enough.
        // Lookups come in bursts of hundreds (the texts of the notes working memory brings
        // in): a 16 MiB page cache keeps the key index's pages in memory (SQLite's default is
        // 2 MiB), and the rows are read from the file memory-mapped (up to 1 GiB of it; SQLite
        // writes through write(), the map is read-only).
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-16384;
             PRAGMA mmap_size=1073741824;",
        )
        .map_err(|e| db_err(&path, e))?;
        // Processes of one data dir share the file: one that finds another moving an old
        // file's rows (`init`, about a second at 100k vectors) or writing waits for it.
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| db_err(&path, e))?;
        Self::init(conn, path)
    }

    fn init(conn: Connection, path: PathBuf) -> Result<Self> {
        let existing = table_sql(&conn, "embeddings").map_err(|e| db_err(&path, e))?;
        if existing.is_some_and(|sql| sql.contains("WITHOUT ROWID")) {
            if let Err(e) = migrate_from_without_rowid(&conn) {
                // Nothing half-done stays: the transaction is rolled back.
                let _ = conn.execute_batch("ROLLBACK;");
                return Err(db_err(&path, e));
            }
            // The copy went through the log: into the file with it, and empty the log.
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
        conn.execute_batch(SCHEMA).map_err(|e| db_err(&path, e))?;
        Ok(EmbeddingCache {
            folder: WalFolder::watch(&conn, &path),
            conn,
            path,
            hits: 0,
            misses: 0,
            memo: lru::LruCache::with_hasher(
                std::num::NonZeroUsize::new(MEMO_ENTRIES).unwrap_or(std::num::NonZeroUsize::MIN),
                foldhash::fast::RandomState::default(),
            ),
            spaces: Vec::new(),
        })
    }

    /// The number of the (model, kind) pair in the memo's keys, numbering it when new.
    /// Complexity: O(pairs seen), a handful.
    fn space(&mut self, model: &str, kind: &str) -> u32 {
        let at = self
            .spaces
            .iter()
            .position(|(m, k)| m == model && k == kind);
        let at = at.unwrap_or_else(|| {
            self.spaces.push((model.to_owned(), kind.to_owned()));
            self.spaces.len() - 1
        });
        at as u32
    }

    /// (hits, misses) since opening.
    pub fn counters(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    /// Number of stored vectors.
    pub fn len(&self) -> Result<usize> {
        self.conn
            .query_row("SELECT count(*) FROM embeddings", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as usize)
            .map_err(|e| db_err(&self.path, e))
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// Looks one text up (in memory first, then in the file): [`Self::lookup`] of one text.
    pub fn get(&mut self, model: &str, kind: &str, text: &str) -> Result<Option<Vec<f32>>> {
        let (mut found, _) = self.lookup(model, kind, &[text])?;
        Ok(found.pop().flatten())
    }

    /// The vector stored in the file for `hash`, if any. Complexity: one indexed lookup.
    fn read(&self, model: &str, kind: &str, hash: &[u8; 32]) -> Result<Option<Vec<f32>>> {
        let blob: Option<Vec<u8>> = self
            .conn
            .prepare_cached("SELECT vec FROM embeddings WHERE model=?1 AND kind=?2 AND hash=?3")
            .and_then(|mut st| {
                st.query_row(params![model, kind, &hash[..]], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| db_err(&self.path, e))?;
        Ok(blob.map(|b| {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        }))
    }

    /// Stores many vectors in one transaction.
    pub fn put_many(&mut self, model: &str, kind: &str, items: &[(&str, &[f32])]) -> Result<()> {
        let path = self.path.clone();
        let hashes: Vec<[u8; 32]> = items.iter().map(|(t, _)| text_hash(t)).collect();
        let tx = self.conn.transaction().map_err(|e| db_err(&path, e))?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO embeddings (model, kind, hash, dim, vec) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(|e| db_err(&path, e))?;
            for ((_, vec), hash) in items.iter().zip(&hashes) {
                let bytes: Vec<u8> = vec.iter().flat_map(|f| f.to_le_bytes()).collect();
                st.execute(params![model, kind, &hash[..], vec.len() as i64, bytes])
                    .map_err(|e| db_err(&path, e))?;
            }
        }
        tx.commit().map_err(|e| db_err(&path, e))?;
        self.folder.after_commit();
        // Only once durable: the memo never holds what the file does not.
        let space = self.space(model, kind);
        for ((_, vec), hash) in items.iter().zip(hashes) {
            self.memo.put((space, hash), vec.to_vec());
        }
        Ok(())
    }

    /// The distinct texts of `texts` that are not cached, in order of first appearance. Reads
    /// no vectors and counts no hits or misses: it says what is left to compute.
    ///
    /// Complexity: one indexed existence check per text.
    pub fn missing<'t>(&self, model: &str, kind: &str, texts: &[&'t str]) -> Result<Vec<&'t str>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT 1 FROM embeddings WHERE model=?1 AND kind=?2 AND hash=?3")
            .map_err(|e| db_err(&self.path, e))?;
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let mut missing = Vec::new();
        for t in texts {
            if !seen.insert(t) {
                continue;
            }
            let cached = st
                .exists(params![model, kind, &text_hash(t)[..]])
                .map_err(|e| db_err(&self.path, e))?;
            if !cached {
                missing.push(*t);
            }
        }
        Ok(missing)
    }

    /// Looks `texts` up: their vectors where cached, and the distinct texts that are not, in
    /// order of first appearance (the first step of [`get_or_compute`]).
    ///
    /// Complexity: one memory lookup per text; the texts not in memory one indexed read
    /// each, in one read transaction when there are several.
    fn lookup<'t>(&mut self, model: &str, kind: &str, texts: &[&'t str]) -> Result<Lookup<'t>> {
        let mut out: Vec<Option<Vec<f32>>> = Vec::with_capacity(texts.len());
        // Texts not in memory: (position in `out`, memo key, hash), read from the file below.
        let mut unread: Vec<(usize, MemoKey, [u8; 32])> = Vec::new();
        let space = self.space(model, kind);
        for (i, t) in texts.iter().enumerate() {
            let hash = text_hash(t);
            let key = (space, hash);
            match self.memo.get(&key) {
                Some(v) => {
                    self.hits += 1;
                    out.push(Some(v.clone()));
                }
                None => {
                    out.push(None);
                    unread.push((i, key, hash));
                }
            }
        }
        // One read transaction for a batch: each statement on its own would take and release
        // the log's read lock (two system calls) around its own lookup.
        let tx = if unread.len() > 1 {
            Some(
                self.conn
                    .unchecked_transaction()
                    .map_err(|e| db_err(&self.path, e))?,
            )
        } else {
            None
        };
        for (i, key, hash) in unread {
            // A text seen twice in the batch is read once: the first read put it in memory.
            let v = match self.memo.get(&key) {
                Some(v) => Some(v.clone()),
                None => {
                    let v = self.read(model, kind, &hash)?;
                    if let Some(v) = &v {
                        self.memo.put(key, v.clone());
                    }
                    v
                }
            };
            match v {
                Some(v) => {
                    self.hits += 1;
                    out[i] = Some(v);
                }
                None => self.misses += 1,
            }
        }
        if let Some(tx) = tx {
            tx.commit().map_err(|e| db_err(&self.path, e))?;
        }
        let mut missing: Vec<&str> = Vec::new();
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (t, v) in texts.iter().zip(&out) {
            if v.is_none() && seen.insert(t) {
                missing.push(t);
            }
        }
        Ok((out, missing))
    }

    /// Stores `computed` (the vectors of `missing`, as returned by [`Self::lookup`]) and puts
    /// them into the empty slots of `found`. Errors, storing nothing, when the counts differ.
    fn fill(
        &mut self,
        model: &str,
        kind: &str,
        texts: &[&str],
        found: Vec<Option<Vec<f32>>>,
        missing: &[&str],
        computed: Vec<Vec<f32>>,
    ) -> Result<Vec<Vec<f32>>> {
        self.store_computed(model, kind, missing, &computed)?;
        Ok(merge(texts, found, missing, computed))
    }

    /// Stores the vectors `computed` of the texts `missing` (same order). Errors, storing
    /// nothing, when the counts differ.
    pub fn store_computed(
        &mut self,
        model: &str,
        kind: &str,
        missing: &[&str],
        computed: &[Vec<f32>],
    ) -> Result<()> {
        Error::check_vector_count("compute", computed.len(), missing.len())?;
        let items: Vec<(&str, &[f32])> = missing
            .iter()
            .zip(computed)
            .map(|(t, v)| (*t, v.as_slice()))
            .collect();
        self.put_many(model, kind, &items)
    }
}

/// Locks a shared cache; a poisoned lock (an earlier panic while it was held) is an error.
pub(crate) fn lock(cache: &Mutex<EmbeddingCache>) -> Result<MutexGuard<'_, EmbeddingCache>> {
    cache
        .lock()
        .map_err(|_| Error::invalid_argument("cache", "poisoned by an earlier panic"))
}

/// Returns the vectors of `texts` from a shared cache, computing only the missing ones with
/// `compute` (called once, with the distinct missing texts, in order) and storing them. The
/// cache is locked to look up and to store, never while `compute` runs: one caller's long
/// computation (a graph's bulk embedding) must not make other callers (query embeddings)
/// wait.
pub fn get_or_compute<F>(
    cache: &Mutex<EmbeddingCache>,
    model: &str,
    kind: &str,
    texts: &[&str],
    compute: F,
) -> Result<Vec<Vec<f32>>>
where
    F: FnOnce(&[&str]) -> Result<Vec<Vec<f32>>>,
{
    let (found, missing) = lock(cache)?.lookup(model, kind, texts)?;
    if missing.is_empty() {
        return Ok(found.into_iter().map(Option::unwrap_or_default).collect());
    }
    let computed = compute(&missing)?;
    lock(cache)?.fill(model, kind, texts, found, &missing, computed)
}

/// Puts the vectors computed for `missing` into the empty slots of `found` (one per text).
fn merge(
    texts: &[&str],
    found: Vec<Option<Vec<f32>>>,
    missing: &[&str],
    computed: Vec<Vec<f32>>,
) -> Vec<Vec<f32>> {
    let at: std::collections::HashMap<&str, usize> =
        missing.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    found
        .into_iter()
        .zip(texts)
        .map(|(slot, t)| {
            slot.or_else(|| at.get(t).and_then(|&i| computed.get(i).cloned()))
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::cell::Cell;

    fn fake(texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
    }

    #[test]
    fn a_cache_file_of_the_old_layout_keeps_its_vectors() {
        let dir = std::env::temp_dir().join(format!("soulmem-cache-old-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("old.sqlite3");
        let _ = std::fs::remove_file(&path);
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE embeddings (
                   model TEXT NOT NULL, kind TEXT NOT NULL, hash BLOB NOT NULL,
                   dim INTEGER NOT NULL, vec BLOB NOT NULL,
                   PRIMARY KEY (model, kind, hash)
                 ) WITHOUT ROWID;",
            )
            .unwrap();
            let bytes: Vec<u8> = [0.5f32, -2.0]
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect();
            conn.execute(
                "INSERT INTO embeddings VALUES ('m', 'passage', ?1, 2, ?2)",
                params![&text_hash("甲")[..], bytes],
            )
            .unwrap();
        }
        let mut c = EmbeddingCache::open(&path).unwrap();
        assert_eq!(c.get("m", "passage", "甲").unwrap(), Some(vec![0.5, -2.0]));
        let sql = table_sql(&c.conn, "embeddings").unwrap().unwrap();
        assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
        c.put_many("m", "passage", &[("乙", &[1.0, 1.0][..])])
            .unwrap();
        drop(c);
        // Opened again, it is left as it is.
        let mut c = EmbeddingCache::open(&path).unwrap();
        assert_eq!(c.len().unwrap(), 2);
        assert_eq!(c.get("m", "passage", "乙").unwrap(), Some(vec![1.0, 1.0]));
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hits_and_misses_are_keyed_by_model_kind_and_exact_text() {
        let dir = std::env::temp_dir().join(format!("soulmem-cache-{}", std::process::id()));
        let path = dir.join("c.sqlite3");
        let _ = std::fs::remove_file(&path);
        let calls = Cell::new(0);
        let count = |t: &[&str]| {
            calls.set(calls.get() + t.len());
            fake(t)
        };
        {
            let c = Mutex::new(EmbeddingCache::open(&path).unwrap());
            let v = get_or_compute(&c, "m1", "passage", &["甲", "乙", "甲"], count).unwrap();
            assert_eq!(v.len(), 3);
            assert_eq!(v[0], v[2]);
            assert_eq!(calls.get(), 2);
        }
        // Reopen: persisted, nothing recomputed.
        let c = Mutex::new(EmbeddingCache::open(&path).unwrap());
        assert_eq!(
            lock(&c)
                .unwrap()
                .missing("m1", "passage", &["甲", "丙", "丙"])
                .unwrap(),
            vec!["丙"]
        );
        get_or_compute(&c, "m1", "passage", &["甲", "乙"], count).unwrap();
        assert_eq!(calls.get(), 2);
        assert_eq!(lock(&c).unwrap().counters(), (2, 0));
        // Another model, another kind, or a changed text is a miss.
        get_or_compute(&c, "m2", "passage", &["甲"], count).unwrap();
        get_or_compute(&c, "m1", "query", &["甲"], count).unwrap();
        get_or_compute(&c, "m1", "passage", &["甲 "], count).unwrap();
        assert_eq!(calls.get(), 5);
        assert_eq!(lock(&c).unwrap().len().unwrap(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What was read or stored is served from memory afterwards (the file is not read again:
    /// rows removed behind the cache's back are still answered, a fresh open misses them),
    /// keyed like the file, and the memory holds at most `MEMO_ENTRIES` vectors.
    #[test]
    fn the_memo_answers_what_was_read_or_stored_and_is_bounded() {
        let dir = std::env::temp_dir().join(format!("soulmem-memo-{}", std::process::id()));
        let path = dir.join("c.sqlite3");
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = EmbeddingCache::open(&path).unwrap();
        c.put_many("m1", "passage", &[("甲", &[1.0, 2.0])]).unwrap();
        {
            let mut other = EmbeddingCache::open(&path).unwrap();
            other.put_many("m1", "passage", &[("乙", &[3.0])]).unwrap();
        }
        assert_eq!(c.get("m1", "passage", "乙").unwrap(), Some(vec![3.0]));
        Connection::open(&path)
            .unwrap()
            .execute("DELETE FROM embeddings", [])
            .unwrap();
        assert_eq!(c.get("m1", "passage", "甲").unwrap(), Some(vec![1.0, 2.0]));
        assert_eq!(c.get("m1", "passage", "乙").unwrap(), Some(vec![3.0]));
        assert_eq!(c.get("m1", "query", "甲").unwrap(), None);
        assert_eq!(c.get("m2", "passage", "甲").unwrap(), None);
        assert_eq!(
            EmbeddingCache::open(&path)
                .unwrap()
                .get("m1", "passage", "甲")
                .unwrap(),
            None
        );

        let many: Vec<String> = (0..MEMO_ENTRIES + 10).map(|i| format!("t{i}")).collect();
        let items: Vec<(&str, &[f32])> = many.iter().map(|t| (t.as_str(), &[0.5][..])).collect();
        c.put_many("m1", "passage", &items).unwrap();
        assert_eq!(c.memo.len(), MEMO_ENTRIES);
        // The newest are kept.
        let space = c.space("m1", "passage");
        assert!(c
            .memo
            .contains(&(space, text_hash(&many[MEMO_ENTRIES + 9]))));
        assert!(!c.memo.contains(&(space, text_hash("甲"))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
