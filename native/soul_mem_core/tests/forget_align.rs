//! Forgetting: semantic field alignment of an LLM's Aliases / Description / ConceptType answer.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap fixed literals

use soul_mem_core::forget::*;
use soul_mem_core::model::*;

fn old() -> SemMemory {
    SemMemory {
        content: "小白".into(),
        aliases: vec!["白白".into(), "小白同学".into()],
        concept_type: ConceptType::Entity,
        description: "小红的同班同学，爱吃麻辣烫".into(),
    }
}

#[test]
fn parses_the_three_lines_and_updates() {
    let out = "Aliases: 白白\nDescription: 小红的同学，好像喜欢吃辣\nConceptType: Abstract";
    let s = align_sem_fields(&old(), out, 0.7);
    assert_eq!(s.aliases, vec!["白白".to_string()]);
    assert_eq!(s.description, "小红的同学，好像喜欢吃辣");
    assert_eq!(s.concept_type, ConceptType::Abstract);
    assert_eq!(s.content, "小白", "content is never changed here");
}

#[test]
fn tolerant_of_full_width_colons_case_bullets_and_extra_text() {
    let out = "好的，以下是结果：\n- **aliases**： 白白、小白同学\n  DESCRIPTION：小红的同桌\nconcept type: 实体\n希望有帮助";
    let s = align_sem_fields(&old(), out, 0.3);
    assert_eq!(s.aliases, old().aliases, "same set keeps the old value");
    assert_eq!(s.description, "小红的同桌");
    assert_eq!(s.concept_type, ConceptType::Entity);
}

#[test]
fn unchanged_meaning_keeps_old_values() {
    let o = old();
    let out = "Aliases: 小白同学, 白白\nDescription: 小红的同班同学 爱吃麻辣烫。\nConceptType: ???";
    let s = align_sem_fields(&o, out, 0.9);
    assert_eq!(s, o);
    let s = align_sem_fields(
        &o,
        "Aliases: unchanged\nDescription: 无变化\nConceptType: unknown",
        0.9,
    );
    assert_eq!(s, o);
    // Empty output or unrelated text changes nothing.
    assert_eq!(align_sem_fields(&o, "", 0.9), o);
    assert_eq!(align_sem_fields(&o, "我不记得了", 0.9), o);
    // A description still containing [masked] was not restored.
    let s = align_sem_fields(&o, "Description: 小红的 [masked] 同学", 0.9);
    assert_eq!(s.description, o.description);
}

#[test]
fn aliases_may_not_grow_below_the_threshold() {
    let o = old();
    let grow = "Aliases: 白白, 小白同学, 白雪公主, 小白兔";
    assert_eq!(align_sem_fields(&o, grow, 0.3).aliases, o.aliases);
    assert_eq!(align_sem_fields(&o, grow, 0.599).aliases, o.aliases);
    assert_eq!(align_sem_fields(&o, grow, f64::NAN).aliases, o.aliases);
    assert_eq!(align_sem_fields(&o, grow, 0.6).aliases.len(), 4);
    // Shrinking or replacing without growth is allowed at any degree.
    assert_eq!(
        align_sem_fields(&o, "Aliases: 阿白", 0.1).aliases,
        vec!["阿白".to_string()]
    );
    // Duplicates do not count as growth.
    assert_eq!(
        align_sem_fields(&o, "Aliases: 阿白, 阿白 , 小白同学", 0.1).aliases,
        vec!["阿白".to_string(), "小白同学".to_string()]
    );
    // A custom threshold.
    assert_eq!(align_sem_fields_with(&o, grow, 0.3, 0.2).aliases.len(), 4);
}

#[test]
fn bad_concept_type_keeps_the_old() {
    let o = old();
    for v in ["Person", "Entity or Abstract", "", "实体/抽象"] {
        let s = align_sem_fields(&o, &format!("ConceptType: {v}"), 0.9);
        assert_eq!(s.concept_type, ConceptType::Entity, "{v}");
    }
    assert_eq!(
        align_sem_fields(&o, "concept_type: abstract concept", 0.9).concept_type,
        ConceptType::Abstract
    );
}

#[test]
fn first_occurrence_wins() {
    let s = align_sem_fields(&old(), "Description: 甲\nDescription: 乙", 0.9);
    assert_eq!(s.description, "甲");
}
