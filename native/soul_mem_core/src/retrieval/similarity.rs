//! Fused similarity: embedding channels (tag + structured variant) blended with a string
//! channel on identifiers, then floor and top-k.

use super::config::{BlendWeights, SimilarityConfig};
use super::embedding::{dot, FieldKind, NodeVectors, QVec};
use super::index::RetrievalIndex;
use super::query::{EmbeddedQuery, EmbeddedSemUnit, EmbeddedSitUnit, EmbeddedVariant};
use crate::model::NodeKind;
use rayon::prelude::*;

/// Precomputed per-query state: query-tag × distinct-tag similarities.
struct Prepared<'a> {
    q: &'a EmbeddedQuery,
    w: &'a BlendWeights,
    tag_sims: Vec<f32>,
    vocab: usize,
}

fn opt_max(a: Option<f32>, b: Option<f32>) -> Option<f32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Rows are scanned through the int8 copy (bandwidth bound; see [`FieldMatrix`]).
///
/// [`FieldMatrix`]: super::embedding::FieldMatrix
#[inline]
fn rows_max(v: &NodeVectors, q: &QVec, kind: FieldKind, i: usize) -> Option<f32> {
    v.max_dot_q8(q, kind, i)
}

fn sem_unit_score(
    v: &NodeVectors,
    kind: NodeKind,
    i: usize,
    u: &EmbeddedSemUnit,
    w: &BlendWeights,
) -> Option<f32> {
    match kind {
        NodeKind::Semantic => {
            let name = u
                .concept
                .as_ref()
                .map(|c| rows_max(v, c, FieldKind::SemName, i).unwrap_or(0.0));
            let desc = u
                .description
                .as_ref()
                .and_then(|d| rows_max(v, d, FieldKind::SemDescription, i));
            match (name, desc) {
                (Some(c), Some(d)) => {
                    let den = w.sem_concept + w.sem_description;
                    Some(if den > 0.0 {
                        (w.sem_concept * c + w.sem_description * d) / den
                    } else {
                        c
                    })
                }
                (Some(c), None) => Some(c),
                // Description only: compare it with the description and with the names.
                (None, d) => opt_max(
                    d,
                    u.description
                        .as_ref()
                        .and_then(|q| rows_max(v, q, FieldKind::SemName, i)),
                ),
            }
        }
        // A zero cross-variant weight skips the scan (saves ~half the dot products).
        NodeKind::SpecificSituation | NodeKind::AbstractSituation if w.cross_variant > 0.0 => {
            let c = u
                .concept
                .as_ref()
                .and_then(|q| rows_max(v, q, FieldKind::SitNarrative, i));
            let d = u
                .description
                .as_ref()
                .and_then(|q| rows_max(v, q, FieldKind::SitNarrative, i));
            opt_max(c, d).map(|s| w.cross_variant * s)
        }
        _ => None,
    }
}

