//! Query JSON (the seed's `RetrQueryFileRaw`): loading with clear errors, validation, the
//! `blend_sweep` expansion (`expand_sweep_pairs`) and the data-error check of expected ids
//! against the graph.

use serde::Deserialize;
use serde_json::{Map, Value};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::NodeKind;
use soul_mem_core::retrieval::{BlendWeights, PipelineConfig, SubQuery};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything that can go wrong with one input file of a suite (reported per file, never a panic).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Not JSON, or not Query JSON of the expected shape.
    #[error("{path}: malformed Query JSON: {msg}")]
    Malformed {
        /// File.
        path: PathBuf,
        /// What is wrong (with the case index/name when it is a case).
        msg: String,
    },
    /// `graph_path` names no file.
    #[error("{path}: graph not found: {graph} (graph_path {raw:?} is resolved relative to the query file)")]
    MissingGraph {
        /// Query file.
        path: PathBuf,
        /// Resolved graph path.
        graph: PathBuf,
        /// `graph_path` as written.
        raw: String,
    },
    /// The graph exists but does not import.
    #[error("{path}: graph {graph} does not import: {msg}")]
    BadGraph {
        /// Query file.
        path: PathBuf,
        /// Resolved graph path.
        graph: PathBuf,
        /// Importer message.
        msg: String,
    },
    /// A consolidate case (`soul_tune consolidate`) that cannot be replayed: not JSON, a
    /// wrong shape, an invalid config, a missing graph or embedder.
    #[error("{path}: malformed consolidate case: {msg}")]
    Case {
        /// Case file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// Embedding or retrieval failed.
    #[error("{path}: {msg}")]
    Run {
        /// Query file.
        path: PathBuf,
        /// Message.
        msg: String,
    },
}

fn malformed(path: &Path, msg: impl Into<String>) -> DataError {
    DataError::Malformed {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// `config` of a Query JSON file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Similarity floor (the file's value; `--threshold` overrides it). Default 0.0.
    #[serde(default)]
    pub similarity_threshold: f32,
    /// Results per search (similarity top-k and merged memories). Default 10.
    #[serde(default = "default_max_results")]
    pub max_results: usize,
    /// K values of the ranking metrics. Default [1, 3, 5].
    #[serde(default = "default_k_values")]
    pub test_k_values: Vec<usize>,
}

fn default_max_results() -> usize {
    10
}

fn default_k_values() -> Vec<usize> {
    vec![1, 3, 5]
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            similarity_threshold: 0.0,
            max_results: default_max_results(),
            test_k_values: default_k_values(),
        }
    }
}

/// `blend_sweep`: `tag_sweep` (pairs `(t, 1 − t)`) or explicit `pairs` (which win).
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BlendSweep {
    /// Tag weights; each gives the pair `(tag = t, variant = 1 − t)`.
    #[serde(default)]
    pub tag_sweep: Vec<f32>,
    /// Explicit pairs: any subset of [`BlendWeights`] fields over its defaults.
    #[serde(default)]
    pub pairs: Vec<Map<String, Value>>,
    /// A grid over any pipeline settings by dotted path (e.g.
    /// `{"similarity.fusion.lexical":[0,0.5], "assoc_with_action.association.blend":[0.3,0.5]}`):
    /// one run per combination. Wins over `pairs` and `tag_sweep`.
    #[serde(default)]
    pub grid: BTreeMap<String, Vec<Value>>,
}

/// Sets each dotted `path` of `overlay` in `cfg` (every path must name an existing setting)
/// and validates the result.
pub fn apply_overlay(
    cfg: &PipelineConfig,
    overlay: &[(String, Value)],
) -> Result<PipelineConfig, String> {
    if overlay.is_empty() {
        return Ok(cfg.clone());
    }
    let mut v = serde_json::to_value(cfg).map_err(|e| e.to_string())?;
    for (path, val) in overlay {
        let mut at = &mut v;
        for key in path.split('.') {
            at = at
                .get_mut(key)
                .ok_or_else(|| format!("unknown setting {path:?} (at {key:?})"))?;
        }
        *at = val.clone();
    }
    let out: PipelineConfig = serde_json::from_value(v).map_err(|e| e.to_string())?;
    out.validate().map_err(|e| e.to_string())?;
    Ok(out)
}

