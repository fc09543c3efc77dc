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
