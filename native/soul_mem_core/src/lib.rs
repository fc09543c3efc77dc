//! SoulMem core: the memory graph data model, Graph JSON import/export, and the
//! algorithms that run over it. Pure Rust, no rustler, so it is testable and benchable
//! with plain cargo.

pub mod card;
pub mod consolidate;
pub mod embed;
pub mod embedder;
pub mod embedding_cache;
pub mod engine;
pub mod error;
pub mod forget;
pub mod graph;
pub mod import;
pub mod listing;
pub mod mimalloc_options;
pub mod model;
pub mod neighbourhood;
pub mod note_delete;
pub mod recalled;
pub mod retrieval;
pub mod rng;
pub mod store;
pub mod text;
pub mod wal_folder;
pub mod worker_pool;
pub mod working;

pub use error::{Error, Result};
