//! The Hugging Face directory loader, on tiny random BERT / XLM-R checkpoints written here
//! (config.json + model.safetensors + tokenizer.json), checked against candle-transformers'
//! own `BertModel` / `XLMRobertaModel` run on the same weights. The same weights are also
//! written as a `torch.save` zip (`pytorch_model.bin`) to check that path reads them alike.

use std::collections::HashMap;
use std::io::Write;
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

mod store_util;

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
    // The last component is the name: model ids are made from it.
    let dir = store_util::tmp("embed-hf", name).join(name);
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

/// Just enough of a pickle (protocol 2) writer to emit what `torch.save(model.state_dict())`
/// does: memoized globals and strings (BINPUT / BINGET, as CPython's pickler), small-int
/// opcodes, TUPLE1..3, and BINPERSID storage references.
#[derive(Default)]
struct Pickle {
    out: Vec<u8>,
    memo: HashMap<String, u32>,
    next: u32,
}

impl Pickle {
    fn op(&mut self, op: u8) {
        self.out.push(op);
    }

    fn put(&mut self) -> u32 {
        let id = self.next;
        self.next += 1;
        match u8::try_from(id) {
            Ok(small) => self.out.extend([b'q', small]), // BINPUT
            Err(_) => {
                self.op(b'r'); // LONG_BINPUT
                self.out.extend(id.to_le_bytes());
            }
        }
        id
    }

    /// Writes `value` once and memoizes it; later writes of the same key are BINGETs.
    fn memoized(&mut self, key: String, value: impl FnOnce(&mut Self)) {
        if let Some(&id) = self.memo.get(&key) {
            match u8::try_from(id) {
                Ok(small) => self.out.extend([b'h', small]), // BINGET
                Err(_) => {
                    self.op(b'j'); // LONG_BINGET
                    self.out.extend(id.to_le_bytes());
                }
            }
        } else {
            value(self);
            let id = self.put();
            self.memo.insert(key, id);
        }
    }

    fn global(&mut self, module: &str, name: &str) {
        self.memoized(format!("global {module} {name}"), |p| {
            p.op(b'c'); // GLOBAL
            p.out.extend(format!("{module}\n{name}\n").bytes());
        });
    }

    fn str(&mut self, s: &str) {
        self.memoized(format!("str {s}"), |p| {
            p.op(b'X'); // BINUNICODE
            p.out
                .extend(u32::try_from(s.len()).expect("len").to_le_bytes());
            p.out.extend(s.bytes());
        });
    }

    fn int(&mut self, v: usize) {
        if let Ok(b) = u8::try_from(v) {
            self.out.extend([b'K', b]); // BININT1
        } else if let Ok(w) = u16::try_from(v) {
            self.op(b'M'); // BININT2
            self.out.extend(w.to_le_bytes());
        } else {
            self.op(b'J'); // BININT
            self.out
                .extend(i32::try_from(v).expect("int").to_le_bytes());
        }
    }

    /// A tuple of `n` items written by `items`, as CPython encodes it.
    fn tuple(&mut self, n: usize, items: impl FnOnce(&mut Self)) {
        match n {
            0 => self.op(b')'), // EMPTY_TUPLE
            1..=3 => {
                items(self);
                self.op(0x84 + n as u8); // TUPLE1 / TUPLE2 / TUPLE3
            }
            _ => {
                self.op(b'('); // MARK
                items(self);
                self.op(b't'); // TUPLE
            }
        }
        self.put();
    }

    fn ints(&mut self, v: &[usize]) {
        self.tuple(v.len(), |p| v.iter().for_each(|&x| p.int(x)));
    }

    /// `collections.OrderedDict()` (REDUCE of the class on an empty tuple).
    fn empty_ordered_dict(&mut self) {
        self.global("collections", "OrderedDict");
        self.op(b')');
        self.op(b'R'); // REDUCE
        self.put();
    }

    /// `torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())`
    /// with the storage as persistent id `('storage', torch.<kind>, key, 'cpu', numel)`.
    fn tensor(&mut self, kind: &str, key: &str, shape: &[usize]) {
        let numel = shape.iter().product();
        let mut stride = vec![1; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1] * shape[i + 1];
        }
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.tuple(6, |p| {
            p.tuple(5, |p| {
                p.str("storage");
                p.global("torch", kind);
                p.str(key);
                p.str("cpu");
                p.int(numel);
            });
            p.op(b'Q'); // BINPERSID
            p.int(0);
            p.ints(shape);
            p.ints(&stride);
            p.op(0x89); // NEWFALSE: requires_grad
            p.empty_ordered_dict(); // backward hooks
        });
        self.op(b'R');
        self.put();
    }
}

/// A stored (uncompressed) entry, 64-byte aligned like torch's PyTorchStreamWriter.
fn zip_entry(z: &mut zip::ZipWriter<std::io::Cursor<Vec<u8>>>, name: &str, data: &[u8]) {
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .with_alignment(64);
    z.start_file(name, opts).expect("zip entry");
    z.write_all(data).expect("zip write");
}

