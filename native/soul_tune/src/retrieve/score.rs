//! Scoring one test case against what its run returned ([`CaseResult`]) and summing the
//! scores of many cases ([`Summary`], per case-name group too). The metrics themselves are
//! `metrics.rs`; running the modes is `eval.rs`.

use super::data::{CaseCheck, TestCase};
use super::eval::Returned;
use super::metrics;
use serde::Serialize;
use soul_mem_core::model::NodeKind;
use soul_mem_core::retrieval::Stage;
use std::collections::BTreeMap;

/// Scores of one case in one mode.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// `scored`, `negative` or `data_error` (memory side).
    pub status: &'static str,
    /// Must ids missing from the graph (data error).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_ids: Vec<String>,
    /// Every must id returned.
    pub must_hit: bool,
    /// At least one must id returned.
    pub any_hit: bool,
    /// Reciprocal rank of the first must id.
    pub rr: f64,
    /// Fraction of existing bonus ids returned (None without bonus ids).
    pub bonus_recall: Option<f64>,
    /// Must ids not returned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missed: Vec<String>,
    /// Returned memory ids, best first.
    pub returned: Vec<String>,
    /// Action ground truth: `scored`, `data_error` or absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_status: Option<&'static str>,
    /// Any expected action in the action channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_hit: Option<bool>,
    /// Recall@3 of the expected actions in the action channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_recall3: Option<f64>,
    /// Returned actions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
    /// Returned self-knowledge procedures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub self_knowledge: Vec<String>,
    /// Abstract expectation: (detected, found directly by similarity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abstract_detected: Option<(bool, bool)>,
    /// Per sub-query expectations: (scored, all ids returned by that sub-query alone).
    pub per_query: (usize, usize),
    /// Case-name group ([`GROUPS`]), when the name starts with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<&'static str>,
    /// Negative case: memories returned, each a false positive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp: Option<usize>,
    /// Negative case: 1 when it returned any memory, else 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp_any: Option<usize>,
    /// Scored action case with no expected action in the action channel: why
    /// (`no_situation`, `wrong_situation` or `outranked`, see [`metrics::action_miss`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_miss: Option<&'static str>,
}

/// Case-name groups: a case belongs to the group named by its name up to and including the
/// first `_`, when that prefix is one of these (in report order).
pub const GROUPS: [&str; 6] = ["sem_", "recall_", "hop_", "act_", "multi_", "neg_"];

/// The group of a case name (see [`GROUPS`]), None for any other name.
pub fn case_group(name: &str) -> Option<&'static str> {
    let end = name.find('_')? + 1;
    let prefix = &name[..end];
    GROUPS.iter().copied().find(|g| *g == prefix)
}

/// Sums over cases; rates are computed at print time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// All cases.
    pub cases: usize,
    /// Cases with an empty must list (never failures).
    pub negative: usize,
    /// Cases whose must ids are not all in the graph (reported, not scored).
    pub data_error: usize,
    /// Scored cases (non-negative, every must id exists).
    pub scored: usize,
    /// Scored cases whose must list names a procedure (only the full pipeline's action and
    /// self-knowledge channels can return one).
    pub procedure_must: usize,
    /// Σ memories returned over scored cases (how much context a floor saves).
    pub returned_sum: usize,
    /// Scored cases with every must id returned.
    pub must_hit: usize,
    /// Scored cases with at least one must id returned.
    pub any_hit: usize,
    /// Σ reciprocal rank.
    pub mrr_sum: f64,
    /// Σ Recall@K per K.
    pub recall_sum: BTreeMap<usize, f64>,
    /// Σ Precision@K per K.
    pub precision_sum: BTreeMap<usize, f64>,
    /// Σ NDCG@K per K.
    pub ndcg_sum: BTreeMap<usize, f64>,
    /// Σ HitRate@K per K.
    pub hit_sum: BTreeMap<usize, f64>,
    /// Cases scored at K (K sets may differ between files).
    pub k_cases: BTreeMap<usize, usize>,
    /// Scored cases with bonus ids.
    pub bonus_cases: usize,
    /// Σ bonus recall.
    pub bonus_recall_sum: f64,
    /// Cases with non-empty `expected_actions`.
    pub action_cases: usize,
    /// … whose action ids are not all procedures of the graph.
    pub action_data_error: usize,
    /// … scored.
    pub action_scored: usize,
    /// Scored action cases with an expected action in the action channel.
    pub action_hit: usize,
    /// Σ action Recall@3.
    pub action_recall3_sum: f64,
    /// Scored action cases with an expected action in actions ∪ self-knowledge.
    pub action_hit_with_self: usize,
    /// Σ recall of expected actions in actions ∪ self-knowledge.
    pub action_recall_with_self_sum: f64,
    /// Scored cases with an expected abstract situation.
    pub abstract_expected: usize,
    /// … where one was returned.
    pub abstract_detected: usize,
    /// … returned as a similarity hit (Similarity/Both).
    pub abstract_direct: usize,
    /// … returned only through PPR.
    pub abstract_ppr_only: usize,
    /// Per sub-query expectations scored.
    pub per_query_scored: usize,
    /// … fully returned by their sub-query alone.
    pub per_query_hit: usize,
    /// Σ Recall@10 of the must ids over scored cases (whatever the file's K values).
    pub recall10_sum: f64,
    /// Σ memories returned by negative cases (each one a false positive).
    pub neg_fp_sum: usize,
    /// Negative cases that returned at least one memory.
    pub neg_fp_any: usize,
    /// Scored action misses with no situation among the returned memories.
    pub act_miss_no_situation: usize,
    /// … with situations returned, none of them expected.
    pub act_miss_wrong_situation: usize,
    /// … with an expected situation returned but the expected action not in the channel.
    pub act_miss_outranked: usize,
    /// The same sums per case-name group ([`GROUPS`]); reported separately.
    #[serde(skip)]
    pub groups: BTreeMap<&'static str, Summary>,
}

