//! Unit tests of consolidation (they reach the private steps through `super`).

#![allow(clippy::unwrap_used)]
use super::*;
use crate::error::Error;
use crate::import::{export_json, import_bytes, ImportOptions};
use crate::model::{
    AbstractSituation, LinkKind, MemoryId, MemoryLink, MemoryLinkType, MemoryType, NodeKind,
    ProcMemLink, SemMemory, Situation,
};
use crate::retrieval::HashEmbedder;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const AT: &str = "2026-06-10T12:00:00Z";

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn sem_node(id: &str, content: &str, aliases: &[&str], links: Value) -> Value {
    json!({"id": id, "tags": [], "mem_type": {"Semantic": {"content": content,
        "aliases": aliases, "concept_type": "Entity", "description": "旧描述"}},
        "mem_links": links})
}

fn sit_node(id: &str, narrative: &str, who: &str, time: &str, actions: &[&str]) -> Value {
    let events: Vec<Value> = actions
        .iter()
        .map(|a| json!({"action": a, "initiator": "我", "target": "", "action_intensity": 0.5}))
        .collect();
    json!({"id": id, "tags": [], "mem_type": {"Situation": {"SpecificSituation": {
        "narrative": narrative, "time_span": time,
        "context": {"participants": [{"name": who, "role": "朋友"}], "event": events}}}},
        "mem_links": []})
}

fn sem_link(from: &str, to: &str, w: f64) -> Value {
    json!({"from": from, "to": to, "intensity": w,
           "link_type": {"Sem": {"verb": "认识", "confidence": 0.9}}})
}

fn graph(nodes: Value) -> MemoryGraph {
    let opts = ImportOptions {
        now: t("2026-06-01T00:00:00Z"),
        ..ImportOptions::default()
    };
    import_bytes("小红", nodes.to_string().as_bytes(), &opts).unwrap()
}

fn base() -> MemoryGraph {
    graph(json!([
        sem_node("sem_self", "小红", &["我"], json!([])),
        sem_node(
            "sem_xiaobai",
            "小白",
            &["白白"],
            json!([sem_link("sem_xiaobai", "sem_tea", 0.5)])
        ),
        sem_node("sem_tea", "奶茶", &[], json!([])),
    ]))
}

fn sem(key: &str, content: &str, aliases: &[&str], description: &str) -> Value {
    json!({"key": key, "mem_type": {"Semantic": {"content": content, "aliases": aliases,
           "concept_type": "Entity", "description": description}}})
}

fn sit(key: &str, narrative: &str, who: &str, time: &str, actions: &[&str]) -> Value {
    let mut n = sit_node(key, narrative, who, time, actions);
    let obj = n.as_object_mut().unwrap();
    obj.remove("id");
    obj.remove("mem_links");
    obj.remove("tags");
    obj.insert("key".into(), key.into());
    n
}

fn apply(g: &mut MemoryGraph, v: Value, cfg: &ConsolidateConfig) -> Result<Report> {
    let cs = ChangeSet::from_json(v.to_string().as_bytes(), cfg)?;
    consolidate(g, &cs, cfg, Some(&HashEmbedder::new(256).unwrap()))
}

fn semantic<'a>(g: &'a MemoryGraph, rid: &str) -> &'a SemMemory {
    match &g.get_by_readable(rid).unwrap().mem_type {
        MemoryType::Semantic(s) => s,
        other => panic!("not semantic: {other:?}"),
    }
}

fn link_between(g: &MemoryGraph, from: &str, to: &str) -> Option<MemoryLink> {
    let (f, t) = (g.resolve(from).unwrap(), g.resolve(to).unwrap());
    g.get(&f).unwrap().links.iter().find(|l| l.to == t).cloned()
}

/// Asserts that `v` is refused and the graph did not change at all.
fn assert_rejected(v: Value, cfg: &ConsolidateConfig) -> Error {
    let mut g = base();
    let before = export_json(&g, false).unwrap();
    let version = g.version();
    let err = apply(&mut g, v, cfg).unwrap_err();
    assert_eq!(export_json(&g, false).unwrap(), before);
    assert_eq!(g.version(), version);
    err
}

