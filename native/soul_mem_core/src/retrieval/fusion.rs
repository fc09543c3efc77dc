//! Calibrated fusion: each channel's scores (dense per-field e5, tags, BM25F words, PPR
//! association) are put on one scale per query, then fused as a weighted mean over the
//! channels that have something to compare for a node.
//!
//! Why calibrate: e5 scores every Chinese text 0.7–0.95, BM25 is unbounded and PPR mass is
//! 0.001–0.3, so a raw max or sum lets whichever channel has the widest numbers decide.
//! Standardising per query (or ranking) asks instead "how unusual is this node for this
//! channel, on this query", which is comparable across channels and across queries.

use super::config::{FusionConfig, FusionMethod};
use super::dense_channels::DenseChannels;
use serde::{Deserialize, Serialize};

/// A source of evidence for a recalled memory (its trace lists the ones that contributed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// Per-field embedding similarity (with the identifier string match).
    Dense,
    /// Tag embedding similarity.
    Tag,
    /// Shared words (BM25F).
    Lexical,
    /// Reached by the PPR walk from the seeds.
    Association,
}

/// Slope of the logistic approximation of the standard normal CDF.
const PROBIT_SLOPE: f64 = 1.702;

/// Running statistics of one channel's present values on one query: what the z-score and
/// raw calibrations need, kept while the values are written (so fitting needs no pass over
/// every node). Sums are f64 per value: with e5 cosines (mean ≈ 0.8, spread ≈ 0.03) the
/// variance `sq/n − mean²` then keeps ~10 significant digits at a million values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChannelStats {
    count: f64,
    sum: f64,
    sq: f64,
    max: f32,
}

impl Default for ChannelStats {
    fn default() -> Self {
        ChannelStats {
            count: 0.0,
            sum: 0.0,
            sq: 0.0,
            max: f32::NEG_INFINITY,
        }
    }
}

impl ChannelStats {
    /// The statistics of the finite values of `values`, plus `zeros` more values of 0.
    /// Complexity: O(n).
    pub fn of(values: &[f32], zeros: usize) -> Self {
        let mut s = ChannelStats::default();
        for &x in values.iter().filter(|x| x.is_finite()) {
            s.add(x);
        }
        s.add_zeros(zeros);
        s
    }

    /// Counts the present value `x`.
    #[inline]
    pub fn add(&mut self, x: f32) {
        let v = f64::from(x);
        self.count += 1.0;
        self.sum += v;
        self.sq += v * v;
        self.max = self.max.max(x);
    }

    /// Counts `k` values of 0 (the nodes a channel could have scored and did not).
    pub fn add_zeros(&mut self, k: usize) {
        if k > 0 {
            self.count += k as f64;
            self.max = self.max.max(0.0);
        }
    }

    /// Replaces the counted value `old` (NaN: the node had none) by `new ≥ old`: values only
    /// ever rise after they are first written (the string channel and own habits), which is
    /// what keeps the running maximum exact.
    #[inline]
    pub fn raise(&mut self, old: f32, new: f32) {
        if old.is_finite() {
            let v = f64::from(old);
            self.count -= 1.0;
            self.sum -= v;
            self.sq -= v * v;
        }
        self.add(new);
    }

    /// Counts `count` values of sum `sum`, sum of squares `sq` and maximum `max` (folded
    /// elsewhere, e.g. in vector lanes).
    fn add_sums(&mut self, count: f64, sum: f64, sq: f64, max: f32) {
        self.count += count;
        self.sum += sum;
        self.sq += sq;
        self.max = self.max.max(max);
    }

    /// Adds the counts of `other` (the statistics of another part of the nodes).
    pub fn merge(&mut self, other: &ChannelStats) {
        self.count += other.count;
        self.sum += other.sum;
        self.sq += other.sq;
        self.max = self.max.max(other.max);
    }
}

