//! Working-memory activation over a store: k-hop loading with core notes resident, LRU release
//! under the cap (persisted first), boundary expansion, partial checkpoints that never delete
//! unloaded notes, recall reaching two hops from a seed, and seeds equal to `Store::nearest`.
#![allow(clippy::unwrap_used)]

mod store_util;

use soul_mem_core::engine::{EmbedderChoice, Engine};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;
use soul_mem_core::retrieval::{HashEmbedder, PipelineConfig, SubQuery, TextEmbedder};
use soul_mem_core::store::{Change, ForgetState, Store};
use soul_mem_core::working::{WorkingConfig, WorkingMemory};
use std::path::PathBuf;

const C: &str = "小红";
const DIM: usize = 256;

fn tmp(name: &str) -> PathBuf {
    store_util::tmp("working", name)
}

use store_util::t;

fn id(n: &str) -> MemoryId {
    MemoryId::derive(C, n)
}

fn sem(name: &str, content: &str) -> MemoryNote {
    MemoryNote::new(
        C,
        name,
        MemoryType::Semantic(SemMemory {
            content: content.into(),
            aliases: vec![],
            concept_type: ConceptType::Entity,
            description: String::new(),
        }),
        t(0),
    )
}

fn link(from: &MemoryNote, to: &str, w: f64) -> MemoryLink {
    let to = id(to);
    MemoryLink {
        id: LinkId::derive(from.id, to, from.links.len()),
        from: from.id,
        to,
        intensity: w,
        link_type: MemoryLinkType::Sem(SemMemLink {
            verb: "相关".into(),
            confidence: 0.9,
        }),
    }
}

/// Distinct contents the hash embedder tells apart: a query equal to one is its top hit.
fn content(i: usize) -> String {
    const WORDS: [&str; 12] = [
        "苹果", "海洋", "钢琴", "雪山", "火车", "月亮", "书店", "咖啡", "风筝", "灯塔", "森林",
        "沙漠",
    ];
    format!("{}{} {i:03}", WORDS[i % 12], WORDS[(i / 12) % 12])
}

/// A chain n0 → n1 → … → n{len-1} plus an isolated core note `self`.
fn chain_store(name: &str, len: usize) -> Store {
    let mut s = Store::open_in(tmp(name), C).unwrap();
    let mut g = MemoryGraph::new(C);
    let mut core = sem("self", "小红自己");
    core.core = true;
    g.insert(core).unwrap();
    for i in 0..len {
        let mut n = sem(&format!("n{i}"), &content(i));
        if i + 1 < len {
            n.links.push(link(&n, &format!("n{}", i + 1), 1.0));
        }
        g.insert(n).unwrap();
    }
    s.save_graph(&g).unwrap();
    s
}

fn hash() -> EmbedderChoice {
    EmbedderChoice::Hash(HashEmbedder::new(DIM).unwrap())
}

fn open(store: &mut Store, cfg: WorkingConfig) -> (Engine, WorkingMemory) {
    let mut engine = Engine::new(MemoryGraph::new(C));
    let (wm, report) = WorkingMemory::open(&mut engine, store, hash(), cfg, &|_, _| {}).unwrap();
    assert_eq!(report.core_loaded, 1);
    (engine, wm)
}

fn resident(e: &Engine) -> Vec<String> {
    let mut v: Vec<String> = e.graph().notes().map(|n| n.readable_id.clone()).collect();
    v.sort();
    v
}

