//! Vector arithmetic shared by every scan over embeddings: the dot-product kernels (f32 × f32
//! and f32 × int8, AVX2+FMA when the CPU has them), [`max_dot`], [`l2_normalise`] and [`unit_vector`]. Plain
//! functions on slices: no model, no storage (that is `field_vectors.rs`).

/// The L2 norm of `v` when it is finite and positive, i.e. when `v` has a direction.
/// Complexity: O(dim).
pub fn unit_norm(v: &[f32]) -> Option<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    (norm.is_finite() && norm > 0.0).then_some(norm)
}

/// `v` scaled to unit L2 norm; `None` for a zero or non-finite-norm vector (no direction).
/// Complexity: O(dim).
pub fn unit_vector(v: &[f32]) -> Option<Vec<f32>> {
    unit_norm(v).map(|norm| v.iter().map(|x| x / norm).collect())
}

/// Scales `v` to unit L2 norm in place; zero and non-finite-norm vectors become all-zero.
pub fn l2_normalise(v: &mut [f32]) {
    match unit_norm(v) {
        Some(norm) => v.iter_mut().for_each(|x| *x /= norm),
        None => v.iter_mut().for_each(|x| *x = 0.0),
    }
}

/// Dot product of the common prefix of `a` and `b`. Uses AVX2+FMA when the CPU has them
/// (checked once at run time; similarity is dominated by this loop), else a portable loop
/// with eight independent accumulators. Complexity: O(dim).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            return unsafe { dot_avx2(a, b) };
        }
    }
    dot_portable(a, b)
}

#[inline]
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]);
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// AVX2/FMA dot product: four 8-lane accumulators hide the FMA latency.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` and `b` must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    let mut s = 0f32;
    // SAFETY: every load reads 8 floats at offsets < n of both slices.
    unsafe {
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut acc2 = _mm256_setzero_ps();
        let mut acc3 = _mm256_setzero_ps();
        while i + 32 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
                acc1,
            );
            acc2 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 16)),
                _mm256_loadu_ps(pb.add(i + 16)),
                acc2,
            );
            acc3 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 24)),
                _mm256_loadu_ps(pb.add(i + 24)),
                acc3,
            );
            i += 32;
        }
        while i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
            i += 8;
        }
        let acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        for l in lanes {
            s += l;
        }
    }
    for j in i..n {
        s += a[j] * b[j];
    }
    s
}

/// Dot product of an f32 query with an int8 row (before the row's scale is applied).
/// AVX2+FMA when available. Complexity: O(dim).
#[inline]
pub fn dot_q8(q: &[f32], r: &[i8]) -> f32 {
    let n = q.len().min(r.len());
    let (q, r) = (&q[..n], &r[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            return unsafe { dot_q8_avx2(q, r) };
        }
    }
    let mut acc = [0f32; 8];
    let cq = q.chunks_exact(8);
    let cr = r.chunks_exact(8);
    let (rq, rr) = (cq.remainder(), cr.remainder());
    for (x, y) in cq.zip(cr) {
        for i in 0..8 {
            acc[i] += x[i] * f32::from(y[i]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in rq.iter().zip(rr) {
        s += x * f32::from(*y);
    }
    s
}

/// # Safety
/// The CPU must support AVX2 and FMA; `q` and `r` must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_q8_avx2(q: &[f32], r: &[i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = q.len().min(r.len());
    let (pq, pr) = (q.as_ptr(), r.as_ptr());
    let mut i = 0;
    let mut s = 0f32;
    // SAFETY: every load reads 8 elements at offsets < n of both slices.
    unsafe {
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let widen = |p: *const i8| {
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)))
        };
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(i)), widen(pr.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(i + 8)), widen(pr.add(i + 8)), acc1);
            i += 16;
        }
        while i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(i)), widen(pr.add(i)), acc0);
            i += 8;
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(acc0, acc1));
        for l in lanes {
            s += l;
        }
    }
    for j in i..n {
        s += q[j] * f32::from(r[j]);
    }
    s
}

/// Max dot product of `q` against each `dim`-sized row of `rows`; `None` when there are no
/// rows. Complexity: O(rows × dim).
#[inline]
pub fn max_dot(q: &[f32], rows: &[f32], dim: usize) -> Option<f32> {
    if rows.is_empty() || dim == 0 {
        return None;
    }
    rows.chunks_exact(dim).map(|r| dot(q, r)).reduce(f32::max)
}
