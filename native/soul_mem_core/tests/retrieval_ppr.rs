//! PPR: golden values on hand-computable graphs, forward push vs power iteration on hundreds
//! of random graphs, input validation, workspace reuse, and the seed's edge-weight rules.
#![allow(clippy::unwrap_used)]

use soul_mem_core::model::*;
use soul_mem_core::retrieval::ppr::dyn_weight;
use soul_mem_core::retrieval::{
    edge_weight, forward_push, naive_ppr, Csr, EdgeWeightParams, PprParams, PprWorkspace,
    TypePreference,
};
use soul_mem_core::rng::SplitMix64;

fn push(csr: &Csr, src: &[(u32, f64)], d: f64, eps: f64) -> Vec<f64> {
    let mut ws = PprWorkspace::new();
    let out = forward_push(
        csr,
        src,
        &PprParams {
            damping: d,
            epsilon: eps,
        },
        &mut ws,
    )
    .unwrap();
    let mut dense = vec![0.0; csr.len()];
    for (i, s) in out {
        dense[i as usize] = s;
    }
    dense
}

fn l1(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum()
}

#[test]
fn golden_two_nodes_with_dangling_return() {
    // A -> B, B dangling: B's residual returns to the source A.
    // π_A = (1-d) + d·π_B, π_B = d·π_A  ⇒  π_A = 1/(1+d), π_B = d/(1+d).
    let csr = Csr::from_edges(2, &[(0, 1, 1.0)]).unwrap();
    let d = 0.65;
    let want = [1.0 / (1.0 + d), d / (1.0 + d)];
    let got = push(&csr, &[(0, 1.0)], d, 1e-10);
    assert!(l1(&got, &want) < 1e-8, "{got:?}");
    let naive = naive_ppr(&csr, &[(0, 1.0)], d, 200).unwrap();
    assert!(l1(&naive, &want) < 1e-12, "{naive:?}");
}

#[test]
fn golden_weighted_star() {
    // S -> X (weight 3), S -> Y (weight 1); X, Y dangling.
    // π_S = 1/(1+d), π_X = d·(3/4)/(1+d), π_Y = d·(1/4)/(1+d).
    let csr = Csr::from_edges(3, &[(0, 1, 3.0), (0, 2, 1.0)]).unwrap();
    let d = 0.65;
    let want = [1.0 / (1.0 + d), d * 0.75 / (1.0 + d), d * 0.25 / (1.0 + d)];
    assert!(l1(&push(&csr, &[(0, 2.0)], d, 1e-10), &want) < 1e-8);
}

#[test]
fn golden_two_sources_split_by_weight() {
    // Two isolated sources with weights 3:1 keep exactly that split (each is dangling and
    // returns its residual to both sources in proportion, so the split is stationary).
    let csr = Csr::from_edges(2, &[]).unwrap();
    let got = push(&csr, &[(0, 3.0), (1, 1.0)], 0.65, 1e-10);
    assert!(l1(&got, &[0.75, 0.25]) < 1e-8, "{got:?}");
}

#[test]
fn zero_damping_returns_the_personalization() {
    let csr = Csr::from_edges(3, &[(0, 1, 1.0), (1, 2, 1.0)]).unwrap();
    let got = push(&csr, &[(0, 1.0), (2, 1.0)], 0.0, 1e-9);
    assert!(l1(&got, &[0.5, 0.0, 0.5]) < 1e-12);
}

