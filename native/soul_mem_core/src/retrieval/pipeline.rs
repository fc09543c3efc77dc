//! Association (PPR), Bayes actions, AssociateWithAction and the DefaultPipeline, with
//! traced results and the multi-query merge.

use super::actions::actions_for;
use super::bayes::{actions_from_sources, situation_sources, top, ActionScore};
use super::config::{
    AssociateWithActionConfig, AssociationConfig, FusionMethod, LiftTargets, PipelineConfig,
    ShortOnlyConfig,
};
use super::dense_channels::{similarity_channels_many, DenseChannels};
use super::fusion::{
    bit, calibrate_in_place, channels_of, fuse_similarity, Channel, FusedSimilarity,
};
use super::index::{EdgeDecay, RetrievalIndex};
use super::ppr::{forward_push, Csr, PprParams};
use super::query::{embed_queries, EmbeddedQuery, QueryTexts, QueryVectors, SubQuery};
use super::text_embedder::TextEmbedder;
use super::top_k::{by_score, top_k};
use crate::error::{Error, Result};
use crate::model::{MemoryId, NodeKind};
use rayon::prelude::*;
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
    /// The channels that found it: dense, tag and lexical when they scored it above their
    /// median for the query, association when the walk reached it from another seed.
    pub channels: Vec<Channel>,
    /// For a memory reached by the walk: the strongest link path from a seed to it (seed
    /// first, the memory last); empty for a seed nobody else led to.
    pub path: Vec<MemoryId>,
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
    /// Σ prob × source weight, plus `habit_match` × likeness (plus priority offset when
    /// merged).
    pub score: f64,
    /// Always [`Stage::Action`].
    pub stage: Stage,
    /// The source memories whose trigger links led here; the habit itself when its likeness
    /// to the query alone brought it.
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
    if cfg.top_k == 0 {
        cfg.validate()?;
        return Ok(Vec::new());
    }
    let (mut out, _) = walk(idx, seeds, cfg, decay)?;
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

/// Result of [`associate_with_action`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssociateWithActionResult {
    /// PPR results `(position, score)`.
    pub memory: Vec<(u32, f64)>,
    /// Actions.
    pub action: Vec<ActionScore>,
    /// The situation sources that fed Bayes (before the softmax).
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
    let merged = situation_sources(idx, seeds.iter().chain(memory.iter()).copied());
    let action = actions_from_sources(idx, &merged, cfg);
    let action_sources = merged;
    Ok(AssociateWithActionResult {
        memory,
        action,
        action_sources,
    })
}

/// One memory of one sub-query: position, score, stage, seeds, channel bits, path.
#[derive(Clone)]
struct Found {
    pos: u32,
    score: f64,
    stage: Stage,
    seeds: Vec<u32>,
    channels: u8,
    path: Vec<u32>,
}

struct QueryOutcome {
    memories: Vec<Found>,
    actions: Vec<ActionScore>,
    self_knowledge: Vec<ActionScore>,
}

/// Node specificity `(1 + degree)^−γ` (1 when γ = 0).
fn specificity(idx: &RetrievalIndex, i: u32, gamma: f64) -> f64 {
    if gamma == 0.0 {
        return 1.0;
    }
    (1.0 + idx.out_degree(i as usize) as f64).powf(-gamma)
}

/// The lexical query of a sub-query: the words of its texts (tags left to the tag channel).
pub fn query_terms(q: &SubQuery) -> Vec<String> {
    QueryTexts::of(q)
        .items
        .iter()
        .filter(|(slot, _)| !matches!(slot, super::query::QuerySlot::Tag(_)))
        .flat_map(|(_, t)| crate::text::search_terms(t))
        .collect()
}

