//! Consolidation NIFs: apply one change set under the engine's write lock (and re-index, so
//! the next recall finds the new notes), list the most active notes for the extraction prompt,
//! and find Semantic notes that share a name. Structured data crosses as JSON binaries.

use crate::error::{ok_or_error, parse_json, NifError};
use crate::graph::Handle;
use rustler::{Binary, Env, Term};
use soul_mem_core::consolidate::{self, ChangeSet, ConsolidateConfig};
use soul_mem_core::engine::EmbedderChoice;
use soul_mem_core::retrieval::TextEmbedder;
use soul_mem_core::Error;
use std::collections::BTreeMap;

fn config(json: &str) -> Result<ConsolidateConfig, NifError> {
    let cfg: ConsolidateConfig = parse_json("config", json)?;
    cfg.validate()?;
    Ok(cfg)
}

/// The effective consolidation parameters for `overrides` (a map, string keys; `nil` for
/// none): the core's defaults with them on top, validated, as a map with string keys. The
/// limits consolidation enforces are defined once, in the core; callers that check a change
/// set early (the extraction prompt's validation) read them from here.
#[rustler::nif]
fn consolidate_config<'a>(env: Env<'a>, overrides: Term<'a>) -> Term<'a> {
    let result = (|| {
        let cfg: ConsolidateConfig = match crate::term::given(Some(overrides)) {
            Some(term) => crate::term::decode("config", term)?,
            None => ConsolidateConfig::default(),
        };
        cfg.validate()?;
        crate::term::encode(env, &cfg)
    })();
    ok_or_error(env, result)
}

fn as_dyn(choice: &EmbedderChoice) -> &dyn TextEmbedder {
    match choice {
        EmbedderChoice::Model(m) => m.as_ref(),
        EmbedderChoice::Hash(h) => h,
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, NifError> {
    serde_json::to_value(value).map_err(|e| NifError::from(Error::InvalidJson(e.to_string())))
}

/// Applies a change set (JSON, see `soul_mem_core::consolidate::ChangeSet`) with `config`
/// (JSON object, `{}` for defaults), all or nothing, embedding with the engine's embedder
/// when it has one. Returns the report as JSON plus `"indexed"`: whether the retrieval index
/// was rebuilt (otherwise the next recall rebuilds it).
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_consolidate<'a>(
    env: Env<'a>,
    handle: Handle,
    changes: Binary,
    config_json: String,
) -> Term<'a> {
    let result = (|| {
        let cfg = config(&config_json)?;
        let changes = ChangeSet::from_json(changes.as_slice(), &cfg)?;
        let mut engine = handle.write()?;
        let choice = engine.embedder().cloned();
        let report = consolidate::consolidate(
            engine.graph_mut(),
            &changes,
            &cfg,
            choice.as_ref().map(as_dyn),
        )?;
        // The graph has changed for good; an index failure must not report it unchanged.
        let indexed = match choice {
            Some(c) => engine.embed_all(c, &|_, _| {}).is_ok(),
            None => false,
        };
        let mut value = to_json(&report)?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("indexed".into(), indexed.into());
        }
        Ok(value.to_string())
    })();
    ok_or_error(env, result)
}

/// The most frequently retrieved notes (f = n / T) among `records` (JSON object: note id →
/// RFC 3339 timestamps), at most `top_k`, as a JSON array of
/// `{readable_id, kind, text, retrievals, frequency}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_consolidate_candidates<'a>(
    env: Env<'a>,
    handle: Handle,
    records_json: String,
    config_json: String,
) -> Term<'a> {
    let result = (|| {
        let cfg = config(&config_json)?;
        let records: BTreeMap<String, Vec<chrono::DateTime<chrono::Utc>>> =
            parse_json("records", &records_json)?;
        let engine = handle.read()?;
        let mut active = consolidate::activity(engine.graph(), &records, cfg.min_span_hours);
        active.truncate(cfg.top_k);
        Ok(to_json(&active)?.to_string())
    })();
    ok_or_error(env, result)
}

/// Groups of Semantic notes sharing a normalised content or alias (readable ids), as JSON.
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_duplicate_semantics<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    let result = handle.read().and_then(|engine| {
        Ok(to_json(&consolidate::duplicate_semantic_groups(engine.graph()))?.to_string())
    });
    ok_or_error(env, result)
}
