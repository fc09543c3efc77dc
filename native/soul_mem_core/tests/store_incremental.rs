//! Incremental write-back: a graph loaded from (or checkpointed to) a store logs the notes its
//! mutations touch, and the next `Store::checkpoint` writes only those — with exactly the
//! result a whole-graph write would have had.
#![allow(clippy::unwrap_used)]

mod store_util;

use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;
use soul_mem_core::rng::SplitMix64;
use soul_mem_core::store::{
    Change, CheckpointMode, CheckpointStats, FullReason, Store, StoreOptions,
};
use std::path::PathBuf;

const C: &str = "小红";

fn tmp(name: &str) -> PathBuf {
    store_util::tmp("store-incr", name)
}

use store_util::t;

fn id(readable: &str) -> MemoryId {
    MemoryId::derive(C, readable)
}

fn note(readable: &str) -> MemoryNote {
    MemoryNote::new(
        C,
        readable,
        MemoryType::Semantic(SemMemory {
            content: format!("内容{readable}"),
            aliases: vec![],
            concept_type: ConceptType::Entity,
            description: String::new(),
        }),
        t(0),
    )
}

fn link(from: MemoryId, to: MemoryId, salt: usize) -> MemoryLink {
    MemoryLink {
        id: LinkId::derive(from, to, salt),
        from,
        to,
        intensity: 0.5,
        link_type: MemoryLinkType::Sem(SemMemLink {
            verb: "认识".into(),
            confidence: 0.9,
        }),
    }
}

/// `n0 … n{n-1}`, each linked to its predecessor.
fn chain(n: usize) -> MemoryGraph {
    let mut g = MemoryGraph::new(C);
    for i in 0..n {
        let mut x = note(&format!("n{i}"));
        if i > 0 {
            x.links.push(link(x.id, id(&format!("n{}", i - 1)), 0));
        }
        g.insert(x).unwrap();
    }
    g
}

/// Same notes in the same order, same attached links in order, same pending links.
fn assert_same_graph(a: &MemoryGraph, b: &MemoryGraph) {
    let ra: Vec<&str> = a.notes().map(|n| n.readable_id.as_str()).collect();
    let rb: Vec<&str> = b.notes().map(|n| n.readable_id.as_str()).collect();
    assert_eq!(ra, rb, "note order");
    for (x, y) in a.notes().zip(b.notes()) {
        assert_eq!(x, y);
    }
    let mut pa: Vec<_> = a.pending_links().cloned().collect();
    let mut pb: Vec<_> = b.pending_links().cloned().collect();
    pa.sort_by_key(|l| l.id);
    pb.sort_by_key(|l| l.id);
    assert_eq!(pa, pb, "pending links");
}

fn incremental(s: &CheckpointStats, written: usize, deleted: usize) {
    assert_eq!(s.mode, CheckpointMode::Incremental, "{s:?}");
    assert_eq!(s.full_reason, None);
    assert_eq!(
        (s.notes_written, s.notes_deleted),
        (written, deleted),
        "{s:?}"
    );
}

fn full(s: &CheckpointStats, reason: FullReason) {
    assert_eq!(s.mode, CheckpointMode::Full, "{s:?}");
    assert_eq!(s.full_reason, Some(reason), "{s:?}");
}

/// A store holding `chain(n)` and the graph loaded back from it (synced).
fn stored_chain(name: &str, n: usize) -> (Store, MemoryGraph) {
    let mut s = Store::open_in(tmp(name), C).unwrap();
    s.save_graph(&chain(n)).unwrap();
    let g = s.load_graph().unwrap();
    (s, g)
}

