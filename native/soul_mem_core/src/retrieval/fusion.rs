//! Calibrated fusion: each channel's scores (dense per-field e5, tags, BM25F words, PPR
//! association) are put on one scale per query, then fused as a weighted mean over the
//! channels that have something to compare for a node.
//!
//! Why calibrate: e5 scores every Chinese text 0.7–0.95, BM25 is unbounded and PPR mass is
//! 0.001–0.3, so a raw max or sum lets whichever channel has the widest numbers decide.
//! Standardising per query (or ranking) asks instead "how unusual is this node for this
//! channel, on this query", which is comparable across channels and across queries.

use super::config::{FusionConfig, FusionMethod};
use super::similarity::DenseChannels;
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
            FusionMethod::Raw => {
                let max = values
                    .iter()
                    .copied()
                    .filter(|x| x.is_finite())
                    .fold(0f32, f32::max);
                if max > 1.0 {
                    Calibration::Scaled(max)
                } else {
                    Calibration::Unchanged
                }
            }
            FusionMethod::Zscore => {
                // Branch-free f32 lanes over blocks of 1,024 values, folded into f64 per
                // block: the loop vectorises (one chain of dependent f64 adds would cost its
                // latency per node), and a block's f32 sums stay exact to ~1e-6.
                // Shifted by a present value (the zeros count as `−pivot`), so the variance
                // is not the difference of two large sums.
                let pivot = values
                    .iter()
                    .copied()
                    .find(|x| x.is_finite())
                    .unwrap_or(0.0);
                let z = zeros as f64;
                let (mut n, mut sum, mut sq) =
                    (z, -z * f64::from(pivot), z * f64::from(pivot).powi(2));
                for block in values.chunks(1024) {
                    let (mut c8, mut s8, mut q8) = ([0f32; 8], [0f32; 8], [0f32; 8]);
                    let lanes = block.chunks_exact(8);
                    let rest = lanes.remainder();
                    for c in lanes {
                        for k in 0..8 {
                            let ok = c[k].is_finite();
                            let x = if ok { c[k] - pivot } else { 0.0 };
                            c8[k] += if ok { 1.0 } else { 0.0 };
                            s8[k] += x;
                            q8[k] += x * x;
                        }
                    }
                    for &x in rest.iter().filter(|x| x.is_finite()) {
                        let x = x - pivot;
                        c8[0] += 1.0;
                        s8[0] += x;
                        q8[0] += x * x;
                    }
                    let fold = |v: [f32; 8]| v.iter().map(|&x| f64::from(x)).sum::<f64>();
                    n += fold(c8);
                    sum += fold(s8);
                    sq += fold(q8);
                }
                if n == 0.0 {
                    return Calibration::Unchanged;
                }
                let shifted = sum / n;
                let mean = f64::from(pivot) + shifted;
                let sd = (sq / n - shifted * shifted).max(0.0).sqrt();
                if sd < 1e-9 {
                    return Calibration::Average;
                }
                // f32 from here: the mapping runs per node and channel on every query.
                Calibration::Logistic {
                    mean: mean as f32,
                    scale: (PROBIT_SLOPE / sd) as f32,
                }
            }
            FusionMethod::Rrf => {
                let mut order: Vec<usize> = (0..values.len())
                    .filter(|&i| values[i].is_finite())
                    .collect();
                order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
                let mut out = vec![f32::NAN; values.len()];
                let mut rank = 0usize;
                let mut last = f32::NAN;
                for (r, &i) in order.iter().enumerate() {
                    // Ties share the better rank.
                    if values[i] != last {
                        rank = r + 1;
                        last = values[i];
                    }
                    out[i] = ((rrf_k + 1.0) / (rrf_k + rank as f64)) as f32;
                }
                Calibration::Ranked(out)
            }
        }
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