fn add_map(a: &mut BTreeMap<usize, f64>, b: &BTreeMap<usize, f64>) {
    for (k, v) in b {
        *a.entry(*k).or_default() += v;
    }
}

impl Summary {
    /// Adds `o` into `self`.
    pub fn add(&mut self, o: &Summary) {
        self.cases += o.cases;
        self.negative += o.negative;
        self.data_error += o.data_error;
        self.scored += o.scored;
        self.must_hit += o.must_hit;
        self.returned_sum += o.returned_sum;
        self.procedure_must += o.procedure_must;
        self.any_hit += o.any_hit;
        self.mrr_sum += o.mrr_sum;
        add_map(&mut self.recall_sum, &o.recall_sum);
        add_map(&mut self.precision_sum, &o.precision_sum);
        add_map(&mut self.ndcg_sum, &o.ndcg_sum);
        add_map(&mut self.hit_sum, &o.hit_sum);
        for (k, v) in &o.k_cases {
            *self.k_cases.entry(*k).or_default() += v;
        }
        self.bonus_cases += o.bonus_cases;
        self.bonus_recall_sum += o.bonus_recall_sum;
        self.action_cases += o.action_cases;
        self.action_data_error += o.action_data_error;
        self.action_scored += o.action_scored;
        self.action_hit += o.action_hit;
        self.action_recall3_sum += o.action_recall3_sum;
        self.action_hit_with_self += o.action_hit_with_self;
        self.action_recall_with_self_sum += o.action_recall_with_self_sum;
        self.abstract_expected += o.abstract_expected;
        self.abstract_detected += o.abstract_detected;
        self.abstract_direct += o.abstract_direct;
        self.abstract_ppr_only += o.abstract_ppr_only;
        self.per_query_scored += o.per_query_scored;
        self.per_query_hit += o.per_query_hit;
        self.recall10_sum += o.recall10_sum;
        self.neg_fp_sum += o.neg_fp_sum;
        self.neg_fp_any += o.neg_fp_any;
        self.act_miss_no_situation += o.act_miss_no_situation;
        self.act_miss_wrong_situation += o.act_miss_wrong_situation;
        self.act_miss_outranked += o.act_miss_outranked;
        for (g, s) in &o.groups {
            self.groups.entry(*g).or_default().add(s);
        }
    }

    /// Mean Recall@10 over scored cases.
    pub fn recall10(&self) -> Option<f64> {
        Self::ratio(self.recall10_sum, self.scored)
    }

    /// Mean memories returned per negative case (false positives per negative case).
    pub fn neg_fp_mean(&self) -> Option<f64> {
        Self::ratio(self.neg_fp_sum as f64, self.negative)
    }

    /// Share of negative cases that returned nothing.
    pub fn neg_zero_rate(&self) -> Option<f64> {
        Self::ratio(
            self.negative.saturating_sub(self.neg_fp_any) as f64,
            self.negative,
        )
    }

    /// `num / den`, or None when `den` is 0.
    pub fn ratio(num: f64, den: usize) -> Option<f64> {
        (den > 0).then(|| num / den as f64)
    }