/// Similarity seeds of one sub-query: the calibrated fusion of its channels, the nodes that
/// pass the floor (on the model's cosine scale; a node with no embedding channel passes on
/// a shared word), best `max_results` first, and the whole fused table for the merge.
pub fn seeds_of(
    idx: &RetrievalIndex,
    q: &EmbeddedQuery,
    terms: &[String],
    cfg: &PipelineConfig,
) -> (Vec<(u32, f64)>, FusedSimilarity) {
    let habits = cfg.similarity.blend.own_habits > 0.0;
    let (dense, lexical) = sub_query_channels(idx, &[(q, terms)], habits, cfg)
        .pop()
        .unwrap_or_default();
    fused_seeds(dense, &lexical, cfg)
}

/// The dense channels (with the habit cosines when `habits`) and the lexical scores of every
/// sub-query `(query, lexical terms)`, in order. On a large graph the lexical channel runs
/// beside the dense scan (it fills the gaps where the scan's chunks wait on memory or on
/// each other), and the sub-queries share one pass of the scan
/// ([`similarity_channels_many`]).
fn sub_query_channels(
    idx: &RetrievalIndex,
    items: &[(&EmbeddedQuery, &[String])],
    habits: bool,
    cfg: &PipelineConfig,
) -> Vec<(DenseChannels, Vec<f32>)> {
    let lexical = || -> Vec<Vec<f32>> {
        items
            .iter()
            .map(|(_, terms)| {
                if cfg.similarity.fusion.lexical > 0.0 && !terms.is_empty() {
                    idx.lexical_scores(terms)
                } else {
                    Vec::new()
                }
            })
            .collect()
    };
    let queries: Vec<&EmbeddedQuery> = items.iter().map(|i| i.0).collect();
    let dense = || similarity_channels_many(idx, &queries, habits, &cfg.similarity);
    let (dense, lexical) = if idx.len() >= cfg.similarity.parallel_min_nodes {
        rayon::join(dense, lexical)
    } else {
        (dense(), lexical())
    };
    dense.into_iter().zip(lexical).collect()
}

/// The calibrated fusion of one sub-query's channels and its seeds (see [`seeds_of`]).
fn fused_seeds(
    dense: DenseChannels,
    lexical: &[f32],
    cfg: &PipelineConfig,
) -> (Vec<(u32, f64)>, FusedSimilarity) {
    let fused = fuse_similarity(dense, lexical, &cfg.similarity.fusion);
    let candidates = fused
        .candidates
        .iter()
        .map(|&i| (i, f64::from(fused.score[i as usize])));
    let seeds = top_k(candidates, cfg.similarity.max_results, by_score);
    (seeds, fused)
}

/// Most sub-queries of one recall that share a pass of the similarity scan (a chat message
/// makes five: the text and four keywords).
const SHARED_SCAN_QUERIES: usize = 8;

/// Most query texts (vectors) of the sub-queries that share a pass: bounds the scan's
/// per-chunk buffer (a column per probe) whatever the sub-queries hold.
const SHARED_SCAN_TEXTS: usize = 48;

/// Where a habit the query describes happens: see [`habit_triggers`].
struct HabitWalk {
    /// The habit (procedure position).
    habit: u32,
    /// The seed that answered for it (the self note).
    holder: u32,
    /// The holder's seed score.
    weight: f64,
    /// The situations with a trigger link to the habit, with the link's probability.
    triggers: Vec<(u32, f64)>,
}

/// The trigger situations of the habit the query describes ([`FusedSimilarity::habit`]),
/// when the note that answers for it (the self) is a seed. Complexity: O(situations + their
/// action links), only for such queries.
fn habit_triggers(
    idx: &RetrievalIndex,
    fused: &FusedSimilarity,
    seeds: &[(u32, f64)],
) -> Option<HabitWalk> {
    let habit = fused.habit?;
    let self_node = idx.self_node()?;
    let &(holder, weight) = seeds.iter().find(|&&(i, _)| i == self_node)?;
    let triggers: Vec<(u32, f64)> = [NodeKind::SpecificSituation, NodeKind::AbstractSituation]
        .into_iter()
        .flat_map(|k| idx.nodes_of_kind(k).iter().copied())
        .filter_map(|i| {
            idx.action_edges(i as usize)
                .iter()
                .find(|&&(p, _)| p == habit)
                .map(|&(_, prob)| (i, prob))
        })
        .collect();
    (!triggers.is_empty()).then_some(HabitWalk {
        habit,
        holder,
        weight,
        triggers,
    })
}

