//! Ranking metrics with binary relevance (an id is relevant when it is in the expected set).
//!
//! All functions take the returned ids best first and the relevant ids; duplicates in
//! `ranked` count once (the first occurrence). With no relevant ids the metrics are undefined
//! and return `None` (a negative case is not scored).

use std::collections::HashSet;

fn dedup<'a>(ranked: &[&'a str]) -> Vec<&'a str> {
    let mut seen = HashSet::new();
    ranked.iter().copied().filter(|r| seen.insert(*r)).collect()
}

fn rel_set<'a>(relevant: &[&'a str]) -> Option<HashSet<&'a str>> {
    let s: HashSet<&str> = relevant.iter().copied().collect();
    (!s.is_empty()).then_some(s)
}

/// Recall@K = |relevant ∩ top K| / |relevant|.
pub fn recall_at(ranked: &[&str], relevant: &[&str], k: usize) -> Option<f64> {
    let rel = rel_set(relevant)?;
    let hits = dedup(ranked)
        .iter()
        .take(k)
        .filter(|r| rel.contains(*r))
        .count();
    Some(hits as f64 / rel.len() as f64)
}

/// Precision@K = |relevant ∩ top K| / K (K fixed, even when fewer than K were returned).
pub fn precision_at(ranked: &[&str], relevant: &[&str], k: usize) -> Option<f64> {
    let rel = rel_set(relevant)?;
    if k == 0 {
        return Some(0.0);
    }
    let hits = dedup(ranked)
        .iter()
        .take(k)
        .filter(|r| rel.contains(*r))
        .count();
    Some(hits as f64 / k as f64)
}

/// Reciprocal rank of the first relevant id (0 when none is returned).
pub fn reciprocal_rank(ranked: &[&str], relevant: &[&str]) -> Option<f64> {
    let rel = rel_set(relevant)?;
    Some(
        dedup(ranked)
            .iter()
            .position(|r| rel.contains(*r))
            .map_or(0.0, |p| 1.0 / (p as f64 + 1.0)),
    )
}

/// NDCG@K with binary gains: DCG = Σ_{i ≤ K, relevant} 1 / log2(i + 1) (i from 1), divided
/// by the ideal DCG of min(K, |relevant|) relevant ids on top.
pub fn ndcg_at(ranked: &[&str], relevant: &[&str], k: usize) -> Option<f64> {
    let rel = rel_set(relevant)?;
    let disc = |i: usize| 1.0 / ((i as f64) + 1.0).log2();
    let dcg: f64 = dedup(ranked)
        .iter()
        .take(k)
        .enumerate()
        .filter(|(_, r)| rel.contains(*r))
        .map(|(i, _)| disc(i + 1))
        .sum();
    let ideal: f64 = (1..=k.min(rel.len())).map(disc).sum();
    Some(if ideal > 0.0 { dcg / ideal } else { 0.0 })
}

/// HitRate@K: 1 when at least one relevant id is in the top K, else 0.
pub fn hit_at(ranked: &[&str], relevant: &[&str], k: usize) -> Option<f64> {
    let rel = rel_set(relevant)?;
    Some(f64::from(u8::from(
        dedup(ranked).iter().take(k).any(|r| rel.contains(*r)),
    )))
}

/// True when every relevant id is anywhere in `ranked` (the must-hit criterion).
pub fn all_present(ranked: &[&str], relevant: &[&str]) -> bool {
    relevant.iter().all(|r| ranked.contains(r))
}

/// True when at least one relevant id is anywhere in `ranked`.
pub fn any_present(ranked: &[&str], relevant: &[&str]) -> bool {
    relevant.iter().any(|r| ranked.contains(r))
}

/// Why a scored action case missed (no expected action in the action channel): where the
/// chain situation → action broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionMiss {
    /// No situation node among the returned memories: the action channel had no source.
    NoSituation,
    /// Situations were returned, but none of the expected ones.
    WrongSituation,
    /// An expected situation was returned, yet the expected action did not make the channel.
    Outranked,
}

impl ActionMiss {
    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionMiss::NoSituation => "no_situation",
            ActionMiss::WrongSituation => "wrong_situation",
            ActionMiss::Outranked => "outranked",
        }
    }
}

/// Classifies an action miss from the situation ids among the returned memories and the
/// case's expected situation ids (with no expected situation, any returned one is wrong).
pub fn action_miss(returned_situations: &[&str], expected_situations: &[&str]) -> ActionMiss {
    if returned_situations.is_empty() {
        ActionMiss::NoSituation
    } else if any_present(returned_situations, expected_situations) {
        ActionMiss::Outranked
    } else {
        ActionMiss::WrongSituation
    }
}