/// Fuses the dense, tag and lexical channels (BM25 by position, 0 = no shared word; empty
/// = no lexical query) per `cfg`, consuming the buffers. A channel with weight 0 is off.
/// Every node counts for each channel's statistics, but only the nodes that can be recalled
/// get a fused score: those whose raw score reaches `floor`, or, with no embedding channel,
/// that share a word with the query (the rest stay NaN; on a large graph that is most of
/// them, and the mapping is the costly part).
/// Complexity: O(n) (O(n log n) for rrf).
pub fn fuse_similarity(
    dense: DenseChannels,
    mut lexical: Vec<f32>,
    cfg: &FusionConfig,
    floor: f32,
) -> FusedSimilarity {
    let DenseChannels {
        dense: d,
        tag: t,
        raw,
        habit,
    } = dense;
    let n = d.len();
    // Lexical: present where a word is shared; the scoreable nodes sharing none count as
    // zeros for the statistics.
    let mut zeros = 0usize;
    lexical.resize(n, 0.0);
    for (l, r) in lexical.iter_mut().zip(&raw) {
        if *l <= 0.0 || !l.is_finite() {
            if r.is_finite() {
                zeros += 1;
            }
            *l = f32::NAN;
        }
    }
    let fit = |v: &[f32], zeros| Calibration::fit(v, cfg.method, cfg.rrf_k, zeros);
    let chans: Vec<(Channel, f32, &[f32], Calibration)> = [
        (Channel::Dense, cfg.dense, d.as_slice(), 0),
        (Channel::Tag, cfg.tag, t.as_slice(), 0),
        (Channel::Lexical, cfg.lexical, lexical.as_slice(), zeros),
    ]
    .into_iter()
    .filter(|(_, w, _, _)| *w > 0.0)
    .map(|(c, w, v, z)| (c, w as f32, v, fit(v, z)))
    .collect();
    let raw_lexical = cfg.method == FusionMethod::Raw;
    let mut score = vec![f32::NAN; n];
    let mut present = vec![0u8; n];
    let mut strong = vec![0u8; n];
    let mut candidates = Vec::new();
    for i in 0..n {
        let wanted = match raw.get(i) {
            Some(r) if r.is_finite() => *r >= floor,
            _ => lexical.get(i).is_some_and(|l| l.is_finite()),
        };
        if !wanted {
            continue;
        }
        let (mut num, mut den) = (0f32, 0f32);
        let (mut p, mut st) = (0u8, 0u8);
        for (c, w, v, cal) in &chans {
            let Some(&x) = v.get(i) else { continue };
            if !x.is_finite() {
                continue;
            }
            let x = cal.apply(i, x);
            num += w * x;
            den += w;
            p |= bit(*c);
            if x > 0.5 || (raw_lexical && *c == Channel::Lexical) {
                st |= bit(*c);
            }
        }
        if den > 0.0 {
            score[i] = num / den;
            present[i] = p;
            strong[i] = st;
            candidates.push(i as u32);
        }
    }
    FusedSimilarity {
        score,
        raw,
        present,
        strong,
        habit,
        candidates,
    }
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

    #[test]
    fn only_nodes_that_can_be_recalled_get_a_fused_score() {
        let dense = DenseChannels {
            dense: vec![0.9, 0.7, 0.5, f32::NAN],
            tag: vec![f32::NAN; 4],
            raw: vec![0.9, 0.7, 0.5, f32::NAN],
            habit: None,
        };
        let all = fuse_similarity(
            dense.clone(),
            vec![0.0, 0.0, 0.0, 2.0],
            &FusionConfig::default(),
            0.0,
        );
        let some = fuse_similarity(
            dense,
            vec![0.0, 0.0, 0.0, 2.0],
            &FusionConfig::default(),
            0.6,
        );
        // Above the floor: the same score (the statistics still count every node).
        assert_eq!(some.score[0], all.score[0]);
        assert_eq!(some.score[1], all.score[1]);
        assert!(some.score[2].is_nan());
        // No embedding channel: recalled on a shared word, whatever the floor.
        assert_eq!(some.score[3], all.score[3]);
        assert!(some.score[3].is_finite());
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
        let dense = DenseChannels {
            dense: vec![0.9, 0.9, 0.5, 0.5],
            tag: vec![0.8, f32::NAN, 0.9, 0.7],
            raw: vec![0.9, 0.9, 0.5, 0.5],
            habit: None,
        };
        let f = fuse_similarity(dense, vec![0.0; 4], &FusionConfig::default(), 0.0);
        assert!(f.score[1] >= f.score[0], "{:?}", f.score);
        assert_eq!(f.present[1], bit(Channel::Dense));
        assert_eq!(f.present[0], bit(Channel::Dense) | bit(Channel::Tag));
    }

    #[test]
    fn a_shared_rare_word_lifts_a_node() {
        let dense = DenseChannels {
            dense: vec![0.85, 0.84, 0.83, 0.849],
            tag: vec![f32::NAN; 4],
            raw: vec![0.85, 0.84, 0.83, 0.849],
            habit: None,
        };
        let f = fuse_similarity(
            dense,
            vec![0.0, 0.0, 0.0, 3.0],
            &FusionConfig::default(),
            0.0,
        );
        let best = (0..4)
            .max_by(|&a, &b| f.score[a].total_cmp(&f.score[b]))
            .unwrap();
        assert_eq!(best, 3, "{:?}", f.score);
        assert!(f.strong[3] & bit(Channel::Lexical) != 0);
    }
}
