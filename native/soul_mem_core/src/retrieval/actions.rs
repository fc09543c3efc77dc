//! The action channel: which habits (procedures) a query evokes.
//!
//! Two kinds of evidence, added per habit:
//! - **Bayes over triggers** (the seed's `RetrBayesAction`): each recalled situation, scored
//!   and softmaxed, passes its weight along its trigger→action links (`prob × weight`,
//!   summed over situations); abstract situations count double.
//! - **Habit likeness**: the habit's own action text against the query's texts, calibrated
//!   over the character's habits. A message that describes the habit itself ("you always
//!   twirl that knife") evokes it even when none of its trigger situations is recalled.
//!
//! Semantic notes never trigger actions; the procedures linked to them are self-knowledge
//! (see the pipeline).

use super::config::{AssociateWithActionConfig, FusionConfig};
use super::embedding::{FieldKind, FieldProbe, QVec};
use super::fusion::calibrate_in_place;
use super::index::RetrievalIndex;
use super::query::{EmbeddedQuery, EmbeddedVariant};
use super::similarity::{by_score, top_k};
use crate::model::NodeKind;
use std::collections::{HashMap, HashSet};

/// An action candidate: `(procedure, score, source positions)`.
pub type ActionScore = (u32, f64, Vec<u32>);

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
fn source_weights(
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

/// Each habit's likeness to the query by position (NaN for other nodes): the best cosine of
/// its action text against the query's descriptive texts, calibrated over the character's
/// habits (per `fcfg`: z-scored and logistic by default, 0.5 = an average habit).
/// Complexity: O(habits × query texts × dim + nodes), one contiguous scan of the habit rows.
pub fn habit_likeness(idx: &RetrievalIndex, q: &EmbeddedQuery, fcfg: &FusionConfig) -> Vec<f32> {
    let mut texts: Vec<&QVec> = Vec::new();
    match &q.variant {
        EmbeddedVariant::Semantic(us) => {
            for u in us {
                texts.extend(u.concept.iter().chain(u.description.iter()));
            }
        }
        EmbeddedVariant::Situation(us) => {
            for u in us {
                texts.extend(
                    u.narrative
                        .iter()
                        .chain(u.events.iter())
                        .chain(u.environment.iter()),
                );
            }
        }
    }
    let n = idx.len();
    let mut out = vec![f32::NAN; n];
    let probes: Vec<FieldProbe<'_>> = texts
        .into_iter()
        .map(|q| FieldProbe { q, slot: 0 })
        .collect();
    idx.vectors()
        .scan_max_q8(FieldKind::ProcAction, &probes, (0, n), &mut out, 1);
    calibrate_in_place(&mut out, fcfg.method, fcfg.rrf_k, 0);
    out
}

/// The action channel of one query: Bayes over the situation `sources` (position, score in
/// [0, 1]) plus `habit_match` × each habit's calibrated likeness to `q`; best
/// `min(bayes.top_k, action_top_k)`. Complexity: O(Σ source out-degree + habits × query
/// texts × dim).
pub fn actions_for(
    idx: &RetrievalIndex,
    q: &EmbeddedQuery,
    sources: &[(u32, f64)],
    cfg: &AssociateWithActionConfig,
    fusion: &FusionConfig,
) -> Vec<ActionScore> {
    if cfg.habit_match <= 0.0 {
        return actions_from_sources(idx, sources, cfg);
    }
    let like = habit_likeness(idx, q, fusion);
    // Only a habit more like the query than the character's habits on average counts
    // (calibrated 0.5 = average): otherwise every habit would always be "evoked".
    let evidence = |a: u32| {
        let l = like.get(a as usize).copied().unwrap_or(f32::NAN);
        if l.is_finite() {
            cfg.habit_match * (2.0 * f64::from(l) - 1.0).max(0.0)
        } else {
            0.0
        }
    };
    let mut acc: Vec<ActionScore> =
        bayes_actions(idx, &source_weights(idx, sources, cfg), usize::MAX);
    for x in acc.iter_mut() {
        x.1 += evidence(x.0);
    }
    // Habits no trigger reached compete by likeness alone; only the best few can place.
    // Found by its own likeness, a habit is its own source (like a similarity hit).
    let reached: HashSet<u32> = acc.iter().map(|x| x.0).collect();
    let by_likeness = (0..like.len() as u32)
        .filter(|a| !reached.contains(a))
        .map(|a| (a, evidence(a)))
        .filter(|&(_, e)| e > 0.0);
    let keep = cfg.bayes.top_k.min(cfg.action_top_k);
    for (a, e) in top_k(by_likeness, keep, by_score) {
        acc.push((a, e, vec![a]));
    }
    let mut v = top(acc, cfg.bayes.top_k);
    v.truncate(cfg.action_top_k);
    v
}