/// False positives of a negative case (nothing is relevant): every returned id counts.
/// Returns (count, 1 when any was returned else 0).
pub fn false_positives(ranked: &[&str]) -> (usize, usize) {
    let n = dedup(ranked).len();
    (n, usize::from(n > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        matches!(a, Some(x) if (x - b).abs() < 1e-9)
    }

    // ranked: a b c d e; relevant: b d x (x never returned).
    const R: [&str; 5] = ["a", "b", "c", "d", "e"];
    const REL: [&str; 3] = ["b", "d", "x"];

    #[test]
    fn recall_hand_computed() {
        assert!(close(recall_at(&R, &REL, 1), 0.0));
        assert!(close(recall_at(&R, &REL, 2), 1.0 / 3.0));
        assert!(close(recall_at(&R, &REL, 5), 2.0 / 3.0));
        assert!(close(recall_at(&R, &REL, 50), 2.0 / 3.0));
    }

    #[test]
    fn precision_hand_computed() {
        assert!(close(precision_at(&R, &REL, 1), 0.0));
        assert!(close(precision_at(&R, &REL, 2), 0.5));
        assert!(close(precision_at(&R, &REL, 4), 0.5));
        // K larger than the list: still divided by K.
        assert!(close(precision_at(&R, &REL, 10), 0.2));
    }

    #[test]
    fn mrr_hand_computed() {
        assert!(close(reciprocal_rank(&R, &REL), 0.5));
        assert!(close(reciprocal_rank(&R, &["a"]), 1.0));
        assert!(close(reciprocal_rank(&R, &["e"]), 0.2));
        assert!(close(reciprocal_rank(&R, &["zz"]), 0.0));
    }

    #[test]
    fn ndcg_hand_computed() {
        // Hits at ranks 2 and 4: DCG = 1/log2(3) + 1/log2(5); ideal (3 relevant, K=5) =
        // 1 + 1/log2(3) + 1/2.
        let dcg = 1.0 / 3f64.log2() + 1.0 / 5f64.log2();
        let idcg = 1.0 + 1.0 / 3f64.log2() + 0.5;
        assert!(close(ndcg_at(&R, &REL, 5), dcg / idcg));
        // K = 3: only rank 2 counts; ideal = 1 + 1/log2(3) + 1/2.
        assert!(close(
            ndcg_at(&R, &REL, 3),
            (1.0 / 3f64.log2()) / (1.0 + 1.0 / 3f64.log2() + 0.5)
        ));
        // Perfect ranking is 1.
        assert!(close(ndcg_at(&["b", "d"], &["b", "d"], 3), 1.0));
        assert!(close(ndcg_at(&R, &["a"], 1), 1.0));
    }

    #[test]
    fn hit_and_presence() {
        assert!(close(hit_at(&R, &REL, 1), 0.0));
        assert!(close(hit_at(&R, &REL, 2), 1.0));
        assert!(!all_present(&R, &REL));
        assert!(all_present(&R, &["b", "d"]));
        assert!(any_present(&R, &REL));
        assert!(!any_present(&R, &["x"]));
    }

    #[test]
    fn action_miss_reasons() {
        // No situation returned at all.
        assert_eq!(action_miss(&[], &["abs_gale"]), ActionMiss::NoSituation);
        assert_eq!(action_miss(&[], &[]), ActionMiss::NoSituation);
        // Situations, but not the expected one.
        assert_eq!(
            action_miss(&["abs_rain", "sit_storm"], &["abs_gale"]),
            ActionMiss::WrongSituation
        );
        // Nothing expected: any returned situation is the wrong one.
        assert_eq!(action_miss(&["abs_rain"], &[]), ActionMiss::WrongSituation);
        // The expected situation came back; the action lost in the channel.
        assert_eq!(
            action_miss(&["abs_rain", "abs_gale"], &["abs_gale"]),
            ActionMiss::Outranked
        );
        assert_eq!(ActionMiss::Outranked.as_str(), "outranked");
    }

    #[test]
    fn false_positives_count_every_returned_id() {
        assert_eq!(false_positives(&["a", "b", "c"]), (3, 1));
        assert_eq!(false_positives(&["a", "a"]), (1, 1));
        assert_eq!(false_positives(&[]), (0, 0));
    }

    #[test]
    fn negative_cases_are_undefined_and_duplicates_count_once() {
        assert_eq!(recall_at(&R, &[], 3), None);
        assert_eq!(precision_at(&R, &[], 3), None);
        assert_eq!(reciprocal_rank(&R, &[]), None);
        assert_eq!(ndcg_at(&R, &[], 3), None);
        assert_eq!(hit_at(&R, &[], 3), None);
        // "b" twice does not take two places nor count twice.
        assert!(close(recall_at(&["b", "b", "d"], &["b", "d"], 2), 1.0));
        assert!(close(precision_at(&["b", "b", "c"], &["b", "c"], 2), 1.0));
    }
}