/// One channel's calibration on one query, fitted over all of its values: the statistics
/// need every node, the mapping only the nodes whose fused score is wanted.
enum Calibration {
    /// Nothing to change (no value, or raw scores already within [0, 1]).
    Unchanged,
    /// Raw: divided by the best value.
    Scaled(f32),
    /// z-score with no spread: every present value is average.
    Average,
    /// Logistic of the z-score: `1 / (1 + exp(−(x − mean) · scale))`.
    Logistic { mean: f32, scale: f32 },
    /// Reciprocal rank, by position (ranks need the whole order).
    Ranked(Vec<f32>),
}

impl Calibration {
    /// Fits `method` to `values` (see [`calibrate_in_place`]). Complexity: O(n) for zscore
    /// and raw, O(n log n) for rrf.
    fn fit(values: &[f32], method: FusionMethod, rrf_k: f64, zeros: usize) -> Self {
        match method {
            FusionMethod::Rrf => Calibration::ranked(values, rrf_k),
            FusionMethod::Raw | FusionMethod::Zscore => {
                Calibration::from_stats(&ChannelStats::of(values, zeros), method)
            }
        }
    }

    /// Fits zscore or raw from the channel's statistics (rrf needs the values: it gets
    /// [`Calibration::ranked`] instead). Complexity: O(1).
    fn from_stats(s: &ChannelStats, method: FusionMethod) -> Self {
        if method == FusionMethod::Raw {
            return if s.max > 1.0 {
                Calibration::Scaled(s.max)
            } else {
                Calibration::Unchanged
            };
        }
        if s.count == 0.0 {
            return Calibration::Unchanged;
        }
        let mean = s.sum / s.count;
        let sd = (s.sq / s.count - mean * mean).max(0.0).sqrt();
        if sd < 1e-9 {
            return Calibration::Average;
        }
        // f32 from here: the mapping runs per node and channel on every query.
        Calibration::Logistic {
            mean: mean as f32,
            scale: (PROBIT_SLOPE / sd) as f32,
        }
    }

    /// Reciprocal-rank calibration of the finite `values`, ties sharing the better rank.
    /// Complexity: O(n log n).
    fn ranked(values: &[f32], rrf_k: f64) -> Self {
        let mut order: Vec<usize> = (0..values.len())
            .filter(|&i| values[i].is_finite())
            .collect();
        order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
        let mut out = vec![f32::NAN; values.len()];
        let mut rank = 0usize;
        let mut last = f32::NAN;
        for (r, &i) in order.iter().enumerate() {
            if values[i] != last {
                rank = r + 1;
                last = values[i];
            }
            out[i] = ((rrf_k + 1.0) / (rrf_k + rank as f64)) as f32;
        }
        Calibration::Ranked(out)
    }

    /// The calibrated value of the present value `x` of node `i`.
    #[inline]
    fn apply(&self, i: usize, x: f32) -> f32 {
        match self {
            Calibration::Unchanged => x,
            Calibration::Scaled(max) => x / max,
            Calibration::Average => 0.5,
            Calibration::Logistic { mean, scale } => 1.0 / (1.0 + (-(x - mean) * scale).exp()),
            Calibration::Ranked(r) => r.get(i).copied().unwrap_or(f32::NAN),
        }
    }
}

/// Calibrates one channel's scores (NaN = absent for that node) in place onto (0, 1] per
/// `method`; absent stays NaN. `zeros` more nodes count for the statistics with the value 0
/// only (the zero BM25 of nodes sharing no word), so a channel present for few nodes is
/// standardised against everyone it could have scored.
///
/// Complexity: O(n) for zscore and raw, O(n log n) for rrf.
pub fn calibrate_in_place(values: &mut [f32], method: FusionMethod, rrf_k: f64, zeros: usize) {
    let c = Calibration::fit(values, method, rrf_k, zeros);
    for (i, x) in values.iter_mut().enumerate() {
        if x.is_finite() {
            *x = c.apply(i, *x);
        }
    }
}