fn sit_unit_score(
    idx: &RetrievalIndex,
    kind: NodeKind,
    i: usize,
    u: &EmbeddedSitUnit,
    w: &BlendWeights,
) -> Option<f32> {
    let v = idx.vectors();
    match kind {
        NodeKind::SpecificSituation | NodeKind::AbstractSituation => {
            let narr_w = if kind == NodeKind::AbstractSituation {
                w.sit_narrative * w.abstract_narrative_fallback
            } else {
                w.sit_narrative
            };
            let mut best = u
                .narrative
                .as_ref()
                .and_then(|q| rows_max(v, q, FieldKind::SitNarrative, i))
                .map(|s| narr_w * s);
            for l in &u.locations {
                best = opt_max(
                    best,
                    rows_max(v, l, FieldKind::SitLocation, i).map(|s| w.sit_location * s),
                );
            }
            for (name, role) in &u.participants {
                let n = name
                    .as_ref()
                    .and_then(|q| rows_max(v, q, FieldKind::SitParticipantName, i));
                let r = role
                    .as_ref()
                    .and_then(|q| rows_max(v, q, FieldKind::SitParticipantRole, i));
                let s = match (n, r) {
                    (Some(n), Some(r)) => {
                        let den = w.sit_participant_name + w.sit_participant_role;
                        Some(if den > 0.0 {
                            (w.sit_participant_name * n + w.sit_participant_role * r) / den
                        } else {
                            n
                        })
                    }
                    (n, r) => n.or(r),
                };
                best = opt_max(best, s);
            }
            if let Some(e) = &u.environment {
                best = opt_max(
                    best,
                    rows_max(v, e, FieldKind::SitEnvironment, i).map(|s| w.sit_environment * s),
                );
                best = opt_max(
                    best,
                    rows_max(v, e, FieldKind::SitEmotion, i).map(|s| w.sit_emotion * s),
                );
            }
            for e in &u.events {
                best = opt_max(
                    best,
                    rows_max(v, e, FieldKind::SitEvent, i).map(|s| w.sit_event * s),
                );
            }
            // A queried time range prefers specific situations inside it.
            if let (Some(s), Some(t), false) = (
                best,
                idx.node(i).and_then(|m| m.time),
                u.time_span.is_empty(),
            ) {
                best = Some(if u.time_span.iter().any(|r| r.contains(t)) {
                    if s > 0.0 {
                        s + w.time_match_boost * (1.0 - s)
                    } else {
                        s
                    }
                } else {
                    s * w.time_mismatch_factor
                });
            }
            best
        }
        NodeKind::Semantic if w.cross_variant > 0.0 => {
            let mut best: Option<f32> = None;
            if let Some(q) = &u.narrative {
                best = opt_max(
                    rows_max(v, q, FieldKind::SemName, i),
                    rows_max(v, q, FieldKind::SemDescription, i),
                );
            }
            // Places and people named in a situation are often semantic entities.
            for q in u
                .locations
                .iter()
                .chain(u.participants.iter().filter_map(|p| p.0.as_ref()))
            {
                best = opt_max(best, rows_max(v, q, FieldKind::SemName, i));
            }
            best.map(|s| w.cross_variant * s)
        }
        _ => None,
    }
}

impl Prepared<'_> {
    /// Embedding score of node `i` (tag + variant channels); `None` when nothing compares.
    fn emb(&self, idx: &RetrievalIndex, i: usize) -> Option<f32> {
        let kind = idx.kind(i)?;
        if kind == NodeKind::Procedure {
            // Actions are reached through Bayes, never as memories.
            return None;
        }
        let v = idx.vectors();
        let tag = if self.q.tags.is_empty() {
            None
        } else {
            let ids = v.node_tags(i);
            let mut sum = 0.0;
            for t in 0..self.q.tags.len() {
                let row = &self.tag_sims[t * self.vocab..(t + 1) * self.vocab];
                let best = ids.iter().map(|&j| row[j as usize]).fold(0.0f32, f32::max);
                sum += best;
            }
            Some(sum / self.q.tags.len() as f32)
        };
        let (has_units, variant) = match &self.q.variant {
            EmbeddedVariant::Semantic(us) => (
                !us.is_empty(),
                us.iter().fold(None, |b, u| {
                    opt_max(b, sem_unit_score(v, kind, i, u, self.w))
                }),
            ),
            EmbeddedVariant::Situation(us) => (
                !us.is_empty(),
                us.iter().fold(None, |b, u| {
                    opt_max(b, sit_unit_score(idx, kind, i, u, self.w))
                }),
            ),
        };
        // A field the query has but the node lacks counts as 0 (seed: missing → 0).
        let variant = if has_units {
            Some(variant.unwrap_or(0.0).max(0.0))
        } else {
            None
        };
        match (tag, variant) {
            (Some(t), Some(va)) => {
                let den = self.w.tag + self.w.variant;
                Some((self.w.tag * t + self.w.variant * va) / den)
            }
            (Some(t), None) => Some(t),
            (None, va) => va,
        }
    }

    /// String channel of node `i`: best identifier match between query and node.
    fn string(&self, idx: &RetrievalIndex, i: usize) -> f32 {
        let Some(meta) = idx.node(i) else { return 0.0 };
        let node_ids = idx.idents(i);
        let mut best = 0f32;
        match &self.q.variant {
            EmbeddedVariant::Semantic(us) if meta.kind == NodeKind::Semantic => {
                for q in us.iter().filter_map(|u| u.ident.as_ref()) {
                    for n in node_ids {
                        best = best.max(q.similarity(n));
                    }
                }
            }
            EmbeddedVariant::Situation(us)
                if matches!(meta.kind, NodeKind::AbstractSituation | NodeKind::Semantic) =>
            {
                for q in us.iter().flat_map(|u| u.idents.iter()) {
                    for n in node_ids {
                        best = best.max(q.similarity(n));
                    }
                }
            }
            _ => {}
        }
        best
    }
}

