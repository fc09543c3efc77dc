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

/// Calibrates one channel's scores (NaN = absent for that node) in place onto (0, 1] per
/// `method`; absent stays NaN. `zeros` more nodes count for the statistics with the value 0
/// only (the zero BM25 of nodes sharing no word), so a channel present for few nodes is
/// standardised against everyone it could have scored.
///
/// Complexity: O(n) for zscore and raw, O(n log n) for rrf.
pub fn calibrate_in_place(values: &mut [f32], method: FusionMethod, rrf_k: f64, zeros: usize) {
    match method {
        FusionMethod::Raw => {
            let max = values
                .iter()
                .copied()
                .filter(|x| x.is_finite())
                .fold(0f32, f32::max);
            if max > 1.0 {
                values.iter_mut().for_each(|x| *x /= max);
            }
        }
        FusionMethod::Zscore => {
            let (mut n, mut sum, mut sq) = (zeros as f64, 0f64, 0f64);
            for &x in values.iter().filter(|x| x.is_finite()) {
                let x = f64::from(x);
                n += 1.0;
                sum += x;
                sq += x * x;
            }
            if n == 0.0 {
                return;
            }
            let mean = sum / n;
            let sd = (sq / n - mean * mean).max(0.0).sqrt();
            if sd < 1e-9 {
                values
                    .iter_mut()
                    .filter(|x| x.is_finite())
                    .for_each(|x| *x = 0.5);
                return;
            }
            // f32 from here, and absent nodes skipped: this runs per node and channel on every
            // query.
            let (mean, scale) = (mean as f32, (PROBIT_SLOPE / sd) as f32);
            values
                .iter_mut()
                .filter(|x| x.is_finite())
                .for_each(|x| *x = 1.0 / (1.0 + (-(*x - mean) * scale).exp()));
        }
        FusionMethod::Rrf => {
            let mut order: Vec<usize> = (0..values.len())
                .filter(|&i| values[i].is_finite())
                .collect();
            order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
            let mut rank = 0usize;
            let mut last = f32::NAN;
            let ranked: Vec<(usize, f32)> = order
                .iter()
                .enumerate()
                .map(|(r, &i)| {
                    // Ties share the better rank.
                    if values[i] != last {
                        rank = r + 1;
                        last = values[i];
                    }
                    (i, ((rrf_k + 1.0) / (rrf_k + rank as f64)) as f32)
                })
                .collect();
            for (i, c) in ranked {
                values[i] = c;
            }
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
    /// Fused calibrated score in [0, 1] (NaN: no channel has anything for the node).
    pub score: Vec<f32>,
    /// The seed's fused cosine, the scale of the model's similarity floor.
    pub raw: Vec<f32>,
    /// Per node: which channels were present (bit per [`Channel`] order).
    pub present: Vec<u8>,
    /// Per node: which channels scored above their median (what the trace names).
    pub strong: Vec<u8>,
    /// The habit the query describes ([`DenseChannels::habit`]).
    pub habit: Option<u32>,
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
/// Complexity: O(n) (O(n log n) for rrf).
pub fn fuse_similarity(
    dense: DenseChannels,
    mut lexical: Vec<f32>,
    cfg: &FusionConfig,
) -> FusedSimilarity {
    let DenseChannels {
        dense: mut d,
        tag: mut t,
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
    calibrate_in_place(&mut d, cfg.method, cfg.rrf_k, 0);
    calibrate_in_place(&mut t, cfg.method, cfg.rrf_k, 0);
    calibrate_in_place(&mut lexical, cfg.method, cfg.rrf_k, zeros);
    let chans: Vec<(Channel, f32, &[f32])> = [
        (Channel::Dense, cfg.dense, d.as_slice()),
        (Channel::Tag, cfg.tag, t.as_slice()),
        (Channel::Lexical, cfg.lexical, lexical.as_slice()),
    ]
    .into_iter()
    .filter(|(_, w, _)| *w > 0.0)
    .map(|(c, w, v)| (c, w as f32, v))
    .collect();
    let raw_lexical = cfg.method == FusionMethod::Raw;
    let mut score = vec![f32::NAN; n];
    let mut present = vec![0u8; n];
    let mut strong = vec![0u8; n];
    for i in 0..n {
        let (mut num, mut den) = (0f32, 0f32);
        let (mut p, mut st) = (0u8, 0u8);
        for (c, w, cal) in &chans {
            let Some(&x) = cal.get(i) else { continue };
            if !x.is_finite() {
                continue;
            }
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
        }
    }
    FusedSimilarity {
        score,
        raw,
        present,
        strong,
        habit,
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
        let f = fuse_similarity(dense, vec![0.0; 4], &FusionConfig::default());
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
        let f = fuse_similarity(dense, vec![0.0, 0.0, 0.0, 3.0], &FusionConfig::default());
        let best = (0..4)
            .max_by(|&a, &b| f.score[a].total_cmp(&f.score[b]))
            .unwrap();
        assert_eq!(best, 3, "{:?}", f.score);
        assert!(f.strong[3] & bit(Channel::Lexical) != 0);
    }
}
