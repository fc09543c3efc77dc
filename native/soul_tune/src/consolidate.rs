//! `soul_tune consolidate <case.json|DIR>...`: replays consolidation cases dumped by
//! `mix soul.consolidate --dump-changes DIR` through the core, with no LLM, and checks them.
//!
//! A case (`<dialogue>.<n>.case.json`) holds what the LLM produced and the core applied: the
//! change set and config exactly as handed to `soul_mem_core::consolidate::consolidate`, the
//! character, the Graph JSON export it was applied to (`graph`, relative to the case file),
//! the embedder (`"hash"`: the 384-bucket lexical hash embedder, `"model"`: the installed
//! model through the embedding cache, `"none"`: strings only), optional expectations
//! (`expect: {entities, abstract}`) and the core's report of the recorded run (`recorded`).
//!
//! Checks per case: the change set applies; every expected entity is a Semantic node (content
//! or alias, normalised); no two Semantic nodes share a normalised name; every created note is
//! linked (either way) to an active note (when there are active notes); an induced abstract
//! situation (one with an `evidence:` tag) exists when `expect.abstract`; and the replayed
//! report equals the recorded one (so the replay is exact).

use serde::Deserialize;
use serde_json::{json, Map, Value};
use soul_mem_core::consolidate::{
    consolidate, duplicate_semantic_groups, normalize_name, ChangeSet, ConsolidateConfig, Report,
    EVIDENCE_TAG,
};
use soul_mem_core::engine::ModelEmbedder;
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import::{import_file, ImportOptions};
use soul_mem_core::model::{MemoryType, NodeKind};
use soul_mem_core::retrieval::{HashEmbedder, TextEmbedder};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::report::{self, Align, Printer, Table};
use crate::retrieve::data::DataError;

/// Usage text of the subcommand.
pub const USAGE: &str = "soul_tune consolidate <case.json|DIR>... [--json OUT|-]";

/// Buckets of the hash embedder (the engine's, `SoulMem.Embedding.embed_graph(embedder: :hash)`).
const HASH_DIM: usize = 384;

/// Keys of the core's report that the NIF adds and a replay does not produce.
const NIF_ONLY_KEYS: [&str; 1] = ["indexed"];

/// A dumped case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    /// `"consolidate"` when present.
    #[serde(default)]
    suite: Option<String>,
    /// Layout version (1) when present.
    #[serde(default)]
    format: Option<u32>,
    /// Name of the dialogue.
    dialogue: String,
    /// Index of the consolidation within the dialogue.
    index: usize,
    /// The character (ids are derived from it, and it is one of the self names).
    character: String,
    /// Graph JSON file the change set is applied to, relative to the case file.
    graph: String,
    /// `"hash"` (default), `"model"` or `"none"`.
    #[serde(default = "default_embedder")]
    embedder: String,
    /// `ConsolidateConfig` fields.
    #[serde(default)]
    config: Map<String, Value>,
    /// The change set.
    changes: Value,
    /// Expectations.
    #[serde(default)]
    expect: Expect,
    /// The core's report of the recorded run.
    #[serde(default)]
    recorded: Option<Value>,
}

fn default_embedder() -> String {
    "hash".into()
}

/// What a case expects of the graph after it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// Names that must be Semantic nodes (content or alias).
    #[serde(default)]
    entities: Vec<String>,
    /// An induced abstract situation must exist.
    #[serde(default, rename = "abstract")]
    abstract_: bool,
}

/// A case loaded and ready to replay.
struct Loaded {
    file: CaseFile,
    graph: MemoryGraph,
    cfg: ConsolidateConfig,
}

/// The outcome of one replayed case.
struct Outcome {
    path: PathBuf,
    name: String,
    embedder: String,
    /// The core's report, or why the change set was refused.
    report: Result<Report, String>,
    entities_expected: usize,
    missing: Vec<String>,
    duplicates: Vec<Vec<String>>,
    /// Created notes linked to an active note; `None` when there is no active note.
    linked: Option<usize>,
    created: usize,
    /// Induced abstract situations in the graph after the replay; `None` unless expected.
    abstracts: Option<usize>,
    /// Report keys that differ from the recorded run; `None` when nothing was recorded.
    mismatches: Option<Vec<String>>,
    secs: f64,
}

