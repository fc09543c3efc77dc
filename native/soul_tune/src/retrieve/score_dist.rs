//! The similarity score distribution (`--score-dist`): raw similarity of expected against
//! other nodes per scored case ([`collect`]), summarised over files with quantiles and a
//! sweep of candidate floors ([`dist_report`]).

use super::data::{CaseCheck, QueryFile};
use super::eval;
use super::runs::FileOutcome;
use serde_json::{json, Value};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::retrieval::{PipelineConfig, QueryVectors, RetrievalIndex};

/// Score samples for the distribution report.
#[derive(Default)]
pub struct Dist {
    pub expected: Vec<f32>,
    pub other: Vec<f32>,
    /// Per scored case: lowest must score, highest non-expected score.
    pub per_case: Vec<(f32, f32)>,
}

/// The score samples of one file's scored cases under `cfg` (default weights).
pub fn collect(
    qf: &QueryFile,
    qvecs: &[Vec<QueryVectors>],
    checks: &[(String, CaseCheck)],
    graph: &MemoryGraph,
    idx: &RetrievalIndex,
    cfg: &PipelineConfig,
) -> soul_mem_core::Result<Dist> {
    let mut dist = Dist::default();
    for ((c, v), (_, check)) in qf.cases.iter().zip(qvecs).zip(checks) {
        if !check.memory_scored(c) {
            continue;
        }
        let scores = eval::case_scores(idx, &c.sub_queries, v, cfg)?;
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
    Ok(dist)
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

pub fn dist_report(outcomes: &[&FileOutcome]) -> Value {
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
