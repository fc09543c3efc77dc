//! Association, Bayes actions, AssociateWithAction, the DefaultPipeline and its configs:
//! one test per seed rule.
#![allow(clippy::unwrap_used)]

mod retrieval_util;
use retrieval_util::*;

use soul_mem_core::model::NodeKind;
use soul_mem_core::retrieval::*;
use soul_mem_core::rng::SplitMix64;

fn pos(idx: &RetrievalIndex, id: &str) -> u32 {
    idx.position(&mid(id)).unwrap() as u32
}

/// s1 (specific) → a1 (abstract) ; s1 → p1 (0.6) ; a1 → p2 (0.5) ; s2 → p1 (0.4);
/// sem "self" → p3 (0.9) and sem link self → s1.
fn world() -> soul_mem_core::graph::MemoryGraph {
    let mut s1 = spec("s1", "在茶会上喝红茶", None);
    sit_link(&mut s1, "a1");
    trig(&mut s1, "p1", 0.6);
    sem_link(&mut s1, "p3", 1.0); // into a Procedure: weight 0 for PPR
    let mut a1 = abs_loc("a1", "茶会");
    trig(&mut a1, "p2", 0.5);
    let mut s2 = spec("s2", "下午在花园散步", None);
    trig(&mut s2, "p1", 0.4);
    let mut me = sem("self", "我", "一个喜欢红茶的人", &["自身"]);
    trig(&mut me, "p3", 0.9);
    sem_link(&mut me, "s1", 0.9);
    graph(vec![
        s1,
        a1,
        s2,
        me,
        proc_node("p1", "端上红茶"),
        proc_node("p2", "邀请朋友"),
        proc_node("p3", "自称我辈"),
    ])
}

fn index() -> RetrievalIndex {
    RetrievalIndex::build_with_embedder(&world(), &HashEmbedder::new(128).unwrap()).unwrap()
}

#[test]
fn bayes_sums_prob_times_weight_and_ignores_semantic_sources() {
    let idx = index();
    let src = [
        (pos(&idx, "s1"), 0.5),
        (pos(&idx, "s2"), 0.5),
        (pos(&idx, "self"), 1.0),
    ];
    let acts = bayes_actions(&idx, &src, 5);
    assert_eq!(acts.len(), 1, "{acts:?}");
    assert_eq!(acts[0].0, pos(&idx, "p1"));
    assert!((acts[0].1 - (0.6 * 0.5 + 0.4 * 0.5)).abs() < 1e-12);
    assert_eq!(acts[0].2.len(), 2);
    assert!(bayes_actions(&idx, &src, 0).is_empty());
}

#[test]
fn ppr_never_returns_procedures_and_reaches_abstract_patterns() {
    let idx = index();
    let out = association(
        &idx,
        &[(pos(&idx, "s1"), 1.0)],
        &AssociationConfig::default(),
    )
    .unwrap();
    assert!(out
        .iter()
        .all(|(i, _)| idx.node(*i as usize).unwrap().kind != NodeKind::Procedure));
    assert!(out.iter().any(|(i, _)| *i == pos(&idx, "a1")));
    let sum: f64 = out.iter().map(|x| x.1).sum();
    assert!(sum <= 1.0 + 1e-9);
    // Procedure-only, unknown or zero-weight sources: empty, not an error.
    assert!(association(
        &idx,
        &[(pos(&idx, "p1"), 1.0)],
        &AssociationConfig::default()
    )
    .unwrap()
    .is_empty());
    assert!(
        association(&idx, &[(999, 1.0)], &AssociationConfig::default())
            .unwrap()
            .is_empty()
    );
    assert!(
        association(&idx, &[(0, 0.0)], &AssociationConfig::default())
            .unwrap()
            .is_empty()
    );
    assert!(association_by_id(
        &idx,
        &[(soul_mem_core::model::MemoryId::random(), 1.0)],
        &AssociationConfig::default()
    )
    .unwrap()
    .is_empty());
    // damping 1 is rejected.
    let bad = AssociationConfig {
        damping_factor: 1.0,
        ..Default::default()
    };
    assert!(association(&idx, &[(0, 1.0)], &bad).is_err());
}

