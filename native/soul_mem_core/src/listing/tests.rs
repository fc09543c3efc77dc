#![allow(clippy::unwrap_used)]
use super::*;
use crate::import::{import_bytes, ImportOptions};

const GRAPH: &str = r#"[
  {"id":"sem_self","tags":["我"],"mem_type":{"Semantic":{"content":"小红","aliases":["Hong"],"concept_type":"Entity","description":"自己"}},
   "mem_links":[{"from":"sem_self","to":"sit_mlt","link_type":{"Sem":{"verb":"参与","confidence":0.7}}},
                {"from":"sem_self","to":"sem_xb","link_type":{"Sem":{"verb":"朋友","confidence":0.9}}}]},
  {"id":"sem_xb","tags":["朋友"],"mem_type":{"Semantic":{"content":"小白","aliases":["白白"],"concept_type":"Entity","description":"同桌，爱吃麻辣烫"}}},
  {"id":"sit_mlt","tags":["放学"],"mem_type":{"Situation":{"SpecificSituation":{"narrative":"放学后和小白去吃麻辣烫，她把汤打翻了"}}}},
  {"id":"sit_pattern","tags":[],"mem_type":{"Situation":{"AbstractSituation":{"Event":{"action":"被人追问","initiator":"别人","target":"我"}}}}},
  {"id":"proc_braid","tags":["紧张"],"mem_type":{"Procedure":{"action":{"content":"紧张时摸辫子","action_type":"Think"}}}}
]"#;

fn graph() -> MemoryGraph {
    import_bytes("小红", GRAPH.as_bytes(), &ImportOptions::default()).unwrap()
}

fn req(query: &str, kind: Option<&str>) -> ListRequest {
    ListRequest {
        query: Some(query.into()),
        kind: kind.map(Into::into),
        ..ListRequest::default()
    }
}

fn ids(l: &NoteListing) -> Vec<&str> {
    l.items.iter().map(|i| i.id.as_str()).collect()
}

#[test]
fn lists_everything_in_graph_order_with_counts() {
    let l = list_graph(&graph(), &ListRequest::default()).unwrap();
    assert_eq!((l.total, l.page, l.per_page), (5, 1, 50));
    assert_eq!(
        ids(&l),
        ["sem_self", "sem_xb", "sit_mlt", "sit_pattern", "proc_braid"]
    );
    let me = &l.items[0];
    assert_eq!((me.kind, me.links, me.core), ("semantic", 2, true));
    assert_eq!(me.text, "小红：自己");
    assert_eq!(me.aliases.as_deref(), Some(&["Hong".to_owned()][..]));
    assert!(l.items[2].aliases.is_none());
    assert_eq!(l.items[3].text, "别人，被人追问，我");
}

#[test]
fn filters_by_kind() {
    let g = graph();
    for (kind, want) in [
        ("semantic", vec!["sem_self", "sem_xb"]),
        ("specific_situation", vec!["sit_mlt"]),
        ("abstract_situation", vec!["sit_pattern"]),
        ("procedure", vec!["proc_braid"]),
    ] {
        assert_eq!(ids(&list_graph(&g, &req("", Some(kind))).unwrap()), want);
    }
    let e = list_graph(&g, &req("", Some("episode"))).unwrap_err();
    assert_eq!(e.kind(), "invalid_argument");
    assert!(e.to_string().contains("kind"), "{e}");
}

#[test]
fn query_matches_every_field_case_insensitively() {
    let g = graph();
    assert_eq!(
        ids(&list_graph(&g, &req("hong", None)).unwrap()),
        ["sem_self"]
    );
    assert_eq!(
        ids(&list_graph(&g, &req("SIT_", None)).unwrap()),
        ["sit_mlt", "sit_pattern"]
    );
    assert_eq!(
        ids(&list_graph(&g, &req("白白", None)).unwrap()),
        ["sem_xb"]
    );
    assert_eq!(
        ids(&list_graph(&g, &req("紧张", None)).unwrap()),
        ["proc_braid"]
    );
    assert_eq!(
        ids(&list_graph(&g, &req("追问", None)).unwrap()),
        ["sit_pattern"]
    );
    assert_eq!(list_graph(&g, &req("不存在的词", None)).unwrap().total, 0);
}

