//! The long-term index's int8 rows, laid out for the CPU's integer dot-product instructions.
//!
//! Rows are interleaved in blocks of [`BLOCK`] (16): row `i` is lane `i % 16` of block
//! `i / 16`, and elements `4g..4g + 4` of every row of a block sit side by side in the
//! block's `g`-th 64 bytes. One 64-byte load thus holds four elements of sixteen rows;
//! AVX-512 VNNI's `vpdpbusd` multiplies them by four query bytes broadcast to every lane and
//! adds the products into sixteen row sums at once. A query costs ⌈dim/4⌉ instructions per
//! sixteen rows and no horizontal sums, where the row-major i16 kernels
//! (`retrieval::field_vectors`) widen every row and sum sixteen lanes per row and query:
//! a recall's five query vectors over 100k rows took 8.5 ms on two threads there, bound by
//! the instructions, not by the 38 MB read.
//!
//! `vpdpbusd` takes one unsigned operand, so the rows are stored offset by 128 (`r + 128`
//! as `u8`) and the query's `128 · Σq` is subtracted from each sum. The query is int8 too
//! (per-query scale): the scan only proposes candidates, which `WorkingMemory::seeds`
//! re-scores on the stored f32 vectors. Every kernel — AVX-512 VNNI, AVX2 (`vpmaddwd` on
//! widened bytes) and the portable one — computes the same integer sums, so the scores are
//! the same bit for bit whichever runs.

use crate::retrieval::field_vectors::quantise_q8;

/// Rows per block: the lanes of one 512-bit register of i32 sums.
pub(super) const BLOCK: usize = 16;

/// Elements of a row per 4-byte group (the products `vpdpbusd` sums into one lane).
const GROUP: usize = 4;

/// Bytes of one group of one block: four elements of sixteen rows.
const GROUP_BYTES: usize = BLOCK * GROUP;

/// Above this dimension the SIMD kernels' i32 sums could overflow (⌈dim/4⌉ · 4 · 255 · 127
/// must stay below 2³¹); such rows use the portable kernel, which sums in i64.
const MAX_SIMD_DIM: usize = 65_536;

/// The scores of one block's rows for one query, by lane.
pub(super) type BlockScores = [f32; BLOCK];

/// int8 rows of one dimension in blocks of [`BLOCK`], with a scale per row.
#[derive(Debug, Clone, Default)]
pub(super) struct BlockRows {
    dim: usize,
    groups: usize,
    len: usize,
    /// `blocks × groups × 64` bytes, each an element plus 128; padding (elements past `dim`,
    /// lanes past `len`) holds 128, the element 0.
    bytes: Vec<u8>,
    /// One per lane of every block (0 past `len`).
    scales: Vec<f32>,
}

/// A query prepared for [`BlockRows::scan`]: its int8 copy packed per group of four.
#[derive(Debug, Clone)]
pub(super) struct ScanQuery {
    /// The four int8 elements of each group as one little-endian word (what `vpdpbusd`
    /// broadcasts).
    words: Vec<i32>,
    /// The same four elements widened to i16, as one little-endian quad (what the AVX2
    /// kernel broadcasts).
    quads: Vec<i64>,
    /// `128 · Σq`: what the rows' +128 offset adds to each sum.
    offset: i64,
    scale: f32,
}

impl ScanQuery {
    /// The int8 copy (scale `max|x|/127`) of `v`, for rows of `v.len()` elements.
    /// Complexity: O(dim).
    pub(super) fn new(v: &[f32]) -> Self {
        let mut q = Vec::with_capacity(v.len().div_ceil(GROUP) * GROUP);
        let scale = quantise_q8(v, &mut q);
        q.resize(v.len().div_ceil(GROUP) * GROUP, 0);
        let words = q
            .chunks_exact(GROUP)
            .map(|c| i32::from_le_bytes([c[0] as u8, c[1] as u8, c[2] as u8, c[3] as u8]))
            .collect();
        let quads = q
            .chunks_exact(GROUP)
            .map(|c| {
                c.iter().enumerate().fold(0i64, |w, (t, &x)| {
                    w | (i64::from(i16::from(x) as u16) << (16 * t))
                })
            })
            .collect();
        let offset = 128 * q.iter().map(|&x| i64::from(x)).sum::<i64>();
        ScanQuery {
            words,
            quads,
            offset,
            scale,
        }
    }
}

