//! The text tables of the report: the per-(mode, weight pair) table with one row per file,
//! the per-group table, and the cells of their rows from a [`Summary`].

use super::eval::Mode;
use super::score::{Summary, GROUPS};
use crate::report::{self, num, pct, Align, Table};

/// The per-(mode, weight pair) table: one row per file and a TOTAL row.
pub fn table(ks: &[usize]) -> Table {
    let r = Align::Right;
    let mut t = Table::new()
        .col("cases", r)
        .col("scored", r)
        .col("dErr", r)
        .col("neg", r)
        .col("proc", r)
        .group()
        .col("must%", r)
        .col("any%", r)
        .col("ret", r)
        .col("MRR", r)
        .col("R@10", r);
    for k in per_k_recall(ks) {
        t = t.col(format!("R@{k}"), r);
    }
    for k in ks {
        t = t.col(format!("NDCG@{k}"), r);
    }
    t.group()
        .col("act s/e", r)
        .col("act%", r)
        .col("actR@3", r)
        .col("act+sk", r)
        .col("miss n/w/o", r)
        .group()
        .col("abs", r)
        .col("absP", r)
        .group()
        .col("negFP", r)
        .col("neg0%", r)
        .group()
        .col("perQ%", r)
        .group()
        .col("time", r)
        .group()
        .label("file")
}

/// The K values with their own `R@K` column: 10 is always shown as `R@10`.
fn per_k_recall(ks: &[usize]) -> impl Iterator<Item = &usize> {
    ks.iter().filter(|k| **k != 10)
}

/// `abs`: detected/expected, `-` without abstract expectations.
fn abs_cell(s: &Summary) -> String {
    if s.abstract_expected > 0 {
        format!("{}/{}", s.abstract_detected, s.abstract_expected)
    } else {
        "-".into()
    }
}

/// `miss n/w/o`: action misses by reason (no situation / wrong situation / outranked);
/// `-` outside `full` (no action channel) or without scored action cases.
fn miss_cell(mode: Mode, s: &Summary) -> String {
    if !mode.has_actions() || s.action_scored == 0 {
        return "-".into();
    }
    format!(
        "{}/{}/{}",
        s.act_miss_no_situation, s.act_miss_wrong_situation, s.act_miss_outranked
    )
}

/// The `negFP` and `neg0%` cells.
fn neg_cells(s: &Summary) -> [String; 2] {
    [
        s.neg_fp_mean().map_or("-".into(), |v| format!("{v:.2}")),
        pct(s.neg_zero_rate()),
    ]
}

/// The cells of one row of [`table`].
pub fn cells(label: &str, mode: Mode, s: &Summary, ks: &[usize], secs: Option<f64>) -> Vec<String> {
    let mut c = vec![
        s.cases.to_string(),
        s.scored.to_string(),
        s.data_error.to_string(),
        s.negative.to_string(),
        s.procedure_must.to_string(),
        pct(Summary::ratio(s.must_hit as f64, s.scored)),
        pct(Summary::ratio(s.any_hit as f64, s.scored)),
        Summary::ratio(s.returned_sum as f64, s.scored).map_or("-".into(), |v| format!("{v:.1}")),
        num(Summary::ratio(s.mrr_sum, s.scored)),
        num(s.recall10()),
    ];
    c.extend(per_k_recall(ks).map(|k| num(s.at(&s.recall_sum, *k))));
    c.extend(ks.iter().map(|k| num(s.at(&s.ndcg_sum, *k))));
    c.extend([
        format!("{}/{}", s.action_scored, s.action_data_error),
        pct(Summary::ratio(s.action_hit as f64, s.action_scored)),
        num(Summary::ratio(s.action_recall3_sum, s.action_scored)),
        pct(Summary::ratio(
            s.action_hit_with_self as f64,
            s.action_scored,
        )),
        miss_cell(mode, s),
        abs_cell(s),
        s.abstract_ppr_only.to_string(),
    ]);
    c.extend(neg_cells(s));
    c.extend([
        pct(Summary::ratio(s.per_query_hit as f64, s.per_query_scored)),
        secs.map_or(String::new(), report::secs),
        label.to_owned(),
    ]);
    c
}

/// What a sweep maximises: the mean of the must-hit rate, Recall@10 and (where the data has
/// action cases) the action hit rate. None without scored cases.
pub fn sweep_objective(s: &Summary) -> Option<f64> {
    let mut parts = vec![Summary::ratio(s.must_hit as f64, s.scored)?, s.recall10()?];
    if let Some(a) = Summary::ratio(s.action_hit as f64, s.action_scored) {
        parts.push(a);
    }
    Some(parts.iter().sum::<f64>() / parts.len() as f64)
}

/// The per-group table (one row per case-name group present, see [`GROUPS`]).
pub fn group_table() -> Table {
    let r = Align::Right;
    Table::new()
        .col("cases", r)
        .col("scored", r)
        .group()
        .col("must%", r)
        .col("any%", r)
        .col("MRR", r)
        .col("R@10", r)
        .group()
        .col("act%", r)
        .col("actR@3", r)
        .col("miss n/w/o", r)
        .group()
        .col("abs", r)
        .group()
        .col("negFP", r)
        .col("neg0%", r)
        .group()
        .label("group")
}

/// The cells of one row of [`group_table`].
pub fn group_cells(label: &str, mode: Mode, s: &Summary) -> Vec<String> {
    let mut c = vec![
        s.cases.to_string(),
        s.scored.to_string(),
        pct(Summary::ratio(s.must_hit as f64, s.scored)),
        pct(Summary::ratio(s.any_hit as f64, s.scored)),
        num(Summary::ratio(s.mrr_sum, s.scored)),
        num(s.recall10()),
        pct(Summary::ratio(s.action_hit as f64, s.action_scored)),
        num(Summary::ratio(s.action_recall3_sum, s.action_scored)),
        miss_cell(mode, s),
        abs_cell(s),
    ];
    c.extend(neg_cells(s));
    c.push(label.to_owned());
    c
}

/// The rows of `s`'s groups, in [`GROUPS`] order: (group, its sums).
pub fn groups_of(s: &Summary) -> impl Iterator<Item = (&'static str, &Summary)> {
    GROUPS
        .iter()
        .filter_map(move |g| s.groups.get(g).map(|gs| (*g, gs)))
}
