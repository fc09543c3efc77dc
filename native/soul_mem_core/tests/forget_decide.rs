//! Forgetting: the lazy decision, masked views, the revision prompt and applying revisions.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap fixed literals

use chrono::{DateTime, Duration, Utc};
use soul_mem_core::forget::*;
use soul_mem_core::model::*;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn situation(narrative: &str) -> MemoryNote {
    MemoryNote::new(
        "小红",
        "sit",
        MemoryType::Situation(Situation::SpecificSituation(SpecificSituation {
            narrative: narrative.into(),
            time_span: None,
            context: Context::default(),
        })),
        t0(),
    )
}

fn semantic(content: &str, description: &str) -> MemoryNote {
    MemoryNote::new(
        "小红",
        "sem",
        MemoryType::Semantic(SemMemory {
            content: content.into(),
            aliases: vec!["小白白".into()],
            concept_type: ConceptType::Entity,
            description: description.into(),
        }),
        t0(),
    )
}

fn procedure() -> MemoryNote {
    MemoryNote::new(
        "小红",
        "proc",
        MemoryType::Procedure(ProcMemory {
            action: Action {
                content: "打招呼".into(),
                action_type: ActionType::Speak,
            },
        }),
        t0(),
    )
}

fn abstract_note() -> MemoryNote {
    MemoryNote::new(
        "小红",
        "abs",
        MemoryType::Situation(Situation::AbstractSituation(AbstractSituation::Event(
            Event {
                action: "吃饭".into(),
                action_intensity: 0.5,
                initiator: "小红".into(),
                target: String::new(),
            },
        ))),
        t0(),
    )
}

const NARRATIVE: &str = "昨天下午我们团队在会议室开了三个小时的 Sprint 回顾会议";

#[test]
fn t4_offsets_fall_into_the_three_bands() {
    let cfg = ForgetConfig::default();
    let note = situation(NARRATIVE);
    let at = |h| decide(&note, t0() + Duration::hours(h), &cfg);
    assert_eq!(at(0).action, ForgetAction::NoAction);
    assert_eq!(at(4).action, ForgetAction::MaskOnly);
    assert_eq!(at(96).action, ForgetAction::Revised);
    // Threshold edges, via hours: md = 0.05 exactly is MaskOnly, 0.15 exactly is Revised.
    assert_eq!(action_for(0.049_999, &cfg), ForgetAction::NoAction);
    assert_eq!(action_for(0.05, &cfg), ForgetAction::MaskOnly);
    assert_eq!(action_for(0.149_999, &cfg), ForgetAction::MaskOnly);
    assert_eq!(action_for(0.15, &cfg), ForgetAction::Revised);
}

#[test]
fn only_specific_situations_and_semantic_notes_forget() {
    let cfg = ForgetConfig::default();
    let late = t0() + Duration::hours(500);
    assert_eq!(
        decide(&situation("x"), late, &cfg).action,
        ForgetAction::Revised
    );
    assert_eq!(
        decide(&semantic("小白", ""), late, &cfg).action,
        ForgetAction::Revised
    );
    for n in [procedure(), abstract_note()] {
        let d = decide(&n, late, &cfg);
        assert_eq!(d.action, ForgetAction::NoAction);
        assert_eq!(d.missing_degree, 0.0);
    }
    let mut core = situation("我是小红");
    core.core = true;
    assert_eq!(decide(&core, late, &cfg).action, ForgetAction::NoAction);
}

#[test]
fn decision_band_is_floor_of_tenths() {
    let cfg = ForgetConfig::default();
    let note = situation(NARRATIVE);
    let d = decide(&note, t0() + Duration::hours(24), &cfg);
    assert!((d.missing_degree - 0.5).abs() < 1e-9);
    assert_eq!(d.band, 5);
    assert_eq!(band_of(0.0), 0);
    assert_eq!(band_of(0.099), 0);
    assert_eq!(band_of(0.1), 1);
    assert_eq!(band_of(0.95), 9);
    assert_eq!(band_of(1.0), 10);
    assert_eq!(band_of(f64::NAN), 0);
    // Recalls slow forgetting: same time, lower band.
    let mut recalled = note.clone();
    recalled.retrieval_count = 10;
    assert!(decide(&recalled, t0() + Duration::hours(24), &cfg).band < d.band);
}

#[test]
fn decide_at_matches_decide() {
    let cfg = ForgetConfig::default();
    let note = situation(NARRATIVE);
    for h in [0, 3, 4, 10, 24, 96] {
        assert_eq!(
            decide(&note, t0() + Duration::hours(h), &cfg),
            decide_at(NodeKind::SpecificSituation, h as f64, 0, &cfg)
        );
    }
}