#[test]
fn the_walk_steps_back_along_links_unless_told_not_to() {
    // a1 is linked from s1 only: walking from a1, s1 is reached backwards; the habit p1
    // (s1's trigger→action link) is never walked into, either way.
    let idx = index();
    let from_a1 = |reverse_links: f64| {
        let cfg = AssociationConfig {
            reverse_links,
            ..Default::default()
        };
        association(&idx, &[(pos(&idx, "a1"), 1.0)], &cfg).unwrap()
    };
    let undirected = from_a1(1.0);
    assert!(
        undirected.iter().any(|(i, _)| *i == pos(&idx, "s1")),
        "{undirected:?}"
    );
    assert!(undirected
        .iter()
        .all(|(i, _)| idx.node(*i as usize).unwrap().kind != NodeKind::Procedure));
    let forwards = from_a1(0.0);
    assert!(
        !forwards.iter().any(|(i, _)| *i == pos(&idx, "s1")),
        "{forwards:?}"
    );
    let bad = AssociationConfig {
        reverse_links: 1.5,
        ..Default::default()
    };
    assert!(association(&idx, &[(0, 1.0)], &bad).is_err());
}

#[test]
fn associate_with_action_doubles_abstract_sources_before_softmax() {
    let idx = index();
    let seeds = [
        (pos(&idx, "s1"), 0.5),
        (pos(&idx, "a1"), 0.5),
        (pos(&idx, "self"), 0.9),
    ];
    let cfg = AssociateWithActionConfig::default();
    let r = associate_with_action(&idx, &seeds, &cfg).unwrap();
    // Sources: situations only, max(similarity, PPR) per node.
    assert!(r.action_sources.iter().all(|(i, _)| idx
        .node(*i as usize)
        .unwrap()
        .kind
        .is_situation()));
    let raw: Vec<(u32, f64, bool)> = r
        .action_sources
        .iter()
        .map(|&(i, _)| {
            let sim = seeds.iter().find(|s| s.0 == i).map_or(0.0, |s| s.1);
            let ppr = r.memory.iter().find(|s| s.0 == i).map_or(0.0, |s| s.1);
            (
                i,
                sim.max(ppr),
                idx.node(i as usize).unwrap().kind == NodeKind::AbstractSituation,
            )
        })
        .collect();
    for ((_, w), (_, want, _)) in r.action_sources.iter().zip(&raw) {
        assert!((w - want).abs() < 1e-12);
    }
    // Bayes runs over the softmax of the doubled-abstract sources at the source temperature.
    let scaled: Vec<f64> = raw
        .iter()
        .map(|&(_, s, a)| if a { 2.0 * s } else { s } / cfg.source_temperature)
        .collect();
    let weights: Vec<(u32, f64)> = raw.iter().map(|r| r.0).zip(softmax(&scaled)).collect();
    let mut want = bayes_actions(&idx, &weights, cfg.bayes.top_k);
    want.truncate(cfg.action_top_k);
    assert_eq!(r.action, want);
    assert!(r.action.len() <= 3);
    assert!(r
        .action
        .iter()
        .all(|a| idx.node(a.0 as usize).unwrap().kind == NodeKind::Procedure));
}

#[test]
fn softmax_is_stable() {
    let s = softmax(&[1000.0, 1000.0]);
    assert_eq!(s, vec![0.5, 0.5]);
    assert!(softmax(&[]).is_empty());
}