impl BlockRows {
    /// No rows, of dimension `dim`.
    pub(super) fn new(dim: usize) -> Self {
        BlockRows {
            dim,
            groups: dim.div_ceil(GROUP),
            ..Default::default()
        }
    }

    /// Rows held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Blocks held (the last one may be partly filled).
    pub(super) fn blocks(&self) -> usize {
        self.len.div_ceil(BLOCK)
    }

    /// Bytes of row data and scales held. Complexity: O(1).
    pub(super) fn bytes(&self) -> usize {
        self.bytes.len() + 4 * self.scales.len()
    }

    fn block_bytes(&self) -> usize {
        self.groups * GROUP_BYTES
    }

    /// Where row `slot`'s first four bytes are: its block, then its lane.
    fn row_base(&self, slot: usize) -> usize {
        (slot / BLOCK) * self.block_bytes() + (slot % BLOCK) * GROUP
    }

    /// Appends the int8 copy of the normalised `v` (`dim` elements) as row `len`.
    /// Complexity: O(dim), amortised.
    pub(super) fn push(&mut self, v: &[f32]) {
        if self.len.is_multiple_of(BLOCK) {
            let grown = self.bytes.len() + self.block_bytes();
            self.bytes.resize(grown, 128);
            self.scales.resize(self.scales.len() + BLOCK, 0.0);
        }
        self.len += 1;
        self.set(self.len - 1, v);
    }

    /// Overwrites row `slot` (< `len`) with the int8 copy of `v`. Complexity: O(dim).
    pub(super) fn set(&mut self, slot: usize, v: &[f32]) {
        let mut q = Vec::with_capacity(self.dim);
        let scale = quantise_q8(v, &mut q);
        q.resize(self.groups * GROUP, 0);
        self.write_row(slot, &q, scale);
    }

    /// Moves the last row into `slot` and drops the last slot (a swap-remove).
    /// Complexity: O(dim).
    pub(super) fn swap_remove(&mut self, slot: usize) {
        let Some(last) = self.len.checked_sub(1) else {
            return;
        };
        if slot < last {
            let (row, scale) = self.row(last);
            self.write_row(slot, &row, scale);
        }
        let blank = vec![0i8; self.groups * GROUP];
        self.write_row(last, &blank, 0.0);
        self.len = last;
        if self.len.is_multiple_of(BLOCK) {
            self.bytes.truncate(self.blocks() * self.block_bytes());
            self.scales.truncate(self.blocks() * BLOCK);
        }
    }

    /// Row `slot`'s int8 elements (padded to whole groups) and scale.
    pub(super) fn row(&self, slot: usize) -> (Vec<i8>, f32) {
        let base = self.row_base(slot);
        let row = (0..self.groups)
            .flat_map(|g| {
                let at = base + g * GROUP_BYTES;
                self.bytes[at..at + GROUP].iter().map(|&b| (b ^ 0x80) as i8)
            })
            .collect();
        (row, self.scales[slot])
    }

    fn write_row(&mut self, slot: usize, q: &[i8], scale: f32) {
        let base = self.row_base(slot);
        for (g, four) in q.chunks_exact(GROUP).enumerate() {
            let at = base + g * GROUP_BYTES;
            for (b, &x) in self.bytes[at..at + GROUP].iter_mut().zip(four) {
                *b = (x as u8) ^ 0x80;
            }
        }
        self.scales[slot] = scale;
    }

