//! Schema of a store file and its forward migrations.
//!
//! `PRAGMA user_version` holds the number of migrations applied. A migration is appended, never
//! edited: a file at version `v` has run exactly `MIGRATIONS[..v]`.

/// `PRAGMA application_id` of every SoulMem store ("SOUM"), so foreign SQLite files are refused.
pub const APPLICATION_ID: i32 = 0x534F_554D;

/// Forward migrations, applied in order inside one transaction on open.
///
/// Timestamps are RFC 3339 text with nanoseconds and `Z` (fixed width, so text order is time
/// order); ids are hyphenated UUID text; payloads are the Graph JSON serde forms.
pub const MIGRATIONS: &[&str] = &[
    // 1: initial schema.
    "CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
     ) WITHOUT ROWID;
     -- pos keeps insertion order (an explicit INTEGER PRIMARY KEY survives VACUUM, rowid does
     -- not), so loaded graphs have the same dense order as saved ones.
     CREATE TABLE notes (
        pos                INTEGER PRIMARY KEY,
        id                 TEXT NOT NULL UNIQUE,
        readable_id        TEXT NOT NULL UNIQUE,
        kind               TEXT NOT NULL,
        core               INTEGER NOT NULL,
        retrieval_count    INTEGER NOT NULL,
        create_time        TEXT NOT NULL,
        last_accessed_time TEXT NOT NULL,
        archived           INTEGER NOT NULL DEFAULT 0,
        tags               TEXT NOT NULL,
        payload            TEXT NOT NULL
     );
     CREATE INDEX notes_kind ON notes(kind);
     CREATE INDEX notes_core ON notes(core) WHERE core = 1;
     CREATE INDEX notes_archived ON notes(archived);
     -- No foreign keys: a link may point at a note that is not stored yet (the graph's pending
     -- links) or that is archived; the code keeps links consistent.
     CREATE TABLE links (
        id        TEXT PRIMARY KEY,
        from_id   TEXT NOT NULL,
        to_id     TEXT NOT NULL,
        ord       INTEGER NOT NULL,
        intensity REAL NOT NULL,
        link_type TEXT NOT NULL
     ) WITHOUT ROWID;
     CREATE INDEX links_from ON links(from_id, ord);
     CREATE INDEX links_to ON links(to_id);
     CREATE TABLE embeddings (
        note_id   TEXT NOT NULL,
        model     TEXT NOT NULL,
        text_hash BLOB NOT NULL,
        dim       INTEGER NOT NULL,
        vec       BLOB NOT NULL,
        PRIMARY KEY (note_id, model)
     ) WITHOUT ROWID;
     CREATE TABLE records (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        note_id TEXT NOT NULL,
        at      TEXT NOT NULL
     );
     CREATE INDEX records_at ON records(at);
     CREATE INDEX records_note ON records(note_id);
     CREATE TABLE forget_state (
        note_id        TEXT PRIMARY KEY,
        missing_degree REAL NOT NULL,
        band           INTEGER NOT NULL,
        revised_text   TEXT,
        original_text  TEXT,
        updated_at     TEXT NOT NULL
     ) WITHOUT ROWID;
     -- AUTOINCREMENT: sequence numbers are never reused after pop_messages, so callers can
     -- keep them as stable handles.
     CREATE TABLE window (
        seq    INTEGER PRIMARY KEY AUTOINCREMENT,
        role   TEXT NOT NULL,
        text   TEXT NOT NULL,
        at     TEXT NOT NULL,
        tagged INTEGER NOT NULL
     );",
    // 2: user feedback on notes (+1 / -1), an acknowledged write like a pushed message.
    "CREATE TABLE feedback (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        note_id TEXT NOT NULL,
        value   INTEGER NOT NULL CHECK (value IN (-1, 1)),
        at      TEXT NOT NULL
     );
     CREATE INDEX feedback_note ON feedback(note_id);",
    // 3: a covering index for a note's outgoing links. Loading notes (working memory's
    // activation, `Store::notes_of`) read each link through `links_from` and then the table
    // by link id: two B-tree lookups per link, a fifth of a working-memory recall at 100k
    // notes. The table's key (id) is part of every index entry of a WITHOUT ROWID table.
    "CREATE INDEX links_from_cover ON links(from_id, ord, to_id, intensity, link_type);
     DROP INDEX links_from;",
    // 4: embeddings in a rowid table. As a WITHOUT ROWID table every B-tree cell, the inner
    // ones too, held a whole row (~1.6 KB with the vector): three or four cells a page, a deep
    // tree, and a vector read cost ~20 µs at 100k notes (the seeds' exact re-scoring reads ~80
    // a message). SQLite advises WITHOUT ROWID only for rows under about a twentieth of a
    // page. Now the rows sit in the leaves of a rowid table and the key (note, model) in a
    // small index: half the pages (those freed stay in the file for later writes; a snapshot,
    // `VACUUM INTO`, is compact) and ~8 µs a read. `id` is the declared key that
    // replication's changesets name rows by; writes update a row in place.
    "ALTER TABLE embeddings RENAME TO embeddings_v3;
     CREATE TABLE embeddings (
        id        INTEGER PRIMARY KEY,
        note_id   TEXT NOT NULL,
        model     TEXT NOT NULL,
        text_hash BLOB NOT NULL,
        dim       INTEGER NOT NULL,
        vec       BLOB NOT NULL,
        UNIQUE (note_id, model)
     );
     INSERT INTO embeddings (note_id, model, text_hash, dim, vec)
        SELECT note_id, model, text_hash, dim, vec FROM embeddings_v3 ORDER BY note_id, model;
     DROP TABLE embeddings_v3;",
];

/// Schema version this build writes (the number of migrations).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