impl Outcome {
    fn passed(&self) -> bool {
        self.report.is_ok()
            && self.missing.is_empty()
            && self.duplicates.is_empty()
            && self.linked.is_none_or(|n| n == self.created)
            && self.abstracts.is_none_or(|n| n > 0)
            && self.mismatches.as_ref().is_none_or(Vec::is_empty)
    }
}

fn case_err(path: &Path, msg: impl Into<String>) -> DataError {
    DataError::Case {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// Case files: a file argument as is, a directory's `*.case.json` files (not recursive).
/// Sorted, deduplicated.
fn discover(targets: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for t in targets {
        if t.is_file() {
            out.push(t.clone());
        } else if t.is_dir() {
            let entries = std::fs::read_dir(t).map_err(|e| format!("{}: {e}", t.display()))?;
            let before = out.len();
            out.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file() && p.to_string_lossy().ends_with(".case.json")),
            );
            if out.len() == before {
                return Err(format!("{}: no .case.json files", t.display()));
            }
        } else {
            return Err(format!("{}: no such file or directory", t.display()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Reads and checks a case and imports its graph.
fn load(path: &Path) -> Result<Loaded, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file: CaseFile =
        serde_json::from_slice(&bytes).map_err(|e| case_err(path, e.to_string()))?;
    if let Some(s) = file.suite.as_deref().filter(|s| *s != "consolidate") {
        return Err(case_err(
            path,
            format!("suite is {s:?}, not \"consolidate\""),
        ));
    }
    if let Some(f) = file.format.filter(|f| *f != 1) {
        return Err(case_err(path, format!("format {f} is not supported (1)")));
    }
    if !["hash", "model", "none"].contains(&file.embedder.as_str()) {
        return Err(case_err(
            path,
            format!(
                "embedder must be \"hash\", \"model\" or \"none\", not {:?}",
                file.embedder
            ),
        ));
    }
    let cfg: ConsolidateConfig = serde_json::from_value(Value::Object(file.config.clone()))
        .map_err(|e| case_err(path, format!("config: {e}")))?;
    cfg.validate()
        .map_err(|e| case_err(path, format!("config: {e}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let graph_path = dir.join(&file.graph);
    if !graph_path.is_file() {
        return Err(case_err(
            path,
            format!(
                "graph not found: {} (\"graph\" is resolved relative to the case file)",
                graph_path.display()
            ),
        ));
    }
    let graph =
        import_file(&file.character, &graph_path, &ImportOptions::default()).map_err(|e| {
            DataError::BadGraph {
                path: path.to_path_buf(),
                graph: graph_path.clone(),
                msg: e.to_string(),
            }
        })?;
    Ok(Loaded { file, graph, cfg })
}

/// Names (content and aliases, normalised) of every Semantic note.
fn semantic_names(graph: &MemoryGraph) -> HashSet<String> {
    graph
        .notes()
        .filter_map(|n| match &n.mem_type {
            MemoryType::Semantic(s) => Some(std::iter::once(&s.content).chain(&s.aliases)),
            _ => None,
        })
        .flatten()
        .map(|n| normalize_name(n))
        .collect()
}

/// Whether `a` links to `b` or `b` to `a` (readable ids).
fn linked_either_way(graph: &MemoryGraph, a: &str, b: &str) -> bool {
    let (Some(na), Some(nb)) = (graph.get_by_readable(a), graph.get_by_readable(b)) else {
        return false;
    };
    na.links.iter().any(|l| l.to == nb.id) || nb.links.iter().any(|l| l.to == na.id)
}

/// Abstract situations that consolidation induced (they carry `evidence:` tags).
fn induced_abstracts(graph: &MemoryGraph) -> usize {
    graph
        .notes()
        .filter(|n| n.kind() == NodeKind::AbstractSituation)
        .filter(|n| n.tags.iter().any(|t| t.starts_with(EVIDENCE_TAG)))
        .count()
}

/// Top-level keys of `replayed` and `recorded` whose values differ.
fn mismatches(replayed: &Value, recorded: &Value) -> Vec<String> {
    let empty = Map::new();
    let a = replayed.as_object().unwrap_or(&empty);
    let b = recorded.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !NIF_ONLY_KEYS.contains(&k.as_str()) && a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// The embedders a run needs, loaded once (the model only when a case asks for it).
#[derive(Default)]
struct Embedders {
    hash: Option<HashEmbedder>,
    model: Option<ModelEmbedder>,
}

impl Embedders {
    fn get(&mut self, kind: &str) -> Result<Option<&dyn TextEmbedder>, String> {
        match kind {
            "hash" => {
                if self.hash.is_none() {
                    self.hash = Some(HashEmbedder::new(HASH_DIM).map_err(|e| e.to_string())?);
                }
                Ok(self.hash.as_ref().map(|h| h as &dyn TextEmbedder))
            }
            "model" => {
                if self.model.is_none() {
                    let cache = crate::retrieve::default_cache();
                    let m = ModelEmbedder::load(None, cache.as_deref(), None)
                        .map_err(|e| format!("cannot load the embedding model: {e}"))?;
                    self.model = Some(m);
                }
                Ok(self.model.as_ref().map(|m| m as &dyn TextEmbedder))
            }
            _ => Ok(None),
        }
    }
}

/// Replays one loaded case and runs its checks.
fn replay(path: &Path, loaded: Loaded, embedders: &mut Embedders) -> Result<Outcome, DataError> {
    let t0 = Instant::now();
    let Loaded {
        file,
        mut graph,
        cfg,
    } = loaded;
    let embedder = embedders
        .get(&file.embedder)
        .map_err(|e| case_err(path, e))?;
    let report = serde_json::to_vec(&file.changes)
        .map_err(|e| e.to_string())
        .and_then(|bytes| ChangeSet::from_json(&bytes, &cfg).map_err(|e| e.to_string()))
        .and_then(|changes| {
            consolidate(&mut graph, &changes, &cfg, embedder).map_err(|e| e.to_string())
        });
    let names = semantic_names(&graph);
    let missing: Vec<String> = file
        .expect
        .entities
        .iter()
        .filter(|e| !names.contains(&normalize_name(e)))
        .cloned()
        .collect();
    let (created, linked, mismatched) = match &report {
        Ok(r) => {
            let linked = (!r.active.is_empty()).then(|| {
                r.created
                    .iter()
                    .filter(|c| r.active.iter().any(|a| linked_either_way(&graph, c, a)))
                    .count()
            });
            let replayed = serde_json::to_value(r).map_err(|e| case_err(path, e.to_string()))?;
            let mismatched = file.recorded.as_ref().map(|rec| mismatches(&replayed, rec));
            (r.created.len(), linked, mismatched)
        }
        Err(_) => (0, None, None),
    };
    Ok(Outcome {
        path: path.to_path_buf(),
        name: format!("{} #{}", file.dialogue, file.index),
        embedder: file.embedder.clone(),
        report,
        entities_expected: file.expect.entities.len(),
        missing,
        duplicates: duplicate_semantic_groups(&graph),
        linked,
        created,
        abstracts: file.expect.abstract_.then(|| induced_abstracts(&graph)),
        mismatches: mismatched,
        secs: t0.elapsed().as_secs_f64(),
    })
}

fn table() -> Table {
    let r = Align::Right;
    Table::new()
        .col("result", Align::Left)
        .group()
        .col("created", r)
        .col("merged", r)
        .col("links", r)
        .col("induced", r)
        .group()
        .col("entities", r)
        .col("dups", r)
        .col("linked", r)
        .col("abstract", r)
        .col("replay", r)
        .group()
        .col("time", r)
        .group()
        .label("case")
}

fn count_or_dash(x: Option<usize>) -> String {
    x.map_or("-".into(), |n| n.to_string())
}

fn row(o: &Outcome) -> Vec<String> {
    let (merged, links, induced) = match &o.report {
        Ok(r) => (r.merged.len(), r.linked, r.induced.len() + r.habits.len()),
        Err(_) => (0, 0, 0),
    };
    vec![
        if o.passed() { "PASS" } else { "FAIL" }.into(),
        o.created.to_string(),
        merged.to_string(),
        links.to_string(),
        induced.to_string(),
        format!(
            "{}/{}",
            o.entities_expected - o.missing.len(),
            o.entities_expected
        ),
        o.duplicates.len().to_string(),
        o.linked
            .map_or("-".into(), |n| format!("{n}/{}", o.created)),
        count_or_dash(o.abstracts),
        match &o.mismatches {
            None => "-".into(),
            Some(m) if m.is_empty() => "same".into(),
            Some(m) => format!("{} diff", m.len()),
        },
        report::secs(o.secs),
        o.name.clone(),
    ]
}

/// Totals over every case.
fn summarise(all: &[Outcome]) -> Value {
    let passed = all.iter().filter(|o| o.passed()).count();
    let sum = |f: &dyn Fn(&Outcome) -> usize| all.iter().map(f).sum::<usize>();
    let ok = |o: &Outcome| o.report.as_ref().ok().cloned().unwrap_or_default();
    json!({
        "cases": all.len(),
        "passed": passed,
        "failed": all.len() - passed,
        "pass_rate": report::ratio(passed as f64, all.len()).unwrap_or(0.0),
        "refused": sum(&|o| usize::from(o.report.is_err())),
        "created": sum(&|o| o.created),
        "merged": sum(&|o| ok(o).merged.len()),
        "links": sum(&|o| ok(o).linked),
        "induced": sum(&|o| ok(o).induced.len() + ok(o).habits.len()),
        "entities_expected": sum(&|o| o.entities_expected),
        "entities_found": sum(&|o| o.entities_expected - o.missing.len()),
        "duplicate_groups": sum(&|o| o.duplicates.len()),
        "created_with_active": sum(&|o| if o.linked.is_some() { o.created } else { 0 }),
        "linked_to_active": sum(&|o| o.linked.unwrap_or(0)),
        "abstract_expected": sum(&|o| usize::from(o.abstracts.is_some())),
        "abstract_found": sum(&|o| usize::from(o.abstracts.is_some_and(|n| n > 0))),
        "replay_mismatches": sum(&|o| usize::from(o.mismatches.as_ref().is_some_and(|m| !m.is_empty()))),
    })
}

fn total_row(s: &Value) -> Vec<String> {
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    vec![
        format!("{}/{}", n("passed"), n("cases")),
        n("created").to_string(),
        n("merged").to_string(),
        n("links").to_string(),
        n("induced").to_string(),
        format!("{}/{}", n("entities_found"), n("entities_expected")),
        n("duplicate_groups").to_string(),
        format!("{}/{}", n("linked_to_active"), n("created_with_active")),
        format!("{}/{}", n("abstract_found"), n("abstract_expected")),
        format!("{} diff", n("replay_mismatches")),
        String::new(),
        "TOTAL".into(),
    ]
}

fn case_json(o: &Outcome) -> Value {
    json!({
        "file": o.path.display().to_string(),
        "name": o.name,
        "embedder": o.embedder,
        "passed": o.passed(),
        "error": o.report.as_ref().err(),
        "checks": {
            "entities": {"expected": o.entities_expected, "missing": o.missing},
            "duplicates": o.duplicates,
            "linked": {"created": o.created, "linked_to_active": o.linked},
            "abstract": {"expected": o.abstracts.is_some(), "induced_in_graph": o.abstracts},
            "replay_mismatches": o.mismatches,
        },
        "report": o.report.as_ref().ok(),
        "secs": o.secs,
    })
}

/// Entry point: `soul_tune consolidate <case.json|DIR>... [--json OUT|-]`. Exit 0 when every
/// case passes, 1 on failures, 2 on usage or input errors (missing or malformed case files,
/// graphs that do not import). The report has the shared format of [`crate::report`]: one
/// table (a row per case + TOTAL), a legend, a `wall` line and the JSON envelope.
pub fn run(args: &[String]) -> ExitCode {
    let (targets, json_dest) = match report::parse_targets(args, "no case file or directory given")
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\nusage: {USAGE}");
            return ExitCode::from(2);
        }
    };
    let files = match discover(&targets) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let out = Printer::new(json_dest.as_ref());
    let t0 = Instant::now();
    let mut embedders = Embedders::default();
    let mut outcomes = Vec::new();
    for path in &files {
        match load(path).and_then(|l| replay(path, l, &mut embedders)) {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    out.line(format!(
        "soul_tune consolidate — {} case(s), no LLM (change sets replayed through the core)",
        files.len()
    ));
    let mut t = table();
    for o in &outcomes {
        t.push(row(o));
    }
    let summary = summarise(&outcomes);
    t.push(total_row(&summary));
    out.line(t.render());
    for o in outcomes.iter().filter(|o| !o.passed()) {
        let mut why = Vec::new();
        if let Err(e) = &o.report {
            why.push(format!("change set refused: {e}"));
        }
        if !o.missing.is_empty() {
            why.push(format!("missing entities {:?}", o.missing));
        }
        if !o.duplicates.is_empty() {
            why.push(format!("duplicate Semantic nodes {:?}", o.duplicates));
        }
        if let Some(n) = o.linked.filter(|n| *n != o.created) {
            why.push(format!(
                "{} created note(s) not linked to an active note",
                o.created - n
            ));
        }
        if o.abstracts == Some(0) {
            why.push("no induced abstract situation".into());
        }
        if let Some(m) = o.mismatches.as_ref().filter(|m| !m.is_empty()) {
            why.push(format!("report differs from the recorded run in {m:?}"));
        }
        out.line(format!(
            "FAIL {} ({}): {}",
            o.name,
            o.path.display(),
            why.join("; ")
        ));
    }
    out.line(
        "\ncreated/merged/links/induced = the core's report; entities = expected names found as \
Semantic nodes; dups = groups of Semantic nodes sharing a normalised name; linked = created \
notes linked to an active note (- without active notes); abstract = induced abstract situations \
in the graph (when expected); replay = report equal to the recorded run (same) or keys that differ.",
    );
    let wall = t0.elapsed().as_secs_f64();
    out.line(format!("\nwall {wall:.2}s ({} case(s))", files.len()));
    if let Some(dest) = &json_dest {
        let doc = report::envelope(
            "consolidate",
            json!({"llm": "none (replay of dumped change sets)", "hash_dim": HASH_DIM}),
            json!({
                "passed": "the change set applies, expected entities exist, no duplicate Semantic names, created notes linked to active notes, an induced abstract situation when expected, and the report equals the recorded one",
                "entities_found": "expected names that are a Semantic node's content or alias (normalised)",
                "duplicate_groups": "groups of Semantic nodes sharing a normalised name after the replay",
                "linked_to_active": "created notes linked either way to one of the report's active notes (cases with active notes)",
                "abstract_found": "cases expecting an abstract situation whose graph has one with evidence: tags",
                "replay_mismatches": "cases whose replayed report differs from the recorded one",
            }),
            json!({"all": {"summary": summary}}),
            outcomes.iter().map(case_json).collect(),
            Vec::new(),
            json!({"wall_secs": wall}),
        );
        if let Err(e) = dest.emit(&Value::Object(doc), &out) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if outcomes.iter().all(Outcome::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
