//! The vector side of similarity: what text of a note gets embedded, the [`TextEmbedder`]
//! trait a model plugs in through, a cheap deterministic [`HashEmbedder`], and the
//! [`NodeVectors`] matrix store that similarity scans.

use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::{AbstractSituation, MemoryId, MemoryNote, MemoryType, Situation};
use std::collections::HashMap;

/// Which field of a note a vector encodes. Each kind has its own matrix in [`NodeVectors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldKind {
    /// A tag (all kinds). Stored once per distinct tag text.
    Tag,
    /// Semantic content and each alias (one row each).
    SemName,
    /// Semantic description.
    SemDescription,
    /// Specific-situation narrative; for abstract situations the rendered pattern
    /// ([`crate::model::abstract_text`]) as the narrative fallback.
    SitNarrative,
    /// Location name (and coordinates) of a specific situation or abstract location.
    SitLocation,
    /// Participant name (one row per participant).
    SitParticipantName,
    /// Participant role (one row per participant with a role).
    SitParticipantRole,
    /// Emotion name (one row per emotion).
    SitEmotion,
    /// Atmosphere and tone.
    SitEnvironment,
    /// Event: initiator, action, target (one row per event).
    SitEvent,
    /// Procedure action content.
    ProcAction,
}

impl FieldKind {
    /// Every kind that has a per-node matrix (all but [`FieldKind::Tag`]), in index order.
    pub const ROW_KINDS: [FieldKind; 10] = [
        FieldKind::SemName,
        FieldKind::SemDescription,
        FieldKind::SitNarrative,
        FieldKind::SitLocation,
        FieldKind::SitParticipantName,
        FieldKind::SitParticipantRole,
        FieldKind::SitEmotion,
        FieldKind::SitEnvironment,
        FieldKind::SitEvent,
        FieldKind::ProcAction,
    ];

    /// Index into [`FieldKind::ROW_KINDS`]; `None` for tags. O(1): it runs per scored row.
    #[inline]
    pub fn row_index(self) -> Option<usize> {
        Some(match self {
            FieldKind::Tag => return None,
            FieldKind::SemName => 0,
            FieldKind::SemDescription => 1,
            FieldKind::SitNarrative => 2,
            FieldKind::SitLocation => 3,
            FieldKind::SitParticipantName => 4,
            FieldKind::SitParticipantRole => 5,
            FieldKind::SitEmotion => 6,
            FieldKind::SitEnvironment => 7,
            FieldKind::SitEvent => 8,
            FieldKind::ProcAction => 9,
        })
    }
}

/// Query or passage side of an asymmetric embedding model (BGE prepends an instruction to
/// queries); symmetric models ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedKind {
    /// A retrieval query.
    Query,
    /// A stored memory text.
    Passage,
}

/// Anything that turns texts into vectors of a fixed dimension. Implementations should return
/// L2-normalised vectors (similarity is a plain dot product); an empty text may map to a zero
/// vector.
pub trait TextEmbedder {
    /// Output dimension.
    fn dim(&self) -> usize;
    /// One vector per input text, in order.
    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>>;
}

/// A deterministic lexical embedder: feature hashing of character 1-, 2- and 3-grams.
///
/// Text is lower-cased; whitespace and punctuation split it into runs whose boundaries are
/// marked so that n-grams do not bridge words. Each n-gram is hashed (FNV-1a 64) to a bucket
/// and a sign, weighted 0.5 / 1.0 / 1.0 by length, summed and L2-normalised. Cosine similarity
/// then approximates overlap of character n-grams, which works for Chinese (where single
/// characters carry meaning) as well as for alphabetic scripts. No model, no I/O: meant for
/// tests, benchmarks and as a lexical fallback. Complexity: O(text length) per text.
#[derive(Debug, Clone, Copy)]
pub struct HashEmbedder {
    dim: usize,
}

impl HashEmbedder {
    /// An embedder with `dim` buckets; errors when `dim` is 0.
    pub fn new(dim: usize) -> Result<Self> {
        if dim == 0 {
            return Err(Error::invalid_argument("dim", "must be at least 1"));
        }
        Ok(HashEmbedder { dim })
    }

