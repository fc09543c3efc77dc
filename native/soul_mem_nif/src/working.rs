//! Working-memory NIFs (`soul_mem_core::working`): in activation mode a character's graph
//! handle holds only a working subgraph of its store. `working_open` builds the long-term
//! vector index and returns a working handle that keeps the store handle, the graph handle
//! and the activation state (LRU ticks, boundary bookkeeping) together; every later call
//! takes only that handle. Locks are taken working → graph → store (the graph → store order
//! of the store NIFs). Structured arguments and results are maps with string keys (`term.rs`).

use crate::embedder::loaded_model;
use crate::error::{ok_or_error, NifError};
use crate::graph::Handle;
use crate::recall::{decode_forgetting, run_exclusive, RecallRequest};
use crate::store::{resolve_stored, with_store, CheckpointExtra, StoreResource};
use crate::term;
use rustler::{Encoder, Env, LocalPid, ResourceArc, Term};
use serde::Deserialize;
use serde_json::{json, Value};
use soul_mem_core::engine::EmbedderChoice;
use soul_mem_core::retrieval::{HashEmbedder, SubQuery};
use soul_mem_core::store::{Change, Store};
use soul_mem_core::working::{WorkingConfig, WorkingMemory};
use soul_mem_core::Error;
use std::sync::{Mutex, MutexGuard};

mod atoms {
    rustler::atoms! { soul_mem_embed_progress }
}

struct WorkingState {
    wm: WorkingMemory,
    store: ResourceArc<StoreResource>,
    graph: Handle,
}

/// A character's working memory: the policy state plus the store and graph it works on.
pub struct WorkingResource {
    state: Mutex<WorkingState>,
}

#[rustler::resource_impl]
impl rustler::Resource for WorkingResource {}

pub(crate) type WorkingHandle = ResourceArc<WorkingResource>;

impl WorkingResource {
    fn lock(&self) -> Result<MutexGuard<'_, WorkingState>, NifError> {
        self.state.lock().map_err(|_| NifError::Poisoned)
    }
}

/// Runs `f` with the working memory, the engine (write lock) and the open store.
fn with_all<T>(
    handle: &WorkingHandle,
    f: impl FnOnce(
        &mut WorkingMemory,
        &mut soul_mem_core::engine::Engine,
        &mut Store,
    ) -> Result<T, NifError>,
) -> Result<T, NifError> {
    let mut guard = handle.lock()?;
    let st = &mut *guard;
    let mut engine = st.graph.write()?;
    let wm = &mut st.wm;
    with_store(&st.store, |store| f(wm, &mut engine, store))
}

/// Opens working memory over `store` and `graph` (normally a fresh `graph_new` handle: the
/// stored core notes are put into it). `cfg`: a map `%{"embedder" => "model" | "hash",
/// "k_hops", "cap", "activation_budget", "seeds_per_query", "min_score", "embed_batch",
/// "expand_boundary"}`, all optional (embedder default: the graph's embedder when it has one,
/// else the loaded model). Notes lacking a current vector are embedded with progress
/// `{:soul_mem_embed_progress, done, total}` sent to `progress` and written to the store.
/// Returns `{working, index_report}` (`model`, `dim`, `notes`, `vectors`, `reused`,
/// `embedded`, `core_loaded`).
///
/// Complexity: O(active notes) store reads plus embedding the missing vectors.
#[rustler::nif(schedule = "DirtyCpu")]
fn working_open<'a>(
    env: Env<'a>,
    store: ResourceArc<StoreResource>,
    graph: Handle,
    cfg: Term<'a>,
    progress: LocalPid,
) -> Term<'a> {
    let result = (|| {
        let (cfg, requested) = decode_config(cfg)?;
        let mut engine = graph.write()?;
        let embedder = match requested {
            Requested::Hash => EmbedderChoice::Hash(HashEmbedder::new(384)?),
            Requested::Model => EmbedderChoice::Model(loaded_model()?),
            Requested::Graphs => match engine.embedder() {
                Some(e) => e.clone(),
                None => EmbedderChoice::Model(loaded_model()?),
            },
        };
        let report = |done: usize, total: usize| {
            // A dead receiver is not an error: the index is still built.
            let _ = env.send(
                &progress,
                (atoms::soul_mem_embed_progress(), done, total).encode(env),
            );
        };
        let (wm, index_report) = with_store(&store, |s| {
            Ok(WorkingMemory::open(&mut engine, s, embedder, cfg, &report)?)
        })?;
        drop(engine);
        let handle = ResourceArc::new(WorkingResource {
            state: Mutex::new(WorkingState { wm, store, graph }),
        });
        Ok((handle, term::encode(env, &index_report)?))
    })();
    ok_or_error(env, result)
}