#[test]
fn chinese_queries_rank_exact_matches_before_token_matches() {
    let g = graph();
    // Exact substring: the narrative and the description hold "麻辣烫"; graph order breaks the tie.
    assert_eq!(
        ids(&list_graph(&g, &req("麻辣烫", None)).unwrap()),
        ["sem_xb", "sit_mlt"]
    );
    // "小白麻辣烫" is nowhere verbatim, but both of its jieba tokens are in two notes.
    let l = list_graph(&g, &req("小白麻辣烫", None)).unwrap();
    assert_eq!(ids(&l), ["sem_xb", "sit_mlt"]);
    // An exact match of the whole query beats notes matching its tokens only.
    let l = list_graph(&g, &req("小白 去吃", None)).unwrap();
    assert_eq!(ids(&l), ["sit_mlt"]);
    let l = list_graph(&g, &req("放学后和小白", None)).unwrap();
    assert_eq!(ids(&l)[0], "sit_mlt");
    // Kind and query together.
    let l = list_graph(&g, &req("麻辣烫", Some("specific_situation"))).unwrap();
    assert_eq!(ids(&l), ["sit_mlt"]);
}

#[test]
fn pages_are_bounded() {
    let g = graph();
    let page = |page, per_page| ListRequest {
        page,
        per_page,
        ..ListRequest::default()
    };
    let l = list_graph(&g, &page(Some(2), Some(2))).unwrap();
    assert_eq!((l.total, l.page, l.per_page), (5, 2, 2));
    assert_eq!(ids(&l), ["sit_mlt", "sit_pattern"]);
    assert_eq!(
        ids(&list_graph(&g, &page(Some(3), Some(2))).unwrap()),
        ["proc_braid"]
    );
    let past = list_graph(&g, &page(Some(99), Some(2))).unwrap();
    assert_eq!((past.total, past.items.len()), (5, 0));
    assert_eq!(
        list_graph(&g, &page(None, Some(200))).unwrap().per_page,
        200
    );
    for (p, pp, field) in [
        (Some(0), None, "page"),
        (Some(-3), None, "page"),
        (None, Some(0), "per_page"),
        (None, Some(201), "per_page"),
    ] {
        let e = list_graph(&g, &page(p, pp)).unwrap_err();
        assert_eq!(e.kind(), "invalid_argument");
        assert!(e.to_string().contains(field), "{e}");
    }
}

#[test]
fn one_call_at_10k_notes() {
    let mut g = MemoryGraph::new("c");
    for i in 0..10_000 {
        let mut n = MemoryNote::new(
            "c",
            format!("sit_{i}"),
            MemoryType::Situation(Situation::SpecificSituation(
                crate::model::SpecificSituation {
                    narrative: format!("第{i}天放学后和小白去吃麻辣烫，聊了很久的画画和考试"),
                    time_span: None,
                    context: Default::default(),
                },
            )),
            Utc::now(),
        );
        n.tags = vec!["放学".into(), format!("t{i}")];
        g.insert(n).unwrap();
    }
    // The first segmentation loads jieba's dictionary (~0.1 s, once per process).
    crate::text::tokens("小白");
    let started = std::time::Instant::now();
    let l = list_graph(&g, &req("小白 画画", None)).unwrap();
    let took = started.elapsed();
    assert_eq!(l.total, 10_000);
    eprintln!("list_graph over 10k notes, two-token query: {took:?}");
    let started = std::time::Instant::now();
    let l = list_graph(&g, &req("t9999", None)).unwrap();
    eprintln!(
        "list_graph over 10k notes, substring query: {:?}",
        started.elapsed()
    );
    assert_eq!(ids(&l), ["sit_9999"]);
}

#[test]
fn a_note_named_by_the_query_comes_before_notes_that_mention_it() {
    // Graph order puts the mentions first; the note named 小白 still leads.
    const MENTIONS: &str = r#"[
      {"id":"sem_self","tags":[],"mem_type":{"Semantic":{"content":"小红","concept_type":"Entity","description":"我最好的朋友是小白"}}},
      {"id":"sit_rain","tags":[],"mem_type":{"Situation":{"SpecificSituation":{"narrative":"下雨天小白借我伞"}}}},
      {"id":"sem_xb","tags":[],"mem_type":{"Semantic":{"content":"小白","aliases":["白白同学"],"concept_type":"Entity","description":"同桌"}}}
    ]"#;
    let g = import_bytes("小红", MENTIONS.as_bytes(), &ImportOptions::default()).unwrap();
    assert_eq!(
        ids(&list_graph(&g, &req("小白", None)).unwrap()),
        ["sem_xb", "sem_self", "sit_rain"]
    );
    // Part of an alias names it too, above a plain mention.
    assert_eq!(
        ids(&list_graph(&g, &req("白白", None)).unwrap()),
        ["sem_xb"]
    );
    assert_eq!(
        ids(&list_graph(&g, &req("同学", None)).unwrap()),
        ["sem_xb"]
    );
}
