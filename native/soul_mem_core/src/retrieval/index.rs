//! [`RetrievalIndex`]: everything retrieval needs from a graph, snapshotted into flat arrays
//! (node metadata, identifier strings, link list, trigger→action edges, vectors) so queries
//! never walk the `MemoryGraph` itself.

use super::config::AssociationConfig;
use super::embedding::{environment_text, NodeVectors, TextEmbedder};
use super::ppr::{dyn_weight, Csr, EdgeWeightParams, PprWorkspace};
use super::query::Ident;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::{AbstractSituation, MemoryId, MemoryLinkType, MemoryType, NodeKind, Situation};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What retrieval keeps of one note.
#[derive(Debug, Clone)]
pub struct NodeMeta {
    /// Identity.
    pub id: MemoryId,
    /// Readable id (for reports).
    pub readable_id: String,
    /// Kind.
    pub kind: NodeKind,
    /// Time of a specific situation.
    pub time: Option<DateTime<Utc>>,
    /// Procedure action content (empty for other kinds).
    pub action: String,
}

#[derive(Debug, Clone, Copy)]
enum EdgeClass {
    Sem(f64),
    Situation,
    Proc,
}

#[derive(Debug, Clone, Copy)]
struct RawEdge {
    from: u32,
    to: u32,
    intensity: f64,
    class: EdgeClass,
}

/// Immutable retrieval snapshot of one graph plus its vectors. Queries take `&self`; the PPR
/// transition matrix (which depends on the association weights) and the push workspace are
/// cached behind mutexes, so one index can serve concurrent queries (a contended workspace
/// is replaced by a fresh one rather than waited for).
#[derive(Debug)]
pub struct RetrievalIndex {
    version: u64,
    nodes: Vec<NodeMeta>,
    kinds: Vec<NodeKind>,
    by_id: HashMap<MemoryId, u32>,
    idents: Vec<Vec<Ident>>,
    ident_nodes: Vec<u32>,
    edges: Vec<RawEdge>,
    proc_offsets: Vec<u32>,
    proc_edges: Vec<(u32, f64)>,
    vectors: NodeVectors,
    csr: Mutex<Option<(EdgeWeightParams, Arc<Csr>)>>,
    // The last transition matrix built with decayed intensities, keyed by weights and factors.
    decayed_csr: Mutex<Option<(EdgeWeightParams, EdgeDecay, Arc<Csr>)>>,
    workspace: Mutex<PprWorkspace>,
}

/// Per-node retention factors in [0, 1] (index position order) that scale link intensities
/// at query time: a link's intensity becomes `intensity × factor(source)` (the seed's
/// `edge_decay_intensity`), so links out of faded memories carry less of the walk.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeDecay {
    factors: Vec<f64>,
}

impl EdgeDecay {
    /// Wraps the factors; errors when one is not a finite number in [0, 1].
    pub fn new(factors: Vec<f64>) -> Result<Self> {
        if let Some((i, f)) = factors
            .iter()
            .enumerate()
            .find(|(_, f)| !(f.is_finite() && (0.0..=1.0).contains(*f)))
        {
            return Err(Error::invalid_argument(
                "decay",
                format!("factor {i} must be a finite number in [0, 1], got {f}"),
            ));
        }
        Ok(EdgeDecay { factors })
    }

    /// The factors, by node position.
    pub fn factors(&self) -> &[f64] {
        &self.factors
    }
}

fn node_idents(mem: &MemoryType) -> Vec<Ident> {
    let mut out = Vec::new();
    match mem {
        MemoryType::Semantic(s) => {
            out.extend(Ident::new(&s.content));
            out.extend(s.aliases.iter().filter_map(|a| Ident::new(a)));
        }
        MemoryType::Situation(Situation::AbstractSituation(a)) => match a {
            AbstractSituation::Location(l) => out.extend(Ident::new(&l.name)),
            AbstractSituation::Participant(p) => {
                out.extend(Ident::new(&p.name));
                out.extend(Ident::new(&p.role));
            }
            AbstractSituation::Environment(e) => {
                out.extend(Ident::new(&environment_text(&e.atmosphere, &e.tone)))
            }
            AbstractSituation::Event(e) => out.extend(Ident::new(&e.action)),
        },
        // Specific situations and procedures have no identifiers: free text only.
        _ => {}
    }
    out.dedup_by(|a, b| a.text == b.text);
    out
}

