//! `soul_tune forget FILE|DIR`: the forgetting suite over the seed's Forget JSON (T1–T5).
//!
//! Each case checks an observable consequence of the Ebbinghaus curve rather than the curve
//! itself (which would be circular): T1 forgetting grows with time, T2 recalls slow it, T3 the
//! half-life is calibrated, T4 the three action bands, T5 forgetting has an effect on the text.
//! T4/T5 need an LLM for the Revised branch; here it is a **scripted reviser** (every
//! `[masked]` becomes the fixed guess [`SCRIPTED_GUESS`]), so runs are deterministic and
//! offline. It checks the plumbing, not the quality of a real model's guesses.

use serde::Deserialize;
use serde_json::{json, Value};
use soul_mem_core::forget::{
    decide_at, lazy_forget_text, mask_text, missing_degree_at, ForgetAction, ForgetConfig,
    ForgetOutcome, MASK_MARKER, MASK_WORD,
};
use soul_mem_core::model::NodeKind;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::report::{self, Align, Printer, Table};

/// The scripted reviser's guess for every masked word.
pub const SCRIPTED_GUESS: &str = "那个";

/// A Forget JSON file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetFile {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    config: ForgetConfig,
    test_cases: Vec<Case>,
}

/// Which memory kind a case's text belongs to.
#[derive(Debug, Clone, Copy, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
enum MemKind {
    /// SpecificSituation (narrative).
    #[default]
    Situation,
    /// SemMemory (content).
    Semantic,
    /// Procedure (never forgets) — for negative cases.
    Procedure,
    /// AbstractSituation (never forgets) — for negative cases.
    AbstractSituation,
}