    /// The vector of one text.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        let lower = text.to_lowercase();
        for run in lower
            .split(|c: char| c.is_whitespace() || c.is_ascii_punctuation() || is_cjk_punct(c))
            .filter(|r| !r.is_empty())
        {
            // '\u{2}' / '\u{3}' mark the run boundaries.
            let chars: Vec<char> = std::iter::once('\u{2}')
                .chain(run.chars())
                .chain(std::iter::once('\u{3}'))
                .collect();
            for n in 1..=3usize {
                let weight = if n == 1 { 0.5 } else { 1.0 };
                for w in chars.windows(n) {
                    if n == 1 && (w[0] == '\u{2}' || w[0] == '\u{3}') {
                        continue;
                    }
                    let h = fnv1a(w);
                    let bucket = (h % self.dim as u64) as usize;
                    let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
                    v[bucket] += sign * weight;
                }
            }
        }
        l2_normalise(&mut v);
        v
    }
}

fn is_cjk_punct(c: char) -> bool {
    matches!(
        c,
        '，' | '。'
            | '、'
            | '；'
            | '：'
            | '？'
            | '！'
            | '“'
            | '”'
            | '‘'
            | '’'
            | '（'
            | '）'
            | '《'
            | '》'
            | '「'
            | '」'
            | '…'
            | '—'
            | '·'
    )
}

fn fnv1a(chars: &[char]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for c in chars {
        for b in (*c as u32).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    // Final avalanche so bucket (low bits) and sign (high bit) are independent.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

impl TextEmbedder for HashEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// Scales `v` to unit L2 norm in place; zero and non-finite-norm vectors become all-zero.
pub fn l2_normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm.is_finite() && norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    } else {
        v.iter_mut().for_each(|x| *x = 0.0);
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

/// A query vector with a 16-bit fixed-point copy for the int8 row scan. Derefs to the f32
/// values. The 16-bit copy (scale `max|x|/32767`) adds a relative error of about 1e-5.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QVec {
    f: Vec<f32>,
    q16: Vec<i16>,
    scale: f32,
}

impl QVec {
    /// Wraps `v` (used as given; normalise first when cosine is wanted).
    pub fn new(v: Vec<f32>) -> Self {
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 && max.is_finite() {
            max / 32767.0
        } else {
            0.0
        };
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let q16 = v
            .iter()
            .map(|x| (x * inv).round().clamp(-32767.0, 32767.0) as i16)
            .collect();
        QVec { f: v, q16, scale }
    }
}

impl std::ops::Deref for QVec {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.f
    }
}

/// Rows longer than this use the f32 × int8 path: the i16 × i8 path accumulates pairs of
/// products in i32 lanes, which stays exact only up to this dimension.
const MAX_I16_DIM: usize = 4096;

/// `Σ q16·r` over int8 rows with AVX2 `madd_epi16` (16 products per instruction).
///
/// # Safety
/// The CPU must support AVX2; `q` and `r` must have the same length ≤ [`MAX_I16_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_i16_i8_avx2(q: &[i16], r: &[i8]) -> i64 {
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

fn join(parts: &[&str], sep: &str) -> String {
    parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(sep)
}

/// The text of a location field ("name，coordinates").
pub(crate) fn location_text(name: &str, coordinates: &str) -> String {
    join(&[name, coordinates], "，")
}

/// The text of an environment field ("atmosphere，tone").
pub(crate) fn environment_text(atmosphere: &str, tone: &str) -> String {
    join(&[atmosphere, tone], "，")
}

/// The text of an event field ("initiator action target").
pub(crate) fn event_text(initiator: &str, action: &str, target: &str) -> String {
    join(&[initiator, action, target], " ")
}

