//! Forgetting on recall through the engine: views, the revision cache by band, semantic
//! alignment, the sweep's state refresh, and decayed link intensities in retrieval.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap fixed literals

mod forget_recall {
    use chrono::{DateTime, Duration, Utc};
    use serde_json::json;
    use soul_mem_core::engine::{EmbedderChoice, Engine};
    use soul_mem_core::forget::*;
    use soul_mem_core::import::{import_bytes, ImportOptions};
    use soul_mem_core::model::{MemoryId, MemoryType};
    use soul_mem_core::retrieval::{
        AssociationConfig, EdgeDecay, HashEmbedder, NodeVectors, PipelineConfig, RetrievalIndex,
        SubQuery,
    };
    use soul_mem_core::store::ForgetState;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    const NARRATIVE: &str = "放学后我和小白去老街吃麻辣烫，小白把汤打翻了，我们笑了好久。";

    fn link(from: &str, to: &str, intensity: f64) -> serde_json::Value {
        json!({"from": from, "to": to, "intensity": intensity,
               "link_type": {"Sem": {"verb": "相关", "confidence": 0.9}}})
    }

    /// A small character: self, a specific situation, a semantic note, an abstract
    /// situation and a procedure, all created at `t0`.
    fn engine() -> Engine {
        let t = t0().to_rfc3339();
        let nodes = json!([
            {"id": "sem_self", "tags": ["我"], "create_time": t,
             "mem_type": {"Semantic": {"content": "小红", "aliases": [], "concept_type": "Entity",
                                        "description": "我是小红，高二学生。"}},
             "mem_links": [link("sem_self", "sem_xiaobai", 0.9)]},
            {"id": "sit_spill", "tags": ["麻辣烫"], "create_time": t,
             "mem_type": {"Situation": {"SpecificSituation": {"narrative": NARRATIVE,
                          "time_span": null, "context": {}}}},
             "mem_links": [link("sit_spill", "sem_xiaobai", 0.8),
                           link("sit_spill", "sit_abs_shop", 0.5)]},
            {"id": "sem_xiaobai", "tags": ["朋友"], "create_time": t,
             "mem_type": {"Semantic": {"content": "小白", "aliases": ["白白"],
                          "concept_type": "Entity",
                          "description": "小白是我最好的朋友，笑声特别响，做事毛手毛脚。"}},
             "mem_links": []},
            {"id": "sit_abs_shop", "tags": ["地点"], "create_time": t,
             "mem_type": {"Situation": {"AbstractSituation": {"Location": {"name": "老街麻辣烫",
                          "coordinates": ""}}}},
             "mem_links": []},
            {"id": "proc_braid", "tags": ["习惯"], "create_time": t,
             "mem_type": {"Procedure": {"action": {"content": "我会摸辫子。",
                          "action_type": "Speak"}}},
             "mem_links": []}
        ]);
        let graph =
            import_bytes("c", nodes.to_string().as_bytes(), &ImportOptions::default()).unwrap();
        Engine::new(graph)
    }

    fn id(e: &Engine, readable: &str) -> MemoryId {
        e.graph().resolve(readable).unwrap()
    }

    fn cfg() -> ForgetConfig {
        ForgetConfig::default()
    }

    #[test]
    fn forget_view_of_a_four_day_old_situation_is_masked_and_wants_a_revision() {
        let e = engine();
        let now = t0() + Duration::days(4);
        let ids: Vec<MemoryId> = ["sit_spill", "sem_self", "sit_abs_shop", "proc_braid"]
            .iter()
            .map(|r| id(&e, r))
            .collect();
        let v = e.forget_view(&ids, now, &cfg()).unwrap();
        // 96 h at a 24 h half-life: R = 1/16.
        assert!((v[0].missing_degree - 0.9375).abs() < 1e-9);
        assert_eq!((v[0].action, v[0].band), (ForgetAction::Revised, 9));
        assert!(v[0].needs_revision);
        assert!(v[0].visible_text.contains(MASK_MARKER));
        assert_eq!(Some(&v[0].visible_text), v[0].masked_text.as_ref());
        assert_eq!(v[0].original_text, NARRATIVE);
        let p = v[0].prompt.as_ref().unwrap();
        assert!(p.system.contains("小红"), "{}", p.system);
        assert_eq!(p.user, v[0].visible_text);
        // Core, abstract and procedure notes do not forget.
        for w in &v[1..] {
            assert_eq!((w.action, w.missing_degree), (ForgetAction::NoAction, 0.0));
            assert_eq!(w.visible_text, w.original_text);
            assert!(w.prompt.is_none() && !w.forgettable);
        }
        // Unknown ids are an error naming the id.
        let err = e
            .forget_view(&[MemoryId::random()], now, &cfg())
            .unwrap_err();
        assert_eq!(err.kind(), "not_found");
    }

