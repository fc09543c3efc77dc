//! A look into a store file without owning it, for listing the stored characters: whose it is,
//! its name and size, and when it last took a message.
//!
//! Read-only and lock-free: the owner of a running character keeps its exclusive lock and keeps
//! writing; WAL gives this reader a consistent snapshot, and nothing here writes or migrates.

use super::open::check_header;
use super::*;

/// Meta key set by the first checkpoint: the store holds a graph (an empty graph included).
pub const META_GRAPH_SAVED: &str = "graph_saved";

/// What [`Store::peek`] sees in a store file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StorePeek {
    /// The character the store belongs to (its id).
    pub character: String,
    /// The content of the character's self note (`sem_self`), when it has one.
    pub name: Option<String>,
    /// Notes in the graph (archived ones not counted).
    pub notes: usize,
    /// Archived notes.
    pub archived: usize,
    /// Links.
    pub links: usize,
    /// Messages in the sliding window.
    pub window: usize,
    /// When the newest window message was written, if any.
    pub last_message_at: Option<DateTime<Utc>>,
    /// Whether a graph was ever saved (a store opened but never checkpointed has none).
    pub graph_saved: bool,
    /// The copy's epoch (see `replication.rs`; 0 until a replica of it was promoted).
    pub epoch: u64,
}

impl Store {
    /// Reads who a store file belongs to and how big it is, without taking its lock.
    ///
    /// Errors: [`Error::NotFound`] for a missing or empty file, [`Error::Corrupt`] for a file
    /// that is not SQLite, [`Error::Incompatible`] for a foreign database or a schema this
    /// build cannot read.
    ///
    /// Complexity: O(1) queries, each an index lookup or a count.
    pub fn peek(path: impl AsRef<Path>) -> Result<StorePeek> {
        let path = path.as_ref();
        if !check_header(path)? {
            return Err(Error::NotFound(format!("store {}", path.display())));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| db_err(path, e))?;
        let db = |e| db_err(path, e);
        let app_id: i32 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(db)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(db)?;
        if app_id != APPLICATION_ID || !(1..=SCHEMA_VERSION).contains(&version) {
            return Err(Error::Incompatible {
                path: path.display().to_string(),
                message: format!(
                    "not a SoulMem store this build reads (application_id {app_id:#x}, schema {version})"
                ),
            });
        }
        let meta = |key: &str| -> Result<Option<String>> {
            conn.query_row("SELECT value FROM meta WHERE key=?1", [key], |r| r.get(0))
                .optional()
                .map_err(db)
        };
        let character =
            meta(META_CHARACTER)?.ok_or_else(|| corrupt(path, "no character name in meta"))?;
        let graph_saved = meta(META_GRAPH_SAVED)?.is_some();
        let epoch = meta(super::META_EPOCH)?
            .and_then(|e| e.parse().ok())
            .unwrap_or(0);
        let (notes, archived, links, window, last): (i64, i64, i64, i64, Option<String>) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM notes WHERE archived=0),
                        (SELECT count(*) FROM notes WHERE archived=1),
                        (SELECT count(*) FROM links),
                        (SELECT count(*) FROM window),
                        (SELECT max(at) FROM window)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .map_err(db)?;
        let payload: Option<String> = conn
            .query_row(
                "SELECT payload FROM notes WHERE readable_id=?1 AND archived=0",
                [crate::import::SELF_NODE_ID],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        // A self note that does not parse leaves the name out; the store itself is readable.
        let name = payload
            .and_then(|p| serde_json::from_str::<MemoryType>(&p).ok())
            .and_then(|m| match m {
                MemoryType::Semantic(s) => Some(s.content),
                _ => None,
            });
        Ok(StorePeek {
            character,
            name,
            notes: notes as usize,
            archived: archived as usize,
            links: links as usize,
            window: window as usize,
            last_message_at: last.map(|s| parse_ts(path, &s)).transpose()?,
            graph_saved,
            epoch,
        })
    }
}

#[cfg(test)]
mod peek_tests {
    use super::*;

    #[test]
    fn peeks_a_store_its_owner_holds_open() {
        let dir = std::env::temp_dir().join(format!("soulmem-peek-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = Store::path_for(&dir, "艾琳");
        let mut store = Store::open(&path, "艾琳").expect("open");
        let graph = crate::import::import_bytes(
            "艾琳",
            br#"[{"id":"sem_self","tags":[],"mem_type":{"Semantic":{"content":"Irene","concept_type":"Entity"}},"mem_links":[]}]"#,
            &crate::import::ImportOptions::default(),
        )
        .expect("graph");
        store.save_graph(&graph).expect("save");
        store.set_meta(META_GRAPH_SAVED, "1").expect("meta");
        let peek = Store::peek(&path).expect("peek while open");
        assert_eq!(peek.character, "艾琳");
        assert_eq!(peek.name.as_deref(), Some("Irene"));
        assert_eq!((peek.notes, peek.links, peek.window), (1, 0, 0));
        assert!(peek.graph_saved);
        assert!(peek.last_message_at.is_none());
        drop(store);
        assert!(matches!(
            Store::peek(dir.join("absent.soulmem")),
            Err(Error::NotFound(_))
        ));
        std::fs::write(dir.join("junk.soulmem"), vec![7u8; 200]).expect("write");
        assert!(matches!(
            Store::peek(dir.join("junk.soulmem")),
            Err(Error::Corrupt { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