#[test]
fn default_pipeline_traces_memories_and_keeps_actions_separate() {
    let idx = index();
    let e = HashEmbedder::new(128).unwrap();
    let q: Vec<SubQuery> = serde_json::from_str(
        r#"[{"priority":2,"tag":[],"variant":{"Situation":[{"narrative":"在茶会上喝红茶"}]}},
            {"priority":1,"tag":["自身"],"variant":{"Semantic":[{"concept_identifier":"我","description":"喜欢红茶的人"}]}}]"#,
    )
    .unwrap();
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = 0.2;
    // Triggers only here (habit likeness has its own test).
    cfg.assoc_with_action.habit_match = 0.0;
    let short = ShortContext {
        messages: vec!["a".into(), "b".into(), "c".into()],
        summary: Some("s".into()),
    };
    cfg.short_mem_with_history.clipping_length = Some(2);
    let r = DefaultPipeline::run_with_embedder(&idx, &q, &e, &cfg, Some(short)).unwrap();
    assert_eq!(r.short_history, ["b", "c"]);
    assert_eq!(r.short_summary, None);
    assert!(!r.memories.is_empty());
    assert!(r.memories.len() <= 10);
    assert!(r.memories.windows(2).all(|w| w[0].score >= w[1].score));
    for m in &r.memories {
        assert_ne!(m.kind, NodeKind::Procedure);
        assert!(!m.seeds.is_empty());
        if m.stage == Stage::Similarity {
            assert_eq!(m.seeds, vec![m.id]);
        }
    }
    let ids: Vec<&str> = r.memories.iter().map(|m| m.readable_id.as_str()).collect();
    assert!(ids.contains(&"s1"), "{ids:?}");
    // s1 triggers p1, its abstract pattern a1 triggers p2.
    let acts: Vec<&str> = r.actions.iter().map(|a| a.readable_id.as_str()).collect();
    assert!(acts.contains(&"p1"), "{acts:?}");
    assert!(r
        .actions
        .iter()
        .all(|a| a.stage == Stage::Action && !a.seeds.is_empty()));
    // The semantic self node reaches p3 only as self-knowledge.
    assert!(!acts.contains(&"p3"));
    assert!(
        r.self_knowledge.iter().any(|a| a.readable_id == "p3"),
        "{:?}",
        r.self_knowledge
    );
    // Serialisable for the NIF.
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["memories"][0]["stage"].is_string());
    assert!(json["memories"][0]["kind"].is_string());
}

#[test]
fn a_query_describing_a_habit_evokes_it_without_its_trigger_situation() {
    let idx = index();
    let e = HashEmbedder::new(128).unwrap();
    // Nothing here is like s1 or s2 (the triggers): only p2's own text.
    let q: Vec<SubQuery> = serde_json::from_str(
        r#"[{"priority":1,"tag":[],"variant":{"Semantic":[{"concept_identifier":"邀请朋友","description":"邀请朋友"}]}}]"#,
    )
    .unwrap();
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = 0.2;
    let r = DefaultPipeline::run_with_embedder(&idx, &q, &e, &cfg, None).unwrap();
    let p2 = r.actions.iter().find(|a| a.readable_id == "p2");
    let p2 = p2.unwrap_or_else(|| panic!("{:?}", r.actions));
    // Found by its likeness alone: it is its own source.
    assert_eq!(p2.seeds, vec![mid("p2")]);
    assert_eq!(r.actions[0].readable_id, "p2");
    // Off: back to triggers alone, and the habits least like the query never come.
    cfg.assoc_with_action.habit_match = 0.0;
    let r = DefaultPipeline::run_with_embedder(&idx, &q, &e, &cfg, None).unwrap();
    assert!(r
        .actions
        .iter()
        .all(|a| a.readable_id != "p2" || a.seeds != vec![mid("p2")]));
    cfg.assoc_with_action.habit_match = -1.0;
    let err = DefaultPipeline::run_with_embedder(&idx, &q, &e, &cfg, None).unwrap_err();
    assert!(err.to_string().contains("habit_match"), "{err}");
}

#[test]
fn a_query_describing_a_habit_recalls_the_self_who_has_it() {
    // The self note links to no habit: every procedure is the character's own.
    let g = graph(vec![
        sem("sem_self", "小红", "一个学生", &["自身"]),
        sem("friend", "小白", "同班同学", &["朋友"]),
        spec("s1", "在教室里讨论作业", None),
        proc_node("p1", "把画稿拖到最后一刻才交"),
    ]);
    let idx = RetrievalIndex::build_with_embedder(&g, &HashEmbedder::new(128).unwrap()).unwrap();
    let e = HashEmbedder::new(128).unwrap();
    let q: Vec<SubQuery> = serde_json::from_str(
        r#"[{"priority":1,"tag":[],"variant":{"Semantic":[{"concept_identifier":"把画稿拖到最后一刻才交","description":"把画稿拖到最后一刻才交"}]}}]"#,
    )
    .unwrap();
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = 0.2;
    cfg.max_memories = 1;
    let first = |cfg: &PipelineConfig| {
        let r = DefaultPipeline::run_with_embedder(&idx, &q, &e, cfg, None).unwrap();
        r.memories.first().map(|m| m.readable_id.clone())
    };
    assert_eq!(first(&cfg).as_deref(), Some("sem_self"));
    cfg.similarity.blend.own_habits = 0.0;
    assert_ne!(first(&cfg).as_deref(), Some("sem_self"));
}

