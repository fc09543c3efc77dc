//! The Hugging Face directory loader, on tiny random BERT / XLM-R checkpoints written here
//! (config.json + model.safetensors + tokenizer.json), checked against candle-transformers'
//! own `BertModel` / `XLMRobertaModel` run on the same weights.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{bert, xlm_roberta};
use serde_json::json;
use soul_mem_core::embed::{Embedder, ModelSpec, Pooling, TextKind, BGE_ZH_QUERY_INSTRUCTION};

const H: usize = 32;
const FF: usize = 64;
const LAYERS: usize = 2;

#[derive(Clone, Copy, PartialEq)]
enum Family {
    /// bge-style BERT: no name prefix, positions from 0, [CLS]/[SEP].
    Bert,
    /// XLM-R: `roberta.` prefix, positions from padding_idx + 1 = 2, <s>/</s>.
    XlmR,
}

const CHARS: &str = "小白打翻了麻辣烫汤洒一地今天的股票市场你好世界猫狗我们他她是在不心把碗碰倒";

fn vocab(f: Family) -> Vec<String> {
    let specials: &[&str] = match f {
        Family::Bert => &["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        Family::XlmR => &["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    };
    let mut v: Vec<String> = specials.iter().map(|s| s.to_string()).collect();
    v.extend(CHARS.chars().map(String::from));
    v.extend(["hello", "world", "，", "。", "!"].map(String::from));
    v
}

fn tokenizer_json(f: Family) -> serde_json::Value {
    let vocab: serde_json::Map<String, serde_json::Value> = vocab(f)
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, json!(i)))
        .collect();
    let unk = if f == Family::Bert { "[UNK]" } else { "<unk>" };
    json!({
        "version": "1.0",
        "truncation": {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0},
        "padding": null,
        "added_tokens": [],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                        "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}
    })
}

/// Writes a tiny random checkpoint; returns (dir, max_position_embeddings).
fn make_tiny(name: &str, f: Family) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("soul_mem_embed_hf_{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let v = vocab(f).len();
    let (prefix, max_pos, type_vocab, model_type, act) = match f {
        Family::Bert => ("", 16, 2, "bert", "gelu"),
        Family::XlmR => ("roberta.", 18, 1, "xlm-roberta", "relu"),
    };
    let config = json!({
        "architectures": ["BertModel"], "model_type": model_type,
        "vocab_size": v, "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
        "intermediate_size": FF, "hidden_act": act, "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": max_pos,
        "type_vocab_size": type_vocab, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
        "pad_token_id": if f == Family::Bert { 0 } else { 1 },
        "position_embedding_type": "absolute", "classifier_dropout": null
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&config).expect("json"),
    )
    .expect("write");
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_vec(&tokenizer_json(f)).expect("json"),
    )
    .expect("write");

    let dev = Device::Cpu;
    let mut t: HashMap<String, Tensor> = HashMap::new();
    let mut put = |k: String, shape: &[usize], mean: f64, std: f64| {
        t.insert(
            format!("{prefix}{k}"),
            Tensor::randn(mean, std, shape, &dev)
                .expect("randn")
                .to_dtype(DType::F32)
                .expect("f32"),
        );
    };
    put(
        "embeddings.word_embeddings.weight".into(),
        &[v, H],
        0.0,
        0.5,
    );
    put(
        "embeddings.position_embeddings.weight".into(),
        &[max_pos, H],
        0.0,
        0.5,
    );
    put(
        "embeddings.token_type_embeddings.weight".into(),
        &[type_vocab, H],
        0.0,
        0.5,
    );
    put("embeddings.LayerNorm.weight".into(), &[H], 1.0, 0.1);
    put("embeddings.LayerNorm.bias".into(), &[H], 0.0, 0.1);
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}.");
        for (n, o, i) in [
            ("attention.self.query", H, H),
            ("attention.self.key", H, H),
            ("attention.self.value", H, H),
            ("attention.output.dense", H, H),
            ("intermediate.dense", FF, H),
            ("output.dense", H, FF),
        ] {
            put(format!("{p}{n}.weight"), &[o, i], 0.0, 0.3);
            put(format!("{p}{n}.bias"), &[o], 0.0, 0.1);
        }
        for n in ["attention.output.LayerNorm", "output.LayerNorm"] {
            put(format!("{p}{n}.weight"), &[H], 1.0, 0.1);
            put(format!("{p}{n}.bias"), &[H], 0.0, 0.1);
        }
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).expect("save");
    dir
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    let d: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    d / (n(a) * n(b))
}

