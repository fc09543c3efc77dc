//! Store NIFs: one SQLite file per character (`soul_mem_core::store`), behind its own resource.
//! Every call does file I/O and runs on a dirty I/O scheduler. Notes cross the boundary by
//! readable id; the store keeps UUIDs, so calls that name notes take the graph handle to
//! resolve them. Structured results are JSON binaries (decoded by `SoulMem.JSON`).

use crate::error::{ok_or_error, NifError};
use crate::graph::{GraphResource, Handle};
use chrono::{DateTime, Utc};
use rustler::{Binary, Env, ResourceArc, Term};
use serde::Deserialize;
use serde_json::{json, Value};
use soul_mem_core::engine::Engine;
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import;
use soul_mem_core::model::MemoryId;
use soul_mem_core::store::{Change, Message, Store, StoreOptions, StorePeek, META_GRAPH_SAVED};
use soul_mem_core::Error;
use std::sync::{Mutex, MutexGuard};

/// Largest note accepted by `note_put` (a note is a paragraph, not a book).
const MAX_NOTE_BYTES: u64 = 256 * 1024;

/// An open store. `None` once closed: the file lock is released, later calls fail cleanly.
pub struct StoreResource {
    store: Mutex<Option<Store>>,
}

#[rustler::resource_impl]
impl rustler::Resource for StoreResource {}

pub(crate) type StoreHandle = ResourceArc<StoreResource>;

impl StoreResource {
    fn lock(&self) -> Result<MutexGuard<'_, Option<Store>>, NifError> {
        self.store.lock().map_err(|_| NifError::Poisoned)
    }
}

/// Runs `f` on the open store, or fails with `closed`.
pub(crate) fn with_store<T>(
    handle: &StoreHandle,
    f: impl FnOnce(&mut Store) -> Result<T, NifError>,
) -> Result<T, NifError> {
    let mut guard = handle.lock()?;
    match guard.as_mut() {
        Some(store) => f(store),
        None => Err(Error::invalid_argument("store", "the store was closed").into()),
    }
}

fn time(ms: i64) -> Result<DateTime<Utc>, NifError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| Error::invalid_argument("at", format!("{ms} ms is out of range")).into())
}

/// The UUID of a note named by readable id or UUID text, looked up in the graph.
fn resolve(graph: &MemoryGraph, id: &str) -> Result<MemoryId, NifError> {
    graph
        .resolve(id)
        .ok_or_else(|| Error::NotFound(format!("note {id:?}")).into())
}

/// The readable id of a stored UUID: from the graph, else the store (archived notes), else
/// the UUID text (a note deleted since).
fn readable(graph: &MemoryGraph, store: &Store, id: &MemoryId) -> String {
    if let Some(n) = graph.get(id) {
        return n.readable_id.clone();
    }
    match store.note(id) {
        Ok(Some(n)) => n.readable_id,
        _ => id.to_string(),
    }
}

/// Opens (creating if needed) the store of `character` under `data_dir`. `max_pages` > 0 caps
/// the file (a quota: writes past it fail with `disk_full`). Errors keep the store's kinds:
/// `corrupt`, `incompatible`, `in_use`, `read_only`, `disk_full`, `io`.
#[rustler::nif(schedule = "DirtyIo")]
fn store_open<'a>(env: Env<'a>, data_dir: String, character: String, max_pages: u64) -> Term<'a> {
    let opts = StoreOptions {
        max_pages: (max_pages > 0).then_some(max_pages),
        ..StoreOptions::default()
    };
    let result = Store::open_with(Store::path_for(&data_dir, &character), &character, &opts)
        .map(|store| {
            ResourceArc::new(StoreResource {
                store: Mutex::new(Some(store)),
            })
        })
        .map_err(NifError::from);
    ok_or_error(env, result)
}

/// The file path `store_open` uses for `character` under `data_dir` (no I/O).
#[rustler::nif]
fn store_path(data_dir: String, character: String) -> String {
    Store::path_for(&data_dir, &character).display().to_string()
}

