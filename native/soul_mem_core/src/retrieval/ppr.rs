//! Weighted multi-source Personalized PageRank: forward push (production) and power
//! iteration (reference), over a CSR snapshot of the graph.
//!
//! Equation: `ppr = d·Mᵀ·ppr + (1−d)·s` where `d` is the damping (continue probability),
//! `s` the normalised source distribution and `M` the row-stochastic transition matrix of
//! the dynamic edge weights, with every dangling row (no positive out-weight) replaced by `s`
//! — the seed's "virtual links back to the sources".

use super::config::TypePreference;
use crate::error::{Error, Result};
use crate::model::{MemoryLink, MemoryLinkType, NodeKind};
use std::collections::VecDeque;

/// Parameters of the seed's `DynWeightFuncBuilder`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EdgeWeightParams {
    /// `i`: weight of the link intensity.
    pub intensity_factor: f64,
    /// `c`: weight of the confidence boost.
    pub confidence_factor: f64,
    /// Link family preference.
    pub preference: TypePreference,
}

impl Default for EdgeWeightParams {
    fn default() -> Self {
        EdgeWeightParams {
            intensity_factor: 1.0,
            confidence_factor: 0.8,
            preference: TypePreference::Situation,
        }
    }
}

/// The dynamic weight of one link whose target is of kind `target`.
///
/// Links into Procedure nodes weigh 0 (actions are found by Bayes, not PPR). Otherwise
/// `(c_boost, type_boost)` is `(0.8, pref[1])` for Situation links, `(confidence, pref[0])`
/// for Sem links, `(0, 0)` for Proc links, and the weight is
/// `(intensity·i + c_boost·c + type_boost) / (i + c + type_boost)`, 0 when the denominator is
/// 0 or the result is not finite. Complexity: O(1).
pub fn edge_weight(link: &MemoryLink, target: NodeKind, p: &EdgeWeightParams) -> f64 {
    if target == NodeKind::Procedure {
        return 0.0;
    }
    let pref = p.preference.values();
    let (c_boost, type_boost) = match &link.link_type {
        MemoryLinkType::Situation(_) => (0.8, pref[1]),
        MemoryLinkType::Sem(s) => (f64::from(s.confidence), pref[0]),
        MemoryLinkType::Proc(_) => (0.0, 0.0),
    };
    dyn_weight(
        link.intensity,
        c_boost,
        type_boost,
        p.intensity_factor,
        p.confidence_factor,
    )
}

/// The normalised weight formula on its own (for tests and other callers).
pub fn dyn_weight(intensity: f64, c_boost: f64, type_boost: f64, i: f64, c: f64) -> f64 {
    let den = i + c + type_boost;
    if den == 0.0 {
        return 0.0;
    }
    let w = (intensity * i + c_boost * c + type_boost) / den;
    if w.is_finite() && w > 0.0 {
        w
    } else {
        0.0
    }
}

/// Row-stochastic transition matrix in compressed sparse row form. Only positive-weight
/// edges are stored; a row without edges is dangling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Csr {
    offsets: Vec<u32>,
    targets: Vec<u32>,
    probs: Vec<f64>,
}