#[test]
fn consolidate_normalize_name_folds_width_case_and_punctuation() {
    assert_eq!(normalize_name("  小白！ "), "小白");
    assert_eq!(normalize_name("ＸＩＡＯ　Bai"), "xiaobai");
    assert_eq!(normalize_name("Milk-Tea."), "milktea");
    assert_eq!(normalize_name("「奶茶」"), "奶茶");
    assert_eq!(normalize_name("!!!"), "");
}

#[test]
fn consolidate_creates_all_four_kinds_with_derived_ids_and_links() {
    let v = json!({"at": AT, "happened_at": "2026-06-10T10:00:00Z", "notes": [
      sem("n1", "麻辣烫", &["麻辣烫店"], "很辣"),
      sit("n2", "我和小白去吃麻辣烫", "小白", "2026-06-10T09:00:00Z", &["吃麻辣烫"]),
      {"key": "n3", "mem_type": {"Situation": {"AbstractSituation": {"Location": {"name": "老街"}}}}},
      {"key": "n4", "mem_type": {"Procedure": {"action": {"content": "紧张时摸辫子", "action_type": "Speak"}}}}
    ], "links": [
      {"from": "n2", "to": "n1", "link_type": {"Sem": {"verb": "吃了", "confidence": 0.8}}},
      {"from": "n2", "to": "sem_xiaobai", "intensity": 0.7, "link_type": {"Sem": {"verb": "和", "confidence": 1.0}}},
      {"from": "n3", "to": "n4", "link_type": {"Proc": {"TrigToAction": {"prob": 0.6}}}}
    ]});
    let mut g = base();
    let r = apply(&mut g, v.clone(), &ConsolidateConfig::default()).unwrap();
    assert_eq!(r.created.len(), 4);
    assert_eq!(r.linked, 3);
    assert!(r.merged.is_empty());
    let rid = &r.keys["n2"];
    assert!(rid.starts_with("sit_c"));
    let note = g.get_by_readable(rid).unwrap();
    assert_eq!(note.id, MemoryId::derive("小红", rid));
    // The situation is created when it happened; other notes when the talk happened.
    assert_eq!(note.create_time, t("2026-06-10T09:00:00Z"));
    assert_eq!(
        g.get_by_readable(&r.keys["n1"]).unwrap().create_time,
        t("2026-06-10T10:00:00Z")
    );
    assert_eq!(link_between(&g, rid, "sem_xiaobai").unwrap().intensity, 0.7);
    // Same input on a fresh graph: same ids.
    let mut g2 = base();
    let r2 = apply(&mut g2, v, &ConsolidateConfig::default()).unwrap();
    assert_eq!(r.keys, r2.keys);
    // The result still round-trips through Graph JSON.
    let json = export_json(&g, false).unwrap();
    let back = import_bytes("小红", json.as_bytes(), &ImportOptions::default()).unwrap();
    assert_eq!(export_json(&back, false).unwrap(), json);
}

#[test]
fn consolidate_merges_semantic_by_normalised_name_and_moves_links() {
    let v = json!({"at": AT, "notes": [
      sem("x", "  小白！", &["白团子"], "喜欢奶茶"),
      sem("y", "ＸＩＡＯＢＡＩ", &["小白"], ""),
      sit("s", "小白请我喝奶茶", "小白", "2026-06-09T09:00:00Z", &[])
    ], "links": [
      {"from": "s", "to": "x", "link_type": {"Sem": {"verb": "和", "confidence": 1.0}}}
    ]});
    let mut g = base();
    let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
    assert_eq!(r.created.len(), 1, "only the situation is new");
    assert_eq!(r.merged.len(), 2);
    assert!(r
        .merged
        .iter()
        .all(|m| m.into == "sem_xiaobai" && m.by == "exact"));
    let s = semantic(&g, "sem_xiaobai");
    assert_eq!(s.content, "小白");
    assert!(s.aliases.contains(&"白团子".to_owned()));
    assert!(s.aliases.contains(&"ＸＩＡＯＢＡＩ".to_owned()));
    assert_eq!(
        s.aliases
            .iter()
            .filter(|a| normalize_name(a) == "小白")
            .count(),
        0
    );
    assert_eq!(s.description, "旧描述；喜欢奶茶");
    // The link that named the new note now points at the existing one.
    assert!(link_between(&g, &r.keys["s"], "sem_xiaobai").is_some());
    assert!(duplicate_semantic_groups(&g).is_empty());
}

