//! Running one test case in one mode, scoring it, and summing scores.
//!
//! Modes map onto what `soul_mem_core::retrieval` offers:
//! - [`Mode::Embedding`]: fused similarity only ([`similarity`]), per sub-query, merged with
//!   the pipeline's priority rule (score + `priority_offset · p / max p`, a node keeps its
//!   best entry, best `max_results`). No PPR, no actions.
//! - [`Mode::Association`]: similarity seeds, then PPR ([`association`]) from them; per node
//!   `score = (1 − β)·sim + β·ppr / max ppr` with β = [`EMBED_PPR_BLEND`] (the seed's
//!   RetrieveMode::Association), merged across sub-queries as above. No actions.
//! - [`Mode::Full`]: [`DefaultPipeline::run`] as the engine runs it (similarity ∪ PPR
//!   memories, Bayes actions, self-knowledge procedures).

use super::data::{CaseCheck, TestCase};
use super::metrics;
use serde::Serialize;
use soul_mem_core::model::NodeKind;
use soul_mem_core::retrieval::{
    association, bayes_actions, similarity, softmax, DefaultPipeline, EmbeddedQuery,
    PipelineConfig, QueryVectors, RetrievalIndex, Stage, SubQuery,
};
use std::collections::{BTreeMap, HashMap};

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
}

impl Mode {
    /// Parses `embedding`, `association` or `full`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "embedding" | "embed" => Some(Mode::Embedding),
            "association" | "assoc" => Some(Mode::Association),
            "full" | "pipeline" => Some(Mode::Full),
            _ => None,
        }
    }

    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Embedding => "embedding",
            Mode::Association => "association",
            Mode::Full => "full",
        }
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
    let eq = EmbeddedQuery::assemble(q, v, idx.vectors().dim())?;
    let sim = similarity(idx, &eq, &cfg.similarity);
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
        Mode::Full => {
            let r = DefaultPipeline::run(idx, subs, vecs, cfg, None)?;
            Ok(Returned {
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
            })
        }
        Mode::Embedding | Mode::Association => {
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

/// Scores of one case in one mode.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// `scored`, `negative` or `data_error` (memory side).
    pub status: &'static str,
    /// Must ids missing from the graph (data error).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_ids: Vec<String>,
    /// Every must id returned.
    pub must_hit: bool,
    /// At least one must id returned.
    pub any_hit: bool,
    /// Reciprocal rank of the first must id.
    pub rr: f64,
    /// Fraction of existing bonus ids returned (None without bonus ids).
    pub bonus_recall: Option<f64>,
    /// Must ids not returned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missed: Vec<String>,
    /// Returned memory ids, best first.
    pub returned: Vec<String>,
    /// Action ground truth: `scored`, `data_error` or absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_status: Option<&'static str>,
    /// Any expected action in the action channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_hit: Option<bool>,
    /// Recall@3 of the expected actions in the action channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_recall3: Option<f64>,
    /// Returned actions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
    /// Returned self-knowledge procedures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub self_knowledge: Vec<String>,
    /// Abstract expectation: (detected, found directly by similarity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abstract_detected: Option<(bool, bool)>,
    /// Per sub-query expectations: (scored, all ids returned by that sub-query alone).
    pub per_query: (usize, usize),
}