#[test]
fn forward_push_matches_power_iteration_on_random_graphs() {
    let mut rng = SplitMix64::new(0x5EED);
    let mut worst = 0.0f64;
    for case in 0..400 {
        let n = 1 + rng.below(60);
        let m = rng.below(n * 4 + 1);
        let mut edges = Vec::new();
        for _ in 0..m {
            let u = rng.below(n) as u32;
            let v = rng.below(n) as u32;
            // Some zero weights: they must behave as absent edges.
            let w = if rng.below(10) == 0 {
                0.0
            } else {
                rng.next_f64() * 2.0
            };
            edges.push((u, v, w));
        }
        let csr = Csr::from_edges(n, &edges).unwrap();
        let k = 1 + rng.below(4);
        let src: Vec<(u32, f64)> = (0..k)
            .map(|_| (rng.below(n) as u32, 0.1 + rng.next_f64()))
            .collect();
        let d = [0.0, 0.3, 0.65, 0.85, 0.95][case % 5];
        let eps = if case % 2 == 0 { 1e-5 } else { 1e-8 };
        let got = push(&csr, &src, d, eps);
        let exact = naive_ppr(&csr, &src, d, 2000).unwrap();
        // ‖r‖₁ ≤ ε·Σ max(deg,1) ≤ ε·(m+n); normalising at most doubles it.
        let bound = 2.0 * eps * (csr.edge_count() + n) as f64 + 1e-9;
        let err = l1(&got, &exact);
        worst = worst.max(err / bound);
        assert!(err <= bound, "case {case}: L1 {err} > bound {bound}");
        assert!(got.iter().all(|&x| x >= 0.0));
        let sum: f64 = got.iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "case {case}: sum {sum}");
    }
    assert!(worst <= 1.0);
}

#[test]
fn push_count_respects_the_andersen_chung_lang_bound() {
    let mut rng = SplitMix64::new(7);
    let n = 500;
    let edges: Vec<(u32, u32, f64)> = (0..3000)
        .map(|_| (rng.below(n) as u32, rng.below(n) as u32, 1.0))
        .collect();
    let csr = Csr::from_edges(n, &edges).unwrap();
    let p = PprParams::default();
    let mut ws = PprWorkspace::new();
    forward_push(&csr, &[(0, 1.0), (1, 1.0)], &p, &mut ws).unwrap();
    let bound = 1.0 / ((1.0 - p.damping) * p.epsilon);
    assert!(ws.last_pushes as f64 <= bound, "{} pushes", ws.last_pushes);
    assert!(ws.last_pushes > 0);
}

#[test]
fn invalid_inputs_are_errors_not_panics() {
    let csr = Csr::from_edges(2, &[(0, 1, 1.0)]).unwrap();
    let mut ws = PprWorkspace::new();
    for d in [1.0, 1.5, -0.1, f64::NAN, f64::INFINITY] {
        let p = PprParams {
            damping: d,
            epsilon: 1e-5,
        };
        assert!(
            forward_push(&csr, &[(0, 1.0)], &p, &mut ws).is_err(),
            "damping {d}"
        );
        assert!(naive_ppr(&csr, &[(0, 1.0)], d, 10).is_err());
    }
    for eps in [0.0, -1.0, f64::NAN] {
        let p = PprParams {
            damping: 0.5,
            epsilon: eps,
        };
        assert!(forward_push(&csr, &[(0, 1.0)], &p, &mut ws).is_err());
    }
    let p = PprParams::default();
    assert!(forward_push(&csr, &[(5, 1.0)], &p, &mut ws).is_err());
    assert!(forward_push(&csr, &[(0, -1.0)], &p, &mut ws).is_err());
    assert!(forward_push(&csr, &[(0, f64::NAN)], &p, &mut ws).is_err());
    assert!(forward_push(&csr, &[], &p, &mut ws).unwrap().is_empty());
    assert!(forward_push(&csr, &[(0, 0.0), (1, 0.0)], &p, &mut ws)
        .unwrap()
        .is_empty());
    assert!(Csr::from_edges(2, &[(0, 2, 1.0)]).is_err());
    assert!(Csr::from_edges(2, &[(0, 1, -1.0)]).is_err());
    assert!(Csr::from_edges(2, &[(0, 1, f64::NAN)]).is_err());
    // An empty graph is fine.
    let empty = Csr::from_edges(0, &[]).unwrap();
    assert!(forward_push(&empty, &[], &p, &mut ws).unwrap().is_empty());
}