/// [`calibrate_in_place`] on a copy.
pub fn calibrate(values: &[f32], method: FusionMethod, rrf_k: f64, zeros: usize) -> Vec<f32> {
    let mut v = values.to_vec();
    calibrate_in_place(&mut v, method, rrf_k, zeros);
    v
}

/// The similarity side of one query, calibrated and fused, by position.
#[derive(Debug, Clone, Default)]
pub struct FusedSimilarity {
    /// Fused calibrated score in [0, 1] (NaN: no channel has anything for the node, or it
    /// cannot be recalled: see [`fuse_similarity`]).
    pub score: Vec<f32>,
    /// The seed's fused cosine, the scale of the model's similarity floor.
    pub raw: Vec<f32>,
    /// Per node: which channels were present (bit per [`Channel`] order).
    pub present: Vec<u8>,
    /// Per node: which channels scored above their median (what the trace names).
    pub strong: Vec<u8>,
    /// The habit the query describes ([`DenseChannels::habit`]).
    pub habit: Option<u32>,
    /// The nodes with a fused score (those that can be recalled), ascending.
    pub candidates: Vec<u32>,
}

impl FusedSimilarity {
    /// Whether node `i` can be recalled by similarity: it passed the floor given to
    /// [`fuse_similarity`] (the one place that rule lives) and has a fused score.
    #[inline]
    pub fn recallable(&self, i: usize) -> bool {
        self.score.get(i).is_some_and(|s| s.is_finite())
    }
}

/// Bit of `c` in [`FusedSimilarity::present`] / `strong`.
pub fn bit(c: Channel) -> u8 {
    1 << (c as u8)
}

/// The channels of a bit set, in [`Channel`] order.
pub fn channels_of(bits: u8) -> Vec<Channel> {
    [
        Channel::Dense,
        Channel::Tag,
        Channel::Lexical,
        Channel::Association,
    ]
    .into_iter()
    .filter(|&c| bits & bit(c) != 0)
    .collect()
}

