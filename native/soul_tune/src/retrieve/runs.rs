//! Running one query file end to end: load its graph, embed the graph and the queries, run
//! every case in each requested mode and weight pair, and score it ([`run_file`] →
//! [`FileOutcome`]).

use super::args::Options;
use super::data::{self, check_case, CaseCheck, QueryFile};
use super::eval::{self, Mode, Returned};
use super::score::{self, CaseResult, Summary};
use super::score_dist::{self, Dist};
use super::working::WorkingRun;
use soul_mem_core::engine::EmbedderChoice;
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import::{import_file, ImportOptions};
use soul_mem_core::retrieval::{
    embed_distinct, EmbedKind, NodeVectors, PipelineConfig, QueryTexts, QueryVectors,
    RetrievalIndex, TextEmbedder,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One (mode, weight pair) run of one file.
pub struct PairRun {
    pub mode: Mode,
    pub pair: String,
    pub summary: Summary,
    pub cases: Vec<CaseResult>,
}

/// The outcome of one file.
pub struct FileOutcome {
    pub path: PathBuf,
    pub name: String,
    pub description: String,
    pub character: String,
    pub graph: PathBuf,
    pub nodes: usize,
    pub checks: Vec<(String, CaseCheck)>,
    pub runs: Vec<PairRun>,
    pub dist: Dist,
    pub prep_secs: f64,
    pub eval_secs: f64,
}

fn run_err(path: &Path, e: impl std::fmt::Display) -> data::DataError {
    data::DataError::Run {
        path: path.to_path_buf(),
        msg: e.to_string(),
    }
}

/// Loads the graph named by `qf`, with a clear error when it is missing or broken.
fn load_graph(qf: &QueryFile, character: &str) -> Result<MemoryGraph, data::DataError> {
    if !qf.graph_path.is_file() {
        return Err(data::DataError::MissingGraph {
            path: qf.path.clone(),
            graph: qf.graph_path.clone(),
            raw: qf.graph_raw.clone(),
        });
    }
    import_file(character, &qf.graph_path, &ImportOptions::default()).map_err(|e| {
        data::DataError::BadGraph {
            path: qf.path.clone(),
            graph: qf.graph_path.clone(),
            msg: e.to_string(),
        }
    })
}

/// Embeds every sub-query of every case in one embedder call (distinct texts once).
fn embed_queries(
    qf: &QueryFile,
    emb: &dyn TextEmbedder,
) -> soul_mem_core::Result<Vec<Vec<QueryVectors>>> {
    let texts: Vec<Vec<QueryTexts>> = qf
        .cases
        .iter()
        .map(|c| c.sub_queries.iter().map(QueryTexts::of).collect())
        .collect();
    let all = texts.iter().flatten().flat_map(|t| &t.items);
    let (distinct, vecs) = embed_distinct(emb, all.map(|(_, s)| s.as_str()), EmbedKind::Query)?;
    Ok(texts
        .iter()
        .map(|case| {
            case.iter()
                .map(|t| {
                    t.items
                        .iter()
                        .map(|(_, s)| vecs[distinct[s.as_str()]].clone())
                        .collect()
                })
                .collect()
        })
        .collect())
}

/// The pipeline's defaults with the file's floor and result count (`max_results` is how many
/// memories are judged; the number of similarity seeds stays the pipeline's own), the pair's
/// blend weights, then `--config` and the pair's grid settings.
fn pipeline_config(
    qf: &QueryFile,
    o: &Options,
    pair: &data::WeightPair,
) -> Result<PipelineConfig, String> {
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = o.threshold.unwrap_or(qf.config.similarity_threshold);
    cfg.similarity.blend = pair.weights.clone();
    cfg.max_memories = qf.config.max_results;
    let cfg = data::apply_overlay(&cfg, &o.config)?;
    data::apply_overlay(&cfg, &pair.overlay)
}

/// Runs one query file end to end.
pub fn run_file(
    path: &Path,
    o: &Options,
    emb: &EmbedderChoice,
) -> Result<FileOutcome, data::DataError> {
    let t0 = Instant::now();
    let mut qf = data::load(path)?;
    if let Some(sw) = &o.sweep {
        qf.pairs = data::expand_sweep_pairs(Some(sw)).map_err(|e| run_err(path, e))?;
    }
    let character = data::character_of(path);
    let graph = load_graph(&qf, &character)?;
    let e = emb.as_dyn();
    let vectors = NodeVectors::embed_graph(&graph, e).map_err(|er| run_err(path, er))?;
    let idx = RetrievalIndex::build(&graph, vectors).map_err(|er| run_err(path, er))?;
    let qvecs = embed_queries(&qf, e).map_err(|er| run_err(path, er))?;
    let working = if o.modes.contains(&Mode::Working) {
        Some(
            WorkingRun::new(&graph, emb.clone(), o.working.clone())
                .map_err(|er| run_err(path, er))?,
        )
    } else {
        None
    };
    // One case in `mode`: over the index, or through working memory.
    let answer = |subs: &[soul_mem_core::retrieval::SubQuery],
                  vecs: &[QueryVectors],
                  mode: Mode,
                  cfg: &PipelineConfig|
     -> soul_mem_core::Result<Returned> {
        match (mode, &working) {
            (Mode::Working, Some(w)) => w.recall(subs, cfg),
            _ => eval::run(&idx, subs, vecs, mode, cfg),
        }
    };
    let prep_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let checks: Vec<(String, CaseCheck)> = qf
        .cases
        .iter()
        .map(|c| (c.name.clone(), check_case(&graph, c)))
        .collect();
    let kind = |id: &str| {
        graph
            .resolve(id)
            .and_then(|m| graph.get(&m))
            .map(|n| n.kind())
    };
    let mut runs = Vec::new();
    for &mode in &o.modes {
        for pair in &qf.pairs {
            let cfg = pipeline_config(&qf, o, pair).map_err(|er| run_err(path, er))?;
            let mut summary = Summary::default();
            let mut cases = Vec::with_capacity(qf.cases.len());
            for ((c, v), (_, check)) in qf.cases.iter().zip(&qvecs).zip(&checks) {
                let mut ret =
                    answer(&c.sub_queries, v, mode, &cfg).map_err(|er| run_err(path, er))?;
                if let (Mode::Full, Some(t)) = (mode, o.action_temperature) {
                    ret.actions = eval::tempered_actions(&idx, &c.sub_queries, v, &cfg, t)
                        .map_err(|er| run_err(path, er))?;
                }
                let per_query: Vec<Returned> = c
                    .expected_per_query
                    .iter()
                    .map(|p| {
                        answer(
                            std::slice::from_ref(&c.sub_queries[p.q]),
                            std::slice::from_ref(&v[p.q]),
                            mode,
                            &cfg,
                        )
                    })
                    .collect::<soul_mem_core::Result<_>>()
                    .map_err(|er| run_err(path, er))?;
                cases.push(score::score_case(
                    c,
                    check,
                    &ret,
                    &per_query,
                    &qf.config.test_k_values,
                    &kind,
                    &mut summary,
                ));
            }
            runs.push(PairRun {
                mode,
                pair: pair.label.clone(),
                summary,
                cases,
            });
        }
    }
    let mut dist = Dist::default();
    if o.score_dist {
        let cfg = pipeline_config(&qf, o, &qf.pairs[0]).map_err(|er| run_err(path, er))?;
        dist = score_dist::collect(&qf, &qvecs, &checks, &graph, &idx, &cfg)
            .map_err(|er| run_err(path, er))?;
    }
    Ok(FileOutcome {
        path: path.to_path_buf(),
        name: qf.name.clone(),
        description: qf.description.clone(),
        character,
        graph: qf.graph_path.clone(),
        nodes: graph.len(),
        checks,
        runs,
        dist,
        prep_secs,
        eval_secs: t1.elapsed().as_secs_f64(),
    })
}