/// The bytes `torch.save(state_dict, "pytorch_model.bin")` writes for `tensors`, in the
/// zip format (PyTorch >= 1.6): `archive/data.pkl`, one `archive/data/<key>` per storage,
/// `archive/version`. Like old Hugging Face checkpoints it also carries the int64
/// `embeddings.position_ids` buffer and the state dict's `_metadata` attribute.
fn torch_save(tensors: &HashMap<String, Tensor>, prefix: &str, max_pos: usize) -> Vec<u8> {
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut storages: Vec<Vec<u8>> = Vec::new();
    let mut p = Pickle::default();
    p.out.extend([0x80, 2]); // PROTO 2
    p.empty_ordered_dict();
    p.op(b'(');
    for name in names {
        let t = &tensors[name];
        let key = storages.len().to_string();
        p.str(name);
        p.tensor("FloatStorage", &key, t.dims());
        let values: Vec<f32> = t
            .flatten_all()
            .expect("flat")
            .to_vec1()
            .expect("f32 values");
        storages.push(values.iter().flat_map(|v| v.to_le_bytes()).collect());
    }
    let key = storages.len().to_string();
    p.str(&format!("{prefix}embeddings.position_ids"));
    p.tensor("LongStorage", &key, &[1, max_pos]);
    storages.push((0..max_pos as i64).flat_map(|v| v.to_le_bytes()).collect());
    p.op(b'u'); // SETITEMS
                // BUILD with the state {'_metadata': OrderedDict({'': {'version': 1}})}.
    p.op(b'}'); // EMPTY_DICT
    p.put();
    p.str("_metadata");
    p.empty_ordered_dict();
    p.str("");
    p.op(b'}');
    p.put();
    p.str("version");
    p.int(1);
    p.op(b's'); // SETITEM
    p.op(b's');
    p.op(b's');
    p.op(b'b'); // BUILD
    p.op(b'.'); // STOP

    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip_entry(&mut z, "archive/data.pkl", &p.out);
    zip_entry(&mut z, "archive/byteorder", b"little");
    for (key, data) in storages.iter().enumerate() {
        zip_entry(&mut z, &format!("archive/data/{key}"), data);
    }
    zip_entry(&mut z, "archive/version", b"3\n");
    z.finish().expect("zip finish").into_inner()
}

/// A copy of the tiny checkpoint at `src` whose weights are only a `pytorch_model.bin`.
/// The directory has the same name under another parent, so the model ids are comparable.
fn pth_copy(src: &Path, f: Family) -> PathBuf {
    let name = src.file_name().expect("name");
    let dst = store_util::tmp("embed-hf", "pth").join(name);
    std::fs::create_dir_all(&dst).expect("dir");
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(file), dst.join(file)).expect("copy");
    }
    let tensors =
        candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).expect("st");
    let (prefix, max_pos) = match f {
        Family::Bert => ("", 16),
        Family::XlmR => ("roberta.", 18),
    };
    std::fs::write(
        dst.join("pytorch_model.bin"),
        torch_save(&tensors, prefix, max_pos),
    )
    .expect("write bin");
    dst
}

#[test]
fn pytorch_bin_reads_the_same_weights_as_safetensors() {
    let texts = [
        "小白打翻了麻辣烫",
        "今天的股票市场",
        "hello world!",
        "你好世界，我们是猫狗。",
    ];
    for (f, name) in [
        (Family::Bert, "bge-tiny-zh-bin"),
        (Family::XlmR, "tiny-xlmr-bin"),
    ] {
        let st_dir = make_tiny(name, f);
        let bin_dir = pth_copy(&st_dir, f);
        assert!(!bin_dir.join("model.safetensors").exists());
        for pooling in [Pooling::Cls, Pooling::Mean] {
            let mut st_spec = ModelSpec::hf_dir(&st_dir);
            st_spec.pooling = Some(pooling);
            let mut bin_spec = ModelSpec::hf_dir(&bin_dir);
            bin_spec.pooling = Some(pooling);
            let st = Embedder::load(&st_spec).expect("load safetensors");
            let bin = Embedder::load(&bin_spec).expect("load pytorch_model.bin");
            assert_eq!(
                bin.model_id(),
                st.model_id(),
                "same weights, same fingerprint"
            );
            assert_eq!(bin.dim(), st.dim());
            for kind in [TextKind::Query, TextKind::Passage] {
                let a = st.embed(&texts, kind).expect("embed st");
                let b = bin.embed(&texts, kind).expect("embed bin");
                assert_eq!(a.len(), texts.len());
                for ((t, x), y) in texts.iter().zip(&a).zip(&b) {
                    assert_eq!(x.len(), y.len());
                    let diff = x
                        .iter()
                        .zip(y)
                        .map(|(u, v)| (u - v).abs())
                        .fold(0.0f32, f32::max);
                    assert!(diff <= 1e-6, "{name} {pooling:?} {t:?}: max diff {diff}");
                }
            }
        }
    }
}

#[test]
fn corrupt_pytorch_bin_is_an_error_not_a_panic() {
    let dir = pth_copy(&make_tiny("tiny-corrupt", Family::Bert), Family::Bert);
    let path = dir.join("pytorch_model.bin");
    let good = std::fs::read(&path).expect("read");
    Embedder::load(&ModelSpec::hf_dir(&dir)).expect("the intact file loads");
    // Truncated downloads: cut anywhere, including inside the end-of-central-directory record.
    for cut in [0, 4, 100, good.len() / 2, good.len() - 30, good.len() - 1] {
        std::fs::write(&path, &good[..cut]).expect("write");
        let err = Embedder::load(&ModelSpec::hf_dir(&dir))
            .err()
            .unwrap_or_else(|| panic!("a file cut at {cut} of {} loaded", good.len()));
        let msg = err.to_string();
        assert!(
            msg.contains("bad model file") && msg.contains("pytorch_model.bin"),
            "cut at {cut}: {msg}"
        );
    }
    // Not a zip at all (e.g. a git-lfs pointer left in place of the weights).
    std::fs::write(
        &path,
        b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n",
    )
    .expect("write");
    let err = Embedder::load(&ModelSpec::hf_dir(&dir)).expect_err("lfs pointer");
    assert!(err.to_string().contains("pytorch_model.bin"), "{err}");
}
