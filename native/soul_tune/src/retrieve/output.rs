//! The report of a `soul_tune retrieve` run: the text tables per mode and weight pair, group
//! totals, the sweep's best settings, data errors and timings on the terminal, and the same as
//! one JSON document (`--json`).

use super::args::Options;
use super::data::{self, CaseCheck};
use super::eval::Mode;
use super::runs::FileOutcome;
use super::score::{CaseResult, Summary, GROUPS};
use super::score_dist::dist_report;
use super::tables::{cells, group_cells, group_table, groups_of, sweep_objective, table};
use crate::report::{self, num, pct, Align, Printer, Table};
use serde_json::{json, Value};
use soul_mem_core::engine::EmbedderChoice;
use std::collections::BTreeMap;
use std::process::ExitCode;

/// A summary as JSON; outside `full` there is no action channel, so the action miss reasons
/// are left out.
fn summary_json(mode: Mode, s: &Summary) -> Value {
    let mut v = json!(s);
    if !mode.has_actions() {
        if let Value::Object(m) = &mut v {
            m.retain(|k, _| !k.starts_with("act_miss_"));
        }
    }
    v
}

/// Case results as JSON (without `action_miss` outside `full`, as [`summary_json`]).
fn cases_json(mode: Mode, cases: &[CaseResult]) -> Value {
    let mut v = json!(cases);
    if !mode.has_actions() {
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

/// Prints the report of `results` (and writes the JSON one when asked); the exit code.
pub fn report(
    o: &Options,
    emb: &EmbedderChoice,
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
    let model_id = emb.name();
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
                            (m0, Some(m)) if m0.has_actions() => format!(", miss: {m}"),
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
(memories never hold procedures: they are looked up in the action/self-knowledge channels, so only `full` and `working` can hit them; \
ranked list = memories ++ actions ++ self-knowledge). \
act s/e = action cases scored/data-error; act% / actR@3 = action channel hit rate / Recall@3; act+sk = hit \
counting self-knowledge procedures too; abs = abstract detected/expected; absP = detected via PPR only; \
perQ% = expected_per_query fully returned by the sub-query alone. \
R@10 = mean Recall@10 of the must ids over scored cases (always K = 10, whatever test_k_values). \
miss n/w/o = full- and working-mode scored action cases with no expected action in the action channel, by reason: \
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
        EmbedderChoice::Model(m) => m.cache_counters(),
        EmbedderChoice::Hash(_) => None,
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
