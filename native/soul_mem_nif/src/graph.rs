//! Graph handle NIFs: import, stats, note lookup, export.

use crate::error::{ok_or_error, NifError};
use rustler::{Binary, Encoder, Env, ResourceArc, Term};
use soul_mem_core::engine::Engine;
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import::{self, ImportOptions};
use soul_mem_core::retrieval::PipelineConfig;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static LIVE_HANDLES: AtomicUsize = AtomicUsize::new(0);

/// A character's graph (and its retrieval index) behind a reference-counted Erlang resource.
pub struct GraphResource {
    engine: RwLock<Engine>,
    // The recall configuration a request without one uses (`engine_configure`). A lock of its
    // own, held only to clone or replace it, so reading it never waits for the engine.
    recall_defaults: RwLock<RecallDefaults>,
}

/// The pipeline configuration recalls use by default.
#[derive(Clone, Default)]
pub struct RecallDefaults {
    /// The configuration.
    pub config: PipelineConfig,
    /// Whether it sets `similarity.similarity_threshold` itself; if not, the character's
    /// embedder supplies its measured floor.
    pub floor_set: bool,
}

#[rustler::resource_impl]
impl rustler::Resource for GraphResource {}

impl GraphResource {
    /// Wraps a graph in a new handle.
    pub fn new(graph: MemoryGraph) -> ResourceArc<Self> {
        Self::from_engine(Engine::new(graph))
    }

    /// Wraps an engine (a graph with state restored from a store) in a new handle.
    pub fn from_engine(engine: Engine) -> ResourceArc<Self> {
        LIVE_HANDLES.fetch_add(1, Ordering::SeqCst);
        ResourceArc::new(GraphResource {
            engine: RwLock::new(engine),
            recall_defaults: RwLock::new(RecallDefaults::default()),
        })
    }

    /// Shared access; errors if an earlier panic poisoned the lock.
    pub fn read(&self) -> Result<RwLockReadGuard<'_, Engine>, NifError> {
        self.engine.read().map_err(|_| NifError::Poisoned)
    }

    /// Exclusive access; errors if an earlier panic poisoned the lock.
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, Engine>, NifError> {
        self.engine.write().map_err(|_| NifError::Poisoned)
    }

    /// The recall defaults (a copy).
    pub fn recall_defaults(&self) -> Result<RecallDefaults, NifError> {
        Ok(self
            .recall_defaults
            .read()
            .map_err(|_| NifError::Poisoned)?
            .clone())
    }

    /// Replaces the recall defaults.
    pub fn set_recall_defaults(&self, defaults: RecallDefaults) -> Result<(), NifError> {
        *self
            .recall_defaults
            .write()
            .map_err(|_| NifError::Poisoned)? = defaults;
        Ok(())
    }
}

impl Drop for GraphResource {
    fn drop(&mut self) {
        LIVE_HANDLES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The handle type every graph NIF takes.
pub type Handle = ResourceArc<GraphResource>;

fn options(complete: bool, max_bytes: u64) -> ImportOptions {
    ImportOptions {
        complete,
        max_bytes,
        ..ImportOptions::default()
    }
}

#[rustler::nif]
fn graph_new(character: String) -> Handle {
    GraphResource::new(MemoryGraph::new(character))
}

#[rustler::nif(schedule = "DirtyCpu")]
fn graph_import_json<'a>(
    env: Env<'a>,
    character: String,
    json: Binary,
    complete: bool,
    max_bytes: u64,
) -> Term<'a> {
    let result = import::import_bytes(&character, json.as_slice(), &options(complete, max_bytes))
        .map(GraphResource::new)
        .map_err(NifError::from);
    ok_or_error(env, result)
}

#[rustler::nif(schedule = "DirtyIo")]
fn graph_import_file<'a>(
    env: Env<'a>,
    character: String,
    path: String,
    complete: bool,
    max_bytes: u64,
) -> Term<'a> {
    let result = import::import_file(&character, &path, &options(complete, max_bytes))
        .map(GraphResource::new)
        .map_err(NifError::from);
    ok_or_error(env, result)
}

mod atoms {
    rustler::atoms! {
        character, nodes, links, pending_links, nodes_by_kind, links_by_kind, decay_cache_hits,
        decay_cache_misses,
    }
}