/// Exactly the texts of `note` that must be embedded (passage side), with the field each
/// vector fills. Empty texts are left out.
///
/// Semantic: content, each alias, description (and its passages when long, see
/// [`crate::text::passages`]). Specific situation: narrative (and passages), location,
/// each participant's name and role, each emotion, environment, each event. Abstract
/// situation: its structured facet in the matching field(s) plus the rendered pattern as
/// narrative fallback. Procedure: action content. Every kind: each tag.
pub fn node_texts(note: &MemoryNote) -> Vec<(FieldKind, String)> {
    let mut out: Vec<(FieldKind, String)> = Vec::new();
    let mut add = |k: FieldKind, t: String| {
        if !t.trim().is_empty() {
            out.push((k, t.trim().to_owned()));
        }
    };
    match &note.mem_type {
        MemoryType::Semantic(s) => {
            add(FieldKind::SemName, s.content.clone());
            for a in &s.aliases {
                add(FieldKind::SemName, a.clone());
            }
            add(FieldKind::SemDescription, s.description.clone());
            for p in crate::text::passages(&s.description) {
                add(FieldKind::SemDescription, p);
            }
        }
        MemoryType::Situation(Situation::SpecificSituation(s)) => {
            add(FieldKind::SitNarrative, s.narrative.clone());
            for p in crate::text::passages(&s.narrative) {
                add(FieldKind::SitNarrative, p);
            }
            let c = &s.context;
            if let Some(l) = &c.location {
                add(
                    FieldKind::SitLocation,
                    location_text(&l.name, &l.coordinates),
                );
            }
            for p in &c.participants {
                add(FieldKind::SitParticipantName, p.name.clone());
                add(FieldKind::SitParticipantRole, p.role.clone());
            }
            for e in &c.emotions {
                add(FieldKind::SitEmotion, e.name.clone());
            }
            add(
                FieldKind::SitEnvironment,
                environment_text(&c.environment.atmosphere, &c.environment.tone),
            );
            for e in &c.event {
                add(
                    FieldKind::SitEvent,
                    event_text(&e.initiator, &e.action, &e.target),
                );
            }
        }
        MemoryType::Situation(Situation::AbstractSituation(a)) => {
            match a {
                AbstractSituation::Location(l) => add(
                    FieldKind::SitLocation,
                    location_text(&l.name, &l.coordinates),
                ),
                AbstractSituation::Participant(p) => {
                    add(FieldKind::SitParticipantName, p.name.clone());
                    add(FieldKind::SitParticipantRole, p.role.clone());
                }
                AbstractSituation::Environment(e) => add(
                    FieldKind::SitEnvironment,
                    environment_text(&e.atmosphere, &e.tone),
                ),
                AbstractSituation::Event(e) => add(
                    FieldKind::SitEvent,
                    event_text(&e.initiator, &e.action, &e.target),
                ),
            }
            add(FieldKind::SitNarrative, crate::model::abstract_text(a));
        }
        MemoryType::Procedure(p) => add(FieldKind::ProcAction, p.action.content.clone()),
    }
    for t in &note.tags {
        add(FieldKind::Tag, t.clone());
    }
    out
}

/// Rows of one field kind for all nodes: a row-major `rows × dim` matrix. A node's rows are
/// contiguous; their range is kept node-major in [`NodeVectors`] (one small array per node
/// for all fields, so the scan reads one offset stream instead of one per field).
///
/// Besides the f32 rows it keeps an int8 scan copy (per-row scale `max|x|/127`): similarity
/// streams every row of a field per query, so it is memory-bandwidth bound, and the int8 copy
/// moves 4× fewer bytes. For unit vectors of dimension ≥ 64 the cosine error is about 1e-3.
#[derive(Debug, Clone, Default)]
pub struct FieldMatrix {
    data: Vec<f32>,
    q8: Vec<i8>,
    scales: Vec<f32>,
    // The nodes that have rows here, ascending, and the end row of each (its rows start at
    // the previous end): the scan walks these two dense arrays instead of every node's
    // offsets.
    nodes: Vec<u32>,
    ends: Vec<u32>,
}

impl FieldMatrix {
    /// Rows `a..b` as one contiguous slice (`(b − a) × dim`); empty when out of range.
    #[inline]
    pub fn row_range(&self, a: usize, b: usize, dim: usize) -> &[f32] {
        self.data.get(a * dim..b * dim).unwrap_or(&[])
    }

    /// Int8 rows `a..b` and their scales; empty when out of range.
    #[inline]
    pub fn row_range_q8(&self, a: usize, b: usize, dim: usize) -> (&[i8], &[f32]) {
        match (self.q8.get(a * dim..b * dim), self.scales.get(a..b)) {
            (Some(r), Some(s)) => (r, s),
            _ => (&[], &[]),
        }
    }