/// Fuses the dense, tag and lexical channels per `cfg`, consuming the dense side. `lexical`
/// is the BM25 of every node by position (0 = no shared word; empty = no lexical query;
/// [`super::index::RetrievalIndex::lexical_scores`]). A channel
/// with weight 0 is off. Every node counts for each channel's statistics (kept by
/// [`DenseChannels`] as it was written; the scoreable nodes sharing no word count as lexical
/// zeros), but only the nodes that can be recalled get a fused score: those whose raw score
/// reaches the floor, or, with no embedding channel, that share a word with the query (the
/// rest stay NaN; on a large graph that is most of them).
/// Complexity: O(n) for the outputs and one pass over the lexical scores, plus
/// O(candidates log candidates); rrf adds O(n log n) for the ranks.
pub fn fuse_similarity(
    dense: DenseChannels,
    lexical: &[f32],
    cfg: &FusionConfig,
) -> FusedSimilarity {
    let n = dense.raw.len();
    let lexical_at = |i: u32| match lexical.get(i as usize) {
        Some(&l) if l > 0.0 && l.is_finite() => l,
        _ => f32::NAN,
    };
    let mut candidates: Vec<u32> = dense.above.clone();
    let lex_stats = lexical_stats(lexical, &dense, &mut candidates);
    let fit = |stats: &ChannelStats, values: &dyn Fn() -> Vec<f32>| match cfg.method {
        FusionMethod::Rrf => Calibration::ranked(&values(), cfg.rrf_k),
        m => Calibration::from_stats(stats, m),
    };
    let lexical_dense = || (0..n as u32).map(lexical_at).collect();
    let chans: Vec<(Channel, f32, Calibration)> = [
        (Channel::Dense, cfg.dense, &dense.dense_stats),
        (Channel::Tag, cfg.tag, &dense.tag_stats),
        (Channel::Lexical, cfg.lexical, &lex_stats),
    ]
    .into_iter()
    .filter(|(_, w, _)| *w > 0.0)
    .map(|(c, w, stats)| {
        let cal = match c {
            Channel::Dense => fit(stats, &|| dense.dense.clone()),
            Channel::Tag => fit(stats, &|| dense.tag.clone()),
            _ => fit(stats, &lexical_dense),
        };
        (c, w as f32, cal)
    })
    .collect();
    let read = |c: Channel, i: u32| match c {
        Channel::Dense => dense.dense.get(i as usize).copied().unwrap_or(f32::NAN),
        Channel::Tag => dense.tag.get(i as usize).copied().unwrap_or(f32::NAN),
        _ => lexical_at(i),
    };
    // The nodes at or above the floor and those found by words alone, ascending.
    candidates.sort_unstable();
    let raw_lexical = cfg.method == FusionMethod::Raw;
    let mut score = vec![f32::NAN; n];
    let mut present = vec![0u8; n];
    let mut strong = vec![0u8; n];
    candidates.retain(|&i| {
        let (mut num, mut den) = (0f32, 0f32);
        let (mut p, mut st) = (0u8, 0u8);
        for (c, w, cal) in &chans {
            let x = read(*c, i);
            if !x.is_finite() {
                continue;
            }
            let x = cal.apply(i as usize, x);
            num += w * x;
            den += w;
            p |= bit(*c);
            if x > 0.5 || (raw_lexical && *c == Channel::Lexical) {
                st |= bit(*c);
            }
        }
        let i = i as usize;
        match (score.get_mut(i), present.get_mut(i), strong.get_mut(i)) {
            (Some(s), Some(pr), Some(sr)) if den > 0.0 => {
                *s = num / den;
                *pr = p;
                *sr = st;
                true
            }
            _ => false,
        }
    });
    let DenseChannels { raw, habit, .. } = dense;
    FusedSimilarity {
        score,
        raw,
        present,
        strong,
        habit,
        candidates,
    }
}