#[test]
fn checkpoint_writes_only_the_changed_notes() {
    let (mut s, mut g) = stored_chain("changed", 50);
    assert_eq!(g.sync_tag(), Some(s.sync_tag()));
    assert_eq!(g.unsynced_notes(), 0);
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 0, 0);

    // Statistics, payload and a link intensity: three notes.
    assert!(g.record_retrieval(&id("n3"), t(100)));
    if let Some(MemoryType::Semantic(x)) = g.get_mut(&id("n7")).map(|n| &mut n.mem_type) {
        x.content = "改过".into();
    }
    let l = g.get(&id("n9")).unwrap().links[0].id;
    assert!(g.set_link_intensity(&id("n9"), &l, 0.9).unwrap());
    assert_eq!(g.unsynced_notes(), 3);
    let stats = s
        .checkpoint(&mut g, &[Change::SetSummary("摘要".into())])
        .unwrap();
    incremental(&stats, 3, 0);
    assert_eq!(stats.links_written, 3);
    assert_eq!(s.last_checkpoint(), Some(&stats));
    assert_eq!(g.unsynced_notes(), 0);
    assert_eq!(g.sync_tag(), Some(s.sync_tag()));
    assert_same_graph(&g, &s.load_graph().unwrap());
    assert_eq!(s.summary().unwrap().as_deref(), Some("摘要"));

    // Inserted notes land at the end of the stored order, like in the graph.
    let mut x = note("new");
    x.links.push(link(x.id, id("n0"), 0));
    g.insert(x).unwrap();
    g.add_link(link(id("n0"), id("new"), 0)).unwrap();
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 2, 0);
    let loaded = s.load_graph().unwrap();
    assert_same_graph(&g, &loaded);
    assert_eq!(loaded.index_of(&id("new")), Some(50));

    // Reopening the same file makes a new handle: graphs synced with the old one write whole.
    let path = s.path().to_path_buf();
    drop(s);
    let mut s = Store::open(&path, C).unwrap();
    g.record_retrieval(&id("n1"), t(200));
    full(&s.checkpoint(&mut g, &[]).unwrap(), FullReason::Stale);
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 0, 0);
}

#[test]
fn untracked_stale_and_cloned_graphs_write_whole() {
    let mut s = Store::open_in(tmp("untracked"), C).unwrap();
    // Never synced (new or imported): whole, then tracked.
    let mut g = chain(10);
    assert_eq!(g.sync_tag(), None);
    full(&s.checkpoint(&mut g, &[]).unwrap(), FullReason::Untracked);
    assert_eq!(g.sync_tag(), Some(s.sync_tag()));
    g.record_retrieval(&id("n1"), t(1));
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 1, 0);

    // A write to note rows behind the graph's back: whole (and it wins, as before).
    s.put_note(&note("stray")).unwrap();
    full(&s.checkpoint(&mut g, &[]).unwrap(), FullReason::Stale);
    assert!(s.note(&id("stray")).unwrap().is_none());

    // `upsert_note` writes the store and the graph together and keeps them in sync.
    let mut x = note("n2");
    x.tags = vec!["新".into()];
    s.upsert_note(&mut g, x).unwrap();
    assert_eq!(s.note(&id("n2")).unwrap().unwrap().tags, vec!["新"]);
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 1, 0);
    assert_same_graph(&g, &s.load_graph().unwrap());

    // Writes that touch no note rows (messages, summary, records) keep the sync.
    s.apply(&[Change::SetSummary("s".into())]).unwrap();
    s.append_records(&[(id("n1"), t(5))]).unwrap();
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 0, 0);

    // Two copies of one synced graph: the second to write finds the store moved on.
    let mut copy = g.clone();
    copy.record_retrieval(&id("n3"), t(9));
    g.record_retrieval(&id("n4"), t(9));
    incremental(&s.checkpoint(&mut copy, &[]).unwrap(), 1, 0);
    full(&s.checkpoint(&mut g, &[]).unwrap(), FullReason::Stale);
    assert_same_graph(&g, &s.load_graph().unwrap());

    // Another store of the same character.
    let mut other = Store::open_in(tmp("untracked-other"), C).unwrap();
    full(&other.checkpoint(&mut g, &[]).unwrap(), FullReason::Stale);
    // save_graph always writes whole and leaves the graph's tag alone (now stale).
    other.save_graph(&g).unwrap();
    assert_eq!(
        other.last_checkpoint().unwrap().full_reason,
        Some(FullReason::Requested)
    );
    full(&other.checkpoint(&mut g, &[]).unwrap(), FullReason::Stale);
}

