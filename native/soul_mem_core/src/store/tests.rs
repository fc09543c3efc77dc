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