fn count_map<'a>(env: Env<'a>, counts: &std::collections::BTreeMap<&str, usize>) -> Term<'a> {
    let mut map = Term::map_new(env);
    for (k, v) in counts {
        let key = rustler::Atom::from_str(env, k)
            .map(|a| a.encode(env))
            .unwrap_or_else(|_| k.encode(env));
        map = map.map_put(key, v.encode(env)).unwrap_or(map);
    }
    map
}

/// Counts of the graph and the decay cache's hits and misses. Dirty: the read lock may wait
/// for a dirty writer.
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_stats<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    let engine = match handle.read() {
        Ok(g) => g,
        Err(e) => return e.encode(env),
    };
    let graph = engine.graph();
    let s = graph.stats();
    let (hits, misses) = engine.decay_cache_counters();
    let pairs: [(rustler::Atom, Term<'a>); 8] = [
        (atoms::character(), graph.character().encode(env)),
        (atoms::nodes(), s.nodes.encode(env)),
        (atoms::links(), s.links.encode(env)),
        (atoms::pending_links(), s.pending_links.encode(env)),
        (atoms::nodes_by_kind(), count_map(env, &s.nodes_by_kind)),
        (atoms::links_by_kind(), count_map(env, &s.links_by_kind)),
        (atoms::decay_cache_hits(), hits.encode(env)),
        (atoms::decay_cache_misses(), misses.encode(env)),
    ];
    let mut map = Term::map_new(env);
    for (k, v) in pairs {
        map = map.map_put(k.encode(env), v).unwrap_or(map);
    }
    map
}

/// Dirty: the read lock may wait for a dirty writer.
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_get_note<'a>(env: Env<'a>, handle: Handle, id: String) -> Term<'a> {
    let result = handle.read().and_then(|engine| {
        let graph = engine.graph();
        let note = graph
            .resolve(&id)
            .and_then(|m| graph.get(&m))
            .ok_or_else(|| soul_mem_core::Error::NotFound(format!("note {id:?}")))?;
        let value = import::note_to_value(graph, note)?;
        crate::term::encode(env, &value)
    });
    ok_or_error(env, result)
}

#[rustler::nif(schedule = "DirtyCpu")]
fn graph_export_json<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    let result = handle
        .read()
        .and_then(|engine| import::export_json(engine.graph(), false).map_err(NifError::from));
    ok_or_error(env, result)
}

#[rustler::nif]
fn live_graph_handles() -> usize {
    LIVE_HANDLES.load(Ordering::SeqCst)
}

/// Panics on purpose: the test suite checks that a panic inside a NIF raises in the caller
/// and leaves the VM running.
#[rustler::nif]
fn debug_panic(message: String) -> bool {
    panic!("debug_panic: {message}")
}

/// A note of a neighbourhood (see `soul_mem_core::neighbourhood`).
#[derive(rustler::NifMap)]
struct NeighbourNote {
    id: String,
    kind: String,
    content: String,
    core: bool,
    hops: usize,
}

/// A link of a neighbourhood.
#[derive(rustler::NifMap)]
struct NeighbourLink {
    from: String,
    to: String,
    kind: String,
    intensity: f64,
}

/// Notes and links of a neighbourhood.
#[derive(rustler::NifMap)]
struct Neighbourhood {
    notes: Vec<NeighbourNote>,
    links: Vec<NeighbourLink>,
}

/// The notes within `hops` links of `ids` (readable ids or UUIDs; unknown ones skipped), at
/// most `max_notes`, and the links among them: `%{notes: [%{id, kind, content, core, hops}],
/// links: [%{from, to, kind, intensity}]}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_neighbourhood<'a>(
    env: Env<'a>,
    handle: Handle,
    ids: Vec<String>,
    hops: usize,
    max_notes: usize,
) -> Term<'a> {
    let result = handle.read().map(|engine| {
        let graph = engine.graph();
        let start: Vec<_> = ids.iter().filter_map(|id| graph.resolve(id)).collect();
        let n = soul_mem_core::neighbourhood::neighbourhood(graph, &start, hops, max_notes);
        Neighbourhood {
            notes: n
                .notes
                .into_iter()
                .map(|x| NeighbourNote {
                    id: x.id,
                    kind: x.kind.to_owned(),
                    content: x.content,
                    core: x.core,
                    hops: x.hops,
                })
                .collect(),
            links: n
                .links
                .into_iter()
                .map(|l| NeighbourLink {
                    from: l.from,
                    to: l.to,
                    kind: l.kind.to_owned(),
                    intensity: l.intensity,
                })
                .collect(),
        }
    });
    ok_or_error(env, result)
}