fn names(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn one_seed(k_hops: usize, cap: usize) -> WorkingConfig {
    WorkingConfig {
        k_hops,
        cap,
        seeds_per_query: 1,
        ..WorkingConfig::default()
    }
}

#[test]
fn open_builds_the_index_and_reuses_stored_vectors() {
    let mut s = chain_store("index", 20);
    let (_, wm) = open(&mut s, WorkingConfig::default());
    assert_eq!(wm.index_len(), 21);
    assert_eq!(wm.model(), "hash-ngram-256");
    drop(wm);
    // A changed text is re-embedded; the rest comes from the table.
    s.put_note(&sem("n3", "全新的文字")).unwrap();
    let mut engine = Engine::new(MemoryGraph::new(C));
    let (_, r) = WorkingMemory::open(
        &mut engine,
        &mut s,
        hash(),
        WorkingConfig::default(),
        &|_, _| {},
    )
    .unwrap();
    assert_eq!((r.notes, r.vectors, r.reused, r.embedded), (21, 21, 20, 1));
    let (h, v) = s.embedding(&id("n3"), "hash-ngram-256").unwrap().unwrap();
    assert_eq!(h, soul_mem_core::embedding_cache::text_hash("全新的文字"));
    assert_eq!(v, HashEmbedder::new(DIM).unwrap().embed_one("全新的文字"));
}

#[test]
fn activation_loads_k_hops_and_core_and_marks_the_boundary() {
    let mut s = chain_store("khop", 21);
    let (mut e, mut wm) = open(&mut s, one_seed(2, 1000));
    assert_eq!(
        resident(&e),
        names(&["self"]),
        "only core before any activation"
    );
    let r = wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert_eq!(r.seeds.len(), 1);
    assert_eq!(r.seeds[0].readable_id, "n10");
    assert!((r.seeds[0].score - 1.0).abs() < 1e-5);
    assert_eq!(
        resident(&e),
        names(&["self", "n8", "n9", "n10", "n11", "n12"])
    );
    assert_eq!(r.loaded.len(), 5);
    assert_eq!((r.working_size, r.non_core, r.boundary), (6, 5, Some(2)));
    let b: Vec<MemoryId> = wm.boundary(&e).into_iter().collect();
    let mut want = vec![id("n8"), id("n12")];
    want.sort();
    assert_eq!(b, want);
    // Links inside the working graph are attached; n12 → n13 waits as pending.
    assert_eq!(e.graph().link_count(), 4);
    assert_eq!(e.graph().stats().pending_links, 1);
    // Activating the same seed again loads nothing.
    let again = wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert!(again.loaded.is_empty() && again.released.is_empty());
}

/// One activation loads at most `activation_budget` notes, nearest first: the seed, then its
/// neighbours hop by hop; what lies beyond is boundary for a later expansion.
#[test]
fn an_activation_loads_at_most_its_budget_nearest_first() {
    let mut s = chain_store("budget", 21);
    let cfg = WorkingConfig {
        activation_budget: 3,
        ..one_seed(3, 1000)
    };
    let (mut e, mut wm) = open(&mut s, cfg);
    let r = wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert_eq!(r.loaded.len(), 3);
    assert!(r.truncated, "the budget cut the 3-hop neighbourhood short");
    assert_eq!(resident(&e), names(&["self", "n9", "n10", "n11"]));
    // An expansion has the same budget, the expanded note counted in it: n11 and its two
    // neighbours, of which n12 is new.
    let x = wm.expand(&mut e, &mut s, &[id("n11")]).unwrap();
    assert_eq!(x.loaded, vec!["n12".to_string()]);
    assert_eq!(resident(&e), names(&["self", "n9", "n10", "n11", "n12"]));
    // With the default budget (256) the same activation loads the whole 3-hop neighbourhood.
    let mut s = chain_store("budget-off", 21);
    let (mut e, mut wm) = open(&mut s, one_seed(3, 1000));
    let r = wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert_eq!((r.loaded.len(), r.truncated), (7, false));
}

#[test]
fn links_written_by_another_path_are_walked_by_the_next_activation() {
    let mut s = chain_store("foreign", 21);
    let (mut e, mut wm) = open(&mut s, one_seed(1, 1000));
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(resident(&e), names(&["self", "n1", "n2", "n3"]));
    // A link n15 → n5 written straight to the store (not through working memory), and n3
    // archived the same way: the in-memory adjacency must not serve the old lists.
    let n15 = s.note(&id("n15")).unwrap().unwrap();
    s.put_link(&link(&n15, "n5", 0.5)).unwrap();
    s.archive_note(&id("n4")).unwrap();
    let r = wm.activate_texts(&mut e, &mut s, &[&content(5)]).unwrap();
    assert_eq!(r.seeds[0].readable_id, "n5");
    let mut loaded = r.loaded.clone();
    loaded.sort();
    assert_eq!(
        loaded,
        names(&["n15", "n5", "n6"]),
        "n4 archived, n15 reached"
    );
}

#[test]
fn cap_releases_least_recently_activated_non_core_notes_persisting_them_first() {
    let mut s = chain_store("cap", 30);
    let (mut e, mut wm) = open(&mut s, one_seed(1, 3));
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(resident(&e), names(&["self", "n1", "n2", "n3"]));
    // Change n2 in memory: a recall, a new link weight, and a link to a note that is not
    // loaded (pending).
    e.record(&[id("n2")], t(500));
    let l23 = e.graph().get(&id("n2")).unwrap().links[0].id;
    e.graph_mut()
        .set_link_intensity(&id("n2"), &l23, 0.25)
        .unwrap();
    let n2 = e.graph().get(&id("n2")).unwrap().clone();
    let extra = link(&n2, "n20", 0.7);
    e.graph_mut().add_link(extra.clone()).unwrap();

    let r = wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert_eq!(resident(&e), names(&["self", "n9", "n10", "n11"]));
    let mut released = r.released.clone();
    released.sort();
    assert_eq!(released, names(&["n1", "n2", "n3"]));
    assert_eq!(r.persisted, 1, "only the changed note is written");
    assert_eq!(r.non_core, 3);

    // The store holds n2's changes; the other stored notes are all there.
    let stored = s.note(&id("n2")).unwrap().unwrap();
    assert_eq!(stored.retrieval_count, 1);
    assert_eq!(stored.last_accessed_time, t(500));
    assert_eq!(stored.links.len(), 2);
    assert!(stored
        .links
        .iter()
        .any(|l| l.id == l23 && (l.intensity - 0.25).abs() < 1e-12));
    assert!(stored.links.iter().any(|l| l.id == extra.id));
    assert_eq!(s.counts().unwrap().0, 31);

    // Reloading n2 brings the changed version back.
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    let back = e.graph().get(&id("n2")).unwrap();
    assert_eq!(back.retrieval_count, 1);
    assert!(resident(&e).contains(&"self".to_string()), "core stays");
}

#[test]
fn a_release_patches_the_retrieval_of_notes_that_were_only_recalled() {
    let mut s = chain_store("patch", 30);
    let before = s.note(&id("n2")).unwrap().unwrap();
    let (mut e, mut wm) = open(&mut s, one_seed(1, 3));
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    e.record(&[id("n2"), id("n3")], t(500));
    e.record(&[id("n2")], t(900));

    let r = wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert!(r.released.contains(&"n2".to_string()));
    assert_eq!(r.persisted, 2, "n2 and n3 were recalled, n1 was not");

    // Only the two columns moved: the row, its payload and its links are as they were.
    let stored = s.note(&id("n2")).unwrap().unwrap();
    assert_eq!(stored.retrieval_count, 2);
    assert_eq!(stored.last_accessed_time, t(900));
    let expected = MemoryNote {
        retrieval_count: 2,
        last_accessed_time: t(900),
        ..before
    };
    assert_eq!(stored, expected);
    assert_eq!(s.note(&id("n3")).unwrap().unwrap().retrieval_count, 1);
    assert_eq!(s.note(&id("n1")).unwrap().unwrap().retrieval_count, 0);

    // Brought back, it carries them.
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(e.graph().get(&id("n2")).unwrap().retrieval_count, 2);
}

#[test]
fn a_retrieval_patch_of_a_note_gone_from_the_store_writes_nothing() {
    let mut s = chain_store("patch_gone", 5);
    s.delete_note(&id("n2")).unwrap();
    s.apply(&[Change::SetRetrieval(id("n2"), 4, t(100))])
        .unwrap();
    assert!(s.note(&id("n2")).unwrap().is_none());
    assert_eq!(s.counts().unwrap().0, 5);
}

fn state(degree: f64, at: i64) -> ForgetState {
    ForgetState {
        missing_degree: degree,
        band: 1,
        revised_text: None,
        original_text: None,
        updated_at: t(at),
    }
}

#[test]
fn a_released_note_writes_its_forgetting_state_only_when_it_moved() {
    let mut s = chain_store("release_states", 30);
    s.apply(&[
        Change::SetForgetState(id("n1"), state(0.2, 10)),
        Change::SetForgetState(id("n2"), state(0.3, 10)),
    ])
    .unwrap();
    let (mut e, mut wm) = open(&mut s, one_seed(1, 3));
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(e.forget_state(&id("n1")), Some(&state(0.2, 10)), "loaded");
    // n2's state moves in memory; n1's does not, while the store's copy of it changes
    // (a stand-in for a write that did not go through this working memory).
    e.set_forget_state(id("n2"), state(0.6, 20)).unwrap();
    s.apply(&[Change::SetForgetState(id("n1"), state(0.25, 30))])
        .unwrap();
    let r = wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert!(r.released.contains(&"n1".to_string()));
    assert!(r.released.contains(&"n2".to_string()));
    let stored = s.forget_states_of(&[id("n1"), id("n2")]).unwrap();
    assert_eq!(
        stored.get(&id("n2")),
        Some(&state(0.6, 20)),
        "moved: written"
    );
    assert_eq!(
        stored.get(&id("n1")),
        Some(&state(0.25, 30)),
        "unchanged since it was loaded: not written again"
    );
    // Loaded again, n2 comes back with the state it was released with.
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(e.forget_state(&id("n2")), Some(&state(0.6, 20)));
}

/// Releases n1–n3 (n2 recalled first, n1 with a stored forgetting state) into the memory of
/// released notes: what the tests below bring back.
fn released_chain(name: &str) -> (Store, Engine, WorkingMemory) {
    let mut s = chain_store(name, 30);
    s.apply(&[Change::SetForgetState(id("n1"), state(0.2, 10))])
        .unwrap();
    let (mut e, mut wm) = open(&mut s, one_seed(1, 3));
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    e.record(&[id("n2")], t(900));
    let mut released = wm
        .activate_texts(&mut e, &mut s, &[&content(10)])
        .unwrap()
        .released;
    released.sort();
    assert_eq!(released, names(&["n1", "n2", "n3"]));
    (s, e, wm)
}

#[test]
fn released_notes_come_back_from_memory_as_a_fresh_read_brings_them() {
    let (mut s, mut e, mut wm) = released_chain("released_back");
    let back = wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(back.from_released, 3, "{back:?}");

    // A second working memory over the same store reads them.
    let (mut fresh, mut wm2) = open(&mut s, one_seed(1, 3));
    let read = wm2
        .activate_texts(&mut fresh, &mut s, &[&content(2)])
        .unwrap();
    assert_eq!(read.from_released, 0);
    for n in ["n1", "n2", "n3"] {
        assert_eq!(e.graph().get(&id(n)), fresh.graph().get(&id(n)), "{n}");
        assert_eq!(e.forget_state(&id(n)), fresh.forget_state(&id(n)), "{n}");
    }
    assert_eq!(e.graph().get(&id("n2")).unwrap().retrieval_count, 1);
    assert_eq!(e.forget_state(&id("n1")), Some(&state(0.2, 10)));
}

#[test]
fn a_released_note_another_path_wrote_is_read_again() {
    let (mut s, mut e, mut wm) = released_chain("released_foreign");
    let mut changed = s.note(&id("n2")).unwrap().unwrap();
    changed.tags = vec!["改过".into()];
    s.put_note(&changed).unwrap();
    let back = wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(back.from_released, 0, "another writer: nothing is trusted");
    assert_eq!(e.graph().get(&id("n2")).unwrap().tags, changed.tags);
}

#[test]
fn a_note_a_checkpoint_wrote_is_read_again_after_its_release() {
    let mut s = chain_store("released_checkpoint", 30);
    let (mut e, mut wm) = open(&mut s, one_seed(1, 3));
    wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    wm.checkpoint(&mut e, &mut s, &[]).unwrap();
    wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    let back = wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(back.from_released, 0, "its copy was written, not read");
    wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    let again = wm.activate_texts(&mut e, &mut s, &[&content(2)]).unwrap();
    assert_eq!(again.from_released, 3, "read since: kept");
}

#[test]
fn released_notes_keep_incoming_links_from_resident_notes() {
    let mut s = chain_store("incoming", 30);
    let before = s.counts().unwrap();
    let (mut e, mut wm) = open(&mut s, one_seed(1, 3));
    wm.activate_texts(&mut e, &mut s, &[&content(5)]).unwrap(); // n4 n5 n6
    wm.activate_texts(&mut e, &mut s, &[&content(3)]).unwrap(); // n2 n3 n4 -> n5, n6 released
    assert_eq!(resident(&e), names(&["self", "n2", "n3", "n4"]));
    // n4 is resident, its target n5 is not: the link waits as pending again.
    let n4 = e.graph().get(&id("n4")).unwrap();
    assert!(n4.links.is_empty());
    assert!(e
        .graph()
        .pending_links()
        .any(|l| l.from == id("n4") && l.to == id("n5")));
    // Writing n4 back keeps n4 → n5, and nothing is lost anywhere.
    wm.checkpoint(&mut e, &mut s, &[]).unwrap();
    assert_eq!(s.counts().unwrap(), before);
    let stored = s.note(&id("n4")).unwrap().unwrap();
    assert_eq!(stored.links.len(), 1);
    assert_eq!(stored.links[0].to, id("n5"));
    // Loading n5 again attaches it.
    wm.activate_texts(&mut e, &mut s, &[&content(5)]).unwrap();
    assert_eq!(e.graph().get(&id("n4")).map(|n| n.links.len()), Some(1));
}

#[test]
fn boundary_notes_expand_one_hop() {
    let mut s = chain_store("boundary", 21);
    let (mut e, mut wm) = open(&mut s, one_seed(1, 1000));
    wm.activate_texts(&mut e, &mut s, &[&content(10)]).unwrap();
    assert_eq!(resident(&e), names(&["self", "n9", "n10", "n11"]));
    // Not a boundary note: nothing happens.
    let r = wm.expand(&mut e, &mut s, &[id("n10")]).unwrap();
    assert!(r.loaded.is_empty() && r.expanded.is_empty());
    let r = wm.expand(&mut e, &mut s, &[id("n11")]).unwrap();
    assert_eq!(r.loaded, vec!["n12".to_string()]);
    assert_eq!(r.expanded, vec!["n11".to_string()]);
    let b: Vec<MemoryId> = wm.boundary(&e).into_iter().collect();
    let mut want = vec![id("n9"), id("n12")];
    want.sort();
    assert_eq!(b, want);
    // n11 → n12 attached when n12 arrived.
    assert_eq!(e.graph().get(&id("n11")).unwrap().links.len(), 1);
    // A resident boundary seed is expanded by the activation itself.
    let r = wm.activate_texts(&mut e, &mut s, &[&content(9)]).unwrap();
    assert_eq!(r.loaded, vec!["n8".to_string()]);
    assert_eq!(r.expanded, vec!["n9".to_string()]);
}

#[test]
fn partial_checkpoint_never_deletes_unloaded_notes() {
    let mut s = chain_store("partial", 40);
    let before = s.counts().unwrap();
    assert_eq!(before, (41, 0, 39));
    let (mut e, mut wm) = open(&mut s, one_seed(1, 1000));
    wm.activate_texts(&mut e, &mut s, &[&content(20)]).unwrap();
    assert_eq!(e.graph().len(), 4);
    // Edit a resident note, add a new one linked from it.
    if let Some(MemoryType::Semantic(sm)) =
        e.graph_mut().get_mut(&id("n20")).map(|n| &mut n.mem_type)
    {
        sm.content = "改过的内容".into();
    }
    let mut fresh = sem("fresh", "新学到的东西");
    fresh.links.push(link(&fresh, "n21", 0.5));
    e.graph_mut().insert(fresh).unwrap();
    let rep = wm
        .checkpoint(&mut e, &mut s, &[Change::SetSummary("聊了很多".into())])
        .unwrap();
    assert_eq!(rep.notes, 5);
    assert_eq!(rep.embedded, 2, "the edited and the new note");
    assert_eq!(s.counts().unwrap(), (42, 0, 40));
    assert_eq!(s.summary().unwrap().as_deref(), Some("聊了很多"));
    let n20 = s.note(&id("n20")).unwrap().unwrap();
    assert!(matches!(&n20.mem_type, MemoryType::Semantic(x) if x.content == "改过的内容"));
    // n21 → n22 (n22 not resident) is still stored, and so is every unloaded note.
    assert_eq!(s.note(&id("n21")).unwrap().unwrap().links.len(), 1);
    for i in 0..40 {
        assert!(s.note(&id(&format!("n{i}"))).unwrap().is_some(), "n{i}");
    }
    // The new note is in the long-term index now: it can seed an activation.
    assert_eq!(wm.index_len(), 42);
    let seeds = wm
        .seeds(&s, &wm.embed_queries(&["新学到的东西"]).unwrap())
        .unwrap();
    assert_eq!(seeds[0].0, id("fresh"));
    // A whole-graph checkpoint of the same partial graph WOULD delete them (the contrast).
    let mut copy = Store::open_in(tmp("contrast"), C).unwrap();
    copy.save_graph(&s.load_graph().unwrap()).unwrap();
    copy.save_graph(e.graph()).unwrap();
    assert_eq!(copy.counts().unwrap().0, 5);

    // Archiving through the checkpoint drops the note from the working graph and the index.
    wm.checkpoint(&mut e, &mut s, &[Change::ArchiveNote(id("n19"))])
        .unwrap();
    assert!(e.graph().get(&id("n19")).is_none());
    assert!(s.is_archived(&id("n19")).unwrap());
    assert_eq!(wm.index_len(), 41);
    // n20 → n21 survives, n18 → n19 (unloaded source) too.
    assert_eq!(s.note(&id("n18")).unwrap().unwrap().links.len(), 1);

    // Deleting through the checkpoint: the resident note is not written back, links to it
    // are dropped, and later checkpoints do not bring them back.
    wm.checkpoint(&mut e, &mut s, &[Change::DeleteNote(id("n21"))])
        .unwrap();
    assert!(s.note(&id("n21")).unwrap().is_none());
    assert!(e.graph().get(&id("n21")).is_none());
    assert!(s.note(&id("n20")).unwrap().unwrap().links.is_empty());
    assert!(s.note(&id("fresh")).unwrap().unwrap().links.is_empty());
    wm.checkpoint(&mut e, &mut s, &[]).unwrap();
    assert!(s.note(&id("n20")).unwrap().unwrap().links.is_empty());
    assert_eq!(s.counts().unwrap().0, 40);
}

fn query(text: &str) -> SubQuery {
    serde_json::from_value(serde_json::json!({
        "priority": 1,
        "tag": [],
        "variant": {"Semantic": [{"concept_identifier": text, "description": ""}]}
    }))
    .unwrap()
}

/// 麻辣烫 → 老街 → 奶奶, plus unrelated notes; only 麻辣烫 matches the query text.
fn two_hop_store(name: &str) -> Store {
    let mut s = Store::open_in(tmp(name), C).unwrap();
    let mut g = MemoryGraph::new(C);
    let mut a = sem("a", "麻辣烫");
    a.links.push(link(&a, "b", 1.0));
    let mut b = sem("b", "老街");
    b.links.push(link(&b, "c", 1.0));
    let c = sem("c", "奶奶");
    g.insert(a).unwrap();
    g.insert(b).unwrap();
    g.insert(c).unwrap();
    for i in 0..30 {
        let mut n = sem(&format!("x{i}"), &content(i));
        if i > 0 {
            n.links.push(link(&n, &format!("x{}", i - 1), 1.0));
        }
        g.insert(n).unwrap();
    }
    s.save_graph(&g).unwrap();
    s
}

#[test]
fn recall_over_the_activated_graph_finds_a_memory_two_hops_from_the_seed() {
    let mut s = two_hop_store("twohop");
    let mut e = Engine::new(MemoryGraph::new(C));
    let (mut wm, _) =
        WorkingMemory::open(&mut e, &mut s, hash(), one_seed(2, 1000), &|_, _| {}).unwrap();
    let (result, report) = wm
        .recall_at(
            &mut e,
            &mut s,
            &[query("麻辣烫")],
            &PipelineConfig::default(),
            None,
            chrono::Utc::now(),
        )
        .unwrap();
    assert_eq!(report.seeds[0].readable_id, "a");
    assert_eq!(resident(&e), names(&["a", "b", "c"]));
    let ids: Vec<&str> = result
        .memories
        .iter()
        .map(|m| m.readable_id.as_str())
        .collect();
    assert!(ids.contains(&"c"), "{ids:?}");
}

#[test]
fn recall_expands_boundary_notes_it_reaches_and_recalls_again() {
    let mut s = two_hop_store("rerun");
    let mut e = Engine::new(MemoryGraph::new(C));
    let (mut wm, _) =
        WorkingMemory::open(&mut e, &mut s, hash(), one_seed(1, 1000), &|_, _| {}).unwrap();
    let (result, report) = wm
        .recall_at(
            &mut e,
            &mut s,
            &[query("麻辣烫")],
            &PipelineConfig::default(),
            None,
            chrono::Utc::now(),
        )
        .unwrap();
    // One hop loads a and b; b is on the boundary (c unloaded), PPR reaches it, so it is
    // expanded and the recall runs again over a, b, c.
    assert!(report.expanded.contains(&"b".to_string()), "{report:?}");
    assert!(report.rerun);
    assert_eq!(resident(&e), names(&["a", "b", "c"]));
    let ids: Vec<&str> = result
        .memories
        .iter()
        .map(|m| m.readable_id.as_str())
        .collect();
    assert!(ids.contains(&"c"), "{ids:?}");
}

/// A recall runs as of its `now`: each equals full mode's over the same (whole) graph at that
/// time, and its decay factors are those of that time's bucket (the same time again reuses
/// them, ten years later does not). The report says where the time went.
#[test]
fn a_recall_runs_as_of_its_time_like_full_mode() {
    let mut s = two_hop_store("recall_at");
    let mut e = Engine::new(MemoryGraph::new(C));
    let cfg = WorkingConfig {
        cap: 1000,
        activation_budget: 1000,
        k_hops: 16,
        seeds_per_query: 40,
        ..WorkingConfig::default()
    };
    let (mut wm, _) = WorkingMemory::open(&mut e, &mut s, hash(), cfg, &|_, _| {}).unwrap();
    let mut full = Engine::new(s.load_graph().unwrap());
    full.embed_all(hash(), &|_, _| {}).unwrap();
    let pcfg = PipelineConfig::default();
    let q = [query("麻辣烫")];
    let scores = |r: &soul_mem_core::retrieval::PipelineResult| -> Vec<(String, u64)> {
        r.memories
            .iter()
            .map(|m| (m.readable_id.clone(), m.score.to_bits()))
            .collect()
    };
    let mut misses = Vec::new();
    for when in [t(86_400), t(86_400), t(10 * 365 * 86_400)] {
        let (result, report) = wm.recall_at(&mut e, &mut s, &q, &pcfg, None, when).unwrap();
        assert_eq!(e.graph().len(), full.graph().len(), "everything is loaded");
        let expected = full.recall_at(&q, &pcfg, None, when).unwrap();
        assert_eq!(scores(&result), scores(&expected));
        assert!(report.timings.pipeline_us > 0, "{:?}", report.timings);
        misses.push(e.decay_cache_counters().1);
    }
    assert_eq!(
        misses[1], misses[0],
        "the same time reuses its decay factors"
    );
    assert_eq!(
        misses[2],
        misses[1] + 1,
        "ten years later are other factors"
    );
}

/// A recall leaves what it loaded over the cap for its answer; `settle` releases it after,
/// and a recall that finds no settle ran releases first.
#[test]
fn a_recall_leaves_its_release_to_settle_and_the_next_recall_catches_up() {
    let mut s = chain_store("settle", 30);
    let (mut e, mut wm) = open(
        &mut s,
        WorkingConfig {
            expand_boundary: false,
            ..one_seed(1, 3)
        },
    );
    let recall = |wm: &mut WorkingMemory, e: &mut Engine, s: &mut Store, i: usize| {
        wm.recall_at(
            e,
            s,
            &[query(&content(i))],
            &PipelineConfig::default(),
            None,
            chrono::Utc::now(),
        )
        .unwrap()
        .1
    };
    let r = recall(&mut wm, &mut e, &mut s, 2);
    assert_eq!(resident(&e), names(&["self", "n1", "n2", "n3"]));
    assert!(r.released.is_empty());
    let r = recall(&mut wm, &mut e, &mut s, 10);
    assert!(r.released.is_empty(), "{r:?}");
    assert_eq!(r.non_core, 6, "over the cap until settled");
    assert_eq!(
        r.boundary, None,
        "a recall leaves the boundary count to the settle"
    );
    e.record(&[id("n2")], t(500));

    let settled = wm.settle(&mut e, &mut s).unwrap();
    assert_eq!(settled.boundary, Some(wm.boundary(&e).len()));
    assert!(settled.boundary.is_some_and(|b| b > 0), "{settled:?}");
    // The least recently activated go: of the first recall's notes, those this one did not
    // recall again.
    assert_eq!((settled.released.len(), settled.non_core), (3, 3));
    assert!(
        e.is_indexed(),
        "the settle brings the index up to the smaller graph"
    );
    let gone = settled.released.contains(&"n2".to_string());
    assert_eq!(
        settled.persisted,
        usize::from(gone),
        "the recorded note is written first"
    );
    if gone {
        assert_eq!(s.note(&id("n2")).unwrap().unwrap().retrieval_count, 1);
    }
    assert!(resident(&e).contains(&"n10".to_string()));
    assert!(wm.settle(&mut e, &mut s).unwrap().released.is_empty());

    // No settle after this one: the next recall releases before it loads.
    recall(&mut wm, &mut e, &mut s, 20);
    let r = recall(&mut wm, &mut e, &mut s, 25);
    assert_eq!((r.released.len(), r.non_core), (3, 6), "{r:?}");
    for n in ["n24", "n25", "n26"] {
        assert!(resident(&e).contains(&n.to_string()), "{n}");
    }
}

#[test]
fn seeds_from_the_long_term_index_match_store_nearest() {
    let mut s = chain_store("nearest", 60);
    let cfg = WorkingConfig {
        seeds_per_query: 7,
        ..WorkingConfig::default()
    };
    let (_, mut wm) = open(&mut s, cfg);
    let embedder = HashEmbedder::new(DIM).unwrap();
    // Twice: the second pass re-scores from the vectors the first one read.
    for text in ["苹果", "海洋钢琴", "雪山 017", "月亮书店 033", "灯塔"].repeat(2) {
        let q = embedder.embed(&[text], soul_mem_core::retrieval::EmbedKind::Query);
        let q = q.unwrap().remove(0);
        let ours = wm.seeds(&s, std::slice::from_ref(&q)).unwrap();
        let theirs = s.nearest(wm.model(), &q, 7).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{text}");
        for ((a, sa), (b, sb)) in ours.iter().zip(&theirs) {
            assert!((sa - sb).abs() < 1e-4, "{text}: {sa} vs {sb}");
            if a != b {
                // Only a float tie may swap two neighbours.
                assert!((sa - sb).abs() < 1e-6, "{text}: {a:?} vs {b:?}");
            }
        }
        let mut x: Vec<_> = ours.iter().map(|p| p.0).collect();
        let mut y: Vec<_> = theirs.iter().map(|p| p.0).collect();
        x.sort();
        y.sort();
        assert_eq!(x, y, "{text}");
    }
}

/// The seeds' re-scoring keeps the vectors it read, but never scores with one the store no
/// longer holds: a vector another writer replaced (under the same text hash, so the long-term
/// index still matches it) is read again, and so is one a checkpoint rewrote for a new text.
#[test]
fn re_scoring_never_uses_a_vector_the_store_replaced() {
    let mut s = chain_store("rescore", 30);
    let (mut e, mut wm) = open(
        &mut s,
        WorkingConfig {
            seeds_per_query: 3,
            ..WorkingConfig::default()
        },
    );
    let embedder = HashEmbedder::new(DIM).unwrap();
    let q = embedder
        .embed(&[&content(7)], soul_mem_core::retrieval::EmbedKind::Query)
        .unwrap();
    // Every seed's score is the store's exact cosine, as it is now.
    let exact = |wm: &mut WorkingMemory, s: &Store| {
        let seeds = wm.seeds(s, &q).unwrap();
        for (n, score) in &seeds {
            let stored = s.cosines_of(wm.model(), &[&q[0]], &[*n]).unwrap();
            assert_eq!(stored[0], vec![(*n, *score)], "{n:?}");
        }
        seeds
    };
    let first = exact(&mut wm, &s);
    assert_eq!(first[0].0, id("n7"));
    assert_eq!(
        exact(&mut wm, &s),
        first,
        "read again from the vectors held"
    );

    let model = wm.model().to_owned();
    let (hash, _) = s.embedding(&id("n7"), &model).unwrap().unwrap();
    let other = embedder
        .embed(
            &[&content(20)],
            soul_mem_core::retrieval::EmbedKind::Passage,
        )
        .unwrap()
        .remove(0);
    s.put_embedding(&id("n7"), &model, &hash, &other).unwrap();
    let after = exact(&mut wm, &s);
    assert_ne!(after, first, "n7 scored with its new vector");

    // A text changed in the working graph: the checkpoint writes its vector and index row.
    wm.activate_texts(&mut e, &mut s, &[&content(7)]).unwrap();
    if let Some(MemoryType::Semantic(m)) = e.graph_mut().get_mut(&id("n7")).map(|n| &mut n.mem_type)
    {
        m.content = content(21);
    }
    let embedded = wm.checkpoint(&mut e, &mut s, &[]).unwrap().embedded;
    assert!(embedded >= 1);
    let rewritten = exact(&mut wm, &s);
    assert!(
        rewritten.iter().all(|p| p.0 != id("n7") || p.1 < 0.99),
        "{rewritten:?}"
    );
}

/// Above `ann_from` the index is an HNSW graph: its seeds are nearly the scan's on this corpus, it
/// is saved beside the store and reused by the next open (stale rows repaired: a changed text,
/// a deleted note, a new note), a damaged save is rebuilt, and a checkpoint saves again once
/// enough changed.
#[test]
fn a_large_character_gets_a_saved_hnsw_index() {
    use soul_mem_core::working::IndexKind;
    let mut s = chain_store("hnsw", 300);
    let graph_cfg = WorkingConfig {
        seeds_per_query: 7,
        ann_from: Some(100),
        ..WorkingConfig::default()
    };
    let open_report = |s: &mut Store, cfg: &WorkingConfig| {
        let mut engine = Engine::new(MemoryGraph::new(C));
        let (wm, r) = WorkingMemory::open(&mut engine, s, hash(), cfg.clone(), &|_, _| {}).unwrap();
        (engine, wm, r)
    };
    let (_, mut scan, r) = open_report(
        &mut s,
        &WorkingConfig {
            seeds_per_query: 7,
            ..WorkingConfig::default()
        },
    );
    assert_eq!((r.kind, r.from_saved, r.saved), (IndexKind::Scan, 0, false));
    let (_, mut wm, r) = open_report(&mut s, &graph_cfg);
    assert_eq!(
        (r.kind, r.vectors, r.from_saved, r.saved),
        (IndexKind::Hnsw, 301, 0, true)
    );
    assert_eq!(wm.index_kind(), IndexKind::Hnsw);
    let embedder = HashEmbedder::new(DIM).unwrap();
    let seeds = |wm: &mut WorkingMemory, s: &Store, text: &str| {
        let q = embedder.embed(&[text], soul_mem_core::retrieval::EmbedKind::Query);
        let ids: Vec<MemoryId> = wm
            .seeds(s, &q.unwrap())
            .unwrap()
            .into_iter()
            .map(|p| p.0)
            .collect();
        ids
    };
    // The graph is approximate: the best seed is the scan's, and nearly all of the rest.
    let (mut shared, mut total) = (0, 0);
    for text in [
        "苹果",
        "海洋钢琴",
        "雪山 017",
        "月亮书店 033",
        "灯塔",
        "全新的文字",
    ] {
        let (ours, exact) = (seeds(&mut wm, &s, text), seeds(&mut scan, &s, text));
        assert_eq!(ours.len(), exact.len(), "{text}");
        assert_eq!(ours.first(), exact.first(), "{text}");
        shared += ours.iter().filter(|id| exact.contains(id)).count();
        total += exact.len();
    }
    assert!(
        shared * 10 >= total * 9,
        "graph seeds share {shared} of the scan's {total}"
    );
    drop(wm);

    // Reopen: every row from the saved graph.
    let (_, _, r) = open_report(&mut s, &graph_cfg);
    assert_eq!(
        (r.vectors, r.from_saved, r.reused, r.embedded, r.saved),
        (301, 301, 301, 0, false)
    );

    // Changes made while it was closed are repaired from the store. One changed text is
    // below 1 % of the rows: the saved graph is kept as it was.
    s.put_note(&sem("n3", "全新的文字")).unwrap();
    let (_, mut wm, r) = open_report(&mut s, &graph_cfg);
    assert_eq!(
        (r.vectors, r.from_saved, r.embedded, r.saved),
        (301, 300, 1, false)
    );
    assert_eq!(seeds(&mut wm, &s, "全新的文字")[0], id("n3"));
    drop(wm);
    // Then a deletion and a new note: n3's vector now comes from the table, and with four
    // rows changed the graph is saved again.
    s.delete_note(&id("n4")).unwrap();
    s.put_note(&sem("extra", "灯塔海洋 999")).unwrap();
    let (_, mut wm, r) = open_report(&mut s, &graph_cfg);
    assert_eq!(
        (r.vectors, r.from_saved, r.reused, r.embedded, r.saved),
        (301, 299, 300, 1, true)
    );
    assert_eq!(seeds(&mut wm, &s, "全新的文字")[0], id("n3"));
    assert_eq!(seeds(&mut wm, &s, "灯塔海洋 999")[0], id("extra"));
    assert!(!seeds(&mut wm, &s, &content(4)).contains(&id("n4")));
    drop(wm);
    let (_, _, r) = open_report(&mut s, &graph_cfg);
    assert_eq!((r.from_saved, r.embedded), (301, 0));

    // A damaged save is ignored and rebuilt.
    let manifest = {
        let mut p = s.path().as_os_str().to_owned();
        p.push("-ann");
        PathBuf::from(p)
    };
    std::fs::write(&manifest, b"SOULANN1 not really").unwrap();
    let (mut engine, mut wm, r) = open_report(&mut s, &graph_cfg);
    assert_eq!((r.kind, r.from_saved, r.saved), (IndexKind::Hnsw, 0, true));

    // A checkpoint that changes enough rows saves the graph again.
    let changed: Vec<MemoryNote> = (10..20)
        .map(|i| sem(&format!("n{i}"), &format!("改写 {i}")))
        .collect();
    let extra: Vec<Change> = changed.into_iter().map(Change::PutNote).collect();
    let cp = wm.checkpoint(&mut engine, &mut s, &extra).unwrap();
    assert!(cp.index_saved, "{cp:?}");
    drop(wm);
    let (_, mut wm, r) = open_report(&mut s, &graph_cfg);
    assert_eq!((r.from_saved, r.embedded), (301, 0));
    assert_eq!(seeds(&mut wm, &s, "改写 15")[0], id("n15"));

    soul_mem_core::working::remove_saved_index(s.path()).unwrap();
    assert!(!manifest.exists());
}

#[test]
fn bad_inputs_are_errors() {
    let mut s = chain_store("bad", 5);
    let mut other = Engine::new(MemoryGraph::new("小白"));
    let e = WorkingMemory::open(
        &mut other,
        &mut s,
        hash(),
        WorkingConfig::default(),
        &|_, _| {},
    )
    .unwrap_err();
    assert_eq!(e.kind(), "invalid_argument");
    let bad = WorkingConfig {
        cap: 0,
        ..WorkingConfig::default()
    };
    let mut e2 = Engine::new(MemoryGraph::new(C));
    assert!(WorkingMemory::open(&mut e2, &mut s, hash(), bad, &|_, _| {}).is_err());
    let (mut e, mut wm) = open(&mut s, WorkingConfig::default());
    assert!(wm.seeds(&s, &[vec![1.0; 3]]).is_err(), "wrong dimension");
    assert!(wm.seeds(&s, &[vec![0.0; DIM]]).unwrap().is_empty());
    assert!(wm.activate(&mut other, &mut s, &[]).is_err());
    let r = wm.activate(&mut e, &mut s, &[]).unwrap();
    assert_eq!(r.working_size, 1);
    let j: WorkingConfig = serde_json::from_str(r#"{"cap": 5}"#).unwrap();
    assert_eq!((j.cap, j.k_hops), (5, 2));
    assert!(serde_json::from_str::<WorkingConfig>(r#"{"nope": 1}"#).is_err());
}
