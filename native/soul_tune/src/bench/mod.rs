//! `soul_tune bench …`: benchmarks of the core on synthetic data or the local model.
//!
//! `card.rs` (character card import of a generated lorebook), `retrieval.rs` (retrieval latency on synthetic graphs), `store.rs` (SQLite store: save,
//! open, load, checkpoints, acknowledged writes) and `embed.rs` (embedding model load,
//! throughput, latency). `bench working` lives in `working.rs` next to this directory.

pub mod card;
pub mod embed;
pub mod retrieval;
pub mod store;

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