    #[test]
    fn forget_view_bands_follow_the_thresholds() {
        let e = engine();
        let sit = id(&e, "sit_spill");
        // md = 1 - 2^(-h/24): 1 h → 0.028 (NoAction), 4 h → 0.109 (MaskOnly), 8 h → 0.206.
        let at = |h| {
            e.forget_view(&[sit], t0() + Duration::hours(h), &cfg())
                .unwrap()[0]
                .clone()
        };
        let (a, b, c) = (at(1), at(4), at(8));
        assert_eq!(a.action, ForgetAction::NoAction);
        assert_eq!(a.visible_text, NARRATIVE);
        assert_eq!(b.action, ForgetAction::MaskOnly);
        assert!(b.visible_text.contains(MASK_MARKER) && !b.needs_revision);
        assert_eq!(c.action, ForgetAction::Revised);
        // Monotone: every word masked at 4 h is masked at 8 h too.
        let mb = mask_text(NARRATIVE, b.missing_degree).unwrap();
        let mc = mask_text(NARRATIVE, c.missing_degree).unwrap();
        assert!(mb
            .masked_indices
            .iter()
            .all(|i| mc.masked_indices.contains(i)));
    }

    #[test]
    fn forget_revision_is_cached_for_its_band_and_asked_again_in_the_next() {
        let mut e = engine();
        let sit = id(&e, "sit_spill");
        let now = t0() + Duration::hours(8); // md 0.206, band 2
        let answer = "放学后我和小白去吃麻辣烫，好像是她把汤弄洒了，我们笑了很久。";
        let stored = e.forget_store_revision(&sit, answer, now, &cfg()).unwrap();
        assert_eq!(stored.state.band, 2);
        assert_eq!(stored.revision.view, answer);
        assert_eq!(stored.state.original_text.as_deref(), Some(NARRATIVE));
        assert!(!stored.note_changed);
        assert_eq!(e.take_forget_dirty(), vec![sit]);
        assert!(e.take_forget_dirty().is_empty());

        // Same band an hour later: the cached revision, no prompt.
        let v = &e
            .forget_view(&[sit], now + Duration::hours(1), &cfg())
            .unwrap()[0];
        assert_eq!((v.band, v.needs_revision), (2, false));
        assert_eq!(v.visible_text, answer);
        assert_eq!(v.cached_revision.as_deref(), Some(answer));
        // The graph keeps the original.
        assert_eq!(e.graph().get(&sit).unwrap().display_text(), NARRATIVE);

        // A day later the band moved: masked again, a new revision wanted.
        let v = &e
            .forget_view(&[sit], now + Duration::hours(24), &cfg())
            .unwrap()[0];
        assert_ne!(v.band, 2);
        assert!(v.needs_revision && v.cached_revision.is_none());
        assert!(v.visible_text.contains(MASK_MARKER));
    }

    #[test]
    fn forget_store_revision_refuses_bad_answers_and_notes_not_due_changing_nothing() {
        let mut e = engine();
        let sit = id(&e, "sit_spill");
        let proc_ = id(&e, "proc_braid");
        let late = t0() + Duration::days(2);
        // MaskOnly at 4 h: not due.
        let err = e
            .forget_store_revision(&sit, "x", t0() + Duration::hours(4), &cfg())
            .unwrap_err();
        assert_eq!(err.kind(), "invalid_argument");
        // Procedures never forget.
        assert!(e.forget_store_revision(&proc_, "x", late, &cfg()).is_err());
        // Blank answers and the masked text echoed back are no revision.
        assert!(e.forget_store_revision(&sit, "  \n", late, &cfg()).is_err());
        let masked = e.forget_view(&[sit], late, &cfg()).unwrap()[0]
            .visible_text
            .clone();
        assert!(e
            .forget_store_revision(&sit, &masked, late, &cfg())
            .is_err());
        // Invalid config.
        let bad = ForgetConfig {
            base_half_life_hours: -1.0,
            ..cfg()
        };
        assert!(e.forget_store_revision(&sit, "ok", late, &bad).is_err());
        assert!(e.forget_state(&sit).is_none());
        assert!(e.take_forget_dirty().is_empty());
    }

