//! The embedding side of one query for every node, channel by channel ([`DenseChannels`]):
//! what the calibrated fusion (`fusion.rs`) standardises and fuses with the lexical channel.
//!
//! Made chunk by chunk of nodes: the field scan of a chunk (`similarity.rs`) is split into
//! the tag, variant and raw channels while its rows are still in cache, one kind at a time
//! (the split branches on the kind), and each channel's statistics are counted as its values
//! are written. The fusion then needs no pass over every node: it fits each channel from
//! its statistics and maps only the nodes that can be recalled.

use super::config::{BlendWeights, SimilarityConfig};
use super::fusion::ChannelStats;
use super::index::RetrievalIndex;
use super::query::EmbeddedQuery;
use super::similarity::{
    blend, prepare_plan, refill, scan_queries, Prepared, SCAN_CHUNK, STRING_POOL,
};
use crate::model::NodeKind;
use rayon::prelude::*;

/// The kinds recalled as memories, by kind-order slot (procedures, slot 3, never are).
const MEMORY_KINDS: [NodeKind; 3] = [
    NodeKind::Semantic,
    NodeKind::SpecificSituation,
    NodeKind::AbstractSituation,
];

/// The embedding-side channels of one query for every node, by position (NaN: the channel
/// has nothing to compare for that node; procedures are NaN everywhere), with what the
/// fusion needs to know of them without reading every node again: each channel's
/// statistics, how many nodes have a raw score, and which reach the similarity floor. The
/// values can only be read: the statistics are kept true as they are written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DenseChannels {
    pub(crate) dense: Vec<f32>,
    pub(crate) tag: Vec<f32>,
    pub(crate) raw: Vec<f32>,
    pub(crate) habit: Option<u32>,
    /// Each habit's cosine with the query, by position (NaN elsewhere); empty when not made.
    pub(crate) habits: Vec<f32>,
    pub(crate) dense_stats: ChannelStats,
    pub(crate) tag_stats: ChannelStats,
    /// Nodes with a finite raw score.
    pub(crate) scoreable: usize,
    /// Nodes whose raw score reaches `floor`, ascending.
    pub(crate) above: Vec<u32>,
    floor: f32,
}

/// Which channel of [`DenseChannels`] a raise writes.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Dense,
    Tag,
    Raw,
}

impl DenseChannels {
    /// Channels given whole (equal lengths; NaN = absent), with their statistics counted and
    /// the nodes at or above `floor` listed. Complexity: O(n).
    pub fn new(
        dense: Vec<f32>,
        tag: Vec<f32>,
        raw: Vec<f32>,
        habit: Option<u32>,
        floor: f32,
    ) -> Self {
        let above = (0..raw.len() as u32)
            .filter(|&i| raw.get(i as usize).is_some_and(|r| *r >= floor))
            .collect();
        DenseChannels {
            dense_stats: ChannelStats::of(&dense, 0),
            tag_stats: ChannelStats::of(&tag, 0),
            scoreable: raw.iter().filter(|r| r.is_finite()).count(),
            above,
            floor,
            dense,
            tag,
            raw,
            habit,
            habits: Vec::new(),
        }
    }

    /// `n` nodes with no channel yet.
    fn empty(n: usize, floor: f32) -> Self {
        DenseChannels {
            dense: vec![f32::NAN; n],
            tag: vec![f32::NAN; n],
            raw: vec![f32::NAN; n],
            floor,
            ..Default::default()
        }
    }

    /// Variant (per-field e5) channel, raised by the identifier string channel.
    pub fn dense(&self) -> &[f32] {
        &self.dense
    }

    /// Tag channel: present when the query and the node both have tags.
    pub fn tag(&self) -> &[f32] {
        &self.tag
    }

    /// The seed's fused cosine (tag and variant blended over the channels present, then the
    /// string blend): the scale of the model's similarity floor.
    pub fn raw(&self) -> &[f32] {
        &self.raw
    }

    /// Each habit's cosine with the query by position, as
    /// [`super::actions::habit_cosines`] makes it (NaN for other nodes); empty when the
    /// channels were made without habits.
    pub fn habit_cosines(&self) -> &[f32] {
        &self.habits
    }