/// Strongest link path from any seed to every node within `max_hops` (breadth first; among
/// equal hop counts the parent with the larger `weight × transition probability` wins).
/// Returns each reached node's parent (seeds have none). Complexity: O(links within
/// `max_hops` of the seeds), memory O(nodes touched).
fn walk_parents(csr: &Csr, seeds: &[(u32, f64)], max_hops: usize) -> HashMap<u32, u32> {
    // node → (hop, best weight, parent)
    let mut seen: HashMap<u32, (usize, f64, u32)> = HashMap::new();
    let mut frontier: Vec<u32> = Vec::new();
    for &(s, w) in seeds {
        if (s as usize) < csr.len() {
            let e = seen.entry(s).or_insert((0, 0.0, u32::MAX));
            e.1 = e.1.max(w);
            frontier.push(s);
        }
    }
    for depth in 1..=max_hops {
        let mut next = Vec::new();
        for &u in &frontier {
            let wu = seen.get(&u).map_or(0.0, |e| e.1);
            let (targets, probs) = csr.row(u as usize);
            for (&v, &p) in targets.iter().zip(probs) {
                let cand = wu * p;
                match seen.get_mut(&v) {
                    None => {
                        seen.insert(v, (depth, cand, u));
                        next.push(v);
                    }
                    Some(e) if e.0 == depth && cand > e.1 => *e = (depth, cand, u),
                    Some(_) => {}
                }
            }
        }
        frontier = next;
    }
    seen.into_iter()
        .filter(|(_, e)| e.2 != u32::MAX)
        .map(|(v, e)| (v, e.2))
        .collect()
}