    #[test]
    fn forget_semantic_revision_aligns_fields_and_guards_alias_growth() {
        let mut e = engine();
        let sem = id(&e, "sem_xiaobai");
        let version = e.graph().version();
        // 20 h: md ≈ 0.44 (< 0.6: aliases may not grow).
        let now = t0() + Duration::hours(20);
        let v = &e.forget_view(&[sem], now, &cfg()).unwrap()[0];
        assert!(v.needs_revision);
        let p = v.prompt.as_ref().unwrap();
        assert!(p.system.contains("Aliases:") && p.user.contains("Description:"));
        // The masked view hides part of the description too.
        assert!(v.visible_text.contains(MASK_MARKER));
        let answer = "小白\nAliases: 白白, 小白同学, 白姐\nDescription: 我最好的朋友，笑起来很大声。\nConceptType: Entity";
        let stored = e.forget_store_revision(&sem, answer, now, &cfg()).unwrap();
        let aligned = stored.revision.aligned.clone().unwrap();
        assert_eq!(aligned.aliases, vec!["白白".to_owned()], "growth rejected");
        assert_eq!(aligned.description, "我最好的朋友，笑起来很大声。");
        assert!(stored.note_changed);
        assert!(e.graph().version() > version, "index must re-embed");
        assert_eq!(stored.revision.view, "小白：我最好的朋友，笑起来很大声。");
        match &e.graph().get(&sem).unwrap().mem_type {
            MemoryType::Semantic(s) => {
                assert_eq!(s.content, "小白", "content is never rewritten");
                assert_eq!(s.description, "我最好的朋友，笑起来很大声。");
            }
            other => panic!("{other:?}"),
        }
        // The original (with the old description) is kept for operators.
        assert_eq!(
            e.forget_state(&sem).unwrap().original_text.as_deref(),
            Some("小白：小白是我最好的朋友，笑声特别响，做事毛手毛脚。")
        );
        // Past 0.6 (two days) aliases may grow.
        let later = t0() + Duration::days(2);
        let stored = e
            .forget_store_revision(&sem, answer, later, &cfg())
            .unwrap();
        assert_eq!(stored.revision.aligned.unwrap().aliases.len(), 3);
        // Original text stays the first one recorded.
        assert_eq!(
            e.forget_state(&sem).unwrap().original_text.as_deref(),
            Some("小白：小白是我最好的朋友，笑声特别响，做事毛手毛脚。")
        );
    }

    #[test]
    fn forget_sweep_refreshes_states_and_drops_revisions_of_a_past_band() {
        let mut e = engine();
        let sit = id(&e, "sit_spill");
        let now = t0() + Duration::hours(8);
        e.forget_store_revision(&sit, "我记得是去吃了麻辣烫。", now, &cfg())
            .unwrap();
        e.take_forget_dirty();
        // Same band: the revision survives the sweep (only the degree is refreshed).
        let r = e.forget_sweep(now + Duration::minutes(30), &cfg()).unwrap();
        assert!(e.forget_state(&sit).unwrap().revised_text.is_some());
        assert_eq!(r.states_updated, 1);
        // Later band: dropped, degree and band refreshed, the original kept. Notes never
        // recalled get no state (their degree is computed at recall).
        let later = t0() + Duration::days(3);
        let r = e.forget_sweep(later, &cfg()).unwrap();
        let s = e.forget_state(&sit).unwrap();
        assert!(s.revised_text.is_none());
        assert_eq!(s.band, u32::from(band_of(s.missing_degree)));
        assert_eq!(s.original_text.as_deref(), Some(NARRATIVE));
        assert!(e.forget_state(&id(&e, "sem_xiaobai")).is_none());
        assert_eq!(r.states_updated, 1);
        assert_eq!(e.take_forget_dirty(), vec![sit]);
        // Idempotent at the same instant.
        assert_eq!(e.forget_sweep(later, &cfg()).unwrap().states_updated, 0);
        // 3 days: R(sit) = 1/8, so 0.5 × 1/8 < 0.1 prunes sit_spill → sit_abs_shop.
        let r = e
            .forget_sweep(
                later,
                &ForgetConfig {
                    prune_threshold: 0.07,
                    ..cfg()
                },
            )
            .unwrap();
        assert_eq!(r.pruned.len(), 1);
        assert_eq!(r.pruned[0].to, id(&e, "sit_abs_shop"));
    }

