//! Association (PPR), Bayes actions, AssociateWithAction and the DefaultPipeline, with
//! traced results and the multi-query merge.

use super::config::{
    AssociateWithActionConfig, AssociationConfig, PipelineConfig, ShortOnlyConfig,
};
use super::embedding::TextEmbedder;
use super::index::{EdgeDecay, RetrievalIndex};
use super::ppr::{forward_push, PprParams};
use super::query::{embed_query, EmbeddedQuery, QueryVectors, SubQuery};
use super::similarity::similarity;
use crate::error::{Error, Result};
use crate::model::{MemoryId, NodeKind};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::HashMap;

/// How an item was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// Direct similarity hit (a PPR seed).
    Similarity,
    /// Reached by PPR association only.
    Ppr,
    /// Both a similarity hit and in the PPR top-k.
    Both,
    /// An action inferred by Bayes from situation sources.
    Action,
}

impl Stage {
    fn merge(self, other: Stage) -> Stage {
        if self == other {
            self
        } else if self == Stage::Action || other == Stage::Action {
            Stage::Action
        } else {
            Stage::Both
        }
    }
}

fn kind_str<S: Serializer>(k: &NodeKind, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(k.as_str())
}

/// One recalled memory with its trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecalledMemory {
    /// Identity.
    pub id: MemoryId,
    /// Readable id.
    pub readable_id: String,
    /// Kind (serialised as its snake_case name).
    #[serde(serialize_with = "kind_str")]
    pub kind: NodeKind,
    /// Merge score: the higher of similarity and PPR score, plus the sub-query's priority
    /// offset when several sub-queries are merged.
    pub score: f64,
    /// Where it came from.
    pub stage: Stage,
    /// The similarity seed(s) it came from (itself for a direct hit; every seed of the walk
    /// for a PPR result, since multi-source PPR mixes them).
    pub seeds: Vec<MemoryId>,
}

/// One inferred action (or self-knowledge procedure) with its trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecalledAction {
    /// Procedure id.
    pub id: MemoryId,
    /// Readable id.
    pub readable_id: String,
    /// Action text.
    pub content: String,
    /// Σ prob × source weight (plus priority offset when merged).
    pub score: f64,
    /// Always [`Stage::Action`].
    pub stage: Stage,
    /// The source memories whose trigger links led here.
    pub seeds: Vec<MemoryId>,
}

/// Short-term context handed in by the caller (sliding window + summary).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ShortContext {
    /// Window messages, oldest first.
    pub messages: Vec<String>,
    /// Running summary.
    pub summary: Option<String>,
}

/// Everything the default pipeline returns.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct PipelineResult {
    /// Merged memories, best first (at most `max_memories`).
    pub memories: Vec<RecalledMemory>,
    /// The independent action channel (at most `action_top_k`).
    pub actions: Vec<RecalledAction>,
    /// Procedures reached from semantic memories: self-knowledge, not actions.
    pub self_knowledge: Vec<RecalledAction>,
    /// Window messages after clipping.
    pub short_history: Vec<String>,
    /// Summary when requested.
    pub short_summary: Option<String>,
}

/// Stage ① (seed `RetrShortOnly`): the last `clipping_length` messages and, when asked, the
/// summary. Complexity: O(messages kept).
pub fn short_only(
    cfg: &ShortOnlyConfig,
    ctx: Option<ShortContext>,
) -> (Vec<String>, Option<String>) {
    let ctx = ctx.unwrap_or_default();
    let mut msgs = ctx.messages;
    if let Some(k) = cfg.clipping_length {
        if msgs.len() > k {
            msgs.drain(..msgs.len() - k);
        }
    }
    (
        msgs,
        if cfg.include_summary {
            ctx.summary
        } else {
            None
        },
    )
}

/// PPR association (seed `RetrAssociation`): multi-source forward push from `seeds`
/// (`(position, weight)`), Procedure sources dropped, Procedure nodes never returned, best
/// `top_k` first. Empty when no seed is usable. Complexity: see [`forward_push`].
pub fn association(
    idx: &RetrievalIndex,
    seeds: &[(u32, f64)],
    cfg: &AssociationConfig,
) -> Result<Vec<(u32, f64)>> {
    association_decayed(idx, seeds, cfg, None)
}