    /// The habit (procedure position) the query describes: set when the query is more like
    /// one of the character's habits than like any memory, so the self answers for it.
    pub fn habit(&self) -> Option<u32> {
        self.habit
    }

    /// The value of `slot` at node `i` (NaN when absent or out of range).
    fn get(&self, slot: Slot, i: usize) -> f32 {
        let v = match slot {
            Slot::Dense => &self.dense,
            Slot::Tag => &self.tag,
            Slot::Raw => &self.raw,
        };
        v.get(i).copied().unwrap_or(f32::NAN)
    }

    /// Raises `slot` of node `i` to `v` when it is absent or lower (values never fall once
    /// written), keeping the statistics, the count of raw scores and the floor list true.
    fn raise(&mut self, slot: Slot, i: usize, v: f32) {
        let (vals, stats) = match slot {
            Slot::Dense => (&mut self.dense, Some(&mut self.dense_stats)),
            Slot::Tag => (&mut self.tag, Some(&mut self.tag_stats)),
            Slot::Raw => (&mut self.raw, None),
        };
        let Some(x) = vals.get_mut(i) else { return };
        let old = *x;
        if (old.is_finite() && old >= v) || !v.is_finite() {
            return;
        }
        *x = v;
        if let Some(stats) = stats {
            stats.raise(old, v);
            return;
        }
        self.scoreable += usize::from(!old.is_finite());
        // `old` may be NaN (no raw score yet): it was below the floor unless it reached it.
        let was_above = old.is_finite() && old >= self.floor;
        if v >= self.floor && !was_above {
            let at = self.above.partition_point(|&a| (a as usize) < i);
            self.above.insert(at, i as u32);
        }
    }
}

/// What the split of one chunk of nodes found (merged over chunks in order).
#[derive(Debug, Default)]
struct Part {
    dense: ChannelStats,
    tag: ChannelStats,
    scoreable: usize,
    above: Vec<u32>,
    /// The best raw score.
    best_raw: f32,
    /// At least the best [`STRING_POOL`] variant scores and their nodes, in no order:
    /// [`Part::keep_dense`].
    best_dense: Vec<(f32, u32)>,
    /// A variant score that [`STRING_POOL`] kept ones reach (none: −∞); lower ones are
    /// dropped on arrival.
    dense_bar: f32,
}

/// Best score first (the node only identifies the entry).
fn by_value(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0)
}

impl Part {
    fn new() -> Self {
        Part {
            best_raw: f32::NEG_INFINITY,
            dense_bar: f32::NEG_INFINITY,
            ..Default::default()
        }
    }

    /// Keeps `x` among the best variant scores unless [`STRING_POOL`] kept ones already
    /// reach it. The pool is cut back to the best [`STRING_POOL`] (an O(pool) selection)
    /// when it doubles: O(1) amortised per kept score and one comparison per dropped one,
    /// where a sorted insert searches and shifts (most of a chunk's first scores are kept).
    #[inline]
    fn keep_dense(&mut self, x: (f32, u32)) {
        if x.0.total_cmp(&self.dense_bar).is_le() {
            return;
        }
        self.best_dense.push(x);
        if self.best_dense.len() >= 2 * STRING_POOL {
            self.cut_dense();
        }
    }

    /// Cuts the pool back to its best [`STRING_POOL`] and raises the bar to the least of them.
    fn cut_dense(&mut self) {
        if self.best_dense.len() > STRING_POOL {
            self.best_dense
                .select_nth_unstable_by(STRING_POOL - 1, by_value);
            self.best_dense.truncate(STRING_POOL);
        }
        if let (STRING_POOL, Some(&(v, _))) = (self.best_dense.len(), self.best_dense.last()) {
            // After the selection the last kept is the least of them.
            self.dense_bar = self.dense_bar.max(v);
        }
    }