impl RetrievalIndex {
    /// Snapshots `graph` with its `vectors` (built from the same graph version).
    ///
    /// Errors when the vectors do not list the graph's notes in position order.
    /// Complexity: O(nodes + links + identifier text).
    pub fn build(graph: &MemoryGraph, vectors: NodeVectors) -> Result<Self> {
        check_alignment(graph, &vectors)?;
        let n = graph.len();
        let mut nodes = Vec::with_capacity(n);
        let mut idents = Vec::with_capacity(n);
        let mut ident_nodes = Vec::new();
        let mut edges = Vec::new();
        let mut proc_offsets = Vec::with_capacity(n + 1);
        let mut proc_edges = Vec::new();
        let mut by_id = HashMap::with_capacity(n);
        proc_offsets.push(0u32);
        for (i, note) in graph.notes().enumerate() {
            by_id.insert(note.id, i as u32);
            let (time, action) = match &note.mem_type {
                MemoryType::Situation(Situation::SpecificSituation(s)) => {
                    (s.time_span, String::new())
                }
                MemoryType::Procedure(p) => (None, p.action.content.clone()),
                _ => (None, String::new()),
            };
            nodes.push(NodeMeta {
                id: note.id,
                readable_id: note.readable_id.clone(),
                kind: note.kind(),
                time,
                action,
            });
            let ids = node_idents(&note.mem_type);
            if !ids.is_empty() {
                ident_nodes.push(i as u32);
            }
            idents.push(ids);
            for link in &note.links {
                let Some(to) = graph.index_of(&link.to) else {
                    continue;
                };
                let target_kind = graph.note_at(to).map(|t| t.kind());
                let class = match &link.link_type {
                    MemoryLinkType::Sem(s) => EdgeClass::Sem(f64::from(s.confidence)),
                    MemoryLinkType::Situation(_) => EdgeClass::Situation,
                    MemoryLinkType::Proc(p) => {
                        let prob = p.prob();
                        if target_kind == Some(NodeKind::Procedure)
                            && prob.is_finite()
                            && prob > 0.0
                        {
                            proc_edges.push((to as u32, prob));
                        }
                        EdgeClass::Proc
                    }
                };
                edges.push(RawEdge {
                    from: i as u32,
                    to: to as u32,
                    intensity: link.intensity,
                    class,
                });
            }
            proc_offsets.push(proc_edges.len() as u32);
        }
        Ok(RetrievalIndex {
            version: graph.version(),
            kinds: nodes.iter().map(|m| m.kind).collect(),
            nodes,
            by_id,
            idents,
            ident_nodes,
            edges,
            proc_offsets,
            proc_edges,
            vectors,
            csr: Mutex::new(None),
            decayed_csr: Mutex::new(None),
            workspace: Mutex::new(PprWorkspace::new()),
        })
    }

    /// Embeds `graph` with `embedder` and builds the index.
    pub fn build_with_embedder(graph: &MemoryGraph, embedder: &dyn TextEmbedder) -> Result<Self> {
        let vectors = NodeVectors::embed_graph(graph, embedder)?;
        Self::build(graph, vectors)
    }

    /// Brings the index up to date with `graph`: rebuilds when the graph's version changed or
    /// new `vectors` are given (which must then describe the current graph). Without new
    /// vectors a changed graph keeps the old ones only if they still line up; otherwise an
    /// error asks for re-embedding. Returns whether anything was rebuilt.
    pub fn refresh(&mut self, graph: &MemoryGraph, vectors: Option<NodeVectors>) -> Result<bool> {
        if vectors.is_none() && graph.version() == self.version {
            return Ok(false);
        }
        let vectors = match vectors {
            Some(v) => v,
            None => {
                check_alignment(graph, &self.vectors)?;
                self.vectors.clone()
            }
        };
        *self = Self::build(graph, vectors)?;
        Ok(true)
    }

    /// True when built from this version of `graph`.
    pub fn is_current(&self, graph: &MemoryGraph) -> bool {
        graph.version() == self.version
    }

    /// Graph version the snapshot was taken at.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph was empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node metadata by position.
    pub fn node(&self, i: usize) -> Option<&NodeMeta> {
        self.nodes.get(i)
    }

    /// Kind of node `i` (a dense byte array: the similarity scan reads it per node).
    #[inline]
    pub fn kind(&self, i: usize) -> Option<NodeKind> {
        self.kinds.get(i).copied()
    }

    /// All node metadata in position order.
    pub fn nodes(&self) -> &[NodeMeta] {
        &self.nodes
    }

