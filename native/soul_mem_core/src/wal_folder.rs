//! Folding a SQLite write-ahead log back into its file on a thread of its own.
//!
//! In WAL mode every commit appends pages to the log, and now and then some connection must
//! copy them into the database file: a *checkpoint*, called folding here so it is not confused
//! with the store's graph checkpoint. SQLite's default folds inside the commit that takes the
//! log past 1000 pages: that commit copies ~4 MB into the file and syncs it before it returns
//! (15–80 ms measured here on a disk, against ~0.1 ms for a commit's own sync), and the writer
//! is a character answering a message.
//!
//! A [`WalFolder`] takes the fold off the writer. [`WalFolder::watch`] puts SQLite's WAL hook
//! in place of the automatic checkpoint: the hook notes the log's size after each commit, and
//! past [`FOLD_PAGES`] [`WalFolder::after_commit`] wakes the folder's thread, which runs a
//! PASSIVE checkpoint on a connection of its own. PASSIVE never waits for the writer or the
//! readers: it copies what no reader still needs, and SQLite starts the log over at the first
//! commit after a complete fold. Durability is unchanged: a commit is durable once its log
//! pages are synced, and a fold copies only committed pages.
//!
//! Should the thread fall behind (a reader holding old pages, a full disk), the writer folds
//! inline once the log passes [`INLINE_PAGES`], as SQLite would have, so the log stays bounded.

use std::cell::Cell;
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::OnceLock;
use std::thread::JoinHandle;

use rusqlite::hooks::{CheckpointMode, Wal};
use rusqlite::{Connection, OpenFlags};

/// Log size (pages) from which the folder's thread folds: SQLite's own threshold.
pub const FOLD_PAGES: i32 = 1000;

/// Log size (pages) from which the writer folds inline: the thread is not keeping up.
pub const INLINE_PAGES: i32 = 16 * FOLD_PAGES;

thread_local! {
    /// The log's size after this thread's last commit on a watched connection. The hook runs
    /// on the committing thread, inside the commit, and is a plain `fn`: it leaves the size
    /// here for [`WalFolder::after_commit`], which runs on the same thread right after.
    static LOG_PAGES: Cell<i32> = const { Cell::new(0) };
}

fn on_commit(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    LOG_PAGES.set(pages);
    if pages >= INLINE_PAGES {
        // A failed fold loses nothing: the pages stay in the log for the next one.
        let _ = wal.checkpoint_v2(CheckpointMode::PASSIVE);
    }
    Ok(())
}

/// Folds one database's write-ahead log on a thread of its own (see the module
/// documentation). Dropping it waits for a fold in progress.
#[derive(Debug)]
pub struct WalFolder {
    path: PathBuf,
    /// Started at the first fold: most files (an idle character's) never need one. `None`
    /// when the thread could not be started: the writer then folds inline at
    /// [`INLINE_PAGES`], slower but never wrong.
    worker: OnceLock<Option<Worker>>,
}

#[derive(Debug)]
struct Worker {
    wake: Sender<()>,
    thread: JoinHandle<()>,
}

impl WalFolder {
    /// Replaces `conn`'s automatic checkpoint with the hook [`WalFolder::after_commit`] reads.
    /// `path` is `conn`'s file.
    pub fn watch(conn: &Connection, path: &Path) -> WalFolder {
        conn.wal_hook(Some(on_commit));
        WalFolder {
            path: path.to_path_buf(),
            worker: OnceLock::new(),
        }
    }

    /// Call after each commit on the watched connection, on the thread that committed: wakes
    /// the folding thread once the log has passed [`FOLD_PAGES`]. Complexity: O(1).
    pub fn after_commit(&self) {
        if LOG_PAGES.replace(0) < FOLD_PAGES {
            return;
        }
        let worker = self.worker.get_or_init(|| {
            let (wake, rx) = mpsc::channel();
            let path = self.path.clone();
            std::thread::Builder::new()
                .name("soul-wal-fold".into())
                .stack_size(256 * 1024)
                .spawn(move || fold_loop(&path, &rx))
                .ok()
                .map(|thread| Worker { wake, thread })
        });
        if let Some(w) = worker {
            let _ = w.wake.send(());
        }
    }
}

impl Drop for WalFolder {
    fn drop(&mut self) {
        if let Some(Worker { wake, thread }) = self.worker.take().flatten() {
            // A closed channel ends the loop once the fold in progress, if any, is done.
            drop(wake);
            let _ = thread.join();
        }
    }
}

fn fold_loop(path: &Path, wake: &Receiver<()>) {
    let mut conn: Option<Connection> = None;
    while wake.recv().is_ok() {
        // Wake-ups that came during the last fold are covered by this one.
        while wake.try_recv().is_ok() {}
        if conn.is_none() {
            // Never created here: a file removed meanwhile is not brought back. SQLite's
            // default `synchronous` (FULL) syncs the log before a fold and the file after it,
            // as NORMAL would: a fold is as durable for the store as for the cache.
            conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .ok();
        }
        if let Some(c) = &conn {
            // Best effort, as SQLite's own fold: what it could not copy waits for the next.
            let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db_len(path: &Path) -> u64 {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }

    /// Commits `pages` pages of new rows in one transaction.
    fn write_pages(conn: &Connection, pages: usize) {
        let row = vec![7u8; 4000];
        conn.execute_batch("BEGIN").unwrap();
        for _ in 0..pages {
            conn.execute("INSERT INTO t (v) VALUES (?1)", [&row])
                .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    /// A fresh WAL database with one table, in a directory of its own (removed by the caller).
    fn fresh(name: &str) -> (PathBuf, PathBuf, Connection) {
        let dir = std::env::temp_dir().join(format!("soulmem-wal-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("db.sqlite3");
        let _ = std::fs::remove_file(&path);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB);",
        )
        .unwrap();
        (dir, path, conn)
    }

    #[test]
    fn the_writer_commits_past_the_threshold_and_the_thread_folds() {
        let (dir, path, conn) = fresh("fold");
        let folder = WalFolder::watch(&conn, &path);
        let small = db_len(&path);

        // Past SQLite's own threshold, yet the commit itself copied nothing into the file:
        // its pages are all in the log.
        write_pages(&conn, FOLD_PAGES as usize + 200);
        assert_eq!(db_len(&path), small, "no fold inside the commit");

        // Woken, the thread folds; dropping the folder waits for it.
        folder.after_commit();
        drop(folder);
        let bytes = (FOLD_PAGES as u64 + 200) * 4000;
        assert!(db_len(&path) > bytes, "{} ≤ {bytes}", db_len(&path));
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, i64::from(FOLD_PAGES) + 200);
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_small_log_wakes_nobody() {
        let (dir, path, conn) = fresh("quiet");
        let folder = WalFolder::watch(&conn, &path);
        write_pages(&conn, 10);
        folder.after_commit();
        assert!(folder.worker.get().is_none(), "no thread for a small log");
        drop(folder);
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
