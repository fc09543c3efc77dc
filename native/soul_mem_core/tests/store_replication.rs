//! Replication: the changesets a capturing store records replay on a snapshot to the same
//! rows; a missing or foreign batch is refused; a promoted replica is at the next epoch.
#![allow(clippy::unwrap_used)]

mod store_util;

use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import::{import_bytes, ImportOptions};
use soul_mem_core::store::{
    apply_changes, init_replica, promote_replica, replica_state, Message, Store,
};
use soul_mem_core::Error;
use std::path::PathBuf;
use store_util::t;

const C: &str = "小红";

fn tmp(name: &str) -> PathBuf {
    store_util::tmp("store-replication", name)
}

const GRAPH: &str = r#"[
  {"id":"sem_self","tags":["我"],"mem_type":{"Semantic":{"content":"小红","aliases":[],"concept_type":"Entity","description":"自己"}},
   "mem_links":[{"from":"sem_self","to":"sem_cat","intensity":0.8,"link_type":{"Sem":{"verb":"养","confidence":0.7}}}]},
  {"id":"sem_cat","tags":["猫"],"mem_type":{"Semantic":{"content":"一只橘猫","aliases":[],"concept_type":"Entity","description":""}},"mem_links":[]}
]"#;

fn graph() -> MemoryGraph {
    import_bytes(C, GRAPH.as_bytes(), &ImportOptions::default()).unwrap()
}

fn message(text: &str, s: i64) -> Message {
    Message {
        role: "user".into(),
        text: text.into(),
        at: t(s),
        tagged: false,
    }
}

/// The export without the replica marks, which only a replica has.
fn rows(path: &std::path::Path) -> serde_json::Value {
    let store = Store::open(path, C).unwrap();
    let mut doc = store.export_character().unwrap();
    if let Some(meta) = doc.get_mut("meta").and_then(|m| m.as_object_mut()) {
        meta.remove("replica_base");
        meta.remove("replica_seq");
    }
    doc
}

#[test]
fn changesets_replay_on_a_snapshot() {
    let dir = tmp("replay");
    let primary_path = dir.join("primary.db");
    let replica_path = dir.join("replica.db");
    let mut primary = Store::open(&primary_path, C).unwrap();
    primary.save_graph(&graph()).unwrap();
    primary.append_message(&message("早", 1)).unwrap();

    primary.set_capture(true);
    primary.snapshot_to(&replica_path).unwrap();
    init_replica(&replica_path, "base-1").unwrap();

    // Writes of every kind: window, summary, a note and its links, feedback, a pop.
    primary
        .append_messages(&[message("你好", 2), message("今天下雨", 3)])
        .unwrap();
    primary.set_summary("下雨天").unwrap();
    let mut g = graph();
    let cat = g.get_by_readable("sem_cat").unwrap().id;
    primary.append_feedback(&cat, 1, t(4)).unwrap();
    g.get_mut(&cat).unwrap().retrieval_count = 7;
    primary.save_graph(&g).unwrap();
    let first = primary.window().unwrap()[0].0;
    primary.pop_messages(first).unwrap();

    let changes = primary.take_changes().unwrap();
    assert!(
        changes.len() >= 5,
        "one changeset per write: {}",
        changes.len()
    );
    assert!(primary.take_changes().unwrap().is_empty(), "taken once");
    apply_changes(&replica_path, "base-1", 1, &changes).unwrap();
    // The same batch again is acknowledged and not applied twice.
    apply_changes(&replica_path, "base-1", 1, &changes).unwrap();
    drop(primary);

    assert_eq!(rows(&replica_path), rows(&primary_path));
    let state = replica_state(&replica_path).unwrap();
    assert_eq!(
        (state.base.as_str(), state.seq, state.epoch),
        ("base-1", 1, 0)
    );
}

#[test]
fn a_missing_or_foreign_batch_is_refused_and_changes_nothing() {
    let dir = tmp("gap");
    let primary_path = dir.join("primary.db");
    let replica_path = dir.join("replica.db");
    let mut primary = Store::open(&primary_path, C).unwrap();
    primary.set_capture(true);
    primary.snapshot_to(&replica_path).unwrap();
    init_replica(&replica_path, "b").unwrap();
    primary.append_message(&message("一", 1)).unwrap();
    let one = primary.take_changes().unwrap();
    primary.append_message(&message("二", 2)).unwrap();
    let two = primary.take_changes().unwrap();

    let gap = apply_changes(&replica_path, "b", 2, &two).unwrap_err();
    assert!(matches!(gap, Error::ReplicaMismatch(_)), "{gap:?}");
    let foreign = apply_changes(&replica_path, "other", 1, &one).unwrap_err();
    assert!(matches!(foreign, Error::ReplicaMismatch(_)), "{foreign:?}");
    assert_eq!(replica_state(&replica_path).unwrap().seq, 0);

    apply_changes(&replica_path, "b", 1, &one).unwrap();
    apply_changes(&replica_path, "b", 2, &two).unwrap();
    drop(primary);
    assert_eq!(rows(&replica_path), rows(&primary_path));
}

#[test]
fn a_promoted_replica_is_a_primary_at_the_next_epoch() {
    let dir = tmp("promote");
    let primary_path = dir.join("primary.db");
    let replica_path = dir.join("replica.db");
    let mut primary = Store::open(&primary_path, C).unwrap();
    assert_eq!(primary.epoch().unwrap(), 0);
    primary.snapshot_to(&replica_path).unwrap();
    init_replica(&replica_path, "b").unwrap();
    assert_eq!(promote_replica(&replica_path).unwrap(), 1);
    assert!(replica_state(&replica_path).is_err(), "no longer a replica");
    let promoted = Store::open(&replica_path, C).unwrap();
    assert_eq!(promoted.epoch().unwrap(), 1);
    // A snapshot never overwrites a file.
    assert!(primary.snapshot_to(&replica_path).is_err());
}

#[test]
fn without_capture_nothing_is_recorded() {
    let dir = tmp("off");
    let mut primary = Store::open(dir.join("p.db"), C).unwrap();
    primary.append_message(&message("一", 1)).unwrap();
    assert!(primary.take_changes().unwrap().is_empty());
    primary.set_capture(true);
    primary.append_message(&message("二", 2)).unwrap();
    primary.set_capture(false);
    assert!(primary.take_changes().unwrap().is_empty());
}
