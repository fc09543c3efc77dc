//! The decayed PPR matrix cache on the production recall path: recall evaluates retention
//! per time bucket, so an unchanged graph reuses one matrix; a graph change, a forgetting
//! change or a new bucket rebuilds it; recording retrievals patches it in place, with the
//! same result as a rebuild.
#![allow(clippy::unwrap_used)]

mod retrieval_util;
use retrieval_util::*;

use chrono::{DateTime, Duration, Utc};
use soul_mem_core::engine::{decay_bucket_ms, EmbedderChoice, Engine};
use soul_mem_core::forget::{decay_factor, ForgetConfig};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::retrieval::*;

/// Specific situations s0..s5 in a ring with abstract a1, weak semantic chords, semantic
/// links from "self", and trigger links to procedures. Created at `t0`.
fn world() -> MemoryGraph {
    let mut notes = Vec::new();
    for i in 0..6 {
        let mut s = spec(&format!("s{i}"), &format!("在茶会{i}上喝红茶"), None);
        sit_link(&mut s, &format!("s{}", (i + 1) % 6));
        sit_link(&mut s, "a1");
        // A weak semantic link: its weight leans on intensity, so retention reshapes the row.
        sem_link(&mut s, &format!("s{}", (i + 3) % 6), 0.2);
        trig(&mut s, "p1", 0.3 + 0.1 * i as f64);
        notes.push(s);
    }
    let mut a1 = abs_loc("a1", "茶会");
    trig(&mut a1, "p2", 0.5);
    notes.push(a1);
    let mut me = sem("self", "我", "一个喜欢红茶的人", &["自身"]);
    sem_link(&mut me, "s0", 0.9);
    sem_link(&mut me, "s3", 0.6);
    notes.push(me);
    notes.push(proc_node("p1", "端上红茶"));
    notes.push(proc_node("p2", "邀请朋友"));
    graph(notes)
}

fn engine() -> Engine {
    let mut e = Engine::new(world());
    e.embed_all(
        EmbedderChoice::Hash(HashEmbedder::new(64).unwrap()),
        &|_, _| {},
    )
    .unwrap();
    e
}

fn queries() -> Vec<SubQuery> {
    serde_json::from_str(
        r#"[{"priority":1,"tag":[],"variant":{"Situation":[{"narrative":"茶会上喝红茶"}]}}]"#,
    )
    .unwrap()
}

fn builds(e: &Engine) -> u64 {
    e.index().unwrap().csr_builds()
}

/// Ten days after creation, on a bucket boundary (t0 is midnight).
fn later() -> DateTime<Utc> {
    t0() + Duration::days(10)
}

#[test]
fn unchanged_graph_reuses_the_decayed_matrix_within_a_bucket() {
    let mut e = engine();
    let cfg = PipelineConfig::default();
    let first = e.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert!(!first.memories.is_empty());
    let b = builds(&e);
    assert_eq!(b, 1);
    for s in [0, 1, 30, 59] {
        let again = e
            .recall_at(&queries(), &cfg, None, later() + Duration::seconds(s))
            .unwrap();
        // Retention is evaluated at the bucket start: the same answer, bit for bit.
        assert_eq!(again, first);
    }
    assert_eq!(builds(&e), b, "same graph, same bucket: no rebuild");
    // The next bucket re-evaluates retention and rebuilds once.
    e.recall_at(&queries(), &cfg, None, later() + Duration::seconds(61))
        .unwrap();
    assert_eq!(builds(&e), b + 1);
    e.recall_at(&queries(), &cfg, None, later() + Duration::seconds(90))
        .unwrap();
    assert_eq!(builds(&e), b + 1);
}

#[test]
fn graph_and_forgetting_changes_rebuild_the_matrix() {
    let mut e = engine();
    let cfg = PipelineConfig::default();
    e.recall_at(&queries(), &cfg, None, later()).unwrap();
    let b = builds(&e);

    // Forgetting parameters change every factor: rebuild.
    e.set_forget_config(ForgetConfig {
        base_half_life_hours: 48.0,
        ..Default::default()
    })
    .unwrap();
    e.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert_eq!(builds(&e), b + 1);
    e.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert_eq!(builds(&e), b + 1);

    // A graph change rebuilds the index, and with it the matrix, once.
    let v = e.index().unwrap().version();
    let mut extra = spec("s9", "在花园散步", None);
    sit_link(&mut extra, "s0");
    e.graph_mut().insert(extra).unwrap();
    e.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert_ne!(e.index().unwrap().version(), v);
    assert_eq!(builds(&e), 1);
    e.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert_eq!(builds(&e), 1);

    // Direct graph access may change recall counts without a version bump: rebuild.
    let id = mid("s1");
    e.graph_mut().record_retrieval(&id, later());
    e.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert_eq!(builds(&e), 2);
}