/// A dotted-path overlay from a JSON object (`--config`).
pub fn parse_overlay(json: &str) -> Result<Vec<(String, Value)>, String> {
    let m: Map<String, Value> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let overlay: Vec<(String, Value)> = m.into_iter().collect();
    apply_overlay(&PipelineConfig::default(), &overlay)?;
    Ok(overlay)
}

/// One sub-query expectation.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PerQuery {
    /// Index into `sub_queries`.
    pub q: usize,
    /// Ids expected from that sub-query alone.
    #[serde(default)]
    pub ranking: Vec<String>,
    /// Ids welcome but not required.
    #[serde(default)]
    pub bonus_ranking: Vec<String>,
}

/// One test case.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// Name.
    pub name: String,
    /// Free description.
    #[serde(default)]
    pub description: String,
    /// The LLM-decomposed sub-queries.
    pub sub_queries: Vec<SubQuery>,
    /// Per sub-query expectations.
    #[serde(default)]
    pub expected_per_query: Vec<PerQuery>,
    /// Must: every id must be among the merged memories. Empty = negative case.
    pub expected_combined_ranking: Vec<String>,
    /// Bonus: welcome, never required.
    #[serde(default)]
    pub bonus_combined_ranking: Vec<String>,
    /// Expected procedure ids of the action channel. Empty = no action ground truth.
    #[serde(default)]
    pub expected_actions: Vec<String>,
    /// Optional explicit abstract-situation expectation; when absent, the abstract nodes of
    /// the must and bonus lists are used.
    #[serde(default)]
    pub expected_abstract: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    name: String,
    #[serde(default)]
    description: String,
    graph_path: String,
    #[serde(default)]
    config: FileConfig,
    #[serde(default)]
    blend_sweep: Option<BlendSweep>,
    test_cases: Vec<Value>,
}

/// A loaded, validated query file (graph not yet imported).
#[derive(Debug, Clone)]
pub struct QueryFile {
    /// The file.
    pub path: PathBuf,
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `graph_path` as written.
    pub graph_raw: String,
    /// `graph_path` resolved against the file's directory.
    pub graph_path: PathBuf,
    /// `config`.
    pub config: FileConfig,
    /// Expanded weight pairs (at least one).
    pub pairs: Vec<WeightPair>,
    /// Cases.
    pub cases: Vec<TestCase>,
}

/// One expanded `blend_sweep` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightPair {
    /// Report label, e.g. `tag=0.30/variant=0.70`.
    pub label: String,
    /// The full weights.
    pub weights: BlendWeights,
    /// Pipeline settings by dotted path (a `grid` entry), applied over the defaults.
    pub overlay: Vec<(String, Value)>,
}

