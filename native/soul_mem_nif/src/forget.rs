//! Forgetting NIFs over a graph handle: the forgetting view of recalled notes, storing an LLM
//! revision (the cache by band), the LLM-free idle sweep, the engine's forgetting states, and
//! masking plain text. Results are maps with string keys (`term.rs`), never JSON text.
//!
//! `config` arguments are a ForgetConfig map (unknown keys rejected; `%{}` = the seed's
//! defaults) or `nil` for the parameters the character forgets with (`engine_configure`).

use crate::error::{ok_or_error, NifError};
use crate::graph::Handle;
use crate::term;
use chrono::{DateTime, Utc};
use rustler::{Env, Term};
use serde_json::{json, Value};
use soul_mem_core::engine::Engine;
use soul_mem_core::forget::{self, ForgetConfig};
use soul_mem_core::model::MemoryId;
use soul_mem_core::store::ForgetState;
use soul_mem_core::Error;

/// A Unix-ms timestamp argument named `name`, or an `invalid_argument` error.
pub(crate) fn at(ms: i64, name: &str) -> Result<DateTime<Utc>, NifError> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| {
        NifError::from(Error::invalid_argument(
            name,
            format!("timestamp {ms} ms out of range"),
        ))
    })
}

fn effective_config(engine: &Engine, config: Option<Term<'_>>) -> Result<ForgetConfig, NifError> {
    match term::given(config) {
        Some(t) => {
            let cfg: ForgetConfig = term::decode("config", t)?;
            cfg.validate()?;
            Ok(cfg)
        }
        None => Ok(engine.forget_config().clone()),
    }
}

fn resolve(engine: &Engine, id: &str) -> Result<MemoryId, NifError> {
    engine
        .graph()
        .resolve(id)
        .ok_or_else(|| NifError::from(Error::NotFound(format!("note {id:?}"))))
}

fn state_json(engine: &Engine, id: &MemoryId, s: &ForgetState) -> Value {
    json!({
        "id": engine.graph().readable_of(id),
        "missing_degree": s.missing_degree,
        "band": s.band,
        "revised_text": s.revised_text,
        "original_text": s.original_text,
        "updated_at": s.updated_at.to_rfc3339(),
    })
}

/// The forgetting view of each note of `ids` (readable ids or UUIDs) at `now_ms`: a JSON
/// array of `{id, uuid, kind, forgettable, missing_degree, band, action, visible_text,
/// masked_text, original_text, cached_revision, needs_revision, prompt}` (see
/// `soul_mem_core::forget::NoteView`). Read-only; an unknown id is a `:not_found` error.
#[rustler::nif(schedule = "DirtyCpu")]
fn forget_view<'a>(
    env: Env<'a>,
    handle: Handle,
    ids: Vec<String>,
    now_ms: i64,
    config: Option<Term<'a>>,
) -> Term<'a> {
    let result = (|| {
        let now = at(now_ms, "now")?;
        let engine = handle.read()?;
        let cfg = effective_config(&engine, config)?;
        let ids = ids
            .iter()
            .map(|id| resolve(&engine, id))
            .collect::<Result<Vec<_>, _>>()?;
        let views = engine.forget_view(&ids, now, &cfg)?;
        term::encode(env, &views)
    })();
    ok_or_error(env, result)
}

/// The typed forgetting views (as in a recall's items) of the notes `ids` at `now_ms`, with
/// the character's forgetting parameters: what a recall shows once revisions have landed.
#[rustler::nif(schedule = "DirtyCpu")]
fn forget_recall_views<'a>(
    env: Env<'a>,
    handle: Handle,
    ids: Vec<String>,
    now_ms: i64,
) -> Term<'a> {
    let result = (|| {
        let now = at(now_ms, "now")?;
        let engine = handle.read()?;
        let ids = ids
            .iter()
            .map(|id| resolve(&engine, id))
            .collect::<Result<Vec<_>, _>>()?;
        let views = engine.forget_view(&ids, now, engine.forget_config())?;
        Ok(views
            .into_iter()
            .map(crate::recall::forget_view)
            .collect::<Vec<_>>())
    })();
    ok_or_error(env, result)
}