    /// Calls `f(first slot, scores)` for every block of `blocks` (a range of block numbers,
    /// clamped to those held), where `scores[p][lane]` is
    /// `(Σ q_p·row) as f32 · scale_p · row scale` over the int8 copies: the rows'
    /// approximate cosines when rows and queries are normalised. Lanes past `len` in the last
    /// block carry 0 and must be ignored. Queries of another dimension score 0.
    /// Complexity: O(rows × queries × dim / 64) SIMD instructions.
    pub(super) fn scan(
        &self,
        queries: &[ScanQuery],
        blocks: std::ops::Range<usize>,
        f: impl FnMut(usize, &[BlockScores]),
    ) {
        let blocks = blocks.start.min(self.blocks())..blocks.end.min(self.blocks());
        let fits = queries.iter().all(|q| q.words.len() == self.groups);
        if !fits {
            let mut f = f;
            let zeros = vec![[0.0; BLOCK]; queries.len()];
            for b in blocks {
                f(b * BLOCK, &zeros);
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.dim <= MAX_SIMD_DIM {
            if has_avx512_vnni() {
                // SAFETY: AVX-512 F, BW and VNNI checked just above; every query has the
                // rows' group count (checked above).
                unsafe { self.scan_avx512(queries, blocks, f) };
                return;
            }
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 checked just above; the queries fit as above.
                unsafe { self.scan_avx2(queries, blocks, f) };
                return;
            }
        }
        self.scan_with(queries, blocks, f, block_portable);
    }

    /// [`BlockRows::scan`] with `kernel` computing one block's scores for all queries.
    #[inline(always)]
    fn scan_with(
        &self,
        queries: &[ScanQuery],
        blocks: std::ops::Range<usize>,
        mut f: impl FnMut(usize, &[BlockScores]),
        kernel: impl Fn(&[u8], &[f32], &[ScanQuery], &mut [BlockScores]),
    ) {
        let size = self.block_bytes();
        let mut out = vec![[0.0; BLOCK]; queries.len()];
        for b in blocks {
            let (Some(block), Some(scales)) = (
                self.bytes.get(b * size..(b + 1) * size),
                self.scales.get(b * BLOCK..(b + 1) * BLOCK),
            ) else {
                return;
            };
            kernel(block, scales, queries, &mut out);
            f(b * BLOCK, &out);
        }
    }

    /// [`BlockRows::scan`] with the AVX-512 VNNI kernel inlined.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI; every query must have the rows' group
    /// count; `dim` ≤ [`MAX_SIMD_DIM`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn scan_avx512(
        &self,
        queries: &[ScanQuery],
        blocks: std::ops::Range<usize>,
        f: impl FnMut(usize, &[BlockScores]),
    ) {
        self.scan_with(queries, blocks, f, |block, scales, qs, out| {
            // SAFETY: the features are enabled for this function; the caller's contract.
            unsafe { block_avx512(block, scales, qs, out) }
        });
    }

    /// [`BlockRows::scan`] with the AVX2 kernel inlined.
    ///
    /// # Safety
    /// The CPU must support AVX2; every query must have the rows' group count; `dim` ≤
    /// [`MAX_SIMD_DIM`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn scan_avx2(
        &self,
        queries: &[ScanQuery],
        blocks: std::ops::Range<usize>,
        f: impl FnMut(usize, &[BlockScores]),
    ) {
        self.scan_with(queries, blocks, f, |block, scales, qs, out| {
            // SAFETY: AVX2 is enabled for this function; the caller's contract.
            unsafe { block_avx2(block, scales, qs, out) }
        });
    }
}

/// The score of an integer sum, in the one order every kernel uses.
#[inline(always)]
fn score(sum: i64, q: &ScanQuery, row_scale: f32) -> f32 {
    sum as f32 * q.scale * row_scale
}

/// One block's scores for every query, in plain Rust (sums in i64: any dimension).
fn block_portable(block: &[u8], scales: &[f32], queries: &[ScanQuery], out: &mut [BlockScores]) {
    for (q, o) in queries.iter().zip(out.iter_mut()) {
        let mut sums = [0i64; BLOCK];
        for (group, &word) in block.chunks_exact(GROUP_BYTES).zip(&q.words) {
            let w = word.to_le_bytes().map(|b| i64::from(b as i8));
            for (sum, row) in sums.iter_mut().zip(group.chunks_exact(GROUP)) {
                *sum += row
                    .iter()
                    .zip(w)
                    .map(|(&r, x)| i64::from(r) * x)
                    .sum::<i64>();
            }
        }
        for ((o, sum), &s) in o.iter_mut().zip(sums).zip(scales) {
            *o = score(sum - q.offset, q, s);
        }
    }
}

/// True when the CPU has AVX-512 BW and VNNI (checked once, then cached by the standard
/// library).
#[cfg(target_arch = "x86_64")]
fn has_avx512_vnni() -> bool {
    std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("avx512vnni")
}

/// Queries per pass of the AVX-512 kernel (two accumulators each: 16 of the 32 registers).
#[cfg(target_arch = "x86_64")]
const AVX512_QUERIES: usize = 8;

