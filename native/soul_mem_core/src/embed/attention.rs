//! Self-attention over packed windows: the rows of several windows one after another, each
//! window attending to its own tokens only (no padding, no mask).
//!
//! Plain loops rather than candle's batched matmuls: a chat message's window is ~20 tokens,
//! where candle spent more on allocating head tensors and asking `num_cpus` how many threads
//! its `gemm` may use (a read of `/proc/cpuinfo` per matmul: 6 % of a sentence) than on the
//! arithmetic. Compiled with AVX2 + FMA where the CPU has them.

use super::q4_matmul::Kernel;

/// Context vectors (`[Σ lens, hidden]`) for `qkv` (`[Σ lens, 3·hidden]`: each row its query,
/// key and value, head after head).
///
/// Complexity: O(heads · Σ len² · head_dim) multiply-adds and O(heads · Σ len²) `exp`s.
pub(crate) fn self_attention(qkv: &[f32], hidden: usize, heads: usize, lens: &[usize]) -> Vec<f32> {
    let total: usize = lens.iter().sum();
    let mut out = vec![0f32; total * hidden];
    if hidden == 0 || heads == 0 || qkv.len() < total * 3 * hidden {
        return out;
    }
    #[cfg(target_arch = "x86_64")]
    if Kernel::Avx2.available() {
        // SAFETY: AVX2 and FMA were detected (`Kernel::Avx2.available`).
        unsafe { attention_avx2(qkv, hidden, heads, lens, &mut out) };
        return out;
    }
    attention(qkv, hidden, heads, lens, &mut out);
    out
}

/// [`attention`] compiled with AVX2 + FMA.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attention_avx2(
    qkv: &[f32],
    hidden: usize,
    heads: usize,
    lens: &[usize],
    out: &mut [f32],
) {
    attention(qkv, hidden, heads, lens, out);
}

#[inline(always)]
fn attention(qkv: &[f32], hidden: usize, heads: usize, lens: &[usize], out: &mut [f32]) {
    let d = hidden / heads;
    let stride = 3 * hidden;
    let scale = 1.0 / (d as f32).sqrt();
    let mut probs = Vec::new();
    let mut start = 0;
    for &len in lens {
        probs.resize(len, 0f32);
        let row = |j: usize, part: usize, h: usize| {
            let at = (start + j) * stride + part * hidden + h * d;
            &qkv[at..at + d]
        };
        for h in 0..heads {
            for i in 0..len {
                let q = row(i, 0, h);
                let mut max = f32::NEG_INFINITY;
                for (j, p) in probs.iter_mut().enumerate() {
                    *p = dot(q, row(j, 1, h)) * scale;
                    max = max.max(*p);
                }
                let mut sum = 0f32;
                for p in probs.iter_mut() {
                    *p = (*p - max).exp();
                    sum += *p;
                }
                let inv = 1.0 / sum;
                let at = (start + i) * hidden + h * d;
                let ctx = &mut out[at..at + d];
                for (j, &p) in probs.iter().enumerate() {
                    let w = p * inv;
                    for (c, &v) in ctx.iter_mut().zip(row(j, 2, h)) {
                        *c = w.mul_add(v, *c);
                    }
                }
            }
        }
        start += len;
    }
}

/// Dot product in 8 independent lanes (so it vectorises), then their sum.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, a_tail) = a.split_at(a.len() / 8 * 8);
    let (b8, b_tail) = b.split_at(a8.len().min(b.len()));
    for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        for l in 0..8 {
            lanes[l] = x[l].mul_add(y[l], lanes[l]);
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Softmax attention in f64, window by window, head by head.
    fn reference(qkv: &[f32], hidden: usize, heads: usize, lens: &[usize]) -> Vec<f64> {
        let d = hidden / heads;
        let mut out = Vec::new();
        let mut start = 0;
        let get = |r: usize, c: usize| f64::from(qkv[r * 3 * hidden + c]);
        for &len in lens {
            for i in 0..len {
                for h in 0..heads {
                    let scores: Vec<f64> = (0..len)
                        .map(|j| {
                            (0..d)
                                .map(|t| {
                                    get(start + i, h * d + t) * get(start + j, hidden + h * d + t)
                                })
                                .sum::<f64>()
                                / (d as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for t in 0..d {
                        out.push(
                            (0..len)
                                .map(|j| e[j] / sum * get(start + j, 2 * hidden + h * d + t))
                                .sum(),
                        );
                    }
                }
            }
            start += len;
        }
        out
    }

    #[test]
    fn packed_windows_attend_to_themselves_only() {
        let (hidden, heads) = (36, 3); // head_dim 12: exercises the dot product's tail
        let lens = [1, 5, 17];
        let mut rng = SplitMix64::new(3);
        let qkv: Vec<f32> = (0..lens.iter().sum::<usize>() * 3 * hidden)
            .map(|_| 4.0 * rng.next_f64() as f32 - 2.0)
            .collect();
        let got = self_attention(&qkv, hidden, heads, &lens);
        let want = reference(&qkv, hidden, heads, &lens);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((f64::from(*g) - w).abs() < 1e-5, "{g} vs {w}");
        }
        // The last window alone gives the same rows, to the bit.
        let tail = self_attention(&qkv[6 * 3 * hidden..], hidden, heads, &lens[2..]);
        assert_eq!(tail, got[6 * hidden..]);
    }
}
