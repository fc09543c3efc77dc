//! Unit tests of the store's private parts (migrations).

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

#[test]
fn a_notes_links_are_read_from_the_covering_index_after_migration() {
    let dir = std::env::temp_dir().join(format!("soulmem-store-cover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = Store::path_for(&dir, "c");
    // A file at version 2 (before the covering index) …
    let s = Store::open(&path, "c").unwrap();
    s.conn
        .execute_batch(
            "DROP INDEX links_from_cover;
             CREATE INDEX links_from ON links(from_id, ord);
             PRAGMA user_version = 2;",
        )
        .unwrap();
    drop(s);
    // … is migrated on open, and loading notes' links touches the index only.
    let s = Store::open(&path, "c").unwrap();
    assert_eq!(version(&s.conn), SCHEMA_VERSION);
    let sql = format!(
        "EXPLAIN QUERY PLAN SELECT id, from_id, to_id, intensity, link_type, ord FROM links \
         WHERE from_id IN {ID_LIST}"
    );
    let plan: Vec<String> = s
        .conn
        .prepare(&sql)
        .unwrap()
        .query_map(["[]"], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(
        plan.iter()
            .any(|p| p.contains("COVERING INDEX links_from_cover")),
        "{plan:?}"
    );
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn embeddings_move_to_a_rowid_table_with_their_vectors() {
    let dir = std::env::temp_dir().join(format!("soulmem-store-emb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = Store::path_for(&dir, "c");
    let (a, b) = (
        MemoryId(uuid::Uuid::from_u128(1)),
        MemoryId(uuid::Uuid::from_u128(2)),
    );
    // A file at version 3 (embeddings in a WITHOUT ROWID table) with two notes' vectors.
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Connection::open(&path).unwrap();
    migrate_steps(&mut c, &path, 0, &MIGRATIONS[..3]).unwrap();
    for (id, hash, v) in [(a, 1u8, [1.0f32, 0.0, 0.5]), (b, 2, [0.0, 2.0, 0.0])] {
        let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
        c.execute(
            "INSERT INTO embeddings (note_id, model, text_hash, dim, vec) VALUES (?1, 'm', ?2, 3, ?3)",
            params![id.to_string(), &[hash; 32][..], bytes],
        )
        .unwrap();
    }
    drop(c);
    // Migrated on open: the same vectors, now in a rowid table keyed by an index.
    let mut s = Store::open(&path, "c").unwrap();
    assert_eq!(version(&s.conn), SCHEMA_VERSION);
    let sql = table_sql(&s.conn, "embeddings").unwrap().unwrap();
    assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
    assert_eq!(
        s.embedding(&a, "m").unwrap(),
        Some(([1; 32], vec![1.0, 0.0, 0.5]))
    );
    assert_eq!(
        s.embedding(&b, "m").unwrap(),
        Some(([2; 32], vec![0.0, 2.0, 0.0]))
    );
    let q: &[f32] = &[0.0, 1.0, 0.0];
    let scores = s.cosines_of("m", &[q], &[a, b]).unwrap();
    assert_eq!(scores[0].len(), 2);
    // A new vector for a note replaces its row in place (replicas update that row by id).
    let id_of = |s: &Store| -> i64 {
        s.conn
            .query_row(
                "SELECT id FROM embeddings WHERE note_id = ?1 AND model = 'm'",
                [b.to_string()],
                |r| r.get(0),
            )
            .unwrap()
    };
    let before = id_of(&s);
    s.put_embedding(&b, "m", &[3; 32], &[0.0, 0.0, 3.0])
        .unwrap();
    assert_eq!(id_of(&s), before);
    assert_eq!(
        s.embedding(&b, "m").unwrap(),
        Some(([3; 32], vec![0.0, 0.0, 3.0]))
    );
    let plan: Vec<String> = s
        .conn
        .prepare(&format!(
            "EXPLAIN QUERY PLAN SELECT note_id, vec FROM embeddings \
             WHERE model=?2 AND note_id IN {ID_LIST}"
        ))
        .unwrap()
        .query_map(params!["[]", "m"], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(plan.iter().any(|p| p.contains("USING INDEX")), "{plan:?}");
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
