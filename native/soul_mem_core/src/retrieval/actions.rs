//! The action channel: which habits (procedures) a query evokes.
//!
//! Two kinds of evidence, added per habit:
//! - **Bayes over triggers** (the seed's `RetrBayesAction`, in `bayes.rs`): each recalled
//!   situation, scored and softmaxed, passes its weight along its trigger→action links
//!   (`prob × weight`, summed over situations); abstract situations count double.
//! - **Habit likeness**: the habit's own action text against the query's texts, calibrated
//!   over the character's habits. A message that describes the habit itself ("you always
//!   twirl that knife") evokes it even when none of its trigger situations is recalled.
//!
//! Semantic notes never trigger actions; the procedures linked to them are self-knowledge
//! (see the pipeline).

// Bayes moved to its own file; its items stay reachable at their old `actions::` paths.
pub use super::bayes::{actions_from_sources, bayes_actions, softmax, ActionScore};

use super::bayes::{source_weights, top};
use super::config::{AssociateWithActionConfig, FusionConfig};
use super::field_texts::FieldKind;
use super::field_vectors::{FieldProbe, QVec};
use super::fusion::calibrate_in_place;
use super::index::RetrievalIndex;
use super::query::{EmbeddedQuery, EmbeddedVariant};
use super::top_k::{by_score, top_k};
use crate::model::NodeKind;
use std::collections::HashSet;

/// Each habit's likeness to the query, in the order of `habits` (positions of the
/// character's procedures): its cosine (`cosines`, by position: [`habit_cosines`]),
/// calibrated over the character's habits (per `fcfg`: z-scored and logistic by default,
/// 0.5 = an average habit; NaN for a habit with nothing compared). Complexity: O(habits).
pub fn habit_likeness(habits: &[u32], cosines: &[f32], fcfg: &FusionConfig) -> Vec<f32> {
    let mut out: Vec<f32> = habits
        .iter()
        .map(|&p| cosines.get(p as usize).copied().unwrap_or(f32::NAN))
        .collect();
    calibrate_in_place(&mut out, fcfg.method, fcfg.rrf_k, 0);
    out
}

/// The query vectors a habit's action text is compared with (see [`habit_cosines`]).
pub(super) fn habit_probe_vectors(q: &EmbeddedQuery) -> Vec<&QVec> {
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
    texts
}

/// Each habit's best cosine, by position (NaN for other nodes), of its action text against
/// the query's descriptive texts (a semantic query's concept and description, a situation
/// query's narrative, events and environment).
/// Complexity: O(habits × query texts × dim + nodes), one contiguous scan of the habit rows.
pub fn habit_cosines(idx: &RetrievalIndex, q: &EmbeddedQuery) -> Vec<f32> {
    let texts = habit_probe_vectors(q);
    let n = idx.len();
    let mut out = vec![f32::NAN; n];
    let probes: Vec<FieldProbe<'_>> = texts
        .into_iter()
        .map(|q| FieldProbe { q, slot: 0 })
        .collect();
    idx.vectors()
        .scan_max_q8(FieldKind::ProcAction, &probes, (0, n), &mut out, 1);
    out
}

/// The action channel of one query: Bayes over the situation `sources` (position, score in
/// [0, 1]) plus `habit_match` × each habit's calibrated likeness to the query (from its
/// [`habit_cosines`], `habits`); best `min(bayes.top_k, action_top_k)`.
/// Complexity: O(Σ source out-degree + nodes).
pub fn actions_for(
    idx: &RetrievalIndex,
    habits: &[f32],
    sources: &[(u32, f64)],
    cfg: &AssociateWithActionConfig,
    fusion: &FusionConfig,
) -> Vec<ActionScore> {
    if cfg.habit_match <= 0.0 {
        return actions_from_sources(idx, sources, cfg);
    }
    // Only the habits are visited (never every node: this runs on every query).
    let procs = idx.nodes_of_kind(NodeKind::Procedure);
    let like = habit_likeness(procs, habits, fusion);
    // Only a habit more like the query than the character's habits on average counts
    // (calibrated 0.5 = average): otherwise every habit would always be "evoked".
    let evidence = |l: f32| {
        if l.is_finite() {
            cfg.habit_match * (2.0 * f64::from(l) - 1.0).max(0.0)
        } else {
            0.0
        }
    };
    let mut acc: Vec<ActionScore> =
        bayes_actions(idx, &source_weights(idx, sources, cfg), usize::MAX);
    for x in acc.iter_mut() {
        // `procs` is ascending (kind order keeps positions sorted).
        if let Ok(k) = procs.binary_search(&x.0) {
            x.1 += evidence(like.get(k).copied().unwrap_or(f32::NAN));
        }
    }
    // Habits no trigger reached compete by likeness alone; only the best few can place.
    // Found by its own likeness, a habit is its own source (like a similarity hit).
    let reached: HashSet<u32> = acc.iter().map(|x| x.0).collect();
    let by_likeness = procs
        .iter()
        .zip(&like)
        .filter(|(a, _)| !reached.contains(a))
        .map(|(&a, &l)| (a, evidence(l)))
        .filter(|&(_, e)| e > 0.0);
    let keep = cfg.bayes.top_k.min(cfg.action_top_k);
    for (a, e) in top_k(by_likeness, keep, by_score) {
        acc.push((a, e, vec![a]));
    }
    let mut v = top(acc, cfg.bayes.top_k);
    v.truncate(cfg.action_top_k);
    v
}
