//! `soul_tune bench …`: benchmarks of the core on synthetic data or the local model.
//!
//! `card.rs` (character card import of a generated lorebook), `retrieval.rs` (retrieval
//! latency on synthetic graphs), `recall.rs` (a stored character's recall of chat messages
//! with the model; `recall_working.rs` the same in working memory), `store.rs` (SQLite
//! store: save, open, load, checkpoints, acknowledged writes) and `embed.rs` (embedding model
//! load, throughput, latency). `bench working` lives
//! in `working.rs` next to this directory.

pub mod card;
pub mod embed;
pub mod recall;
mod recall_working;
pub mod retrieval;
pub mod store;

use std::time::Instant;

/// Parses a comma-separated list of positive sizes (`"1000,10000"`).
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let sizes = s
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|e| e.to_string())?;
    if sizes.contains(&0) {
        return Err("sizes must be positive".into());
    }
    Ok(sizes)
}

/// The value at quantile `p` (0–1, nearest rank) of ascending `sorted`; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The median and 99th percentile of `v`.
pub fn p50_p99(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// The median, 95th and 99th percentiles of `v`.
pub fn p50_p95_p99(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    [0.5, 0.95, 0.99].map(|p| percentile(&v, p))
}

/// Milliseconds since `t`.
pub fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
