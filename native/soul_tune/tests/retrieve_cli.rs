//! `soul_tune retrieve` end to end on small temp files with the hash embedder (no model).
#![allow(clippy::unwrap_used)]

mod common;

use common::{p, text, TempDir};
use serde_json::{json, Value};
use std::process::Output;

fn graph() -> Value {
    json!([
      {"id": "mem_rust", "tags": ["Rust", "编程"], "mem_type": {"Semantic": {"content": "Rust语言", "aliases": ["Rust"], "concept_type": "Entity", "description": "系统编程语言"}}, "mem_links": []},
      {"id": "mem_python", "tags": ["Python", "编程"], "mem_type": {"Semantic": {"content": "Python语言", "aliases": [], "concept_type": "Entity", "description": "脚本语言"}}, "mem_links": []},
      {"id": "sit_coding", "tags": ["事件", "编码"], "mem_type": {"Situation": {"SpecificSituation": {"narrative": "在办公室用Rust写HTTP服务器"}}},
       "mem_links": [{"from": "sit_coding", "to": "proc_focus", "intensity": 1.0, "link_type": {"Proc": {"prob": 0.9}}}]},
      {"id": "proc_focus", "tags": ["习惯"], "mem_type": {"Procedure": {"action": {"content": "戴上耳机专心写代码", "action_type": {"Skill": {}}}}}, "mem_links": []}
    ])
}

fn sem(concept: &str) -> Value {
    json!({"priority": 1, "tag": ["编程"], "variant": {"Semantic": [{"concept_identifier": concept}]}})
}