/// Sums over cases; rates are computed at print time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// All cases.
    pub cases: usize,
    /// Cases with an empty must list (never failures).
    pub negative: usize,
    /// Cases whose must ids are not all in the graph (reported, not scored).
    pub data_error: usize,
    /// Scored cases (non-negative, every must id exists).
    pub scored: usize,
    /// Scored cases whose must list names a procedure (only the full pipeline's action and
    /// self-knowledge channels can return one).
    pub procedure_must: usize,
    /// Σ memories returned over scored cases (how much context a floor saves).
    pub returned_sum: usize,
    /// Scored cases with every must id returned.
    pub must_hit: usize,
    /// Scored cases with at least one must id returned.
    pub any_hit: usize,
    /// Σ reciprocal rank.
    pub mrr_sum: f64,
    /// Σ Recall@K per K.
    pub recall_sum: BTreeMap<usize, f64>,
    /// Σ Precision@K per K.
    pub precision_sum: BTreeMap<usize, f64>,
    /// Σ NDCG@K per K.
    pub ndcg_sum: BTreeMap<usize, f64>,
    /// Σ HitRate@K per K.
    pub hit_sum: BTreeMap<usize, f64>,
    /// Cases scored at K (K sets may differ between files).
    pub k_cases: BTreeMap<usize, usize>,
    /// Scored cases with bonus ids.
    pub bonus_cases: usize,
    /// Σ bonus recall.
    pub bonus_recall_sum: f64,
    /// Cases with non-empty `expected_actions`.
    pub action_cases: usize,
    /// … whose action ids are not all procedures of the graph.
    pub action_data_error: usize,
    /// … scored.
    pub action_scored: usize,
    /// Scored action cases with an expected action in the action channel.
    pub action_hit: usize,
    /// Σ action Recall@3.
    pub action_recall3_sum: f64,
    /// Scored action cases with an expected action in actions ∪ self-knowledge.
    pub action_hit_with_self: usize,
    /// Σ recall of expected actions in actions ∪ self-knowledge.
    pub action_recall_with_self_sum: f64,
    /// Scored cases with an expected abstract situation.
    pub abstract_expected: usize,
    /// … where one was returned.
    pub abstract_detected: usize,
    /// … returned as a similarity hit (Similarity/Both).
    pub abstract_direct: usize,
    /// … returned only through PPR.
    pub abstract_ppr_only: usize,
    /// Per sub-query expectations scored.
    pub per_query_scored: usize,
    /// … fully returned by their sub-query alone.
    pub per_query_hit: usize,
}

fn add_map(a: &mut BTreeMap<usize, f64>, b: &BTreeMap<usize, f64>) {
    for (k, v) in b {
        *a.entry(*k).or_default() += v;
    }
}

impl Summary {
    /// Adds `o` into `self`.
    pub fn add(&mut self, o: &Summary) {
        self.cases += o.cases;
        self.negative += o.negative;
        self.data_error += o.data_error;
        self.scored += o.scored;
        self.must_hit += o.must_hit;
        self.returned_sum += o.returned_sum;
        self.procedure_must += o.procedure_must;
        self.any_hit += o.any_hit;
        self.mrr_sum += o.mrr_sum;
        add_map(&mut self.recall_sum, &o.recall_sum);
        add_map(&mut self.precision_sum, &o.precision_sum);
        add_map(&mut self.ndcg_sum, &o.ndcg_sum);
        add_map(&mut self.hit_sum, &o.hit_sum);
        for (k, v) in &o.k_cases {
            *self.k_cases.entry(*k).or_default() += v;
        }
        self.bonus_cases += o.bonus_cases;
        self.bonus_recall_sum += o.bonus_recall_sum;
        self.action_cases += o.action_cases;
        self.action_data_error += o.action_data_error;
        self.action_scored += o.action_scored;
        self.action_hit += o.action_hit;
        self.action_recall3_sum += o.action_recall3_sum;
        self.action_hit_with_self += o.action_hit_with_self;
        self.action_recall_with_self_sum += o.action_recall_with_self_sum;
        self.abstract_expected += o.abstract_expected;
        self.abstract_detected += o.abstract_detected;
        self.abstract_direct += o.abstract_direct;
        self.abstract_ppr_only += o.abstract_ppr_only;
        self.per_query_scored += o.per_query_scored;
        self.per_query_hit += o.per_query_hit;
    }

    /// `num / den`, or None when `den` is 0.
    pub fn ratio(num: f64, den: usize) -> Option<f64> {
        (den > 0).then(|| num / den as f64)
    }

    /// Mean of a per-K sum.
    pub fn at(&self, m: &BTreeMap<usize, f64>, k: usize) -> Option<f64> {
        Self::ratio(
            m.get(&k).copied().unwrap_or(0.0),
            self.k_cases.get(&k).copied().unwrap_or(0),
        )
    }

