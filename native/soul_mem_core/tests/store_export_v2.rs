//! Export format version 2: every reference names a note by its readable id, export → import
//! → export is byte-identical (also for generated stores), version-1 documents still import,
//! and a hand-written document (Graph JSON link shape, defaults left out) imports.
#![allow(clippy::unwrap_used)]

mod store_util;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};
use soul_mem_core::import::{import_bytes, ImportOptions};
use soul_mem_core::model::{LinkId, MemoryId, MemoryLink, MemoryLinkType, SemMemLink};
use soul_mem_core::store::{ForgetState, Message, Store, EXPORT_VERSION};
use store_util::{t, tmp};

const C: &str = "小红";

use store_util::STORE_GRAPH as GRAPH;

fn id(s: &str) -> MemoryId {
    MemoryId::derive(C, s)
}

fn sem_link(from: MemoryId, to: MemoryId, link: LinkId) -> MemoryLink {
    MemoryLink {
        id: link,
        from,
        to,
        intensity: 0.5,
        link_type: MemoryLinkType::Sem(SemMemLink {
            verb: "想起".into(),
            confidence: 0.5,
        }),
    }
}

/// A store with every kind of row, an archived note, a link with a random id and an orphan
/// link to a note that is not stored.
fn filled_store(dir: &std::path::Path) -> Store {
    let opts = ImportOptions {
        now: t(0),
        ..ImportOptions::default()
    };
    let graph = import_bytes(C, GRAPH.as_bytes(), &opts).unwrap();
    let mut s = Store::open_in(dir, C).unwrap();
    s.save_graph(&graph).unwrap();
    s.archive_note(&id("proc_c")).unwrap();
    s.put_link(&sem_link(id("sem_cat"), id("sit_b"), LinkId::random()))
        .unwrap();
    s.put_link(&sem_link(id("sit_b"), id("ghost"), LinkId::random()))
        .unwrap();
    s.append_message(&Message {
        role: "user".into(),
        text: "你好".into(),
        at: t(1),
        tagged: true,
    })
    .unwrap();
    s.set_summary("摘要").unwrap();
    s.append_records(&[(id("sit_b"), t(3)), (id("ghost"), t(4))])
        .unwrap();
    s.append_feedback(&id("sem_cat"), -1, t(5)).unwrap();
    s.set_forget_state(
        &id("sit_b"),
        &ForgetState {
            missing_degree: 0.2,
            band: 1,
            revised_text: None,
            original_text: Some("吃麻辣烫".into()),
            updated_at: t(4),
        },
    )
    .unwrap();
    s.put_embedding(&id("sit_b"), "m", &[1u8; 32], &[0.5, -0.5])
        .unwrap();
    s
}

/// Every string of `v` outside a key named `uuid` or `id` of a link (identities, not
/// references) that parses as a UUID.
fn uuid_strings(v: &Value, key: &str, out: &mut Vec<String>) {
    match v {
        Value::String(s) if key != "uuid" && key != "id" && uuid::Uuid::parse_str(s).is_ok() => {
            out.push(format!("{key}: {s}"));
        }
        Value::Array(a) => a.iter().for_each(|x| uuid_strings(x, key, out)),
        Value::Object(o) => o.iter().for_each(|(k, x)| uuid_strings(x, k, out)),
        _ => {}
    }
}