/// One block's scores for every query with `vpdpbusd`, up to [`AVX512_QUERIES`] queries per
/// pass over the block (a block is 6 KB at 384 dimensions: later passes read it from L1).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI; every query must have the block's group
/// count; the sums must fit in i32 (`dim` ≤ [`MAX_SIMD_DIM`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn block_avx512(
    block: &[u8],
    scales: &[f32],
    queries: &[ScanQuery],
    out: &mut [BlockScores],
) {
    for (qs, os) in queries
        .chunks(AVX512_QUERIES)
        .zip(out.chunks_mut(AVX512_QUERIES))
    {
        // SAFETY (each arm): the caller's contract, for a chunk of N queries.
        unsafe {
            match qs.len() {
                1 => block_avx512_n::<1>(block, scales, qs, os),
                2 => block_avx512_n::<2>(block, scales, qs, os),
                3 => block_avx512_n::<3>(block, scales, qs, os),
                4 => block_avx512_n::<4>(block, scales, qs, os),
                5 => block_avx512_n::<5>(block, scales, qs, os),
                6 => block_avx512_n::<6>(block, scales, qs, os),
                7 => block_avx512_n::<7>(block, scales, qs, os),
                _ => block_avx512_n::<8>(block, scales, qs, os),
            }
        }
    }
}

/// [`block_avx512`] for exactly `N` queries (`qs` and `out` hold at least `N`). Even and odd
/// groups go to separate accumulators, so one query's chain of `vpdpbusd` does not wait on
/// its own latency.
///
/// # Safety
/// As [`block_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn block_avx512_n<const N: usize>(
    block: &[u8],
    scales: &[f32],
    qs: &[ScanQuery],
    out: &mut [BlockScores],
) {
    use std::arch::x86_64::*;
    let groups = block.len() / GROUP_BYTES;
    let words: [&[i32]; N] = std::array::from_fn(|j| qs[j].words.as_slice());
    // SAFETY: every load reads 64 bytes of group g < groups of `block`; every query has
    // `groups` words (the caller's contract); `scales` and each `out` row hold 16 lanes.
    unsafe {
        // Two named arrays, not one indexed by parity: an indexed one lives on the stack.
        let (mut even, mut odd) = ([_mm512_setzero_si512(); N], [_mm512_setzero_si512(); N]);
        let p = block.as_ptr();
        let mut g = 0;
        while g + 2 <= groups {
            let r0 = _mm512_loadu_si512(p.add(g * GROUP_BYTES) as *const _);
            let r1 = _mm512_loadu_si512(p.add((g + 1) * GROUP_BYTES) as *const _);
            for j in 0..N {
                let w = words[j].as_ptr().add(g);
                even[j] = _mm512_dpbusd_epi32(even[j], r0, _mm512_set1_epi32(*w));
                odd[j] = _mm512_dpbusd_epi32(odd[j], r1, _mm512_set1_epi32(*w.add(1)));
            }
            g += 2;
        }
        if g < groups {
            let r0 = _mm512_loadu_si512(p.add(g * GROUP_BYTES) as *const _);
            for j in 0..N {
                let q = _mm512_set1_epi32(*words[j].get_unchecked(g));
                even[j] = _mm512_dpbusd_epi32(even[j], r0, q);
            }
        }
        let row_scales = _mm512_loadu_ps(scales.as_ptr());
        for j in 0..N {
            let sum = _mm512_sub_epi32(
                _mm512_add_epi32(even[j], odd[j]),
                _mm512_set1_epi32(qs[j].offset as i32),
            );
            let s = _mm512_mul_ps(
                _mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(qs[j].scale)),
                row_scales,
            );
            _mm512_storeu_ps(out[j].as_mut_ptr(), s);
        }
    }
}