impl MemKind {
    fn node_kind(self) -> NodeKind {
        match self {
            MemKind::Situation => NodeKind::SpecificSituation,
            MemKind::Semantic => NodeKind::Semantic,
            MemKind::Procedure => NodeKind::Procedure,
            MemKind::AbstractSituation => NodeKind::AbstractSituation,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    should_forget: bool,
    #[serde(default = "no_action")]
    min_action: String,
}

fn no_action() -> String {
    "NoAction".into()
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Case {
    /// T1.
    TimeMonotonic {
        name: String,
        text: String,
        time_offsets_hours: Vec<f64>,
        #[serde(default)]
        retrieval_count: u32,
        #[serde(default)]
        mem_kind: MemKind,
    },
    /// T2.
    Activation {
        name: String,
        text: String,
        activation_counts: Vec<u32>,
        time_offset_hours: f64,
        #[serde(default)]
        mem_kind: MemKind,
    },
    /// T3.
    Magnitude {
        name: String,
        text: String,
        time_offset_hours: f64,
        expected_missing_degree: f64,
        tolerance: f64,
        #[serde(default)]
        retrieval_count: u32,
        #[serde(default)]
        mem_kind: MemKind,
    },
    /// T4.
    Branch {
        name: String,
        text: String,
        time_offsets_hours: Vec<f64>,
        #[serde(default)]
        retrieval_count: u32,
        #[serde(default)]
        mem_kind: MemKind,
    },
    /// T5.
    Effect {
        name: String,
        #[serde(default)]
        mem_kind: MemKind,
        text: String,
        #[serde(default)]
        retrieval_count: u32,
        time_offset_hours: f64,
        expected: Expected,
    },
}

/// Result of one case.
struct Outcome {
    name: String,
    kind: &'static str,
    passed: bool,
    detail: String,
    /// Missing degrees computed by the case (for the mean).
    degrees: Vec<f64>,
    /// T5 only: (should_forget, triggered).
    trigger: Option<(bool, bool)>,
}

/// The scripted LLM: replaces each masked word with [`SCRIPTED_GUESS`].
fn scripted_reviser(masked: &str) -> Option<String> {
    Some(
        masked
            .replace(MASK_WORD, SCRIPTED_GUESS)
            .replace(MASK_MARKER, SCRIPTED_GUESS),
    )
}

fn fmt_degrees(v: &[f64]) -> String {
    v.iter()
        .map(|d| format!("{d:.3}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks that lazy forgetting's output matches its action (the "effect" half of T4/T5).
fn effect_ok(text: &str, out: &ForgetOutcome) -> Result<(), String> {
    match out.decision.action {
        ForgetAction::NoAction => {
            if out.masked.is_some() || out.revised.is_some() {
                return Err("NoAction produced text".into());
            }
        }
        ForgetAction::MaskOnly => match &out.masked {
            Some(m) if m.contains(MASK_MARKER) => {}
            Some(_) => return Err("MaskOnly masked no word (text too short?)".into()),
            None => return Err("MaskOnly without a masked text".into()),
        },
        ForgetAction::Revised => match &out.revised {
            Some(r) if !r.contains(MASK_MARKER) && r != text => {}
            Some(r) => return Err(format!("revision unchanged or still masked: {r}")),
            None => return Err("Revised without a revision".into()),
        },
    }
    Ok(())
}

fn run_case(case: &Case, cfg: &ForgetConfig) -> Result<Outcome, String> {
    Ok(match case {
        Case::TimeMonotonic {
            name,
            text,
            time_offsets_hours: offs,
            retrieval_count,
            mem_kind,
        } => {
            let k = mem_kind.node_kind();
            let mds: Vec<f64> = offs
                .iter()
                .map(|&h| decide_at(k, h, *retrieval_count, cfg).missing_degree)
                .collect();
            let mut problems = Vec::new();
            if offs.len() < 2 || offs.windows(2).any(|w| w[0] >= w[1]) {
                problems.push("time_offsets_hours must be strictly ascending (≥ 2)".to_owned());
            }
            if mds.windows(2).any(|w| w[1] < w[0]) {
                problems.push("missing degree decreased with time".into());
            }
            if offs
                .iter()
                .zip(offs.iter().skip(1))
                .zip(mds.windows(2))
                .any(|((&a, &b), w)| b > 0.0 && b > a && w[1] <= w[0])
                && matches!(mem_kind, MemKind::Situation | MemKind::Semantic)
            {
                problems.push("missing degree did not grow with time".into());
            }
            // Forgetting only progresses: the masked words at each step include the previous.
            let mut prev: Option<Vec<usize>> = None;
            for &md in &mds {
                let m = mask_text(text, md.clamp(0.0, 1.0)).map_err(|e| e.to_string())?;
                if let Some(p) = &prev {
                    if !p.iter().all(|i| m.masked_indices.contains(i)) {
                        problems.push("masked words are not monotone in time".into());
                        break;
                    }
                }
                prev = Some(m.masked_indices);
            }
            Outcome {
                name: name.clone(),
                kind: "time_monotonic",
                passed: problems.is_empty(),
                detail: format!("md [{}] {}", fmt_degrees(&mds), problems.join("; ")),
                degrees: mds,
                trigger: None,
            }
        }
        Case::Activation {
            name,
            text,
            activation_counts: counts,
            time_offset_hours,
            mem_kind,
        } => {
            let k = mem_kind.node_kind();
            let mds: Vec<f64> = counts
                .iter()
                .map(|&c| decide_at(k, *time_offset_hours, c, cfg).missing_degree)
                .collect();
            let mut problems = Vec::new();
            if counts.len() < 2 || counts.windows(2).any(|w| w[0] >= w[1]) {
                problems.push("activation_counts must be strictly ascending (≥ 2)".to_owned());
            }
            let cap = cfg.max_activation_cap;
            for (c, w) in counts.windows(2).zip(mds.windows(2)) {
                if w[1] > w[0] {
                    problems.push(format!("more recalls forgot more ({} → {})", c[0], c[1]));
                } else if c[0] < cap && w[1] >= w[0] && w[0] > 0.0 {
                    problems.push(format!(
                        "recalls {} → {} did not slow forgetting",
                        c[0], c[1]
                    ));
                } else if c[0] >= cap && (w[1] - w[0]).abs() > 1e-12 {
                    problems.push(format!("recalls beyond the cap {cap} still mattered"));
                }
            }
            // More recalls, fewer forgotten words: each step's mask is inside the previous one.
            let masks = mds
                .iter()
                .map(|md| mask_text(text, md.clamp(0.0, 1.0)).map(|m| m.masked_indices))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            if masks
                .windows(2)
                .any(|w| !w[1].iter().all(|i| w[0].contains(i)))
            {
                problems.push("masked words are not monotone in recalls".into());
            }
            Outcome {
                name: name.clone(),
                kind: "activation",
                passed: problems.is_empty(),
                detail: format!("md [{}] {}", fmt_degrees(&mds), problems.join("; ")),
                degrees: mds,
                trigger: None,
            }
        }
        Case::Magnitude {
            name,
            text,
            time_offset_hours,
            expected_missing_degree,
            tolerance,
            retrieval_count,
            mem_kind,
            ..
        } => {
            let md = match mem_kind {
                MemKind::Situation | MemKind::Semantic => {
                    missing_degree_at(*time_offset_hours, *retrieval_count, cfg)
                }
                _ => 0.0,
            };
            let diff = (md - expected_missing_degree).abs();
            let m = mask_text(text, md.clamp(0.0, 1.0)).map_err(|e| e.to_string())?;
            Outcome {
                name: name.clone(),
                kind: "magnitude",
                passed: diff <= *tolerance,
                detail: format!(
                    "md {md:.4} expected {expected_missing_degree:.4} ± {tolerance} (|Δ| {diff:.4}); masks {}/{} words",
                    m.masked(),
                    m.total
                ),
                degrees: vec![md],
                trigger: None,
            }
        }
        Case::Branch {
            name,
            text,
            time_offsets_hours: offs,
            retrieval_count,
            mem_kind,
        } => {
            let k = mem_kind.node_kind();
            let mut actions = Vec::new();
            let mut mds = Vec::new();
            let mut problems = Vec::new();
            for &h in offs {
                let out = lazy_forget_text(k, text, h, *retrieval_count, cfg, scripted_reviser)
                    .map_err(|e| e.to_string())?;
                if let Err(p) = effect_ok(text, &out) {
                    problems.push(format!("at {h} h: {p}"));
                }
                actions.push(out.decision.action);
                mds.push(out.decision.missing_degree);
            }
            let want = [
                ForgetAction::NoAction,
                ForgetAction::MaskOnly,
                ForgetAction::Revised,
            ];
            if offs.len() == 3 {
                if actions != want {
                    problems.push("expected NoAction, MaskOnly, Revised".into());
                }
            } else if actions.windows(2).any(|w| w[1] < w[0]) {
                problems.push("actions are not ordered by time".into());
            }
            Outcome {
                name: name.clone(),
                kind: "branch",
                passed: problems.is_empty(),
                detail: format!(
                    "md [{}] actions [{}] {}",
                    fmt_degrees(&mds),
                    actions
                        .iter()
                        .map(|a| a.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    problems.join("; ")
                ),
                degrees: mds,
                trigger: None,
            }
        }
        Case::Effect {
            name,
            mem_kind,
            text,
            retrieval_count,
            time_offset_hours,
            expected,
        } => {
            let min = ForgetAction::parse(&expected.min_action).map_err(|e| e.to_string())?;
            let out = lazy_forget_text(
                mem_kind.node_kind(),
                text,
                *time_offset_hours,
                *retrieval_count,
                cfg,
                scripted_reviser,
            )
            .map_err(|e| e.to_string())?;
            let action = out.decision.action;
            let triggered = action != ForgetAction::NoAction;
            let mut problems = Vec::new();
            if triggered != expected.should_forget {
                problems.push(format!(
                    "should_forget {} but action {}",
                    expected.should_forget,
                    action.as_str()
                ));
            }
            if action < min {
                problems.push(format!("action {} below {}", action.as_str(), min.as_str()));
            }
            if let Err(p) = effect_ok(text, &out) {
                problems.push(p);
            }
            let shown = out
                .revised
                .as_deref()
                .or(out.masked.as_deref())
                .unwrap_or(text);
            Outcome {
                name: name.clone(),
                kind: "effect",
                passed: problems.is_empty(),
                detail: format!(
                    "md {:.3} action {} → {shown:?} {}",
                    out.decision.missing_degree,
                    action.as_str(),
                    problems.join("; ")
                ),
                degrees: vec![out.decision.missing_degree],
                trigger: Some((expected.should_forget, triggered)),
            }
        }
    })
}

fn load(path: &Path) -> Result<ForgetFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: ForgetFile = serde_json::from_str(&text)
        .map_err(|e| format!("{}: invalid Forget JSON: {e}", path.display()))?;
    file.config
        .validate()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(file)
}

fn inputs(target: &Path) -> Result<Vec<PathBuf>, String> {
    if target.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(target)
            .map_err(|e| format!("{}: {e}", target.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(format!("{}: no .json files", target.display()));
        }
        Ok(files)
    } else {
        Ok(vec![target.to_path_buf()])
    }
}

/// Usage text of the subcommand.
pub const USAGE: &str = "soul_tune forget FILE|DIR... [--json OUT|-]";

/// The per-file summary table of the forget suite.
fn summary_table() -> Table {
    let r = Align::Right;
    Table::new()
        .col("cases", r)
        .col("passed", r)
        .col("failed", r)
        .group()
        .col("pass%", r)
        .col("trigger%", r)
        .col("mean md", r)
        .group()
        .col("time", r)
        .group()
        .label("file")
}

fn summary_cells(s: &Value, secs: Option<f64>, label: &str) -> Vec<String> {
    vec![
        s["cases"].to_string(),
        s["passed"].to_string(),
        s["failed"].to_string(),
        report::pct(s["pass_rate"].as_f64()),
        report::pct(s["trigger_rate"].as_f64()),
        report::num(s["mean_missing_degree"].as_f64()),
        secs.map_or(String::new(), report::secs),
        label.to_owned(),
    ]
}

/// Entry point: `soul_tune forget FILE|DIR... [--json OUT|-]`. Exit 0 when every case passes,
/// 1 on failures, 2 on usage or input errors. The report has the shared format of
/// [`crate::report`]: per file a case table, then one summary table (per file + TOTAL).
pub fn run(args: &[String]) -> ExitCode {
    let (targets, json_dest) =
        match report::parse_targets(args, "no Forget JSON file or directory given") {
            Ok(a) => a,
            Err(e) => {
                eprintln!("error: {e}\nusage: {USAGE}");
                return ExitCode::from(2);
            }
        };
    let mut files = Vec::new();
    for target in &targets {
        match inputs(target) {
            Ok(f) => files.extend(f),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let out = Printer::new(json_dest.as_ref());
    let t0 = Instant::now();
    let mut all = Vec::new();
    let mut reports = Vec::new();
    let mut summaries = summary_table();
    for path in &files {
        let t_file = Instant::now();
        let file = match load(path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        out.line(format!(
            "== {} ({}) — {}",
            file.name,
            path.display(),
            file.description
        ));
        out.line(format!(
            "   reviser: SCRIPTED (each [masked] → {SCRIPTED_GUESS:?}; no LLM); half-life {} h, active_factor {}, cap {}",
            file.config.base_half_life_hours,
            file.config.active_factor,
            file.config.max_activation_cap
        ));
        let mut table = Table::new()
            .col("result", Align::Left)
            .col("kind", Align::Left)
            .col("case", Align::Left)
            .label("detail");
        let mut outcomes = Vec::new();
        for case in &file.test_cases {
            let o = match run_case(case, &file.config) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("error: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            };
            table.push(vec![
                if o.passed { "PASS" } else { "FAIL" }.into(),
                o.kind.into(),
                o.name.clone(),
                o.detail.trim_end().to_owned(),
            ]);
            outcomes.push(o);
        }
        out.line(table.render());
        let summary = summarise(&outcomes);
        let secs = t_file.elapsed().as_secs_f64();
        summaries.push(summary_cells(
            &summary,
            Some(secs),
            &path.display().to_string(),
        ));
        let cases: Vec<Value> = outcomes
            .iter()
            .map(|o| {
                json!({
                    "name": o.name, "kind": o.kind, "passed": o.passed,
                    "detail": o.detail.trim_end(), "missing_degrees": o.degrees,
                })
            })
            .collect();
        reports.push(json!({
            "file": path.display().to_string(), "name": file.name,
            "description": file.description, "config": file.config,
            "summary": summary, "secs": secs, "cases": cases,
        }));
        all.extend(outcomes);
    }
    let summary = summarise(&all);
    summaries.push(summary_cells(&summary, None, "TOTAL"));
    out.line(format!("\n{}", summaries.render()));
    out.line(
        "\npass% = cases whose checks all hold; trigger% = T5 cases that should forget and did \
(over those that should); mean md = mean of every missing degree computed.",
    );
    let wall = t0.elapsed().as_secs_f64();
    out.line(format!("\nwall {wall:.2}s ({} file(s))", files.len()));
    if let Some(dest) = &json_dest {
        let doc = report::envelope(
            "forget",
            json!({"reviser": "scripted", "scripted_guess": SCRIPTED_GUESS}),
            json!({
                "passed": "every check of the case holds (T1 monotone in time, T2 recalls slow forgetting, T3 calibrated magnitude, T4 action bands, T5 effect on the text)",
                "trigger_rate": "T5 cases that should forget and did, over those that should",
                "mean_missing_degree": "mean of every missing degree the cases computed",
            }),
            json!({"all": {"summary": summary}}),
            reports,
            Vec::new(),
            json!({"wall_secs": wall}),
        );
        if let Err(e) = dest.emit(&Value::Object(doc), &out) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if all.iter().all(|o| o.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Pass rate, trigger rate (T5 cases that should forget and did, over those that should) and
/// the mean of every missing degree computed.
fn summarise(all: &[Outcome]) -> Value {
    let passed = all.iter().filter(|o| o.passed).count();
    let should: Vec<bool> = all
        .iter()
        .filter_map(|o| o.trigger)
        .filter(|(s, _)| *s)
        .map(|(_, t)| t)
        .collect();
    let trigger_rate = report::ratio(should.iter().filter(|t| **t).count() as f64, should.len());
    let degrees: Vec<f64> = all.iter().flat_map(|o| o.degrees.iter().copied()).collect();
    let mean = report::ratio(degrees.iter().sum::<f64>(), degrees.len()).unwrap_or(0.0);
    json!({
        "cases": all.len(),
        "passed": passed,
        "failed": all.len() - passed,
        "pass_rate": report::ratio(passed as f64, all.len()).unwrap_or(0.0),
        "trigger_rate": trigger_rate,
        "mean_missing_degree": mean,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(json: &str) -> Case {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn seed_examples_parse_and_pass() {
        let cfg = ForgetConfig::default();
        for j in [
            r#"{"kind":"time_monotonic","name":"T1","text":"今天下午我和张三在北京王府井的星巴克讨论了项目进展","time_offsets_hours":[0,6,12,24,48,96,168],"retrieval_count":0}"#,
            r#"{"kind":"activation","name":"T2","text":"鲁迅原名周树人浙江绍兴人","activation_counts":[0,5,20,50,200],"time_offset_hours":48}"#,
            r#"{"kind":"magnitude","name":"T3","text":"机器学习是人工智能的一个重要分支","time_offset_hours":24,"expected_missing_degree":0.5,"tolerance":0.08,"retrieval_count":0}"#,
            r#"{"kind":"branch","name":"T4","text":"昨天下午我们团队在会议室开了三个小时的 Sprint 回顾会议","time_offsets_hours":[0,4,96],"retrieval_count":0}"#,
            r#"{"kind":"effect","name":"T5","mem_kind":"semantic","text":"张三上个月去杭州出差在西湖边吃了东坡肉和龙井虾仁","retrieval_count":0,"time_offset_hours":96,"expected":{"should_forget":true,"min_action":"MaskOnly"}}"#,
        ] {
            let o = run_case(&case(j), &cfg).unwrap();
            assert!(o.passed, "{}: {}", o.name, o.detail);
        }
    }

    #[test]
    fn failing_expectations_fail() {
        let cfg = ForgetConfig::default();
        let bad_t3 = r#"{"kind":"magnitude","name":"x","text":"a","time_offset_hours":24,"expected_missing_degree":0.2,"tolerance":0.05}"#;
        assert!(!run_case(&case(bad_t3), &cfg).unwrap().passed);
        let bad_t4 = r#"{"kind":"branch","name":"x","text":"今天下午我们开会","time_offsets_hours":[96,4,0]}"#;
        assert!(!run_case(&case(bad_t4), &cfg).unwrap().passed);
        let bad_t5 = r#"{"kind":"effect","name":"x","mem_kind":"procedure","text":"挥手","time_offset_hours":96,"expected":{"should_forget":true}}"#;
        let o = run_case(&case(bad_t5), &cfg).unwrap();
        assert!(!o.passed);
        assert_eq!(o.trigger, Some((true, false)));
        let s = summarise(&[o]);
        assert_eq!(s["trigger_rate"], json!(0.0));
    }

    #[test]
    fn unknown_fields_and_kinds_are_rejected() {
        assert!(serde_json::from_str::<Case>(
            r#"{"kind":"magnitude","name":"x","text":"a","time_offset_hours":1,"expected_missing_degree":0.1,"tolerance":0.1,"oops":1}"#
        )
        .is_err());
        assert!(serde_json::from_str::<Case>(r#"{"kind":"nope","name":"x"}"#).is_err());
    }

    #[test]
    fn scripted_reviser_fills_every_mask() {
        let r = scripted_reviser("我和 [masked] 去了 [masked] ").unwrap();
        assert!(!r.contains(MASK_MARKER));
        assert_eq!(r.matches(SCRIPTED_GUESS).count(), 2);
    }
}