/// Removes the saved long-term index (HNSW graph) kept beside the store file at `path` by
/// working memory for large characters (missing files are fine). `:ok` or `{:error, reason}`.
#[rustler::nif(schedule = "DirtyIo")]
fn store_remove_saved_index<'a>(env: Env<'a>, path: String) -> Term<'a> {
    match soul_mem_core::working::remove_saved_index(std::path::Path::new(&path)) {
        Ok(()) => rustler::Encoder::encode(&rustler::types::atom::ok(), env),
        Err(e) => NifError::from(e).encode(env),
    }
}

/// Closes the store and releases its lock; closing twice is fine.
#[rustler::nif(schedule = "DirtyIo")]
fn store_close<'a>(env: Env<'a>, handle: StoreHandle) -> Term<'a> {
    let result = handle.lock().map(|mut guard| {
        guard.take();
        "closed"
    });
    ok_or_error(env, result)
}

/// Everything a restarting character needs: `{graph_or_nil, state}`. The graph is `nil`
/// while no checkpoint has saved one; with `load_graph` false it is an empty graph (working
/// memory activates notes later). The state (string keys) holds `window` (`seq`, `role`, `text`,
/// `at_ms`, `tagged`), `summary`, `records` (`[id, at_ms]`) and `feedback`
/// (`[id, value, at_ms]`), with readable note ids.
///
/// Complexity: O(notes + links + window + records + feedback).
#[rustler::nif(schedule = "DirtyIo")]
fn store_load<'a>(env: Env<'a>, handle: StoreHandle, load_graph: bool) -> Term<'a> {
    let result = with_store(&handle, |store| {
        let saved = store.meta(META_GRAPH_SAVED)?.is_some();
        // Activation mode (`load_graph` false) reads no notes: working memory loads them.
        let graph = if saved && load_graph {
            store.load_graph()?
        } else {
            MemoryGraph::new(store.character())
        };
        // Forgetting states (the revision cache by band) of notes in the graph; states of
        // archived notes stay on disk.
        let mut engine = Engine::new(graph);
        for (id, state) in store.forget_states()? {
            if engine.graph().get(&id).is_some() {
                engine.set_forget_state(id, state)?;
            }
        }
        let graph = engine.graph();
        let window: Vec<Value> = store
            .window()?
            .into_iter()
            .map(|(seq, m)| {
                json!({"seq": seq, "role": m.role, "text": m.text,
                       "at_ms": m.at.timestamp_millis(), "tagged": m.tagged})
            })
            .collect();
        let records: Vec<Value> = store
            .records_since(DateTime::<Utc>::MIN_UTC)?
            .iter()
            .map(|(id, at)| json!([readable(graph, store, id), at.timestamp_millis()]))
            .collect();
        let feedback: Vec<Value> = store
            .feedback()?
            .iter()
            .map(|(id, v, at)| json!([readable(graph, store, id), v, at.timestamp_millis()]))
            .collect();
        let state = json!({
            "window": window,
            "summary": store.summary()?,
            "records": records,
            "feedback": feedback,
        });
        Ok((saved.then(|| GraphResource::from_engine(engine)), state))
    })
    .and_then(|(graph, state)| Ok((graph, crate::term::encode(env, &state)?)));
    ok_or_error(env, result)
}

/// Extra writes of a checkpoint (`store_checkpoint`, `working_checkpoint`), all optional.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointExtra {
    /// New running summary.
    pub summary: Option<String>,
    /// Drop window messages up to this sequence number.
    pub pop_to: Option<i64>,
    /// Readable ids (or UUIDs) of notes to archive: kept in the store, out of the graph.
    #[serde(default)]
    pub archive: Vec<String>,
    /// Notes to delete for good (e.g. merged away by consolidation). A whole-graph checkpoint
    /// deletes what the graph no longer holds anyway; a working-memory one needs the list.
    #[serde(default)]
    pub delete: Vec<String>,
}

impl CheckpointExtra {
    /// Decodes the options (a map with string keys); `nil` means none.
    pub fn decode(term: Term<'_>) -> Result<Self, NifError> {
        match crate::term::given(Some(term)) {
            Some(t) => crate::term::decode("checkpoint options", t),
            None => Ok(Self::default()),
        }
    }

