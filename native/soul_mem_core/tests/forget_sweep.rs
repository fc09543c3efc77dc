//! Forgetting: the LLM-free idle sweep (pruning decayed links, archive candidates).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap fixed literals

use chrono::{DateTime, Duration, Utc};
use soul_mem_core::forget::*;
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn situation(id: &str, created: DateTime<Utc>) -> MemoryNote {
    MemoryNote::new(
        "c",
        id,
        MemoryType::Situation(Situation::SpecificSituation(SpecificSituation {
            narrative: format!("{id} 的故事"),
            time_span: None,
            context: Context::default(),
        })),
        created,
    )
}

fn link(from: &MemoryNote, to: &MemoryNote, intensity: f64) -> MemoryLink {
    MemoryLink {
        id: LinkId::derive(from.id, to.id, 0),
        from: from.id,
        to: to.id,
        intensity,
        link_type: MemoryLinkType::Sem(SemMemLink {
            verb: "相关".into(),
            confidence: 1.0,
        }),
    }
}

#[test]
fn prunes_faded_links_keeps_fresh_ones_and_lists_isolated_forgotten_notes() {
    let now = t0() + Duration::hours(24 * 10);
    // old: 240 h old, R = 2^-10 ≈ 0.001 → md ≈ 0.999.
    let mut old = situation("old", t0());
    // fresh: created now.
    let mut fresh = situation("fresh", now);
    let other = situation("other", now);
    let lonely_old = situation("lonely", t0());
    let mut proc_ = MemoryNote::new(
        "c",
        "proc",
        MemoryType::Procedure(ProcMemory {
            action: Action {
                content: "挥手".into(),
                action_type: ActionType::Speak,
            },
        }),
        t0(),
    );
    old.links.push(link(&old, &other, 1.0)); // decays to ~0.001 → pruned
    fresh.links.push(link(&fresh, &other, 0.5)); // R = 1 → kept
    fresh.links.push(link(&fresh, &proc_, 0.01)); // below threshold even undecayed → pruned
    proc_.links.push(link(&proc_, &other, 0.2)); // procedures do not decay → kept
    let ids = (old.id, fresh.id, other.id, lonely_old.id, proc_.id);
    let mut g = MemoryGraph::new("c");
    for n in [old, fresh, other, lonely_old, proc_] {
        g.insert(n).unwrap();
    }
    assert_eq!(g.link_count(), 4);
    let cfg = ForgetConfig::default();
    let report = sweep(&mut g, now, &cfg);
    assert_eq!(report.notes, 5);
    assert_eq!(report.pruned.len(), 2);
    assert_eq!(g.link_count(), 2);
    assert!(report
        .pruned
        .iter()
        .any(|p| p.from == ids.0 && p.to == ids.2));
    assert!(report
        .pruned
        .iter()
        .any(|p| p.from == ids.1 && p.to == ids.4));
    let p = report.pruned.iter().find(|p| p.from == ids.0).unwrap();
    assert_eq!(p.intensity, 1.0);
    assert!((p.decayed_intensity - 2f64.powi(-10)).abs() < 1e-12);
    // Archive: forgettable, isolated after pruning, md >= 0.95; never deleted.
    assert_eq!(report.archive, vec![ids.0, ids.3]);
    assert_eq!(g.len(), 5);
    // Stored intensities are not rewritten.
    let kept = &g.get(&ids.4).unwrap().links[0];
    assert_eq!(kept.intensity, 0.2);
    // Actions: old + lonely Revised, fresh + other NoAction, procedure NoAction.
    assert_eq!(report.actions, [3, 0, 2]);
    assert!(report.mean_missing_degree > 0.45 && report.mean_missing_degree < 0.5);
    // Idempotent at the same time.
    let again = sweep(&mut g, now, &cfg);
    assert!(again.pruned.is_empty());
    assert_eq!(again.archive, report.archive);
}

#[test]
fn incoming_links_keep_a_forgotten_note_out_of_the_archive() {
    let now = t0() + Duration::hours(24 * 10);
    let old = situation("old", t0());
    let mut fresh = situation("fresh", now);
    fresh.links.push(link(&fresh, &old, 1.0));
    let old_id = old.id;
    let mut g = MemoryGraph::new("c");
    g.insert(old).unwrap();
    g.insert(fresh).unwrap();
    let report = sweep(&mut g, now, &ForgetConfig::default());
    assert!(report.pruned.is_empty());
    assert!(!report.archive.contains(&old_id));
}

#[test]
fn core_notes_are_never_archived_and_empty_graph_is_fine() {
    let now = t0() + Duration::hours(24 * 30);
    let mut me = situation("me", t0());
    me.core = true;
    let mut g = MemoryGraph::new("c");
    g.insert(me).unwrap();
    let r = sweep(&mut g, now, &ForgetConfig::default());
    assert!(r.archive.is_empty());
    assert_eq!(r.mean_missing_degree, 0.0);
    let mut empty = MemoryGraph::new("c");
    assert_eq!(
        sweep(&mut empty, now, &ForgetConfig::default()),
        SweepReport::default()
    );
}
