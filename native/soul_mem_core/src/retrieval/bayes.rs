//! Bayes over triggers (the seed's `RetrBayesAction`): the situations a query recalls, scored
//! and softmaxed, pass their weight along their trigger→action links into habits
//! (procedures). [`situation_sources`] picks those situations from what similarity and
//! association found; [`actions_from_sources`] weighs them and runs [`bayes_actions`].

use super::config::AssociateWithActionConfig;
use super::index::RetrievalIndex;
use crate::model::NodeKind;
use std::collections::HashMap;

/// An action candidate: `(procedure, score, source positions)`.
pub type ActionScore = (u32, f64, Vec<u32>);

/// The situation sources that feed Bayes: every situation among `found` (similarity seeds,
/// then association results, or any scored lists chained) at its best score, in order of
/// first appearance; other kinds and scores that are not finite and positive are dropped.
/// The pipeline's [`associate_with_action`](super::associate_with_action) and the
/// evaluation's experimental action channel share it, so both merge sources alike.
///
/// Complexity: O(found × sources) — a linear scan per entry, sources being at most the
/// seeds plus the walk's results.
pub fn situation_sources(
    idx: &RetrievalIndex,
    found: impl IntoIterator<Item = (u32, f64)>,
) -> Vec<(u32, f64)> {
    let mut merged: Vec<(u32, f64)> = Vec::new();
    for (i, s) in found {
        let is_sit = matches!(idx.node(i as usize), Some(m) if m.kind.is_situation());
        if !is_sit || !s.is_finite() || s <= 0.0 {
            continue;
        }
        match merged.iter_mut().find(|(j, _)| *j == i) {
            Some(e) => e.1 = e.1.max(s),
            None => merged.push((i, s)),
        }
    }
    merged
}

/// Bayes actions (seed `RetrBayesAction`): for each source, its trigger→action links into
/// Procedure nodes; `score += prob × source weight`, summed over sources; best `top_k`.
/// Semantic sources never trigger actions. Complexity: O(Σ source out-degree + candidates log).
pub fn bayes_actions(
    idx: &RetrievalIndex,
    sources: &[(u32, f64)],
    top_k: usize,
) -> Vec<ActionScore> {
    let mut acc: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
    for &(s, w) in sources {
        let usable = matches!(idx.node(s as usize), Some(m) if m.kind != NodeKind::Semantic);
        if !usable || !w.is_finite() || w <= 0.0 {
            continue;
        }
        for &(a, prob) in idx.action_edges(s as usize) {
            let e = acc.entry(a).or_default();
            e.0 += prob * w;
            if !e.1.contains(&s) {
                e.1.push(s);
            }
        }
    }
    top(
        acc.into_iter()
            .map(|(a, (sc, seeds))| (a, sc, seeds))
            .collect(),
        top_k,
    )
}

pub(crate) fn top(mut v: Vec<ActionScore>, k: usize) -> Vec<ActionScore> {
    v.retain(|x| x.1.is_finite() && x.1 > 0.0);
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

/// Numerically stable softmax (max subtracted first). Empty in, empty out.
pub fn softmax(xs: &[f64]) -> Vec<f64> {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return vec![0.0; xs.len()];
    }
    let e: Vec<f64> = xs.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// The action channel from situation sources `(position, score in [0, 1])`: abstract
/// sources × `abstract_source_priority`, softmax at `source_temperature`, then Bayes over
/// their trigger→action links (keeping `bayes.top_k`, returning `action_top_k`).
pub fn actions_from_sources(
    idx: &RetrievalIndex,
    sources: &[(u32, f64)],
    cfg: &AssociateWithActionConfig,
) -> Vec<ActionScore> {
    let mut action = bayes_actions(idx, &source_weights(idx, sources, cfg), cfg.bayes.top_k);
    action.truncate(cfg.action_top_k);
    action
}

/// Softmax weights of situation sources at `source_temperature`, abstract ones ×
/// `abstract_source_priority` first.
pub(super) fn source_weights(
    idx: &RetrievalIndex,
    sources: &[(u32, f64)],
    cfg: &AssociateWithActionConfig,
) -> Vec<(u32, f64)> {
    let scaled: Vec<f64> = sources
        .iter()
        .map(|&(i, s)| {
            let s = match idx.kind(i as usize) {
                Some(NodeKind::AbstractSituation) => s * cfg.abstract_source_priority,
                _ => s,
            };
            s / cfg.source_temperature
        })
        .collect();
    let weights = softmax(&scaled);
    sources.iter().map(|s| s.0).zip(weights).collect()
}
