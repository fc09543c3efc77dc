//! Running one test case in one mode: what each [`Mode`] returns ([`Returned`]). Scoring
//! what came back and summing the scores is `score.rs`.
//!
//! Modes map onto what `soul_mem_core::retrieval` offers:
//! - [`Mode::Embedding`]: fused similarity only ([`similarity`]), per sub-query, merged with
//!   the pipeline's priority rule (score + `priority_offset · p / max p`, a node keeps its
//!   best entry, best `max_results`). No PPR, no actions.
//! - [`Mode::Association`]: similarity seeds, then PPR ([`association`]) from them; per node
//!   `score = (1 − β)·sim + β·ppr / max ppr` with β = [`EMBED_PPR_BLEND`] (the seed's
//!   RetrieveMode::Association), merged across sub-queries as above. No actions.
//! - [`Mode::Full`]: [`DefaultPipeline::run`] as the engine runs it (calibrated fusion of
//!   the dense, tag and lexical channels into seeds, PPR association blended in, Bayes
//!   actions, self-knowledge procedures).
//! - [`Mode::Bm25`]: the baseline of the lexical channel alone (BM25F over the notes' words,
//!   the same tokenizer), merged across sub-queries like the others.

use serde::Serialize;
use soul_mem_core::model::NodeKind;
use soul_mem_core::retrieval::{
    association, bayes_actions, query_terms, similarity, situation_sources, softmax,
    DefaultPipeline, EmbeddedQuery, PipelineConfig, PipelineResult, QueryVectors, RetrievalIndex,
    Stage, SubQuery,
};
use std::collections::HashMap;

/// β of the association mode: weight of the (max-normalised) PPR score against similarity.
pub const EMBED_PPR_BLEND: f64 = 0.5;

/// Evaluation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Similarity only.
    Embedding,
    /// Similarity seeds + PPR memories.
    Association,
    /// The default pipeline, with actions.
    Full,
    /// Baseline: BM25F over the notes' words alone (the lexical channel), no embeddings.
    Bm25,
    /// The default pipeline over working memory: the graph in a store, each case recalled
    /// through a fresh `WorkingMemory` (seeds, activation, boundary expansion) — what a
    /// character above the working-memory threshold answers (`working.rs`).
    Working,
}

impl Mode {
    /// Parses `embedding`, `association`, `full`, `bm25` or `working`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "embedding" | "embed" => Some(Mode::Embedding),
            "association" | "assoc" => Some(Mode::Association),
            "full" | "pipeline" => Some(Mode::Full),
            "bm25" | "lexical" => Some(Mode::Bm25),
            "working" => Some(Mode::Working),
            _ => None,
        }
    }

    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Embedding => "embedding",
            Mode::Association => "association",
            Mode::Full => "full",
            Mode::Bm25 => "bm25",
            Mode::Working => "working",
        }
    }

    /// True for the modes that run the whole pipeline, action channel included.
    pub fn has_actions(self) -> bool {
        matches!(self, Mode::Full | Mode::Working)
    }
}

/// What one run of one case returned.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Returned {
    /// Memories, best first, with how they were found.
    pub memories: Vec<(String, Stage)>,
    /// Action channel (full mode only), best first.
    pub actions: Vec<String>,
    /// Self-knowledge procedures (full mode only), best first.
    pub self_knowledge: Vec<String>,
}

impl Returned {
    /// What a whole pipeline run returned (memories with their stage, actions,
    /// self-knowledge), by readable id.
    pub fn of(r: PipelineResult) -> Returned {
        Returned {
            memories: r
                .memories
                .into_iter()
                .map(|m| (m.readable_id, m.stage))
                .collect(),
            actions: r.actions.into_iter().map(|a| a.readable_id).collect(),
            self_knowledge: r
                .self_knowledge
                .into_iter()
                .map(|a| a.readable_id)
                .collect(),
        }
    }
}

type Scored = (u32, f64, Stage);