#[test]
fn a_habit_is_fused_over_its_tags_like_any_note() {
    // The friend's text is the query's; the habit's is close and shares the query's tag.
    // Over the same channels (tag and text) the habit is the closer: the self answers.
    let build = |habit_tag: &str| {
        let mut p1 = proc_node("p1", "总是拖稿总是拖稿啊");
        p1.tags = vec![habit_tag.to_string()];
        let g = graph(vec![
            sem("sem_self", "小红", "一个学生", &["自身"]),
            sem("friend", "总是拖稿", "总是拖稿", &["朋友"]),
            p1,
        ]);
        RetrievalIndex::build_with_embedder(&g, &HashEmbedder::new(128).unwrap()).unwrap()
    };
    let e = HashEmbedder::new(128).unwrap();
    let q: Vec<SubQuery> = serde_json::from_str(
        r#"[{"priority":1,"tag":["习惯"],"variant":{"Semantic":[{"concept_identifier":"总是拖稿","description":"总是拖稿"}]}}]"#,
    )
    .unwrap();
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = 0.2;
    let recalls_self = |idx: &RetrievalIndex| {
        let r = DefaultPipeline::run_with_embedder(idx, &q, &e, &cfg, None).unwrap();
        r.memories.iter().any(|m| m.readable_id == "sem_self")
    };
    assert!(recalls_self(&build("习惯")));
    // The same habit under an unrelated tag is less like the query than the friend.
    assert!(!recalls_self(&build("天气")));
}

#[test]
fn a_query_describing_a_habit_walks_from_where_the_habit_happens() {
    // s_rain triggers the habit but shares no words with the query: only the walk that
    // starts at the habit's trigger situations finds it, and its trace starts at the habit.
    let mut s_rain = spec("s_rain", "下雨天待在屋里", None);
    trig(&mut s_rain, "p1", 0.8);
    let g = graph(vec![
        sem("sem_self", "小红", "一个学生", &["自身"]),
        sem("friend", "小白", "同班同学", &["朋友"]),
        s_rain,
        spec("s2", "在操场上跑步", None),
        proc_node("p1", "掏出一本厚书凑近看"),
    ]);
    let idx = RetrievalIndex::build_with_embedder(&g, &HashEmbedder::new(128).unwrap()).unwrap();
    let e = HashEmbedder::new(128).unwrap();
    let q: Vec<SubQuery> = serde_json::from_str(
        r#"[{"priority":1,"tag":[],"variant":{"Semantic":[{"concept_identifier":"掏出一本厚书凑近看","description":"掏出一本厚书凑近看"}]}}]"#,
    )
    .unwrap();
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = 0.5;
    let r = DefaultPipeline::run_with_embedder(&idx, &q, &e, &cfg, None).unwrap();
    let rain = r.memories.iter().find(|m| m.readable_id == "s_rain");
    let rain = rain.unwrap_or_else(|| panic!("{:?}", r.memories));
    assert_eq!(rain.seeds, vec![mid("sem_self")]);
    assert_eq!(rain.path.first(), Some(&mid("p1")));
    assert_eq!(rain.path.last(), Some(&mid("s_rain")));
    assert!(r.memories.iter().all(|m| m.readable_id != "s2"));
    // Without the habits held by the self, nothing leads there.
    cfg.similarity.blend.own_habits = 0.0;
    let r = DefaultPipeline::run_with_embedder(&idx, &q, &e, &cfg, None).unwrap();
    assert!(r.memories.iter().all(|m| m.readable_id != "s_rain"));
}