impl Csr {
    /// Builds from `(from, to, weight)` triples over nodes `0..n`. Zero weights are dropped,
    /// parallel edges kept, each row normalised to sum 1.
    ///
    /// Errors on an out-of-range node or a negative / non-finite weight.
    /// Complexity: O(n + edges) (counting sort).
    pub fn from_edges(n: usize, edges: &[(u32, u32, f64)]) -> Result<Self> {
        if n > u32::MAX as usize {
            return Err(Error::invalid_argument("n", "too many nodes"));
        }
        let mut counts = vec![0u32; n + 1];
        for &(u, v, w) in edges {
            if u as usize >= n || v as usize >= n {
                return Err(Error::invalid_argument(
                    "edges",
                    format!("edge {u}->{v} outside 0..{n}"),
                ));
            }
            if !(w.is_finite() && w >= 0.0) {
                return Err(Error::invalid_argument(
                    "edges",
                    format!("edge {u}->{v} has weight {w}"),
                ));
            }
            if w > 0.0 {
                counts[u as usize + 1] += 1;
            }
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let m = counts[n] as usize;
        let mut fill = counts.clone();
        let mut targets = vec![0u32; m];
        let mut probs = vec![0f64; m];
        for &(u, v, w) in edges {
            if w > 0.0 {
                let at = fill[u as usize] as usize;
                targets[at] = v;
                probs[at] = w;
                fill[u as usize] += 1;
            }
        }
        for u in 0..n {
            Self::normalise_row(&mut probs[counts[u] as usize..counts[u + 1] as usize]);
        }
        Ok(Csr {
            offsets: counts,
            targets,
            probs,
        })
    }

    /// Scales one row's weights to sum 1 (left as is when the sum is 0 or not finite). The
    /// single place rows are normalised, so a row patched in place is bit-identical to a
    /// rebuilt one. Complexity: O(row length).
    pub(crate) fn normalise_row(row: &mut [f64]) {
        let sum: f64 = row.iter().sum();
        if sum > 0.0 && sum.is_finite() {
            row.iter_mut().for_each(|p| *p /= sum);
        }
    }

    /// The probabilities of row `u`, mutably (`None` when out of range).
    pub(crate) fn row_probs_mut(&mut self, u: usize) -> Option<&mut [f64]> {
        let a = *self.offsets.get(u)? as usize;
        let b = *self.offsets.get(u + 1)? as usize;
        self.probs.get_mut(a..b)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of stored (positive) edges.
    pub fn edge_count(&self) -> usize {
        self.targets.len()
    }

    /// Out-edges of `u` as `(targets, probabilities)`.
    #[inline]
    pub fn row(&self, u: usize) -> (&[u32], &[f64]) {
        let a = self.offsets[u] as usize;
        let b = self.offsets[u + 1] as usize;
        (&self.targets[a..b], &self.probs[a..b])
    }

    /// Out-degree of `u` (stored edges).
    #[inline]
    pub fn degree(&self, u: usize) -> usize {
        (self.offsets[u + 1] - self.offsets[u]) as usize
    }
}

/// Forward-push parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PprParams {
    /// Continue probability `d` in [0, 1).
    pub damping: f64,
    /// Residual threshold ε: node `u` is pushed while `r(u) > ε·max(deg(u), 1)`.
    pub epsilon: f64,
}

impl Default for PprParams {
    fn default() -> Self {
        PprParams {
            damping: 0.65,
            epsilon: 1e-5,
        }
    }
}

impl PprParams {
    /// Errors when damping is outside [0, 1) (1 would never converge: the seed's DoS guard)
    /// or ε is not a positive finite number.
    pub fn validate(&self) -> Result<()> {
        if !(self.damping.is_finite() && (0.0..1.0).contains(&self.damping)) {
            return Err(Error::invalid_argument(
                "damping",
                format!("must be in [0, 1), got {}", self.damping),
            ));
        }
        if !(self.epsilon.is_finite() && self.epsilon > 0.0) {
            return Err(Error::invalid_argument(
                "epsilon",
                format!("must be finite and > 0, got {}", self.epsilon),
            ));
        }
        Ok(())
    }