fn query(graph_path: &str, extra: Value) -> Value {
    let mut q = json!({
        "name": "t", "description": "d", "graph_path": graph_path,
        "config": {"similarity_threshold": 0.0, "max_results": 3, "test_k_values": [1, 3]},
        "test_cases": [
            {"name": "rust", "sub_queries": [sem("Rust语言")],
             "expected_per_query": [{"q": 0, "ranking": ["mem_rust"]}],
             "expected_combined_ranking": ["mem_rust"], "expected_actions": []},
            {"name": "coding", "sub_queries": [{"priority": 2, "tag": ["编码"], "variant": {"Situation": [{"narrative": "用Rust写HTTP服务器"}]}}],
             "expected_per_query": [], "expected_combined_ranking": ["sit_coding"], "expected_actions": ["proc_focus"]},
            {"name": "stale", "sub_queries": [sem("Go语言")], "expected_per_query": [],
             "expected_combined_ranking": ["mem_go"], "expected_actions": ["proc_gone"]},
            {"name": "negative", "sub_queries": [sem("XYZ")], "expected_per_query": [],
             "expected_combined_ranking": [], "expected_actions": []}
        ]
    });
    if let (Some(o), Some(e)) = (q.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    q
}

fn run(args: &[&str]) -> Output {
    common::run("retrieve", args)
}

#[test]
fn scores_counts_data_errors_and_writes_a_report() {
    let t = TempDir::new("ok");
    t.write("graphs/g.json", &graph().to_string());
    let q = t.write(
        "q/question.json",
        &query("../graphs/g.json", json!({})).to_string(),
    );
    let report = t.0.join("out.json");
    let out = run(&[
        p(&q),
        "--embedder",
        "hash",
        "--mode",
        "all",
        "--json",
        p(&report),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("mode bm25")
            && stdout.contains("mode embedding")
            && stdout.contains("mode full")
    );
    assert!(stdout.contains("mem_go"), "data error ids listed: {stdout}");
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["suite"], "retrieve");
    assert_eq!(r["format"], 1);
    assert_eq!(
        r["settings"]["modes"],
        json!(["bm25", "embedding", "association", "full"])
    );
    let bm25 = &r["totals"]["bm25|tag=0.30/variant=0.70"]["summary"];
    assert_eq!(bm25["scored"], 2);
    assert_eq!(bm25["action_hit"], 0, "bm25 mode has no actions");
    let full = &r["totals"]["full|tag=0.30/variant=0.70"]["summary"];
    assert_eq!(full["cases"], 4);
    assert_eq!(full["scored"], 2);
    assert_eq!(full["data_error"], 1);
    assert_eq!(full["negative"], 1);
    assert_eq!(full["action_cases"], 2);
    assert_eq!(full["action_scored"], 1);
    assert_eq!(full["action_data_error"], 1);
    // Three of four nodes fit in max_results = 3, so both scored cases must hit.
    assert_eq!(full["must_hit"], 2);
    // The only trigger of proc_focus is sit_coding: the full pipeline finds it.
    assert_eq!(full["action_hit"], 1);
    let emb = &r["totals"]["embedding|tag=0.30/variant=0.70"]["summary"];
    assert_eq!(emb["action_hit"], 0, "embedding mode has no actions");
    let stale = &r["files"][0]["runs"][0]["cases"][2];
    assert_eq!(stale["status"], "data_error");
    assert_eq!(stale["missing_ids"], json!(["mem_go"]));
}

#[test]
fn blend_sweep_pairs_are_reported_per_pair() {
    let t = TempDir::new("sweep");
    t.write("g.json", &graph().to_string());
    let extra = json!({"blend_sweep": {"tag_sweep": [0.1, 0.2, 0.3],
        "pairs": [{"tag": 0.3, "variant": 0.7}, {"tag": 0.6, "variant": 0.4}]}});
    let q = t.write("sweep.json", &query("g.json", extra).to_string());
    let report = t.0.join("out.json");
    let out = run(&[
        p(&q),
        "--embedder",
        "hash",
        "--mode",
        "embedding",
        "--json",
        p(&report),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let keys: Vec<&String> = r["totals"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        vec![
            "embedding|tag=0.30/variant=0.70",
            "embedding|tag=0.60/variant=0.40"
        ]
    );
}

#[test]
fn missing_graph_is_a_clear_error() {
    let t = TempDir::new("nograph");
    let q = t.write(
        "question.json",
        &query("nowhere/g.json", json!({})).to_string(),
    );
    let out = run(&[p(&q), "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("graph not found"), "{err}");
    assert!(err.contains("nowhere/g.json"), "{err}");
}

#[test]
fn malformed_files_are_clear_errors() {
    let t = TempDir::new("bad");
    t.write("g.json", &graph().to_string());
    // A case with a misspelt field names the case.
    let mut q = query("g.json", json!({}));
    q["test_cases"][1]["expected_combined"] = json!(["x"]);
    let bad_case = t.write("question_bad_case.json", &q.to_string());
    let out = run(&[p(&bad_case), "--embedder", "hash"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("test case #1 (coding)") && err.contains("expected_combined"),
        "{err}"
    );
    // Not JSON at all.
    let not_json = t.write("question_broken.json", "{ this is not json");
    let err = text(&run(&[p(&not_json), "--embedder", "hash"]).stderr);
    assert!(
        err.contains("malformed Query JSON") && err.contains("not JSON"),
        "{err}"
    );
    // A graph file given as a query file.
    let g = t.0.join("g.json");
    let err = text(&run(&[p(&g), "--embedder", "hash"]).stderr);
    assert!(err.contains("is this a graph file?"), "{err}");
    // per-query index out of range.
    let mut q = query("g.json", json!({}));
    q["test_cases"][0]["expected_per_query"] = json!([{"q": 5, "ranking": []}]);
    let f = t.write("question_q.json", &q.to_string());
    let err = text(&run(&[p(&f), "--embedder", "hash"]).stderr);
    assert!(err.contains("q=5"), "{err}");
    // Bad usage exits 2.
    assert_eq!(run(&["--mode", "nope", p(&f)]).status.code(), Some(2));
    assert_eq!(run(&[p(&t.0.join("absent.json"))]).status.code(), Some(2));
}

#[test]
fn a_directory_is_walked_and_bad_files_do_not_stop_good_ones() {
    let t = TempDir::new("dir");
    t.write("a/graph.json", &graph().to_string());
    t.write(
        "a/question.json",
        &query("graph.json", json!({})).to_string(),
    );
    t.write(
        "b/question.json",
        &query("missing.json", json!({})).to_string(),
    );
    let out = run(&[p(&t.0), "--embedder", "hash", "--batch"]);
    // One file failed: exit 1, but the good one is still reported.
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("TOTAL"));
    assert!(text(&out.stderr).contains("graph not found"));
}