#[test]
fn priority_adds_at_most_the_offset() {
    let idx = index();
    let e = HashEmbedder::new(128).unwrap();
    let one: SubQuery = serde_json::from_str(
        r#"{"priority":1,"tag":[],"variant":{"Situation":[{"narrative":"下午在花园散步"}]}}"#,
    )
    .unwrap();
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = 0.0;
    let zero = PipelineConfig {
        priority_offset: 0.0,
        ..cfg.clone()
    };
    let base =
        DefaultPipeline::run_with_embedder(&idx, std::slice::from_ref(&one), &e, &zero, None)
            .unwrap();
    let alone =
        DefaultPipeline::run_with_embedder(&idx, std::slice::from_ref(&one), &e, &cfg, None)
            .unwrap();
    // A single query gets the full offset (its priority is the max).
    for (a, b) in base.memories.iter().zip(&alone.memories) {
        assert!((b.score - a.score - 0.05).abs() < 1e-12);
    }
    // Next to a priority-4 query, the priority-1 query's items gain 0.05·1/4 at most.
    let mut hi = one.clone();
    hi.priority = 4;
    hi.variant = serde_json::from_str(
        r#"{"Semantic":[{"concept_identifier":"不存在的东西xyz","description":""}]}"#,
    )
    .unwrap();
    let both = DefaultPipeline::run_with_embedder(&idx, &[one, hi], &e, &cfg, None).unwrap();
    for m in &both.memories {
        if let Some(b) = base.memories.iter().find(|b| b.id == m.id) {
            assert!(m.score >= b.score + 0.0125 - 1e-12);
            assert!(m.score <= b.score + 0.05 + 1.0);
        }
    }
}