    /// The safety cap on pushes: the Andersen–Chung–Lang bound `1/((1−d)·ε)` (every push
    /// moves more than `(1−d)·ε` mass into the estimate, whose total is at most 1) plus
    /// `1024·n`, the seed's cap.
    pub fn push_cap(&self, n: usize) -> u64 {
        let acl = 1.0 / ((1.0 - self.damping) * self.epsilon);
        let acl = if acl.is_finite() && acl < 1e15 {
            acl.ceil() as u64
        } else {
            u64::MAX / 2
        };
        acl.saturating_add(1024u64.saturating_mul(n as u64))
    }
}

/// Reusable scratch space of forward push. Between queries only the entries a query touched
/// are reset, so a query costs O(touched), not O(n).
#[derive(Debug, Default)]
pub struct PprWorkspace {
    p: Vec<f64>,
    r: Vec<f64>,
    in_queue: Vec<bool>,
    marked: Vec<bool>,
    touched: Vec<u32>,
    queue: VecDeque<u32>,
    sources: Vec<(u32, f64)>,
    /// Pushes done by the last query (for benchmarks and tests).
    pub last_pushes: u64,
}

impl PprWorkspace {
    /// An empty workspace; it grows to the graph on first use.
    pub fn new() -> Self {
        Self::default()
    }

    fn prepare(&mut self, n: usize) {
        for &t in &self.touched {
            let t = t as usize;
            if t < self.p.len() {
                self.p[t] = 0.0;
                self.r[t] = 0.0;
                self.in_queue[t] = false;
                self.marked[t] = false;
            }
        }
        self.touched.clear();
        self.queue.clear();
        self.sources.clear();
        if self.p.len() != n {
            self.p = vec![0.0; n];
            self.r = vec![0.0; n];
            self.in_queue = vec![false; n];
            self.marked = vec![false; n];
        }
    }

