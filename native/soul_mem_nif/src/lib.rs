//! Thin rustler glue over `soul_mem_core`. Every NIF decodes its arguments (a wrong type raises
//! `ArgumentError`), calls the core, and returns `{:ok, _}` / `{:error, {kind, message}}`.
//! Anything that may take over ~1 ms runs on a dirty scheduler.

mod allocator;
mod card;
mod consolidate;
mod embedder;
mod error;
mod forget;
mod graph;
mod recall;
mod store;

// Change capture and replicas (issue 19, replication).
mod replication;
mod term;
mod working;

// Note listing and deletion (issue 18).
mod notes;

// The MessagePack data plane's codec (issue 19); the checks live in a module without rustler
// so that tests/msgpack_codec.rs can unit-test them.
mod msgpack;
mod msgpack_codec;

pub use error::NifError;

rustler::init!("Elixir.SoulMem.Native", load = load);

/// Runs once when the library is loaded: see [`allocator`], and the compute pool
/// ([`soul_mem_core::worker_pool`]: its workers pinned one per CPU unless
/// `SOUL_MEM_PIN_WORKERS=0`). A refused setting only costs speed, so loading goes on.
fn load(_env: rustler::Env, _info: rustler::Term) -> bool {
    let _ = allocator::tune();
    soul_mem_core::mimalloc_options::keep_freed_memory();
    let _ = soul_mem_core::worker_pool::init_global(soul_mem_core::worker_pool::pin_from_env());
    true
}
