//! What keeps working-memory recall free of rebuilds: vectors reused for unchanged notes
//! (identical to embedding everything again, and only changed texts reach the embedder), and
//! a batch release that keeps links into the released notes as pending links.
#![allow(clippy::unwrap_used)]

mod store_util;

use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;
use soul_mem_core::retrieval::{
    EmbedKind, FieldKind, HashEmbedder, NodeVectors, TextEmbedder, VectorPlan,
};
use std::cell::RefCell;
use store_util::t;

const C: &str = "小蓝";

fn sem(name: &str, content: &str, tags: &[&str]) -> MemoryNote {
    let mut n = MemoryNote::new(
        C,
        name,
        MemoryType::Semantic(SemMemory {
            content: content.into(),
            aliases: vec![],
            concept_type: ConceptType::Entity,
            description: format!("{content}的描述"),
        }),
        t(0),
    );
    n.tags = tags.iter().map(|s| s.to_string()).collect();
    n
}

fn link(from: &MemoryNote, to: &MemoryNote) -> MemoryLink {
    MemoryLink {
        id: LinkId::derive(from.id, to.id, from.links.len()),
        from: from.id,
        to: to.id,
        intensity: 0.5,
        link_type: MemoryLinkType::Sem(SemMemLink {
            verb: "相关".into(),
            confidence: 0.9,
        }),
    }
}

/// The hash embedder, recording every text it is asked to embed.
struct Counting {
    inner: HashEmbedder,
    seen: RefCell<Vec<String>>,
}

impl TextEmbedder for Counting {
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str], kind: EmbedKind) -> soul_mem_core::Result<Vec<Vec<f32>>> {
        self.seen
            .borrow_mut()
            .extend(texts.iter().map(|s| s.to_string()));
        self.inner.embed(texts, kind)
    }
}

impl Counting {
    /// Asserts that the texts asked for since the last clear are `want`, in any order.
    fn assert_asked(&self, want: &[&str], why: &str) {
        let mut asked = self.seen.borrow().clone();
        asked.sort();
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(asked, want, "{why}");
    }
}

fn assert_same(a: &NodeVectors, b: &NodeVectors) {
    assert_eq!(a.ids(), b.ids());
    for i in 0..a.len() {
        for kind in FieldKind::ROW_KINDS {
            assert_eq!(a.rows_q8(kind, i), b.rows_q8(kind, i), "node {i} {kind:?}");
        }
        let tags = |v: &NodeVectors| -> Vec<(String, Vec<f32>)> {
            v.node_tags(i)
                .iter()
                .map(|&t| {
                    let t = t as usize;
                    (v.tag_vocab()[t].clone(), v.tag_vector(t).to_vec())
                })
                .collect()
        };
        assert_eq!(tags(a), tags(b), "tags of node {i}");
    }
    assert_eq!(a.tag_vocab(), b.tag_vocab());
}

#[test]
fn reused_vectors_equal_a_full_embedding_and_only_changes_are_embedded() {
    let e = Counting {
        inner: HashEmbedder::new(64).unwrap(),
        seen: RefCell::new(Vec::new()),
    };
    let mut g = MemoryGraph::new(C);
    for i in 0..6 {
        g.insert(sem(
            &format!("n{i}"),
            &format!("内容{i}"),
            &["甲", "乙"][..1 + i % 2],
        ))
        .unwrap();
    }
    let prev = NodeVectors::embed_graph(&g, &e).unwrap();

    // One note changed, one removed, one added with a new tag.
    g.upsert(sem("n2", "改过的内容", &["丙"])).unwrap();
    g.remove(&MemoryId::derive(C, "n4"));
    g.insert(sem("n9", "新的内容", &["丁", "甲"])).unwrap();
    e.seen.borrow_mut().clear();
    let reused = NodeVectors::embed_graph_reusing(&g, &e, Some(&prev)).unwrap();
    e.assert_asked(
        &[
            "改过的内容",
            "改过的内容的描述",
            "丙",
            "新的内容",
            "新的内容的描述",
            "丁",
            "甲",
        ],
        "only the texts of the changed and new notes are embedded",
    );

    let full = NodeVectors::embed_graph(&g, &e.inner).unwrap();
    assert_same(&reused, &full);
    // Vectors of another dimension are never reused.
    let other = Counting {
        inner: HashEmbedder::new(32).unwrap(),
        seen: RefCell::new(Vec::new()),
    };
    let fresh = NodeVectors::embed_graph_reusing(&g, &other, Some(&prev)).unwrap();
    assert_eq!(fresh.dim(), 32);
    assert_eq!(
        other.seen.borrow().len(),
        NodeVectors::distinct_texts(&g).len(),
        "every distinct text embedded"
    );

    // A note changed in place is embedded again (its content revision moved); with nothing
    // changed, nothing is.
    if let Some(MemoryType::Semantic(s)) = g
        .get_mut(&MemoryId::derive(C, "n1"))
        .map(|n| &mut n.mem_type)
    {
        s.content = "就地改过".into();
    }
    e.seen.borrow_mut().clear();
    let after = NodeVectors::embed_graph_reusing(&g, &e, Some(&reused)).unwrap();
    assert!(e.seen.borrow().contains(&"就地改过".to_string()));
    assert_same(&after, &NodeVectors::embed_graph(&g, &e.inner).unwrap());
    e.seen.borrow_mut().clear();
    let same = NodeVectors::embed_graph_reusing(&g, &e, Some(&after)).unwrap();
    assert!(
        e.seen.borrow().is_empty(),
        "an unchanged graph embeds nothing"
    );
    assert_same(&same, &after);
}