#[test]
fn removed_notes_are_deleted_and_archived_ones_kept() {
    let (mut s, mut g) = stored_chain("remove", 20);
    // n5 leaves the graph: its row goes, and n6 (which linked to it) is rewritten.
    g.remove(&id("n5")).unwrap();
    assert_eq!(g.unsynced_notes(), 2);
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 1, 1);
    assert!(s.note(&id("n5")).unwrap().is_none());
    assert!(s.note(&id("n6")).unwrap().unwrap().links.is_empty());
    assert_same_graph(&g, &s.load_graph().unwrap());

    // Archiving as the character does: out of the graph, written and archived in `extra`.
    let n10 = g.remove(&id("n10")).unwrap();
    let stats = s
        .checkpoint(
            &mut g,
            &[Change::PutNote(n10), Change::ArchiveNote(id("n10"))],
        )
        .unwrap();
    // n11 rewritten (its link to n10 went), n10 archived, not deleted.
    incremental(&stats, 1, 0);
    assert!(s.is_archived(&id("n10")).unwrap());
    assert_eq!(s.note(&id("n10")).unwrap().unwrap().links.len(), 1);
    assert_same_graph(&g, &s.load_graph().unwrap());
    assert_eq!(s.counts().unwrap().1, 1);

    // The graph takes it back: the archived row is replaced, at the end of the order.
    let mut back = s.note(&id("n10")).unwrap().unwrap();
    back.links.clear();
    g.insert(back).unwrap();
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 1, 0);
    assert!(!s.is_archived(&id("n10")).unwrap());
    let loaded = s.load_graph().unwrap();
    assert_same_graph(&g, &loaded);
    assert_eq!(loaded.index_of(&id("n10")), Some(18));

    // Removed and re-inserted in one round: moved to the end.
    let n3 = g.remove(&id("n3")).unwrap();
    g.insert(n3).unwrap();
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 2, 0);
    assert_same_graph(&g, &s.load_graph().unwrap());

    // Archiving a note the graph still holds: the graph's version wins, in place.
    incremental(
        &s.checkpoint(&mut g, &[Change::ArchiveNote(id("n1"))])
            .unwrap(),
        1,
        0,
    );
    assert!(!s.is_archived(&id("n1")).unwrap());
    assert_same_graph(&g, &s.load_graph().unwrap());

    // Deleting a note the graph holds is not tracked: whole write.
    full(
        &s.checkpoint(&mut g, &[Change::DeleteNote(id("n2"))])
            .unwrap(),
        FullReason::Extra,
    );
    assert_same_graph(&g, &s.load_graph().unwrap());
}

#[test]
fn pending_links_are_written_with_their_source() {
    let (mut s, mut g) = stored_chain("pending", 5);
    // n4 → later (absent): pending, stored with n4.
    g.add_link(link(id("n4"), id("later"), 1)).unwrap();
    assert_eq!(g.stats().pending_links, 1);
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 1, 0);
    assert_eq!(s.note(&id("n4")).unwrap().unwrap().links.len(), 2);
    let loaded = s.load_graph().unwrap();
    assert_same_graph(&g, &loaded);
    assert_eq!(loaded.stats().pending_links, 1);

    // The target arrives: the link attaches, both notes are rewritten.
    g.insert(note("later")).unwrap();
    assert_eq!(g.stats().pending_links, 0);
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 2, 0);
    assert_same_graph(&g, &s.load_graph().unwrap());

    // Archived target (removal drops the link; it is added again, pending): pending after a
    // reload too, and it survives a delete of the target through `extra` exactly as a whole
    // write keeps it.
    let later = g.remove(&id("later")).unwrap();
    incremental(
        &s.checkpoint(
            &mut g,
            &[Change::PutNote(later), Change::ArchiveNote(id("later"))],
        )
        .unwrap(),
        1,
        0,
    );
    g.add_link(link(id("n4"), id("later"), 2)).unwrap();
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 1, 0);
    let mut g = s.load_graph().unwrap();
    assert_eq!(g.pending_to(&id("later")).len(), 1);
    let stats = s
        .checkpoint(&mut g, &[Change::DeleteNote(id("later"))])
        .unwrap();
    incremental(&stats, 1, 0);
    assert!(s.note(&id("later")).unwrap().is_none());
    assert_eq!(s.note(&id("n4")).unwrap().unwrap().links.len(), 2);
    assert_same_graph(&g, &s.load_graph().unwrap());
}