    /// Mean of a per-K sum.
    pub fn at(&self, m: &BTreeMap<usize, f64>, k: usize) -> Option<f64> {
        Self::ratio(
            m.get(&k).copied().unwrap_or(0.0),
            self.k_cases.get(&k).copied().unwrap_or(0),
        )
    }

    /// The rates as a JSON object (for the report).
    pub fn rates(&self) -> serde_json::Value {
        let per_k = |m: &BTreeMap<usize, f64>| -> serde_json::Map<String, serde_json::Value> {
            self.k_cases
                .keys()
                .map(|k| (k.to_string(), serde_json::json!(self.at(m, *k))))
                .collect()
        };
        serde_json::json!({
            "must_hit_rate": Self::ratio(self.must_hit as f64, self.scored),
            "any_hit_rate": Self::ratio(self.any_hit as f64, self.scored),
            "mrr": Self::ratio(self.mrr_sum, self.scored),
            "mean_returned_memories": Self::ratio(self.returned_sum as f64, self.scored),
            "recall_at": per_k(&self.recall_sum),
            "precision_at": per_k(&self.precision_sum),
            "ndcg_at": per_k(&self.ndcg_sum),
            "hit_rate_at": per_k(&self.hit_sum),
            "bonus_recall": Self::ratio(self.bonus_recall_sum, self.bonus_cases),
            "action_hit_rate": Self::ratio(self.action_hit as f64, self.action_scored),
            "action_recall_at_3": Self::ratio(self.action_recall3_sum, self.action_scored),
            "action_hit_rate_with_self_knowledge":
                Self::ratio(self.action_hit_with_self as f64, self.action_scored),
            "action_recall_with_self_knowledge":
                Self::ratio(self.action_recall_with_self_sum, self.action_scored),
            "abstract_detected_rate":
                Self::ratio(self.abstract_detected as f64, self.abstract_expected),
            "per_query_hit_rate": Self::ratio(self.per_query_hit as f64, self.per_query_scored),
            "recall_at_10": self.recall10(),
            "neg_fp_mean": self.neg_fp_mean(),
            "neg_zero_rate": self.neg_zero_rate(),
        })
    }
}

/// Scores one case: `ret` is the full run, `per_query` the runs of single sub-queries named
/// by `expected_per_query` (same order), `exists`/`kind` look ids up in the graph. The case's
/// sums are added to `sum` and, when its name has a group ([`case_group`]), to that group's.
pub fn score_case(
    c: &TestCase,
    check: &CaseCheck,
    ret: &Returned,
    per_query: &[Returned],
    k_values: &[usize],
    kind: &dyn Fn(&str) -> Option<NodeKind>,
    sum: &mut Summary,
) -> CaseResult {
    let mut one = Summary::default();
    let mut r = score_one(c, check, ret, per_query, k_values, kind, &mut one);
    r.group = case_group(&c.name);
    sum.add(&one);
    if let Some(g) = r.group {
        sum.groups.entry(g).or_default().add(&one);
    }
    r
}