/// The embedder a working-memory config asks for.
enum Requested {
    /// The graph's own (else the loaded model).
    Graphs,
    Hash,
    Model,
}

/// Decodes and checks a working-memory config map (see [`working_open`]): everything
/// [`WorkingConfig::validate`] rejects, unknown keys and a bad `"embedder"` are errors.
fn decode_config(cfg: Term<'_>) -> Result<(WorkingConfig, Requested), NifError> {
    let mut value: Value = match term::given(Some(cfg)) {
        Some(t) => term::value("working config", t)?,
        None => json!({}),
    };
    let requested = match value.as_object_mut() {
        Some(obj) => obj.remove("embedder"),
        None => return Err(Error::InvalidJson("working config: expected an object".into()).into()),
    };
    let requested = match requested {
        None => Requested::Graphs,
        Some(v) => match v.as_str() {
            Some("hash") => Requested::Hash,
            Some("model") => Requested::Model,
            // The value as the caller wrote it (JSON), not Rust's debug form.
            _ => {
                return Err(Error::invalid_argument(
                    "embedder",
                    format!("must be \"model\" or \"hash\", got {v}"),
                )
                .into())
            }
        },
    };
    let cfg: WorkingConfig = term::from_value("working config", value)?;
    cfg.validate()?;
    Ok((cfg, requested))
}

/// Checks a working-memory config (as [`working_open`] takes it) without opening anything:
/// `{:ok, :ok}` or `{:error, reason}`, so a character refuses bad options when it is started
/// rather than when it loads. Decoding only (no lock, microseconds): a normal scheduler.
#[rustler::nif]
fn working_check<'a>(env: Env<'a>, cfg: Term<'a>) -> Term<'a> {
    ok_or_error(env, decode_config(cfg).map(|_| rustler::types::atom::ok()))
}

/// What to activate for: plain texts or seed sub-queries (their texts are used).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateRequest {
    #[serde(default)]
    texts: Vec<String>,
    #[serde(default)]
    queries: Vec<SubQuery>,
}

/// Activates working memory for `request` = `%{"texts" => [..]}` and/or `%{"queries" =>
/// [sub-query..]}` (every text of the sub-queries). Returns the activation report:
/// `seeds` (`[{id (UUID), readable_id, score}]`), `loaded`, `expanded`, `released`
/// (readable ids), `persisted`, `boundary`, `working_size`, `non_core` (counts),
/// `truncated`, `rerun`.
///
/// Complexity: embedding the texts, O(texts × index) seeding, the k-hop store reads, and a
/// release transaction when over the cap.
#[rustler::nif(schedule = "DirtyCpu")]
fn working_activate<'a>(env: Env<'a>, working: WorkingHandle, request: Term<'a>) -> Term<'a> {
    let result = (|| {
        let req: ActivateRequest = term::decode("activate request", request)?;
        let mut texts: Vec<String> = req.texts;
        for q in &req.queries {
            for t in soul_mem_core::retrieval::QueryTexts::of(q).texts() {
                if !texts.iter().any(|x| x == t) {
                    texts.push(t.to_owned());
                }
            }
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        with_all(&working, |wm, engine, store| {
            term::encode(env, &wm.activate_texts(engine, store, &refs)?)
        })
    })();
    ok_or_error(env, result)
}

/// Activation-mode recall: bring the neighbourhood of the queries' seeds in from the store,
/// recall over the working graph, expand boundary notes the result reached and recall again
/// (same call). The request and outcome are `engine_recall`'s; returns `{outcome, report}`,
/// the report being `working_activate`'s (a map with string keys) but for `boundary`, `nil`
/// here: `working_settle`'s report counts it after the answer. What it loaded stays over the
/// cap until `working_settle` (or the next recall) releases it.
#[rustler::nif(schedule = "DirtyCpu")]
fn working_recall<'a>(
    env: Env<'a>,
    working: WorkingHandle,
    request: RecallRequest<'a>,
) -> Term<'a> {
    let result = (|| {
        let forgetting = term::given(request.forgetting)
            .map(decode_forgetting)
            .transpose()?;
        let graph = working.lock()?.graph.clone();
        let mut report = None;
        let outcome = with_all(&working, |wm, engine, store| {
            run_exclusive(
                &graph,
                engine,
                &request,
                forgetting,
                |engine, recall, config| {
                    let (result, r) = wm.recall_at(
                        engine,
                        store,
                        &recall.queries,
                        config,
                        recall.short.clone(),
                        recall.now,
                    )?;
                    report = Some(r);
                    Ok(result)
                },
            )
        })?;
        let report = term::encode(env, &report)?;
        Ok((outcome, report))
    })();
    ok_or_error(env, result)
}