    #[test]
    fn forget_states_can_be_loaded_and_are_validated() {
        let mut e = engine();
        let sit = id(&e, "sit_spill");
        let state = |md: f64, band: u32| ForgetState {
            missing_degree: md,
            band,
            revised_text: Some("我记得好像去吃了麻辣烫。".into()),
            original_text: Some(NARRATIVE.into()),
            updated_at: t0(),
        };
        assert!(e.set_forget_state(sit, state(1.5, 9)).is_err());
        assert!(e.set_forget_state(sit, state(0.9, 11)).is_err());
        assert!(e
            .set_forget_state(MemoryId::random(), state(0.9, 9))
            .is_err());
        assert_eq!(e.forget_states().len(), 0);
        e.set_forget_state(sit, state(0.93, 9)).unwrap();
        assert_eq!(e.forget_states().len(), 1);
        // A loaded revision is used while the band matches (4 days: band 9).
        let v = &e
            .forget_view(&[sit], t0() + Duration::days(4), &cfg())
            .unwrap()[0];
        assert_eq!(v.visible_text, "我记得好像去吃了麻辣烫。");
        assert!(e.clear_forget_state(&sit).is_some());
    }

    #[test]
    fn forget_masked_display_handles_mixed_script_text() {
        let e = engine();
        let note = e.graph().get(&id(&e, "sit_spill")).unwrap();
        let mut mixed = note.clone();
        if let MemoryType::Situation(soul_mem_core::model::Situation::SpecificSituation(s)) =
            &mut mixed.mem_type
        {
            s.narrative = "周五和Alice在Starbucks喝了latte，聊了2个小时的AI project。".into();
        }
        let full = masked_display(&mixed, 1.0).unwrap();
        assert!(!full.contains("Alice") && !full.contains("Starbucks"));
        assert!(
            full.contains("，") && full.contains("。"),
            "punctuation is kept"
        );
        let half = masked_display(&mixed, 0.5).unwrap();
        assert_eq!(half, masked_display(&mixed, 0.5).unwrap(), "deterministic");
        assert_eq!(masked_display(&mixed, 0.0).unwrap(), mixed.display_text());
    }

    #[test]
    fn forget_decay_flattens_ppr_rows_of_faded_sources() {
        let e = engine();
        let g = e.graph();
        let vectors = NodeVectors::embed_graph(g, &HashEmbedder::new(32).unwrap()).unwrap();
        let idx = RetrievalIndex::build(g, vectors).unwrap();
        let cfg = AssociationConfig::default();
        let spill = g.index_of(&id(&e, "sit_spill")).unwrap();
        let row = |csr: &soul_mem_core::retrieval::Csr| csr.row(spill).1.to_vec();
        let plain = idx.transition(&cfg).unwrap();
        let ones = EdgeDecay::new(vec![1.0; g.len()]).unwrap();
        assert_eq!(
            row(&idx.transition_decayed(&cfg, Some(&ones)).unwrap()),
            row(&plain)
        );
        // Fully faded source: intensities 0.8 vs 0.5 no longer matter, only link type.
        let mut f = vec![1.0; g.len()];
        f[spill] = 0.0;
        let faded = idx
            .transition_decayed(&cfg, Some(&EdgeDecay::new(f).unwrap()))
            .unwrap();
        let (p, q) = (row(&plain), row(&faded));
        assert_eq!(p.len(), 2);
        assert!(p[0] > p[1], "fresh: the stronger link leads");
        assert!((q[0] - q[1]).abs() < (p[0] - p[1]).abs());
        assert!(EdgeDecay::new(vec![1.5]).is_err());
        assert!(idx
            .transition_decayed(&cfg, Some(&EdgeDecay::new(vec![1.0]).unwrap()))
            .is_err());
    }

    #[test]
    fn forget_decay_changes_engine_recall_scores_with_time() {
        let mut e = engine();
        e.embed_all(
            EmbedderChoice::Hash(HashEmbedder::new(64).unwrap()),
            &|_, _| {},
        )
        .unwrap();
        let q: Vec<SubQuery> = soul_mem_core::text::text_queries("小白把麻辣烫打翻了", 3);
        let pc = PipelineConfig::default();
        let score = |r: &soul_mem_core::retrieval::PipelineResult, rid: &str| {
            r.memories
                .iter()
                .find(|m| m.readable_id == rid)
                .map(|m| m.score)
        };
        let fresh = e.recall_at(&q, &pc, None, t0()).unwrap();
        let old = e
            .recall_at(&q, &pc, None, t0() + Duration::days(30))
            .unwrap();
        assert!(!fresh.memories.is_empty());
        let changed = fresh
            .memories
            .iter()
            .any(|m| score(&old, &m.readable_id).is_none_or(|s| (s - m.score).abs() > 1e-12));
        assert!(changed, "decay must reach the PPR weights");
        // Same instant, same answer (the decayed matrix is cached and reused).
        let again = e
            .recall_at(&q, &pc, None, t0() + Duration::days(30))
            .unwrap();
        assert_eq!(old.memories, again.memories);
    }
}
