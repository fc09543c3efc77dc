//! Per-field vectors of a graph's notes: [`NodeVectors`] (one [`FieldMatrix`] of rows per
//! [`FieldKind`], tags deduplicated) that similarity scans, and [`QVec`], a query vector
//! prepared for the int8 scan. This is the in-memory vector store of one graph, built through
//! a [`TextEmbedder`]; not the model (`embed/`) nor the persistent cache of model outputs
//! (`embedding_cache.rs`).

mod q16_kernels;
mod recent;
mod reuse;

#[cfg(target_arch = "x86_64")]
use q16_kernels::dot_i16_i8_avx2;
use q16_kernels::{prefetch, MAX_I16_DIM, PREFETCH_ROWS};
pub use recent::RECENT_NODES;
use recent::{RecentRows, Removed};
pub use reuse::VectorPlan;

use super::dot::{dot_q8, l2_normalise};
use super::field_texts::{node_texts, FieldKind};
use super::text_embedder::TextEmbedder;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::MemoryId;
use std::collections::HashMap;

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

/// Appends the int8 copy of `v` (scale `max|x|/127`, round to nearest) to `out` and returns
/// the scale (0 for a zero row). Compiled for AVX2 where the CPU has it: on baseline x86-64
/// `f32::round` is a libm call per element and the loop does not vectorise (3.5× slower per
/// 384-dim row, measured); the result is the same bit for bit. Complexity: O(len).
pub(crate) fn quantise_q8(v: &[f32], out: &mut Vec<i8>) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 checked just above.
        return unsafe { quantise_q8_avx2(v, out) };
    }
    quantise_q8_portable(v, out)
}

/// [`quantise_q8`] compiled with AVX2 enabled (the same Rust, so the same results).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantise_q8_avx2(v: &[f32], out: &mut Vec<i8>) -> f32 {
    quantise_q8_portable(v, out)
}

/// [`quantise_q8`]'s body, for any CPU.
#[inline(always)]
fn quantise_q8_portable(v: &[f32], out: &mut Vec<i8>) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 0.0 };
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    out.extend(
        v.iter()
            .map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8),
    );
    scale
}

impl std::ops::Deref for QVec {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.f
    }
}

/// Rows of one field kind for all nodes: a row-major `rows × dim` int8 matrix with a scale
/// per row (`max|x|/127` of the L2-normalised vector). A node's rows are contiguous; their
/// range is kept node-major in [`NodeVectors`] (one small array per node for all fields, so
/// the scan reads one offset stream instead of one per field).
///
/// Only the int8 copy is kept: similarity streams every row of a field per query, so it is
/// memory-bandwidth bound, and every score is computed on these rows (for unit vectors of
/// dimension ≥ 64 the cosine error is about 1e-3). An f32 copy beside them was never read,
/// yet was copied whenever a working graph's index was rebuilt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldMatrix {
    q8: Vec<i8>,
    scales: Vec<f32>,
    // The nodes that have rows here, ascending, and the end row of each (its rows start at
    // the previous end): the scan walks these two dense arrays instead of every node's
    // offsets.
    nodes: Vec<u32>,
    ends: Vec<u32>,
}

impl FieldMatrix {
    /// Int8 rows `a..b` and their scales; empty when out of range.
    #[inline]
    pub fn row_range_q8(&self, a: usize, b: usize, dim: usize) -> (&[i8], &[f32]) {
        match (self.q8.get(a * dim..b * dim), self.scales.get(a..b)) {
            (Some(r), Some(s)) => (r, s),
            _ => (&[], &[]),
        }
    }

    fn push_row(&mut self, v: &[f32]) {
        let scale = quantise_q8(v, &mut self.q8);
        self.scales.push(scale);
    }

    /// Appends rows `a..b` of `other` (int8 and scales) as they are.
    fn extend_from(&mut self, other: &FieldMatrix, a: usize, b: usize, dim: usize) {
        let (q8, scales) = other.row_range_q8(a, b, dim);
        self.q8.extend_from_slice(q8);
        self.scales.extend_from_slice(scales);
    }

    /// Number of rows over all nodes.
    pub fn rows(&self) -> usize {
        self.scales.len()
    }