#[test]
fn references_are_readable_ids() {
    let s = filled_store(&tmp("export-v2", "readable"));
    let doc = s.export_character().unwrap();
    assert_eq!(doc["format_version"], json!(EXPORT_VERSION));
    assert_eq!(EXPORT_VERSION, 2);
    let self_note = &doc["notes"][0];
    assert_eq!(self_note["id"], "sem_self");
    assert_eq!(self_note["uuid"], json!(id("sem_self").to_string()));
    // Export link shape: no `from`, readable `to`, no id where the reader derives it.
    let first = self_note["mem_links"][0].as_object().unwrap();
    let mut keys: Vec<&str> = first.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["intensity", "link_type", "to"]);
    assert_eq!(first["to"], "sit_b");
    let cat = doc["notes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "sem_cat")
        .unwrap();
    assert_eq!(cat["mem_links"][0]["to"], "sem_self");
    assert!(cat["mem_links"][0].get("id").is_none());
    // The link added with a random id keeps it.
    assert_eq!(cat["mem_links"][1]["to"], "sit_b");
    assert!(cat["mem_links"][1]["id"].is_string());
    assert_eq!(doc["records"][0]["node"], "sit_b");
    assert_eq!(doc["records"][1]["node"], json!(id("ghost").to_string()));
    assert_eq!(doc["feedback"][0]["node"], "sem_cat");
    assert_eq!(doc["forget"][0]["node"], "sit_b");
    assert_eq!(doc["embeddings"][0]["node"], "sit_b");
    assert_eq!(doc["orphan_links"][0]["from"], "sit_b");
    // The only UUIDs left name notes that are not stored (the orphan's target, its record).
    let mut found = Vec::new();
    uuid_strings(&doc, "", &mut found);
    let ghost = id("ghost").to_string();
    assert!(found.iter().all(|f| f.ends_with(&ghost)), "{found:?}");
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn round_trip_is_byte_identical() {
    let s = filled_store(&tmp("export-v2", "src"));
    let doc = s.export_character().unwrap();
    let mut copy = Store::open_in(tmp("export-v2", "dst"), C).unwrap();
    copy.import_character(&doc).unwrap();
    let again = copy.export_character().unwrap();
    assert_eq!(again.to_string(), doc.to_string());
    // The stores agree row for row: same link ids, archived flag, records.
    assert_eq!(copy.counts().unwrap(), s.counts().unwrap());
    assert!(copy.is_archived(&id("proc_c")).unwrap());
    assert_eq!(
        copy.note(&id("sem_cat")).unwrap(),
        s.note(&id("sem_cat")).unwrap()
    );
}

/// `doc` (version 2) written as version 1: UUID references, every link id.
fn as_v1(doc: &Value) -> Value {
    let mut v1 = doc.clone();
    let uuid_of = |r: &Value| -> Value {
        let s = r.as_str().unwrap();
        match doc["notes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == s)
        {
            Some(n) => n["uuid"].clone(),
            None => r.clone(),
        }
    };
    v1["format_version"] = json!(1);
    for n in v1["notes"].as_array_mut().unwrap() {
        let from = MemoryId(uuid::Uuid::parse_str(n["uuid"].as_str().unwrap()).unwrap());
        for (j, l) in n["mem_links"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            let to = uuid_of(&l["to"]);
            if l.get("id").is_none() {
                let to_id = MemoryId(uuid::Uuid::parse_str(to.as_str().unwrap()).unwrap());
                l["id"] = json!(LinkId::derive(from, to_id, j).to_string());
            }
            l["to"] = to;
        }
    }
    for l in v1["orphan_links"].as_array_mut().unwrap() {
        assert!(l["id"].is_string(), "random ids are written");
        l["from"] = uuid_of(&l["from"]);
        l["to"] = uuid_of(&l["to"]);
    }
    for table in ["records", "feedback", "forget", "embeddings"] {
        for r in v1[table].as_array_mut().unwrap() {
            r["node"] = uuid_of(&r["node"]);
        }
    }
    v1
}

#[test]
fn version_1_documents_still_import() {
    let s = filled_store(&tmp("export-v2", "v1-src"));
    let doc = s.export_character().unwrap();
    let v1 = as_v1(&doc);
    assert!(v1.to_string().contains(&id("sit_b").to_string()));
    let mut copy = Store::open_in(tmp("export-v2", "v1-dst"), C).unwrap();
    copy.import_character(&v1).unwrap();
    // Imported as version 1, exported as version 2: the same document as the original's.
    assert_eq!(
        copy.export_character().unwrap().to_string(),
        doc.to_string()
    );
    // Version 1 keeps its checks: a link to a UUID the document lacks.
    let mut bad = v1.clone();
    bad["notes"][0]["mem_links"][0]["to"] = json!(uuid::Uuid::from_u128(3).to_string());
    let e = copy.import_character(&bad).unwrap_err();
    assert_eq!(e.kind(), "missing_link_target", "{e}");
    assert!(e.to_string().contains("sem_self"), "{e}");
    let mut future = doc.clone();
    future["format_version"] = json!(3);
    assert_eq!(
        copy.import_character(&future).unwrap_err().kind(),
        "invalid_json"
    );
}

#[test]
fn a_hand_written_document_imports() {
    let doc = json!({
        "format": "soulmem-character",
        "format_version": 2,
        "character": C,
        "notes": [
            {"id": "sem_self", "mem_type": {"Semantic": {"content": "小红", "concept_type": "Entity"}},
             "mem_links": [{"from": "sem_self", "to": "sem_xb", "link_type": {"Sem": {"verb": "朋友", "confidence": 0.9}}}]},
            {"id": "sem_xb", "tags": ["朋友"], "mem_type": {"Semantic": {"content": "小白", "concept_type": "Entity"}},
             "mem_links": [{"to": "sem_self", "intensity": 0.4, "link_type": {"Sem": {"verb": "朋友", "confidence": 0.8}}}]}
        ],
        "feedback": [{"node": "sem_xb", "value": 1, "at": "2026-01-01T00:00:00Z"}]
    });
    let mut s = Store::open_in(tmp("export-v2", "hand"), C).unwrap();
    s.import_character(&doc).unwrap();
    let me = s.note(&id("sem_self")).unwrap().unwrap();
    assert!(me.core, "sem_self is core by default");
    assert_eq!(me.links.len(), 1);
    assert_eq!(me.links[0].to, id("sem_xb"));
    assert_eq!(me.links[0].intensity, 1.0);
    assert_eq!(s.feedback().unwrap()[0].0, id("sem_xb"));
    // The export of it imports back to the same document.
    let out = s.export_character().unwrap();
    let mut again = Store::open_in(tmp("export-v2", "hand2"), C).unwrap();
    again.import_character(&out).unwrap();
    assert_eq!(again.export_character().unwrap(), out);

    let mut bad = doc.clone();
    bad["notes"][1]["mem_links"][0]["to"] = json!("sem_nobody");
    let e = s.import_character(&bad).unwrap_err();
    assert_eq!(e.kind(), "missing_link_target");
    assert!(
        e.to_string().contains("sem_xb") && e.to_string().contains("sem_nobody"),
        "{e}"
    );
    let mut bad = doc.clone();
    bad["notes"][1]["mem_links"][0]["from"] = json!("sem_self");
    let e = s.import_character(&bad).unwrap_err();
    assert!(
        e.to_string().contains("sem_xb") && e.to_string().contains("mem_links[0].from"),
        "{e}"
    );
    let mut bad = doc.clone();
    bad["feedback"][0]["node"] = json!("sem_nobody");
    let e = s.import_character(&bad).unwrap_err();
    assert!(
        e.to_string().contains("feedback[0]") && e.to_string().contains("sem_nobody"),
        "{e}"
    );
    assert!(
        !e.to_string().contains(&id("sem_nobody").to_string()),
        "{e}"
    );
    // Refusals changed nothing.
    assert_eq!(s.export_character().unwrap(), out);
}

#[test]
fn generated_stores_round_trip_exactly() {
    let mut runner = TestRunner::new(Config {
        cases: 40,
        failure_persistence: None,
        ..Config::default()
    });
    let edges = proptest::collection::vec((0usize..8, 0usize..10, any::<bool>()), 0..30);
    runner
        .run(&(edges, proptest::collection::vec(any::<bool>(), 8)), |(edges, archived)| {
            let dir = tmp("export-v2", "prop");
            let mut s = Store::open_in(&dir, C).unwrap();
            let nodes: Vec<Value> = (0..8)
                .map(|i| json!({"id": format!("n{i}"), "mem_type": {"Semantic": {"content": format!("概念{i}"), "concept_type": "Abstract"}}}))
                .collect();
            let graph = import_bytes(C, Value::Array(nodes).to_string().as_bytes(), &ImportOptions { now: t(0), ..ImportOptions::default() }).unwrap();
            s.save_graph(&graph).unwrap();
            // Targets 8 and 9 are never stored: those links are orphans.
            for (k, (from, to, random)) in edges.iter().enumerate() {
                let (f, to) = (id(&format!("n{from}")), id(&format!("n{to}")));
                let link = if *random { LinkId::random() } else { LinkId::derive(f, to, k) };
                s.put_link(&sem_link(f, to, link)).unwrap();
            }
            for (i, a) in archived.iter().enumerate() {
                if *a {
                    s.archive_note(&id(&format!("n{i}"))).unwrap();
                }
            }
            let doc = s.export_character().unwrap();
            let mut copy = Store::open_in(tmp("export-v2", "prop-copy"), C).unwrap();
            copy.import_character(&doc).unwrap();
            prop_assert_eq!(copy.export_character().unwrap().to_string(), doc.to_string());
            prop_assert_eq!(copy.counts().unwrap(), s.counts().unwrap());
            std::fs::remove_dir_all(&dir).ok();
            Ok(())
        })
        .unwrap();
}
