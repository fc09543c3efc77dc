//! Fused similarity: embedding channels (tag + structured variant) blended with a string
//! channel on identifiers, then floor and top-k.

use super::config::{BlendWeights, SimilarityConfig};
use super::dot::dot;
use super::field_texts::FieldKind;
use super::field_vectors::{FieldProbe, QVec};
use super::index::RetrievalIndex;
use super::query::{EmbeddedQuery, EmbeddedVariant, Ident, TimeRange};
use super::top_k::{push_top, top_k, SMALL_K};
use crate::model::NodeKind;
use rayon::prelude::*;

/// How many of the best embedding scores the string channel must be able to reach to be
/// computed for a node (see [`similarity_channels`]).
pub(super) const STRING_POOL: usize = 64;

/// How far below the least value that could change a node the string channel still compares
/// identifiers exactly ([`Prepared::string`]): far above the rounding of the bound and of the
/// raise `α·e + (1 − α)·s` in f32, so a pair it skips could not have raised the node.
const STRING_MARGIN: f32 = 1e-4;

/// Nodes per parallel scan task (big enough to amortise the task, small enough to balance).
pub(super) const SCAN_CHUNK: usize = 4096;

/// Per-query state: the plan, the tag channel per node, and the per-node best
/// dot product of every probe (`maxes[i·probes + p]`, NaN = the node has no such rows).
pub(super) struct Prepared<'a> {
    q: &'a EmbeddedQuery,
    w: &'a BlendWeights,
    plan: Plan<'a>,
    /// Tag channel per node by kind-order rank (empty when the query has no tags).
    tags: Vec<f32>,
    maxes: Vec<f32>,
    /// The query vectors compared with the habits' action rows when the scan also makes the
    /// habit cosines ([`Prepared::with_habits`]; empty otherwise), in the columns after the
    /// plan's probes.
    habits: Vec<&'a QVec>,
}

fn opt_max(a: Option<f32>, b: Option<f32>) -> Option<f32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// One query vector compared with one field of every node.
struct Probe<'a> {
    q: &'a QVec,
    field: FieldKind,
}

/// Probe indices of one semantic unit (`None` = not needed for this query).
#[derive(Default)]
struct SemPlan {
    /// Concept vs. the names (present iff the unit has a concept).
    name: Option<usize>,
    /// Description vs. the description.
    desc: Option<usize>,
    /// Description vs. the names (only without a concept).
    desc_name: Option<usize>,
    /// Cross-variant: concept and description vs. situation narratives.
    concept_narr: Option<usize>,
    desc_narr: Option<usize>,
}

/// Probe indices of one situation unit.
#[derive(Default)]
struct SitPlan<'a> {
    narrative: Option<usize>,
    locations: Vec<usize>,
    participants: Vec<(Option<usize>, Option<usize>)>,
    environment: Option<usize>,
    emotion: Option<usize>,
    events: Vec<usize>,
    /// Cross-variant: narrative vs. semantic names and descriptions; places and people
    /// vs. semantic names.
    narr_name: Option<usize>,
    narr_desc: Option<usize>,
    sem_names: Vec<usize>,
    time_span: &'a [TimeRange],
}

enum UnitPlans<'a> {
    Sem(Vec<SemPlan>),
    Sit(Vec<SitPlan<'a>>),
}

/// Which (query vector, field) pairs the query needs, so each field's rows are scanned once
/// for all of them, and where the fusion finds each result.
struct Plan<'a> {
    probes: Vec<Probe<'a>>,
    units: UnitPlans<'a>,
}