/// The lexical channel's statistics: present where a word is shared, with the scoreable
/// nodes sharing none as zeros. The nodes with no embedding channel that share a word are
/// pushed to `candidates`. Branch-free f32 lanes over blocks of 1,024 nodes, folded into f64
/// per block: which nodes share a word is unpredictable, and a branch per node costs more
/// than the arithmetic. Complexity: O(n).
fn lexical_stats(
    lexical: &[f32],
    dense: &DenseChannels,
    candidates: &mut Vec<u32>,
) -> ChannelStats {
    let mut stats = ChannelStats::default();
    let mut shared = 0usize;
    let raw = &dense.raw;
    let n = lexical.len().min(raw.len());
    for start in (0..n).step_by(1024) {
        let end = (start + 1024).min(n);
        let (Some(ls), Some(rs)) = (lexical.get(start..end), raw.get(start..end)) else {
            break;
        };
        let (mut c8, mut s8, mut q8, mut m8) = ([0f32; 8], [0f32; 8], [0f32; 8], [0f32; 8]);
        let mut both = [0u32; 8];
        let mut lane = |k: usize, l: f32, r: f32| {
            let ok = l > 0.0 && l.is_finite();
            // `l` where present, else +0.0 (by mask: no branch, and no NaN reaches the sums).
            let x = f32::from_bits(l.to_bits() & 0u32.wrapping_sub(u32::from(ok)));
            c8[k] += f32::from(u8::from(ok));
            s8[k] += x;
            q8[k] += x * x;
            m8[k] = m8[k].max(x);
            both[k] += u32::from(ok && r.is_finite());
        };
        let (lc, rc) = (ls.chunks_exact(8), rs.chunks_exact(8));
        let (lr, rr) = (lc.remainder(), rc.remainder());
        for (l8, r8) in lc.zip(rc) {
            for k in 0..8 {
                lane(k, l8[k], r8[k]);
            }
        }
        for (&l, &r) in lr.iter().zip(rr) {
            lane(0, l, r);
        }
        let both: u32 = both.iter().sum();
        let fold = |v: [f32; 8]| v.iter().map(|&x| f64::from(x)).sum::<f64>();
        let max = m8.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let count = fold(c8);
        if count > 0.0 {
            stats.add_sums(count, fold(s8), fold(q8), max);
        }
        shared += both as usize;
        if both as f64 != count {
            candidates.extend(
                (start..end)
                    .filter(|&i| {
                        lexical.get(i).is_some_and(|l| *l > 0.0 && l.is_finite())
                            && !raw.get(i).is_some_and(|r| r.is_finite())
                    })
                    .map(|i| i as u32),
            );
        }
    }
    stats.add_zeros(dense.scoreable.saturating_sub(shared));
    stats
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn zscore_is_monotone_and_keeps_absent() {
        let c = calibrate(&[0.8, f32::NAN, 0.9, 0.7], FusionMethod::Zscore, 60.0, 0);
        assert!(c[1].is_nan());
        assert!(c[2] > c[0] && c[0] > c[3]);
        assert!((c[0] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn zscore_matches_the_plain_two_pass_formula() {
        // Values like e5 cosines (large mean, small spread) over several blocks, with gaps.
        let v: Vec<f32> = (0..5000)
            .map(|i| {
                if i % 7 == 3 {
                    f32::NAN
                } else {
                    0.85 + 0.03 * ((i as f32 * 0.37).sin())
                }
            })
            .collect();
        let present: Vec<f64> = v
            .iter()
            .filter(|x| x.is_finite())
            .map(|&x| f64::from(x))
            .collect();
        let zeros = 40usize;
        let n = (present.len() + zeros) as f64;
        let mean = present.iter().sum::<f64>() / n;
        let var = (present.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
            + zeros as f64 * mean * mean)
            / n;
        let c = calibrate(&v, FusionMethod::Zscore, 60.0, zeros);
        for (x, y) in v.iter().zip(&c) {
            if !x.is_finite() {
                assert!(y.is_nan());
                continue;
            }
            let want = 1.0 / (1.0 + (-(f64::from(*x) - mean) * PROBIT_SLOPE / var.sqrt()).exp());
            assert!((f64::from(*y) - want).abs() < 1e-4, "{x}: {y} vs {want}");
        }
    }

    /// Channels of 4 nodes with no tags and `raw = dense`.
    fn untagged(dense: Vec<f32>, floor: f32) -> DenseChannels {
        DenseChannels::new(
            dense.clone(),
            vec![f32::NAN; dense.len()],
            dense,
            None,
            floor,
        )
    }

    #[test]
    fn only_nodes_that_can_be_recalled_get_a_fused_score() {
        let dense = vec![0.9, 0.7, 0.5, f32::NAN];
        let hits = [0.0, 0.0, 0.0, 2.0];
        let cfg = FusionConfig::default();
        let all = fuse_similarity(untagged(dense.clone(), 0.0), &hits, &cfg);
        let some = fuse_similarity(untagged(dense, 0.6), &hits, &cfg);
        // Above the floor: the same score (the statistics still count every node).
        assert_eq!(some.score[0], all.score[0]);
        assert_eq!(some.score[1], all.score[1]);
        assert!(some.score[2].is_nan());
        // No embedding channel: recalled on a shared word, whatever the floor.
        assert_eq!(some.score[3], all.score[3]);
        assert!(some.score[3].is_finite());
        assert_eq!(some.candidates, vec![0, 1, 3]);
    }

    #[test]
    fn running_statistics_fit_as_the_values_do() {
        // Raised values (the string channel, own habits) replace what they counted.
        let mut s = ChannelStats::of(&[0.2, 0.4, f32::NAN], 1);
        s.raise(0.4, 0.9);
        s.raise(f32::NAN, 0.5);
        let want = ChannelStats::of(&[0.2, 0.9, 0.5], 1);
        for (a, b) in [(s.count, want.count), (s.sum, want.sum), (s.sq, want.sq)] {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        assert_eq!(s.max, want.max);
        let mut halves = ChannelStats::of(&[0.2, 0.9], 0);
        halves.merge(&ChannelStats::of(&[0.5], 1));
        assert!((halves.sum - want.sum).abs() < 1e-12 && halves.count == want.count);
    }

    #[test]
    fn lexical_statistics_in_lanes_match_the_plain_count() {
        // 3,001 nodes: blocks of 1,024 and a ragged tail; words shared at random, some by
        // nodes with no embedding channel (those become candidates).
        let n = 3001;
        let mut rng = crate::rng::SplitMix64::new(7);
        let lexical: Vec<f32> = (0..n)
            .map(|_| match rng.below(4) {
                0 => 0.1 + 5.0 * rng.next_f64_open() as f32,
                _ => 0.0,
            })
            .collect();
        let raw: Vec<f32> = (0..n)
            .map(|i| if i % 97 == 0 { f32::NAN } else { 0.5 })
            .collect();
        let dense = DenseChannels::new(raw.clone(), vec![f32::NAN; n], raw.clone(), None, 2.0);
        let mut candidates = Vec::new();
        let got = lexical_stats(&lexical, &dense, &mut candidates);
        let present: Vec<f32> = lexical.iter().copied().filter(|&l| l > 0.0).collect();
        let zeros = (0..n)
            .filter(|&i| lexical[i] == 0.0 && raw[i].is_finite())
            .count();
        let want = ChannelStats::of(&present, zeros);
        assert_eq!(got.count, want.count);
        assert!(
            (got.sum - want.sum).abs() < 1e-3 * want.sum,
            "{got:?} vs {want:?}"
        );
        assert!((got.sq - want.sq).abs() < 1e-3 * want.sq);
        assert_eq!(got.max, want.max);
        let lone: Vec<u32> = (0..n as u32)
            .filter(|&i| lexical[i as usize] > 0.0 && raw[i as usize].is_nan())
            .collect();
        assert!(!lone.is_empty());
        assert_eq!(candidates, lone);
    }

    #[test]
    fn rrf_ranks_with_ties() {
        let c = calibrate(&[0.5, 0.9, 0.9, f32::NAN], FusionMethod::Rrf, 60.0, 0);
        assert_eq!(c[1], 1.0);
        assert_eq!(c[2], 1.0);
        assert!((c[0] - 61.0 / 63.0).abs() < 1e-6);
        assert!(c[3].is_nan());
    }

    #[test]
    fn an_absent_channel_is_left_out_not_counted_as_zero() {
        // Two nodes with equal dense scores; only the first has tags, and its tag score is
        // the median of the tagged nodes: the untagged node must not lose to it.
        let dense = DenseChannels::new(
            vec![0.9, 0.9, 0.5, 0.5],
            vec![0.8, f32::NAN, 0.9, 0.7],
            vec![0.9, 0.9, 0.5, 0.5],
            None,
            0.0,
        );
        let f = fuse_similarity(dense, &[], &FusionConfig::default());
        assert!(f.score[1] >= f.score[0], "{:?}", f.score);
        assert_eq!(f.present[1], bit(Channel::Dense));
        assert_eq!(f.present[0], bit(Channel::Dense) | bit(Channel::Tag));
    }

    #[test]
    fn a_shared_rare_word_lifts_a_node() {
        let dense = untagged(vec![0.85, 0.84, 0.83, 0.849], 0.0);
        let f = fuse_similarity(dense, &[0.0, 0.0, 0.0, 3.0], &FusionConfig::default());
        let best = (0..4)
            .max_by(|&a, &b| f.score[a].total_cmp(&f.score[b]))
            .unwrap();
        assert_eq!(best, 3, "{:?}", f.score);
        assert!(f.strong[3] & bit(Channel::Lexical) != 0);
    }
}