/// candle-transformers' reference hidden states `[L, H]` for one unpadded id sequence.
fn reference_hidden(dir: &Path, f: Family, ids: &[u32]) -> Tensor {
    let dev = Device::Cpu;
    let weights =
        candle_core::safetensors::load(dir.join("model.safetensors"), &dev).expect("load");
    let vb = VarBuilder::from_tensors(weights, DType::F32, &dev);
    let cfg_text = std::fs::read_to_string(dir.join("config.json")).expect("config");
    let input = Tensor::new(ids, &dev)
        .expect("ids")
        .unsqueeze(0)
        .expect("batch");
    let types = input.zeros_like().expect("types");
    let out = match f {
        Family::Bert => {
            let cfg: bert::Config = serde_json::from_str(&cfg_text).expect("bert config");
            let m = bert::BertModel::load(vb, &cfg).expect("bert");
            m.forward(&input, &types, None).expect("forward")
        }
        Family::XlmR => {
            let cfg: xlm_roberta::Config = serde_json::from_str(&cfg_text).expect("xlmr config");
            let m = xlm_roberta::XLMRobertaModel::new(&cfg, vb.pp("roberta")).expect("xlmr");
            let mask = input.ones_like().expect("mask");
            m.forward(&input, &mask, &types, None, None, None)
                .expect("forward")
        }
    };
    out.squeeze(0).expect("squeeze")
}

fn no_prefix_raw(dir: &Path, pooling: Pooling) -> Embedder {
    let mut spec = ModelSpec::hf_dir(dir);
    spec.pooling = Some(pooling);
    spec.query_prefix = Some(String::new());
    spec.passage_prefix = Some(String::new());
    spec.normalize = false;
    Embedder::load(&spec).expect("load")
}

#[test]
fn bert_dir_matches_candle_bert_model() {
    let dir = make_tiny("tiny-bge-zh", Family::Bert);
    let text = "小白打翻了麻辣烫";
    for pooling in [Pooling::Cls, Pooling::Mean] {
        let e = no_prefix_raw(&dir, pooling);
        let ids = e.tokenize(text).expect("ids");
        assert_eq!(ids.len(), 10, "{ids:?}"); // [CLS] + 8 chars + [SEP]; tokenizer.json truncation ignored
        assert_eq!((ids[0], ids[9]), (2, 3));
        let hidden = reference_hidden(&dir, Family::Bert, &ids);
        let want: Vec<f32> = match pooling {
            Pooling::Cls => hidden.get(0).expect("cls").to_vec1().expect("vec"),
            Pooling::Mean => hidden.mean(0).expect("mean").to_vec1().expect("vec"),
        };
        let got = e.embed_one(text, TextKind::Passage).expect("embed");
        let c = cos(&got, &want);
        assert!(c > 0.9995, "{pooling:?}: cos {c}"); // our word table is f16
    }
}

#[test]
fn xlmr_dir_uses_offset_positions() {
    let dir = make_tiny("tiny-xlmr", Family::XlmR);
    let e = no_prefix_raw(&dir, Pooling::Mean);
    assert_eq!(e.max_tokens(), 16, "18 positions minus padding_idx + 1");
    let text = "你好世界，小猫";
    let ids = e.tokenize(text).expect("ids");
    assert_eq!((ids[0], *ids.last().expect("last")), (0, 2));
    let want: Vec<f32> = reference_hidden(&dir, Family::XlmR, &ids)
        .mean(0)
        .expect("mean")
        .to_vec1()
        .expect("vec");
    let got = e.embed_one(text, TextKind::Query).expect("embed");
    let c = cos(&got, &want);
    assert!(c > 0.9995, "cos {c}");
}

