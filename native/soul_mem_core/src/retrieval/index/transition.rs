//! The walk's transition matrices of a [`RetrievalIndex`]: built from the association
//! weights and, for decayed recall, each link scaled by its source's retention
//! ([`EdgeDecay`]); cached per weights and factors, and patched row by row when only a few
//! factors moved (a retrieval recorded).

use super::{EdgeClass, RawEdge, RetrievalIndex};
use crate::error::{Error, Result};
use crate::model::NodeKind;
use crate::retrieval::config::AssociationConfig;
use crate::retrieval::ppr::{dyn_weight, Csr, EdgeWeightParams};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a transition matrix is built from: the seed's dynamic edge weights and the weight of
/// a backward step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct WalkWeights {
    edges: EdgeWeightParams,
    reverse: f64,
}

#[derive(Debug)]
pub(super) struct DecayedCsr {
    params: WalkWeights,
    decay: EdgeDecay,
    csr: Arc<Csr>,
}

/// Per-node retention factors in [0, 1] (index position order) that scale link intensities
/// at query time: a link's intensity becomes `intensity × factor(source)` (the seed's
/// `edge_decay_intensity`), so links out of faded memories carry less of the walk.
///
/// Every constructed factor vector gets a process-unique stamp that its clones share, so the
/// index recognises the factors its cached matrix was built from in O(1); two decays are
/// equal when their stamps or their factors are.
#[derive(Debug, Clone)]
pub struct EdgeDecay {
    factors: Arc<[f64]>,
    stamp: u64,
}

// Stamps start at 1 and are never reused within a process.
static NEXT_DECAY_STAMP: AtomicU64 = AtomicU64::new(1);

impl PartialEq for EdgeDecay {
    fn eq(&self, other: &Self) -> bool {
        self.stamp == other.stamp || self.factors == other.factors
    }
}

