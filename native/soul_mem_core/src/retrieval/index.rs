//! [`RetrievalIndex`]: everything retrieval needs from a graph, snapshotted into flat arrays
//! (node metadata, identifier strings, link list, trigger→action edges, vectors) so queries
//! never walk the `MemoryGraph` itself.

mod node_facts;
mod transition;

pub use node_facts::NodeFacts;
pub use transition::EdgeDecay;
use transition::{DecayedCsr, WalkWeights};

use super::field_vectors::NodeVectors;
use super::lexical::{LexicalIndex, Refusals};
use super::ppr::{Csr, PprWorkspace};
use super::query::Ident;
use super::similarity::SimScratch;
use super::text_embedder::TextEmbedder;
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::import::SELF_NODE_ID;
use crate::model::{IdMap, MemoryId, MemoryLinkType, NodeKind};
use chrono::{DateTime, Utc};
use std::sync::atomic::AtomicU64;
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
/// transition matrices (plain and decayed, which depend on the association weights and the
/// decay), push workspaces and the similarity buffers are cached behind mutexes, so one
/// index can serve concurrent queries (a contended buffer set is replaced by a fresh one
/// rather than waited for; a workspace is taken from a pool).
#[derive(Debug)]
pub struct RetrievalIndex {
    version: u64,
    nodes: Vec<NodeMeta>,
    // The content revision each node's facts (and vectors) were made from: what the next
    // snapshot checks before carrying them over ([`NodeFacts`]).
    revisions: Vec<u64>,
    kinds: Vec<NodeKind>,
    // Node positions grouped by kind (kind slot order, ascending within a kind), the start of
    // each kind's group, and each node's rank in this order: per-node scoring runs one kind
    // at a time (predictable branches) and writes its scores sequentially by rank.
    kind_order: Vec<u32>,
    kind_starts: [usize; 5],
    kind_rank: Vec<u32>,
    by_id: IdMap<u32>,
    // Every node's identifiers in one array, node i's at `ident_offsets[i]..[i + 1]`: the
    // string channel reads the bloom filters of tens of thousands of nodes per query, and a
    // separate allocation per node made each read a cache miss.
    idents: Vec<Ident>,
    ident_offsets: Vec<u32>,
    ident_nodes: Vec<u32>,
    /// The self note (`sem_self`), when the graph has one.
    self_node: Option<u32>,
    /// Semantic notes that hold habits: the self note and those with trigger→action links.
    habit_holders: Vec<u32>,
    /// Notes flagged core, ascending (graph order).
    core_nodes: Vec<u32>,
    edges: Vec<RawEdge>,
    // `edges` are grouped by source: node i's links are `edge_offsets[i]..edge_offsets[i + 1]`
    // (what a single-row patch of the decayed matrix recomputes).
    edge_offsets: Vec<u32>,
    // The same links grouped by target: node i's incoming links are
    // `edges[in_edges[in_offsets[i]..in_offsets[i + 1]]]`, in `edges` order (the walk also
    // steps along a link backwards, `AssociationConfig::reverse_links`).
    in_offsets: Vec<u32>,
    in_edges: Vec<u32>,
    proc_offsets: Vec<u32>,
    proc_edges: Vec<(u32, f64)>,
    vectors: NodeVectors,
    // Inverted tag lists: the kind-order ranks of the nodes carrying distinct tag j are
    // `tag_ranks[tag_node_offsets[j]..tag_node_offsets[j + 1]]`.
    tag_node_offsets: Vec<u32>,
    tag_ranks: Vec<u32>,
    csr: Mutex<Option<(WalkWeights, Arc<Csr>)>>,
    // The last transition matrix built with decayed intensities, keyed by the weights and the
    // factors' stamp (the graph cannot change under an index).
    decayed_csr: Mutex<Option<DecayedCsr>>,
    // Transition matrices built so far (tests and benchmarks check the caches with it).
    csr_builds: AtomicU64,
    // Push workspaces put back after use (sub-queries walk side by side, each with its own).
    workspaces: Mutex<Vec<PprWorkspace>>,
    sim_scratch: Mutex<SimScratch>,
    // The lexical channel: carried from one snapshot to the next and synced (only changed
    // notes are re-segmented), with its slots mapped to this snapshot's positions.
    lexical: LexicalIndex,
    lex_pos: Vec<u32>,
    lexical_refused: Vec<(String, String)>,
}

impl RetrievalIndex {
    /// Snapshots `graph` with its `vectors` (built from the same graph version).
    ///
    /// Errors when the vectors do not list the graph's notes in position order.
    /// Complexity: O(nodes + links + identifier text).
    pub fn build(graph: &MemoryGraph, vectors: NodeVectors) -> Result<Self> {
        Self::build_reusing(graph, vectors, None)
    }