fn merge_by_priority(per_query: Vec<(u32, Vec<Scored>)>, cfg: &PipelineConfig) -> Vec<Scored> {
    let max_p = per_query.iter().map(|o| o.0).max().unwrap_or(0);
    let mut best: HashMap<u32, (f64, Stage)> = HashMap::new();
    for (p, list) in per_query {
        let off = if max_p == 0 {
            0.0
        } else {
            cfg.priority_offset * f64::from(p) / f64::from(max_p)
        };
        for (i, s, st) in list {
            let s = s + off;
            let e = best.entry(i).or_insert((f64::NEG_INFINITY, st));
            if e.1 != st {
                e.1 = Stage::Both;
            }
            e.0 = e.0.max(s);
        }
    }
    let mut out: Vec<Scored> = best.into_iter().map(|(i, (s, st))| (i, s, st)).collect();
    out.retain(|m| m.1.is_finite());
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(cfg.max_memories);
    out
}

fn one_query(
    idx: &RetrievalIndex,
    q: &SubQuery,
    v: &QueryVectors,
    mode: Mode,
    cfg: &PipelineConfig,
) -> soul_mem_core::Result<Vec<Scored>> {
    if mode == Mode::Bm25 {
        let scores = idx.lexical_scores(&query_terms(q));
        let mut out: Vec<Scored> = scores
            .iter()
            .enumerate()
            .filter(|&(i, &s)| s > 0.0 && idx.kind(i) != Some(NodeKind::Procedure))
            .map(|(i, &s)| (i as u32, f64::from(s), Stage::Similarity))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(cfg.max_memories);
        return Ok(out);
    }
    let eq = EmbeddedQuery::assemble(q, v, idx.vectors().dim())?;
    // Similarity alone judges as many memories as the pipeline returns.
    let mut scfg = cfg.similarity.clone();
    scfg.max_results = cfg.max_memories;
    let sim = similarity(idx, &eq, &scfg);
    let mut out: Vec<Scored> = sim
        .iter()
        .map(|&(i, s)| (i, f64::from(s), Stage::Similarity))
        .collect();
    if mode == Mode::Association {
        let seeds: Vec<(u32, f64)> = sim.iter().map(|&(i, s)| (i, f64::from(s))).collect();
        let ppr = association(idx, &seeds, &cfg.assoc_with_action.association)?;
        let max_ppr = ppr.iter().map(|p| p.1).fold(0.0, f64::max);
        let norm = |x: f64| if max_ppr > 0.0 { x / max_ppr } else { 0.0 };
        for m in &mut out {
            m.1 *= 1.0 - EMBED_PPR_BLEND;
        }
        for (i, p) in ppr {
            match out.iter_mut().find(|m| m.0 == i) {
                Some(m) => {
                    m.1 += EMBED_PPR_BLEND * norm(p);
                    m.2 = Stage::Both;
                }
                None => out.push((i, EMBED_PPR_BLEND * norm(p), Stage::Ppr)),
            }
        }
    }
    Ok(out)
}

/// Runs `subs` (with their query vectors) in `mode`.
pub fn run(
    idx: &RetrievalIndex,
    subs: &[SubQuery],
    vecs: &[QueryVectors],
    mode: Mode,
    cfg: &PipelineConfig,
) -> soul_mem_core::Result<Returned> {
    let name = |i: u32| {
        idx.node(i as usize)
            .map(|m| m.readable_id.clone())
            .unwrap_or_default()
    };
    match mode {
        Mode::Full => Ok(Returned::of(DefaultPipeline::run(
            idx, subs, vecs, cfg, None,
        )?)),
        Mode::Working => Err(soul_mem_core::Error::invalid_argument(
            "mode",
            "working memory runs through working::WorkingRun, not over an index",
        )),
        Mode::Embedding | Mode::Association | Mode::Bm25 => {
            let mut per = Vec::with_capacity(subs.len());
            for (q, v) in subs.iter().zip(vecs) {
                per.push((q.priority, one_query(idx, q, v, mode, cfg)?));
            }
            Ok(Returned {
                memories: merge_by_priority(per, cfg)
                    .into_iter()
                    .map(|(i, _, st)| (name(i), st))
                    .collect(),
                ..Returned::default()
            })
        }
    }
}