#[test]
fn consolidate_merges_semantic_by_embedding_only_above_threshold() {
    let v = json!({"at": AT, "notes": [sem("x", "奶茶们", &[], "")]});
    let strict = ConsolidateConfig::default();
    let mut g = base();
    let r = apply(&mut g, v.clone(), &strict).unwrap();
    assert_eq!(r.created.len(), 1, "0.93 is conservative");

    let loose = ConsolidateConfig {
        merge_similarity: 0.5,
        ..ConsolidateConfig::default()
    };
    let mut g = base();
    let r = apply(&mut g, v.clone(), &loose).unwrap();
    assert_eq!(r.created.len(), 0);
    assert_eq!(r.merged[0].into, "sem_tea");
    assert_eq!(r.merged[0].by, "similarity");
    assert!(r.merged[0].score >= 0.5 && r.merged[0].score < 1.0);

    // Without an embedder only strings are compared.
    let mut g = base();
    let cs = ChangeSet::from_json(v.to_string().as_bytes(), &loose).unwrap();
    let r = consolidate(&mut g, &cs, &loose, None).unwrap();
    assert_eq!(r.created.len(), 1);

    // An abstract concept never merges into an entity.
    let abs = json!({"at": AT, "notes": [{"key": "x", "mem_type": {"Semantic": {
        "content": "奶茶们", "concept_type": "Abstract"}}}]});
    let mut g = base();
    assert_eq!(apply(&mut g, abs, &loose).unwrap().created.len(), 1);
}

#[test]
fn consolidate_dedupes_within_one_change_set() {
    let v = json!({"at": AT, "notes": [sem("a", "烤红薯", &[], "甜"), sem("b", "烤红薯。", &["红薯"], "")],
        "links": [{"from": "b", "to": "sem_tea", "link_type": {"Sem": {"verb": "配", "confidence": 0.5}}}]});
    let mut g = base();
    let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
    assert_eq!(r.created.len(), 1);
    assert_eq!(r.keys["a"], r.keys["b"]);
    assert!(semantic(&g, &r.keys["a"])
        .aliases
        .contains(&"红薯".to_owned()));
    assert!(link_between(&g, &r.keys["a"], "sem_tea").is_some());
}

#[test]
fn consolidate_reuses_a_situation_repeated_the_same_day_only() {
    let mut g = base();
    let first = json!({"at": AT, "notes": [sit("s", "我和小白去吃麻辣烫", "小白", "2026-06-10T09:00:00Z", &[])]});
    let r1 = apply(&mut g, first, &ConsolidateConfig::default()).unwrap();
    let same = json!({"at": AT, "notes": [sit("s", "我和小白去吃麻辣烫。", "小白", "2026-06-10T11:00:00Z", &[])]});
    let r2 = apply(&mut g, same, &ConsolidateConfig::default()).unwrap();
    assert!(r2.created.is_empty());
    assert_eq!(r2.keys["s"], r1.keys["s"]);
    let later = json!({"at": AT, "notes": [sit("s", "我和小白去吃麻辣烫", "小白", "2026-06-03T09:00:00Z", &[])]});
    let r3 = apply(&mut g, later, &ConsolidateConfig::default()).unwrap();
    assert_eq!(r3.created.len(), 1);
    assert_ne!(r3.keys["s"], r1.keys["s"]);
}