/// Reads and validates a Query JSON file: shape (unknown fields rejected, per case with its
/// index and name), non-empty `sub_queries`, `expected_per_query[].q` in range, k values ≥ 1,
/// `max_results` ≥ 1, threshold in [-1, 1], weight pairs valid. Does not touch the graph.
pub fn load(path: &Path) -> Result<QueryFile, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| malformed(path, format!("not JSON: {e}")))?;
    if !value.is_object() {
        return Err(malformed(
            path,
            "top level must be an object with graph_path and test_cases (is this a graph file?)",
        ));
    }
    let raw: RawFile = serde_json::from_value(value).map_err(|e| malformed(path, e.to_string()))?;
    let cfg = &raw.config;
    if cfg.test_k_values.is_empty() || cfg.test_k_values.contains(&0) {
        return Err(malformed(
            path,
            "config.test_k_values must be non-empty and every k >= 1",
        ));
    }
    if cfg.max_results == 0 {
        return Err(malformed(path, "config.max_results must be >= 1"));
    }
    if !(cfg.similarity_threshold.is_finite() && (-1.0..=1.0).contains(&cfg.similarity_threshold)) {
        return Err(malformed(
            path,
            "config.similarity_threshold must be in [-1, 1]",
        ));
    }
    if raw.graph_path.trim().is_empty() {
        return Err(malformed(path, "graph_path is empty"));
    }
    let pairs = expand_sweep_pairs(raw.blend_sweep.as_ref())
        .map_err(|e| malformed(path, format!("blend_sweep: {e}")))?;
    let mut cases = Vec::with_capacity(raw.test_cases.len());
    for (i, v) in raw.test_cases.into_iter().enumerate() {
        let label = v
            .get("name")
            .and_then(Value::as_str)
            .map(|n| format!("test case #{i} ({n})"))
            .unwrap_or_else(|| format!("test case #{i}"));
        let c: TestCase =
            serde_json::from_value(v).map_err(|e| malformed(path, format!("{label}: {e}")))?;
        if c.sub_queries.is_empty() {
            return Err(malformed(path, format!("{label}: sub_queries is empty")));
        }
        if let Some(p) = c
            .expected_per_query
            .iter()
            .find(|p| p.q >= c.sub_queries.len())
        {
            return Err(malformed(
                path,
                format!(
                    "{label}: expected_per_query names q={} but there are {} sub-queries",
                    p.q,
                    c.sub_queries.len()
                ),
            ));
        }
        cases.push(c);
    }
    if cases.is_empty() {
        return Err(malformed(path, "test_cases is empty"));
    }
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    Ok(QueryFile {
        path: path.to_path_buf(),
        name: raw.name,
        description: raw.description,
        graph_path: dir.join(&raw.graph_path),
        graph_raw: raw.graph_path,
        config: raw.config,
        pairs,
        cases,
    })
}

fn fmt_w(x: f32) -> String {
    format!("{x:.2}")
}