/// Raw similarity of every node to a case: per node, the best score over the case's
/// sub-queries (no floor, no priority offset). Procedures are absent.
pub fn case_scores(
    idx: &RetrievalIndex,
    subs: &[SubQuery],
    vecs: &[QueryVectors],
    cfg: &PipelineConfig,
) -> soul_mem_core::Result<HashMap<u32, f32>> {
    let mut sc = cfg.similarity.clone();
    sc.similarity_threshold = -1.0;
    sc.max_results = idx.len().max(1);
    let mut best: HashMap<u32, f32> = HashMap::new();
    for (q, v) in subs.iter().zip(vecs) {
        let eq = EmbeddedQuery::assemble(q, v, idx.vectors().dim())?;
        for (i, s) in similarity(idx, &eq, &sc) {
            let e = best.entry(i).or_insert(f32::NEG_INFINITY);
            *e = e.max(s);
        }
    }
    Ok(best)
}

/// Experimental action channel, for evaluating a proposed engine change without touching the
/// engine: per sub-query, the situation sources (similarity seeds ∪ PPR results, PPR scores
/// rescaled to `ppr / max ppr · max sim` so both live on one scale, abstract ones ×
/// `abstract_source_priority`) are softmaxed at `temperature` (`softmax(x / T)`) before Bayes;
/// sub-queries merge like the pipeline's action channel (best score + priority offset).
/// The engine's own channel is `T = 1` without the PPR rescale.
pub fn tempered_actions(
    idx: &RetrievalIndex,
    subs: &[SubQuery],
    vecs: &[QueryVectors],
    cfg: &PipelineConfig,
    temperature: f64,
) -> soul_mem_core::Result<Vec<String>> {
    let awa = &cfg.assoc_with_action;
    let max_p = subs.iter().map(|q| q.priority).max().unwrap_or(0);
    let mut best: HashMap<u32, f64> = HashMap::new();
    for (q, v) in subs.iter().zip(vecs) {
        let eq = EmbeddedQuery::assemble(q, v, idx.vectors().dim())?;
        let seeds: Vec<(u32, f64)> = similarity(idx, &eq, &cfg.similarity)
            .into_iter()
            .map(|(i, s)| (i, f64::from(s)))
            .collect();
        let ppr = association(idx, &seeds, &awa.association)?;
        let max_sim = seeds.iter().map(|s| s.1).fold(0.0, f64::max);
        let max_ppr = ppr.iter().map(|p| p.1).fold(0.0, f64::max);
        let rescaled = ppr.iter().map(|&(i, p)| {
            let s = if max_ppr > 0.0 {
                p / max_ppr * max_sim
            } else {
                0.0
            };
            (i, s)
        });
        let merged = situation_sources(idx, seeds.iter().copied().chain(rescaled));
        let logits: Vec<f64> = merged
            .iter()
            .map(|&(i, s)| {
                let s = if idx.kind(i as usize) == Some(NodeKind::AbstractSituation) {
                    s * awa.abstract_source_priority
                } else {
                    s
                };
                s / temperature
            })
            .collect();
        let sources: Vec<(u32, f64)> = merged.iter().map(|m| m.0).zip(softmax(&logits)).collect();
        let off = if max_p == 0 {
            0.0
        } else {
            cfg.priority_offset * f64::from(q.priority) / f64::from(max_p)
        };
        // As the pipeline: Bayes keeps its own top-k, AssociateWithAction the best of those.
        let actions = bayes_actions(idx, &sources, awa.bayes.top_k);
        for (a, s, _) in actions.into_iter().take(awa.action_top_k) {
            let e = best.entry(a).or_insert(f64::NEG_INFINITY);
            *e = e.max(s + off);
        }
    }
    let mut out: Vec<(u32, f64)> = best.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(awa.action_top_k);
    Ok(out
        .into_iter()
        .filter_map(|(a, _)| idx.node(a as usize).map(|m| m.readable_id.clone()))
        .collect())
}
