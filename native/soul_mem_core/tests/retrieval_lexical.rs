//! The lexical channel and the calibrated fusion through the whole pipeline: untagged notes,
//! queries with no words, oversized notes, incremental sync, and the trace of a memory the
//! walk found.
#![allow(clippy::unwrap_used)]

mod retrieval_util;
use retrieval_util::*;

use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::retrieval::*;

fn q(json: &str) -> SubQuery {
    serde_json::from_str(json).unwrap()
}

fn recall(idx: &RetrievalIndex, sub: &SubQuery, cfg: &PipelineConfig) -> PipelineResult {
    let e = HashEmbedder::new(128).unwrap();
    DefaultPipeline::run_with_embedder(idx, std::slice::from_ref(sub), &e, cfg, None).unwrap()
}

fn ids(r: &PipelineResult) -> Vec<String> {
    r.memories.iter().map(|m| m.readable_id.clone()).collect()
}

/// Ten tagged look-alikes and one untagged grandmother; the episode of the grandmother's
/// clock shares no word with a question about her.
fn family() -> MemoryGraph {
    let mut notes = Vec::new();
    for i in 0..10 {
        notes.push(sem(
            &format!("sem_other{i}"),
            &format!("同事{i}"),
            "码头上一起上班的人",
            &["人物"],
        ));
    }
    let mut grandma = sem("sem_grandma", "奶奶", "小时候带我长大的外婆", &[]);
    sem_link(&mut grandma, "sit_clock", 1.0);
    let mut clock = spec(
        "sit_clock",
        "那年冬天那台老座钟停了，我们俩守着它修到半夜",
        None,
    );
    sem_link(&mut clock, "sem_grandma", 1.0);
    notes.push(grandma);
    notes.push(clock);
    graph(notes)
}

fn index(g: &MemoryGraph) -> RetrievalIndex {
    RetrievalIndex::build_with_embedder(g, &HashEmbedder::new(128).unwrap()).unwrap()
}

#[test]
fn an_untagged_note_is_found_by_a_tagged_query() {
    let idx = index(&family());
    let sub = q(
        r#"{"priority":1,"tag":["人物"],"variant":{"Semantic":[{"concept_identifier":"奶奶","description":"带我长大的人"}]}}"#,
    );
    let r = recall(&idx, &sub, &PipelineConfig::default());
    assert_eq!(ids(&r)[0], "sem_grandma", "{:?}", ids(&r));
    let top = &r.memories[0];
    assert!(top.channels.contains(&Channel::Lexical), "{top:?}");
    assert!(
        !top.channels.contains(&Channel::Tag),
        "no tags to compare: {top:?}"
    );
}

#[test]
fn the_walk_brings_the_episode_with_its_path() {
    let idx = index(&family());
    let sub = q(
        r#"{"priority":1,"tag":[],"variant":{"Semantic":[{"concept_identifier":"奶奶","description":""}]}}"#,
    );
    let mut cfg = PipelineConfig {
        max_memories: 3,
        ..PipelineConfig::default()
    };
    cfg.similarity.similarity_threshold = 0.0;
    let r = recall(&idx, &sub, &cfg);
    let clock = r
        .memories
        .iter()
        .find(|m| m.readable_id == "sit_clock")
        .unwrap_or_else(|| panic!("episode not recalled: {:?}", ids(&r)));
    assert!(clock.channels.contains(&Channel::Association), "{clock:?}");
    assert_eq!(clock.path, vec![mid("sem_grandma"), mid("sit_clock")]);
    assert_eq!(clock.seeds, vec![mid("sem_grandma")]);
    assert_eq!(ids(&r)[1], "sit_clock", "right after the seed it hangs on");
}

#[test]
fn a_query_without_words_recalls_by_the_other_channels() {
    let idx = index(&family());
    for text in ["😀😀", "！？…", "   "] {
        let sub = SubQuery {
            priority: 1,
            tag: vec!["人物".into()],
            variant: QueryVariant::Semantic(vec![soul_mem_core::retrieval::query::SemQueryUnit {
                concept_identifier: text.into(),
                description: String::new(),
            }]),
        };
        assert!(query_terms(&sub).is_empty(), "{text:?}");
        // Hash vectors score low: no floor, so the tag channel's recall is visible.
        let mut cfg = PipelineConfig::default();
        cfg.similarity.similarity_threshold = 0.0;
        let r = recall(&idx, &sub, &cfg);
        assert!(
            !r.memories.is_empty(),
            "{text:?}: the tag channel still recalls"
        );
        assert!(r
            .memories
            .iter()
            .all(|m| !m.channels.contains(&Channel::Lexical)));
    }
}

#[test]
fn an_oversized_note_is_refused_and_the_rest_kept() {
    let mut g = family();
    let huge = "很长的一段话".repeat(200_000 / 6);
    g.insert(sem("sem_huge", "长文", &huge, &[])).unwrap();
    let idx = index(&g);
    assert_eq!(idx.lexical_refused().len(), 1);
    let (id, why) = &idx.lexical_refused()[0];
    assert_eq!(id, "sem_huge");
    assert!(why.contains("bytes"), "{why}");
    let scores = idx.lexical_scores(&soul_mem_core::text::search_terms("奶奶"));
    let grandma = idx.position(&mid("sem_grandma")).unwrap();
    assert!(scores[grandma] > 0.0);
    assert_eq!(idx.lexical().len(), g.len() - 1);
}

#[test]
fn a_rebuilt_snapshot_syncs_the_lexical_index_it_inherits() {
    let mut g = family();
    let idx = index(&g);
    let vocabulary = idx.lexical().vocabulary();
    g.insert(sem("sem_cat", "秤砣", "独眼的橘猫", &[])).unwrap();
    g.remove(&mid("sem_other0"));
    let e = HashEmbedder::new(128).unwrap();
    let vectors = NodeVectors::embed_graph(&g, &e).unwrap();
    let idx = RetrievalIndex::build_reusing(&g, vectors, Some(idx)).unwrap();
    assert_eq!(idx.lexical().len(), g.len());
    assert!(idx.lexical().vocabulary() > vocabulary);
    let cat = idx.position(&mid("sem_cat")).unwrap();
    let scores = idx.lexical_scores(&soul_mem_core::text::search_terms("独眼的橘猫"));
    assert!(scores[cat] > 0.0);
    assert!(scores
        .iter()
        .enumerate()
        .all(|(i, &s)| i == cat || s < scores[cat]));
    assert!(idx.position(&mid("sem_other0")).is_none());
}
