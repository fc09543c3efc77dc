//! `soul_tune retrieve`: retrieval evaluation over Query JSON files (the seed's RetrieveSuite,
//! soul-tune §4.2).
//!
//! For every query file: load the graph named by `graph_path` (relative to the file), embed
//! it (real model with a persistent cache by default, or the lexical hash embedder), run every
//! test case in each requested mode and every `blend_sweep` weight pair, and score it.
//!
//! Definitions (also printed under the table):
//! - **scored case**: `expected_combined_ranking` non-empty and every id in it exists in the
//!   graph. Cases with missing ids are **data errors** (listed with the ids, never scored);
//!   cases with an empty list are **negative** (never failures).
//! - **must-hit**: every `expected_combined_ranking` id is among the returned memories (the
//!   merged list, at most `config.max_results`). **any-hit**: at least one is.
//! - Recall@K, Precision@K (÷K), MRR, NDCG@K (binary gains) and HitRate@K over the must ids.
//! - **bonus recall**: fraction of existing `bonus_combined_ranking` ids returned.
//! - **action hit / Recall@3**: over cases with non-empty `expected_actions` whose ids are all
//!   procedures of the graph; hit = any expected action in the action channel (top
//!   `action_top_k` = 3), Recall@3 = |expected ∩ top 3| / |expected|. Only `full` and
//!   `working` have actions. A variant that also counts self-knowledge procedures is reported
//!   alongside.
//! - **abstract detection**: cases expecting an abstract situation (explicit
//!   `expected_abstract`, else the abstract nodes among must ∪ bonus ids); detected = one is
//!   returned; direct = returned as a similarity hit, PPR-only = returned only through PPR.
//! - **R@10**: Recall@10 of the must ids, always (whatever the file's `test_k_values`).
//! - **negative false positives**: a negative case expects nothing, so every memory it
//!   returns (above the floor) is a false positive: negFP = mean memories returned per
//!   negative case, neg0% = share of negative cases that returned nothing.
//! - **action miss reasons** (`full` and `working`, scored action cases with no expected
//!   action in the channel): `no_situation` (no situation among the returned memories),
//!   `wrong_situation` (situations returned, none of the expected ones: the situation ids of
//!   the must list and `expected_abstract`), `outranked` (an expected situation returned, the
//!   action not).
//! - **working** mode: `full` answered through working memory (`--working-cap`,
//!   `--working-budget`): each case recalls through a fresh `WorkingMemory` over the graph
//!   saved in a temporary store — what a character above the working-memory threshold does.
//! - **groups**: cases grouped by name prefix (`sem_`, `recall_`, `hop_`, `act_`, `multi_`,
//!   `neg_`; other names in no group), reported per file and in total.
//!
//! Files: `args.rs` (command line, file discovery), `data.rs` (Query JSON), `runs.rs` (one
//! file end to end), `eval.rs` (one case in one mode), `score.rs` (scoring a case, summing),
//! `metrics.rs` (ranking metrics), `working.rs` (`--mode working`), `score_dist.rs`
//! (`--score-dist`), `tables.rs` (text table rows) and `output.rs` (the text and JSON report).

mod args;
pub(crate) mod data;
mod eval;
mod metrics;
mod output;
mod runs;
mod score;
mod score_dist;
mod tables;
mod working;

pub use args::default_cache;
use args::{discover, parse_args, USAGE};
use rayon::prelude::*;
use runs::{run_file, FileOutcome};
use soul_mem_core::engine::{EmbedderChoice, ModelEmbedder};
use soul_mem_core::retrieval::HashEmbedder;
use std::process::ExitCode;
use std::time::Instant;

/// Entry point of `soul_tune retrieve`.
pub fn run(args: &[String]) -> ExitCode {
    let o = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}\nusage: {USAGE}");
            return ExitCode::from(2);
        }
    };
    let files = match discover(&o.inputs) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let emb = if o.embedder == "hash" {
        match HashEmbedder::new(384) {
            Ok(h) => EmbedderChoice::Hash(h),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        if let Some(dir) = o.cache.as_ref().and_then(|c| c.parent()) {
            if !dir.as_os_str().is_empty() {
                if let Err(e) = std::fs::create_dir_all(dir) {
                    eprintln!("error: cache directory {}: {e}", dir.display());
                    return ExitCode::FAILURE;
                }
            }
        }
        match ModelEmbedder::load(o.model.as_deref(), o.cache.as_deref(), None) {
            Ok(m) => EmbedderChoice::Model(std::sync::Arc::new(m)),
            Err(e) => {
                eprintln!("error: cannot load the embedding model: {e}\n(use --embedder hash to run without a model)");
                return ExitCode::FAILURE;
            }
        }
    };
    let load_secs = t0.elapsed().as_secs_f64();
    let results: Vec<Result<FileOutcome, data::DataError>> = if o.batch {
        files.par_iter().map(|f| run_file(f, &o, &emb)).collect()
    } else {
        files.iter().map(|f| run_file(f, &o, &emb)).collect()
    };
    let wall = t0.elapsed().as_secs_f64();
    output::report(&o, &emb, &results, load_secs, wall)
}