    fn merge(mut self, other: Part) -> Part {
        self.dense.merge(&other.dense);
        self.tag.merge(&other.tag);
        self.scoreable += other.scoreable;
        self.above.extend(other.above);
        self.best_raw = self.best_raw.max(other.best_raw);
        // A bar is reached by STRING_POOL kept scores of its part: so the higher one is by
        // as many of the union.
        self.dense_bar = self.dense_bar.max(other.dense_bar);
        self.best_dense.extend(other.best_dense);
        if self.best_dense.len() >= 2 * STRING_POOL {
            self.cut_dense();
        }
        self
    }

    /// The best [`STRING_POOL`] variant scores, best first.
    fn take_best_dense(&mut self) -> Vec<(f32, u32)> {
        let mut best = std::mem::take(&mut self.best_dense);
        best.sort_by(by_value);
        best.truncate(STRING_POOL);
        best
    }
}

/// The nodes of kind slot `slot` among positions `lo..hi`, ascending, with the kind-order
/// rank of the first (a kind's nodes are ascending in position, so they are a sub-range of
/// its group, found by bisection). Complexity: O(log n).
fn kind_in_chunk(idx: &RetrievalIndex, slot: usize, (lo, hi): (usize, usize)) -> (usize, &[u32]) {
    let a = idx.kind_start(slot);
    let seg = idx
        .kind_order()
        .get(a..idx.kind_start(slot + 1))
        .unwrap_or(&[]);
    let s0 = seg.partition_point(|&p| (p as usize) < lo);
    let s1 = seg.partition_point(|&p| (p as usize) < hi);
    (a + s0, seg.get(s0..s1).unwrap_or(&[]))
}

/// Splits each node of `lo..hi` into its channels for the query of `prep`, written at
/// `(i − lo)` of `dense`, `tag` and `raw`, from the chunk's scan `maxes` (node `i`'s best dot
/// products in `maxes[(i − lo)·stride + offset ..][..probes]`, see
/// [`super::similarity::scan_queries`]). Nodes are visited one kind at a time, in kind order
/// ([`kind_in_chunk`]): the channel split then branches predictably. Complexity: O(hi − lo).
#[allow(clippy::too_many_arguments)]
fn split_chunk(
    prep: &Prepared<'_>,
    idx: &RetrievalIndex,
    floor: f32,
    (lo, hi): (usize, usize),
    (maxes, stride, offset): (&[f32], usize, usize),
    dense: &mut [f32],
    tag: &mut [f32],
    raw: &mut [f32],
) -> Part {
    let m = prep.probes();
    let w: &BlendWeights = prep.weights();
    let mut part = Part::new();
    for (slot, kind) in MEMORY_KINDS.into_iter().enumerate() {
        let (first, nodes) = kind_in_chunk(idx, slot, (lo, hi));
        for (rank, &i) in (first..).zip(nodes) {
            let (i, off) = (i as usize, i as usize - lo);
            let at = off * stride + offset;
            let vals = maxes.get(at..at + m).unwrap_or(&[]);
            let Some((t, v)) = prep.parts_in(idx, kind, i, rank, vals) else {
                continue;
            };
            if let (Some(t), Some(out)) = (t.filter(|t| t.is_finite()), tag.get_mut(off)) {
                *out = t;
                part.tag.add(t);
            }
            if let (Some(v), Some(out)) = (v.filter(|v| v.is_finite()), dense.get_mut(off)) {
                *out = v;
                part.dense.add(v);
                part.keep_dense((v, i as u32));
            }
            let r = blend(w, t, v).filter(|r| r.is_finite());
            if let (Some(r), Some(out)) = (r, raw.get_mut(off)) {
                *out = r;
                part.scoreable += 1;
                part.best_raw = part.best_raw.max(r);
                if r >= floor {
                    part.above.push(i as u32);
                }
            }
        }
    }
    part
}

