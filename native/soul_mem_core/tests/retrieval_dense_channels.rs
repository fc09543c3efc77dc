//! The dense side of a query, made chunk by chunk with its statistics kept as it is written:
//! what the fusion reads of it must be what it would compute from the final values, on a
//! graph of several scan chunks, with own habits and identifiers raising scores, in one
//! thread or many.
#![allow(clippy::unwrap_used)]

mod retrieval_util;
use retrieval_util::*;

use soul_mem_core::retrieval::fusion::{fuse_similarity, FusedSimilarity};
use soul_mem_core::retrieval::*;

const TOPICS: [&str; 6] = ["红茶", "花园", "下雨", "画稿", "钢琴", "猫"];

/// ~9,000 notes (more than two scan chunks): people, episodes, places, habits and the self.
fn big() -> soul_mem_core::graph::MemoryGraph {
    let mut notes = Vec::new();
    let mut me = sem("sem_self", "小红", "一个喜欢红茶的学生", &["自身"]);
    for i in 0..3000 {
        let t = TOPICS[i % TOPICS.len()];
        let tags: &[&str] = if i % 3 == 0 { &[] } else { &[t] };
        notes.push(sem(
            &format!("person{i}"),
            &format!("人物{i}"),
            &format!("和{t}有关的人"),
            tags,
        ));
        let mut s = spec(&format!("s{i}"), &format!("第{i}天在{t}旁边聊天"), None);
        if i % 50 == 0 {
            trig(&mut s, &format!("p{}", i / 50), 0.7);
        }
        notes.push(s);
        notes.push(abs_loc(&format!("a{i}"), &format!("{t}的地方{i}")));
        if i % 50 == 0 {
            notes.push(proc_node(
                &format!("p{}", i / 50),
                &format!("总是在{t}时候拖延"),
            ));
            trig(&mut me, &format!("p{}", i / 50), 0.5);
        }
    }
    notes.push(me);
    graph(notes)
}

/// The tests' configuration on one thread and on many (every scan split in chunks).
fn one_thread_and_many() -> (PipelineConfig, PipelineConfig) {
    let mut one = PipelineConfig::default();
    one.similarity.similarity_threshold = 0.3;
    one.similarity.parallel_min_nodes = usize::MAX;
    let mut many = one.clone();
    many.similarity.parallel_min_nodes = 0;
    (one, many)
}

/// [`big`] indexed with a 64-dimension hash embedder (returned for the queries).
fn big_index() -> (HashEmbedder, RetrievalIndex) {
    let e = HashEmbedder::new(64).unwrap();
    let idx = RetrievalIndex::build_with_embedder(&big(), &e).unwrap();
    (e, idx)
}

fn query(json: &str) -> SubQuery {
    serde_json::from_str(json).unwrap()
}

fn queries() -> Vec<SubQuery> {
    vec![
        query(
            r#"{"priority":1,"tag":["红茶"],"variant":{"Semantic":[{"concept_identifier":"人物12","description":"和红茶有关的人"}]}}"#,
        ),
        query(
            r#"{"priority":1,"tag":[],"variant":{"Semantic":[{"concept_identifier":"总是在画稿时候拖延","description":"总是在画稿时候拖延"}]}}"#,
        ),
        query(
            r#"{"priority":1,"tag":["下雨","猫"],"variant":{"Situation":[{"narrative":"第40天在下雨旁边聊天"}]}}"#,
        ),
    ]
}