/// [`association`] with link intensities scaled by `decay` (see
/// [`RetrievalIndex::transition_decayed`]).
pub fn association_decayed(
    idx: &RetrievalIndex,
    seeds: &[(u32, f64)],
    cfg: &AssociationConfig,
    decay: Option<&EdgeDecay>,
) -> Result<Vec<(u32, f64)>> {
    cfg.validate()?;
    let kind = |i: u32| idx.node(i as usize).map(|m| m.kind);
    let sources: Vec<(u32, f64)> = seeds
        .iter()
        .copied()
        .filter(|&(i, w)| {
            matches!(kind(i), Some(k) if k != NodeKind::Procedure) && w.is_finite() && w > 0.0
        })
        .collect();
    if sources.is_empty() || cfg.top_k == 0 {
        return Ok(Vec::new());
    }
    let csr = idx.transition_decayed(cfg, decay)?;
    let params = PprParams {
        damping: cfg.damping_factor,
        epsilon: cfg.residue_threshold,
    };
    let mut out = idx.with_workspace(|ws| forward_push(&csr, &sources, &params, ws))?;
    out.retain(|&(i, _)| kind(i) != Some(NodeKind::Procedure));
    out.truncate(cfg.top_k);
    Ok(out)
}

/// Association by memory id (unknown ids are ignored).
pub fn association_by_id(
    idx: &RetrievalIndex,
    seeds: &[(MemoryId, f64)],
    cfg: &AssociationConfig,
) -> Result<Vec<(MemoryId, f64)>> {
    let pos: Vec<(u32, f64)> = seeds
        .iter()
        .filter_map(|(id, w)| idx.position(id).map(|p| (p as u32, *w)))
        .collect();
    Ok(association(idx, &pos, cfg)?
        .into_iter()
        .filter_map(|(i, s)| idx.node(i as usize).map(|m| (m.id, s)))
        .collect())
}

/// An action candidate: `(procedure, score, source positions)`.
pub type ActionScore = (u32, f64, Vec<u32>);

/// Bayes actions (seed `RetrBayesAction`): for each source, its trigger→action links into
/// Procedure nodes; `score += prob × source weight`, summed over sources; best `top_k`.
/// Semantic sources never trigger actions. Complexity: O(Σ source out-degree + candidates log).
pub fn bayes_actions(
    idx: &RetrievalIndex,
    sources: &[(u32, f64)],
    top_k: usize,
) -> Vec<ActionScore> {
    let mut acc: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
    for &(s, w) in sources {
        let usable = matches!(idx.node(s as usize), Some(m) if m.kind != NodeKind::Semantic);
        if !usable || !w.is_finite() || w <= 0.0 {
            continue;
        }
        for &(a, prob) in idx.action_edges(s as usize) {
            let e = acc.entry(a).or_default();
            e.0 += prob * w;
            if !e.1.contains(&s) {
                e.1.push(s);
            }
        }
    }
    top(
        acc.into_iter()
            .map(|(a, (sc, seeds))| (a, sc, seeds))
            .collect(),
        top_k,
    )
}

fn top(mut v: Vec<ActionScore>, k: usize) -> Vec<ActionScore> {
    v.retain(|x| x.1.is_finite() && x.1 > 0.0);
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

/// Numerically stable softmax (max subtracted first). Empty in, empty out.
pub fn softmax(xs: &[f64]) -> Vec<f64> {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return vec![0.0; xs.len()];
    }
    let e: Vec<f64> = xs.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// Result of [`associate_with_action`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssociateWithActionResult {
    /// PPR results `(position, score)`.
    pub memory: Vec<(u32, f64)>,
    /// Actions.
    pub action: Vec<ActionScore>,
    /// The softmaxed situation sources that fed Bayes.
    pub action_sources: Vec<(u32, f64)>,
}

/// Seed `RetrAssociateWithAction`: PPR from the similarity `seeds`; then the situation sources
/// (seeds ∪ PPR results, max per node, situations only, score > 0), abstract ones ×
/// `abstract_source_priority`, softmax; then Bayes keeping its `bayes.top_k`, of which the
/// best `action_top_k` are returned.
pub fn associate_with_action(
    idx: &RetrievalIndex,
    seeds: &[(u32, f64)],
    cfg: &AssociateWithActionConfig,
) -> Result<AssociateWithActionResult> {
    associate_with_action_decayed(idx, seeds, cfg, None)
}