#[test]
fn consolidate_rejects_invalid_change_sets_leaving_the_graph_unchanged() {
    let cfg = ConsolidateConfig::default();
    let unknown_kind =
        json!({"at": AT, "notes": [{"key": "a", "mem_type": {"Dream": {"content": "x"}}}]});
    assert!(matches!(
        assert_rejected(unknown_kind, &cfg),
        Error::InvalidJson(_)
    ));
    let wrong_type = json!({"at": AT, "notes": [{"key": "a", "mem_type": {"Semantic": {"content": 5, "concept_type": "Entity"}}}]});
    assert!(matches!(
        assert_rejected(wrong_type, &cfg),
        Error::InvalidJson(_)
    ));
    let extra_field = json!({"at": AT, "notes": [], "drop_table": true});
    assert!(matches!(
        assert_rejected(extra_field, &cfg),
        Error::InvalidJson(_)
    ));
    let many: Vec<Value> = (0..10_000)
        .map(|i| sem(&format!("k{i}"), &format!("概念{i}"), &[], ""))
        .collect();
    let err = assert_rejected(json!({"at": AT, "notes": many}), &cfg);
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                count: 10_000,
                limit: 200,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.kind(), "limit_exceeded");
    let dangling = json!({"at": AT, "notes": [sem("a", "新东西", &[], "")],
        "links": [{"from": "a", "to": "sem_nobody", "link_type": {"Sem": {"verb": "r", "confidence": 1.0}}}]});
    assert!(matches!(
        assert_rejected(dangling, &cfg),
        Error::MissingLinkTarget { .. }
    ));
    let bad_kinds = json!({"at": AT, "notes": [sem("a", "新东西", &[], "")],
        "links": [{"from": "a", "to": "sem_tea", "link_type": {"Proc": {"TrigToAction": {"prob": 0.5}}}}]});
    assert!(matches!(
        assert_rejected(bad_kinds, &cfg),
        Error::InvalidValue { .. }
    ));
    let bad_prob = json!({"at": AT, "links": [{"from": "sem_tea", "to": "sem_xiaobai",
        "link_type": {"Sem": {"verb": "r", "confidence": 7.0}}}]});
    assert!(matches!(
        assert_rejected(bad_prob, &cfg),
        Error::InvalidValue { .. }
    ));
    let self_loop = json!({"at": AT, "links": [{"from": "sem_tea", "to": "sem_tea",
        "link_type": {"Sem": {"verb": "r", "confidence": 1.0}}}]});
    assert!(matches!(
        assert_rejected(self_loop, &cfg),
        Error::InvalidValue { .. }
    ));
    let dup_key = json!({"at": AT, "notes": [sem("a", "甲", &[], ""), sem("a", "乙", &[], "")]});
    assert!(matches!(
        assert_rejected(dup_key, &cfg),
        Error::DuplicateId { .. }
    ));
    let empty = json!({"at": AT, "notes": [sem("a", "  ", &[], "")]});
    assert!(matches!(
        assert_rejected(empty, &cfg),
        Error::InvalidValue { .. }
    ));
    let long = json!({"at": AT, "notes": [sem("a", &"长".repeat(2001), &[], "")]});
    assert!(matches!(
        assert_rejected(long, &cfg),
        Error::InvalidValue { .. }
    ));
    let future =
        json!({"at": AT, "notes": [sit("s", "明天的事", "小白", "2026-06-11T09:00:00Z", &[])]});
    assert!(matches!(
        assert_rejected(future, &cfg),
        Error::InvalidValue { .. }
    ));
    let bad_time = json!({"at": "yesterday", "notes": []});
    assert!(matches!(
        assert_rejected(bad_time, &cfg),
        Error::InvalidJson(_)
    ));
    let small = ConsolidateConfig {
        max_bytes: 10,
        ..cfg.clone()
    };
    assert!(matches!(
        assert_rejected(json!({"at": AT}), &small),
        Error::TooLarge { .. }
    ));
    let few = ConsolidateConfig {
        max_records: 2,
        ..cfg
    };
    let records = json!({"at": AT, "records": {"sem_tea": [AT, AT, AT]}});
    assert!(matches!(
        assert_rejected(records, &few),
        Error::LimitExceeded { .. }
    ));
}

#[test]
fn consolidate_late_failure_rolls_back_notes_already_inserted() {
    // The notes are valid and inserted first; the link step then fails.
    let v = json!({"at": AT, "notes": [sem("a", "新东西", &[], ""), sem("b", "小白", &[], "新描述")],
        "links": [{"from": "a", "to": "b", "link_type": {"Situation": {"SpecificToAbstract": {}}}}]});
    let err = assert_rejected(v, &ConsolidateConfig::default());
    assert!(err.to_string().contains("specific_to_abstract"), "{err}");
}

