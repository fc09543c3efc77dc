//! `soul_tune consolidate` end to end on the committed dumps in `fixtures/consolidate` (written
//! by `MIX_ENV=test mix run scripts/consolidate_fixtures.exs`), plus failing and malformed cases.
#![allow(clippy::unwrap_used)]

mod common;

use common::{p, run, text, TempDir};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/consolidate")
}

/// Copies the fixture case `stem` (case + graph) into `t`, editing the case JSON with `edit`.
fn copy_case(t: &TempDir, stem: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let dir = fixtures();
    let graph = std::fs::read_to_string(dir.join(format!("{stem}.graph.json"))).unwrap();
    t.write(&format!("{stem}.graph.json"), &graph);
    let mut case: Value =
        serde_json::from_slice(&std::fs::read(dir.join(format!("{stem}.case.json"))).unwrap())
            .unwrap();
    edit(&mut case);
    t.write(&format!("{stem}.case.json"), &case.to_string())
}

#[test]
fn the_committed_dumps_replay_exactly_and_pass() {
    let out = run("consolidate", &[p(&fixtures()), "--json", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["suite"], "consolidate");
    assert_eq!(doc["format"], 1);
    let s = &doc["totals"]["all"]["summary"];
    assert_eq!(s["cases"], 2);
    assert_eq!(s["passed"], 2);
    assert_eq!(s["entities_expected"], 3);
    assert_eq!(s["entities_found"], 3);
    assert_eq!(s["duplicate_groups"], 0);
    assert_eq!(s["abstract_found"], 1);
    assert_eq!(s["replay_mismatches"], 0);
    assert!(s["created"].as_u64().unwrap() > 0);
    assert_eq!(s["linked_to_active"], s["created_with_active"]);
    // 白白 (day 1) and 林雨桐 named again (day 2) are merged, not created twice.
    assert_eq!(s["merged"], 2);
    let files = doc["files"].as_array().unwrap();
    assert_eq!(
        files[1]["checks"]["replay_mismatches"],
        Value::Array(vec![])
    );
    assert!(!files[1]["report"]["induced"].as_array().unwrap().is_empty());
    let err = text(&out.stderr);
    assert!(err.contains("result | created merged"), "{err}");
    assert!(err.contains("TOTAL") && err.contains("wall "), "{err}");
}

#[test]
fn unmet_expectations_and_a_changed_outcome_fail_with_exit_1() {
    let t = TempDir::new("consolidate_fail");
    copy_case(&t, "astro.1", |c| {
        c["expect"]["entities"] = serde_json::json!(["林雨桐", "不存在的人"]);
    });
    // Day 1 without the alias merge: 白白 becomes a new note, unlike the recorded run.
    copy_case(&t, "astro.0", |c| {
        c["config"]["merge_similarity"] = serde_json::json!(1.0);
        c["recorded"]["created"] = serde_json::json!([]);
    });
    let report = t.0.join("out.json");
    let out = run("consolidate", &[p(&t.0), "--json", p(&report)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAIL") && stdout.contains("不存在的人"),
        "{stdout}"
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(doc["totals"]["all"]["summary"]["failed"], 2);
    assert_eq!(doc["totals"]["all"]["summary"]["replay_mismatches"], 1);
    assert_eq!(
        doc["files"][1]["checks"]["entities"]["missing"],
        serde_json::json!(["不存在的人"])
    );
}

#[test]
fn malformed_or_missing_inputs_exit_2() {
    let t = TempDir::new("consolidate_bad");
    let bad = t.write("bad.case.json", "{\"dialogue\": ");
    let out = run("consolidate", &[p(&bad)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("malformed consolidate case"));

    let no_graph = copy_case(&t, "astro.0", |c| c["graph"] = "nowhere.json".into());
    let out = run("consolidate", &[p(&no_graph)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("graph not found"),
        "{}",
        text(&out.stderr)
    );

    let bad_cfg = copy_case(&t, "astro.0", |c| c["config"]["top_kk"] = 3.into());
    let out = run("consolidate", &[p(&bad_cfg)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("config"),
        "{}",
        text(&out.stderr)
    );

    let out = run("consolidate", &[p(&t.0.join("absent.case.json"))]);
    assert_eq!(out.status.code(), Some(2));
    let out = run("consolidate", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("usage"));
}