#[test]
fn pipeline_rejects_mismatched_vectors_and_bad_config() {
    let idx = index();
    let q: SubQuery = serde_json::from_str(r#"{"priority":1,"tag":[],"variant":{"Semantic":[{"concept_identifier":"我","description":""}]}}"#).unwrap();
    let cfg = PipelineConfig::default();
    assert!(DefaultPipeline::run(&idx, std::slice::from_ref(&q), &[], &cfg, None).is_err());
    assert!(DefaultPipeline::run(
        &idx,
        std::slice::from_ref(&q),
        &[vec![vec![1.0; 3]]],
        &cfg,
        None
    )
    .is_err());
    let mut bad = cfg.clone();
    bad.assoc_with_action.association.damping_factor = 1.0;
    let v = embed_query(&q, &HashEmbedder::new(128).unwrap()).unwrap();
    assert!(DefaultPipeline::run(&idx, std::slice::from_ref(&q), &[v], &bad, None).is_err());
    // No queries: empty result.
    let r = DefaultPipeline::run(&idx, &[], &[], &cfg, None).unwrap();
    assert!(r.memories.is_empty() && r.actions.is_empty());
}

#[test]
fn configs_have_seed_defaults_and_validate() {
    let c: PipelineConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(c, PipelineConfig::default());
    assert_eq!(c.similarity.similarity_threshold, 0.35);
    assert_eq!(c.similarity.max_results, 2);
    let f = &c.similarity.fusion;
    assert_eq!(
        (f.method, f.dense, f.tag, f.lexical),
        (FusionMethod::Zscore, 1.0, 0.25, 1.0)
    );
    assert_eq!(c.assoc_with_action.association.blend, 0.9);
    assert_eq!(c.assoc_with_action.association.reverse_links, 1.0);
    assert_eq!(
        c.assoc_with_action.association.lift,
        LiftTargets::Situations
    );
    assert_eq!(c.similarity.blend.own_habits, 1.0);
    assert_eq!(c.assoc_with_action.association.hub_exponent, 0.5);
    // Fusion and blend weights that are negative, non-finite or all zero are refused by name.
    for (json, field) in [
        (
            r#"{"similarity":{"fusion":{"lexical":-1}}}"#,
            "fusion.lexical",
        ),
        (
            r#"{"similarity":{"fusion":{"dense":0,"tag":0,"lexical":0}}}"#,
            "fusion.dense",
        ),
        (r#"{"similarity":{"fusion":{"rrf_k":0}}}"#, "fusion.rrf_k"),
        (
            r#"{"assoc_with_action":{"association":{"blend":1.5}}}"#,
            "blend",
        ),
        (
            r#"{"assoc_with_action":{"association":{"hub_exponent":-0.5}}}"#,
            "hub_exponent",
        ),
        (
            r#"{"assoc_with_action":{"source_temperature":0}}"#,
            "source_temperature",
        ),
    ] {
        let bad: PipelineConfig = serde_json::from_str(json).unwrap();
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(field), "{json}: {e}");
    }
    let nan = PipelineConfig {
        similarity: SimilarityConfig {
            fusion: FusionConfig {
                tag: f64::NAN,
                ..FusionConfig::default()
            },
            ..SimilarityConfig::default()
        },
        ..PipelineConfig::default()
    };
    assert!(nan
        .validate()
        .unwrap_err()
        .to_string()
        .contains("fusion.tag"));
    assert_eq!(c.similarity.blend.tag, 0.3);
    assert_eq!(c.similarity.blend.variant, 0.7);
    assert_eq!(c.similarity.blend.string_blend_alpha, 0.6);
    let a = &c.assoc_with_action;
    assert_eq!((a.action_top_k, a.abstract_source_priority), (3, 2.0));
    let p = &a.association;
    assert_eq!(
        (
            p.intensity_factor,
            p.confidence_factor,
            p.damping_factor,
            p.residue_threshold,
            p.top_k
        ),
        (1.0, 0.8, 0.65, 1e-5, 8)
    );
    assert_eq!(p.preference, TypePreference::Situation);
    assert_eq!(BayesActionConfig::default().top_k, 5);
    assert_eq!(
        c.short_mem_with_history,
        ShortOnlyConfig {
            clipping_length: None,
            include_summary: false
        }
    );
    assert_eq!(c.max_memories, 10);
    c.validate().unwrap();

    let partial: PipelineConfig =
        serde_json::from_str(r#"{"similarity":{"similarity_threshold":0.5},"assoc_with_action":{"association":{"preference":"Semantic"}}}"#).unwrap();
    assert_eq!(partial.similarity.similarity_threshold, 0.5);
    assert_eq!(partial.similarity.max_results, 2);
    assert_eq!(
        partial.assoc_with_action.association.preference,
        TypePreference::Semantic
    );
    assert!(serde_json::from_str::<PipelineConfig>(r#"{"similarty":{}}"#).is_err());
    assert!(serde_json::from_str::<SimilarityConfig>(r#"{"blend":{"tagg":0.1}}"#).is_err());

    for bad in [
        r#"{"assoc_with_action":{"association":{"damping_factor":1.0}}}"#,
        r#"{"assoc_with_action":{"association":{"residue_threshold":0}}}"#,
        r#"{"assoc_with_action":{"abstract_source_priority":-1}}"#,
        r#"{"similarity":{"similarity_threshold":2}}"#,
        r#"{"similarity":{"blend":{"tag":0,"variant":0}}}"#,
        r#"{"similarity":{"blend":{"string_blend_alpha":1.5}}}"#,
        r#"{"priority_offset":-0.1}"#,
    ] {
        let c: PipelineConfig = serde_json::from_str(bad).unwrap();
        assert!(c.validate().is_err(), "{bad}");
    }
}

#[test]
fn index_refresh_tracks_graph_version() {
    let mut g = world();
    let e = HashEmbedder::new(32).unwrap();
    let mut idx = RetrievalIndex::build_with_embedder(&g, &e).unwrap();
    assert!(idx.is_current(&g));
    assert!(!idx.refresh(&g, None).unwrap());
    g.insert(sem("new", "新概念", "", &[])).unwrap();
    assert!(!idx.is_current(&g));
    // The old vectors no longer line up: an error asks for re-embedding.
    assert!(idx.refresh(&g, None).is_err());
    let nv = NodeVectors::embed_graph(&g, &e).unwrap();
    assert!(idx.refresh(&g, Some(nv)).unwrap());
    assert!(idx.is_current(&g));
    assert_eq!(idx.len(), 8);
    // Changing the association weights rebuilds the transition matrix only for that config.
    let a = idx.transition(&AssociationConfig::default()).unwrap();
    let b = idx.transition(&AssociationConfig::default()).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    let sem_pref = AssociationConfig {
        preference: TypePreference::Semantic,
        ..Default::default()
    };
    let c = idx.transition(&sem_pref).unwrap();
    assert!(!std::sync::Arc::ptr_eq(&a, &c));
}

#[test]
fn procedures_never_appear_in_ppr_output_on_random_graphs() {
    let mut rng = SplitMix64::new(0x1234_5678);
    let mut next = move |n: u64| rng.next_u64() % n.max(1);
    for case in 0..200 {
        let n = 2 + next(40) as usize;
        let kinds: Vec<u64> = (0..n).map(|_| next(4)).collect();
        let name = |i: usize| format!("n{i}");
        let mut notes: Vec<_> = (0..n)
            .map(|i| match kinds[i] {
                0 => sem(&name(i), "x", "", &[]),
                1 => spec(&name(i), "x", None),
                2 => abs_loc(&name(i), "x"),
                _ => proc_node(&name(i), "x"),
            })
            .collect();
        for _ in 0..next(4 * n as u64) {
            let (u, v) = (next(n as u64) as usize, next(n as u64) as usize);
            match next(3) {
                0 => sem_link(&mut notes[u], &name(v), 0.7),
                1 => sit_link(&mut notes[u], &name(v)),
                _ => trig(&mut notes[u], &name(v), 0.5),
            }
        }
        let g = graph(notes);
        let idx = RetrievalIndex::build_with_embedder(&g, &HashEmbedder::new(8).unwrap()).unwrap();
        let seeds: Vec<(u32, f64)> = (0..1 + next(3))
            .map(|_| (next(n as u64) as u32, 0.1 + next(10) as f64))
            .collect();
        let cfg = AssociationConfig {
            top_k: n,
            ..Default::default()
        };
        let out = association(&idx, &seeds, &cfg).unwrap();
        for (i, s) in &out {
            assert_ne!(
                idx.node(*i as usize).unwrap().kind,
                NodeKind::Procedure,
                "case {case}"
            );
            assert!(*s > 0.0 && s.is_finite());
        }
        let total: f64 = out.iter().map(|x| x.1).sum();
        assert!(total <= 1.0 + 1e-9, "case {case}: {total}");
        let usable = seeds
            .iter()
            .any(|(i, _)| idx.node(*i as usize).unwrap().kind != NodeKind::Procedure);
        assert_eq!(usable, !out.is_empty(), "case {case}");
    }
}

#[test]
fn bayes_keeps_its_top_k_then_associate_with_action_its_action_top_k() {
    // One situation triggering seven procedures with distinct probabilities.
    let mut s = spec("s", "在茶会上喝红茶", None);
    let mut notes = Vec::new();
    for j in 0..7 {
        trig(&mut s, &format!("p{j}"), 0.1 + 0.1 * j as f64);
        notes.push(proc_node(&format!("p{j}"), &format!("动作{j}")));
    }
    notes.insert(0, s);
    let g = graph(notes);
    let idx = RetrievalIndex::build_with_embedder(&g, &HashEmbedder::new(32).unwrap()).unwrap();
    let seeds = [(pos(&idx, "s"), 1.0)];
    let ids = |cfg: &AssociateWithActionConfig| -> Vec<String> {
        associate_with_action(&idx, &seeds, cfg)
            .unwrap()
            .action
            .iter()
            .map(|a| idx.node(a.0 as usize).unwrap().readable_id.clone())
            .collect()
    };
    // Seed defaults: Bayes keeps 5, AssociateWithAction returns the best 3 of them.
    let d = AssociateWithActionConfig::default();
    assert_eq!((d.bayes.top_k, d.action_top_k), (5, 3));
    assert_eq!(ids(&d), ["p6", "p5", "p4"]);
    // A larger action_top_k cannot exceed what Bayes kept.
    let wide = AssociateWithActionConfig {
        action_top_k: 10,
        ..Default::default()
    };
    assert_eq!(ids(&wide), ["p6", "p5", "p4", "p3", "p2"]);
    // A smaller Bayes top-k bounds the result.
    let narrow = AssociateWithActionConfig {
        bayes: BayesActionConfig { top_k: 2 },
        ..Default::default()
    };
    assert_eq!(ids(&narrow), ["p6", "p5"]);
    // Through the pipeline config, with unknown keys rejected.
    let c: PipelineConfig =
        serde_json::from_str(r#"{"assoc_with_action":{"bayes":{"top_k":4},"action_top_k":9}}"#)
            .unwrap();
    c.validate().unwrap();
    assert_eq!(ids(&c.assoc_with_action).len(), 4);
    assert!(serde_json::from_str::<PipelineConfig>(
        r#"{"assoc_with_action":{"bayes":{"topk":4}}}"#
    )
    .is_err());
}
