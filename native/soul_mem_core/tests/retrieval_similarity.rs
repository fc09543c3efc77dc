//! Fused similarity: golden values with hand-set vectors, the seed's channel rules, floor,
//! top-k, time preference, and the embedding store. Scores come from the int8 rows with
//! 16-bit query values, so golden values are checked to 1e-4.
#![allow(clippy::unwrap_used)]

mod retrieval_util;
use retrieval_util::*;

use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::retrieval::query::EmbeddedQuery;
use soul_mem_core::retrieval::*;

/// Vectors set by hand: every text of every node gets `f(readable_id, field)`.
fn vectors(g: &MemoryGraph, dim: usize, f: impl Fn(&str, FieldKind) -> Vec<f32>) -> NodeVectors {
    let mut nv = NodeVectors::new(dim).unwrap();
    for n in g.notes() {
        let texts = node_texts(n);
        let vs: Vec<Vec<f32>> = texts.iter().map(|(k, _)| f(&n.readable_id, *k)).collect();
        let items: Vec<(FieldKind, &str, &[f32])> = texts
            .iter()
            .zip(&vs)
            .map(|((k, t), v)| (*k, t.as_str(), v.as_slice()))
            .collect();
        nv.push_node(n.id, &items).unwrap();
    }
    nv
}

fn q(json: &str) -> SubQuery {
    serde_json::from_str(json).unwrap()
}

fn cfg(floor: f32, k: usize) -> SimilarityConfig {
    SimilarityConfig {
        similarity_threshold: floor,
        max_results: k,
        ..Default::default()
    }
}

fn score_of(out: &[(u32, f32)], idx: &RetrievalIndex, id: &str) -> Option<f32> {
    let p = idx.position(&mid(id))? as u32;
    out.iter().find(|x| x.0 == p).map(|x| x.1)
}