fn records(v: Value) -> BTreeMap<String, Vec<DateTime<Utc>>> {
    serde_json::from_value(v).unwrap()
}

#[test]
fn consolidate_frequency_is_n_over_t_with_a_floor() {
    let g = base();
    let r = records(json!({
        "sem_xiaobai": ["2026-06-10T08:00:00Z", "2026-06-10T09:00:00Z", "2026-06-10T09:30:00Z", "2026-06-10T10:00:00Z"],
        "sem_tea": ["2026-06-10T08:00:00Z"],
        "sem_self": ["2026-06-10T08:00:00Z", "2026-06-10T08:00:01Z"],
        "sem_gone": ["2026-06-10T08:00:00Z"]
    }));
    let a = activity(&g, &r, 1.0);
    let got: Vec<(&str, f64)> = a
        .iter()
        .map(|x| (x.readable_id.as_str(), x.frequency))
        .collect();
    // 4 in 2 h = 2/h; 1 retrieval: T floored at 1 h; the core self node is never "active".
    assert_eq!(got, vec![("sem_xiaobai", 2.0), ("sem_tea", 1.0)]);
    assert_eq!(a[0].retrievals, 4);
}

#[test]
fn consolidate_links_new_notes_to_the_top_k_active_notes() {
    let mut g = base();
    let v = json!({"at": AT, "notes": [sem("a", "烤红薯", &[], "")],
    "records": {
        "sem_xiaobai": ["2026-06-10T08:00:00Z", "2026-06-10T08:10:00Z", "2026-06-10T08:20:00Z"],
        "sem_tea": ["2026-06-10T09:00:00Z"],
        "nobody": ["2026-06-10T11:00:00Z"]
    }});
    let cfg = ConsolidateConfig {
        top_k: 1,
        ..ConsolidateConfig::default()
    };
    let r = apply(&mut g, v, &cfg).unwrap();
    assert_eq!(r.active, vec!["sem_xiaobai"]);
    let new = &r.keys["a"];
    let there = link_between(&g, new, "sem_xiaobai").unwrap();
    assert_eq!(there.intensity, 0.5);
    assert!(link_between(&g, "sem_xiaobai", new).is_some());
    assert!(link_between(&g, new, "sem_tea").is_none());
    assert_eq!(r.hebbian_links, 2);
    assert_eq!(r.unknown_records, 1);
    assert_eq!(r.records_until, Some(t("2026-06-10T11:00:00Z")));
}

#[test]
fn consolidate_ltp_strengthens_coactivated_links_capped_and_wires_new_pairs() {
    let mut g = graph(json!([
        sem_node("a", "甲", &[], json!([sem_link("a", "b", 0.5)])),
        sem_node("b", "乙", &[], json!([sem_link("b", "a", 0.95)])),
        sem_node("c", "丙", &[], json!([sem_link("c", "a", 1.5)])),
        sem_node("d", "丁", &[], json!([])),
    ]));
    // a, b and c recalled together three times (one recall records all at one instant);
    // d with c twice.
    let times = [
        "2026-06-10T08:00:00Z",
        "2026-06-10T09:00:00Z",
        "2026-06-10T10:00:00Z",
    ];
    let v = json!({"at": AT, "records": {"a": times, "b": times, "c": times,
                                          "d": ["2026-06-10T08:00:00.300Z", "2026-06-10T09:00:00Z"]}});
    let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
    assert!((link_between(&g, "a", "b").unwrap().intensity - 0.8).abs() < 1e-9);
    assert_eq!(link_between(&g, "b", "a").unwrap().intensity, 1.0, "capped");
    assert_eq!(
        link_between(&g, "c", "a").unwrap().intensity,
        1.5,
        "never lowered by LTP"
    );
    assert_eq!(r.strengthened, 2);
    // c–d: twice together, unlinked → wired both ways; d was also with a and b.
    assert_eq!(link_between(&g, "c", "d").unwrap().intensity, 0.5);
    assert!(link_between(&g, "d", "c").is_some());
    assert_eq!(
        r.weakened + r.disconnected,
        0,
        "every link was co-activated"
    );
}