    /// Streams the rows of the nodes in `lo..hi` once, in storage order, comparing each row
    /// with every probe while it is in cache; `kernel(row, scale, sums)` writes the row's
    /// scaled dot product with probe `p` to `sums[p]`. See [`NodeVectors::scan_max_q8`] for
    /// `out`.
    #[inline(always)]
    fn scan_with(
        &self,
        dim: usize,
        probes: &[FieldProbe<'_>],
        (lo, hi): (usize, usize),
        out: &mut [f32],
        stride: usize,
        mut kernel: impl FnMut(&[i8], f32, &mut [f32]),
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
        let mut sums = vec![0f32; probes.len()];
        for (&node, &end) in nodes.iter().zip(ends) {
            let b = end as usize;
            let base = (node as usize - lo) * stride;
            for r in a..b {
                let (Some(row), Some(&scale)) =
                    (self.q8.get(r * dim..(r + 1) * dim), self.scales.get(r))
                else {
                    break;
                };
                prefetch(
                    self.q8.as_ptr().wrapping_add((r + PREFETCH_ROWS) * dim),
                    dim,
                );
                kernel(row, scale, &mut sums);
                for (p, &d) in probes.iter().zip(&sums) {
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
/// The CPU must support AVX2, and every probe's `q16` must have length `dim` ≤
/// [`MAX_I16_DIM`].
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
    let queries: Vec<&QVec> = probes.iter().map(|p| p.q).collect();
    f.scan_with(dim, probes, range, out, stride, |r, s, sums| {
        // SAFETY: AVX2 is enabled for this function; every probe has the row's length (the
        // caller's contract).
        unsafe { q16_kernels::scaled_dots_avx2(&queries, r, s, sums) }
    });
}

/// [`FieldMatrix::scan_with`] with the AVX-512 VNNI kernel: each row widened once for all
/// probes (the AVX2 kernel widens it again for every probe, and a chat message brings
/// several probes per field). The same integer sums as [`scan_i16_avx2`].
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI, and every probe's `q16` must have length
/// `dim` ≤ [`MAX_I16_DIM`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn scan_i16_avx512(
    f: &FieldMatrix,
    dim: usize,
    probes: &[FieldProbe<'_>],
    range: (usize, usize),
    out: &mut [f32],
    stride: usize,
) {
    let queries: Vec<&QVec> = probes.iter().map(|p| p.q).collect();
    f.scan_with(dim, probes, range, out, stride, |r, s, sums| {
        // SAFETY: AVX-512 F/BW/VNNI are enabled for this function; every probe has the
        // row's length (the caller's contract).
        unsafe { q16_kernels::scaled_dots_avx512(&queries, r, s, sums) }
    });
}

/// Embedding index of a graph: per-field L2-normalised vectors of every node, stored as one
/// contiguous matrix per [`FieldKind`] with per-node offsets, so that scoring is a linear
/// dot-product scan. Tags are stored once per distinct text and referenced by id, so the tag
/// channel costs O(distinct tags) dot products per query plus O(tag references) lookups.
///
/// Node `i` of the vectors is the note at dense position `i` of the graph they were built
/// from; [`NodeVectors::ids`] lets the index verify that.
#[derive(Debug, Clone, PartialEq)]
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
    /// Per node, a fingerprint of its `(field, text)` list: a rebuild reuses the rows of a
    /// node whose fingerprint did not change ([`NodeVectors::embed_graph_reusing`]).
    signatures: Vec<u64>,
    /// Per node, the graph's content revision of the note the rows were made from (0 when
    /// unknown): an equal revision is reused without even collecting the texts.
    revisions: Vec<u64>,
    /// The rows of notes removed lately, for a rebuild that finds them back unchanged.
    recent: RecentRows,
}

const ROW_KINDS_LEN: usize = FieldKind::ROW_KINDS.len();

/// The fingerprint of a node's `(field, text)` list (SipHash with fixed keys: stable within
/// a process, which is as long as an index lives).
fn signature_of<'a>(items: impl Iterator<Item = (FieldKind, &'a str)>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    for (kind, text) in items {
        kind.hash(&mut h);
        text.hash(&mut h);
    }
    h.finish()
}

fn signature(items: &[(FieldKind, &str, &[f32])]) -> u64 {
    signature_of(items.iter().map(|(k, t, _)| (*k, *t)))
}

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
            signatures: Vec::new(),
            revisions: Vec::new(),
            recent: RecentRows::default(),
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
        self.push_items(id, items, signature(items));
        Ok(())
    }