/// A character's habits are its own: the self note (`sem_self`) holds every procedure, and a
/// semantic note the procedures it links to (its self-knowledge). A habit is scored like any
/// note: the cosine of its action text against the query
/// ([`super::actions::habit_cosines`]) is its dense channel, its tags meet the query's tags,
/// and the two blend into its fused score. Each note that holds habits takes, at `weight`,
/// the channels of its best-fused habit where they are higher than its own: a message that
/// describes what the character habitually does ("always promising drawings and never
/// delivering") recalls who the character is, as much as the habit. `best_memory` is the
/// best raw score of any memory. Complexity: O(habits + the holders' action links).
fn own_habits(
    idx: &RetrievalIndex,
    prep: &Prepared<'_>,
    habit: &[f32],
    weight: f32,
    best_memory: f32,
    out: &mut DenseChannels,
) {
    // (fused, dense, tag, position) of habit `p`, when its action text was compared.
    type Scored = Option<(f32, f32, Option<f32>, u32)>;
    let score = |p: usize| -> Scored {
        let cos = habit.get(p).copied().filter(|c| c.is_finite())?;
        let tag = prep.tag_of(idx, p);
        Some((blend(prep.weights(), tag, Some(cos))?, cos, tag, p as u32))
    };
    let better = |a: Scored, b: Scored| match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 > x.0 { y } else { x }),
        (x, y) => x.or(y),
    };
    let habits = idx.nodes_of_kind(NodeKind::Procedure);
    let any_habit = habits.iter().map(|&p| score(p as usize)).fold(None, better);
    // The self holds every habit, so it answers for them only when the query is more like
    // one of them than like any memory (fused over the same channels): when it describes a
    // habit.
    let any_habit = any_habit.filter(|h| h.0 >= best_memory);
    out.habit = any_habit.map(|h| h.3);
    for &i in idx.habit_holders() {
        let best = if Some(i) == idx.self_node() {
            any_habit
        } else {
            idx.action_edges(i as usize)
                .iter()
                .map(|&(p, _)| score(p as usize))
                .fold(None, better)
        };
        let Some((fused, dense, tag, _)) = best else {
            continue;
        };
        let i = i as usize;
        out.raise(Slot::Raw, i, weight * fused);
        out.raise(Slot::Dense, i, weight * dense);
        if let Some(t) = tag {
            out.raise(Slot::Tag, i, weight * t);
        }
    }
}

/// Every node's [`DenseChannels`] for `q`, with the habit cosines
/// ([`super::actions::habit_cosines`]) when the notes that hold habits take theirs
/// (`own_habits` > 0). Unlike [`super::similarity::similarity`] there is no top-k: the
/// calibrated fusion needs each channel's whole distribution (as statistics). Only the
/// string channel is skipped for nodes it cannot lift into the best `STRING_POOL` (64)
/// dense scores. Runs on the rayon pool, chunk by chunk, from `parallel_min_nodes` nodes.
///
/// Complexity: the field scan of [`super::similarity::similarity`] plus O(n) and the string
/// channel over the nodes with identifiers that pass that bound.
pub fn similarity_channels(
    idx: &RetrievalIndex,
    q: &EmbeddedQuery,
    cfg: &SimilarityConfig,
) -> DenseChannels {
    let n = idx.len();
    similarity_channels_many(idx, &[q], cfg.blend.own_habits > 0.0, cfg)
        .pop()
        .unwrap_or_else(|| DenseChannels::empty(n, cfg.similarity_threshold))
}

/// The output slices of one scan chunk: `(dense, tag, raw, habit cosines)` of each query
/// (the last empty without habits).
type ChunkOut<'a> = Vec<[&'a mut [f32]; 4]>;