/// Merges the LLM `answer` to a note's revision prompt at `now_ms` and caches it for the
/// current band (semantic notes: fields aligned in the graph). Returns JSON `{id, band,
/// missing_degree, revised_text, visible_text, note_changed, aligned}`; errors, changing
/// nothing, when the note is unknown, not due for revision, or the answer holds no revision.
#[rustler::nif(schedule = "DirtyCpu")]
fn forget_store_revision<'a>(
    env: Env<'a>,
    handle: Handle,
    id: String,
    answer: String,
    now_ms: i64,
    config: Option<Term<'a>>,
) -> Term<'a> {
    let result = (|| {
        let now = at(now_ms, "now")?;
        let mut engine = handle.write()?;
        let cfg = effective_config(&engine, config)?;
        let mid = resolve(&engine, &id)?;
        let stored = engine.forget_store_revision(&mid, &answer, now, &cfg)?;
        let aligned = stored.revision.aligned.as_ref().map(|a| {
            json!({
                "aliases": a.aliases,
                "description": a.description,
                "concept_type": a.concept_type,
            })
        });
        Ok(json!({
            "id": engine.graph().readable_of(&mid),
            "band": stored.state.band,
            "missing_degree": stored.state.missing_degree,
            "revised_text": stored.revision.revised_text,
            "visible_text": stored.revision.view,
            "note_changed": stored.note_changed,
            "aligned": aligned,
        }))
        .and_then(|v| term::encode(env, &v))
    })();
    ok_or_error(env, result)
}

/// The idle sweep at `now_ms`, no LLM: prunes links whose decayed intensity fell below the
/// threshold, refreshes the forgetting states, lists archive candidates (left in the graph:
/// the caller archives them in the store). Returns the report as JSON: `{notes, actions:
/// {NoAction, MaskOnly, Revised}, mean_missing_degree, pruned: [{from, to, link_id,
/// intensity, decayed_intensity}], archive: [readable id], states_updated}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn forget_sweep<'a>(
    env: Env<'a>,
    handle: Handle,
    now_ms: i64,
    config: Option<Term<'a>>,
) -> Term<'a> {
    let result = (|| {
        let now = at(now_ms, "now")?;
        let mut engine = handle.write()?;
        let cfg = effective_config(&engine, config)?;
        let report = engine.forget_sweep(now, &cfg)?;
        let g = engine.graph();
        let pruned: Vec<Value> = report
            .pruned
            .iter()
            .map(|p| {
                json!({
                    "from": g.readable_of(&p.from),
                    "to": g.readable_of(&p.to),
                    "link_id": p.link_id.to_string(),
                    "intensity": p.intensity,
                    "decayed_intensity": p.decayed_intensity,
                })
            })
            .collect();
        Ok(json!({
            "notes": report.notes,
            "actions": {
                "NoAction": report.actions[0],
                "MaskOnly": report.actions[1],
                "Revised": report.actions[2],
            },
            "mean_missing_degree": report.mean_missing_degree,
            "pruned": pruned,
            "archive": report.archive.iter().map(|id| g.readable_of(id)).collect::<Vec<_>>(),
            "states_updated": report.states_updated,
        }))
        .and_then(|v| term::encode(env, &v))
    })();
    ok_or_error(env, result)
}

/// The forgetting state of one note (`nil` when it has none). Dirty: the read lock
/// may wait for a dirty writer.
#[rustler::nif(schedule = "DirtyCpu")]
fn forget_state<'a>(env: Env<'a>, handle: Handle, id: String) -> Term<'a> {
    let result = (|| {
        let engine = handle.read()?;
        let mid = resolve(&engine, &id)?;
        let state = engine
            .forget_state(&mid)
            .map_or(Value::Null, |s| state_json(&engine, &mid, s));
        term::encode(env, &state)
    })();
    ok_or_error(env, result)
}

/// Every forgetting state, sorted by readable id (operators, audit).
#[rustler::nif(schedule = "DirtyCpu")]
fn forget_states<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    let result = (|| {
        let engine = handle.read()?;
        let mut states: Vec<Value> = engine
            .forget_states()
            .map(|(id, s)| state_json(&engine, id, s))
            .collect();
        states.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        term::encode(env, &states)
    })();
    ok_or_error(env, result)
}

/// Masks plain `text` to `missing_degree` (jieba, monotone): `{:ok, {masked_text, masked,
/// total}}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn forget_mask_text<'a>(env: Env<'a>, text: String, missing_degree: f64) -> Term<'a> {
    let result = forget::mask_text(&text, missing_degree)
        .map(|m| {
            let masked = m.masked();
            (m.text, masked, m.total)
        })
        .map_err(NifError::from);
    ok_or_error(env, result)
}
