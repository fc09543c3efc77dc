//! Corpus smoke test: every example_data character (when `../shared/fixtures` is present),
//! embedded with the HashEmbedder, runs the DefaultPipeline on every test case's sub-queries.
//! No quality assertion: only that it runs, returns results and traces them.
#![allow(clippy::unwrap_used)]

use soul_mem_core::import::{import_file, ImportOptions};
use soul_mem_core::retrieval::*;
use std::path::Path;

#[test]
fn default_pipeline_runs_on_the_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/example_data");
    let Ok(entries) = std::fs::read_dir(&root) else {
        eprintln!("corpus not present at {}; skipping", root.display());
        return;
    };
    let e = HashEmbedder::new(384).unwrap();
    let mut cfg = PipelineConfig::default();
    // Lexical hash vectors score lower than a neural model: a lower floor, set per model.
    cfg.similarity.similarity_threshold = 0.2;
    let (mut graphs, mut cases, mut with_memories, mut with_actions) = (0, 0, 0, 0);
    for entry in entries.flatten() {
        let dir = entry.path();
        let (gp, qp) = (dir.join("graph.json"), dir.join("question.json"));
        if !gp.exists() || !qp.exists() {
            continue;
        }
        let g = import_file("corpus", &gp, &ImportOptions::default()).unwrap();
        let idx = RetrievalIndex::build_with_embedder(&g, &e).unwrap();
        let q: serde_json::Value = serde_json::from_slice(&std::fs::read(&qp).unwrap()).unwrap();
        let mut graph_hits = 0;
        for tc in q["test_cases"].as_array().unwrap() {
            let subs: Vec<SubQuery> = serde_json::from_value(tc["sub_queries"].clone())
                .unwrap_or_else(|err| panic!("{}: {err}", qp.display()));
            let r = DefaultPipeline::run_with_embedder(&idx, &subs, &e, &cfg, None).unwrap();
            cases += 1;
            assert!(r.memories.len() <= cfg.max_memories);
            assert!(r.actions.len() <= cfg.assoc_with_action.action_top_k);
            for m in &r.memories {
                assert!(m.score.is_finite() && m.score >= 0.0);
                assert!(
                    !m.seeds.is_empty(),
                    "{}: {} has no seed",
                    qp.display(),
                    m.readable_id
                );
                assert_ne!(m.kind, soul_mem_core::model::NodeKind::Procedure);
            }
            for a in &r.actions {
                assert_eq!(a.stage, Stage::Action);
                assert!(!a.seeds.is_empty());
            }
            if !r.memories.is_empty() {
                graph_hits += 1;
                with_memories += 1;
            }
            if !r.actions.is_empty() {
                with_actions += 1;
            }
        }
        assert!(
            graph_hits > 0,
            "{}: no query returned anything",
            dir.display()
        );
        graphs += 1;
    }
    eprintln!("{graphs} graphs, {cases} cases, {with_memories} with memories, {with_actions} with actions");
    if graphs > 0 {
        assert!(with_memories * 2 > cases);
    }
}