/// One block's scores for every query with AVX2: each 16-byte quarter of a group (four
/// elements of four rows) widened to i16 and multiplied by the query's four elements with
/// `vpmaddwd` (pairs summed into i32), two queries per pass (16 registers).
///
/// # Safety
/// The CPU must support AVX2; every query must have the block's group count; the sums must
/// fit in i32 (`dim` ≤ [`MAX_SIMD_DIM`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_avx2(block: &[u8], scales: &[f32], queries: &[ScanQuery], out: &mut [BlockScores]) {
    use std::arch::x86_64::*;
    let groups = block.len() / GROUP_BYTES;
    for (qs, os) in queries.chunks(2).zip(out.chunks_mut(2)) {
        // SAFETY: every load reads 16 bytes inside group g < groups of `block`; every query
        // has `groups` quads (the caller's contract); `scales` and each `out` row hold 16
        // lanes.
        unsafe {
            // acc[j][k]: rows 4k..4k+4 of query j, two partial sums per row.
            let mut acc = [[_mm256_setzero_si256(); 4]; 2];
            let p = block.as_ptr();
            for g in 0..groups {
                let wide: [__m256i; 4] = std::array::from_fn(|k| {
                    _mm256_cvtepu8_epi16(_mm_loadu_si128(
                        p.add(g * GROUP_BYTES + 16 * k) as *const __m128i
                    ))
                });
                for (a, q) in acc.iter_mut().zip(qs) {
                    let quad = _mm256_set1_epi64x(*q.quads.get_unchecked(g));
                    for (ak, w) in a.iter_mut().zip(wide) {
                        *ak = _mm256_add_epi32(*ak, _mm256_madd_epi16(w, quad));
                    }
                }
            }
            for ((a, q), o) in acc.iter().zip(qs).zip(os.iter_mut()) {
                for half in 0..2 {
                    // hadd of rows 0–3 and 4–7 gives [r0 r1 r4 r5 | r2 r3 r6 r7].
                    let sums = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(
                        a[2 * half],
                        a[2 * half + 1],
                    ));
                    let sum = _mm256_sub_epi32(sums, _mm256_set1_epi32(q.offset as i32));
                    let s = _mm256_mul_ps(
                        _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(q.scale)),
                        _mm256_loadu_ps(scales.as_ptr().add(8 * half)),
                    );
                    _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// One block's kernel, as the tests call each directly.
    type Kernel = fn(&[u8], &[f32], &[ScanQuery], &mut [BlockScores]);

    fn random(rng: &mut SplitMix64, dim: usize) -> Vec<f32> {
        (0..dim)
            .map(|_| rng.next_f64() as f32 * 2.0 - 1.0)
            .collect()
    }

    /// Every (slot, query, score bits) a scan reports for the rows held.
    fn scores_of(
        rows: &BlockRows,
        queries: &[ScanQuery],
        kernel: Option<Kernel>,
    ) -> Vec<(usize, usize, u32)> {
        let mut got = Vec::new();
        let mut sink = |first: usize, scores: &[BlockScores]| {
            for (p, lanes) in scores.iter().enumerate() {
                for (lane, s) in lanes.iter().enumerate() {
                    if first + lane < rows.len() {
                        got.push((first + lane, p, s.to_bits()));
                    }
                }
            }
        };
        match kernel {
            None => rows.scan(queries, 0..rows.blocks(), &mut sink),
            Some(k) => rows.scan_with(queries, 0..rows.blocks(), &mut sink, k),
        }
        got
    }

    /// The kernels named, each called directly where this CPU runs it.
    fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut out: Vec<(&'static str, Kernel)> = vec![("portable", block_portable)];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                out.push(("avx2", |b, s, q, o| {
                    // SAFETY: AVX2 checked when the list was made; the test's rows are small.
                    unsafe { block_avx2(b, s, q, o) }
                }));
            }
            if has_avx512_vnni() {
                out.push(("avx512", |b, s, q, o| {
                    // SAFETY: AVX-512 VNNI checked when the list was made; as above.
                    unsafe { block_avx512(b, s, q, o) }
                }));
            }
        }
        out
    }

    /// The plain definition: the int8 copies' integer dot product, scaled.
    fn reference(
        rows: &BlockRows,
        queries: &[ScanQuery],
        vs: &[Vec<f32>],
        qv: &[Vec<f32>],
    ) -> Vec<(usize, usize, u32)> {
        let mut out = Vec::new();
        for (slot, v) in vs.iter().enumerate() {
            let mut r = Vec::new();
            let rs = quantise_q8(v, &mut r);
            assert_eq!(rows.row(slot).1.to_bits(), rs.to_bits());
            for (p, (q, f)) in queries.iter().zip(qv).enumerate() {
                let mut qq = Vec::new();
                let qs = quantise_q8(f, &mut qq);
                let sum: i64 = r
                    .iter()
                    .zip(&qq)
                    .map(|(a, b)| i64::from(*a) * i64::from(*b))
                    .sum();
                assert_eq!(qs.to_bits(), q.scale.to_bits());
                out.push((slot, p, score(sum, q, rs).to_bits()));
            }
        }
        out.sort_unstable();
        out
    }

    /// Rows of `vs` scanned for the queries `qv` by the dispatching scan and by every kernel
    /// this CPU runs give the plain integer sums to the bit.
    fn assert_plain_sums(vs: &[Vec<f32>], qv: &[Vec<f32>], what: &str) {
        let mut rows = BlockRows::new(qv[0].len());
        vs.iter().for_each(|v| rows.push(v));
        let queries: Vec<ScanQuery> = qv.iter().map(|q| ScanQuery::new(q)).collect();
        let want = reference(&rows, &queries, vs, qv);
        let mut got = scores_of(&rows, &queries, None);
        got.sort_unstable();
        assert_eq!(got, want, "dispatch, {what}");
        for (name, k) in kernels() {
            let mut got = scores_of(&rows, &queries, Some(k));
            got.sort_unstable();
            assert_eq!(got, want, "{name}, {what}");
        }
    }

    /// Every kernel this CPU runs, and the dispatching scan, give the plain integer sums to
    /// the bit: dimensions around the group and block sizes, one to eleven queries (past one
    /// AVX-512 pass of eight), row counts that leave the last block partly filled.
    #[test]
    fn every_kernel_gives_the_plain_sums() {
        let mut rng = SplitMix64::new(11);
        for dim in [1, 3, 4, 5, 31, 64, 67, 384] {
            for (n, nq) in [(1, 1), (15, 2), (16, 5), (17, 8), (50, 9), (33, 11)] {
                let vs: Vec<Vec<f32>> = (0..n).map(|_| random(&mut rng, dim)).collect();
                let qv: Vec<Vec<f32>> = (0..nq).map(|_| random(&mut rng, dim)).collect();
                assert_plain_sums(&vs, &qv, &format!("dim {dim}, {n} rows, {nq} queries"));
            }
        }
    }

    /// The largest magnitudes (every element ±1 in rows and queries) sum without overflow.
    #[test]
    fn extreme_rows_sum_exactly() {
        let extremes = vec![vec![1.0f32; 384], vec![-1.0f32; 384]];
        assert_plain_sums(&extremes, &extremes, "±1 at 384 dimensions");
    }

    /// Rows set, swap-removed down to none and pushed again read back as written; a removed
    /// row's lane is blank (scale 0).
    #[test]
    fn rows_read_back_through_set_and_swap_remove() {
        let mut rng = SplitMix64::new(5);
        let dim = 10;
        let mut rows = BlockRows::new(dim);
        let mut model: Vec<Vec<f32>> = (0..35).map(|_| random(&mut rng, dim)).collect();
        model.iter().for_each(|v| rows.push(v));
        let check = |rows: &BlockRows, model: &[Vec<f32>]| {
            assert_eq!(rows.len(), model.len());
            assert_eq!(rows.bytes(), rows.blocks() * (3 * GROUP_BYTES + 4 * BLOCK));
            for (slot, v) in model.iter().enumerate() {
                let mut q = Vec::new();
                let s = quantise_q8(v, &mut q);
                q.resize(12, 0);
                assert_eq!(rows.row(slot), (q, s), "slot {slot}");
            }
        };
        check(&rows, &model);
        let v = random(&mut rng, dim);
        rows.set(7, &v);
        model[7] = v;
        check(&rows, &model);
        for slot in [0, 20, 31, 3] {
            rows.swap_remove(slot);
            model.swap_remove(slot);
            check(&rows, &model);
        }
        while !model.is_empty() {
            rows.swap_remove(0);
            model.swap_remove(0);
            check(&rows, &model);
        }
        assert_eq!(rows.bytes(), 0);
        let v = random(&mut rng, dim);
        rows.push(&v);
        check(&rows, &[v]);
    }

    /// A query of another dimension scores 0 everywhere (never a candidate by accident).
    #[test]
    fn a_query_of_another_dimension_scores_zero() {
        let mut rows = BlockRows::new(8);
        rows.push(&[1.0; 8]);
        let got = scores_of(&rows, &[ScanQuery::new(&[1.0; 12])], None);
        assert_eq!(got, vec![(0, 0, 0f32.to_bits())]);
    }
}
