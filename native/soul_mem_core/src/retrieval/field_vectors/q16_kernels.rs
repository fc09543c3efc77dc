//! The i16 × int8 dot-product kernels of the row scans: a [`QVec`]'s 16-bit copy against
//! int8 rows, summed exactly in integers (so both kernels give the same sums, bit for bit),
//! with the CPU's widest instructions chosen at run time — AVX-512 VNNI (`vpdpwssd`: 32
//! products and their sum in one instruction) where present, else AVX2 (`vpmaddwd`). Without
//! either, the scans fall back to the f32 × int8 product (`dot_q8`), equal within
//! rounding.

use super::QVec;

/// Rows longer than this use the f32 × int8 path: the i16 × i8 path accumulates pairs of
/// products in i32 lanes, which stays exact only up to this dimension.
pub(super) const MAX_I16_DIM: usize = 4096;

/// How many rows ahead the scan prefetches: the hardware prefetcher alone leaves the scan
/// ~10% short of its bandwidth (measured: 8 rows ≈ 16 and 32, all better than 4 and 0).
pub(super) const PREFETCH_ROWS: usize = 8;

/// `Σ q16·r` over int8 rows with AVX2 `madd_epi16` (16 products per instruction).
///
/// # Safety
/// The CPU must support AVX2; `q` and `r` must have the same length ≤ [`MAX_I16_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_i16_i8_avx2(q: &[i16], r: &[i8]) -> i64 {
    use std::arch::x86_64::*;
    let n = q.len().min(r.len());
    let (pq, pr) = (q.as_ptr(), r.as_ptr());
    let mut i = 0;
    let mut s: i64 = 0;
    // SAFETY: every load reads 16 elements at offsets < n of both slices.
    unsafe {
        let mut acc0 = _mm256_setzero_si256();
        let mut acc1 = _mm256_setzero_si256();
        while i + 32 <= n {
            let r0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(pr.add(i) as *const __m128i));
            let r1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(pr.add(i + 16) as *const __m128i));
            let q0 = _mm256_loadu_si256(pq.add(i) as *const __m256i);
            let q1 = _mm256_loadu_si256(pq.add(i + 16) as *const __m256i);
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(q0, r0));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(q1, r1));
            i += 32;
        }
        while i + 16 <= n {
            let r0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(pr.add(i) as *const __m128i));
            let q0 = _mm256_loadu_si256(pq.add(i) as *const __m256i);
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(q0, r0));
            i += 16;
        }
        let mut lanes = [0i32; 8];
        _mm256_storeu_si256(
            lanes.as_mut_ptr() as *mut __m256i,
            _mm256_add_epi32(acc0, acc1),
        );
        for l in lanes {
            s += i64::from(l);
        }
    }
    for j in i..n {
        s += i64::from(q[j]) * i64::from(r[j]);
    }
    s
}

/// The scaled dot products of one int8 row (scale `row_scale`) with every query, into
/// `out[p]` (`out` as long as `queries`), with AVX2 `madd_epi16` (the row widened again for
/// every query).
///
/// # Safety
/// The CPU must support AVX2; every query's `q16` must have `r`'s length ≤ [`MAX_I16_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn scaled_dots_avx2(
    queries: &[&QVec],
    r: &[i8],
    row_scale: f32,
    out: &mut [f32],
) {
    for (o, q) in out.iter_mut().zip(queries) {
        // SAFETY: AVX2 is enabled for this function; equal lengths ≤ MAX_I16_DIM.
        *o = (unsafe { dot_i16_i8_avx2(&q.q16, r) }) as f32 * q.scale * row_scale;
    }
}

/// Asks the CPU to bring the `len` bytes at `at` into cache (no-op off x86_64). A prefetch
/// never faults, whatever the address: past the end of a buffer it is a hint that goes unused.
#[inline(always)]
pub(super) fn prefetch(at: *const i8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for k in (0..len).step_by(64) {
        // SAFETY: a prefetch never faults; SSE is baseline on x86_64.
        unsafe {
            std::arch::x86_64::_mm_prefetch(at.wrapping_add(k), std::arch::x86_64::_MM_HINT_T0)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, len);
}

/// True when the CPU has AVX-512 BW and VNNI (checked once, then cached by the standard
/// library).
#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx512_vnni() -> bool {
    std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("avx512vnni")
}

/// The scaled dot products of one int8 row (scale `row_scale`) with every query, into
/// `out[p]` (`out` as long as `queries`): the row is widened to i16 once per 32 elements and
/// run against up to four queries at a time with `vpdpwssd` (a 384-dim row: 12 widenings
/// and 12 `vpdpwssd` per query, where the AVX2 kernel widens the row again for every
/// query). The sums equal the AVX2 kernel's exactly.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI; every query's `q16` must have `r`'s length
/// ≤ [`MAX_I16_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
pub(super) unsafe fn scaled_dots_avx512(
    queries: &[&QVec],
    r: &[i8],
    row_scale: f32,
    out: &mut [f32],
) {
    let mut p = 0;
    while p < queries.len() {
        let q = &queries[p..];
        // SAFETY (each arm): AVX-512 F/BW/VNNI are enabled for this function; the queries
        // have the row's length.
        let (sums, taken): ([i64; 4], usize) = match q.len() {
            1 => pad(unsafe { dots_avx512([&q[0].q16], r) }),
            2 => pad(unsafe { dots_avx512([&q[0].q16, &q[1].q16], r) }),
            3 => pad(unsafe { dots_avx512([&q[0].q16, &q[1].q16, &q[2].q16], r) }),
            _ => pad(unsafe { dots_avx512([&q[0].q16, &q[1].q16, &q[2].q16, &q[3].q16], r) }),
        };
        for ((o, sum), qv) in out.iter_mut().skip(p).zip(sums).zip(q).take(taken) {
            *o = sum as f32 * qv.scale * row_scale;
        }
        p += taken;
    }
}