/// [`associate_with_action`] with PPR over decayed link intensities (see
/// [`association_decayed`]).
pub fn associate_with_action_decayed(
    idx: &RetrievalIndex,
    seeds: &[(u32, f64)],
    cfg: &AssociateWithActionConfig,
    decay: Option<&EdgeDecay>,
) -> Result<AssociateWithActionResult> {
    cfg.validate()?;
    let memory = association_decayed(idx, seeds, &cfg.association, decay)?;
    let mut merged: Vec<(u32, f64)> = Vec::new();
    for &(i, s) in seeds.iter().chain(memory.iter()) {
        let is_sit = matches!(idx.node(i as usize), Some(m) if m.kind.is_situation());
        if !is_sit || !s.is_finite() || s <= 0.0 {
            continue;
        }
        match merged.iter_mut().find(|(j, _)| *j == i) {
            Some(e) => e.1 = e.1.max(s),
            None => merged.push((i, s)),
        }
    }
    let scaled: Vec<f64> = merged
        .iter()
        .map(|&(i, s)| match idx.node(i as usize).map(|m| m.kind) {
            Some(NodeKind::AbstractSituation) => s * cfg.abstract_source_priority,
            _ => s,
        })
        .collect();
    let weights = softmax(&scaled);
    let action_sources: Vec<(u32, f64)> = merged.iter().map(|m| m.0).zip(weights).collect();
    let mut action = bayes_actions(idx, &action_sources, cfg.bayes.top_k);
    action.truncate(cfg.action_top_k);
    Ok(AssociateWithActionResult {
        memory,
        action,
        action_sources,
    })
}

struct QueryOutcome {
    memories: Vec<(u32, f64, Stage, Vec<u32>)>,
    actions: Vec<ActionScore>,
    self_knowledge: Vec<ActionScore>,
}

/// The seed's three-stage default pipeline, per sub-query, merged across sub-queries.
pub struct DefaultPipeline;

impl DefaultPipeline {
    /// Runs the pipeline for `queries` whose vectors (one [`QueryVectors`] per sub-query, in
    /// [`super::QueryTexts`] order) the caller computed with the same model as the index.
    ///
    /// Per sub-query: ② similarity seeds → ③ AssociateWithAction → memories = similarity ∪
    /// PPR (same node keeps the higher score). Across sub-queries (seed `merge_by_priority`):
    /// each score gains `priority_offset · priority / max priority` (score dominates), a node
    /// keeps its best entry, then the best `max_memories`. Actions and self-knowledge are
    /// separate channels with their own limits and never take memory places. ① short-term
    /// context is passed through.
    ///
    /// Errors on invalid configuration or mismatched vectors.
    pub fn run(
        idx: &RetrievalIndex,
        queries: &[SubQuery],
        vectors: &[QueryVectors],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
    ) -> Result<PipelineResult> {
        Self::run_decayed(idx, queries, vectors, cfg, short, None)
    }

    /// [`DefaultPipeline::run`] with PPR over link intensities scaled by `decay` (the
    /// forgetting curve of each link's source at query time; `None` = undecayed).
    pub fn run_decayed(
        idx: &RetrievalIndex,
        queries: &[SubQuery],
        vectors: &[QueryVectors],
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
        decay: Option<&EdgeDecay>,
    ) -> Result<PipelineResult> {
        cfg.validate()?;
        if queries.len() != vectors.len() {
            return Err(Error::invalid_argument(
                "query_vectors",
                format!(
                    "{} vector sets for {} sub-queries",
                    vectors.len(),
                    queries.len()
                ),
            ));
        }
        let (short_history, short_summary) = short_only(&cfg.short_mem_with_history, short);
        let dim = idx.vectors().dim();
        let mut outcomes = Vec::with_capacity(queries.len());
        for (q, v) in queries.iter().zip(vectors) {
            let eq = EmbeddedQuery::assemble(q, v, dim)?;
            outcomes.push((q.priority, Self::run_one(idx, &eq, cfg, decay)?));
        }
        let max_p = outcomes.iter().map(|o| o.0).max().unwrap_or(0);
        let offset = |p: u32| {
            if max_p == 0 {
                0.0
            } else {
                cfg.priority_offset * f64::from(p) / f64::from(max_p)
            }
        };

        let mut mem: HashMap<u32, (f64, Stage, Vec<u32>)> = HashMap::new();
        let mut act: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        let mut selfk: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        for (p, o) in &outcomes {
            let off = offset(*p);
            for (i, s, st, seeds) in &o.memories {
                let s = s + off;
                let e = mem
                    .entry(*i)
                    .or_insert((f64::NEG_INFINITY, *st, Vec::new()));
                e.1 = if e.0 == f64::NEG_INFINITY {
                    *st
                } else {
                    e.1.merge(*st)
                };
                e.0 = e.0.max(s);
                union(&mut e.2, seeds);
            }
            for (target, list) in [(&mut act, &o.actions), (&mut selfk, &o.self_knowledge)] {
                for (a, s, seeds) in list {
                    let e = target.entry(*a).or_insert((f64::NEG_INFINITY, Vec::new()));
                    e.0 = e.0.max(s + off);
                    union(&mut e.1, seeds);
                }
            }
        }
        let mut memories: Vec<(u32, f64, Stage, Vec<u32>)> = mem
            .into_iter()
            .map(|(i, (s, st, seeds))| (i, s, st, seeds))
            .collect();
        memories.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        memories.truncate(cfg.max_memories);
        let to_actions = |m: HashMap<u32, (f64, Vec<u32>)>, k: usize| -> Vec<RecalledAction> {
            top(
                m.into_iter().map(|(a, (s, seeds))| (a, s, seeds)).collect(),
                k,
            )
            .into_iter()
            .filter_map(|(a, s, seeds)| {
                let meta = idx.node(a as usize)?;
                Some(RecalledAction {
                    id: meta.id,
                    readable_id: meta.readable_id.clone(),
                    content: meta.action.clone(),
                    score: s,
                    stage: Stage::Action,
                    seeds: ids(idx, &seeds),
                })
            })
            .collect()
        };
        Ok(PipelineResult {
            memories: memories
                .into_iter()
                .filter_map(|(i, s, stage, seeds)| {
                    let meta = idx.node(i as usize)?;
                    Some(RecalledMemory {
                        id: meta.id,
                        readable_id: meta.readable_id.clone(),
                        kind: meta.kind,
                        score: s,
                        stage,
                        seeds: ids(idx, &seeds),
                    })
                })
                .collect(),
            actions: to_actions(act, cfg.assoc_with_action.action_top_k),
            self_knowledge: to_actions(selfk, cfg.self_knowledge_top_k),
            short_history,
            short_summary,
        })
    }