    fn push_row(&mut self, v: &[f32]) {
        self.data.extend_from_slice(v);
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 0.0 };
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        self.q8.extend(
            v.iter()
                .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8),
        );
        self.scales.push(scale);
    }

    /// Number of rows over all nodes.
    pub fn rows(&self, dim: usize) -> usize {
        self.data.len().checked_div(dim).unwrap_or(0)
    }

    /// Streams the rows of the nodes in `lo..hi` once, in storage order, comparing each row
    /// with every probe while it is in cache; `kernel(q, row, scale)` is the scaled dot
    /// product. See [`NodeVectors::scan_max_q8`] for `out`.
    #[inline(always)]
    fn scan_with(
        &self,
        dim: usize,
        probes: &[FieldProbe<'_>],
        (lo, hi): (usize, usize),
        out: &mut [f32],
        stride: usize,
        kernel: impl Fn(&QVec, &[i8], f32) -> f32,
    ) {
        let k0 = self.nodes.partition_point(|&i| (i as usize) < lo);
        let k1 = self.nodes.partition_point(|&i| (i as usize) < hi);
        let (Some(nodes), Some(ends)) = (self.nodes.get(k0..k1), self.ends.get(k0..k1)) else {
            return;
        };
        let mut a = match k0.checked_sub(1) {
            Some(k) => self.ends.get(k).map_or(0, |&e| e as usize),
            None => 0,
        };
        for (&node, &end) in nodes.iter().zip(ends) {
            let b = end as usize;
            let base = (node as usize - lo) * stride;
            for r in a..b {
                let (Some(row), Some(&scale)) =
                    (self.q8.get(r * dim..(r + 1) * dim), self.scales.get(r))
                else {
                    break;
                };
                for p in probes {
                    let d = kernel(p.q, row, scale);
                    if let Some(o) = out.get_mut(base + p.slot) {
                        // NaN (no row yet) loses to any number: the first row's value wins.
                        *o = o.max(d);
                    }
                }
            }
            a = b;
        }
    }
}

/// One query vector to compare with every row of a field (see [`NodeVectors::scan_max_q8`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldProbe<'a> {
    /// The query vector.
    pub q: &'a QVec,
    /// Its column in the output rows.
    pub slot: usize,
}

/// [`FieldMatrix::scan_with`] with the i16 × i8 AVX2 kernel inlined (no per-row dispatch).
///
/// # Safety
/// The CPU must support AVX2 and `dim` must be at most [`MAX_I16_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_i16_avx2(
    f: &FieldMatrix,
    dim: usize,
    probes: &[FieldProbe<'_>],
    range: (usize, usize),
    out: &mut [f32],
    stride: usize,
) {
    f.scan_with(dim, probes, range, out, stride, |q, r, s| {
        if q.q16.len() == r.len() {
            // SAFETY: AVX2 is enabled for this function; equal lengths ≤ MAX_I16_DIM.
            (unsafe { dot_i16_i8_avx2(&q.q16, r) }) as f32 * q.scale * s
        } else {
            dot_q8(q, r) * s
        }
    });
}

/// Embedding index of a graph: per-field L2-normalised vectors of every node, stored as one
/// contiguous matrix per [`FieldKind`] with per-node offsets, so that scoring is a linear
/// dot-product scan. Tags are stored once per distinct text and referenced by id, so the tag
/// channel costs O(distinct tags) dot products per query plus O(tag references) lookups.
///
/// Node `i` of the vectors is the note at dense position `i` of the graph they were built
/// from; [`NodeVectors::ids`] lets the index verify that.
#[derive(Debug, Clone)]
pub struct NodeVectors {
    dim: usize,
    ids: Vec<MemoryId>,
    fields: Vec<FieldMatrix>,
    tag_vocab: Vec<String>,
    tag_lookup: HashMap<String, u32>,
    tag_matrix: Vec<f32>,
    tag_offsets: Vec<u32>,
    tag_ids: Vec<u32>,
    /// `starts[i][f]..starts[i + 1][f]`: rows of field `f` for node `i` (length n + 1).
    starts: Vec<[u32; ROW_KINDS_LEN]>,
}

const ROW_KINDS_LEN: usize = FieldKind::ROW_KINDS.len();

impl NodeVectors {
    /// An empty store of dimension `dim` to be filled with [`NodeVectors::push_node`].
    pub fn new(dim: usize) -> Result<Self> {
        if dim == 0 {
            return Err(Error::invalid_argument("dim", "must be at least 1"));
        }
        Ok(NodeVectors {
            dim,
            ids: Vec::new(),
            fields: (0..FieldKind::ROW_KINDS.len())
                .map(|_| FieldMatrix::default())
                .collect(),
            tag_vocab: Vec::new(),
            tag_lookup: HashMap::new(),
            tag_matrix: Vec::new(),
            tag_offsets: vec![0],
            starts: vec![[0; ROW_KINDS_LEN]],
            tag_ids: Vec::new(),
        })
    }