fn path_to(parent: &HashMap<u32, u32>, node: u32) -> Vec<u32> {
    let mut path = vec![node];
    let mut at = node;
    while let Some(&p) = parent.get(&at) {
        if path.len() > 8 {
            break;
        }
        path.push(p);
        at = p;
    }
    path.reverse();
    if path.len() == 1 {
        path.clear();
    }
    path
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
    /// How it runs: the sub-queries' similarity channels come from one pass of the field
    /// scan for all of them (in groups of up to eight, so a request of many holds a group's
    /// channels at a time); on a graph of `parallel_min_nodes` or more, the scan runs in
    /// chunks on the rayon pool beside the lexical channel, and the sub-queries' fusion and
    /// walks run side by side. Each sub-query's outcome is what it would be alone.
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
        let embedded: Vec<EmbeddedQuery> = queries
            .iter()
            .zip(vectors)
            .map(|(q, v)| EmbeddedQuery::assemble(q, v, dim))
            .collect::<Result<_>>()?;
        let terms: Vec<Vec<String>> = queries.iter().map(query_terms).collect();
        // Sub-queries share a scan in groups: a recall's few (the text and its keywords) go
        // together, while a request of many holds a group's channels at a time, not all of
        // them (each is a few floats per node).
        let mut outcomes: Vec<(u32, QueryOutcome)> = Vec::with_capacity(queries.len());
        let mut start = 0;
        while start < queries.len() {
            let mut end = start + 1;
            let mut texts = vectors.get(start).map_or(0, Vec::len);
            while end < queries.len() && end - start < SHARED_SCAN_QUERIES {
                texts += vectors.get(end).map_or(0, Vec::len);
                if texts > SHARED_SCAN_TEXTS {
                    break;
                }
                end += 1;
            }
            let (Some(e), Some(t), Some(q)) = (
                embedded.get(start..end),
                terms.get(start..end),
                queries.get(start..end),
            ) else {
                break;
            };
            let run = Self::run_all(idx, e, t, cfg, decay)?;
            outcomes.extend(q.iter().map(|q| q.priority).zip(run));
            start = end;
        }
        let max_p = outcomes.iter().map(|o| o.0).max().unwrap_or(0);
        let offset = |p: u32| {
            if max_p == 0 {
                0.0
            } else {
                cfg.priority_offset * f64::from(p) / f64::from(max_p)
            }
        };

        let mut mem: HashMap<u32, Found> = HashMap::new();
        let mut act: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        let mut selfk: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        for (p, o) in &outcomes {
            let off = offset(*p);
            for f in &o.memories {
                let s = f.score + off;
                match mem.get_mut(&f.pos) {
                    None => {
                        mem.insert(
                            f.pos,
                            Found {
                                score: s,
                                ..f.clone()
                            },
                        );
                    }
                    Some(e) => {
                        e.stage = e.stage.merge(f.stage);
                        if s > e.score {
                            e.score = s;
                            if !f.path.is_empty() {
                                e.path = f.path.clone();
                            }
                        }
                        e.channels |= f.channels;
                        union(&mut e.seeds, &f.seeds);
                    }
                }
            }
            for (target, list) in [(&mut act, &o.actions), (&mut selfk, &o.self_knowledge)] {
                for (a, s, seeds) in list {
                    let e = target.entry(*a).or_insert((f64::NEG_INFINITY, Vec::new()));
                    e.0 = e.0.max(s + off);
                    union(&mut e.1, seeds);
                }
            }
        }
        let mut memories: Vec<Found> = mem.into_values().collect();
        memories.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.pos.cmp(&b.pos)));
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
                .filter_map(|f| {
                    let meta = idx.node(f.pos as usize)?;
                    Some(RecalledMemory {
                        id: meta.id,
                        readable_id: meta.readable_id.clone(),
                        kind: meta.kind,
                        score: f.score,
                        stage: f.stage,
                        seeds: ids(idx, &f.seeds),
                        channels: channels_of(f.channels),
                        path: ids(idx, &f.path),
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
        let vectors = embed_queries(queries, embedder)?;
        Self::run_decayed(idx, queries, &vectors, cfg, short, decay)
    }

    /// Every sub-query's outcome, in order: the similarity stage of all of them at once
    /// ([`sub_query_channels`]: one scan), then each one's fusion, walk and actions — side by side
    /// on the rayon pool on a large graph (they are independent; each gives what it gives
    /// alone).
    fn run_all(
        idx: &RetrievalIndex,
        embedded: &[EmbeddedQuery],
        terms: &[Vec<String>],
        cfg: &PipelineConfig,
        decay: Option<&EdgeDecay>,
    ) -> Result<Vec<QueryOutcome>> {
        let awa = &cfg.assoc_with_action;
        // One scan of the habits serves the notes that hold them and the action channel.
        let habits = cfg.similarity.blend.own_habits > 0.0 || awa.habit_match > 0.0;
        let items: Vec<(&EmbeddedQuery, &[String])> = embedded
            .iter()
            .zip(terms)
            .map(|(q, t)| (q, t.as_slice()))
            .collect();
        let channels = sub_query_channels(idx, &items, habits, cfg);
        let one = |(mut dense, lexical): (DenseChannels, Vec<f32>)| {
            let habits = std::mem::take(&mut dense.habits);
            let (seeds, fused) = fused_seeds(dense, &lexical, cfg);
            Self::associate(idx, &habits, seeds, &fused, cfg, decay)
        };
        if idx.len() >= cfg.similarity.parallel_min_nodes && channels.len() > 1 {
            channels.into_par_iter().map(one).collect()
        } else {
            channels.into_iter().map(one).collect()
        }
    }

    /// One sub-query's outcome from its similarity `seeds` and `fused` table (`habits`: its
    /// habit cosines): the walk from the seeds, the lift of what it reached, the actions and
    /// the self-knowledge.
    fn associate(
        idx: &RetrievalIndex,
        habits: &[f32],
        seeds: Vec<(u32, f64)>,
        fused: &FusedSimilarity,
        cfg: &PipelineConfig,
        decay: Option<&EdgeDecay>,
    ) -> Result<QueryOutcome> {
        let awa = &cfg.assoc_with_action;
        let a = &cfg.assoc_with_action.association;
        let gamma = a.hub_exponent;
        let mut sources: Vec<(u32, f64)> = seeds
            .iter()
            .map(|&(i, s)| (i, s.powf(a.seed_exponent) * specificity(idx, i, gamma)))
            .collect();
        // A query that describes a habit (the self answers for it) also starts the walk
        // where the habit happens: its trigger situations, at the self's seed weight times
        // the link's probability.
        let habit_walk = habit_triggers(idx, fused, &seeds);
        if let Some(h) = &habit_walk {
            for &(i, p) in &h.triggers {
                let w = h.weight.powf(a.seed_exponent) * p * specificity(idx, i, gamma);
                sources.push((i, w));
            }
        }
        let (reached, csr) = walk(idx, &sources, a, decay)?;
        let n = idx.len();
        // The association channel: walk mass × target specificity, calibrated like the
        // similarity channels (in log space: the mass spans orders of magnitude).
        let fcfg = &cfg.similarity.fusion;
        let mut mass: Vec<f32> = reached
            .iter()
            .map(|&(i, p)| {
                let x = p * specificity(idx, i, gamma);
                // Uncalibrated (ablation): the mass itself, divided by the best.
                if fcfg.method == FusionMethod::Raw {
                    x as f32
                } else {
                    x.ln() as f32
                }
            })
            .collect();
        calibrate_in_place(&mut mass, fcfg.method, fcfg.rrf_k, 0);
        let mut assoc = vec![f32::NAN; n];
        for (&(i, _), &m) in reached.iter().zip(&mass) {
            if let Some(slot) = assoc.get_mut(i as usize) {
                *slot = m;
            }
        }
        let parent = csr
            .as_ref()
            .map(|c| walk_parents(c, &sources, 2))
            .unwrap_or_default();
        let beta = a.blend;
        let seed_positions: Vec<u32> = seeds.iter().map(|s| s.0).collect();
        // Action sources: every situation the similarity or the walk found, scored with
        // association at equal weight whatever the memories' blend (a habit is triggered by
        // the situations a query evokes, found directly or through what it names).
        let mut sit_sources: Vec<(u32, f64)> = Vec::new();
        let mut scored: Vec<(u32, f64)> = Vec::new();
        // Only the nodes the similarity or the walk found can score.
        let found = fused.candidates.iter().copied().chain(
            reached
                .iter()
                .map(|r| r.0)
                .filter(|&i| !fused.recallable(i as usize)),
        );
        for i in found {
            let i = i as usize;
            let Some(kind) = idx.kind(i) else { continue };
            if kind == NodeKind::Procedure {
                continue;
            }
            let above = fused.recallable(i);
            let av = assoc.get(i).copied().unwrap_or(f32::NAN);
            if !above && !av.is_finite() {
                continue;
            }
            let sim_part = if above {
                f64::from(fused.score.get(i).copied().unwrap_or(0.0))
            } else {
                0.0
            };
            let liftable = kind.is_situation() || a.lift == LiftTargets::All;
            let assoc_part = if av.is_finite() && liftable {
                f64::from(av)
            } else {
                0.0
            };
            if kind.is_situation() {
                sit_sources.push((i as u32, 0.5 * (sim_part + assoc_part)));
            }
            // Association lifts, it never sinks: a memory the walk from the best match
            // reaches strongly (the episode of the person asked about) rises to where its
            // association puts it, while a strong similarity hit the walk misses keeps its
            // place. (A plain blend, which also sinks, won the multi-hop cases by 1 more but
            // lost 3 on the corpus and 5 of its abstract situations.)
            let score = sim_part.max((1.0 - beta) * sim_part + beta * assoc_part);
            if score.is_finite() {
                scored.push((i as u32, score));
            }
        }
        // Traces are built for the winners only (a path walk per node would cost O(n) each).
        let memories: Vec<Found> = top_k(scored.into_iter(), cfg.max_memories, by_score)
            .into_iter()
            .map(|(pos, score)| {
                let i = pos as usize;
                let above = fused.recallable(i);
                let path = path_to(&parent, pos);
                let similar = if above {
                    fused.strong.get(i).copied().unwrap_or(0)
                } else {
                    0
                };
                let direct = seed_positions.contains(&pos) || similar != 0;
                // A walk that starts at a habit's trigger situation starts at the habit.
                let start = path.first().copied().unwrap_or(pos);
                let (path, from_habit) = match &habit_walk {
                    Some(h)
                        if !seed_positions.contains(&start)
                            && h.triggers.iter().any(|t| t.0 == start) =>
                    {
                        let mut p = vec![h.habit];
                        p.extend(if path.is_empty() { vec![pos] } else { path });
                        (p, Some(h.holder))
                    }
                    _ => (path, None),
                };
                let mut channels = similar;
                if !path.is_empty() && beta > 0.0 {
                    channels |= bit(Channel::Association);
                }
                let stage = match (direct, path.is_empty()) {
                    (true, true) => Stage::Similarity,
                    (true, false) => Stage::Both,
                    (false, _) => Stage::Ppr,
                };
                // A similarity hit is its own seed; a walk result names the seed its path
                // starts from (all seeds when it lies beyond the traced hops; the note that
                // holds the habit when the walk started at the habit).
                let seeds = match (from_habit, path.first()) {
                    (Some(holder), _) => vec![holder],
                    (None, Some(&s)) => vec![s],
                    (None, None) if above => vec![pos],
                    (None, None) => seed_positions.clone(),
                };
                Found {
                    pos,
                    score,
                    stage,
                    seeds,
                    channels,
                    path,
                }
            })
            .collect();

        let sit_sources = top_k(sit_sources.into_iter(), cfg.max_memories, by_score);
        let actions = actions_for(idx, habits, &sit_sources, awa, fcfg);

        // Self-knowledge: procedures linked from semantic memories (never actions).
        let mut sk: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        for m in &memories {
            if !matches!(idx.node(m.pos as usize), Some(x) if x.kind == NodeKind::Semantic)
                || m.score <= 0.0
            {
                continue;
            }
            for &(p, prob) in idx.action_edges(m.pos as usize) {
                let e = sk.entry(p).or_default();
                e.0 += prob * m.score;
                union(&mut e.1, &[m.pos]);
            }
        }
        let self_knowledge = top(
            sk.into_iter().map(|(a, (s, v))| (a, s, v)).collect(),
            cfg.self_knowledge_top_k,
        );
        Ok(QueryOutcome {
            memories,
            actions,
            self_knowledge,
        })
    }
}

/// What a walk reached `(position, mass)` and the transition matrix it walked (for paths).
type Walk = (Vec<(u32, f64)>, Option<std::sync::Arc<Csr>>);

/// Every node the walk from `sources` reaches (procedures dropped), with the transition
/// matrix it used (for the trace's paths). Empty without a usable source.
fn walk(
    idx: &RetrievalIndex,
    sources: &[(u32, f64)],
    cfg: &AssociationConfig,
    decay: Option<&EdgeDecay>,
) -> Result<Walk> {
    cfg.validate()?;
    let usable: Vec<(u32, f64)> = sources
        .iter()
        .copied()
        .filter(|&(i, w)| {
            matches!(idx.kind(i as usize), Some(k) if k != NodeKind::Procedure)
                && w.is_finite()
                && w > 0.0
        })
        .collect();
    if usable.is_empty() {
        return Ok((Vec::new(), None));
    }
    let csr = idx.transition_decayed(cfg, decay)?;
    let params = PprParams {
        damping: cfg.damping_factor,
        epsilon: cfg.residue_threshold,
    };
    let mut out = idx.with_workspace(|ws| forward_push(&csr, &usable, &params, ws))?;
    out.retain(|&(i, _)| idx.kind(i as usize) != Some(NodeKind::Procedure));
    Ok((out, Some(csr)))
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