    /// Embeds `queries` with `embedder` (query side) and runs [`DefaultPipeline::run`].
    pub fn run_with_embedder(
        idx: &RetrievalIndex,
        queries: &[SubQuery],
        embedder: &dyn TextEmbedder,
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
    ) -> Result<PipelineResult> {
        Self::run_with_embedder_decayed(idx, queries, embedder, cfg, short, None)
    }

    /// [`DefaultPipeline::run_with_embedder`] with decayed link intensities (see
    /// [`DefaultPipeline::run_decayed`]).
    pub fn run_with_embedder_decayed(
        idx: &RetrievalIndex,
        queries: &[SubQuery],
        embedder: &dyn TextEmbedder,
        cfg: &PipelineConfig,
        short: Option<ShortContext>,
        decay: Option<&EdgeDecay>,
    ) -> Result<PipelineResult> {
        let vectors = queries
            .iter()
            .map(|q| embed_query(q, embedder))
            .collect::<Result<Vec<_>>>()?;
        Self::run_decayed(idx, queries, &vectors, cfg, short, decay)
    }

    fn run_one(
        idx: &RetrievalIndex,
        q: &EmbeddedQuery,
        cfg: &PipelineConfig,
        decay: Option<&EdgeDecay>,
    ) -> Result<QueryOutcome> {
        let sim = similarity(idx, q, &cfg.similarity);
        let seeds: Vec<(u32, f64)> = sim.iter().map(|&(i, s)| (i, f64::from(s))).collect();
        let awa = associate_with_action_decayed(idx, &seeds, &cfg.assoc_with_action, decay)?;
        let seed_positions: Vec<u32> = seeds.iter().map(|s| s.0).collect();
        let mut memories: Vec<(u32, f64, Stage, Vec<u32>)> = seeds
            .iter()
            .map(|&(i, s)| (i, s, Stage::Similarity, vec![i]))
            .collect();
        for &(i, s) in &awa.memory {
            match memories.iter_mut().find(|m| m.0 == i) {
                Some(m) => {
                    m.1 = m.1.max(s);
                    m.2 = Stage::Both;
                    union(&mut m.3, &seed_positions);
                }
                None => memories.push((i, s, Stage::Ppr, seed_positions.clone())),
            }
        }
        memories.retain(|m| m.1.is_finite());
        memories.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        memories.truncate(cfg.max_memories);
        // Self-knowledge: procedures linked from semantic memories (never actions).
        let mut sk: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        for &(i, s, _, _) in &memories {
            if !matches!(idx.node(i as usize), Some(m) if m.kind == NodeKind::Semantic) || s <= 0.0
            {
                continue;
            }
            for &(a, prob) in idx.action_edges(i as usize) {
                let e = sk.entry(a).or_default();
                e.0 += prob * s;
                union(&mut e.1, &[i]);
            }
        }
        let self_knowledge = top(
            sk.into_iter().map(|(a, (s, v))| (a, s, v)).collect(),
            cfg.self_knowledge_top_k,
        );
        Ok(QueryOutcome {
            memories,
            actions: awa.action,
            self_knowledge,
        })
    }
}

fn union(into: &mut Vec<u32>, from: &[u32]) {
    for x in from {
        if !into.contains(x) {
            into.push(*x);
        }
    }
}

fn ids(idx: &RetrievalIndex, pos: &[u32]) -> Vec<MemoryId> {
    pos.iter()
        .filter_map(|&p| idx.node(p as usize).map(|m| m.id))
        .collect()
}
