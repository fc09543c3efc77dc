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
use super::similarity::{blend, prepare_plan, refill, Prepared, SCAN_CHUNK, STRING_POOL};
use super::top_k::push_top;
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
    /// The best [`STRING_POOL`] variant scores and their nodes, best first.
    best_dense: Vec<(f32, u32)>,
}

/// Best score first (the node only identifies the entry).
fn by_value(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0)
}

impl Part {
    fn merge(mut self, other: Part) -> Part {
        self.dense.merge(&other.dense);
        self.tag.merge(&other.tag);
        self.scoreable += other.scoreable;
        self.above.extend(other.above);
        self.best_raw = self.best_raw.max(other.best_raw);
        for x in other.best_dense {
            push_top(&mut self.best_dense, STRING_POOL, x, by_value);
        }
        self
    }
}

/// Scans nodes `lo..hi` (`maxes` is the chunk's scan buffer, kept between chunks) and splits
/// each node's best dot products into its channels, written at `(i − lo)` of `dense`, `tag`
/// and `raw`. Nodes are visited one kind at a time, in kind order (each kind's nodes are
/// ascending in position, so a chunk's are a sub-range found by bisection): the channel
/// split then branches predictably. Complexity: the chunk's scan plus O(hi − lo).
#[allow(clippy::too_many_arguments)]
fn split_chunk(
    prep: &Prepared<'_>,
    idx: &RetrievalIndex,
    floor: f32,
    (lo, hi): (usize, usize),
    maxes: &mut Vec<f32>,
    dense: &mut [f32],
    tag: &mut [f32],
    raw: &mut [f32],
) -> Part {
    let m = prep.probes();
    refill(maxes, (hi - lo) * m, f32::NAN);
    if m > 0 {
        prep.scan(idx, (lo, hi), maxes);
    }
    let w: &BlendWeights = prep.weights();
    let order = idx.kind_order();
    let mut part = Part {
        best_raw: f32::NEG_INFINITY,
        ..Default::default()
    };
    for (slot, kind) in MEMORY_KINDS.into_iter().enumerate() {
        let a = idx.kind_start(slot);
        let seg = order.get(a..idx.kind_start(slot + 1)).unwrap_or(&[]);
        let s0 = seg.partition_point(|&p| (p as usize) < lo);
        let s1 = seg.partition_point(|&p| (p as usize) < hi);
        for (rank, &i) in (a + s0..).zip(seg.get(s0..s1).unwrap_or(&[])) {
            let (i, off) = (i as usize, i as usize - lo);
            let vals = maxes.get(off * m..(off + 1) * m).unwrap_or(&[]);
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
                push_top(&mut part.best_dense, STRING_POOL, (v, i as u32), by_value);
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

/// Every node's [`DenseChannels`] for `q`, whose habit cosines are `habits`
/// ([`super::actions::habit_cosines`], for the notes that hold habits; empty when the
/// caller needs none). Unlike [`super::similarity::similarity`] there is no top-k: the
/// calibrated fusion needs each channel's whole distribution (as statistics). Only the
/// string channel is skipped for nodes it cannot lift into the best `STRING_POOL` (64)
/// dense scores. Runs on the rayon pool, chunk by chunk, from `parallel_min_nodes` nodes.
///
/// Complexity: the field scan of [`super::similarity::similarity`] plus O(n) and the string
/// channel over the nodes with identifiers that pass that bound.
pub fn similarity_channels(
    idx: &RetrievalIndex,
    q: &EmbeddedQuery,
    habits: &[f32],
    cfg: &SimilarityConfig,
) -> DenseChannels {
    let n = idx.len();
    let floor = cfg.similarity_threshold;
    let mut out = DenseChannels::empty(n, floor);
    if n == 0 {
        return out;
    }
    idx.with_sim_scratch(|s| {
        let prep = prepare_plan(idx, q, cfg, s);
        let w = prep.weights();
        let DenseChannels {
            dense, tag, raw, ..
        } = &mut out;
        let chunks = |c: usize, (d, t, r): (&mut [f32], &mut [f32], &mut [f32]), maxes: &mut _| {
            let lo = c * SCAN_CHUNK;
            split_chunk(&prep, idx, floor, (lo, lo + d.len()), maxes, d, t, r)
        };
        let parts: Vec<Part> = if n >= cfg.parallel_min_nodes {
            dense
                .par_chunks_mut(SCAN_CHUNK)
                .zip(tag.par_chunks_mut(SCAN_CHUNK))
                .zip(raw.par_chunks_mut(SCAN_CHUNK))
                .enumerate()
                .map_init(Vec::new, |maxes, (c, ((d, t), r))| {
                    chunks(c, (d, t, r), maxes)
                })
                .collect()
        } else {
            let mut maxes = Vec::new();
            dense
                .chunks_mut(SCAN_CHUNK)
                .zip(tag.chunks_mut(SCAN_CHUNK))
                .zip(raw.chunks_mut(SCAN_CHUNK))
                .enumerate()
                .map(|(c, ((d, t), r))| chunks(c, (d, t, r), &mut maxes))
                .collect()
        };
        let Some(all) = parts.into_iter().reduce(Part::merge) else {
            prep.release(s);
            return;
        };
        out.dense_stats = all.dense;
        out.tag_stats = all.tag;
        out.scoreable = all.scoreable;
        out.above = all.above;
        out.above.sort_unstable();
        let mut best_dense = all.best_dense;
        if w.own_habits > 0.0 {
            own_habits(idx, &prep, habits, w.own_habits, all.best_raw, &mut out);
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
        for &i in idx.ident_nodes() {
            let i = i as usize;
            let e = out.get(Slot::Dense, i);
            if !(e.is_finite() && alpha * e + (1.0 - alpha) >= bar) {
                continue;
            }
            // A string score raises a channel only where it exceeds the channel's value.
            // (`min` ignores a missing raw score.)
            let st = prep.string(idx, i, e.min(out.get(Slot::Raw, i)));
            if st <= 0.0 {
                continue;
            }
            for slot in [Slot::Dense, Slot::Raw] {
                let e = out.get(slot, i);
                if e.is_finite() {
                    out.raise(slot, i, e.max(alpha * e + (1.0 - alpha) * st));
                }
            }
        }
        prep.release(s);
    });
    out
}
