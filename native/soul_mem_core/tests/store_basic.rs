//! Store behaviour: graph save/load, incremental writes, window, summary, records, forgetting
//! state, atomic batches, export/import round trip, activation.
#![allow(clippy::unwrap_used)]

mod store_util;

use chrono::{DateTime, TimeZone, Utc};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import::{import_bytes, ImportOptions};
use soul_mem_core::model::*;
use soul_mem_core::store::{Change, ForgetState, Message, Store};
use std::path::PathBuf;

const C: &str = "小红";

fn tmp(name: &str) -> PathBuf {
    store_util::tmp("store-basic", name)
}

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_780_000_000 + s, 123_456_789).unwrap()
}

fn sem(id: &str) -> MemoryNote {
    MemoryNote::new(
        C,
        id,
        MemoryType::Semantic(SemMemory {
            content: format!("内容{id}"),
            aliases: vec![],
            concept_type: ConceptType::Abstract,
            description: String::new(),
        }),
        t(0),
    )
}

fn link(from: &MemoryNote, to: &str, w: f64) -> MemoryLink {
    let to = MemoryId::derive(C, to);
    MemoryLink {
        id: LinkId::derive(from.id, to, from.links.len()),
        from: from.id,
        to,
        intensity: w,
        link_type: MemoryLinkType::Sem(SemMemLink {
            verb: "认识".into(),
            confidence: 0.9,
        }),
    }
}

const SMALL: &str = r#"[
  {"id":"sem_self","tags":["我"],"mem_type":{"Semantic":{"content":"小红","aliases":["红"],"concept_type":"Entity","description":"自己"}},
   "mem_links":[{"from":"sem_self","to":"sit_b","intensity":0.8,"link_type":{"Sem":{"verb":"参与","confidence":0.7}}}]},
  {"id":"sit_b","tags":[],"mem_type":{"Situation":{"SpecificSituation":{"narrative":"吃麻辣烫","time_span":"2026-06-01T08:00:00Z","context":{"location":{"name":"店","coordinates":"街角"},"participants":[{"name":"你","role":"朋友"}],"emotions":[{"name":"喜","intensity":0.5}],"sensory_data":[],"environment":{"atmosphere":"热闹","tone":""},"event":[]}}}},
   "mem_links":[{"from":"sit_b","to":"proc_c","intensity":0.9,"link_type":{"Proc":{"prob":0.6}}},
                {"from":"sit_b","to":"abs_d","intensity":0.4,"link_type":{"Situation":{"SpecificToAbstract":{}}}}]},
  {"id":"proc_c","tags":[],"mem_type":{"Procedure":{"action":{"content":"摸辫子","action_type":{"Skill":{}}}}},"mem_links":[]},
  {"id":"abs_d","tags":["抽象"],"mem_type":{"Situation":{"AbstractSituation":{"Location":{"name":"小吃店","coordinates":""}}}},"mem_links":[]}
]"#;

fn small_graph() -> MemoryGraph {
    let opts = ImportOptions {
        now: t(0),
        ..ImportOptions::default()
    };
    import_bytes(C, SMALL.as_bytes(), &opts).unwrap()
}

fn assert_same_graph(a: &MemoryGraph, b: &MemoryGraph) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.notes().zip(b.notes()) {
        assert_eq!(x, y);
    }
    let mut pa: Vec<_> = a.pending_links().map(|l| l.id).collect();
    let mut pb: Vec<_> = b.pending_links().map(|l| l.id).collect();
    pa.sort();
    pb.sort();
    assert_eq!(pa, pb);
}