#[test]
fn recording_patches_the_matrix_with_the_result_of_a_rebuild() {
    let mut e = engine();
    let cfg = PipelineConfig::default();
    let before = e.recall_at(&queries(), &cfg, None, later()).unwrap();
    let b = builds(&e);
    let ids = [mid("s0"), mid("self"), mid("s3")];
    for _ in 0..3 {
        assert_eq!(e.record(&ids, later()), 3);
    }
    let patched = e.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert_eq!(
        builds(&e),
        b,
        "recording patches rows instead of rebuilding"
    );

    // A fresh engine with the same recall counts builds its matrix from scratch.
    let mut fresh = engine();
    for _ in 0..3 {
        fresh.record(&ids, later());
    }
    let rebuilt = fresh.recall_at(&queries(), &cfg, None, later()).unwrap();
    assert_eq!(patched, rebuilt);
    // More recalls slow forgetting, so the recorded notes' links carry more of the walk.
    assert_ne!(patched, before);
}

#[test]
fn patched_rows_are_bit_identical_to_a_rebuilt_matrix() {
    let g = world();
    let e = HashEmbedder::new(32).unwrap();
    let idx = RetrievalIndex::build_with_embedder(&g, &e).unwrap();
    let cfg = AssociationConfig::default();
    let n = g.len();
    let old = EdgeDecay::new((0..n).map(|i| 0.2 + 0.05 * i as f64).collect()).unwrap();
    idx.transition_decayed(&cfg, Some(&old)).unwrap();
    let changed = [0u32, 3, 6];
    let new = old.with_updates(&changed.map(|i| (i, 0.9))).unwrap();
    assert!(idx.update_decay(&old, &new, &changed).unwrap());
    let b = idx.csr_builds();
    let patched = idx.transition_decayed(&cfg, Some(&new)).unwrap();
    assert_eq!(idx.csr_builds(), b, "the patched matrix is served");
    let fresh = RetrievalIndex::build_with_embedder(&g, &e).unwrap();
    assert_eq!(
        *patched,
        *fresh.transition_decayed(&cfg, Some(&new)).unwrap()
    );

    // Not the cached factors: nothing patched, the next query rebuilds.
    let other = new.with_updates(&[(1, 0.5)]).unwrap();
    assert!(!idx.update_decay(&old, &other, &[1]).unwrap());
    idx.transition_decayed(&cfg, Some(&other)).unwrap();
    assert_eq!(idx.csr_builds(), b + 1);
    // Equal factors under another stamp are recognised without a rebuild.
    let copy = EdgeDecay::new(other.factors().to_vec()).unwrap();
    idx.transition_decayed(&cfg, Some(&copy)).unwrap();
    assert_eq!(idx.csr_builds(), b + 1);
    // Wrong lengths and out-of-range updates are errors.
    assert!(idx
        .update_decay(&copy, &EdgeDecay::new(vec![1.0]).unwrap(), &[0])
        .is_err());
    assert!(copy.with_updates(&[(n as u32, 0.5)]).is_err());
    assert!(copy.with_updates(&[(0, 1.5)]).is_err());
}

#[test]
fn a_row_whose_links_appear_or_vanish_is_rebuilt_not_patched() {
    // A Proc link into a situation has no constant part in its weight: it vanishes when its
    // source's retention reaches 0, which changes the row's shape.
    let mut s0 = spec("s0", "喝红茶", None);
    trig(&mut s0, "s1", 0.5);
    sit_link(&mut s0, "a1");
    let g = graph(vec![s0, spec("s1", "散步", None), abs_loc("a1", "茶会")]);
    let idx = RetrievalIndex::build_with_embedder(&g, &HashEmbedder::new(16).unwrap()).unwrap();
    let cfg = AssociationConfig::default();
    let old = EdgeDecay::new(vec![1.0; 3]).unwrap();
    assert_eq!(
        idx.transition_decayed(&cfg, Some(&old)).unwrap().degree(0),
        2
    );
    let new = old.with_updates(&[(0, 0.0)]).unwrap();
    assert!(!idx.update_decay(&old, &new, &[0]).unwrap());
    let b = idx.csr_builds();
    let csr = idx.transition_decayed(&cfg, Some(&new)).unwrap();
    assert_eq!(idx.csr_builds(), b + 1);
    assert_eq!(csr.degree(0), 1);
}

#[test]
fn decay_bucket_error_is_bounded() {
    let cfg = ForgetConfig::default();
    assert_eq!(decay_bucket_ms(&cfg), 60_000);
    let short = ForgetConfig {
        base_half_life_hours: 0.01,
        ..Default::default()
    };
    assert_eq!(decay_bucket_ms(&short), 25);
    // Within one bucket retention moves by less than ln 2 / 1440 (relative), for any age
    // and recall count.
    for (cfg, width) in [(cfg.clone(), 60_000), (short.clone(), 25)] {
        for days in [0, 1, 10, 100] {
            for count in [0, 3, 60] {
                let mut n = spec("s", "x", None);
                n.retrieval_count = count;
                let start = t0() + Duration::days(days) + Duration::hours(1);
                let end = start + Duration::milliseconds(width);
                let (a, b) = (decay_factor(&n, start, &cfg), decay_factor(&n, end, &cfg));
                assert!(a >= b);
                assert!(a - b <= a * std::f64::consts::LN_2 / 1440.0 + 1e-15);
            }
        }
    }
}