    /// [`Self::build`], taking the lexical index of `previous` (an older snapshot of the same
    /// character) and syncing it instead of re-segmenting every note: only notes whose text
    /// changed, and new ones, cost a segmentation. Notes the lexical index refuses (text over
    /// its limit) are left out of word search and listed by [`Self::lexical_refused`].
    /// Complexity: O(nodes + links + identifier text) plus the lexical sync.
    pub fn build_reusing(
        graph: &MemoryGraph,
        vectors: NodeVectors,
        previous: Option<RetrievalIndex>,
    ) -> Result<Self> {
        Self::build_with_lexical(
            graph,
            vectors,
            previous.map(|p| p.lexical).unwrap_or_default(),
        )
    }

    /// Gives the snapshot up for the parts a rebuild reuses: its vectors (to be updated in
    /// place, [`crate::retrieval::VectorPlan::assemble_owned`]), its lexical index (to be
    /// synced, [`Self::build_with_lexical`]) and its notes' facts (carried over by
    /// [`Self::build_synced`]). Complexity: O(1) (the rest is dropped).
    pub fn into_parts(self) -> (NodeVectors, LexicalIndex, NodeFacts) {
        let facts = NodeFacts {
            nodes: self.nodes,
            idents: self.idents,
            ident_offsets: self.ident_offsets,
            revisions: self.revisions,
            by_id: self.by_id,
        };
        (self.vectors, self.lexical, facts)
    }

    /// [`Self::build`] with `lexical` (an older snapshot's, from [`Self::into_parts`]) synced
    /// to the graph instead of built: only notes whose text changed, and new ones, cost a
    /// segmentation. Notes the lexical index refuses (text over its limit) are left out of
    /// word search and listed by [`Self::lexical_refused`].
    /// Complexity: O(nodes + links + identifier text) plus the lexical sync.
    pub fn build_with_lexical(
        graph: &MemoryGraph,
        vectors: NodeVectors,
        mut lexical: LexicalIndex,
    ) -> Result<Self> {
        check_alignment(graph, &vectors)?;
        let refused = lexical.sync(graph);
        Self::build_synced(graph, vectors, lexical, refused, NodeFacts::default())
    }