/// [`score_case`] into the sums of this case alone.
fn score_one(
    c: &TestCase,
    check: &CaseCheck,
    ret: &Returned,
    per_query: &[Returned],
    k_values: &[usize],
    kind: &dyn Fn(&str) -> Option<NodeKind>,
    sum: &mut Summary,
) -> CaseResult {
    // Memories never hold procedures (the pipeline keeps them in their own channels), so a
    // procedure id expected among the memories is looked up in the action and
    // self-knowledge channels: the ranked list is memories ++ actions ++ self-knowledge.
    let mut returned: Vec<&str> = ret.memories.iter().map(|m| m.0.as_str()).collect();
    for p in ret.actions.iter().chain(&ret.self_knowledge) {
        if !returned.contains(&p.as_str()) {
            returned.push(p.as_str());
        }
    }
    let must: Vec<&str> = c
        .expected_combined_ranking
        .iter()
        .map(String::as_str)
        .collect();
    let mut r = CaseResult {
        name: c.name.clone(),
        returned: returned.iter().map(|s| s.to_string()).collect(),
        ..CaseResult::default()
    };
    sum.cases += 1;
    if c.expected_combined_ranking.is_empty() {
        r.status = "negative";
        sum.negative += 1;
        // Nothing is relevant: every memory returned above the floor is a false positive.
        let mems: Vec<&str> = ret.memories.iter().map(|m| m.0.as_str()).collect();
        let (fp, fp_any) = metrics::false_positives(&mems);
        r.fp = Some(fp);
        r.fp_any = Some(fp_any);
        sum.neg_fp_sum += fp;
        sum.neg_fp_any += fp_any;
    } else if check.memory_data_error() {
        r.status = "data_error";
        r.missing_ids = check.missing_must.clone();
        sum.data_error += 1;
    } else {
        r.status = "scored";
        sum.scored += 1;
        r.must_hit = metrics::all_present(&returned, &must);
        r.any_hit = metrics::any_present(&returned, &must);
        r.missed = must
            .iter()
            .filter(|m| !returned.contains(m))
            .map(|s| s.to_string())
            .collect();
        if must.iter().any(|m| kind(m) == Some(NodeKind::Procedure)) {
            sum.procedure_must += 1;
        }
        sum.returned_sum += ret.memories.len();
        sum.must_hit += usize::from(r.must_hit);
        sum.any_hit += usize::from(r.any_hit);
        r.rr = metrics::reciprocal_rank(&returned, &must).unwrap_or(0.0);
        sum.mrr_sum += r.rr;
        sum.recall10_sum += metrics::recall_at(&returned, &must, 10).unwrap_or(0.0);
        for &k in k_values {
            let add = |m: &mut BTreeMap<usize, f64>, v: Option<f64>| {
                *m.entry(k).or_default() += v.unwrap_or(0.0);
            };
            add(&mut sum.recall_sum, metrics::recall_at(&returned, &must, k));
            add(
                &mut sum.precision_sum,
                metrics::precision_at(&returned, &must, k),
            );
            add(&mut sum.ndcg_sum, metrics::ndcg_at(&returned, &must, k));
            add(&mut sum.hit_sum, metrics::hit_at(&returned, &must, k));
            *sum.k_cases.entry(k).or_default() += 1;
        }
        let bonus: Vec<&str> = c
            .bonus_combined_ranking
            .iter()
            .map(String::as_str)
            .filter(|b| kind(b).is_some())
            .collect();
        if !bonus.is_empty() {
            let got = bonus.iter().filter(|b| returned.contains(b)).count();
            let br = got as f64 / bonus.len() as f64;
            r.bonus_recall = Some(br);
            sum.bonus_cases += 1;
            sum.bonus_recall_sum += br;
        }
        // Abstract detection.
        let abstracts: Vec<&str> = if c.expected_abstract.is_empty() {
            must.iter()
                .chain(bonus.iter())
                .copied()
                .filter(|id| kind(id) == Some(NodeKind::AbstractSituation))
                .collect()
        } else {
            c.expected_abstract
                .iter()
                .map(String::as_str)
                .filter(|id| kind(id).is_some())
                .collect()
        };
        if !abstracts.is_empty() {
            sum.abstract_expected += 1;
            let found: Vec<Stage> = ret
                .memories
                .iter()
                .filter(|m| abstracts.contains(&m.0.as_str()))
                .map(|m| m.1)
                .collect();
            let detected = !found.is_empty();
            let direct = found
                .iter()
                .any(|s| matches!(s, Stage::Similarity | Stage::Both));
            sum.abstract_detected += usize::from(detected);
            sum.abstract_direct += usize::from(direct);
            sum.abstract_ppr_only += usize::from(detected && !direct);
            r.abstract_detected = Some((detected, direct));
        }
        // Per sub-query expectations (only those whose ids all exist and are non-empty).
        let (mut pq_scored, mut pq_hit) = (0, 0);
        for (p, pr) in c.expected_per_query.iter().zip(per_query) {
            let ids: Vec<&str> = p.ranking.iter().map(String::as_str).collect();
            if ids.is_empty() || ids.iter().any(|i| kind(i).is_none()) {
                continue;
            }
            let got: Vec<&str> = pr.memories.iter().map(|m| m.0.as_str()).collect();
            pq_scored += 1;
            pq_hit += usize::from(metrics::all_present(&got, &ids));
        }
        r.per_query = (pq_scored, pq_hit);
        sum.per_query_scored += pq_scored;
        sum.per_query_hit += pq_hit;
    }
    // Actions: independent of the memory status.
    if !c.expected_actions.is_empty() {
        sum.action_cases += 1;
        if check.action_scored(c) {
            r.action_status = Some("scored");
            sum.action_scored += 1;
            let exp: Vec<&str> = c.expected_actions.iter().map(String::as_str).collect();
            let acts: Vec<&str> = ret.actions.iter().map(String::as_str).collect();
            let hit = metrics::any_present(&acts, &exp);
            let r3 = metrics::recall_at(&acts, &exp, 3).unwrap_or(0.0);
            sum.action_hit += usize::from(hit);
            sum.action_recall3_sum += r3;
            let mut both = acts.clone();
            both.extend(ret.self_knowledge.iter().map(String::as_str));
            let hit_s = metrics::any_present(&both, &exp);
            let rec_s = metrics::recall_at(&both, &exp, both.len()).unwrap_or(0.0);
            sum.action_hit_with_self += usize::from(hit_s);
            sum.action_recall_with_self_sum += rec_s;
            r.action_hit = Some(hit);
            r.action_recall3 = Some(r3);
            if !hit {
                let miss = action_miss_of(c, &must, ret, kind);
                match miss {
                    metrics::ActionMiss::NoSituation => sum.act_miss_no_situation += 1,
                    metrics::ActionMiss::WrongSituation => sum.act_miss_wrong_situation += 1,
                    metrics::ActionMiss::Outranked => sum.act_miss_outranked += 1,
                }
                r.action_miss = Some(miss.as_str());
            }
        } else {
            r.action_status = Some("data_error");
            sum.action_data_error += 1;
        }
    }
    r.actions = ret.actions.clone();
    r.self_knowledge = ret.self_knowledge.clone();
    r
}