/// Scores every node for `q` and returns the top `max_results` `(position, score)` at or
/// above the floor, best first (ties by position). Non-finite scores are dropped; Procedure
/// nodes never score.
///
/// Per node: `emb` from the tag and variant channels, then
/// `score = max(emb, α·emb + (1−α)·str)` where `str` is the string channel (identifiers
/// only, so it can only raise a score). The string channel runs only for nodes with
/// identifiers whose best possible fused score could still reach the top-k.
///
/// Complexity: O(distinct tags · query tags · dim) + O(Σ rows compared · dim) + O(n); run in
/// parallel with rayon when the graph has at least `parallel_min_nodes` nodes.
pub fn similarity(
    idx: &RetrievalIndex,
    q: &EmbeddedQuery,
    cfg: &SimilarityConfig,
) -> Vec<(u32, f32)> {
    let n = idx.len();
    if n == 0 || cfg.max_results == 0 {
        return Vec::new();
    }
    let v = idx.vectors();
    let vocab = v.tag_vocab().len();
    let mut tag_sims = Vec::with_capacity(q.tags.len() * vocab);
    for t in &q.tags {
        for j in 0..vocab {
            tag_sims.push(dot(t, v.tag_vector(j)).max(0.0));
        }
    }
    let prep = Prepared {
        q,
        w: &cfg.blend,
        tag_sims,
        vocab,
    };
    let parallel = n >= cfg.parallel_min_nodes;
    let mut emb: Vec<f32> = if parallel {
        (0..n)
            .into_par_iter()
            .map(|i| prep.emb(idx, i).unwrap_or(f32::NAN))
            .collect()
    } else {
        (0..n)
            .map(|i| prep.emb(idx, i).unwrap_or(f32::NAN))
            .collect()
    };
    // The k-th best embedding score bounds the k-th best fused score from below.
    let k = cfg.max_results;
    let floor = cfg.similarity_threshold;
    let mut finite: Vec<f32> = emb.iter().copied().filter(|s| s.is_finite()).collect();
    let kth = if finite.len() >= k {
        let (_, kth, _) = finite.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        *kth
    } else {
        f32::NEG_INFINITY
    };
    let bar = floor.max(kth);
    let alpha = cfg.blend.string_blend_alpha;
    let candidates: Vec<u32> = idx
        .ident_nodes()
        .iter()
        .copied()
        .filter(|&i| {
            let e = emb[i as usize];
            e.is_finite() && alpha * e + (1.0 - alpha) >= bar
        })
        .collect();
    let strs: Vec<(u32, f32)> = if parallel {
        candidates
            .par_iter()
            .map(|&i| (i, prep.string(idx, i as usize)))
            .collect()
    } else {
        candidates
            .iter()
            .map(|&i| (i, prep.string(idx, i as usize)))
            .collect()
    };
    for (i, s) in strs {
        let e = &mut emb[i as usize];
        if s > 0.0 {
            *e = e.max(alpha * *e + (1.0 - alpha) * s);
        }
    }
    let mut out: Vec<(u32, f32)> = emb
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_finite() && **s >= floor)
        .map(|(i, s)| (i as u32, *s))
        .collect();
    let cmp = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, cmp);
        out.truncate(k);
    }
    out.sort_by(cmp);
    out
}