#[test]
fn workspace_reuse_gives_identical_results() {
    let mut rng = SplitMix64::new(99);
    let n = 200usize;
    let edges: Vec<(u32, u32, f64)> = (0..800)
        .map(|_| (rng.below(n) as u32, rng.below(n) as u32, rng.next_f64()))
        .collect();
    let csr = Csr::from_edges(n, &edges).unwrap();
    let p = PprParams::default();
    let mut ws = PprWorkspace::new();
    let a1 = forward_push(&csr, &[(3, 1.0)], &p, &mut ws).unwrap();
    let b = forward_push(&csr, &[(7, 1.0), (9, 2.0)], &p, &mut ws).unwrap();
    let a2 = forward_push(&csr, &[(3, 1.0)], &p, &mut ws).unwrap();
    assert_eq!(a1, a2);
    assert_ne!(a1, b);
    // Switching to a graph of another size re-sizes the workspace.
    let small = Csr::from_edges(3, &[(0, 1, 1.0)]).unwrap();
    assert_eq!(
        forward_push(&small, &[(0, 1.0)], &p, &mut ws)
            .unwrap()
            .len(),
        2
    );
    let a3 = forward_push(&csr, &[(3, 1.0)], &p, &mut ws).unwrap();
    assert_eq!(a1, a3);
}

#[test]
fn output_is_sorted_descending() {
    let csr = Csr::from_edges(4, &[(0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0), (3, 0, 1.0)]).unwrap();
    let mut ws = PprWorkspace::new();
    let out = forward_push(&csr, &[(0, 1.0)], &PprParams::default(), &mut ws).unwrap();
    assert_eq!(
        out.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(out.windows(2).all(|w| w[0].1 >= w[1].1));
}

fn link(t: MemoryLinkType, intensity: f64) -> MemoryLink {
    let a = MemoryId::derive("c", "a");
    let b = MemoryId::derive("c", "b");
    MemoryLink {
        id: LinkId::derive(a, b, 0),
        from: a,
        to: b,
        intensity,
        link_type: t,
    }
}

#[test]
fn dynamic_edge_weight_follows_the_seed_formula() {
    let p = EdgeWeightParams::default(); // i = 1.0, c = 0.8, Situation preference [0.5, 1.0]
    assert_eq!(TypePreference::Situation.values(), [0.5, 1.0]);
    assert_eq!(TypePreference::Semantic.values(), [1.0, 0.5]);
    let sem = link(
        MemoryLinkType::Sem(SemMemLink {
            verb: "v".into(),
            confidence: 0.5,
        }),
        1.0,
    );
    // (1·1 + 0.5·0.8 + 0.5) / (1 + 0.8 + 0.5)
    let w = edge_weight(&sem, NodeKind::Semantic, &p);
    assert!((w - 1.9 / 2.3).abs() < 1e-12, "{w}");
    let sit = link(
        MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {}),
        0.5,
    );
    // (0.5·1 + 0.8·0.8 + 1.0) / (1 + 0.8 + 1.0)
    let w = edge_weight(&sit, NodeKind::AbstractSituation, &p);
    assert!((w - 2.14 / 2.8).abs() < 1e-12, "{w}");
    // Semantic preference swaps the type boosts.
    let ps = EdgeWeightParams {
        preference: TypePreference::Semantic,
        ..p
    };
    let w = edge_weight(&sem, NodeKind::Semantic, &ps);
    assert!((w - 2.4 / 2.8).abs() < 1e-12, "{w}");
    // Anything into a Procedure weighs 0.
    assert_eq!(edge_weight(&sem, NodeKind::Procedure, &p), 0.0);
    let proc_link = link(
        MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob: 0.9 }),
        1.0,
    );
    assert_eq!(edge_weight(&proc_link, NodeKind::Procedure, &p), 0.0);
    // Proc links elsewhere: (intensity·i + 0·c + 0) / (i + c + 0).
    assert!((edge_weight(&proc_link, NodeKind::Semantic, &p) - 1.0 / 1.8).abs() < 1e-12);
    // Zero denominator → 0, not NaN.
    assert_eq!(dyn_weight(1.0, 0.0, 0.0, 0.0, 0.0), 0.0);
    let zero = EdgeWeightParams {
        intensity_factor: 0.0,
        confidence_factor: 0.0,
        ..p
    };
    assert_eq!(edge_weight(&proc_link, NodeKind::Semantic, &zero), 0.0);
}