#[test]
fn a_failed_checkpoint_keeps_the_change_log() {
    let dir = tmp("failed");
    let opts = StoreOptions {
        max_pages: Some(60),
        ..StoreOptions::default()
    };
    let mut s = Store::open_with(Store::path_for(&dir, C), C, &opts).unwrap();
    s.save_graph(&chain(20)).unwrap();
    let mut g = s.load_graph().unwrap();
    let tag = g.sync_tag();
    g.record_retrieval(&id("n1"), t(1));
    g.record_retrieval(&id("n2"), t(1));

    // A failing extra change: nothing written, nothing forgotten.
    let e = s
        .checkpoint(&mut g, &[Change::ArchiveNote(id("nope"))])
        .unwrap_err();
    assert_eq!(e.kind(), "not_found");
    assert_eq!((g.unsynced_notes(), g.sync_tag()), (2, tag));
    assert_eq!(s.note(&id("n1")).unwrap().unwrap().retrieval_count, 0);

    // A full disk: same.
    if let Some(MemoryType::Semantic(x)) = g.get_mut(&id("n3")).map(|n| &mut n.mem_type) {
        x.description = "长".repeat(400_000);
    }
    let e = s.checkpoint(&mut g, &[]).unwrap_err();
    assert_eq!(e.kind(), "disk_full", "{e}");
    assert_eq!((g.unsynced_notes(), g.sync_tag()), (3, tag));

    // The next checkpoint retries the same notes, incrementally.
    if let Some(MemoryType::Semantic(x)) = g.get_mut(&id("n3")).map(|n| &mut n.mem_type) {
        x.description = "短".into();
    }
    incremental(&s.checkpoint(&mut g, &[]).unwrap(), 3, 0);
    assert_eq!(s.note(&id("n1")).unwrap().unwrap().retrieval_count, 1);
    assert_same_graph(&g, &s.load_graph().unwrap());
    assert!(s.check_integrity().unwrap().is_empty());
}

#[test]
fn rows_that_do_not_match_the_log_fall_back_to_a_whole_write() {
    let (mut s, mut g) = stored_chain("mismatch", 6);
    // Swapping two readable ids in place (allowed through get_mut, though the readable index
    // does not follow): the first rewrite would clash with the other's stored row.
    g.get_mut(&id("n1")).unwrap().readable_id = "tmp".into();
    g.get_mut(&id("n2")).unwrap().readable_id = "n1".into();
    g.get_mut(&id("n1")).unwrap().readable_id = "n2".into();
    full(&s.checkpoint(&mut g, &[]).unwrap(), FullReason::Mismatch);
    let loaded = s.load_graph().unwrap();
    assert_eq!(loaded.get(&id("n1")).unwrap().readable_id, "n2");
    assert_eq!(loaded.get(&id("n2")).unwrap().readable_id, "n1");
    assert_same_graph(&g, &loaded);

    // Link edits in `extra` are not tracked either.
    let l = link(id("n0"), id("n5"), 7);
    full(
        &s.checkpoint(&mut g, &[Change::PutLink(l)]).unwrap(),
        FullReason::Extra,
    );
    assert_same_graph(&g, &s.load_graph().unwrap());
}

/// The export document with notes (archived ones interleave differently) in id order.
fn normalized_export(s: &Store) -> serde_json::Value {
    let mut doc = s.export_character().unwrap();
    if let Some(notes) = doc.get_mut("notes").and_then(|n| n.as_array_mut()) {
        notes.sort_by_key(|n| n["uuid"].as_str().unwrap_or_default().to_owned());
    }
    doc
}