    /// Appends node `j` of `prev` (same dimension) as the next node, its rows copied as they
    /// are (int8 rows and scales: bit-identical to embedding it again). Complexity: O(rows × dim).
    fn push_node_from(&mut self, prev: &NodeVectors, j: usize) {
        for (ri, f) in self.fields.iter_mut().enumerate() {
            if let Some((a, b)) = prev.range(ri, j) {
                f.extend_from(&prev.fields[ri], a, b, self.dim);
            }
        }
        let tags: Vec<(&str, &[f32])> = prev
            .node_tags(j)
            .iter()
            .map(|&t| {
                (
                    prev.tag_vocab[t as usize].as_str(),
                    prev.tag_vector(t as usize),
                )
            })
            .collect();
        self.close_node(prev.ids[j], &tags, prev.signatures[j]);
    }

    /// Appends a removed note's rows as they were kept ([`RecentRows`]), with its tags'
    /// vectors (normalised, in its tag order), as the next node. Complexity: O(rows × dim).
    fn push_removed(&mut self, id: MemoryId, r: &Removed, tags: &[(&str, &[f32])]) {
        let mut at = 0usize;
        for (f, &count) in self.fields.iter_mut().zip(&r.counts) {
            let end = at + count as usize;
            if let (Some(q8), Some(scales)) = (
                r.q8.get(at * self.dim..end * self.dim),
                r.scales.get(at..end),
            ) {
                f.q8.extend_from_slice(q8);
                f.scales.extend_from_slice(scales);
            }
            at = end;
        }
        self.close_node(id, tags, r.signature);
    }

    /// Normalises and appends the rows of `items`, then closes the node.
    fn push_items(&mut self, id: MemoryId, items: &[(FieldKind, &str, &[f32])], sig: u64) {
        let mut tags: Vec<(&str, Vec<f32>)> = Vec::new();
        let mut buf: Vec<f32> = Vec::with_capacity(self.dim);
        for &(kind, text, v) in items {
            buf.clear();
            buf.extend_from_slice(v);
            l2_normalise(&mut buf);
            match kind.row_index() {
                Some(ri) => self.fields[ri].push_row(&buf),
                None => tags.push((text, buf.clone())),
            }
        }
        let tags: Vec<(&str, &[f32])> = tags.iter().map(|(t, v)| (*t, v.as_slice())).collect();
        self.close_node(id, &tags, sig);
    }

    /// Ends the node whose rows were just appended: its (normalised) tags, deduplicated by
    /// text (the first vector of a text wins), its row ranges, id and fingerprint.
    fn close_node(&mut self, id: MemoryId, tags: &[(&str, &[f32])], sig: u64) {
        let mut new_tags: Vec<(&str, &[f32])> = Vec::new();
        let mut node_tag_ids: Vec<u32> = Vec::new();
        for &(text, v) in tags {
            let existing = self.tag_lookup.get(text).copied().or_else(|| {
                new_tags
                    .iter()
                    .position(|(t, _)| *t == text)
                    .map(|p| (self.tag_vocab.len() + p) as u32)
            });
            let tid = match existing {
                Some(t) => t,
                None => {
                    new_tags.push((text, v));
                    (self.tag_vocab.len() + new_tags.len() - 1) as u32
                }
            };
            if !node_tag_ids.contains(&tid) {
                node_tag_ids.push(tid);
            }
        }
        for (t, v) in new_tags {
            self.tag_lookup
                .insert(t.to_owned(), self.tag_vocab.len() as u32);
            self.tag_vocab.push(t.to_owned());
            self.tag_matrix.extend_from_slice(v);
        }
        let node = self.ids.len() as u32;
        let mut next = [0u32; ROW_KINDS_LEN];
        for ((slot, f), prev) in next
            .iter_mut()
            .zip(self.fields.iter_mut())
            .zip(self.starts.last().copied().unwrap_or_default())
        {
            *slot = f.scales.len() as u32;
            if *slot > prev {
                f.nodes.push(node);
                f.ends.push(*slot);
            }
        }
        self.starts.push(next);
        self.tag_ids.extend_from_slice(&node_tag_ids);
        self.tag_offsets.push(self.tag_ids.len() as u32);
        self.ids.push(id);
        self.signatures.push(sig);
        // Unknown until a caller that knows the note's content revision sets it.
        self.revisions.push(0);
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
        Self::embed_graph_reusing(graph, embedder, None)
    }