/// The seed's `expand_sweep_pairs`: no sweep (or an empty one) → the default weights only;
/// `pairs` present → one entry per pair (fields over [`BlendWeights::default`], unknown
/// fields rejected), `tag_sweep` ignored; else one `(t, 1 − t)` per `tag_sweep` value.
/// Every result is validated.
pub fn expand_sweep_pairs(sweep: Option<&BlendSweep>) -> Result<Vec<WeightPair>, String> {
    let default = BlendWeights::default();
    let label_of = |w: &BlendWeights, extra: &[String]| {
        let mut l = format!("tag={}/variant={}", fmt_w(w.tag), fmt_w(w.variant));
        for e in extra {
            l.push('+');
            l.push_str(e);
        }
        l
    };
    let Some(sweep) = sweep else {
        return Ok(vec![WeightPair {
            label: label_of(&default, &[]),
            weights: default,
            overlay: Vec::new(),
        }]);
    };
    let mut out = Vec::new();
    if !sweep.grid.is_empty() {
        let mut combos: Vec<Vec<(String, Value)>> = vec![Vec::new()];
        for (path, values) in &sweep.grid {
            if values.is_empty() {
                return Err(format!("grid {path:?}: no values"));
            }
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((path.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        for c in combos {
            apply_overlay(&PipelineConfig::default(), &c)?;
            let label = c
                .iter()
                .map(|(k, v)| format!("{}={}", k.rsplit('.').next().unwrap_or(k), v))
                .collect::<Vec<_>>()
                .join(",");
            out.push(WeightPair {
                label,
                weights: default.clone(),
                overlay: c,
            });
        }
        return Ok(out);
    }
    if !sweep.pairs.is_empty() {
        let base = serde_json::to_value(&default).map_err(|e| e.to_string())?;
        for (i, p) in sweep.pairs.iter().enumerate() {
            let mut obj = base.as_object().cloned().unwrap_or_default();
            let mut extra = Vec::new();
            for (k, v) in p {
                if k != "tag" && k != "variant" {
                    extra.push(format!("{k}={v}"));
                }
                obj.insert(k.clone(), v.clone());
            }
            let w: BlendWeights = serde_json::from_value(Value::Object(obj))
                .map_err(|e| format!("pairs[{i}]: {e}"))?;
            w.validate().map_err(|e| format!("pairs[{i}]: {e}"))?;
            out.push(WeightPair {
                label: label_of(&w, &extra),
                weights: w,
                overlay: Vec::new(),
            });
        }
    } else {
        for (i, &t) in sweep.tag_sweep.iter().enumerate() {
            let w = BlendWeights {
                tag: t,
                variant: 1.0 - t,
                ..BlendWeights::default()
            };
            w.validate()
                .map_err(|e| format!("tag_sweep[{i}] = {t}: {e}"))?;
            out.push(WeightPair {
                label: label_of(&w, &[]),
                weights: w,
                overlay: Vec::new(),
            });
        }
    }
    if out.is_empty() {
        out.push(WeightPair {
            label: label_of(&default, &[]),
            weights: default,
            overlay: Vec::new(),
        });
    }
    Ok(out)
}

/// Which expected ids of a case are absent from the graph.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CaseCheck {
    /// Must ids (`expected_combined_ranking`) not in the graph.
    pub missing_must: Vec<String>,
    /// `expected_actions` not in the graph.
    pub missing_actions: Vec<String>,
    /// Bonus and per-query ids not in the graph (bonus ones are dropped from scoring).
    pub missing_other: Vec<String>,
    /// `expected_actions` ids that exist but are not procedures.
    pub non_procedure_actions: Vec<String>,
}

impl CaseCheck {
    /// True when the memory metrics can score this case (non-negative, every must id exists).
    pub fn memory_scored(&self, c: &TestCase) -> bool {
        !c.expected_combined_ranking.is_empty() && self.missing_must.is_empty()
    }

    /// True when the case is a memory data error.
    pub fn memory_data_error(&self) -> bool {
        !self.missing_must.is_empty()
    }

    /// True when the action metrics can score this case.
    pub fn action_scored(&self, c: &TestCase) -> bool {
        !c.expected_actions.is_empty()
            && self.missing_actions.is_empty()
            && self.non_procedure_actions.is_empty()
    }
}

fn push_missing(g: &MemoryGraph, ids: &[String], into: &mut Vec<String>) {
    for id in ids {
        if g.resolve(id).is_none() && !into.contains(id) {
            into.push(id.clone());
        }
    }
}

/// Checks every expected id of `c` against `g` (readable id or UUID).
pub fn check_case(g: &MemoryGraph, c: &TestCase) -> CaseCheck {
    let mut out = CaseCheck::default();
    push_missing(g, &c.expected_combined_ranking, &mut out.missing_must);
    push_missing(g, &c.expected_actions, &mut out.missing_actions);
    push_missing(g, &c.bonus_combined_ranking, &mut out.missing_other);
    push_missing(g, &c.expected_abstract, &mut out.missing_other);
    for p in &c.expected_per_query {
        push_missing(g, &p.ranking, &mut out.missing_other);
        push_missing(g, &p.bonus_ranking, &mut out.missing_other);
    }
    for a in &c.expected_actions {
        let kind = g.resolve(a).and_then(|id| g.get(&id)).map(|n| n.kind());
        if matches!(kind, Some(k) if k != NodeKind::Procedure) {
            out.non_procedure_actions.push(a.clone());
        }
    }
    out
}

/// A query file's character: the directory name up to its moegirl URL suffix, or the file
/// stem when the file is not named `question*.json`.
pub fn character_of(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !stem.starts_with("question") {
        return stem;
    }
    let dir = path
        .parent()
        .and_then(Path::file_name)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or(stem);
    for marker in ["_https_", "_http_", "_zh_moegirl"] {
        if let Some(i) = dir.find(marker) {
            return dir[..i].to_owned();
        }
    }
    dir
}

/// True when `path` lies under a `pairs` directory (graph and questions from one commit).
pub fn is_consistent_pair(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "pairs")
}

/// A one-sub-query case for unit tests: its name, must ids, expected actions and bonus ids.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_case(name: &str, must: &[&str], actions: &[&str], bonus: &[&str]) -> TestCase {
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    TestCase {
        name: name.into(),
        description: String::new(),
        sub_queries: vec![serde_json::from_value(
            serde_json::json!({"priority": 1, "tag": ["x"], "variant": {"Semantic": []}}),
        )
        .unwrap()],
        expected_per_query: vec![],
        expected_combined_ranking: ids(must),
        bonus_combined_ranking: ids(bonus),
        expected_actions: ids(actions),
        expected_abstract: vec![],
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use soul_mem_core::import::{import_bytes, ImportOptions};

    fn sweep(v: Value) -> BlendSweep {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn grid_sweeps_every_combination_and_overlays_are_checked() {
        let p = expand_sweep_pairs(Some(&sweep(serde_json::json!({"grid": {
            "assoc_with_action.association.blend": [0.5, 0.95],
            "similarity.fusion.tag": [0.25, 0.5],
        }}))))
        .unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].label, "blend=0.5,tag=0.25");
        let cfg = apply_overlay(&PipelineConfig::default(), &p[3].overlay).unwrap();
        assert_eq!(cfg.assoc_with_action.association.blend, 0.95);
        assert_eq!(cfg.similarity.fusion.tag, 0.5);
        // Unknown settings and out-of-range values are refused by name.
        let e = parse_overlay(r#"{"similarity.fusion.lexicl": 1}"#).unwrap_err();
        assert!(e.contains("lexicl"), "{e}");
        let e = parse_overlay(r#"{"similarity.fusion.lexical": -1}"#).unwrap_err();
        assert!(e.contains("fusion.lexical"), "{e}");
        assert!(expand_sweep_pairs(Some(&sweep(
            serde_json::json!({"grid": {"similarity.fusion.tag": []}})
        )))
        .is_err());
    }

    #[test]
    fn no_sweep_is_the_default_pair() {
        let p = expand_sweep_pairs(None).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].weights, BlendWeights::default());
        assert_eq!(p[0].label, "tag=0.30/variant=0.70");
        // An empty sweep object also falls back to the default.
        let p = expand_sweep_pairs(Some(&sweep(serde_json::json!({})))).unwrap();
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn tag_sweep_expands_to_complements() {
        let p = expand_sweep_pairs(Some(&sweep(
            serde_json::json!({"tag_sweep": [0.3, 0.5, 0.7]}),
        )))
        .unwrap();
        let tv: Vec<(f32, f32)> = p
            .iter()
            .map(|w| (w.weights.tag, w.weights.variant))
            .collect();
        assert_eq!(tv.len(), 3);
        for ((t, v), want) in tv.iter().zip([0.3f32, 0.5, 0.7]) {
            assert!((t - want).abs() < 1e-6 && (v - (1.0 - want)).abs() < 1e-6);
        }
        assert_eq!(p[1].label, "tag=0.50/variant=0.50");
    }

    #[test]
    fn pairs_win_over_tag_sweep_and_override_fields() {
        let s = sweep(serde_json::json!({
            "tag_sweep": [0.1, 0.9, 0.5],
            "pairs": [
                {"tag": 0.3, "variant": 0.7},
                {"tag": 0.5, "variant": 0.5, "sem_concept": 0.6, "sem_description": 0.4}
            ]
        }));
        let p = expand_sweep_pairs(Some(&s)).unwrap();
        assert_eq!(p.len(), 2, "pairs win: tag_sweep ignored");
        assert_eq!(p[0].weights, BlendWeights::default());
        assert_eq!(p[1].weights.tag, 0.5);
        assert_eq!(p[1].weights.sem_concept, 0.6);
        assert_eq!(p[1].weights.sem_description, 0.4);
        // Untouched fields keep their defaults.
        assert_eq!(p[1].weights.sit_event, BlendWeights::default().sit_event);
        assert!(p[1].label.contains("sem_concept=0.6"));
    }

    #[test]
    fn bad_pairs_are_rejected_with_their_index() {
        let unknown = sweep(serde_json::json!({"pairs": [{"tag": 0.3}, {"tagg": 0.3}]}));
        let e = expand_sweep_pairs(Some(&unknown)).unwrap_err();
        assert!(e.contains("pairs[1]") && e.contains("tagg"), "{e}");
        let range = sweep(serde_json::json!({"tag_sweep": [1.5]}));
        assert!(expand_sweep_pairs(Some(&range))
            .unwrap_err()
            .contains("tag_sweep[0]"));
    }

    #[test]
    fn data_errors_name_missing_ids() {
        let g = import_bytes(
            "t",
            br#"[
              {"id": "sem_a", "tags": [], "mem_type": {"Semantic": {"content": "A", "aliases": [], "concept_type": "Entity", "description": "a"}}, "mem_links": []},
              {"id": "proc_p", "tags": [], "mem_type": {"Procedure": {"action": {"content": "do", "action_type": {"Skill": {}}}}}, "mem_links": []}
            ]"#,
            &ImportOptions::default(),
        )
        .unwrap();
        let case =
            |must: &[&str], actions: &[&str], bonus: &[&str]| test_case("c", must, actions, bonus);
        let ok = case(&["sem_a"], &["proc_p"], &[]);
        let ck = check_case(&g, &ok);
        assert!(ck.memory_scored(&ok) && !ck.memory_data_error() && ck.action_scored(&ok));

        let bad = case(&["sem_a", "sem_gone"], &["proc_gone"], &["sem_bonus_gone"]);
        let ck = check_case(&g, &bad);
        assert_eq!(ck.missing_must, vec!["sem_gone"]);
        assert_eq!(ck.missing_actions, vec!["proc_gone"]);
        assert_eq!(ck.missing_other, vec!["sem_bonus_gone"]);
        assert!(ck.memory_data_error() && !ck.memory_scored(&bad) && !ck.action_scored(&bad));

        // A missing bonus id alone is not a data error.
        let bonus_only = case(&["sem_a"], &[], &["sem_bonus_gone"]);
        assert!(check_case(&g, &bonus_only).memory_scored(&bonus_only));

        // Negative case: not scored, not an error.
        let neg = case(&[], &[], &[]);
        let ck = check_case(&g, &neg);
        assert!(!ck.memory_scored(&neg) && !ck.memory_data_error());

        // An expected action that is not a procedure is unscorable.
        let wrong_kind = case(&["sem_a"], &["sem_a"], &[]);
        let ck = check_case(&g, &wrong_kind);
        assert_eq!(ck.non_procedure_actions, vec!["sem_a"]);
        assert!(!ck.action_scored(&wrong_kind));
    }

    #[test]
    fn character_names() {
        assert_eq!(
            character_of(Path::new("x/丛雨_https_zh_moegirl_org_cn_E4/question.json")),
            "丛雨"
        );
        assert_eq!(
            character_of(Path::new("pairs/格蕾修_zh_moegirl_org_cn_E6/question.json")),
            "格蕾修"
        );
        assert_eq!(character_of(Path::new("q/retr_smoke.json")), "retr_smoke");
        assert!(is_consistent_pair(Path::new("/a/pairs/x/question.json")));
        assert!(!is_consistent_pair(Path::new(
            "/a/example_data/x/question.json"
        )));
    }
}