#[test]
fn incremental_checkpoints_equal_whole_writes_after_random_mutations() {
    for seed in [1u64, 7, 42, 1234] {
        let mut rng = SplitMix64::new(seed);
        let n = 60;
        let mut base = chain(n);
        // Extra links, some to notes that never exist (pending).
        for i in 0..n {
            let to = if rng.below(4) == 0 {
                id(&format!("ghost{}", rng.below(10)))
            } else {
                id(&format!("n{}", rng.below(n)))
            };
            base.add_link(link(id(&format!("n{i}")), to, 1)).unwrap();
        }
        let mut a = Store::open_in(tmp(&format!("eq-a-{seed}")), C).unwrap();
        let mut b = Store::open_in(tmp(&format!("eq-b-{seed}")), C).unwrap();
        a.save_graph(&base).unwrap();
        b.save_graph(&base).unwrap();
        let mut g = a.load_graph().unwrap();
        let mut fresh = n;
        let mut archived: Vec<MemoryId> = Vec::new();
        // Link ids derive from (from, to, salt): a fresh salt per link keeps them unique.
        let mut salt = 1000;
        let mut next_salt = || {
            salt += 1;
            salt
        };

        for round in 0..25 {
            let mut extra: Vec<Change> = Vec::new();
            for _ in 0..1 + rng.below(12) {
                let ids: Vec<MemoryId> = g.notes().map(|x| x.id).collect();
                let pick = ids[rng.below(ids.len())];
                match rng.below(12) {
                    0 => {
                        let mut x = note(&format!("n{fresh}"));
                        fresh += 1;
                        for k in 0..rng.below(3) {
                            let to = if rng.below(3) == 0 {
                                id(&format!("ghost{}", rng.below(10)))
                            } else {
                                ids[rng.below(ids.len())]
                            };
                            x.links.push(link(x.id, to, k + next_salt()));
                        }
                        g.insert(x).unwrap();
                    }
                    1 if g.len() > 10 => {
                        g.remove(&pick);
                    }
                    2 if g.len() > 10 => {
                        // Archived as the character does.
                        let x = g.remove(&pick).unwrap();
                        extra.push(Change::PutNote(x));
                        extra.push(Change::ArchiveNote(pick));
                        archived.push(pick);
                    }
                    3 => {
                        let x = g.remove(&pick).unwrap();
                        let mut x = x;
                        x.links.retain(|l| l.to != pick);
                        g.insert(x).unwrap();
                    }
                    4 => {
                        if let Some(MemoryType::Semantic(x)) =
                            g.get_mut(&pick).map(|x| &mut x.mem_type)
                        {
                            x.content = format!("改{round}");
                        }
                    }
                    5 => {
                        g.record_retrieval(&pick, t(round as i64 + 10));
                    }
                    6 => {
                        let to = ids[rng.below(ids.len())];
                        g.add_link(link(pick, to, next_salt())).unwrap();
                    }
                    7 => {
                        if let Some(l) = g.get(&pick).and_then(|x| x.links.first()).map(|l| l.id) {
                            g.remove_link(&pick, &l);
                        }
                    }
                    8 => {
                        if let Some(l) = g.get(&pick).and_then(|x| x.links.last()).map(|l| l.id) {
                            g.set_link_intensity(&pick, &l, rng.below(100) as f64 / 100.0)
                                .unwrap();
                        }
                    }
                    9 => {
                        let mut x = g.get(&pick).unwrap().clone();
                        x.tags = vec![format!("t{round}")];
                        x.links.retain(|l| g.get(&l.to).is_some());
                        g.upsert(x).unwrap();
                    }
                    10 if !archived.is_empty() => {
                        // An archived note comes back (replacing its archived row) …
                        let back = archived.swap_remove(rng.below(archived.len()));
                        if let Some(mut x) = a.note(&back).unwrap() {
                            x.links.clear();
                            if g.insert(x).is_err() {
                                archived.push(back);
                            }
                        }
                    }
                    11 if !archived.is_empty() => {
                        // … or is deleted for good.
                        let gone = archived.swap_remove(rng.below(archived.len()));
                        extra.push(Change::DeleteNote(gone));
                    }
                    _ => {
                        let ghost = id(&format!("ghost{}", rng.below(10)));
                        g.add_link(link(pick, ghost, next_salt())).unwrap();
                    }
                }
            }
            extra.push(Change::SetSummary(format!("round {round}")));
            let mut copy = g.clone();
            let stats = a.checkpoint(&mut g, &extra).unwrap();
            assert_eq!(
                stats.mode,
                CheckpointMode::Incremental,
                "seed {seed} round {round}: {stats:?}"
            );
            // The clone carries A's tag: a whole write into B.
            full(&b.checkpoint(&mut copy, &extra).unwrap(), FullReason::Stale);
            let (la, lb) = (a.load_graph().unwrap(), b.load_graph().unwrap());
            assert_same_graph(&g, &la);
            assert_same_graph(&la, &lb);
            assert_eq!(
                normalized_export(&a),
                normalized_export(&b),
                "seed {seed} round {round}"
            );
            assert_eq!(a.counts().unwrap(), b.counts().unwrap());
        }
    }
}
