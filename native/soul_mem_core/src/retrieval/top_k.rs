//! Top-k selection shared by similarity, the pipeline and the action channel: [`top_k`] (the
//! best `k` items under a total order, sorted), its small-k insertion buffer [`push_top`], and
//! [`by_score`], the usual order (best score first, ties by position).

/// Inserts `x` into `buf`, the sorted best `k` (≤ [`SMALL_K`]) so far under `cmp`. Most
/// items lose to the current k-th: one comparison.
#[inline]
pub(crate) fn push_top<T: Copy>(
    buf: &mut Vec<T>,
    k: usize,
    x: T,
    cmp: impl Fn(&T, &T) -> std::cmp::Ordering,
) {
    if buf.len() == k && buf.last().is_some_and(|last| cmp(&x, last).is_ge()) {
        return;
    }
    let at = buf.partition_point(|y| cmp(y, &x).is_le());
    buf.insert(at, x);
    buf.truncate(k);
}

/// Best score first, ties by position (a total order: top-k selections are unique).
pub(crate) fn by_score(a: &(u32, f64), b: &(u32, f64)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Up to this k, [`top_k`] keeps a sorted buffer (one comparison per item for most items);
/// above, it selects in O(n) after collecting.
pub(crate) const SMALL_K: usize = 64;

/// The first `k` items of `items` in the order `cmp`, sorted. With a total order the result
/// is unique, so both strategies agree. Complexity: O(n + k·(insertions)) for small k, else
/// O(n + k log k) after an O(n) collect.
pub(crate) fn top_k<T: Copy>(
    items: impl Iterator<Item = T>,
    k: usize,
    cmp: impl Fn(&T, &T) -> std::cmp::Ordering,
) -> Vec<T> {
    if k == 0 {
        return Vec::new();
    }
    if k <= SMALL_K {
        let mut buf: Vec<T> = Vec::with_capacity(k + 1);
        for x in items {
            push_top(&mut buf, k, x, &cmp);
        }
        return buf;
    }
    let mut all: Vec<T> = items.collect();
    if all.len() > k {
        all.select_nth_unstable_by(k - 1, &cmp);
        all.truncate(k);
    }
    all.sort_by(&cmp);
    all
}