#[test]
fn bge_defaults_prefix_only_queries() {
    let dir = make_tiny("bge-tiny-zh", Family::Bert);
    let e = Embedder::load(&ModelSpec::hf_dir(&dir)).expect("load");
    assert_eq!(e.pooling(), Pooling::Cls);
    assert_eq!(e.dim(), H);
    assert_eq!(e.prefix(TextKind::Query), BGE_ZH_QUERY_INSTRUCTION);
    assert_eq!(e.prefix(TextKind::Passage), "");
    assert!(e.model_id().starts_with("bge-tiny-zh@"), "{}", e.model_id());
    let text = "小白打翻了麻辣烫";
    let q = e.embed_one(text, TextKind::Query).expect("q");
    let p = e.embed_one(text, TextKind::Passage).expect("p");
    assert!(cos(&q, &p) < 0.9999, "query instruction had no effect");
    let norm: f32 = p.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
    // Passages get no prefix: same as embedding with an explicitly empty passage prefix.
    let mut spec = ModelSpec::hf_dir(&dir);
    spec.query_prefix = Some(String::new());
    let plain = Embedder::load(&spec).expect("load");
    assert_eq!(plain.embed_one(text, TextKind::Query).expect("plain"), p);
    assert_ne!(
        plain.model_id(),
        e.model_id(),
        "prefixes are part of the model id"
    );
}

#[test]
fn long_text_is_windowed_and_batches_pad_correctly() {
    let dir = make_tiny("tiny-bert-windows", Family::Bert);
    let e = no_prefix_raw(&dir, Pooling::Mean);
    assert_eq!(e.max_tokens(), 16);
    let long: String = CHARS.chars().cycle().take(100).collect();
    assert_eq!(
        e.window_count(&long, TextKind::Passage).expect("windows"),
        8
    ); // ceil(100 / 14)
    let texts = [long.as_str(), "小白", "今天的股票市场你好世界"];
    let batch = e.embed(&texts, TextKind::Passage).expect("batch");
    for (t, b) in texts.iter().zip(&batch) {
        let single = e.embed_one(t, TextKind::Passage).expect("single");
        assert!(
            cos(&single, b) > 0.99999,
            "padding or windowing changed {t:?}"
        );
        assert!(b.iter().all(|x| x.is_finite()));
    }
    // Mean-pooled windows fused by token count: for a text that is exactly two full windows,
    // the result is the token-weighted mean of the two windows' vectors.
    let two: String = CHARS.chars().take(28).collect();
    let (a, b): (String, String) = (
        two.chars().take(14).collect(),
        two.chars().skip(14).collect(),
    );
    let whole = e.embed_one(&two, TextKind::Passage).expect("two");
    let va = e.embed_one(&a, TextKind::Passage).expect("a");
    let vb = e.embed_one(&b, TextKind::Passage).expect("b");
    for ((w, x), y) in whole.iter().zip(&va).zip(&vb) {
        assert!((w - (x + y) / 2.0).abs() < 1e-4, "{w} vs {}", (x + y) / 2.0);
    }
}

#[test]
fn bad_config_is_an_error_not_a_panic() {
    let dir = make_tiny("tiny-bad", Family::Bert);
    std::fs::write(dir.join("config.json"), b"{\"hidden_size\": 32}").expect("write");
    assert!(Embedder::load(&ModelSpec::hf_dir(&dir)).is_err());
    let dir = make_tiny("tiny-noweights", Family::Bert);
    std::fs::remove_file(dir.join("model.safetensors")).expect("rm");
    let err = Embedder::load(&ModelSpec::hf_dir(&dir)).expect_err("no weights");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}