#[test]
fn save_load_round_trips_and_survives_reopen() {
    let dir = tmp("roundtrip");
    let path = Store::path_for(&dir, C);
    let g = small_graph();
    {
        let mut s = Store::open(&path, C).unwrap();
        assert_eq!(
            s.schema_version().unwrap(),
            soul_mem_core::store::SCHEMA_VERSION
        );
        s.save_graph(&g).unwrap();
        assert_same_graph(&g, &s.load_graph().unwrap());
    }
    let s = Store::open(&path, C).unwrap();
    let loaded = s.load_graph().unwrap();
    assert_same_graph(&g, &loaded);
    assert!(loaded.get_by_readable("sem_self").unwrap().core);
    assert_eq!(s.counts().unwrap(), (4, 0, 3));
    assert!(s.check_integrity().unwrap().is_empty());
    // Another character's name is refused.
    drop(s);
    let e = Store::open(&path, "小白").unwrap_err();
    assert_eq!(e.kind(), "incompatible", "{e}");
}

#[test]
fn pending_links_are_stored_and_restored() {
    let dir = tmp("pending");
    let mut g = MemoryGraph::new(C);
    let mut a = sem("a");
    a.links.push(link(&a, "not_yet", 1.0));
    g.insert(a).unwrap();
    assert_eq!(g.stats().pending_links, 1);
    let mut s = Store::open_in(&dir, C).unwrap();
    s.save_graph(&g).unwrap();
    let loaded = s.load_graph().unwrap();
    assert_eq!(loaded.stats().pending_links, 1);
    // The target arrives later: the stored link attaches on load.
    s.put_note(&sem("not_yet")).unwrap();
    let loaded = s.load_graph().unwrap();
    assert_eq!((loaded.stats().pending_links, loaded.link_count()), (0, 1));
}

#[test]
fn put_note_upserts_and_keeps_order_archive_hides() {
    let dir = tmp("put");
    let mut s = Store::open_in(&dir, C).unwrap();
    s.save_graph(&small_graph()).unwrap();
    let id = MemoryId::derive(C, "proc_c");
    let mut n = s.note(&id).unwrap().unwrap();
    n.retrieval_count = 7;
    n.links.push(link(&n, "sem_self", 0.3));
    s.put_note(&n).unwrap();
    let g = s.load_graph().unwrap();
    assert_eq!(g.index_of(&id), Some(2), "upsert keeps the position");
    assert_eq!(g.get(&id).unwrap().retrieval_count, 7);
    assert_eq!(g.get(&id).unwrap().links.len(), 1);

    // Readable id clash with another uuid is refused and changes nothing.
    let mut clash = sem("proc_c");
    clash.id = MemoryId::random();
    assert_eq!(s.put_note(&clash).unwrap_err().kind(), "duplicate_id");
    // Invalid payloads are refused like import refuses them.
    let mut bad = sem("bad");
    bad.links.push(link(&bad, "sem_self", -1.0));
    assert_eq!(s.put_note(&bad).unwrap_err().kind(), "invalid_value");
    assert_eq!(s.counts().unwrap().0, 4);

    // delete_link / put_link.
    let lid = n.links[0].id;
    assert!(s.delete_link(&lid).unwrap());
    assert!(!s.delete_link(&lid).unwrap());
    s.put_link(&n.links[0]).unwrap();
    assert_eq!(s.note(&id).unwrap().unwrap().links.len(), 1);
    let orphan = link(&sem("ghost"), "sem_self", 1.0);
    assert_eq!(s.put_link(&orphan).unwrap_err().kind(), "not_found");

    // Archive: not loaded, links into it wait as pending links, still in the file.
    let sit = MemoryId::derive(C, "sit_b");
    s.archive_note(&sit).unwrap();
    let g = s.load_graph().unwrap();
    assert_eq!(g.len(), 3);
    assert!(g.get(&sit).is_none());
    assert_eq!(g.stats().pending_links, 1);
    assert_eq!(g.link_count(), 1);
    assert!(s.is_archived(&sit).unwrap());
    assert_eq!(s.counts().unwrap().1, 1);
    // Saving the loaded graph keeps the archived note.
    s.save_graph(&g).unwrap();
    assert!(s.note(&sit).unwrap().is_some());
    s.unarchive_note(&sit).unwrap();
    assert_eq!(s.load_graph().unwrap().len(), 4);
    assert_eq!(
        s.archive_note(&MemoryId::random()).unwrap_err().kind(),
        "not_found"
    );
    assert!(s.delete_note(&sit).unwrap());
    assert!(s.note(&sit).unwrap().is_none());
}