#[test]
fn batch_release_keeps_incoming_links_pending_until_the_note_returns() {
    let (mut a, b, mut c) = (
        sem("a", "甲", &[]),
        sem("b", "乙", &[]),
        sem("c", "丙", &[]),
    );
    a.links.push(link(&a, &b));
    c.links.push(link(&c, &b));
    c.links.push(link(&c, &a));
    let mut g = MemoryGraph::new(C);
    for n in [a.clone(), b.clone(), c.clone()] {
        g.insert(n).unwrap();
    }
    let removed = g.remove_many(&[b.id, MemoryId::derive(C, "absent")], true);
    assert_eq!(removed.len(), 1);
    assert!(g.get(&b.id).is_none());
    assert_eq!(g.get(&a.id).unwrap().links.len(), 0);
    assert_eq!(g.get(&c.id).unwrap().links.len(), 1);
    assert_eq!(g.pending_links().count(), 2, "a→b and c→b wait as pending");
    g.insert(b.clone()).unwrap();
    assert_eq!(g.get(&a.id).unwrap().links.len(), 1);
    assert_eq!(g.get(&c.id).unwrap().links.len(), 2);
    assert_eq!(g.pending_links().count(), 0);

    // Without keep_incoming the links into removed notes go; their own links go with them.
    g.remove_many(&[b.id, a.id], false);
    assert_eq!(g.len(), 1);
    assert!(g.get(&c.id).unwrap().links.is_empty());
    assert_eq!(g.pending_links().count(), 0);
}

/// Rounds of what working memory does to its graph — notes released anywhere (or none), new
/// ones appended, released ones loaded again — each rebuilt from the previous round's vectors
/// given up: the rows are compacted in place, and the result equals embedding the whole graph
/// again (int8 rows and scales, row ranges, the tag vocabulary in first-use order,
/// fingerprints), field for field.
#[test]
fn vectors_given_up_are_compacted_in_place_and_equal_a_full_embedding() {
    let e = HashEmbedder::new(48).unwrap();
    let tags = ["甲", "乙", "丙", "丁", "戊"];
    let mut g = MemoryGraph::new(C);
    let mut next = 0usize;
    let add = |g: &mut MemoryGraph, next: &mut usize| {
        let i = *next;
        *next += 1;
        // Some notes without tags, some with one or two, shared across notes.
        let mine: Vec<&str> = (0..i % 3)
            .map(|k| tags[(i * 7 + k * 3) % tags.len()])
            .collect();
        g.insert(sem(&format!("n{i}"), &format!("内容{i}"), &mine))
            .unwrap();
    };
    for _ in 0..40 {
        add(&mut g, &mut next);
    }
    let mut vectors = NodeVectors::embed_graph(&g, &e).unwrap();
    let mut state = 0x9e37_79b9_u64;
    for round in 0..12 {
        let ids: Vec<MemoryId> = g.notes().map(|n| n.id).collect();
        let gone: Vec<MemoryId> = ids
            .iter()
            .copied()
            .filter(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.is_multiple_of(4)
            })
            .collect();
        // Every third round nothing is released (a recall's boundary expansion, the index
        // made current by the settle before it): only appends.
        let gone = if round % 3 == 2 { Vec::new() } else { gone };
        let removed = g.remove_many(&gone, true);
        for _ in 0..(round % 4 + 3) {
            add(&mut g, &mut next);
        }
        // Every other round, some released notes come back before the rebuild (working
        // memory's next message loading what the settle released): their old rows are
        // still in the vectors given up, after new notes.
        if round % 2 == 1 {
            for n in removed.into_iter().step_by(2) {
                g.insert(n).unwrap();
                add(&mut g, &mut next);
            }
        }
        let plan = VectorPlan::new(&g, &e, Some(&vectors)).unwrap();
        assert!(plan.in_place(), "round {round}: removals and appends only");
        vectors = plan.assemble_owned(Some(vectors)).unwrap();
        let full = NodeVectors::embed_graph(&g, &e).unwrap();
        assert_same(&vectors, &full);
        assert!(
            vectors == full,
            "round {round}: identical to a full embedding"
        );
    }
    // A note changed in the middle is not an in-place update; the copy is still exact.
    let first = g.notes().next().map(|n| n.id).unwrap();
    if let Some(MemoryType::Semantic(s)) = g.get_mut(&first).map(|n| &mut n.mem_type) {
        s.content = "改过".into();
    }
    let plan = VectorPlan::new(&g, &e, Some(&vectors)).unwrap();
    assert!(!plan.in_place());
    let copied = plan.assemble_owned(Some(vectors)).unwrap();
    assert!(copied == NodeVectors::embed_graph(&g, &e).unwrap());
    // Vectors other than those planned against are refused.
    let plan = VectorPlan::new(&g, &e, Some(&copied)).unwrap();
    let other = NodeVectors::embed_graph(&MemoryGraph::new(C), &e).unwrap();
    assert!(plan.assemble_owned(Some(other)).is_err());
}