#[test]
fn consolidate_ltd_weakens_unused_links_and_disconnects_below_threshold() {
    let mut g = graph(json!([
        sem_node(
            "a",
            "甲",
            &[],
            json!([
                sem_link("a", "x", 0.5),
                sem_link("a", "y", 0.05),
                sem_link("a", "b", 0.5)
            ])
        ),
        sem_node("b", "乙", &[], json!([])),
        sem_node("x", "戊", &[], json!([])),
        sem_node("y", "己", &[], json!([])),
    ]));
    let v = json!({"at": AT, "records": {"a": ["2026-06-10T08:00:00Z"], "b": ["2026-06-10T08:00:00Z"]}});
    let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
    assert!((link_between(&g, "a", "x").unwrap().intensity - 0.45).abs() < 1e-9);
    assert!(
        link_between(&g, "a", "y").is_none(),
        "0.045 < 0.05: disconnected"
    );
    assert!(
        (link_between(&g, "a", "b").unwrap().intensity - 0.6).abs() < 1e-9,
        "LTP"
    );
    assert_eq!((r.weakened, r.disconnected, r.strengthened), (1, 1, 1));
    // Notes without records keep their links.
    assert!(link_between(&g, "a", "x").is_some());
}

fn three_days(g: &mut MemoryGraph) {
    let v = json!({"at": AT, "notes": [
        sit("s1", "放学后和小白吃麻辣烫", "小白", "2026-06-01T17:00:00Z", &["摸辫子"]),
        sit("s2", "周末和小白逛书店", "小白", "2026-06-05T10:00:00Z", &["摸辫子", "笑"]),
    ]});
    apply(g, v, &ConsolidateConfig::default()).unwrap();
}

#[test]
fn consolidate_induces_a_pattern_from_k_situations_with_evidence() {
    let mut g = base();
    three_days(&mut g);
    assert!(
        g.notes().all(|n| n.kind() != NodeKind::AbstractSituation),
        "2 < k"
    );
    let v = json!({"at": AT, "notes": [
        sit("s3", "小白来我家写作业", "小白", "2026-06-09T19:00:00Z", &["摸辫子"]),
        sit("s4", "一个人去图书馆", "图书管理员", "2026-06-09T09:00:00Z", &[])
    ]});
    let r = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
    assert_eq!(r.induced.len(), 1, "{:?}", r.induced);
    let p = &r.induced[0];
    assert_eq!(
        (p.facet, p.name.as_str(), p.reused),
        ("participant", "小白", false)
    );
    assert_eq!(p.evidence.len(), 3);
    let abs = g.get_by_readable(&p.id).unwrap();
    assert!(
        matches!(&abs.mem_type, MemoryType::Situation(Situation::AbstractSituation(AbstractSituation::Participant(x))) if x.name == "小白")
    );
    for e in &p.evidence {
        assert!(abs.tags.contains(&format!("{EVIDENCE_TAG}{e}")));
        let up = link_between(&g, e, &p.id).unwrap();
        assert_eq!(up.link_type.kind(), LinkKind::SpecificToAbstract);
        let down = link_between(&g, &p.id, e).unwrap();
        assert_eq!(down.link_type.kind(), LinkKind::AbstractToSpecific);
    }
    // The self participant "我" never forms a pattern; events: 摸辫子 shows 3 times.
    assert_eq!(r.habits.len(), 1);
    let h = &r.habits[0];
    assert_eq!(h.trigger, p.id);
    assert_eq!(h.evidence.len(), 3);
    // 摸辫子 ×3, 笑 ×1 → 3/4 by sum.
    assert!((h.prob - 0.75).abs() < 1e-9, "{}", h.prob);
    let trig = link_between(&g, &p.id, &h.id).unwrap();
    assert!(
        matches!(trig.link_type, MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob }) if (prob - 0.75).abs() < 1e-9)
    );

    // A fourth situation reuses the pattern and the habit, adding evidence.
    let v = json!({"at": AT, "notes": [sit("s5", "和小白去看电影", "小白", "2026-06-10T08:00:00Z", &["摸辫子"])]});
    let r2 = apply(&mut g, v, &ConsolidateConfig::default()).unwrap();
    assert_eq!(r2.induced.len(), 1);
    assert!(r2.induced[0].reused);
    assert_eq!(r2.induced[0].id, p.id);
    assert_eq!(r2.induced[0].evidence.len(), 4);
    assert!(r2.habits[0].reused);
    assert!((r2.habits[0].prob - 0.8).abs() < 1e-9, "4 of 5");
    let n_abs = g
        .notes()
        .filter(|n| n.kind() == NodeKind::AbstractSituation)
        .count();
    assert_eq!(n_abs, 1);
}