fn msg(i: i64, tagged: bool) -> Message {
    Message {
        role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
        text: format!("第{i}句"),
        at: t(i),
        tagged,
    }
}

#[test]
fn window_summary_records_forget_state_persist() {
    let dir = tmp("window");
    let path = Store::path_for(&dir, C);
    let a = MemoryId::derive(C, "a");
    let fs = ForgetState {
        missing_degree: 0.4,
        band: 2,
        revised_text: Some("模糊的内容".into()),
        original_text: Some("内容a".into()),
        updated_at: t(9),
    };
    {
        let mut s = Store::open(&path, C).unwrap();
        let seqs: Vec<i64> = (0..5)
            .map(|i| s.append_message(&msg(i, i == 3)).unwrap())
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(s.pop_messages(seqs[1]).unwrap(), 2);
        s.set_summary("她喜欢麻辣烫").unwrap();
        s.append_records(&[(a, t(1)), (a, t(5)), (MemoryId::derive(C, "b"), t(3))])
            .unwrap();
        s.set_forget_state(&a, &fs).unwrap();
        let mut bad = fs.clone();
        bad.missing_degree = 2.0;
        assert_eq!(
            s.set_forget_state(&a, &bad).unwrap_err().kind(),
            "invalid_value"
        );
    }
    // Restart: resumes mid-conversation.
    let mut s = Store::open(&path, C).unwrap();
    let w = s.window().unwrap();
    assert_eq!(w.len(), 3);
    assert_eq!(w[0].1, msg(2, false));
    assert!(w[1].1.tagged);
    assert_eq!(s.summary().unwrap().as_deref(), Some("她喜欢麻辣烫"));
    let r = s.records_since(t(3)).unwrap();
    assert_eq!(r, vec![(MemoryId::derive(C, "b"), t(3)), (a, t(5))]);
    assert_eq!(s.forget_state(&a).unwrap(), Some(fs));
    assert_eq!(s.prune_records(t(2)).unwrap(), 1);
    // Sequence numbers are never reused after popping everything.
    let last = w.last().unwrap().0;
    s.pop_messages(i64::MAX).unwrap();
    assert!(s.append_message(&msg(9, false)).unwrap() > last);
}

#[test]
fn apply_commits_all_or_nothing() {
    let dir = tmp("apply");
    let mut s = Store::open_in(&dir, C).unwrap();
    s.save_graph(&small_graph()).unwrap();
    let before = s.export_character().unwrap();
    let mut newn = sem("new");
    newn.links.push(link(&newn, "sem_self", 0.5));
    let good = vec![
        Change::PutNote(newn.clone()),
        Change::AppendMessage(msg(1, true)),
        Change::SetSummary("s".into()),
        Change::AppendRecords(vec![(newn.id, t(2))]),
        Change::ArchiveNote(MemoryId::derive(C, "proc_c")),
    ];
    // The same batch with a failing last step (archiving an unknown note) writes nothing.
    let mut failing = good.clone();
    failing.push(Change::ArchiveNote(MemoryId::random()));
    assert_eq!(s.apply(&failing).unwrap_err().kind(), "not_found");
    assert_eq!(s.export_character().unwrap(), before);
    s.apply(&good).unwrap();
    assert_eq!(s.counts().unwrap(), (4, 1, 4));
    assert_eq!(s.window().unwrap().len(), 1);
    assert_eq!(s.summary().unwrap().as_deref(), Some("s"));
}