#[test]
fn masked_view_masks_narrative_and_semantic_content() {
    let sit = situation(NARRATIVE);
    let v = masked_view(&sit, 0.5).unwrap();
    assert_eq!(v.field, Some(ForgetField::Narrative));
    assert!(v.mask.masked() > 0);
    assert_eq!(v.view.display_text(), v.mask.text);
    assert_eq!(sit.display_text(), NARRATIVE, "original untouched");
    assert_eq!(v.view.id, sit.id);

    let sem = semantic("鲁迅原名周树人浙江绍兴人", "作家");
    let v = masked_view(&sem, 1.0).unwrap();
    assert_eq!(v.field, Some(ForgetField::Content));
    match &v.view.mem_type {
        MemoryType::Semantic(s) => {
            assert!(s.content.contains(MASK_MARKER));
            assert_eq!(s.description, "作家");
            assert_eq!(s.aliases, vec!["小白白".to_string()]);
        }
        other => panic!("{other:?}"),
    }

    let p = procedure();
    let v = masked_view(&p, 0.9).unwrap();
    assert_eq!(v.field, None);
    assert_eq!(v.view, p);
    assert!(masked_view(&p, 1.5).is_err());
    assert!(masked_view(&sit, f64::NAN).is_err());
}

#[test]
fn revision_prompt_names_the_character_and_passes_the_mask() {
    let masked = mask_text(NARRATIVE, 0.6).unwrap().text;
    let (system, user) = revision_prompt(&masked, "小红");
    assert!(system.contains("小红"));
    assert!(system.contains("reconstructs partially masked memories"));
    assert!(system.contains("[masked]"));
    assert!(system.to_lowercase().contains("guess"));
    assert_eq!(user, masked);
}

#[test]
fn apply_revision_replaces_the_view_only() {
    let sit = situation(NARRATIVE);
    let revised = apply_revision(&sit, "  昨天我们开了一个很长的会  ").unwrap();
    assert_eq!(revised.display_text(), "昨天我们开了一个很长的会");
    assert_eq!(sit.display_text(), NARRATIVE);
    assert_eq!(revised.id, sit.id);

    let sem = semantic("小白", "同学");
    let r = apply_revision(&sem, "小白，好像是同桌").unwrap();
    match &r.mem_type {
        MemoryType::Semantic(s) => {
            assert_eq!(s.content, "小白，好像是同桌");
            assert_eq!(s.description, "同学");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(apply_revision(&procedure(), "别的").unwrap(), procedure());
    assert_eq!(
        apply_revision(&sit, "   ").unwrap_err().kind(),
        "invalid_argument"
    );
}

#[test]
fn lazy_forget_text_runs_the_three_branches() {
    let cfg = ForgetConfig::default();
    let k = NodeKind::SpecificSituation;
    let none = lazy_forget_text(k, NARRATIVE, 0.0, 0, &cfg, |_| unreachable!()).unwrap();
    assert_eq!(none.decision.action, ForgetAction::NoAction);
    assert!(none.masked.is_none());

    let mask = lazy_forget_text(k, NARRATIVE, 4.0, 0, &cfg, |_| unreachable!()).unwrap();
    assert_eq!(mask.decision.action, ForgetAction::MaskOnly);
    assert!(mask.masked.as_deref().unwrap().contains(MASK_MARKER));

    let rev = lazy_forget_text(k, NARRATIVE, 96.0, 0, &cfg, |m| {
        Some(m.replace(MASK_MARKER, "某事"))
    })
    .unwrap();
    assert_eq!(rev.decision.action, ForgetAction::Revised);
    assert!(rev.revised.as_deref().unwrap().contains("某事"));

    // A failing LLM downgrades to MaskOnly, as in the seed.
    let failed = lazy_forget_text(k, NARRATIVE, 96.0, 0, &cfg, |_| None).unwrap();
    assert_eq!(failed.decision.action, ForgetAction::MaskOnly);
    assert!(failed.masked.is_some() && failed.revised.is_none());
    let blank = lazy_forget_text(k, NARRATIVE, 96.0, 0, &cfg, |_| Some(" ".into())).unwrap();
    assert_eq!(blank.decision.action, ForgetAction::MaskOnly);

    let p = lazy_forget_text(NodeKind::Procedure, "x", 1e6, 0, &cfg, |_| None).unwrap();
    assert_eq!(p.decision.action, ForgetAction::NoAction);
}

#[test]
fn action_names_round_trip() {
    for a in [
        ForgetAction::NoAction,
        ForgetAction::MaskOnly,
        ForgetAction::Revised,
    ] {
        assert_eq!(ForgetAction::parse(a.as_str()).unwrap(), a);
    }
    assert!(ForgetAction::parse("Mask").is_err());
    assert!(ForgetAction::NoAction < ForgetAction::MaskOnly);
    assert!(ForgetAction::MaskOnly < ForgetAction::Revised);
}