impl<'a> Plan<'a> {
    /// Lists exactly the comparisons the fusion reads (a zero cross-variant weight skips the
    /// cross-variant scans, about half the dot products of a query).
    fn new(q: &'a EmbeddedQuery, w: &BlendWeights) -> Self {
        let mut probes: Vec<Probe<'a>> = Vec::new();
        let mut add = |q: &'a QVec, field: FieldKind| {
            probes.push(Probe { q, field });
            probes.len() - 1
        };
        let cross = w.cross_variant > 0.0;
        let units = match &q.variant {
            EmbeddedVariant::Semantic(us) => UnitPlans::Sem(
                us.iter()
                    .map(|u| SemPlan {
                        name: u.concept.as_ref().map(|c| add(c, FieldKind::SemName)),
                        desc: u
                            .description
                            .as_ref()
                            .map(|d| add(d, FieldKind::SemDescription)),
                        desc_name: match (&u.concept, &u.description) {
                            (None, Some(d)) => Some(add(d, FieldKind::SemName)),
                            _ => None,
                        },
                        concept_narr: u
                            .concept
                            .as_ref()
                            .filter(|_| cross)
                            .map(|c| add(c, FieldKind::SitNarrative)),
                        desc_narr: u
                            .description
                            .as_ref()
                            .filter(|_| cross)
                            .map(|d| add(d, FieldKind::SitNarrative)),
                    })
                    .collect(),
            ),
            EmbeddedVariant::Situation(us) => UnitPlans::Sit(
                us.iter()
                    .map(|u| {
                        let mut p = SitPlan {
                            narrative: u
                                .narrative
                                .as_ref()
                                .map(|n| add(n, FieldKind::SitNarrative)),
                            locations: u
                                .locations
                                .iter()
                                .map(|l| add(l, FieldKind::SitLocation))
                                .collect(),
                            participants: u
                                .participants
                                .iter()
                                .map(|(n, r)| {
                                    (
                                        n.as_ref().map(|n| add(n, FieldKind::SitParticipantName)),
                                        r.as_ref().map(|r| add(r, FieldKind::SitParticipantRole)),
                                    )
                                })
                                .collect(),
                            environment: u
                                .environment
                                .as_ref()
                                .map(|e| add(e, FieldKind::SitEnvironment)),
                            emotion: u
                                .environment
                                .as_ref()
                                .map(|e| add(e, FieldKind::SitEmotion)),
                            events: u
                                .events
                                .iter()
                                .map(|e| add(e, FieldKind::SitEvent))
                                .collect(),
                            time_span: &u.time_span,
                            ..Default::default()
                        };
                        if cross {
                            p.narr_name = u.narrative.as_ref().map(|n| add(n, FieldKind::SemName));
                            p.narr_desc = u
                                .narrative
                                .as_ref()
                                .map(|n| add(n, FieldKind::SemDescription));
                            p.sem_names = u
                                .locations
                                .iter()
                                .chain(u.participants.iter().filter_map(|p| p.0.as_ref()))
                                .map(|q| add(q, FieldKind::SemName))
                                .collect();
                        }
                        p
                    })
                    .collect(),
            ),
        };
        Plan { probes, units }
    }

    /// Appends this plan's probes of `field` to `batch`, in columns from `offset` on.
    fn field_probes<'p>(
        &'p self,
        field: FieldKind,
        offset: usize,
        batch: &mut Vec<FieldProbe<'p>>,
    ) {
        batch.extend(
            self.probes
                .iter()
                .enumerate()
                .filter(|(_, p)| p.field == field)
                .map(|(slot, p)| FieldProbe {
                    q: p.q,
                    slot: offset + slot,
                }),
        );
    }
}