    /// [`Self::embed_graph`], reusing the rows of `prev` (vectors of the same embedder) for
    /// every note whose field texts are unchanged: only new and changed notes are embedded,
    /// the rest is copied, and the result is identical to embedding the whole graph. A
    /// `prev` of another dimension is ignored. ([`VectorPlan::assemble_owned`] compacts
    /// owned old vectors in place instead of copying.)
    ///
    /// Complexity: O(text of the changed notes), O(rows × dim) to copy, plus one embedder
    /// call over the distinct texts of the new and changed notes.
    pub fn embed_graph_reusing(
        graph: &MemoryGraph,
        embedder: &dyn TextEmbedder,
        prev: Option<&NodeVectors>,
    ) -> Result<Self> {
        VectorPlan::new(graph, embedder, prev)?.assemble(prev)
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

    /// Int8 rows of `kind` for node `i` and their scales (empty when none).
    #[inline]
    pub fn rows_q8(&self, kind: FieldKind, i: usize) -> (&[i8], &[f32]) {
        match kind
            .row_index()
            .and_then(|ri| Some((ri, self.range(ri, i)?)))
        {
            Some((ri, (a, b))) => self.fields[ri].row_range_q8(a, b, self.dim),
            None => (&[], &[]),
        }
    }

    /// Best dot product of `q` with the rows of `kind` for node `i`, computed on the int8
    /// rows (i16 × i8 with AVX2, else f32 × i8); `None` when the node has no such rows.
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
        if dim <= MAX_I16_DIM && probes.iter().all(|p| p.q.q16.len() == dim) {
            if q16_kernels::has_avx512_vnni() {
                // SAFETY: AVX-512 BW and VNNI checked just above; every probe has length
                // dim ≤ MAX_I16_DIM.
                unsafe { scan_i16_avx512(f, dim, probes, (lo, hi), out, stride) };
                return;
            }
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 checked just above; every probe has length dim ≤ MAX_I16_DIM.
                unsafe { scan_i16_avx2(f, dim, probes, (lo, hi), out, stride) };
                return;
            }
        }
        f.scan_with(dim, probes, (lo, hi), out, stride, |r, s, sums| {
            for (p, o) in probes.iter().zip(sums.iter_mut()) {
                *o = dot_q8(p.q, r) * s;
            }
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
        4 * (self.tag_matrix.len() + self.fields.iter().map(|f| f.scales.len()).sum::<usize>())
            + self.fields.iter().map(|f| f.q8.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_avx2_quantiser_gives_the_portable_ones_bits() {
        let mut state = 0x2545_f491_u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let mut rows: Vec<Vec<f32>> = (0..2_000)
            .map(|_| {
                (0..384)
                    .map(|_| f32::from_bits((next() % 0x4080_0000) | (next() & 0x8000_0000)))
                    .collect()
            })
            .collect();
        // Ties at every scale step, zeros, a NaN and infinities.
        rows.push((0..384).map(|i| (i as f32 - 191.5) / 127.0).collect());
        rows.push(vec![0.0; 384]);
        rows.push(vec![0.5, f32::NAN, -0.25, 1.0]);
        rows.push(vec![f32::INFINITY, 1.0, -2.0]);
        for r in &rows {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let sa = quantise_q8(r, &mut a);
            let sb = quantise_q8_portable(r, &mut b);
            assert_eq!((sa.to_bits(), a), (sb.to_bits(), b));
        }
    }
}