#[test]
fn consolidate_habit_probabilities_are_normalised_by_sum_not_softmax() {
    let mut g = base();
    let mut notes = Vec::new();
    for i in 0..10 {
        let action = if i < 9 { "递纸巾" } else { "转身走开" };
        notes.push(sit(
            &format!("s{i}"),
            &format!("小白哭了第{i}次"),
            "小白",
            &format!("2026-06-0{}T08:00:00Z", 1 + i % 9),
            &[action],
        ));
    }
    let cfg = ConsolidateConfig {
        behaviour_min_support: 1,
        ..ConsolidateConfig::default()
    };
    let r = apply(&mut g, json!({"at": AT, "notes": notes}), &cfg).unwrap();
    let mut probs: Vec<f64> = r.habits.iter().map(|h| h.prob).collect();
    probs.sort_by(f64::total_cmp);
    assert_eq!(probs.len(), 2);
    assert!(
        (probs[0] - 0.1).abs() < 1e-9 && (probs[1] - 0.9).abs() < 1e-9,
        "{probs:?}"
    );
}

#[test]
fn consolidate_groups_pattern_names_by_embedding() {
    let mut g = base();
    let v = json!({"at": AT, "notes": [
        sit("s1", "甲", "小白同学", "2026-06-01T08:00:00Z", &[]),
        sit("s2", "乙", "小白同学们", "2026-06-02T08:00:00Z", &[]),
        sit("s3", "丙", "小白同学", "2026-06-03T08:00:00Z", &[]),
    ]});
    // Structured names differ ("小白同学" ×2, "小白同学们" ×1): only embedding makes it 3.
    let strict = ConsolidateConfig {
        pattern_similarity: 0.99,
        ..ConsolidateConfig::default()
    };
    assert!(apply(&mut g.clone(), v.clone(), &strict)
        .unwrap()
        .induced
        .is_empty());
    let loose = ConsolidateConfig {
        pattern_similarity: 0.7,
        ..ConsolidateConfig::default()
    };
    let r = apply(&mut g, v, &loose).unwrap();
    assert_eq!(r.induced.len(), 1);
    assert_eq!(
        r.induced[0].name, "小白同学",
        "the most frequent surface names it"
    );
    assert_eq!(r.induced[0].evidence.len(), 3);
}

#[test]
fn consolidate_duplicate_groups_find_shared_names() {
    let g = graph(json!([
        sem_node("a", "小白", &[], json!([])),
        sem_node("b", "白白", &["小白！"], json!([])),
        sem_node("c", "奶茶", &[], json!([])),
    ]));
    assert_eq!(
        duplicate_semantic_groups(&g),
        vec![vec!["a".to_owned(), "b".to_owned()]]
    );
}

#[test]
fn consolidate_config_rejects_out_of_range_values() {
    let bad = ConsolidateConfig {
        ltd_factor: 1.5,
        ..ConsolidateConfig::default()
    };
    assert!(bad.validate().is_err());
    let bad = ConsolidateConfig {
        pattern_min_support: 0,
        ..ConsolidateConfig::default()
    };
    assert!(bad.validate().is_err());
    assert!(serde_json::from_str::<ConsolidateConfig>(r#"{"top_kk": 3}"#).is_err());
    assert!(ConsolidateConfig::default().validate().is_ok());
}