fn fused(
    idx: &RetrievalIndex,
    q: &SubQuery,
    e: &HashEmbedder,
    cfg: &PipelineConfig,
) -> (DenseChannels, FusedSimilarity, FusedSimilarity) {
    let v = embed_query(q, e).unwrap();
    let eq = EmbeddedQuery::assemble(q, &v, idx.vectors().dim()).unwrap();
    let ch = similarity_channels(idx, &eq, &cfg.similarity);
    // The habit cosines made by the shared scan are those of their own scan.
    let alone: Vec<u32> = actions::habit_cosines(idx, &eq)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let shared: Vec<u32> = ch.habit_cosines().iter().map(|x| x.to_bits()).collect();
    assert_eq!(shared, alone);
    let rebuilt = DenseChannels::new(
        ch.dense().to_vec(),
        ch.tag().to_vec(),
        ch.raw().to_vec(),
        ch.habit(),
        cfg.similarity.similarity_threshold,
    );
    let lexical = idx.lexical_scores(&query_terms(q));
    let f = &cfg.similarity.fusion;
    let kept = fuse_similarity(ch.clone(), &lexical, f);
    let recomputed = fuse_similarity(rebuilt, &lexical, f);
    (ch, kept, recomputed)
}

fn assert_same(a: &FusedSimilarity, b: &FusedSimilarity) {
    assert_eq!(a.candidates, b.candidates);
    assert_eq!(a.present, b.present);
    for &i in &a.candidates {
        let (x, y) = (a.score[i as usize], b.score[i as usize]);
        assert!((x - y).abs() < 1e-5, "node {i}: {x} vs {y}");
    }
}

#[test]
fn the_statistics_kept_while_writing_are_those_of_the_final_values() {
    let (e, idx) = big_index();
    assert!(idx.len() > 2 * 4096);
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = 0.3;
    cfg.similarity.parallel_min_nodes = usize::MAX;
    let mut raised = 0;
    for q in queries() {
        let (ch, kept, recomputed) = fused(&idx, &q, &e, &cfg);
        assert!(!kept.candidates.is_empty());
        assert_same(&kept, &recomputed);
        raised += usize::from(ch.habit().is_some());
    }
    // The habit query raised the self through its habits (the path that rewrites values).
    assert!(raised > 0);
}

#[test]
fn one_thread_and_many_give_the_same_channels() {
    let (e, idx) = big_index();
    let (one, many) = one_thread_and_many();
    for q in queries() {
        let (a, fa, _) = fused(&idx, &q, &e, &one);
        let (b, fb, _) = fused(&idx, &q, &e, &many);
        for (x, y) in [
            (a.dense(), b.dense()),
            (a.tag(), b.tag()),
            (a.raw(), b.raw()),
        ] {
            assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
        }
        assert_same(&fa, &fb);
    }
}

/// Counts the embedder's calls.
struct Counting<'e> {
    inner: &'e HashEmbedder,
    calls: std::cell::Cell<usize>,
}

impl TextEmbedder for Counting<'_> {
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(
        &self,
        texts: &[&str],
        kind: EmbedKind,
    ) -> soul_mem_core::error::Result<Vec<Vec<f32>>> {
        self.calls.set(self.calls.get() + 1);
        self.inner.embed(texts, kind)
    }
}

#[test]
fn a_recalls_sub_queries_are_embedded_in_one_call() {
    let e = HashEmbedder::new(64).unwrap();
    let counting = Counting {
        inner: &e,
        calls: std::cell::Cell::new(0),
    };
    let qs = queries();
    let together = embed_queries(&qs, &counting).unwrap();
    assert_eq!(counting.calls.get(), 1);
    let apart: Vec<QueryVectors> = qs.iter().map(|q| embed_query(q, &e).unwrap()).collect();
    assert_eq!(together, apart);
    assert!(together.iter().all(|v| !v.is_empty()));
    assert!(embed_queries(&[], &counting).unwrap().is_empty());
    assert_eq!(counting.calls.get(), 1, "nothing to embed, no call");
}

#[test]
fn the_whole_pipeline_is_the_same_on_one_thread_and_many() {
    // Many threads: the dense scan in chunks beside the lexical channel; one: in sequence.
    let (e, idx) = big_index();
    let (one, many) = one_thread_and_many();
    let mut qs = queries();
    qs.extend(soul_mem_core::text::text_queries(
        "小红在下雨的花园里喝红茶",
        4,
    ));
    for q in &qs {
        let q = std::slice::from_ref(q);
        let a = DefaultPipeline::run_with_embedder(&idx, q, &e, &one, None).unwrap();
        let b = DefaultPipeline::run_with_embedder(&idx, q, &e, &many, None).unwrap();
        assert!(!a.memories.is_empty());
        assert_eq!(a, b);
    }
}