#[test]
fn export_import_restores_exactly() {
    let dir = tmp("export");
    let mut s = Store::open_in(&dir, C).unwrap();
    let mut g = small_graph();
    let mut a = sem("a");
    a.links.push(link(&a, "absent", 0.25));
    g.insert(a).unwrap();
    s.save_graph(&g).unwrap();
    s.archive_note(&MemoryId::derive(C, "proc_c")).unwrap();
    for i in 0..4 {
        s.append_message(&msg(i, i == 2)).unwrap();
    }
    s.pop_messages(1).unwrap();
    s.set_summary("摘要").unwrap();
    s.append_records(&[(MemoryId::derive(C, "sit_b"), t(4))])
        .unwrap();
    s.set_forget_state(
        &MemoryId::derive(C, "sit_b"),
        &ForgetState {
            missing_degree: 0.1,
            band: 1,
            revised_text: None,
            original_text: Some("吃麻辣烫".into()),
            updated_at: t(6),
        },
    )
    .unwrap();
    s.put_embedding(
        &MemoryId::derive(C, "sem_self"),
        "m1",
        &[7u8; 32],
        &[0.1, -0.25, 3.5e-7],
    )
    .unwrap();
    s.set_meta("consolidated_at", "2026-01-01").unwrap();
    let doc = s.export_character().unwrap();
    drop(s);

    let mut s2 = Store::open_in(tmp("import"), C).unwrap();
    s2.append_message(&msg(99, false)).unwrap(); // replaced by the import
    s2.import_character(&doc).unwrap();
    assert_eq!(s2.export_character().unwrap(), doc);
    let (h, v) = s2
        .embedding(&MemoryId::derive(C, "sem_self"), "m1")
        .unwrap()
        .unwrap();
    assert_eq!((h, v), ([7u8; 32], vec![0.1, -0.25, 3.5e-7]));
    // A document of another character, or a malformed one, is refused and changes nothing.
    let mut other = Store::open_in(tmp("other"), "小白").unwrap();
    assert_eq!(
        other.import_character(&doc).unwrap_err().kind(),
        "invalid_argument"
    );
    let mut broken = doc.clone();
    broken["notes"][0]["mem_type"] = serde_json::json!({"Foo": {}});
    assert_eq!(
        s2.import_character(&broken).unwrap_err().kind(),
        "invalid_json"
    );
    assert_eq!(s2.export_character().unwrap(), doc);
}

/// Chain core ← a — b — c — d, plus x linked only *into* b (incoming direction).
fn chain_store() -> Store {
    let mut s = Store::open_in(tmp("activate"), C).unwrap();
    let mut g = MemoryGraph::new(C);
    let mut core = sem("core");
    core.core = true;
    g.insert(core).unwrap();
    let names = ["a", "b", "c", "d"];
    for (i, n) in names.iter().enumerate() {
        let mut note = sem(n);
        if let Some(next) = names.get(i + 1) {
            note.links.push(link(&note, next, 1.0 - i as f64 * 0.1));
        }
        g.insert(note).unwrap();
    }
    let mut x = sem("x");
    x.links.push(link(&x, "b", 0.2));
    g.insert(x).unwrap();
    s.save_graph(&g).unwrap();
    s
}

#[test]
fn activate_loads_k_hops_both_directions_and_marks_boundary() {
    let s = chain_store();
    let id = |n: &str| MemoryId::derive(C, n);
    let act = s.activate(&[id("b")], 1, 100).unwrap();
    let mut got: Vec<&str> = act.graph.notes().map(|n| n.readable_id.as_str()).collect();
    got.sort();
    assert_eq!(got, vec!["a", "b", "c", "core", "x"]);
    assert!(!act.truncated);
    // a and c have unloaded neighbours; b, x and the isolated core do not.
    assert_eq!(
        act.boundary,
        [id("c")].into_iter().collect(),
        "a has no neighbour besides b; c links to d"
    );
    // Outgoing link c→d waits as pending; loading is consistent.
    assert_eq!(act.graph.stats().pending_links, 1);
    assert_eq!(act.graph.link_count(), 3);

    let act2 = s.activate(&[id("b")], 2, 100).unwrap();
    assert_eq!(act2.graph.len(), 6);
    assert!(act2.boundary.is_empty());

    // Cap: only 2 non-core notes; the strongest neighbour first.
    let capped = s.activate(&[id("b")], 3, 2).unwrap();
    assert!(capped.truncated);
    assert_eq!(capped.graph.len(), 3);
    assert!(capped.graph.get(&id("core")).is_some());
    // a→b (1.0) is stronger than b→c (0.9) and x→b (0.2).
    assert!(capped.graph.get(&id("a")).is_some());
    assert_eq!(capped.boundary, [id("b")].into_iter().collect());

    // Archived notes are never activated; unknown seeds are skipped.
    let mut s = s;
    s.archive_note(&id("c")).unwrap();
    let act3 = s.activate(&[id("b"), MemoryId::random()], 5, 100).unwrap();
    assert!(act3.graph.get(&id("c")).is_none());
    assert!(act3.graph.get(&id("d")).is_none());
    assert_eq!(act3.graph.stats().pending_links, 1, "b→c waits");
}