    /// Appends the next node (graph position = current [`NodeVectors::len`]) with its
    /// `(field, text, vector)` items. Vectors are L2-normalised here; tag vectors are
    /// deduplicated by text (the first vector of a text wins).
    ///
    /// Errors when a vector's length is not `dim`. Complexity: O(items × dim).
    pub fn push_node(&mut self, id: MemoryId, items: &[(FieldKind, &str, &[f32])]) -> Result<()> {
        for (_, _, v) in items {
            if v.len() != self.dim {
                return Err(Error::invalid_argument(
                    "vectors",
                    format!("vector of length {} but dim is {}", v.len(), self.dim),
                ));
            }
        }
        let mut new_tags: Vec<(String, Vec<f32>)> = Vec::new();
        let mut node_tag_ids: Vec<u32> = Vec::new();
        for &(kind, text, v) in items {
            let mut v = v.to_vec();
            l2_normalise(&mut v);
            match kind.row_index() {
                Some(ri) => self.fields[ri].push_row(&v),
                None => {
                    let existing = self.tag_lookup.get(text).copied().or_else(|| {
                        new_tags
                            .iter()
                            .position(|(t, _)| t == text)
                            .map(|p| (self.tag_vocab.len() + p) as u32)
                    });
                    let tid = match existing {
                        Some(t) => t,
                        None => {
                            new_tags.push((text.to_owned(), v));
                            (self.tag_vocab.len() + new_tags.len() - 1) as u32
                        }
                    };
                    if !node_tag_ids.contains(&tid) {
                        node_tag_ids.push(tid);
                    }
                }
            }
        }
        for (t, v) in new_tags {
            self.tag_lookup
                .insert(t.clone(), self.tag_vocab.len() as u32);
            self.tag_vocab.push(t);
            self.tag_matrix.extend_from_slice(&v);
        }
        let node = self.ids.len() as u32;
        let mut next = [0u32; ROW_KINDS_LEN];
        for ((slot, f), prev) in next
            .iter_mut()
            .zip(self.fields.iter_mut())
            .zip(self.starts.last().copied().unwrap_or_default())
        {
            *slot = (f.data.len() / self.dim) as u32;
            if *slot > prev {
                f.nodes.push(node);
                f.ends.push(*slot);
            }
        }
        self.starts.push(next);
        self.tag_ids.extend_from_slice(&node_tag_ids);
        self.tag_offsets.push(self.tag_ids.len() as u32);
        self.ids.push(id);
        Ok(())
    }

    /// The distinct texts [`Self::embed_graph`] would embed for `graph`, in order of first
    /// appearance (so they can be embedded ahead, e.g. into a cache, without the graph).
    ///
    /// Complexity: O(text of the graph).
    pub fn distinct_texts(graph: &MemoryGraph) -> Vec<String> {
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        graph
            .notes()
            .flat_map(node_texts)
            .filter_map(|(_, t)| seen.insert(t.clone()).then_some(t))
            .collect()
    }