/// The bits of every channel value, so that NaN (absent) compares equal to NaN.
fn bits(ch: &DenseChannels) -> Vec<Vec<u32>> {
    [ch.dense(), ch.tag(), ch.raw()]
        .iter()
        .map(|v| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[test]
fn sub_queries_scanned_together_get_what_each_gets_alone() {
    // A recall's sub-queries share one pass of the scan: each query's channels, statistics
    // and fusion must be what it gets alone, in one thread and many.
    let (e, idx) = big_index();
    let mut qs = queries();
    qs.extend(soul_mem_core::text::text_queries(
        "小红在下雨的花园里喝红茶",
        4,
    ));
    let embedded: Vec<EmbeddedQuery> = qs
        .iter()
        .map(|q| {
            let v = embed_query(q, &e).unwrap();
            EmbeddedQuery::assemble(q, &v, idx.vectors().dim()).unwrap()
        })
        .collect();
    let together: Vec<&EmbeddedQuery> = embedded.iter().collect();
    for parallel_min_nodes in [usize::MAX, 0] {
        let mut cfg = PipelineConfig::default();
        cfg.similarity.similarity_threshold = 0.3;
        cfg.similarity.parallel_min_nodes = parallel_min_nodes;
        let many = similarity_channels_many(&idx, &together, true, &cfg.similarity);
        assert_eq!(many.len(), qs.len());
        for (q, got) in together.iter().zip(&many) {
            let alone = similarity_channels(&idx, q, &cfg.similarity);
            assert_eq!(bits(got), bits(&alone));
            let cosines = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                cosines(got.habit_cosines()),
                cosines(&actions::habit_cosines(&idx, q))
            );
            assert_eq!(got.habit(), alone.habit());
            let f = &cfg.similarity.fusion;
            let lexical = vec![];
            assert_same(
                &fuse_similarity(got.clone(), &lexical, f),
                &fuse_similarity(alone, &lexical, f),
            );
        }
        // The whole recall (the sub-queries merged) on one thread and many.
        let mut one = cfg.clone();
        one.similarity.parallel_min_nodes = usize::MAX;
        let a = DefaultPipeline::run_with_embedder(&idx, &qs, &e, &one, None).unwrap();
        let b = DefaultPipeline::run_with_embedder(&idx, &qs, &e, &cfg, None).unwrap();
        assert!(!a.memories.is_empty());
        assert_eq!(a, b);
    }
    let none = similarity_channels_many(&idx, &[], true, &PipelineConfig::default().similarity);
    assert!(none.is_empty());
}

#[test]
fn a_request_of_many_sub_queries_runs_in_groups_with_the_same_result() {
    // More sub-queries than share one scan: they run group by group, and each group's
    // outcome is what its sub-queries give alone, in one thread and many.
    let (e, idx) = big_index();
    let mut qs = Vec::new();
    for (i, t) in [
        "小红在下雨的花园里喝红茶",
        "画稿拖延",
        "钢琴和猫",
        "第40天聊天",
    ]
    .iter()
    .enumerate()
    {
        qs.extend(queries());
        qs.extend(soul_mem_core::text::text_queries(t, 4));
        if let Some(q) = qs.last_mut() {
            q.priority = i as u32 + 1;
        }
    }
    assert!(qs.len() > 16, "{} sub-queries: several groups", qs.len());
    let (one, many) = one_thread_and_many();
    let a = DefaultPipeline::run_with_embedder(&idx, &qs, &e, &one, None).unwrap();
    let b = DefaultPipeline::run_with_embedder(&idx, &qs, &e, &many, None).unwrap();
    assert!(!a.memories.is_empty());
    assert_eq!(a, b);
}