/// [`similarity_channels`] of several queries at once, in their order, each the same as
/// alone; with `habits`, each also gets its habit cosines ([`DenseChannels::habit_cosines`],
/// needed when `own_habits` > 0 or for the action channel). Every chunk of nodes is scanned
/// once for the probes of all of them, the habits' action rows with the rest (a recall's
/// sub-queries — the text and its keywords — read the field matrices once instead of once
/// each, the part of the scan that waits on memory), then split into each query's channels
/// while its rows are in cache.
///
/// Complexity: one pass over the needed fields' rows with Σ probes dot products per row,
/// plus O(n) and the string channel per query.
pub fn similarity_channels_many(
    idx: &RetrievalIndex,
    queries: &[&EmbeddedQuery],
    habits: bool,
    cfg: &SimilarityConfig,
) -> Vec<DenseChannels> {
    let n = idx.len();
    let floor = cfg.similarity_threshold;
    let mut outs: Vec<DenseChannels> = queries
        .iter()
        .map(|_| {
            let mut o = DenseChannels::empty(n, floor);
            if habits {
                o.habits = vec![f32::NAN; n];
            }
            o
        })
        .collect();
    if n == 0 || queries.is_empty() {
        return outs;
    }
    idx.with_sim_scratch(|s| {
        // The first query's buffers come from the index's scratch, the others' are fresh; a
        // tag several queries carry is compared with the vocabulary once (in the scratch's
        // tag buffers).
        let mut memo = std::mem::take(&mut s.tag_bests);
        memo.start();
        let preps: Vec<Prepared<'_>> = queries
            .iter()
            .enumerate()
            .map(|(k, q)| {
                let p = match k {
                    0 => prepare_plan(idx, q, cfg, s, &mut memo),
                    _ => prepare_plan(idx, q, cfg, &mut Default::default(), &mut memo),
                };
                if habits {
                    p.with_habits()
                } else {
                    p
                }
            })
            .collect();
        let offsets: Vec<usize> = preps
            .iter()
            .scan(0, |at, p| {
                let o = *at;
                *at += p.width();
                Some(o)
            })
            .collect();
        let stride: usize = preps.iter().map(Prepared::width).sum();
        let mut by_chunk: Vec<ChunkOut<'_>> = (0..n.div_ceil(SCAN_CHUNK))
            .map(|_| Vec::with_capacity(queries.len()))
            .collect();
        for o in &mut outs {
            let DenseChannels {
                dense,
                tag,
                raw,
                habits,
                ..
            } = o;
            let mut habits = habits.chunks_mut(SCAN_CHUNK);
            let slices = dense
                .chunks_mut(SCAN_CHUNK)
                .zip(tag.chunks_mut(SCAN_CHUNK))
                .zip(raw.chunks_mut(SCAN_CHUNK));
            for (chunk, ((d, t), r)) in by_chunk.iter_mut().zip(slices) {
                chunk.push([d, t, r, habits.next().unwrap_or(&mut [])]);
            }
        }
        let work = |c: usize, views: ChunkOut<'_>, maxes: &mut Vec<f32>| -> Vec<Part> {
            let lo = c * SCAN_CHUNK;
            let hi = (lo + SCAN_CHUNK).min(n);
            refill(maxes, (hi - lo) * stride, f32::NAN);
            if stride > 0 {
                scan_queries(&preps, &offsets, idx, (lo, hi), maxes, stride);
            }
            views
                .into_iter()
                .zip(preps.iter().zip(&offsets))
                .map(|([d, t, r, h], (prep, &offset))| {
                    let scan = (maxes.as_slice(), stride, offset);
                    habit_chunk(prep, idx, (lo, hi), scan, h);
                    split_chunk(prep, idx, floor, (lo, hi), scan, d, t, r)
                })
                .collect()
        };
        let parallel = n >= cfg.parallel_min_nodes;
        let parts: Vec<Vec<Part>> = if parallel {
            by_chunk
                .into_par_iter()
                .enumerate()
                .map_init(Vec::new, |maxes, (c, views)| work(c, views, maxes))
                .collect()
        } else {
            let mut maxes = Vec::new();
            by_chunk
                .into_iter()
                .enumerate()
                .map(|(c, views)| work(c, views, &mut maxes))
                .collect()
        };
        // Each query's parts, chunk by chunk in order.
        let mut merged: Vec<Option<Part>> = queries.iter().map(|_| None).collect();
        for chunk in parts {
            for (m, part) in merged.iter_mut().zip(chunk) {
                *m = Some(match m.take() {
                    Some(all) => all.merge(part),
                    None => part,
                });
            }
        }
        let finish = |((prep, all), out): ((&Prepared<'_>, Option<Part>), &mut DenseChannels)| {
            if let Some(all) = all {
                finish_channels(idx, prep, all, out, parallel);
            }
        };
        let each = preps.iter().zip(merged).zip(outs.iter_mut());
        if parallel && queries.len() > 1 {
            each.par_bridge().for_each(finish);
        } else {
            each.for_each(finish);
        }
        s.tag_bests = memo;
        if let Some(first) = preps.into_iter().next() {
            first.release(s);
        }
    });
    outs
}