    /// Position of a node id.
    pub fn position(&self, id: &MemoryId) -> Option<usize> {
        self.by_id.get(id).map(|&i| i as usize)
    }

    /// The vectors.
    pub fn vectors(&self) -> &NodeVectors {
        &self.vectors
    }

    /// Identifiers of node `i` (string channel).
    pub(crate) fn idents(&self, i: usize) -> &[Ident] {
        self.idents.get(i).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Nodes that have identifiers.
    pub(crate) fn ident_nodes(&self) -> &[u32] {
        &self.ident_nodes
    }

    /// Trigger→action edges of node `i` into Procedure nodes: `(procedure, prob)`.
    pub fn action_edges(&self, i: usize) -> &[(u32, f64)] {
        match (self.proc_offsets.get(i), self.proc_offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.proc_edges[a as usize..b as usize],
            _ => &[],
        }
    }

    fn weight_params(cfg: &AssociationConfig) -> EdgeWeightParams {
        EdgeWeightParams {
            intensity_factor: cfg.intensity_factor,
            confidence_factor: cfg.confidence_factor,
            preference: cfg.preference,
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

    /// The transition matrix with every link intensity scaled by its source's factor in
    /// `decay` ([`Self::transition`] when `decay` is `None`). The last decayed matrix is
    /// cached by weights and factors. Errors when `decay` does not have one factor per node.
    /// Complexity: O(nodes) to compare the factors, plus O(nodes + links) on a miss.
    pub fn transition_decayed(
        &self,
        cfg: &AssociationConfig,
        decay: Option<&EdgeDecay>,
    ) -> Result<Arc<Csr>> {
        let Some(decay) = decay else {
            return self.transition(cfg);
        };
        if decay.factors.len() != self.nodes.len() {
            return Err(Error::invalid_argument(
                "decay",
                format!(
                    "{} factors for {} nodes",
                    decay.factors.len(),
                    self.nodes.len()
                ),
            ));
        }
        let params = Self::weight_params(cfg);
        let mut guard = self
            .decayed_csr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((p, d, csr)) = guard.as_ref() {
            if *p == params && d == decay {
                return Ok(Arc::clone(csr));
            }
        }
        let csr = Arc::new(self.build_csr(&params, Some(&decay.factors))?);
        *guard = Some((params, decay.clone(), Arc::clone(&csr)));
        Ok(csr)
    }

    fn build_csr(&self, params: &EdgeWeightParams, decay: Option<&[f64]>) -> Result<Csr> {
        let pref = params.preference.values();
        let weighted: Vec<(u32, u32, f64)> = self
            .edges
            .iter()
            .map(|e| {
                let w = if self.nodes[e.to as usize].kind == NodeKind::Procedure {
                    // Actions are found by Bayes, not by the walk.
                    0.0
                } else {
                    let (cb, tb) = match e.class {
                        EdgeClass::Situation => (0.8, pref[1]),
                        EdgeClass::Sem(conf) => (conf, pref[0]),
                        EdgeClass::Proc => (0.0, 0.0),
                    };
                    let factor = decay
                        .and_then(|d| d.get(e.from as usize))
                        .copied()
                        .unwrap_or(1.0);
                    dyn_weight(
                        e.intensity * factor,
                        cb,
                        tb,
                        params.intensity_factor,
                        params.confidence_factor,
                    )
                };
                (e.from, e.to, w)
            })
            .collect();
        Csr::from_edges(self.nodes.len(), &weighted)
    }

    /// Runs `f` with the cached push workspace, or a fresh one when another query holds it.
    pub(crate) fn with_workspace<T>(&self, f: impl FnOnce(&mut PprWorkspace) -> T) -> T {
        match self.workspace.try_lock() {
            Ok(mut ws) => f(&mut ws),
            Err(std::sync::TryLockError::Poisoned(p)) => f(&mut p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => f(&mut PprWorkspace::new()),
        }
    }
}

fn check_alignment(graph: &MemoryGraph, vectors: &NodeVectors) -> Result<()> {
    if vectors.len() != graph.len() || !graph.notes().zip(vectors.ids()).all(|(n, id)| n.id == *id)
    {
        return Err(Error::invalid_argument(
            "vectors",
            format!(
                "vectors describe {} nodes that do not line up with the graph's {} notes; re-embed",
                vectors.len(),
                graph.len()
            ),
        ));
    }
    Ok(())
}
