//! `soul_tune forget` end to end: the shared report format (tables, JSON envelope).
#![allow(clippy::unwrap_used)]

mod common;

use common::{p, run, text, TempDir};
use serde_json::{json, Value};

fn forget_file(tolerance: f64) -> Value {
    json!({
        "name": "smoke", "description": "d",
        "test_cases": [
            {"kind": "magnitude", "name": "半衰期", "text": "机器学习是人工智能的一个重要分支",
             "time_offset_hours": 24, "expected_missing_degree": 0.5, "tolerance": tolerance},
            {"kind": "effect", "name": "刚发生", "mem_kind": "semantic", "text": "刚才小白发消息说她到家了",
             "time_offset_hours": 0.1, "expected": {"should_forget": false}}
        ]
    })
}

#[test]
fn json_to_stdout_has_the_shared_envelope_and_text_goes_to_stderr() {
    let t = TempDir::new("forget_ok");
    let f = t.write("f.json", &forget_file(0.05).to_string());
    let out = run("forget", &[p(&f), "--json", "-"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["suite"], "forget");
    assert_eq!(doc["format"], 1);
    assert_eq!(doc["settings"]["reviser"], "scripted");
    assert_eq!(doc["totals"]["all"]["summary"]["cases"], 2);
    assert_eq!(doc["totals"]["all"]["summary"]["passed"], 2);
    assert_eq!(doc["files"][0]["cases"][0]["name"], "半衰期");
    assert!(doc["timing"]["wall_secs"].as_f64().unwrap() >= 0.0);
    let err = text(&out.stderr);
    assert!(err.contains("cases passed failed | pass%"), "{err}");
    assert!(err.contains("TOTAL"), "{err}");
}

#[test]
fn a_failing_case_exits_1_and_is_in_the_report_file() {
    let t = TempDir::new("forget_fail");
    let f = t.write("f.json", &forget_file(0.0).to_string());
    let g = t.write("g.json", &forget_file(0.0).to_string());
    std::fs::write(&g, forget_file(0.0).to_string().replace("0.5", "0.1")).unwrap();
    let report = t.0.join("out.json");
    let out = run("forget", &[p(&t.0), "--json", p(&report)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAIL") && stdout.contains("TOTAL"),
        "{stdout}"
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(doc["files"].as_array().unwrap().len(), 2);
    assert_eq!(doc["files"][0]["file"], p(&f));
    assert_eq!(doc["files"][1]["summary"]["failed"], 1);
    assert_eq!(doc["totals"]["all"]["summary"]["failed"], 1);
}

#[test]
fn bad_input_is_a_usage_error() {
    let t = TempDir::new("forget_bad");
    let broken = t.write("broken.json", "{ nope");
    let out = run("forget", &[p(&broken)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("invalid Forget JSON"));
    assert_eq!(run("forget", &["--json"]).status.code(), Some(2));
    assert_eq!(
        run("forget", &["--bogus", p(&broken)]).status.code(),
        Some(2)
    );
    assert_eq!(run("forget", &[]).status.code(), Some(2));
}