/// `N ≤ 4` sums in an array of four, with `N`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn pad<const N: usize>(sums: [i64; N]) -> ([i64; 4], usize) {
    let mut out = [0i64; 4];
    for (o, s) in out.iter_mut().zip(sums) {
        *o = s;
    }
    (out, N)
}

/// `Σ q16·r` of one int8 row against `N` queries: the row widened to i16 once per 32
/// elements, one `vpdpwssd` per query; lanes summed in i64; the tail past a multiple of 32
/// in plain Rust.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI; every `q` must have `r`'s length ≤
/// [`MAX_I16_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dots_avx512<const N: usize>(q: [&[i16]; N], r: &[i8]) -> [i64; N] {
    use std::arch::x86_64::*;
    let n = r.len();
    let full = n - n % 32;
    let mut out = [0i64; N];
    // SAFETY: every load reads 32 elements at offsets < full ≤ n of `r` and of each `q`.
    unsafe {
        let mut acc = [_mm512_setzero_si512(); N];
        let mut k = 0;
        while k < full {
            let rv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(r.as_ptr().add(k) as *const __m256i));
            for (a, qj) in acc.iter_mut().zip(q) {
                let qv = _mm512_loadu_si512(qj.as_ptr().add(k) as *const _);
                *a = _mm512_dpwssd_epi32(*a, rv, qv);
            }
            k += 32;
        }
        for (o, a) in out.iter_mut().zip(acc) {
            let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(a));
            let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(a));
            *o = _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
        }
    }
    for (o, qj) in out.iter_mut().zip(q) {
        for t in full..n {
            *o += i64::from(qj[t]) * i64::from(r[t]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Every (row, query, score) each x86 kernel this CPU can run reports, in order, by name
    /// (a machine that dispatches to AVX-512 still checks the AVX2 kernel).
    #[allow(unused_mut, unused_variables)]
    fn scans(queries: &[QVec], rows: &[i8], scales: &[f32]) -> Vec<(&'static str, Scores)> {
        let mut out = Vec::new();
        let refs: Vec<&QVec> = queries.iter().collect();
        let dim = queries[0].q16.len();
        let mut run = |name, dots: RowDots<'_>| {
            let mut got = Vec::new();
            let mut sums = vec![0f32; queries.len()];
            for (i, (r, s)) in rows.chunks_exact(dim).zip(scales).enumerate() {
                dots(r, *s, &mut sums);
                got.extend(sums.iter().enumerate().map(|(p, x)| (i, p, x.to_bits())));
            }
            out.push((name, got));
        };
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 checked just above; the queries have the rows' length ≤
                // MAX_I16_DIM.
                run("avx2", &|r, s, o| unsafe {
                    scaled_dots_avx2(&refs, r, s, o)
                });
            }
            if has_avx512_vnni() {
                // SAFETY: AVX-512 BW and VNNI checked just above; lengths as for AVX2.
                run("avx512", &|r, s, o| unsafe {
                    scaled_dots_avx512(&refs, r, s, o)
                });
            }
        }
        out
    }

    type Scores = Vec<(usize, usize, u32)>;

    /// A kernel's scaled sums of one row (and its scale) with every query.
    type RowDots<'a> = &'a dyn Fn(&[i8], f32, &mut [f32]);

    /// The portable answer: integer sums of the 16-bit copies, scaled as the kernels scale.
    fn reference(queries: &[QVec], rows: &[i8], scales: &[f32]) -> Scores {
        let dim = queries[0].q16.len();
        let mut out = Vec::new();
        for (i, (r, s)) in rows.chunks_exact(dim).zip(scales).enumerate() {
            for (p, q) in queries.iter().enumerate() {
                let sum: i64 = q
                    .q16
                    .iter()
                    .zip(r)
                    .map(|(a, b)| i64::from(*a) * i64::from(*b))
                    .sum();
                out.push((i, p, (sum as f32 * q.scale * s).to_bits()));
            }
        }
        out
    }

    /// Every kernel this CPU runs gives the portable sums to the bit: for dimensions around
    /// the vector widths, one to six queries, and the largest magnitudes at the largest
    /// dimension the kernels take.
    #[test]
    fn every_kernel_gives_the_portable_sums() {
        let check = |queries: &[QVec], rows: &[i8], scales: &[f32], what: &str| {
            let want = reference(queries, rows, scales);
            for (name, got) in scans(queries, rows, scales) {
                assert_eq!(got, want, "{name}: {what}");
            }
        };
        let mut rng = SplitMix64::new(7);
        for dim in [1, 7, 16, 31, 32, 33, 95, 384, 1000] {
            for nq in 1..=6 {
                let queries: Vec<QVec> = (0..nq)
                    .map(|_| QVec::new((0..dim).map(|_| rng.next_f64() as f32 - 0.5).collect()))
                    .collect();
                let rows: Vec<i8> = (0..dim * 21)
                    .map(|_| (rng.below(255) as i32 - 127) as i8)
                    .collect();
                let scales: Vec<f32> = (0..21).map(|_| rng.next_f64() as f32).collect();
                check(
                    &queries,
                    &rows,
                    &scales,
                    &format!("dim {dim}, {nq} queries"),
                );
            }
        }
        let dim = MAX_I16_DIM;
        let queries = vec![QVec::new(vec![1.0; dim]), QVec::new(vec![-1.0; dim])];
        let rows: Vec<i8> = [vec![127i8; dim], vec![-127i8; dim]].concat();
        check(&queries, &rows, &[1.0, 1.0], "largest magnitudes");
    }
}
