//! Loader for a local Hugging Face BERT / XLM-RoBERTa directory:
//! `config.json` + `model.safetensors` (or `pytorch_model.bin`) + `tokenizer.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{LayerNorm, VarBuilder};
use candle_transformers::models::bert::{self, BertEncoder, HiddenAct};
use serde::Deserialize;
use tokenizers::Tokenizer;

use super::encoder::{Encoder, Layers, WordTable};
use super::error::EmbedError;
use super::tokenize::TextTokenizer;
use super::Pooling;

/// The subset of `config.json` we need (lenient: unknown fields ignored, most defaulted).
#[derive(Debug, Deserialize)]
struct HfConfig {
    #[serde(default)]
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    #[serde(default)]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    pad_token_id: Option<usize>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_max_pos() -> usize {
    512
}
fn default_eps() -> f64 {
    1e-12
}

/// What the loader found out about the checkpoint, beyond the encoder itself.
pub(crate) struct HfLoaded {
    pub encoder: Encoder,
    pub tokenizer: TextTokenizer,
    /// `config.json`'s `model_type` (e.g. `bert`, `xlm-roberta`).
    pub model_type: String,
    /// Pooling declared by a sentence-transformers `1_Pooling/config.json`, if present.
    pub declared_pooling: Option<Pooling>,
    /// Bytes that identify the checkpoint (config + tokenizer + weight samples) for the model id.
    pub fingerprint_input: Vec<u8>,
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|e| EmbedError::io(path, e))
}

/// Loads every weight of the checkpoint as named tensors.
fn load_weights(dir: &Path) -> Result<(HashMap<String, Tensor>, PathBuf), EmbedError> {
    let st = dir.join("model.safetensors");
    let pth = dir.join("pytorch_model.bin");
    let map = if st.is_file() {
        let data = read(&st)?;
        let m = candle_core::safetensors::load_buffer(&data, &Device::Cpu)
            .map_err(|e| EmbedError::format(&st, e.to_string()))?;
        (m, st)
    } else if pth.is_file() {
        let v = candle_core::pickle::read_all(&pth)
            .map_err(|e| EmbedError::format(&pth, e.to_string()))?;
        (v.into_iter().collect(), pth)
    } else {
        return Err(EmbedError::ModelNotFound {
            what: "model.safetensors or pytorch_model.bin".into(),
            searched: vec![st, pth],
        });
    };
    // Old TF-converted checkpoints name LayerNorm parameters gamma/beta.
    let renamed = map
        .0
        .into_iter()
        .map(|(k, v)| {
            let k = if let Some(p) = k.strip_suffix(".gamma") {
                format!("{p}.weight")
            } else if let Some(p) = k.strip_suffix(".beta") {
                format!("{p}.bias")
            } else {
                k
            };
            (k, v)
        })
        .collect();
    Ok((renamed, map.1))
}