    /// The rates as a JSON object (for the report).
    pub fn rates(&self) -> serde_json::Value {
        let per_k = |m: &BTreeMap<usize, f64>| -> serde_json::Map<String, serde_json::Value> {
            self.k_cases
                .keys()
                .map(|k| (k.to_string(), serde_json::json!(self.at(m, *k))))
                .collect()
        };
        serde_json::json!({
            "must_hit_rate": Self::ratio(self.must_hit as f64, self.scored),
            "any_hit_rate": Self::ratio(self.any_hit as f64, self.scored),
            "mrr": Self::ratio(self.mrr_sum, self.scored),
            "mean_returned_memories": Self::ratio(self.returned_sum as f64, self.scored),
            "recall_at": per_k(&self.recall_sum),
            "precision_at": per_k(&self.precision_sum),
            "ndcg_at": per_k(&self.ndcg_sum),
            "hit_rate_at": per_k(&self.hit_sum),
            "bonus_recall": Self::ratio(self.bonus_recall_sum, self.bonus_cases),
            "action_hit_rate": Self::ratio(self.action_hit as f64, self.action_scored),
            "action_recall_at_3": Self::ratio(self.action_recall3_sum, self.action_scored),
            "action_hit_rate_with_self_knowledge":
                Self::ratio(self.action_hit_with_self as f64, self.action_scored),
            "action_recall_with_self_knowledge":
                Self::ratio(self.action_recall_with_self_sum, self.action_scored),
            "abstract_detected_rate":
                Self::ratio(self.abstract_detected as f64, self.abstract_expected),
            "per_query_hit_rate": Self::ratio(self.per_query_hit as f64, self.per_query_scored),
        })
    }
}