#[test]
fn nearest_is_a_cosine_scan_over_active_notes() {
    let s = chain_store();
    let mut s = s;
    let id = |n: &str| MemoryId::derive(C, n);
    s.put_embedding(&id("a"), "m", &[0; 32], &[1.0, 0.0])
        .unwrap();
    s.put_embedding(&id("b"), "m", &[0; 32], &[0.7, 0.7])
        .unwrap();
    s.put_embedding(&id("c"), "m", &[0; 32], &[0.0, 1.0])
        .unwrap();
    s.put_embedding(&id("d"), "other", &[0; 32], &[1.0, 0.0])
        .unwrap();
    let top = s.nearest("m", &[1.0, 0.1], 2).unwrap();
    assert_eq!(
        top.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![id("a"), id("b")]
    );
    s.archive_note(&id("a")).unwrap();
    assert_eq!(s.nearest("m", &[1.0, 0.1], 1).unwrap()[0].0, id("b"));
    assert!(s.nearest("m", &[0.0, 0.0], 3).unwrap().is_empty());
}

#[test]
fn save_graph_revives_archived_notes_it_contains_and_keeps_the_rest() {
    let dir = tmp("revive");
    let mut s = Store::open_in(&dir, C).unwrap();
    let g = small_graph();
    s.save_graph(&g).unwrap();
    let sit = MemoryId::derive(C, "sit_b");
    let proc_c = MemoryId::derive(C, "proc_c");
    s.archive_note(&sit).unwrap();
    s.archive_note(&proc_c).unwrap();
    // put_note on an archived note updates it but keeps it archived.
    let mut p = s.note(&proc_c).unwrap().unwrap();
    p.retrieval_count = 3;
    s.put_note(&p).unwrap();
    assert!(s.is_archived(&proc_c).unwrap());
    // The full graph (which still holds both) revives them; a graph without them keeps them
    // archived.
    s.save_graph(&g).unwrap();
    assert_eq!(s.counts().unwrap(), (4, 0, 3));
    assert_same_graph(&g, &s.load_graph().unwrap());
    s.archive_note(&sit).unwrap();
    let loaded = s.load_graph().unwrap();
    s.save_graph(&loaded).unwrap();
    assert_eq!(
        s.counts().unwrap(),
        (3, 1, 3),
        "no link lost by load → save"
    );
    assert_eq!(s.note(&sit).unwrap().unwrap().links.len(), 2);
    // A graph of another character is refused.
    assert_eq!(
        s.save_graph(&MemoryGraph::new("小白")).unwrap_err().kind(),
        "invalid_argument"
    );
}