/// What follows a recall, once its answer is out: releases the notes over the cap (changed
/// ones written first; `WorkingMemory::settle`). Returns the report (a map with string keys,
/// as `working_activate`'s). A failed write releases nothing.
///
/// Complexity: O(working notes) plus the rows written.
#[rustler::nif(schedule = "DirtyIo")]
fn working_settle<'a>(env: Env<'a>, working: WorkingHandle) -> Term<'a> {
    let result = with_all(&working, |wm, engine, store| {
        let report = wm.settle(engine, store)?;
        term::encode(env, &report)
    });
    ok_or_error(env, result)
}

/// Partial checkpoint: the forgetting states and every note of the working graph (with all
/// their links) plus `extra` (`%{"summary", "pop_to", "archive" => [ids], "delete" => [ids]}`,
/// as `store_checkpoint` plus `delete`) in ONE transaction; unloaded stored notes are never
/// deleted. Archived and deleted notes leave the working graph and the long-term index.
/// Returns `%{notes, embedded, dropped}`.
///
/// Complexity: O(working notes + links) rows written.
#[rustler::nif(schedule = "DirtyIo")]
fn working_checkpoint<'a>(env: Env<'a>, working: WorkingHandle, extra: Term<'a>) -> Term<'a> {
    let result = (|| {
        let mut extra = CheckpointExtra::decode(extra)?;
        with_all(&working, |wm, engine, store| {
            let mut changes = Vec::new();
            for id in &extra.archive {
                let uuid = match engine.graph().resolve(id) {
                    Some(u) => u,
                    None => resolve_stored(store, id)?,
                };
                changes.push(Change::ArchiveNote(uuid));
            }
            for id in &extra.delete {
                let uuid = match engine.graph().resolve(id) {
                    Some(u) => u,
                    None => resolve_stored(store, id)?,
                };
                changes.push(Change::DeleteNote(uuid));
            }
            changes.extend(extra.closing_changes());
            term::encode(env, &wm.checkpoint(engine, store, &changes)?)
        })
    })();
    ok_or_error(env, result)
}

/// Deletes a note through working memory (`note_delete` with a working handle): from the
/// working graph, the store and the long-term index.
pub(crate) fn delete_working_note(
    working: &WorkingHandle,
    id: &str,
) -> Result<soul_mem_core::note_delete::DeleteReport, NifError> {
    with_all(working, |wm, engine, store| {
        Ok(engine.delete_note(Some(store), Some(wm), id)?)
    })
}

/// State of the working memory: `{model, dim, vectors, working_size, non_core, boundary,
/// config}` (string keys). No store I/O. Dirty: the locks it takes are held by dirty working NIFs.
#[rustler::nif(schedule = "DirtyCpu")]
fn working_info<'a>(env: Env<'a>, working: WorkingHandle) -> Term<'a> {
    let result = (|| {
        let guard = working.lock()?;
        let engine = guard.graph.read()?;
        let g = engine.graph();
        let info = json!({
            "model": guard.wm.model(),
            "dim": guard.wm.dim(),
            "vectors": guard.wm.index_len(),
            "working_size": g.len(),
            "non_core": g.notes().filter(|n| !n.core).count(),
            "boundary": guard.wm.boundary(&engine).len(),
            "config": guard.wm.config(),
        });
        term::encode(env, &info)
    })();
    ok_or_error(env, result)
}