    /// Embeds every note of `graph` (passage side) with `embedder`. Identical texts are
    /// embedded once. Complexity: one embedder call over the distinct texts of the graph.
    pub fn embed_graph(graph: &MemoryGraph, embedder: &dyn TextEmbedder) -> Result<Self> {
        let per_node: Vec<Vec<(FieldKind, String)>> = graph.notes().map(node_texts).collect();
        let mut distinct: HashMap<&str, usize> = HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        for items in &per_node {
            for (_, t) in items {
                distinct.entry(t.as_str()).or_insert_with(|| {
                    order.push(t.as_str());
                    order.len() - 1
                });
            }
        }
        let vectors = if order.is_empty() {
            Vec::new()
        } else {
            embedder.embed(&order, EmbedKind::Passage)?
        };
        Error::check_vector_count("embedder", vectors.len(), order.len())?;
        let mut out = NodeVectors::new(embedder.dim())?;
        for (note, items) in graph.notes().zip(&per_node) {
            let rows: Vec<(FieldKind, &str, &[f32])> = items
                .iter()
                .map(|(k, t)| (*k, t.as_str(), vectors[distinct[t.as_str()]].as_slice()))
                .collect();
            out.push_node(note.id, &rows)?;
        }
        Ok(out)
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no node was pushed.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Node ids in position order.
    pub fn ids(&self) -> &[MemoryId] {
        &self.ids
    }

    /// The matrix of a row kind (`None` for [`FieldKind::Tag`]).
    pub fn field(&self, kind: FieldKind) -> Option<&FieldMatrix> {
        kind.row_index().and_then(|i| self.fields.get(i))
    }

    /// Rows of `kind` for node `i` (empty slice when none).
    #[inline]
    pub fn rows(&self, kind: FieldKind, i: usize) -> &[f32] {
        match kind.row_index() {
            Some(ri) => match self.range(ri, i) {
                Some((a, b)) => self.fields[ri].row_range(a, b, self.dim),
                None => &[],
            },
            None => &[],
        }
    }

    /// Best dot product of `q` with the rows of `kind` for node `i`, computed on the int8
    /// scan copy (i16 × i8 with AVX2, else f32 × i8); `None` when the node has no such rows.
    /// Complexity: O(rows × dim).
    #[inline]
    pub fn max_dot_q8(&self, q: &QVec, kind: FieldKind, i: usize) -> Option<f32> {
        let ri = kind.row_index()?;
        let (a, b) = self.range(ri, i)?;
        let (rows, scales) = self.fields[ri].row_range_q8(a, b, self.dim);
        if scales.is_empty() || self.dim == 0 {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if self.dim <= MAX_I16_DIM
                && q.q16.len() == self.dim
                && std::is_x86_feature_detected!("avx2")
            {
                return rows
                    .chunks_exact(self.dim)
                    .zip(scales)
                    // SAFETY: AVX2 checked above; both slices have length dim ≤ MAX_I16_DIM.
                    .map(|(r, s)| unsafe { dot_i16_i8_avx2(&q.q16, r) } as f32 * q.scale * s)
                    .reduce(f32::max);
            }
        }
        rows.chunks_exact(self.dim)
            .zip(scales)
            .map(|(r, s)| dot_q8(q, r) * s)
            .reduce(f32::max)
    }

    /// For every node `i` in `lo..hi` with rows of `kind`, the best dot product of each
    /// probe's query with those rows, folded with `max` into `out[(i − lo)·stride + slot]`
    /// (the caller fills `out` with NaN: a node without rows keeps NaN). The values are
    /// exactly those of [`Self::max_dot_q8`]; the difference is the access pattern: the
    /// field's int8 rows are streamed once, contiguously, and each row is compared with all
    /// probes while in cache, without per-node dispatch. A feature check picks the AVX2
    /// kernel once per call.
    /// Complexity: O(rows of `kind` in `lo..hi` × probes × dim + log n).
    pub(crate) fn scan_max_q8(
        &self,
        kind: FieldKind,
        probes: &[FieldProbe<'_>],
        (lo, hi): (usize, usize),
        out: &mut [f32],
        stride: usize,
    ) {
        let Some(f) = kind.row_index().and_then(|ri| self.fields.get(ri)) else {
            return;
        };
        let dim = self.dim;
        if probes.is_empty() || dim == 0 {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if dim <= MAX_I16_DIM && std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 checked just above; dim ≤ MAX_I16_DIM.
                unsafe { scan_i16_avx2(f, dim, probes, (lo, hi), out, stride) };
                return;
            }
        }
        f.scan_with(dim, probes, (lo, hi), out, stride, |q, r, s| {
            dot_q8(q, r) * s
        });
    }

    #[inline]
    fn range(&self, ri: usize, i: usize) -> Option<(usize, usize)> {
        let a = self.starts.get(i)?[ri] as usize;
        let b = self.starts.get(i + 1)?[ri] as usize;
        Some((a, b))
    }

    /// Distinct tag texts.
    pub fn tag_vocab(&self) -> &[String] {
        &self.tag_vocab
    }

    /// The vector of distinct tag `t`.
    pub fn tag_vector(&self, t: usize) -> &[f32] {
        self.tag_matrix
            .get(t * self.dim..(t + 1) * self.dim)
            .unwrap_or(&[])
    }

    /// Distinct-tag ids of node `i`.
    #[inline]
    pub fn node_tags(&self, i: usize) -> &[u32] {
        match (self.tag_offsets.get(i), self.tag_offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.tag_ids[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Bytes of vector data held (for reports).
    pub fn vector_bytes(&self) -> usize {
        4 * (self.tag_matrix.len()
            + self
                .fields
                .iter()
                .map(|f| f.data.len() + f.scales.len())
                .sum::<usize>())
            + self.fields.iter().map(|f| f.q8.len()).sum::<usize>()
    }
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