impl EdgeDecay {
    /// Wraps the factors; errors when one is not a finite number in [0, 1].
    /// Complexity: O(nodes).
    pub fn new(factors: Vec<f64>) -> Result<Self> {
        check_factors(factors.iter().copied().enumerate())?;
        Ok(EdgeDecay {
            factors: factors.into(),
            stamp: NEXT_DECAY_STAMP.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// A copy with the factors at some positions replaced (`(position, factor)`), under a new
    /// stamp. Errors on an out-of-range position or a factor outside [0, 1].
    /// Complexity: O(nodes) for the copy.
    pub fn with_updates(&self, updates: &[(u32, f64)]) -> Result<Self> {
        check_factors(updates.iter().map(|&(i, f)| (i as usize, f)))?;
        let mut factors = self.factors.to_vec();
        for &(i, f) in updates {
            let slot = factors.get_mut(i as usize).ok_or_else(|| {
                Error::invalid_argument(
                    "decay",
                    format!("position {i} outside 0..{}", self.factors.len()),
                )
            })?;
            *slot = f;
        }
        Ok(EdgeDecay {
            factors: factors.into(),
            stamp: NEXT_DECAY_STAMP.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The factors, by node position.
    pub fn factors(&self) -> &[f64] {
        &self.factors
    }
}

fn check_factors(mut it: impl Iterator<Item = (usize, f64)>) -> Result<()> {
    match it.find(|(_, f)| !(f.is_finite() && (0.0..=1.0).contains(f))) {
        Some((i, f)) => Err(Error::invalid_argument(
            "decay",
            format!("factor {i} must be a finite number in [0, 1], got {f}"),
        )),
        None => Ok(()),
    }
}

impl RetrievalIndex {
    fn weight_params(cfg: &AssociationConfig) -> WalkWeights {
        WalkWeights {
            edges: EdgeWeightParams {
                intensity_factor: cfg.intensity_factor,
                confidence_factor: cfg.confidence_factor,
                preference: cfg.preference,
            },
            reverse: cfg.reverse_links,
        }
    }

    /// The transition matrix for `cfg`'s edge weights, rebuilt only when the weights differ
    /// from the cached one (the graph itself cannot change under an index).
    /// Complexity: O(nodes + links) on a miss, O(1) on a hit.
    pub fn transition(&self, cfg: &AssociationConfig) -> Result<Arc<Csr>> {
        let params = Self::weight_params(cfg);
        let mut guard = self
            .csr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((p, csr)) = guard.as_ref() {
            if *p == params {
                return Ok(Arc::clone(csr));
            }
        }
        let csr = Arc::new(self.build_csr(&params, None)?);
        *guard = Some((params, Arc::clone(&csr)));
        Ok(csr)
    }

    /// Errors unless `decay` has one factor per node of this index.
    fn check_decay_len(&self, decay: &EdgeDecay) -> Result<()> {
        if decay.factors.len() == self.nodes.len() {
            return Ok(());
        }
        Err(Error::invalid_argument(
            "decay",
            format!(
                "{} factors for {} nodes",
                decay.factors.len(),
                self.nodes.len()
            ),
        ))
    }

    /// The transition matrix with every link intensity scaled by its source's factor in
    /// `decay` ([`Self::transition`] when `decay` is `None`). The last decayed matrix is
    /// cached by the weights and the factors' stamp, so reusing one [`EdgeDecay`] (or a clone)
    /// costs O(1); a different decay with equal factors is recognised by comparing them, and
    /// anything else rebuilds. Errors when `decay` does not have one factor per node.
    /// Complexity: O(1) on a stamp hit; else O(nodes) to compare, plus O(nodes + links) on a
    /// miss.
    pub fn transition_decayed(
        &self,
        cfg: &AssociationConfig,
        decay: Option<&EdgeDecay>,
    ) -> Result<Arc<Csr>> {
        let Some(decay) = decay else {
            return self.transition(cfg);
        };
        self.check_decay_len(decay)?;
        let params = Self::weight_params(cfg);
        let mut guard = self
            .decayed_csr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = guard.as_mut() {
            if c.params == params && c.decay == *decay {
                // Adopt the caller's stamp so the next query with it is an O(1) hit.
                c.decay = decay.clone();
                return Ok(Arc::clone(&c.csr));
            }
        }
        let csr = Arc::new(self.build_csr(&params, Some(&decay.factors))?);
        *guard = Some(DecayedCsr {
            params,
            decay: decay.clone(),
            csr: Arc::clone(&csr),
        });
        Ok(csr)
    }

    /// Moves the cached decayed matrix from the factors `old` to `new`, which differ only at
    /// the positions `changed` (e.g. the notes just recalled: their retention grew), by
    /// rewriting those rows in place instead of rebuilding. Returns true when the cache now
    /// holds `new`. Nothing happens (false) when the cache does not hold `old`; the cache is
    /// dropped (false) when a changed row's set of positive-weight links differs (a factor
    /// reached or left 0), so the next query rebuilds. A patched row is bit-identical to a
    /// rebuilt one. Errors when `new` does not have one factor per node.
    /// Complexity: O(Σ out-degree of `changed`) plus O(nodes) when the matrix is shared and
    /// must be copied first.
    pub fn update_decay(&self, old: &EdgeDecay, new: &EdgeDecay, changed: &[u32]) -> Result<bool> {
        self.check_decay_len(new)?;
        let mut guard = self
            .decayed_csr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(c) = guard.as_mut() else {
            return Ok(false);
        };
        if c.decay.stamp != old.stamp {
            return Ok(false);
        }
        let csr = Arc::make_mut(&mut c.csr);
        let mut weights = Vec::new();
        // A node's factor also weighs its links walked backwards, in its targets' rows.
        let mut rows: Vec<u32> = changed.to_vec();
        if c.params.reverse > 0.0 {
            for &u in changed {
                rows.extend(self.out_edges(u as usize).iter().map(|e| e.to));
            }
            rows.sort_unstable();
            rows.dedup();
        }
        for &u in &rows {
            let ok = self.patch_row(csr, &c.params, u as usize, &new.factors, &mut weights);
            if !ok {
                *guard = None;
                return Ok(false);
            }
        }
        c.decay = new.clone();
        Ok(true)
    }

    // Recomputes row `u` of `csr` with the factors `decay`; false when the positive-weight
    // links of the row would change (the caller then rebuilds).
    fn patch_row(
        &self,
        csr: &mut Csr,
        params: &WalkWeights,
        u: usize,
        decay: &[f64],
        weights: &mut Vec<f64>,
    ) -> bool {
        if u >= self.nodes.len() {
            return false;
        }
        weights.clear();
        let mut targets = Vec::new();
        // The row as build_csr lays it out: links out of u, then links into u walked back.
        for (to, w) in self.row_weights(u, params, Some(decay)) {
            if w > 0.0 {
                weights.push(w);
                targets.push(to);
            }
        }
        if csr.row(u).0 != targets.as_slice() {
            return false;
        }
        Csr::normalise_row(weights);
        match csr.row_probs_mut(u) {
            Some(probs) if probs.len() == weights.len() => {
                probs.copy_from_slice(weights);
                true
            }
            _ => false,
        }
    }

    /// Number of transition matrices built (decayed or not) since the index was: a test and
    /// benchmark probe that the caches work. Complexity: O(1).
    pub fn csr_builds(&self) -> u64 {
        self.csr_builds.load(Ordering::Relaxed)
    }

    fn out_edges(&self, u: usize) -> &[RawEdge] {
        match (self.edge_offsets.get(u), self.edge_offsets.get(u + 1)) {
            (Some(&a), Some(&b)) => &self.edges[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Row `u` of the transition matrix before normalising, `(target, weight)`: u's links
    /// forwards, then (when `reverse` > 0) the links into u walked backwards at `reverse` ×
    /// their weight. A link's decay factor is its source's, in both directions.
    fn row_weights<'a>(
        &'a self,
        u: usize,
        params: &'a WalkWeights,
        decay: Option<&'a [f64]>,
    ) -> impl Iterator<Item = (u32, f64)> + 'a {
        let factor = move |e: &RawEdge| {
            decay
                .and_then(|d| d.get(e.from as usize))
                .copied()
                .unwrap_or(1.0)
        };
        let forward = self
            .out_edges(u)
            .iter()
            .map(move |e| (e.to, self.edge_weight(e, e.to, &params.edges, factor(e))));
        let backward: &[u32] = match (self.in_offsets.get(u), self.in_offsets.get(u + 1)) {
            (Some(&a), Some(&b)) if params.reverse > 0.0 => &self.in_edges[a as usize..b as usize],
            _ => &[],
        };
        // Trigger→action links stay one-way (a habit does not evoke back along its trigger).
        let backward = backward.iter().filter_map(move |&k| {
            let e = self.edges.get(k as usize)?;
            let w = match e.class {
                EdgeClass::Proc => 0.0,
                _ => params.reverse * self.edge_weight(e, e.from, &params.edges, factor(e)),
            };
            Some((e.from, w))
        });
        forward.chain(backward)
    }

    /// The weight of walking link `e` into node `target` (its target, or its source when
    /// walked backwards).
    fn edge_weight(&self, e: &RawEdge, target: u32, params: &EdgeWeightParams, factor: f64) -> f64 {
        if self.nodes[target as usize].kind == NodeKind::Procedure {
            // Actions are found by Bayes, not by the walk.
            return 0.0;
        }
        let pref = params.preference.values();
        let (cb, tb) = match e.class {
            EdgeClass::Situation => (0.8, pref[1]),
            EdgeClass::Sem(conf) => (conf, pref[0]),
            EdgeClass::Proc => (0.0, 0.0),
        };
        dyn_weight(
            e.intensity * factor,
            cb,
            tb,
            params.intensity_factor,
            params.confidence_factor,
        )
    }

    fn build_csr(&self, params: &WalkWeights, decay: Option<&[f64]>) -> Result<Csr> {
        self.csr_builds.fetch_add(1, Ordering::Relaxed);
        let weighted: Vec<(u32, u32, f64)> = (0..self.nodes.len())
            .flat_map(|u| {
                self.row_weights(u, params, decay)
                    .map(move |(to, w)| (u as u32, to, w))
            })
            .collect();
        Csr::from_edges(self.nodes.len(), &weighted)
    }
}