/// Fills `out` (`(hi − lo) × stride`, NaN) for nodes `lo..hi` with the probes of every
/// query in `preps` (and its habit probes, if any), query `k`'s in the
/// [`Prepared::width`] columns from `offsets[k]` on: one pass per field over
/// its rows, each row compared with every probe of that field of every query while it is in
/// cache (several sub-queries of one recall read the matrix once).
pub(super) fn scan_queries(
    preps: &[Prepared<'_>],
    offsets: &[usize],
    idx: &RetrievalIndex,
    range: (usize, usize),
    out: &mut [f32],
    stride: usize,
) {
    let mut batch: Vec<FieldProbe<'_>> = Vec::with_capacity(stride);
    for field in FieldKind::ROW_KINDS {
        batch.clear();
        for (p, &offset) in preps.iter().zip(offsets) {
            p.plan.field_probes(field, offset, &mut batch);
            if field == FieldKind::ProcAction {
                let at = offset + p.probes();
                batch.extend(
                    p.habits
                        .iter()
                        .enumerate()
                        .map(|(j, &q)| FieldProbe { q, slot: at + j }),
                );
            }
        }
        if !batch.is_empty() {
            idx.vectors().scan_max_q8(field, &batch, range, out, stride);
        }
    }
}

/// `x / d`, skipping the division when `d` is 1 (exact either way). The default weights sum
/// to 1 and most queries have one tag, and a division per node is the longest-latency step
/// of the fusion.
#[inline]
fn div(x: f32, d: f32) -> f32 {
    if d == 1.0 {
        x
    } else {
        x / d
    }
}

/// The seed's blend of the tag and variant channels over the ones present: the weighted mean
/// when both are, else whichever is.
#[inline]
pub(super) fn blend(w: &BlendWeights, tag: Option<f32>, variant: Option<f32>) -> Option<f32> {
    match (tag, variant) {
        (Some(t), Some(va)) => Some(div(w.tag * t + w.variant * va, w.tag + w.variant)),
        (t, va) => va.or(t),
    }
}

/// The best dot product of probe `p` for the node whose probe row is `vals`; `None` when the
/// probe was not planned or the node has no rows of its field.
#[inline]
fn get(vals: &[f32], p: Option<usize>) -> Option<f32> {
    p.and_then(|p| vals.get(p).copied()).filter(|x| !x.is_nan())
}

fn sem_unit_score(kind: NodeKind, vals: &[f32], u: &SemPlan, w: &BlendWeights) -> Option<f32> {
    match kind {
        NodeKind::Semantic => {
            let name = u.name.map(|p| get(vals, Some(p)).unwrap_or(0.0));
            let desc = get(vals, u.desc);
            match (name, desc) {
                (Some(c), Some(d)) => {
                    let den = w.sem_concept + w.sem_description;
                    Some(if den > 0.0 {
                        div(w.sem_concept * c + w.sem_description * d, den)
                    } else {
                        c
                    })
                }
                (Some(c), None) => Some(c),
                // Description only: compare it with the description and with the names.
                (None, d) => opt_max(d, get(vals, u.desc_name)),
            }
        }
        NodeKind::SpecificSituation | NodeKind::AbstractSituation if w.cross_variant > 0.0 => {
            let c = get(vals, u.concept_narr);
            let d = get(vals, u.desc_narr);
            opt_max(c, d).map(|s| w.cross_variant * s)
        }
        _ => None,
    }
}

fn sit_unit_score(
    idx: &RetrievalIndex,
    kind: NodeKind,
    i: usize,
    vals: &[f32],
    u: &SitPlan<'_>,
    w: &BlendWeights,
) -> Option<f32> {
    match kind {
        NodeKind::SpecificSituation | NodeKind::AbstractSituation => {
            let narr_w = if kind == NodeKind::AbstractSituation {
                w.sit_narrative * w.abstract_narrative_fallback
            } else {
                w.sit_narrative
            };
            let mut best = get(vals, u.narrative).map(|s| narr_w * s);
            for &l in &u.locations {
                best = opt_max(best, get(vals, Some(l)).map(|s| w.sit_location * s));
            }
            for &(name, role) in &u.participants {
                let n = get(vals, name);
                let r = get(vals, role);
                let s = match (n, r) {
                    (Some(n), Some(r)) => {
                        let den = w.sit_participant_name + w.sit_participant_role;
                        Some(if den > 0.0 {
                            div(w.sit_participant_name * n + w.sit_participant_role * r, den)
                        } else {
                            n
                        })
                    }
                    (n, r) => n.or(r),
                };
                best = opt_max(best, s);
            }
            if u.environment.is_some() {
                best = opt_max(
                    best,
                    get(vals, u.environment).map(|s| w.sit_environment * s),
                );
                best = opt_max(best, get(vals, u.emotion).map(|s| w.sit_emotion * s));
            }
            for &e in &u.events {
                best = opt_max(best, get(vals, Some(e)).map(|s| w.sit_event * s));
            }
            // A queried time range prefers specific situations inside it. The node's time is
            // read only then: its metadata is a cache miss per node.
            if u.time_span.is_empty() {
                return best;
            }
            if let (Some(s), Some(t)) = (best, idx.node(i).and_then(|m| m.time)) {
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
            if u.narr_name.is_some() || u.narr_desc.is_some() {
                best = opt_max(get(vals, u.narr_name), get(vals, u.narr_desc));
            }
            // Places and people named in a situation are often semantic entities.
            for &p in &u.sem_names {
                best = opt_max(best, get(vals, Some(p)));
            }
            best.map(|s| w.cross_variant * s)
        }
        _ => None,
    }
}

impl Prepared<'_> {
    /// Embedding score of node `i` (tag + variant channels); `None` when nothing compares.
    fn emb(&self, idx: &RetrievalIndex, i: usize) -> Option<f32> {
        self.emb_of(idx, idx.kind(i)?, i, idx.kind_rank(i))
    }

    /// [`Self::emb`] for a node of known `kind` and kind-order `rank`.
    #[inline]
    fn emb_of(&self, idx: &RetrievalIndex, kind: NodeKind, i: usize, rank: usize) -> Option<f32> {
        let (tag, variant) = self.parts_of(idx, kind, i, rank)?;
        blend(self.w, tag, variant)
    }

    /// [`Self::parts_in`] with the node's row of the whole scan ([`prepare`]).
    #[inline]
    fn parts_of(
        &self,
        idx: &RetrievalIndex,
        kind: NodeKind,
        i: usize,
        rank: usize,
    ) -> Option<(Option<f32>, Option<f32>)> {
        let m = self.plan.probes.len();
        let vals = self.maxes.get(i * m..(i + 1) * m).unwrap_or(&[]);
        self.parts_in(idx, kind, i, rank, vals)
    }

    /// The tag and variant (dense) channels of node `i` (kind-order `rank`) apart, from its
    /// best dot product per probe `vals` (one row of [`Self::scan`]'s output); `None` for
    /// procedures. The tag channel is present only when both the query and the node have
    /// tags: a note without tags has nothing to compare, so it is left out of the blend
    /// rather than scored 0 (which would sink every untagged note under any tagged one).
    #[inline]
    pub(super) fn parts_in(
        &self,
        idx: &RetrievalIndex,
        kind: NodeKind,
        i: usize,
        rank: usize,
        vals: &[f32],
    ) -> Option<(Option<f32>, Option<f32>)> {
        if kind == NodeKind::Procedure {
            // Actions are reached through Bayes, never as memories.
            return None;
        }
        let tag = if self.q.tags.is_empty() || idx.vectors().node_tags(i).is_empty() {
            None
        } else {
            self.tags.get(rank).copied()
        };
        let (has_units, variant) = match &self.plan.units {
            UnitPlans::Sem(us) => (
                !us.is_empty(),
                us.iter().fold(None, |b, u| {
                    opt_max(b, sem_unit_score(kind, vals, u, self.w))
                }),
            ),
            UnitPlans::Sit(us) => (
                !us.is_empty(),
                us.iter().fold(None, |b, u| {
                    opt_max(b, sit_unit_score(idx, kind, i, vals, u, self.w))
                }),
            ),
        };
        // A field the query has but the node lacks counts as 0 (seed: missing → 0).
        let variant = if has_units {
            Some(variant.unwrap_or(0.0).max(0.0))
        } else {
            None
        };
        Some((tag, variant))
    }

    /// Tag channel of node `i`: present when both the query and the node have tags.
    pub(super) fn tag_of(&self, idx: &RetrievalIndex, i: usize) -> Option<f32> {
        if self.q.tags.is_empty() || idx.vectors().node_tags(i).is_empty() {
            return None;
        }
        self.tags.get(idx.kind_rank(i)).copied()
    }

    /// String channel of node `i`: best identifier match between query and node. Pairs whose
    /// [`Ident::similarity_bound`] is below `need − STRING_MARGIN` are not compared: the
    /// result is exact whenever it reaches `need − STRING_MARGIN`, and below that it is only
    /// known to be below (callers pass the least value that could change the node).
    pub(super) fn string(&self, idx: &RetrievalIndex, i: usize, need: f32) -> f32 {
        let Some(kind) = idx.kind(i) else { return 0.0 };
        let node_ids = idx.idents(i);
        let floor = need - STRING_MARGIN;
        let mut best = 0f32;
        let mut pair = |q: &Ident, n: &Ident| {
            if q.similarity_bound(n) >= floor.max(best) {
                best = best.max(q.similarity(n));
            }
        };
        match &self.q.variant {
            EmbeddedVariant::Semantic(us) if kind == NodeKind::Semantic => {
                for q in us.iter().filter_map(|u| u.ident.as_ref()) {
                    for n in node_ids {
                        pair(q, n);
                    }
                }
            }
            EmbeddedVariant::Situation(us)
                if matches!(kind, NodeKind::AbstractSituation | NodeKind::Semantic) =>
            {
                for q in us.iter().flat_map(|u| u.idents.iter()) {
                    for n in node_ids {
                        pair(q, n);
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
/// How it runs (single-threaded unless the graph has `parallel_min_nodes` nodes): the tag
/// channel scatters each distinct tag's similarity to the nodes carrying it; each field
/// matrix the query needs is streamed once, every row compared with all query vectors of
/// that field (the scan is memory-bandwidth bound: int8 rows, no per-node dispatch); then a
/// per-kind pass fuses the channels and keeps the top-k. Per-query buffers live in the
/// index and are reused, since fresh multi-megabyte buffers cost page faults.
///
/// Complexity: O(distinct tags · query tags · dim + tag references · query tags) +
/// O(Σ rows of the needed fields × their query vectors × dim) + O(n + candidates).
pub fn similarity(
    idx: &RetrievalIndex,
    q: &EmbeddedQuery,
    cfg: &SimilarityConfig,
) -> Vec<(u32, f32)> {
    if idx.is_empty() || cfg.max_results == 0 {
        return Vec::new();
    }
    idx.with_sim_scratch(|scratch| similarity_in(idx, q, cfg, scratch))
}

/// Reusable per-query buffers of [`similarity`] (kept by the index).
#[derive(Debug, Default)]
pub(crate) struct SimScratch {
    maxes: Vec<f32>,
    tags: Vec<f32>,
    emb: Vec<f32>,
    pub(super) tag_bests: TagBests,
}

/// Refills `v` with `n` copies of `x`, keeping its allocation.
pub(super) fn refill(v: &mut Vec<f32>, n: usize, x: f32) {
    v.clear();
    v.resize(n, x);
}

/// Each distinct query tag's best similarity per node (by kind-order rank) within one pass
/// over a set of queries: a recall's text query carries its keywords as tags and each
/// keyword query carries its own again, so most tag vectors come up twice. Keyed by the
/// vector's bits, so a repeated tag gets the very floats it got the first time. Kept in the
/// index's [`SimScratch`]: a pass [`Self::start`]s it and reuses the buffers of the last.
#[derive(Debug, Default)]
pub(super) struct TagBests {
    /// `(tag vector bits, best per node)`; the first `used` belong to this pass.
    entries: Vec<(Vec<u32>, Vec<f32>)>,
    used: usize,
}

impl TagBests {
    /// Begins a pass: no tag is known, the buffers stay allocated.
    pub(super) fn start(&mut self) {
        self.used = 0;
    }

    /// The best similarity of `t` among each node's tags (0 without one), computed once a
    /// pass. Complexity: O(distinct tags · dim + tag references) the first time, O(dim)
    /// after.
    fn of(&mut self, idx: &RetrievalIndex, t: &QVec) -> &[f32] {
        let known = self.entries[..self.used].iter().position(|(bits, _)| {
            bits.len() == t.len() && bits.iter().zip(t.iter()).all(|(b, x)| *b == x.to_bits())
        });
        let at = match known {
            Some(at) => at,
            None => {
                if self.used == self.entries.len() {
                    self.entries.push(Default::default());
                }
                let (bits, best) = &mut self.entries[self.used];
                bits.clear();
                bits.extend(t.iter().map(|x| x.to_bits()));
                refill(best, idx.len(), 0.0);
                let v = idx.vectors();
                for j in 0..v.tag_vocab().len() {
                    let sim = dot(t, v.tag_vector(j)).max(0.0);
                    // max(x, 0) = x for every x ≥ 0: a non-positive similarity changes nothing.
                    if sim > 0.0 {
                        for &r in idx.tag_ranks(j) {
                            if let Some(b) = best.get_mut(r as usize) {
                                *b = b.max(sim);
                            }
                        }
                    }
                }
                self.used += 1;
                self.used - 1
            }
        };
        &self.entries[at].1
    }
}

/// The tag channel of every node into `s.tags` (by kind-order rank): per query tag the best
/// similarity among the node's tags (0 without one), averaged over query tags. Each distinct
/// tag's similarity is scattered to the nodes that carry it, so there is no per-node loop
/// whose length varies; the max over non-negative values is order-independent, so this
/// equals the per-node fold.
fn tag_channel(idx: &RetrievalIndex, q: &EmbeddedQuery, s: &mut SimScratch, memo: &mut TagBests) {
    let n = idx.len();
    let nt = q.tags.len();
    let Some((first, rest)) = q.tags.split_first() else {
        refill(&mut s.tags, n, 0.0);
        return;
    };
    // The first tag's bests are the sum so far (most queries have one tag).
    s.tags.clear();
    s.tags.extend_from_slice(memo.of(idx, first));
    for t in rest {
        for (sum, best) in s.tags.iter_mut().zip(memo.of(idx, t)) {
            *sum += best;
        }
    }
    if nt > 1 {
        for x in &mut s.tags {
            *x /= nt as f32;
        }
    }
}

/// The tag channel and the plan of `q`, without the field scan (the shared first step of
/// [`similarity`] and [`super::dense_channels::similarity_channels`], which scans per chunk
/// with [`Prepared::scan`]); the buffers come from `s` and go back with
/// [`Prepared::release`]; `memo` holds the tags' similarities for the other queries of the
/// same pass.
pub(super) fn prepare_plan<'a>(
    idx: &RetrievalIndex,
    q: &'a EmbeddedQuery,
    cfg: &'a SimilarityConfig,
    s: &mut SimScratch,
    memo: &mut TagBests,
) -> Prepared<'a> {
    if q.tags.is_empty() {
        s.tags.clear();
    } else {
        tag_channel(idx, q, s, memo);
    }
    Prepared {
        q,
        w: &cfg.blend,
        plan: Plan::new(q, &cfg.blend),
        tags: std::mem::take(&mut s.tags),
        maxes: std::mem::take(&mut s.maxes),
        habits: Vec::new(),
    }
}

/// [`prepare_plan`] and the field scan of every node into [`Prepared::maxes`].
fn prepare<'a>(
    idx: &RetrievalIndex,
    q: &'a EmbeddedQuery,
    cfg: &'a SimilarityConfig,
    s: &mut SimScratch,
) -> Prepared<'a> {
    let n = idx.len();
    let mut memo = std::mem::take(&mut s.tag_bests);
    memo.start();
    let mut prep = prepare_plan(idx, q, cfg, s, &mut memo);
    s.tag_bests = memo;
    let m = prep.probes();
    let mut maxes = std::mem::take(&mut prep.maxes);
    refill(&mut maxes, n * m, f32::NAN);
    if m > 0 {
        if n >= cfg.parallel_min_nodes {
            maxes
                .par_chunks_mut(SCAN_CHUNK * m)
                .enumerate()
                .for_each(|(c, out)| {
                    let lo = c * SCAN_CHUNK;
                    prep.scan(idx, (lo, (lo + SCAN_CHUNK).min(n)), out)
                });
        } else {
            prep.scan(idx, (0, n), &mut maxes);
        }
    }
    prep.maxes = maxes;
    prep
}

impl Prepared<'_> {
    /// Hands the buffers back to `s` for the next query.
    pub(super) fn release(self, s: &mut SimScratch) {
        s.maxes = self.maxes;
        s.tags = self.tags;
    }

    /// How many (query vector, field) comparisons the query needs: the width of a node's
    /// row in [`Self::scan`]'s output.
    pub(super) fn probes(&self) -> usize {
        self.plan.probes.len()
    }

    /// The scan also compares the habits' action rows with the query
    /// ([`super::actions::habit_cosines`]), in [`Self::habit_probes`] more columns.
    pub(super) fn with_habits(mut self) -> Self {
        self.habits = super::actions::habit_probe_vectors(self.q);
        self
    }

    /// The habit columns after the probes (0 unless [`Self::with_habits`]).
    pub(super) fn habit_probes(&self) -> usize {
        self.habits.len()
    }

    /// The columns of one node's row in [`scan_queries`]: the probes and the habit probes.
    pub(super) fn width(&self) -> usize {
        self.probes() + self.habit_probes()
    }

    /// The best dot product of every probe for the nodes `lo..hi` into `out`
    /// (`(hi − lo) ×` [`Self::width`], filled with NaN by the caller; NaN stays where a node
    /// has no rows of the probe's field).
    pub(super) fn scan(&self, idx: &RetrievalIndex, range: (usize, usize), out: &mut [f32]) {
        scan_queries(
            std::slice::from_ref(self),
            &[0],
            idx,
            range,
            out,
            self.width(),
        );
    }

    /// The blend weights of the query's configuration.
    pub(super) fn weights(&self) -> &BlendWeights {
        self.w
    }
}

fn similarity_in(
    idx: &RetrievalIndex,
    q: &EmbeddedQuery,
    cfg: &SimilarityConfig,
    s: &mut SimScratch,
) -> Vec<(u32, f32)> {
    let n = idx.len();
    let parallel = n >= cfg.parallel_min_nodes;
    let prep = prepare(idx, q, cfg, s);
    let k = cfg.max_results;
    let floor = cfg.similarity_threshold;
    let cmp = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    // Embedding scores by rank in the kind order (see `RetrievalIndex::kind_rank`), so the
    // per-kind pass writes them sequentially.
    let emb = &mut s.emb;
    refill(emb, n, f32::NAN);
    let order = idx.kind_order();
    // The best k embedding scores (finite), tracked during the fusion pass when k is small.
    let mut best: Vec<(u32, f32)> = Vec::new();
    if parallel {
        emb.par_iter_mut().zip(order).for_each(|(e, &i)| {
            *e = prep.emb(idx, i as usize).unwrap_or(f32::NAN);
        });
    } else {
        let track = k <= SMALL_K;
        // One kind at a time: the fusion branches on the kind and on which fields a node
        // has, which is unpredictable in graph order (kinds are interleaved) and costs more
        // than the arithmetic. Procedures (the last group) never score.
        for (slot, kind) in [
            NodeKind::Semantic,
            NodeKind::SpecificSituation,
            NodeKind::AbstractSituation,
        ]
        .into_iter()
        .enumerate()
        {
            let (a, b) = (idx.kind_start(slot), idx.kind_start(slot + 1));
            let (Some(nodes), Some(out)) = (order.get(a..b), emb.get_mut(a..b)) else {
                continue;
            };
            for (r, (&i, e)) in (a..b).zip(nodes.iter().zip(out)) {
                let Some(score) = prep.emb_of(idx, kind, i as usize, r) else {
                    continue;
                };
                *e = score;
                if track && score.is_finite() {
                    push_top(&mut best, k, (i, score), cmp);
                }
            }
        }
        if !track {
            best.clear();
        }
    }
    if best.is_empty() {
        best = top_k(finite(emb, order), k, cmp);
    }
    // The k-th best embedding score bounds the k-th best fused score from below.
    let kth = match best.get(k - 1) {
        Some(&(_, s)) if best.len() == k => s,
        _ => f32::NEG_INFINITY,
    };
    let bar = floor.max(kth);
    let alpha = cfg.blend.string_blend_alpha;
    let score_of = |emb: &[f32], i: u32| {
        emb.get(idx.kind_rank(i as usize))
            .copied()
            .unwrap_or(f32::NAN)
    };
    let candidates: Vec<u32> = idx
        .ident_nodes()
        .iter()
        .copied()
        .filter(|&i| {
            let e = score_of(emb, i);
            e.is_finite() && alpha * e + (1.0 - alpha) >= bar
        })
        .collect();
    let strs: Vec<(u32, f32)> = if parallel {
        candidates
            .par_iter()
            .map(|&i| (i, prep.string(idx, i as usize, score_of(emb, i))))
            .collect()
    } else {
        candidates
            .iter()
            .map(|&i| (i, prep.string(idx, i as usize, score_of(emb, i))))
            .collect()
    };
    for &(i, st) in &strs {
        if let Some(e) = emb.get_mut(idx.kind_rank(i as usize)) {
            if st > 0.0 {
                *e = e.max(alpha * *e + (1.0 - alpha) * st);
            }
        }
    }
    // Only the best k embedding scores and the raised nodes can make the final top-k: the
    // former keep scores ≥ the k-th, so anything else (≤ the k-th, behind on ties) loses.
    let mut pool: Vec<u32> = best.iter().map(|b| b.0).chain(candidates).collect();
    pool.sort_unstable();
    pool.dedup();
    let out = top_k(
        pool.iter()
            .map(|&i| (i, score_of(emb, i)))
            .filter(|(_, s)| s.is_finite() && *s >= floor),
        k,
        cmp,
    );
    // Hand the buffers back for the next query.
    prep.release(s);
    out
}

/// `(position, score)` of the finite scores in `emb` (by rank; `order` maps rank → position).
fn finite<'a>(emb: &'a [f32], order: &'a [u32]) -> impl Iterator<Item = (u32, f32)> + 'a {
    emb.iter()
        .zip(order)
        .filter(|(s, _)| s.is_finite())
        .map(|(s, &i)| (i, *s))
}