/// Notes removed by one rebuild and given back to a later one get the rows they had: their
/// texts do not reach the embedder, unless a text changed meanwhile (the whole note is
/// embedded) or a tag left the vocabulary with them (that tag is); either way the vectors
/// equal embedding the whole graph again.
#[test]
fn notes_back_after_a_rebuild_get_their_rows_back_without_the_embedder() {
    let e = Counting {
        inner: HashEmbedder::new(48).unwrap(),
        seen: RefCell::new(Vec::new()),
    };
    let mut g = MemoryGraph::new(C);
    for i in 0..8 {
        // n7 alone carries 戊: the tag leaves the vocabulary with it.
        let tags: &[&str] = if i == 7 { &["戊"] } else { &["甲"] };
        g.insert(sem(&format!("n{i}"), &format!("内容{i}"), tags))
            .unwrap();
    }
    let vectors = NodeVectors::embed_graph(&g, &e).unwrap();
    let back: Vec<MemoryNote> = ["n1", "n3", "n5", "n7"]
        .iter()
        .filter_map(|n| g.get(&MemoryId::derive(C, n)).cloned())
        .collect();
    let ids: Vec<MemoryId> = back.iter().map(|n| n.id).collect();
    g.remove_many(&ids, true);
    let vectors = VectorPlan::new(&g, &e, Some(&vectors))
        .unwrap()
        .assemble_owned(Some(vectors))
        .unwrap();

    e.seen.borrow_mut().clear();
    for mut n in back {
        if n.readable_id == "n5" {
            if let MemoryType::Semantic(s) = &mut n.mem_type {
                s.content = "回来时改过".into();
            }
        }
        g.insert(n).unwrap();
    }
    let vectors = VectorPlan::new(&g, &e, Some(&vectors))
        .unwrap()
        .assemble_owned(Some(vectors))
        .unwrap();
    e.assert_asked(
        &["回来时改过", "内容5的描述", "甲", "戊"],
        "only the changed note's texts and the tag gone from the vocabulary are embedded",
    );
    let full = NodeVectors::embed_graph(&g, &e.inner).unwrap();
    assert_same(&vectors, &full);
    assert!(vectors == full);
}

/// Rows remembered by vectors of one dimension never come back into vectors of another: a
/// note removed under a 48-dimension embedder and given back after a switch to 32 dimensions
/// is embedded again, and the vectors equal a full embedding.
#[test]
fn remembered_rows_do_not_cross_a_change_of_dimension() {
    let wide = HashEmbedder::new(48).unwrap();
    let narrow = Counting {
        inner: HashEmbedder::new(32).unwrap(),
        seen: RefCell::new(Vec::new()),
    };
    let mut g = MemoryGraph::new(C);
    for i in 0..4 {
        g.insert(sem(&format!("n{i}"), &format!("内容{i}"), &["甲"]))
            .unwrap();
    }
    let vectors = NodeVectors::embed_graph(&g, &wide).unwrap();
    let n1 = g.get(&MemoryId::derive(C, "n1")).cloned().unwrap();
    g.remove_many(&[n1.id], true);
    let vectors = VectorPlan::new(&g, &wide, Some(&vectors))
        .unwrap()
        .assemble_owned(Some(vectors))
        .unwrap();
    let vectors = VectorPlan::new(&g, &narrow, Some(&vectors))
        .unwrap()
        .assemble_owned(Some(vectors))
        .unwrap();
    assert_eq!(vectors.dim(), 32);

    g.insert(n1).unwrap();
    narrow.seen.borrow_mut().clear();
    let vectors = VectorPlan::new(&g, &narrow, Some(&vectors))
        .unwrap()
        .assemble_owned(Some(vectors))
        .unwrap();
    narrow.assert_asked(
        &["内容1", "内容1的描述", "甲"],
        "the note given back is embedded at the new dimension",
    );
    assert!(vectors == NodeVectors::embed_graph(&g, &narrow.inner).unwrap());
}