#[test]
fn feedback_persists_exports_and_rejects_bad_values() {
    let dir = tmp("feedback");
    let path = Store::path_for(&dir, C);
    let a = MemoryId::derive(C, "sem_a");
    {
        let mut s = Store::open(&path, C).unwrap();
        s.append_feedback(&a, 1, t(1)).unwrap();
        s.append_feedback(&a, -1, t(2)).unwrap();
        let e = s.append_feedback(&a, 3, t(3)).unwrap_err();
        assert_eq!(e.kind(), "invalid_argument", "{e}");
        // A bad value inside a batch rolls the whole batch back.
        let e = s
            .apply(&[
                Change::AppendFeedback(a, 1, t(4)),
                Change::AppendFeedback(a, 0, t(5)),
            ])
            .unwrap_err();
        assert_eq!(e.kind(), "invalid_argument", "{e}");
    }
    let s = Store::open(&path, C).unwrap();
    assert_eq!(s.feedback().unwrap(), vec![(a, 1, t(1)), (a, -1, t(2))]);

    let doc = s.export_character().unwrap();
    drop(s);
    let mut other = Store::open(Store::path_for(tmp("feedback-copy"), C), C).unwrap();
    other.import_character(&doc).unwrap();
    assert_eq!(other.feedback().unwrap(), vec![(a, 1, t(1)), (a, -1, t(2))]);

    let mut bad = doc.clone();
    bad["feedback"][0]["value"] = serde_json::json!(5);
    let e = other.import_character(&bad).unwrap_err();
    assert!(e.to_string().contains("+1 or -1"), "{e}");
    assert_eq!(
        other.feedback().unwrap().len(),
        2,
        "failed import changed nothing"
    );
}

#[test]
fn checkpoint_writes_graph_and_extra_changes_in_one_transaction() {
    let dir = tmp("checkpoint");
    let mut s = Store::open(Store::path_for(&dir, C), C).unwrap();
    let g = small_graph();
    s.save_graph(&g).unwrap();
    let seq = s.append_message(&msg(1, true)).unwrap();
    s.append_message(&msg(2, false)).unwrap();

    // A failing extra change (archiving an unknown note) leaves graph, summary and window.
    let mut g2 = small_graph();
    g2.insert(sem("sem_new")).unwrap();
    let e = s
        .checkpoint(
            &mut g2,
            &[
                Change::SetSummary("新的摘要".into()),
                Change::PopMessages(seq),
                Change::ArchiveNote(MemoryId::derive(C, "nope")),
            ],
        )
        .unwrap_err();
    assert_eq!(e.kind(), "not_found", "{e}");
    assert_same_graph(&s.load_graph().unwrap(), &g);
    assert_eq!(s.summary().unwrap(), None);
    assert_eq!(s.window().unwrap().len(), 2);

    s.checkpoint(
        &mut g2,
        &[
            Change::SetSummary("新的摘要".into()),
            Change::PopMessages(seq),
        ],
    )
    .unwrap();
    assert_same_graph(&s.load_graph().unwrap(), &g2);
    assert_eq!(s.summary().unwrap().as_deref(), Some("新的摘要"));
    assert_eq!(s.window().unwrap().len(), 1);
}

#[test]
fn a_version_1_file_migrates_forward_keeping_its_data() {
    let dir = tmp("migrate");
    let path = dir.join("v1.soulmem");
    {
        let mut c = rusqlite::Connection::open(&path).unwrap();
        let tx = c.transaction().unwrap();
        tx.execute_batch(soul_mem_core::store::MIGRATIONS[0])
            .unwrap();
        tx.execute_batch(&format!(
            "PRAGMA user_version=1; PRAGMA application_id={};
             INSERT INTO meta (key, value) VALUES ('character', '{C}'), ('summary', '旧摘要');",
            soul_mem_core::store::APPLICATION_ID
        ))
        .unwrap();
        tx.commit().unwrap();
    }
    let mut s = Store::open(&path, C).unwrap();
    assert_eq!(
        s.schema_version().unwrap(),
        soul_mem_core::store::SCHEMA_VERSION
    );
    assert_eq!(s.summary().unwrap().as_deref(), Some("旧摘要"));
    s.append_feedback(&MemoryId::derive(C, "x"), 1, t(0))
        .unwrap();
    assert_eq!(s.feedback().unwrap().len(), 1);
}