    #[inline]
    fn touch(&mut self, v: usize) {
        if !self.marked[v] {
            self.marked[v] = true;
            self.touched.push(v as u32);
        }
    }
}

/// Merges duplicate sources, drops zero weights and normalises to a distribution.
/// Errors on an out-of-range node or a negative / non-finite weight; `None` when nothing
/// with positive weight is left.
fn normalise_sources(n: usize, sources: &[(u32, f64)]) -> Result<Option<Vec<(u32, f64)>>> {
    let mut merged: Vec<(u32, f64)> = Vec::with_capacity(sources.len());
    for &(u, w) in sources {
        if u as usize >= n {
            return Err(Error::invalid_argument(
                "sources",
                format!("node {u} outside 0..{n}"),
            ));
        }
        if !(w.is_finite() && w >= 0.0) {
            return Err(Error::invalid_argument(
                "sources",
                format!("weight {w} of node {u} must be finite and >= 0"),
            ));
        }
        if w > 0.0 {
            match merged.iter_mut().find(|(v, _)| *v == u) {
                Some(e) => e.1 += w,
                None => merged.push((u, w)),
            }
        }
    }
    let total: f64 = merged.iter().map(|(_, w)| w).sum();
    if merged.is_empty() || !(total.is_finite() && total > 0.0) {
        return Ok(None);
    }
    merged.iter_mut().for_each(|e| e.1 /= total);
    Ok(Some(merged))
}

/// Multi-source PPR by forward push (Andersen–Chung–Lang, FIFO order).
///
/// Returns `(node, score)` for every node with a positive estimate, scores normalised to sum
/// 1, sorted by descending score (ties by node). Empty when no source has positive weight.
/// Errors on invalid parameters or sources — never panics.
///
/// Accuracy: with `r` the residual left, `‖p − π‖₁ = ‖r‖₁ ≤ ε·Σ_u max(deg(u), 1)` before
/// normalisation, so the normalised output is within `2ε·(edges + n)` of the exact PPR in L1.
/// Complexity: at most `1/((1−d)·ε)` pushes, each O(out-degree) (O(sources) when dangling),
/// plus O(touched) for reset and sorting; capped by [`PprParams::push_cap`].
pub fn forward_push(
    csr: &Csr,
    sources: &[(u32, f64)],
    params: &PprParams,
    ws: &mut PprWorkspace,
) -> Result<Vec<(u32, f64)>> {
    params.validate()?;
    let n = csr.len();
    ws.prepare(n);
    ws.last_pushes = 0;
    let Some(src) = normalise_sources(n, sources)? else {
        return Ok(Vec::new());
    };
    ws.sources = src;
    let d = params.damping;
    let eps = params.epsilon;
    let threshold = |csr: &Csr, u: usize| eps * csr.degree(u).max(1) as f64;
    for i in 0..ws.sources.len() {
        let (u, w) = ws.sources[i];
        let u = u as usize;
        ws.touch(u);
        ws.r[u] += w;
        if !ws.in_queue[u] && ws.r[u] > threshold(csr, u) {
            ws.in_queue[u] = true;
            ws.queue.push_back(u as u32);
        }
    }
    let cap = params.push_cap(n);
    while let Some(u) = ws.queue.pop_front() {
        let u = u as usize;
        ws.in_queue[u] = false;
        let ru = ws.r[u];
        if ru <= threshold(csr, u) {
            continue;
        }
        ws.last_pushes += 1;
        if ws.last_pushes > cap {
            break;
        }
        ws.r[u] = 0.0;
        ws.p[u] += (1.0 - d) * ru;
        let mass = d * ru;
        let (targets, probs) = csr.row(u);
        if targets.is_empty() {
            // Dangling: virtual links back to the sources, in proportion to their weight.
            for i in 0..ws.sources.len() {
                let (s, w) = ws.sources[i];
                add_residual(csr, ws, s as usize, mass * w, eps);
            }
        } else {
            for (&v, &pr) in targets.iter().zip(probs) {
                add_residual(csr, ws, v as usize, mass * pr, eps);
            }
        }
    }
    let total: f64 = ws.touched.iter().map(|&t| ws.p[t as usize]).sum();
    if !(total.is_finite() && total > 0.0) {
        return Ok(Vec::new());
    }
    let mut out: Vec<(u32, f64)> = ws
        .touched
        .iter()
        .map(|&t| (t, ws.p[t as usize] / total))
        .filter(|(_, s)| *s > 0.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(out)
}

#[inline]
fn add_residual(csr: &Csr, ws: &mut PprWorkspace, v: usize, x: f64, eps: f64) {
    ws.touch(v);
    ws.r[v] += x;
    if !ws.in_queue[v] && ws.r[v] > eps * csr.degree(v).max(1) as f64 {
        ws.in_queue[v] = true;
        ws.queue.push_back(v as u32);
    }
}

/// Reference PPR by power iteration (`iterations` steps from `s`, renormalised each step),
/// same dangling convention as [`forward_push`]. Returns the dense score vector (all zeros
/// when no source has positive weight). Error after k steps: at most `2·dᵏ` in L1.
/// Complexity: O(iterations · (n + edges)).
pub fn naive_ppr(
    csr: &Csr,
    sources: &[(u32, f64)],
    damping: f64,
    iterations: usize,
) -> Result<Vec<f64>> {
    PprParams {
        damping,
        epsilon: 1.0,
    }
    .validate()?;
    let n = csr.len();
    let Some(src) = normalise_sources(n, sources)? else {
        return Ok(vec![0.0; n]);
    };
    let mut s = vec![0.0; n];
    for &(u, w) in &src {
        s[u as usize] += w;
    }
    let mut x = s.clone();
    let mut y = vec![0.0; n];
    for _ in 0..iterations {
        let mut dangling = 0.0;
        y.iter_mut()
            .zip(&s)
            .for_each(|(yi, si)| *yi = (1.0 - damping) * si);
        for (u, xu) in x.iter().enumerate() {
            let (targets, probs) = csr.row(u);
            if targets.is_empty() {
                dangling += xu;
            } else {
                for (&v, &pr) in targets.iter().zip(probs) {
                    y[v as usize] += damping * xu * pr;
                }
            }
        }
        for (yi, si) in y.iter_mut().zip(&s) {
            *yi += damping * dangling * si;
        }
        let total: f64 = y.iter().sum();
        if total > 0.0 {
            y.iter_mut().for_each(|v| *v /= total);
        }
        std::mem::swap(&mut x, &mut y);
    }
    Ok(x)
}