/// Why a scored action case missed: the situations among the returned memories against the
/// case's expected situations (the situation ids among the must list and
/// `expected_abstract`).
fn action_miss_of(
    c: &TestCase,
    must: &[&str],
    ret: &Returned,
    kind: &dyn Fn(&str) -> Option<NodeKind>,
) -> metrics::ActionMiss {
    let is_sit = |id: &&str| kind(id).is_some_and(NodeKind::is_situation);
    let returned: Vec<&str> = ret
        .memories
        .iter()
        .map(|m| m.0.as_str())
        .filter(is_sit)
        .collect();
    let expected: Vec<&str> = must
        .iter()
        .copied()
        .chain(c.expected_abstract.iter().map(String::as_str))
        .filter(is_sit)
        .collect();
    metrics::action_miss(&returned, &expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, must: &[&str], actions: &[&str]) -> TestCase {
        super::super::data::test_case(name, must, actions, &[])
    }

    fn kind(id: &str) -> Option<NodeKind> {
        match id.split('_').next() {
            Some("sem") => Some(NodeKind::Semantic),
            Some("sit") => Some(NodeKind::SpecificSituation),
            Some("abs") => Some(NodeKind::AbstractSituation),
            Some("proc") => Some(NodeKind::Procedure),
            _ => None,
        }
    }

    fn returned(memories: &[&str], actions: &[&str]) -> Returned {
        Returned {
            memories: memories
                .iter()
                .map(|m| (m.to_string(), Stage::Similarity))
                .collect(),
            actions: actions.iter().map(|a| a.to_string()).collect(),
            self_knowledge: vec![],
        }
    }

    fn score(c: &TestCase, ret: &Returned, sum: &mut Summary) -> CaseResult {
        score_case(c, &CaseCheck::default(), ret, &[], &[1, 3], &kind, sum)
    }

    #[test]
    fn group_prefixes() {
        assert_eq!(case_group("sem_capital"), Some("sem_"));
        assert_eq!(case_group("recall_2019_trip"), Some("recall_"));
        assert_eq!(case_group("hop_x"), Some("hop_"));
        assert_eq!(case_group("act_gale"), Some("act_"));
        // Only up to the first `_`.
        assert_eq!(case_group("multi_hop_x"), Some("multi_"));
        assert_eq!(case_group("neg_"), Some("neg_"));
        assert_eq!(case_group("neg"), None);
        assert_eq!(case_group("semantic_x"), None);
        assert_eq!(case_group("query_1"), None);
        assert_eq!(case_group("x_sem_y"), None);
        assert_eq!(case_group(""), None);
    }

    #[test]
    fn negative_cases_count_false_positives_never_failures() {
        let mut sum = Summary::default();
        let neg = case("neg_parrot", &[], &[]);
        let r = score(&neg, &returned(&["sem_a", "sem_b", "abs_c"], &[]), &mut sum);
        assert_eq!((r.status, r.fp, r.fp_any), ("negative", Some(3), Some(1)));
        let r = score(&neg, &returned(&[], &["proc_p"]), &mut sum);
        // Actions are not memories: nothing returned.
        assert_eq!((r.fp, r.fp_any), (Some(0), Some(0)));
        assert_eq!((sum.negative, sum.scored, sum.must_hit), (2, 0, 0));
        assert_eq!((sum.neg_fp_sum, sum.neg_fp_any), (3, 1));
        assert_eq!(sum.neg_fp_mean(), Some(1.5));
        assert_eq!(sum.neg_zero_rate(), Some(0.5));
        // A scored case leaves the negative sums alone.
        let r = score(
            &case("sem_x", &["sem_a"], &[]),
            &returned(&["sem_a"], &[]),
            &mut sum,
        );
        assert_eq!((r.fp, r.fp_any), (None, None));
        assert_eq!(sum.neg_fp_sum, 3);
        assert_eq!(Summary::default().neg_fp_mean(), None);
    }

    #[test]
    fn recall_at_10_is_independent_of_k_values() {
        let mut sum = Summary::default();
        let mut mems: Vec<String> = (0..12).map(|i| format!("sem_{i}")).collect();
        mems.push("sem_a".into());
        let refs: Vec<&str> = mems.iter().map(String::as_str).collect();
        // sem_3 at rank 4 (inside the top 10), sem_a at rank 13 (outside).
        score(
            &case("sem_q", &["sem_3", "sem_a"], &[]),
            &returned(&refs, &[]),
            &mut sum,
        );
        score(
            &case("sem_r", &["sem_0"], &[]),
            &returned(&refs, &[]),
            &mut sum,
        );
        assert!(!sum.recall_sum.contains_key(&10));
        assert_eq!(sum.recall10(), Some((0.5 + 1.0) / 2.0));
        assert_eq!(sum.rates()["recall_at_10"], 0.75);
    }

    #[test]
    fn action_misses_are_classified() {
        let mut sum = Summary::default();
        let act = case("act_gale", &["abs_gale"], &["proc_stop"]);
        // No situation among the memories.
        let r = score(&act, &returned(&["sem_a"], &["proc_other"]), &mut sum);
        assert_eq!(r.action_miss, Some("no_situation"));
        // Situations, none expected.
        let r = score(&act, &returned(&["sit_rain", "sem_a"], &[]), &mut sum);
        assert_eq!(r.action_miss, Some("wrong_situation"));
        // The expected situation came back, the action did not.
        let r = score(&act, &returned(&["abs_gale"], &["proc_other"]), &mut sum);
        assert_eq!(r.action_miss, Some("outranked"));
        // A hit has no miss reason.
        let r = score(&act, &returned(&["abs_gale"], &["proc_stop"]), &mut sum);
        assert_eq!((r.action_hit, r.action_miss), (Some(true), None));
        // An explicit expected_abstract counts as an expected situation.
        let mut explicit = case("act_x", &["sem_a"], &["proc_stop"]);
        explicit.expected_abstract = vec!["abs_gale".into()];
        let r = score(&explicit, &returned(&["sem_a", "abs_gale"], &[]), &mut sum);
        assert_eq!(r.action_miss, Some("outranked"));
        assert_eq!(
            (
                sum.act_miss_no_situation,
                sum.act_miss_wrong_situation,
                sum.act_miss_outranked
            ),
            (1, 1, 2)
        );
        assert_eq!((sum.action_scored, sum.action_hit), (5, 1));
    }

    #[test]
    fn groups_sum_their_cases_and_add_merges_them() {
        let mut a = Summary::default();
        score(
            &case("sem_a", &["sem_a"], &[]),
            &returned(&["sem_a"], &[]),
            &mut a,
        );
        score(&case("sem_b", &["sem_b"], &[]), &returned(&[], &[]), &mut a);
        score(&case("neg_c", &[], &[]), &returned(&["sem_a"], &[]), &mut a);
        let r = score(
            &case("query_1", &["sem_a"], &[]),
            &returned(&[], &[]),
            &mut a,
        );
        assert_eq!(r.group, None);
        assert_eq!(a.cases, 4);
        let keys: Vec<&str> = a.groups.keys().copied().collect();
        assert_eq!(keys, ["neg_", "sem_"]);
        let sem = &a.groups["sem_"];
        assert_eq!((sem.cases, sem.scored, sem.must_hit), (2, 2, 1));
        assert_eq!(a.groups["neg_"].neg_fp_sum, 1);
        let mut total = Summary::default();
        total.add(&a);
        total.add(&a);
        assert_eq!(total.groups["sem_"].cases, 4);
        assert_eq!(total.groups["neg_"].negative, 2);
        assert!(total.groups["sem_"].groups.is_empty());
    }
}