/// The habit cosines of the procedures among nodes `lo..hi` into `out` (at `i − lo`; nothing
/// without habit probes): the best of the query's habit columns of the chunk's scan (see
/// [`split_chunk`] for `maxes`). Complexity: O(procedures in the chunk × habit probes).
fn habit_chunk(
    prep: &Prepared<'_>,
    idx: &RetrievalIndex,
    (lo, hi): (usize, usize),
    (maxes, stride, offset): (&[f32], usize, usize),
    out: &mut [f32],
) {
    let h = prep.habit_probes();
    if h == 0 || out.is_empty() {
        return;
    }
    // Procedures are the kind slot after the memory kinds.
    let (_, habits) = kind_in_chunk(idx, MEMORY_KINDS.len(), (lo, hi));
    for &i in habits {
        let off = i as usize - lo;
        let at = off * stride + offset + prep.probes();
        let best = maxes
            .get(at..at + h)
            .unwrap_or(&[])
            .iter()
            .fold(f32::NAN, |b, &x| b.max(x));
        if let Some(o) = out.get_mut(off) {
            *o = best;
        }
    }
}

/// Completes one query's channels from its merged scan `all`: its statistics, the notes that
/// hold habits raised by their habit cosines, and the string channel of the nodes it can lift
/// into the best `STRING_POOL` dense scores.
fn finish_channels(
    idx: &RetrievalIndex,
    prep: &Prepared<'_>,
    mut all: Part,
    out: &mut DenseChannels,
    parallel: bool,
) {
    let w = prep.weights();
    let mut best_dense = all.take_best_dense();
    out.dense_stats = all.dense;
    out.tag_stats = all.tag;
    out.scoreable = all.scoreable;
    out.above = all.above;
    out.above.sort_unstable();
    let best_raw = all.best_raw;
    if w.own_habits > 0.0 {
        let habits = std::mem::take(&mut out.habits);
        own_habits(idx, prep, &habits, w.own_habits, best_raw, out);
        out.habits = habits;
        // Own habits only raise the holders: refresh the best dense scores with them.
        for b in &mut best_dense {
            b.0 = out.get(Slot::Dense, b.1 as usize);
        }
        for &h in idx.habit_holders() {
            let v = out.get(Slot::Dense, h as usize);
            if v.is_finite() && !best_dense.iter().any(|b| b.1 == h) {
                best_dense.push((v, h));
            }
        }
        best_dense.sort_by(by_value);
        best_dense.truncate(STRING_POOL);
    }
    let alpha = w.string_blend_alpha;
    // The string channel can only raise a node to α·e + (1 − α); nodes that cannot reach
    // the best STRING_POOL dense scores even then are skipped (their rise would not
    // change the seeds, and barely the channel's statistics).
    let bar = match best_dense.get(STRING_POOL - 1) {
        Some(&(x, _)) => x,
        None => f32::NEG_INFINITY,
    };
    let view: &DenseChannels = out;
    let lift = |&i: &u32| -> Option<(usize, f32)> {
        let i = i as usize;
        let e = view.get(Slot::Dense, i);
        if !(e.is_finite() && alpha * e + (1.0 - alpha) >= bar) {
            return None;
        }
        // A string score raises a channel only where it exceeds the channel's value.
        // (`min` ignores a missing raw score.)
        let st = prep.string(idx, i, e.min(view.get(Slot::Raw, i)));
        (st > 0.0).then_some((i, st))
    };
    // A node's string score reads only its own channels, so they are computed side by side
    // and raised after, in node order (the statistics' sums then add up as in one thread).
    let lifted: Vec<(usize, f32)> = if parallel {
        idx.ident_nodes().par_iter().filter_map(lift).collect()
    } else {
        idx.ident_nodes().iter().filter_map(lift).collect()
    };
    for (i, st) in lifted {
        for slot in [Slot::Dense, Slot::Raw] {
            let e = out.get(slot, i);
            if e.is_finite() {
                out.raise(slot, i, e.max(alpha * e + (1.0 - alpha) * st));
            }
        }
    }
}