#[test]
fn string_channel_only_raises_and_only_on_identifiers() {
    let g = graph(vec![
        sem("alpha", "Alpha", "", &[]),
        sem("beta", "Zzz", "", &[]),
        spec("s1", "Alpha", None),
    ]);
    let nv = vectors(&g, 2, |_, _| vec![1.0, 0.0]);
    let idx = RetrievalIndex::build(&g, nv).unwrap();
    let sq = q(
        r#"{"priority":1,"tag":[],"variant":{"Semantic":[{"concept_identifier":"alpha","description":""}]}}"#,
    );
    let eq = EmbeddedQuery::assemble(&sq, &[vec![0.6, 0.8]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    // emb = 0.6; identifier "alpha" = "alpha" → str 1 → max(0.6, 0.6·0.6 + 0.4·1) = 0.76.
    assert!((score_of(&out, &idx, "alpha").unwrap() - 0.76).abs() < 1e-4);
    // No shared character: the string channel adds nothing.
    assert!((score_of(&out, &idx, "beta").unwrap() - 0.6).abs() < 1e-4);
    // Specific situations: no string channel; cross-variant weight 0.8 · 0.6.
    assert!((score_of(&out, &idx, "s1").unwrap() - 0.48).abs() < 1e-4);
    assert_eq!(out[0].0, idx.position(&mid("alpha")).unwrap() as u32);
}

#[test]
fn string_channel_never_lowers_a_high_embedding_score() {
    let g = graph(vec![sem("a", "abcdef", "", &[])]);
    let idx = RetrievalIndex::build(&g, vectors(&g, 2, |_, _| vec![1.0, 0.0])).unwrap();
    let sq = q(
        r#"{"priority":0,"tag":[],"variant":{"Semantic":[{"concept_identifier":"abcxyz","description":""}]}}"#,
    );
    let eq = EmbeddedQuery::assemble(&sq, &[vec![1.0, 0.0]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    assert!((out[0].1 - 1.0).abs() < 1e-4);
}

#[test]
fn concept_and_description_blend_with_sub_weights() {
    let g = graph(vec![sem("a", "x", "desc", &[])]);
    let idx = RetrievalIndex::build(
        &g,
        vectors(&g, 2, |_, k| {
            if k == FieldKind::SemName {
                vec![1.0, 0.0]
            } else {
                vec![0.0, 1.0]
            }
        }),
    )
    .unwrap();
    let sq = q(
        r#"{"priority":0,"tag":[],"variant":{"Semantic":[{"concept_identifier":"q","description":"d"}]}}"#,
    );
    // concept ⟂ description vectors: concept sim 1 with name, description sim 1 with desc.
    let eq = EmbeddedQuery::assemble(&sq, &[vec![1.0, 0.0], vec![1.0, 0.0]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    // 0.7·1 + 0.3·0 = 0.7 (identifiers "q" vs "x" share nothing).
    assert!((out[0].1 - 0.7).abs() < 1e-4, "{out:?}");
}

#[test]
fn tag_and_variant_channels_blend_0_3_0_7() {
    let g = graph(vec![sem("a", "x", "", &["人物"]), sem("b", "y", "", &[])]);
    let idx = RetrievalIndex::build(
        &g,
        vectors(&g, 2, |_, k| {
            if k == FieldKind::Tag {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }),
    )
    .unwrap();
    let sq = q(
        r#"{"priority":0,"tag":["人物"],"variant":{"Semantic":[{"concept_identifier":"q","description":""}]}}"#,
    );
    let eq = EmbeddedQuery::assemble(&sq, &[vec![0.0, 1.0], vec![1.0, 0.0]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    assert!((score_of(&out, &idx, "a").unwrap() - 1.0).abs() < 1e-4);
    // No tags on the node: nothing to compare, so the tag channel is left out (not scored
    // 0, which sank every untagged note under any tagged one).
    assert!((score_of(&out, &idx, "b").unwrap() - 1.0).abs() < 1e-4);
    // Tags only (empty variant): the tag channel alone.
    let tq = q(r#"{"priority":0,"tag":["人物"],"variant":{"Semantic":[]}}"#);
    let eq = EmbeddedQuery::assemble(&tq, &[vec![0.0, 1.0]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    assert!((score_of(&out, &idx, "a").unwrap() - 1.0).abs() < 1e-4);
    // An untagged node has nothing to compare with a tags-only query: no score at all.
    assert!(score_of(&out, &idx, "b").is_none());
}

#[test]
fn floor_then_top_k_and_procedures_never_match() {
    let mut notes = Vec::new();
    for i in 0..8 {
        notes.push(sem(&format!("n{i}"), &format!("{i}"), "", &[]));
    }
    notes.push(proc_node("p", "anything"));
    let g = graph(notes);
    // Node i gets cosine i/10 with the query.
    let nv = vectors(&g, 2, |id, _| {
        let c = id
            .trim_start_matches('n')
            .parse::<f32>()
            .map(|i| i / 10.0)
            .unwrap_or(1.0);
        vec![c, (1.0 - c * c).sqrt()]
    });
    let idx = RetrievalIndex::build(&g, nv).unwrap();
    let sq = q(
        r#"{"priority":0,"tag":[],"variant":{"Semantic":[{"concept_identifier":"Q","description":""}]}}"#,
    );
    let eq = EmbeddedQuery::assemble(&sq, &[vec![1.0, 0.0]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.35, 4));
    let ids: Vec<String> = out
        .iter()
        .map(|x| idx.node(x.0 as usize).unwrap().readable_id.clone())
        .collect();
    assert_eq!(ids, ["n7", "n6", "n5", "n4"]);
    let out = similarity(&idx, &eq, &cfg(0.55, 4));
    assert_eq!(out.len(), 2);
    assert!(
        out.iter()
            .all(|x| idx.node(x.0 as usize).unwrap().kind
                != soul_mem_core::model::NodeKind::Procedure)
    );
    assert!(similarity(&idx, &eq, &cfg(0.0, 0)).is_empty());
}

#[test]
fn time_range_prefers_specific_situations_inside_it() {
    let g = graph(vec![
        spec("in", "x", Some("2026-06-01T09:00:00Z")),
        spec("out", "x", Some("2025-01-01T09:00:00Z")),
        spec("none", "x", None),
    ]);
    let idx = RetrievalIndex::build(&g, vectors(&g, 2, |_, _| vec![1.0, 0.0])).unwrap();
    let sq = q(
        r#"{"priority":0,"tag":[],"variant":{"Situation":[{"narrative":"n","location":null,"participants":null,
        "time_span":[{"start":"2026-06-01T08:00:00Z","end":"2026-06-01T12:00:00Z"}],"environment":null,"event":null}]}}"#,
    );
    let eq = EmbeddedQuery::assemble(&sq, &[vec![0.6, 0.8]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    // inside: 0.6 + 0.1·0.4; outside: 0.6·0.8; unknown time: unchanged.
    assert!((score_of(&out, &idx, "in").unwrap() - 0.64).abs() < 1e-4);
    assert!((score_of(&out, &idx, "out").unwrap() - 0.48).abs() < 1e-4);
    assert!((score_of(&out, &idx, "none").unwrap() - 0.6).abs() < 1e-4);
}

#[test]
fn abstract_situations_match_structured_fields_and_narrative_fallback() {
    let g = graph(vec![abs_loc("lib", "图书馆")]);
    let idx = RetrievalIndex::build(&g, vectors(&g, 2, |_, _| vec![1.0, 0.0])).unwrap();
    // Narrative only: the fallback weight (default 1.0; the seed's 0.9 when set).
    let sq = q(r#"{"priority":0,"tag":[],"variant":{"Situation":[{"narrative":"在图书馆看书"}]}}"#);
    let eq = EmbeddedQuery::assemble(&sq, &[vec![1.0, 0.0]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    assert!((out[0].1 - 1.0).abs() < 1e-4);
    let mut seed = cfg(0.0, 10);
    seed.blend.abstract_narrative_fallback = 0.9;
    let out = similarity(&idx, &eq, &seed);
    assert!((out[0].1 - 0.9).abs() < 1e-4);
    // Location field: full weight, and its identifier feeds the string channel.
    let sq =
        q(r#"{"priority":0,"tag":[],"variant":{"Situation":[{"location":[{"name":"图书馆"}]}]}}"#);
    let eq = EmbeddedQuery::assemble(&sq, &[vec![0.5, 0.866]], 2).unwrap();
    let out = similarity(&idx, &eq, &cfg(0.0, 10));
    // emb 0.5, str 1 → max(0.5, 0.3 + 0.4) = 0.7.
    assert!((out[0].1 - 0.7).abs() < 1e-3, "{out:?}");
}

#[test]
fn query_json_tolerates_nulls_and_rejects_unknown_fields() {
    let sq = q(
        r#"{"priority":3,"tag":null,"variant":{"Situation":[{"narrative":"x","location":null,"participants":[{"name":"a","role":null}],"time_span":null,"environment":{"atmosphere":"静","tone":null},"event":null}]}}"#,
    );
    let texts = QueryTexts::of(&sq);
    assert_eq!(texts.texts(), ["x", "a", "静"]);
    assert!(serde_json::from_str::<SubQuery>(
        r#"{"priority":1,"tag":[],"variant":{"Semantic":[{"concept":"x"}]}}"#
    )
    .is_err());
    // Vector count and dimension are checked.
    assert!(EmbeddedQuery::assemble(&sq, &[vec![1.0]], 1).is_err());
    assert!(EmbeddedQuery::assemble(&sq, &[vec![1.0], vec![1.0], vec![1.0, 0.0]], 1).is_err());
}

#[test]
fn node_texts_list_every_field_once() {
    let mut s = sem("a", "Rust语言", "系统编程语言", &["编程"]);
    if let soul_mem_core::model::MemoryType::Semantic(m) = &mut s.mem_type {
        m.aliases = vec!["Rust".into()];
    }
    let t = node_texts(&s);
    assert_eq!(
        t,
        vec![
            (FieldKind::SemName, "Rust语言".to_string()),
            (FieldKind::SemName, "Rust".to_string()),
            (FieldKind::SemDescription, "系统编程语言".to_string()),
            (FieldKind::Tag, "编程".to_string()),
        ]
    );
    let a = node_texts(&abs_loc("l", "图书馆"));
    assert_eq!(
        a,
        vec![
            (FieldKind::SitLocation, "图书馆".into()),
            (FieldKind::SitNarrative, "图书馆".into())
        ]
    );
    assert_eq!(
        node_texts(&proc_node("p", "说话")),
        vec![(FieldKind::ProcAction, "说话".into())]
    );
}

#[test]
fn hash_embedder_is_deterministic_normalised_and_lexical() {
    let e = HashEmbedder::new(384).unwrap();
    let a = e.embed_one("守护穗织的剑灵少女");
    assert_eq!(a, e.embed_one("守护穗织的剑灵少女"));
    let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
    let near = e.embed_one("守护穗织的少女");
    let far = e.embed_one("完全无关的咖啡店");
    let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f32>();
    assert!(dot(&a, &near) > 0.5);
    assert!(dot(&a, &near) > dot(&a, &far) + 0.3);
    assert!(e.embed_one("").iter().all(|x| *x == 0.0));
    assert!(HashEmbedder::new(0).is_err());
}

#[test]
fn node_vectors_dedupe_tags_and_check_alignment() {
    let g = graph(vec![
        sem("a", "x", "", &["t1", "t2"]),
        sem("b", "y", "", &["t1"]),
    ]);
    let e = HashEmbedder::new(16).unwrap();
    let nv = NodeVectors::embed_graph(&g, &e).unwrap();
    assert_eq!(nv.tag_vocab().len(), 2);
    assert_eq!(nv.node_tags(1), &[0]);
    let mut nv2 = NodeVectors::new(16).unwrap();
    assert!(nv2
        .push_node(mid("a"), &[(FieldKind::SemName, "x", &[1.0; 3])])
        .is_err());
    // Vectors of another graph are refused.
    let other = graph(vec![sem("z", "x", "", &[])]);
    assert!(RetrievalIndex::build(&other, nv).is_err());
}

#[test]
fn parallel_and_serial_scoring_agree() {
    let notes: Vec<_> = (0..300)
        .map(|i| sem(&format!("n{i}"), &format!("概念{i}"), "描述", &["标签"]))
        .collect();
    let g = graph(notes);
    let e = HashEmbedder::new(64).unwrap();
    let idx = RetrievalIndex::build_with_embedder(&g, &e).unwrap();
    let sq = q(
        r#"{"priority":0,"tag":["标签"],"variant":{"Semantic":[{"concept_identifier":"概念12","description":"描述"}]}}"#,
    );
    let eq = EmbeddedQuery::assemble(&sq, &embed_query(&sq, &e).unwrap(), 64).unwrap();
    let serial = similarity(
        &idx,
        &eq,
        &SimilarityConfig {
            max_results: 10,
            ..Default::default()
        },
    );
    let par = similarity(
        &idx,
        &eq,
        &SimilarityConfig {
            max_results: 10,
            parallel_min_nodes: 1,
            ..Default::default()
        },
    );
    assert_eq!(serial, par);
    assert_eq!(serial[0].0, idx.position(&mid("n12")).unwrap() as u32);
}

#[test]
fn row_index_matches_row_kinds_order() {
    for (i, k) in FieldKind::ROW_KINDS.iter().enumerate() {
        assert_eq!(k.row_index(), Some(i));
    }
    assert_eq!(FieldKind::Tag.row_index(), None);
}

#[test]
fn int8_scan_stays_close_to_exact_cosine() {
    let e = HashEmbedder::new(384).unwrap();
    let g = graph(vec![sem(
        "a",
        "守护穗织的剑灵少女",
        "自称我辈的活泼存在",
        &[],
    )]);
    let nv = NodeVectors::embed_graph(&g, &e).unwrap();
    let note = g.notes().next().unwrap();
    for q in ["剑灵少女", "活泼的存在", "完全无关"] {
        let qv = e.embed_one(q);
        for k in [FieldKind::SemName, FieldKind::SemDescription] {
            // The exact cosine, from the field's text embedded again in f32.
            let exact = node_texts(note)
                .iter()
                .filter(|(kind, _)| *kind == k)
                .map(|(_, t)| {
                    let mut v = e.embed_one(t);
                    soul_mem_core::retrieval::dot::l2_normalise(&mut v);
                    soul_mem_core::retrieval::dot::dot(&qv, &v)
                })
                .reduce(f32::max)
                .unwrap();
            let approx = nv
                .max_dot_q8(
                    &soul_mem_core::retrieval::field_vectors::QVec::new(qv.clone()),
                    k,
                    0,
                )
                .unwrap();
            assert!((exact - approx).abs() < 5e-3, "{q}: {exact} vs {approx}");
        }
    }
}

#[test]
fn non_finite_scores_are_dropped() {
    let g = graph(vec![
        sem("a", "Alpha", "", &["t"]),
        sem("b", "Beta", "", &[]),
        spec("s", "Alpha", None),
    ]);
    let idx = RetrievalIndex::build(&g, vectors(&g, 2, |_, _| vec![1.0, 0.0])).unwrap();
    let sq = q(
        r#"{"priority":0,"tag":["t"],"variant":{"Semantic":[{"concept_identifier":"alpha","description":""}]}}"#,
    );
    let eq = EmbeddedQuery::assemble(&sq, &[vec![1.0, 0.0], vec![0.6, 0.8]], 2).unwrap();
    let mut c = cfg(-1.0, 10);
    assert_eq!(similarity(&idx, &eq, &c).len(), 3);
    // similarity() does not validate its config: a NaN channel weight makes every fused
    // score NaN (0·x/0 for the tag/variant blend), and NaN must neither pass the floor nor
    // take a top-k place — not even through the string channel's max.
    // Nodes without tags never blend the tag channel, so only the tagged "a" is affected.
    let only_untagged = |out: Vec<(u32, f32)>| {
        out.iter()
            .all(|&(i, s)| s.is_finite() && idx.node(i as usize).unwrap().readable_id != "a")
            && out.len() == 2
    };
    for bad in [f32::NAN, f32::INFINITY] {
        c.blend.tag = bad;
        assert!(only_untagged(similarity(&idx, &eq, &c)), "tag weight {bad}");
    }
    c.blend.tag = 0.0;
    c.blend.variant = 0.0;
    assert!(only_untagged(similarity(&idx, &eq, &c)));
}

#[test]
fn nested_query_fields_reject_unknown_keys() {
    let unit = |inner: &str| {
        format!(r#"{{"priority":0,"tag":[],"variant":{{"Situation":[{{{inner}}}]}}}}"#)
    };
    for ok in [
        r#""location":[{"name":"x","coordinates":"0,0"}]"#,
        r#""participants":[{"name":"x","role":"y"}]"#,
        r#""time_span":[{"start":"2026-01-01T00:00:00Z","end":null}]"#,
        r#""environment":{"atmosphere":"x","tone":"y"}"#,
        r#""event":[{"action":"x","initiator":"y","target":"z"}]"#,
    ] {
        serde_json::from_str::<SubQuery>(&unit(ok)).unwrap();
    }
    for bad in [
        r#""location":[{"name":"x","lat":"0"}]"#,
        r#""participants":[{"name":"x","rol":"y"}]"#,
        r#""time_span":[{"start":"2026-01-01T00:00:00Z","stop":null}]"#,
        r#""environment":{"atmosphere":"x","mood":"y"}"#,
        r#""event":[{"action":"x","actor":"y"}]"#,
    ] {
        let err = serde_json::from_str::<SubQuery>(&unit(bad)).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{bad}: {err}");
    }
}

/// The seed once gave Situation queries the floor `min(similarity_threshold, 0.5)`
/// (commit 2f7feb6), then replaced it by the plain floor + top-k (eb34772; the book's
/// 检索与联想 §5 and the algo reference note that `SITUATION_SIMILARITY_THRESHOLD = 0.5` no
/// longer exists). So a Situation query uses the global floor as is, like a Semantic one.
#[test]
fn situation_queries_use_the_global_floor_without_a_0_5_cap() {
    let g = graph(vec![spec("s", "x", None), sem("m", "y", "", &[])]);
    let idx = RetrievalIndex::build(
        &g,
        vectors(&g, 2, |id, _| {
            if id == "s" {
                vec![1.0, 0.0]
            } else {
                vec![0.0, 1.0]
            }
        }),
    )
    .unwrap();
    let sit = q(r#"{"priority":0,"tag":[],"variant":{"Situation":[{"narrative":"q"}]}}"#);
    let eq = EmbeddedQuery::assemble(&sit, &[vec![0.55, 0.835]], 2).unwrap();
    let at = |floor: f32| score_of(&similarity(&idx, &eq, &cfg(floor, 10)), &idx, "s");
    assert!((at(0.5).unwrap() - 0.55).abs() < 1e-3);
    // Would pass min(0.6, 0.5) = 0.5; the global floor 0.6 drops it.
    assert_eq!(at(0.6), None);
    // The semantic node (cross-variant 0.8 × 0.835 ≈ 0.67) passes the same floor.
    let out = similarity(&idx, &eq, &cfg(0.6, 10));
    assert!((score_of(&out, &idx, "m").unwrap() - 0.8 * 0.835).abs() < 1e-3);
}

/// The field scan (rows streamed once per field, all probes per row, chunked when parallel)
/// returns exactly the per-node values of `max_dot_q8`, bit for bit: semantic nodes with
/// several name rows (aliases), situations through the cross-variant weight.
#[test]
fn field_scan_matches_per_node_kernel_bit_for_bit() {
    use soul_mem_core::model::MemoryType;
    use soul_mem_core::retrieval::dot::l2_normalise;
    use soul_mem_core::retrieval::field_vectors::QVec;
    let notes: Vec<_> = (0..9000)
        .map(|i| {
            if i % 3 == 2 {
                spec(
                    &format!("n{i}"),
                    &format!("情境{} 在{}", i % 97, i % 13),
                    None,
                )
            } else {
                let mut n = sem(&format!("n{i}"), &format!("概念{}", i % 101), "", &[]);
                if let MemoryType::Semantic(s) = &mut n.mem_type {
                    s.aliases = (0..i % 4).map(|a| format!("别名{}{}", i % 7, a)).collect();
                }
                n
            }
        })
        .collect();
    let g = graph(notes);
    let e = HashEmbedder::new(48).unwrap();
    let idx = RetrievalIndex::build_with_embedder(&g, &e).unwrap();
    // An identifier sharing no character with any node: no string channel.
    let sq = q(
        r#"{"priority":0,"tag":[],"variant":{"Semantic":[{"concept_identifier":"zzz","description":""}]}}"#,
    );
    let mut v = e.embed_one("概念12 别名3 情境5 在7");
    let eq = EmbeddedQuery::assemble(&sq, std::slice::from_ref(&v), 48).unwrap();
    l2_normalise(&mut v);
    let qv = QVec::new(v);
    let nv = idx.vectors();
    for parallel_min_nodes in [usize::MAX, 1] {
        let c = SimilarityConfig {
            similarity_threshold: -1.0,
            max_results: usize::MAX,
            parallel_min_nodes,
            ..Default::default()
        };
        let out = similarity(&idx, &eq, &c);
        assert_eq!(out.len(), g.len());
        for (i, s) in out {
            let i = i as usize;
            let want = if i % 3 == 2 {
                0.8 * nv.max_dot_q8(&qv, FieldKind::SitNarrative, i).unwrap()
            } else {
                nv.max_dot_q8(&qv, FieldKind::SemName, i).unwrap().max(0.0)
            };
            assert_eq!(s.to_bits(), want.max(0.0).to_bits(), "node {i}");
        }
    }
}