    /// The writes that close every checkpoint: summary, popped messages, "graph saved".
    pub fn closing_changes(&mut self) -> Vec<Change> {
        let mut changes = Vec::new();
        if let Some(s) = self.summary.take() {
            changes.push(Change::SetSummary(s));
        }
        if let Some(seq) = self.pop_to.take() {
            changes.push(Change::PopMessages(seq));
        }
        changes.push(Change::SetMeta(META_GRAPH_SAVED.into(), "1".into()));
        changes
    }
}

/// Writes the graph plus `extra` (see [`CheckpointExtra`]) and the graph's forgetting
/// states in ONE transaction. Notes to archive are resolved first (graph, then store; an
/// unknown one fails the whole checkpoint and nothing is written) and leave the graph.
/// A graph loaded from or last checkpointed to this handle writes only the notes changed
/// since ([`Store::checkpoint`]); `store_info` reports what the last checkpoint did.
///
/// Complexity: O(changed notes + their links + forgetting states) rows written when
/// incremental, O(notes + links) when full.
#[rustler::nif(schedule = "DirtyIo")]
fn store_checkpoint<'a>(
    env: Env<'a>,
    handle: StoreHandle,
    graph: Handle,
    extra: Term<'a>,
) -> Term<'a> {
    let result = (|| {
        let mut extra = CheckpointExtra::decode(extra)?;
        // Archived (and deleted) notes leave working memory: take them out of the graph first (so the
        // save does not write them back as active) and put them back if the write fails.
        let mut engine = graph.write()?;
        let mut archive = Vec::with_capacity(extra.archive.len());
        let mut removed = Vec::new();
        for id in &extra.archive {
            match engine.graph().resolve(id) {
                Some(uuid) => {
                    archive.push(uuid);
                    removed.extend(engine.graph_mut().remove(&uuid));
                }
                None => archive.push(with_store(&handle, |s| resolve_stored(s, id))?),
            }
        }
        let mut deleted = Vec::with_capacity(extra.delete.len());
        for id in &extra.delete {
            match engine.graph().resolve(id) {
                Some(uuid) => {
                    deleted.push(uuid);
                    engine.graph_mut().remove(&uuid);
                }
                None => deleted.push(with_store(&handle, |s| resolve_stored(s, id))?),
            }
        }
        let saved = with_store(&handle, |store| {
            // All forgetting states of the graph: few (only recalled, forgettable notes have
            // one) and upserts, so writing them all keeps the checkpoint simple and whole.
            let mut changes: Vec<Change> = engine
                .forget_states()
                .map(|(id, st)| Change::SetForgetState(*id, st.clone()))
                .collect();
            // The graph's version of a released note is the newest (it may never have been
            // saved): write it, then archive it.
            changes.extend(removed.iter().map(|n| Change::PutNote(n.clone())));
            changes.extend(archive.iter().map(|id| Change::ArchiveNote(*id)));
            changes.extend(deleted.iter().map(|id| Change::DeleteNote(*id)));
            changes.extend(extra.closing_changes());
            engine.checkpoint(store, &changes)?;
            Ok("saved")
        });
        if saved.is_err() {
            // Links into these notes were dropped by `remove`; archive candidates have none.
            for note in removed {
                let _ = engine.graph_mut().insert(note);
            }
        }
        saved
    })();
    ok_or_error(env, result)
}

/// A note that is only in the store (archived or released): by UUID text or readable id.
pub(crate) fn resolve_stored(store: &Store, id: &str) -> Result<MemoryId, NifError> {
    let candidate = uuid::Uuid::parse_str(id)
        .map(MemoryId)
        .unwrap_or_else(|_| MemoryId::derive(store.character(), id));
    match store.note(&candidate)? {
        Some(n) => Ok(n.id),
        None => Err(Error::NotFound(format!("note {id:?}")).into()),
    }
}