/// Reads `1_Pooling/config.json` (sentence-transformers) if present.
fn declared_pooling(dir: &Path) -> Option<Pooling> {
    let data = std::fs::read(dir.join("1_Pooling").join("config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&data).ok()?;
    if v.get("pooling_mode_cls_token").and_then(|x| x.as_bool()) == Some(true) {
        Some(Pooling::Cls)
    } else if v.get("pooling_mode_mean_tokens").and_then(|x| x.as_bool()) == Some(true) {
        Some(Pooling::Mean)
    } else {
        None
    }
}

/// Loads a Hugging Face directory.
///
/// Complexity: O(checkpoint size); the word table is kept as f16.
pub(crate) fn load(dir: &Path) -> Result<HfLoaded, EmbedError> {
    let cfg_path = dir.join("config.json");
    let tok_path = dir.join("tokenizer.json");
    if !dir.is_dir() || !cfg_path.is_file() || !tok_path.is_file() {
        return Err(EmbedError::ModelNotFound {
            what: "Hugging Face model directory with config.json and tokenizer.json".into(),
            searched: vec![cfg_path, tok_path],
        });
    }
    let cfg_bytes = read(&cfg_path)?;
    let cfg: HfConfig = serde_json::from_slice(&cfg_bytes)
        .map_err(|e| EmbedError::Config(format!("{}: {e}", cfg_path.display())))?;
    let model_type = cfg.model_type.clone().unwrap_or_else(|| "bert".into());
    let hidden_act = match cfg.hidden_act.as_str() {
        "gelu" | "gelu_python" => HiddenAct::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => HiddenAct::GeluApproximate,
        "relu" => HiddenAct::Relu,
        other => {
            return Err(EmbedError::Config(format!(
                "unsupported hidden_act {other:?}"
            )))
        }
    };
    if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
        return Err(EmbedError::Config(
            "hidden_size is not a multiple of num_attention_heads".into(),
        ));
    }
    let roberta_like = matches!(model_type.as_str(), "xlm-roberta" | "roberta" | "camembert");
    let pad = cfg.pad_token_id.unwrap_or(if roberta_like { 1 } else { 0 });
    let pos_offset = if roberta_like { pad + 1 } else { 0 };

    let (weights, weights_path) = load_weights(dir)?;
    let word_key = weights
        .keys()
        .find(|k| k.ends_with("embeddings.word_embeddings.weight"))
        .cloned()
        .ok_or_else(|| EmbedError::format(&weights_path, "no embeddings.word_embeddings.weight"))?;
    let prefix = word_key
        .trim_end_matches("embeddings.word_embeddings.weight")
        .to_string();
    let get = |name: &str| -> Result<Tensor, EmbedError> {
        let key = format!("{prefix}{name}");
        let t = weights
            .get(&key)
            .ok_or_else(|| EmbedError::format(&weights_path, format!("missing tensor {key}")))?;
        Ok(t.to_dtype(DType::F32)?)
    };
    let word = get("embeddings.word_embeddings.weight")?;
    if word.dims() != [cfg.vocab_size, cfg.hidden_size] {
        return Err(EmbedError::format(
            &weights_path,
            format!("word embeddings have shape {:?}", word.dims()),
        ));
    }
    let pos = get("embeddings.position_embeddings.weight")?;
    let type0 =
        match weights.contains_key(&format!("{prefix}embeddings.token_type_embeddings.weight")) {
            true => Some(get("embeddings.token_type_embeddings.weight")?.get(0)?),
            false => None,
        };
    let ln = LayerNorm::new(
        get("embeddings.LayerNorm.weight")?,
        get("embeddings.LayerNorm.bias")?,
        cfg.layer_norm_eps,
    );

    let bert_cfg = bert::Config {
        vocab_size: cfg.vocab_size,
        hidden_size: cfg.hidden_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        intermediate_size: cfg.intermediate_size,
        hidden_act,
        hidden_dropout_prob: 0.0,
        max_position_embeddings: cfg.max_position_embeddings,
        type_vocab_size: cfg.type_vocab_size,
        initializer_range: 0.02,
        layer_norm_eps: cfg.layer_norm_eps,
        pad_token_id: pad,
        position_embedding_type: bert::PositionEmbeddingType::Absolute,
        use_cache: false,
        classifier_dropout: None,
        model_type: Some(model_type.clone()),
    };
    // Weight samples for the fingerprint: shapes and the first values of a few tensors.
    let mut fingerprint_input = cfg_bytes.clone();
    fingerprint_input.extend(read(&tok_path)?);
    for t in [&word, &pos] {
        fingerprint_input.extend(format!("{:?}", t.dims()).bytes());
        let flat = t.flatten_all()?;
        let n = flat.dims1()?.min(4096);
        for v in flat.narrow(0, 0, n)?.to_vec1::<f32>()? {
            fingerprint_input.extend(v.to_le_bytes());
        }
    }
    let layers = {
        let vb = VarBuilder::from_tensors(weights, DType::F32, &Device::Cpu);
        BertEncoder::load(vb.pp(format!("{prefix}encoder")), &bert_cfg)
            .map_err(|e| EmbedError::format(&weights_path, e.to_string()))?
    };
    let encoder = Encoder {
        word: WordTable::Dense(word.to_dtype(DType::F16)?),
        pos,
        pos_offset,
        type0,
        ln,
        layers: Layers::Bert(layers),
        hidden: cfg.hidden_size,
    };
    let inner = Tokenizer::from_file(&tok_path)
        .map_err(|e| EmbedError::Tokenizer(format!("{}: {e}", tok_path.display())))?;
    Ok(HfLoaded {
        encoder,
        tokenizer: TextTokenizer::from_hf(inner)?,
        model_type,
        declared_pooling: declared_pooling(dir),
        fingerprint_input,
    })
}