    /// [`Self::build_with_lexical`] with `lexical` already synced to `graph`
    /// ([`LexicalIndex::sync`], which answered `refused`): what a caller that syncs it on
    /// another thread while the vectors are made builds from. The notes whose content
    /// revision `facts` (an older snapshot's, [`Self::into_parts`]) holds take their metadata
    /// and identifiers from there.
    /// Complexity: O(nodes + links) plus the identifier text of the notes not in `facts`.
    pub fn build_synced(
        graph: &MemoryGraph,
        vectors: NodeVectors,
        lexical: LexicalIndex,
        refused: Refusals,
        mut facts: NodeFacts,
    ) -> Result<Self> {
        check_alignment(graph, &vectors)?;
        let lexical_refused: Vec<(String, String)> = refused
            .into_iter()
            .map(|(id, e)| (graph.readable_of(&id), e.to_string()))
            .collect();
        let n = graph.len();
        let mut nodes = Vec::with_capacity(n);
        let mut revisions = Vec::with_capacity(n);
        let mut idents = Vec::new();
        let mut ident_offsets = Vec::with_capacity(n + 1);
        ident_offsets.push(0u32);
        let mut ident_nodes = Vec::new();
        let mut core_nodes = Vec::new();
        let mut edges = Vec::new();
        let mut edge_offsets = Vec::with_capacity(n + 1);
        edge_offsets.push(0u32);
        let mut proc_offsets = Vec::with_capacity(n + 1);
        let mut proc_edges = Vec::new();
        let mut by_id = IdMap::with_capacity_and_hasher(n, Default::default());
        proc_offsets.push(0u32);
        for (i, note) in graph.notes().enumerate() {
            by_id.insert(note.id, i as u32);
            if note.core {
                core_nodes.push(i as u32);
            }
            let rev = graph.content_revision(&note.id).unwrap_or(0);
            revisions.push(rev);
            let first = idents.len();
            facts.push(note, rev, &mut nodes, &mut idents);
            if idents.len() > first {
                ident_nodes.push(i as u32);
            }
            ident_offsets.push(idents.len() as u32);
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
            edge_offsets.push(edges.len() as u32);
            proc_offsets.push(proc_edges.len() as u32);
        }
        let (in_offsets, in_edges) = invert_edges(n, &edges);
        let (tag_node_offsets, mut tag_ranks) = invert_tags(&vectors);
        let mut by_kind: [Vec<u32>; 4] = Default::default();
        for (i, m) in nodes.iter().enumerate() {
            by_kind[kind_slot(m.kind)].push(i as u32);
        }
        let mut kind_starts = [0usize; 5];
        for (k, group) in by_kind.iter().enumerate() {
            kind_starts[k + 1] = kind_starts[k] + group.len();
        }
        let kind_order: Vec<u32> = by_kind.concat();
        let mut kind_rank = vec![0u32; n];
        for (r, &i) in kind_order.iter().enumerate() {
            if let Some(slot) = kind_rank.get_mut(i as usize) {
                *slot = r as u32;
            }
        }
        for r in &mut tag_ranks {
            *r = kind_rank.get(*r as usize).copied().unwrap_or(u32::MAX);
        }
        let lex_pos: Vec<u32> = (0..lexical.slots() as u32)
            .map(|slot| {
                lexical
                    .slot_id(slot)
                    .filter(|id| lexical.contains(id))
                    .and_then(|id| by_id.get(&id).copied())
                    .unwrap_or(u32::MAX)
            })
            .collect();
        let self_node = graph
            .resolve(SELF_NODE_ID)
            .and_then(|id| by_id.get(&id).copied())
            .filter(|&i| nodes[i as usize].kind == NodeKind::Semantic);
        let habit_holders: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                let k = i as usize;
                nodes[k].kind == NodeKind::Semantic
                    && (Some(i) == self_node || proc_offsets[k] != proc_offsets[k + 1])
            })
            .collect();
        Ok(RetrievalIndex {
            version: graph.version(),
            kinds: nodes.iter().map(|m| m.kind).collect(),
            revisions,
            kind_order,
            kind_starts,
            kind_rank,
            nodes,
            by_id,
            idents,
            ident_offsets,
            ident_nodes,
            self_node,
            habit_holders,
            core_nodes,
            edges,
            edge_offsets,
            in_offsets,
            in_edges,
            proc_offsets,
            proc_edges,
            vectors,
            tag_node_offsets,
            tag_ranks,
            csr: Mutex::new(None),
            decayed_csr: Mutex::new(None),
            csr_builds: AtomicU64::new(0),
            workspaces: Mutex::new(Vec::new()),
            sim_scratch: Mutex::new(SimScratch::default()),
            lexical,
            lex_pos,
            lexical_refused,
        })
    }

    /// BM25F score of every node sharing a word with `terms`, by position (0 elsewhere).
    /// Complexity: O(n) for the buffer plus O(Σ postings of the terms).
    pub fn lexical_scores(&self, terms: &[String]) -> Vec<f32> {
        let mut out = vec![0f32; self.nodes.len()];
        self.lexical.score_into(terms, |slot, s| {
            if let Some(&p) = self.lex_pos.get(slot as usize) {
                if let Some(x) = out.get_mut(p as usize) {
                    *x += s;
                }
            }
        });
        out
    }

    /// The lexical index itself (sizes, incremental updates in benchmarks).
    pub fn lexical(&self) -> &LexicalIndex {
        &self.lexical
    }

    /// Notes left out of the lexical channel when this snapshot was built: `(readable id,
    /// reason)`.
    pub fn lexical_refused(&self) -> &[(String, String)] {
        &self.lexical_refused
    }

    /// Number of links out of node `i` (its degree for node specificity; links in these graphs
    /// come in pairs). Complexity: O(1).
    pub fn out_degree(&self, i: usize) -> usize {
        match (self.edge_offsets.get(i), self.edge_offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => (b - a) as usize,
            _ => 0,
        }
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
        let lexical = std::mem::take(&mut self.lexical);
        *self = Self::build_with_lexical(graph, vectors, lexical)?;
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

    /// Positions of the nodes of `kind`, ascending. Complexity: O(1).
    pub fn nodes_of_kind(&self, kind: NodeKind) -> &[u32] {
        let k = kind_slot(kind);
        self.kind_order
            .get(self.kind_starts[k]..self.kind_starts[k + 1])
            .unwrap_or(&[])
    }

    /// Rank of each kind's first node in the kind order (nodes of kind slot `k` have ranks
    /// `kind_start(k)..kind_start(k + 1)`; slots: semantic, specific, abstract, procedure).
    pub(crate) fn kind_start(&self, slot: usize) -> usize {
        self.kind_starts
            .get(slot)
            .copied()
            .unwrap_or(self.nodes.len())
    }

    /// The nodes in kind order (rank → position).
    pub(crate) fn kind_order(&self) -> &[u32] {
        &self.kind_order
    }

    /// Rank of node `i` in the kind order.
    #[inline]
    pub(crate) fn kind_rank(&self, i: usize) -> usize {
        self.kind_rank.get(i).map_or(usize::MAX, |&r| r as usize)
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
        match (self.ident_offsets.get(i), self.ident_offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => self.idents.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Kind-order ranks (see [`Self::kind_rank`]) of the nodes carrying distinct tag `j`
    /// (see [`NodeVectors::tag_vocab`]).
    pub(crate) fn tag_ranks(&self, j: usize) -> &[u32] {
        match (
            self.tag_node_offsets.get(j),
            self.tag_node_offsets.get(j + 1),
        ) {
            (Some(&a), Some(&b)) => self.tag_ranks.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Nodes that have identifiers.
    pub(crate) fn ident_nodes(&self) -> &[u32] {
        &self.ident_nodes
    }

    /// Positions of the notes flagged core, ascending (graph order). Complexity: O(1).
    pub fn core_nodes(&self) -> &[u32] {
        &self.core_nodes
    }

    /// The self note (`sem_self`, a semantic note), when the graph has one. Complexity: O(1).
    pub(crate) fn self_node(&self) -> Option<u32> {
        self.self_node
    }

    /// Semantic notes that hold habits (the self note, and those linking to procedures),
    /// ascending.
    pub(crate) fn habit_holders(&self) -> &[u32] {
        &self.habit_holders
    }

    /// Trigger→action edges of node `i` into Procedure nodes: `(procedure, prob)`.
    pub fn action_edges(&self, i: usize) -> &[(u32, f64)] {
        match (self.proc_offsets.get(i), self.proc_offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.proc_edges[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Runs `f` with the cached similarity buffers, or fresh ones when another query holds
    /// them.
    pub(crate) fn with_sim_scratch<T>(&self, f: impl FnOnce(&mut SimScratch) -> T) -> T {
        match self.sim_scratch.try_lock() {
            Ok(mut s) => f(&mut s),
            Err(std::sync::TryLockError::Poisoned(p)) => f(&mut p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => f(&mut SimScratch::default()),
        }
    }

    /// Runs `f` with a cached push workspace (a fresh one when every cached one is in use),
    /// which is kept for later queries afterwards. The pool's lock is held only to take or
    /// put back a workspace, never while a walk runs.
    pub(crate) fn with_workspace<T>(&self, f: impl FnOnce(&mut PprWorkspace) -> T) -> T {
        let pool = || self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        let mut ws = pool().pop().unwrap_or_default();
        let out = f(&mut ws);
        let mut kept = pool();
        // As many as walk at once: one per thread of the pool, and a few callers.
        if kept.len() < rayon::current_num_threads() + 2 {
            kept.push(ws);
        }
        out
    }
}

/// The links grouped by target: `(offsets, link indices)`, each group in `edges` order.
/// Complexity: O(nodes + links).
fn invert_edges(n: usize, edges: &[RawEdge]) -> (Vec<u32>, Vec<u32>) {
    let mut offsets = vec![0u32; n + 1];
    for e in edges {
        offsets[e.to as usize + 1] += 1;
    }
    for i in 0..n {
        offsets[i + 1] += offsets[i];
    }
    let mut fill = offsets.clone();
    let mut out = vec![0u32; edges.len()];
    for (k, e) in edges.iter().enumerate() {
        let at = &mut fill[e.to as usize];
        out[*at as usize] = k as u32;
        *at += 1;
    }
    (offsets, out)
}

/// The inverted tag lists of `v` (offsets by distinct tag, then node positions).
/// Complexity: O(nodes + tag references) (counting sort).
fn invert_tags(v: &NodeVectors) -> (Vec<u32>, Vec<u32>) {
    let vocab = v.tag_vocab().len();
    let mut offsets = vec![0u32; vocab + 1];
    for i in 0..v.len() {
        for &j in v.node_tags(i) {
            if let Some(c) = offsets.get_mut(j as usize + 1) {
                *c += 1;
            }
        }
    }
    for j in 0..vocab {
        offsets[j + 1] += offsets[j];
    }
    let mut fill = offsets.clone();
    let mut nodes = vec![0u32; offsets[vocab] as usize];
    for i in 0..v.len() {
        for &j in v.node_tags(i) {
            if let Some(at) = fill.get_mut(j as usize) {
                if let Some(slot) = nodes.get_mut(*at as usize) {
                    *slot = i as u32;
                }
                *at += 1;
            }
        }
    }
    (offsets, nodes)
}

fn kind_slot(kind: NodeKind) -> usize {
    match kind {
        NodeKind::Semantic => 0,
        NodeKind::SpecificSituation => 1,
        NodeKind::AbstractSituation => 2,
        NodeKind::Procedure => 3,
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