/// Appends window messages `[{role, text, at_ms, tagged}]` in one transaction (all or none);
/// returns their sequence numbers. Durable when this returns.
#[rustler::nif(schedule = "DirtyIo")]
fn store_append_messages<'a>(
    env: Env<'a>,
    handle: StoreHandle,
    messages: Vec<(String, String, i64, bool)>,
) -> Term<'a> {
    let result = (|| {
        let messages = messages
            .into_iter()
            .map(|(role, text, at_ms, tagged)| {
                Ok(Message {
                    role,
                    text,
                    at: time(at_ms)?,
                    tagged,
                })
            })
            .collect::<Result<Vec<_>, NifError>>()?;
        with_store(&handle, |store| Ok(store.append_messages(&messages)?))
    })();
    ok_or_error(env, result)
}

/// Sets the summary (when given) and drops window messages up to `pop_to` (when >= 0), in
/// one transaction.
#[rustler::nif(schedule = "DirtyIo")]
fn store_window_update<'a>(
    env: Env<'a>,
    handle: StoreHandle,
    summary: Option<String>,
    pop_to: i64,
) -> Term<'a> {
    let result = with_store(&handle, |store| {
        let mut changes = Vec::new();
        if let Some(s) = summary {
            changes.push(Change::SetSummary(s));
        }
        if pop_to >= 0 {
            changes.push(Change::PopMessages(pop_to));
        }
        store.apply(&changes)?;
        Ok("saved")
    });
    ok_or_error(env, result)
}

/// Drops the window messages with `seq >= from_seq` (a turn taken back to be edited or
/// regenerated); returns how many. Durable when this returns.
#[rustler::nif(schedule = "DirtyIo")]
fn store_retract_messages<'a>(env: Env<'a>, handle: StoreHandle, from_seq: i64) -> Term<'a> {
    let result = with_store(&handle, |store| Ok(store.retract_messages(from_seq)?));
    ok_or_error(env, result)
}

/// Appends feedback (`+1` / `-1`) on a note of the graph. Durable when this returns.
#[rustler::nif(schedule = "DirtyIo")]
fn store_append_feedback<'a>(
    env: Env<'a>,
    handle: StoreHandle,
    graph: Handle,
    note_id: String,
    value: i64,
    at_ms: i64,
) -> Term<'a> {
    let result = (|| {
        let value = i8::try_from(value)
            .ok()
            .filter(|v| *v == 1 || *v == -1)
            .ok_or_else(|| {
                Error::invalid_argument("value", format!("must be 1 or -1, got {value}"))
            })?;
        let at = time(at_ms)?;
        let id = resolve(graph.read()?.graph(), &note_id)?;
        with_store(&handle, |store| Ok(store.append_feedback(&id, value, at)?)).map(|()| "saved")
    })();
    ok_or_error(env, result)
}

/// Appends retrieval records (`ids` recalled at `at_ms`); ids not in the graph are skipped.
#[rustler::nif(schedule = "DirtyIo")]
fn store_append_records<'a>(
    env: Env<'a>,
    handle: StoreHandle,
    graph: Handle,
    ids: Vec<String>,
    at_ms: i64,
) -> Term<'a> {
    let result = (|| {
        let at = time(at_ms)?;
        let records: Vec<(MemoryId, DateTime<Utc>)> = {
            let engine = graph.read()?;
            ids.iter()
                .filter_map(|id| engine.graph().resolve(id))
                .map(|id| (id, at))
                .collect()
        };
        with_store(&handle, |store| {
            store.append_records(&records)?;
            Ok(records.len())
        })
    })();
    ok_or_error(env, result)
}

/// The whole character (notes incl. archived, window, summary, records, feedback, forgetting
/// state, embeddings) as one JSON document.
#[rustler::nif(schedule = "DirtyIo")]
fn store_export<'a>(env: Env<'a>, handle: StoreHandle) -> Term<'a> {
    let result = with_store(&handle, |store| Ok(store.export_character()?.to_string()));
    ok_or_error(env, result)
}