/// Scores one case: `ret` is the full run, `per_query` the runs of single sub-queries named
/// by `expected_per_query` (same order), `exists`/`kind` look ids up in the graph.
pub fn score_case(
    c: &TestCase,
    check: &CaseCheck,
    ret: &Returned,
    per_query: &[Returned],
    k_values: &[usize],
    kind: &dyn Fn(&str) -> Option<NodeKind>,
    sum: &mut Summary,
) -> CaseResult {
    // Memories never hold procedures (the pipeline keeps them in their own channels), so a
    // procedure id expected among the memories is looked up in the action and
    // self-knowledge channels: the ranked list is memories ++ actions ++ self-knowledge.
    let mut returned: Vec<&str> = ret.memories.iter().map(|m| m.0.as_str()).collect();
    for p in ret.actions.iter().chain(&ret.self_knowledge) {
        if !returned.contains(&p.as_str()) {
            returned.push(p.as_str());
        }
    }
    let must: Vec<&str> = c
        .expected_combined_ranking
        .iter()
        .map(String::as_str)
        .collect();
    let mut r = CaseResult {
        name: c.name.clone(),
        returned: returned.iter().map(|s| s.to_string()).collect(),
        ..CaseResult::default()
    };
    sum.cases += 1;
    if c.expected_combined_ranking.is_empty() {
        r.status = "negative";
        sum.negative += 1;
    } else if check.memory_data_error() {
        r.status = "data_error";
        r.missing_ids = check.missing_must.clone();
        sum.data_error += 1;
    } else {
        r.status = "scored";
        sum.scored += 1;
        r.must_hit = metrics::all_present(&returned, &must);
        r.any_hit = metrics::any_present(&returned, &must);
        r.missed = must
            .iter()
            .filter(|m| !returned.contains(m))
            .map(|s| s.to_string())
            .collect();
        if must.iter().any(|m| kind(m) == Some(NodeKind::Procedure)) {
            sum.procedure_must += 1;
        }
        sum.returned_sum += ret.memories.len();
        sum.must_hit += usize::from(r.must_hit);
        sum.any_hit += usize::from(r.any_hit);
        r.rr = metrics::reciprocal_rank(&returned, &must).unwrap_or(0.0);
        sum.mrr_sum += r.rr;
        for &k in k_values {
            let add = |m: &mut BTreeMap<usize, f64>, v: Option<f64>| {
                *m.entry(k).or_default() += v.unwrap_or(0.0);
            };
            add(&mut sum.recall_sum, metrics::recall_at(&returned, &must, k));
            add(
                &mut sum.precision_sum,
                metrics::precision_at(&returned, &must, k),
            );
            add(&mut sum.ndcg_sum, metrics::ndcg_at(&returned, &must, k));
            add(&mut sum.hit_sum, metrics::hit_at(&returned, &must, k));
            *sum.k_cases.entry(k).or_default() += 1;
        }
        let bonus: Vec<&str> = c
            .bonus_combined_ranking
            .iter()
            .map(String::as_str)
            .filter(|b| kind(b).is_some())
            .collect();
        if !bonus.is_empty() {
            let got = bonus.iter().filter(|b| returned.contains(b)).count();
            let br = got as f64 / bonus.len() as f64;
            r.bonus_recall = Some(br);
            sum.bonus_cases += 1;
            sum.bonus_recall_sum += br;
        }
        // Abstract detection.
        let abstracts: Vec<&str> = if c.expected_abstract.is_empty() {
            must.iter()
                .chain(bonus.iter())
                .copied()
                .filter(|id| kind(id) == Some(NodeKind::AbstractSituation))
                .collect()
        } else {
            c.expected_abstract
                .iter()
                .map(String::as_str)
                .filter(|id| kind(id).is_some())
                .collect()
        };
        if !abstracts.is_empty() {
            sum.abstract_expected += 1;
            let found: Vec<Stage> = ret
                .memories
                .iter()
                .filter(|m| abstracts.contains(&m.0.as_str()))
                .map(|m| m.1)
                .collect();
            let detected = !found.is_empty();
            let direct = found
                .iter()
                .any(|s| matches!(s, Stage::Similarity | Stage::Both));
            sum.abstract_detected += usize::from(detected);
            sum.abstract_direct += usize::from(direct);
            sum.abstract_ppr_only += usize::from(detected && !direct);
            r.abstract_detected = Some((detected, direct));
        }
        // Per sub-query expectations (only those whose ids all exist and are non-empty).
        let (mut pq_scored, mut pq_hit) = (0, 0);
        for (p, pr) in c.expected_per_query.iter().zip(per_query) {
            let ids: Vec<&str> = p.ranking.iter().map(String::as_str).collect();
            if ids.is_empty() || ids.iter().any(|i| kind(i).is_none()) {
                continue;
            }
            let got: Vec<&str> = pr.memories.iter().map(|m| m.0.as_str()).collect();
            pq_scored += 1;
            pq_hit += usize::from(metrics::all_present(&got, &ids));
        }
        r.per_query = (pq_scored, pq_hit);
        sum.per_query_scored += pq_scored;
        sum.per_query_hit += pq_hit;
    }
    // Actions: independent of the memory status.
    if !c.expected_actions.is_empty() {
        sum.action_cases += 1;
        if check.action_scored(c) {
            r.action_status = Some("scored");
            sum.action_scored += 1;
            let exp: Vec<&str> = c.expected_actions.iter().map(String::as_str).collect();
            let acts: Vec<&str> = ret.actions.iter().map(String::as_str).collect();
            let hit = metrics::any_present(&acts, &exp);
            let r3 = metrics::recall_at(&acts, &exp, 3).unwrap_or(0.0);
            sum.action_hit += usize::from(hit);
            sum.action_recall3_sum += r3;
            let mut both = acts.clone();
            both.extend(ret.self_knowledge.iter().map(String::as_str));
            let hit_s = metrics::any_present(&both, &exp);
            let rec_s = metrics::recall_at(&both, &exp, both.len()).unwrap_or(0.0);
            sum.action_hit_with_self += usize::from(hit_s);
            sum.action_recall_with_self_sum += rec_s;
            r.action_hit = Some(hit);
            r.action_recall3 = Some(r3);
        } else {
            r.action_status = Some("data_error");
            sum.action_data_error += 1;
        }
    }
    r.actions = ret.actions.clone();
    r.self_knowledge = ret.self_knowledge.clone();
    r
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
        let mut merged: Vec<(u32, f64)> = Vec::new();
        let rescaled = ppr.iter().map(|&(i, p)| {
            let s = if max_ppr > 0.0 {
                p / max_ppr * max_sim
            } else {
                0.0
            };
            (i, s)
        });
        for (i, s) in seeds.iter().copied().chain(rescaled) {
            let is_sit = matches!(idx.node(i as usize), Some(m) if m.kind.is_situation());
            if !is_sit || !s.is_finite() || s <= 0.0 {
                continue;
            }
            match merged.iter_mut().find(|(j, _)| *j == i) {
                Some(e) => e.1 = e.1.max(s),
                None => merged.push((i, s)),
            }
        }
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