/// Replaces the store content with an export document of the same character, in one
/// transaction; a bad document changes nothing.
#[rustler::nif(schedule = "DirtyIo")]
fn store_import<'a>(env: Env<'a>, handle: StoreHandle, json: Binary) -> Term<'a> {
    let result = (|| {
        let value: Value = serde_json::from_slice(json.as_slice())
            .map_err(|e| Error::InvalidJson(format!("export document: {e}")))?;
        with_store(&handle, |store| {
            store.import_character(&value)?;
            // An export always carries the graph (an empty one included).
            store.set_meta(META_GRAPH_SAVED, "1")?;
            Ok("imported")
        })
    })();
    ok_or_error(env, result)
}

/// Active and archived notes, links and window messages stored, whether a graph was saved,
/// and what the last checkpoint through this handle wrote (`last_checkpoint`, null before).
#[rustler::nif(schedule = "DirtyIo")]
fn store_info<'a>(env: Env<'a>, handle: StoreHandle) -> Term<'a> {
    let result = with_store(&handle, |store| {
        let (notes, archived, links) = store.counts()?;
        let info = json!({
            "path": store.path().display().to_string(),
            "character": store.character(),
            "schema_version": store.schema_version()?,
            "notes": notes, "archived": archived, "links": links,
            "window": store.window()?.len(),
            "graph_saved": store.meta(META_GRAPH_SAVED)?.is_some(),
            // {mode, full_reason, notes_written, links_written, notes_deleted} or null.
            "last_checkpoint": store.last_checkpoint(),
        });
        Ok(info)
    })
    .and_then(|info| crate::term::encode(env, &info));
    ok_or_error(env, result)
}

/// Inserts or replaces one note (Graph JSON node object) in the graph, and first in the store
/// when one is given, so an acknowledged put is durable. Returns the note as stored (Graph
/// JSON). Bad input (shape, values, a link to a note the graph does not hold) changes nothing.
///
/// Complexity: O(note size + its out-degree).
#[rustler::nif(schedule = "DirtyIo")]
fn note_put<'a>(
    env: Env<'a>,
    graph: Handle,
    store: Option<StoreHandle>,
    note_json: Binary,
) -> Term<'a> {
    let result = (|| {
        let mut engine = graph.write()?;
        let note = import::parse_note(engine.graph(), note_json.as_slice(), MAX_NOTE_BYTES)?;
        let id = match &store {
            // Durable first; keeps the graph's sync with the store (incremental checkpoints).
            Some(store) => with_store(store, |s| Ok(s.upsert_note(engine.graph_mut(), note)?))?,
            None => {
                let note = engine.graph().prepare_upsert(note)?;
                let id = note.id;
                engine.graph_mut().upsert(note)?;
                id
            }
        };
        let graph = engine.graph();
        let stored = graph
            .get(&id)
            .ok_or_else(|| Error::NotFound(format!("note {id}")))?;
        crate::term::encode(env, &import::note_to_value(graph, stored)?)
    })();
    ok_or_error(env, result)
}

/// What `store_peek` reads from a store file (`soul_mem_core::store::StorePeek`).
#[derive(rustler::NifMap)]
struct PeekResult {
    character: String,
    name: Option<String>,
    notes: usize,
    archived: usize,
    links: usize,
    window: usize,
    /// RFC 3339.
    last_message_at: Option<String>,
    graph_saved: bool,
    epoch: u64,
}

impl From<StorePeek> for PeekResult {
    fn from(p: StorePeek) -> Self {
        PeekResult {
            character: p.character,
            name: p.name,
            notes: p.notes,
            archived: p.archived,
            links: p.links,
            window: p.window,
            last_message_at: p.last_message_at.map(|t| t.to_rfc3339()),
            graph_saved: p.graph_saved,
            epoch: p.epoch,
        }
    }
}

/// Who a store file belongs to and how big it is, read without its lock (listing stored
/// characters, running or not).
#[rustler::nif(schedule = "DirtyIo")]
fn store_peek(env: Env<'_>, path: String) -> Term<'_> {
    ok_or_error(
        env,
        Store::peek(&path)
            .map(PeekResult::from)
            .map_err(NifError::from),
    )
}
