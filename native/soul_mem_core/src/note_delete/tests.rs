#![allow(clippy::unwrap_used)]
use super::*;
use crate::engine::EmbedderChoice;
use crate::import::{import_bytes, ImportOptions};
use crate::retrieval::{HashEmbedder, PipelineConfig};
use crate::store::{CheckpointMode, ForgetState};
use chrono::Utc;

const C: &str = "小红";

// sit_b is linked from sem_self and sem_cat, and links to proc_c.
const GRAPH: &str = r#"[
  {"id":"sem_self","mem_type":{"Semantic":{"content":"小红","concept_type":"Entity"}},
   "mem_links":[{"from":"sem_self","to":"sit_b","link_type":{"Sem":{"verb":"参与","confidence":0.7}}},
                {"from":"sem_self","to":"sem_cat","link_type":{"Sem":{"verb":"养","confidence":0.9}}}]},
  {"id":"sit_b","mem_type":{"Situation":{"SpecificSituation":{"narrative":"放学后和小白去吃麻辣烫，汤打翻了"}}},
   "mem_links":[{"from":"sit_b","to":"proc_c","link_type":{"Proc":{"prob":0.6}}}]},
  {"id":"proc_c","mem_type":{"Procedure":{"action":{"content":"摸辫子","action_type":"Think"}}}},
  {"id":"sem_cat","mem_type":{"Semantic":{"content":"橘猫","concept_type":"Entity"}},
   "mem_links":[{"from":"sem_cat","to":"sit_b","link_type":{"Sem":{"verb":"见过","confidence":0.8}}}]}
]"#;

fn engine() -> Engine {
    let g = import_bytes(C, GRAPH.as_bytes(), &ImportOptions::default()).unwrap();
    Engine::new(g)
}

fn id(s: &str) -> MemoryId {
    MemoryId::derive(C, s)
}

fn recalled(e: &mut Engine, text: &str) -> Vec<String> {
    let q = crate::text::text_queries(text, 3);
    let r = e.recall(&q, &PipelineConfig::default(), None).unwrap();
    e.items(&r).memories.into_iter().map(|m| m.id).collect()
}

#[test]
fn removes_the_note_and_links_in_both_directions_from_graph_and_index() {
    let mut e = engine();
    e.embed_all(
        EmbedderChoice::Hash(HashEmbedder::new(256).unwrap()),
        &|_, _| {},
    )
    .unwrap();
    let before_delete = recalled(&mut e, "放学后和小白去吃麻辣烫");
    assert!(
        before_delete.contains(&"sit_b".to_owned()),
        "{before_delete:?}"
    );
    let before = e.graph().link_count();
    let r = e.delete_note(None, None, "sit_b").unwrap();
    assert_eq!(
        r,
        DeleteReport {
            id: "sit_b".into(),
            links_removed: 3
        }
    );
    assert!(e.graph().resolve("sit_b").is_none());
    assert_eq!(e.graph().link_count(), before - 3);
    assert!(e
        .graph()
        .notes()
        .all(|n| n.links.iter().all(|l| l.to != id("sit_b"))));
    assert_eq!(e.graph().stats().pending_links, 0);
    // The index follows the graph: recall no longer returns it.
    assert!(!recalled(&mut e, "放学后和小白去吃麻辣烫").contains(&"sit_b".to_owned()));
    // By UUID text too; an unknown id is named.
    assert_eq!(
        e.delete_note(None, None, &id("proc_c").to_string())
            .unwrap()
            .id,
        "proc_c"
    );
    let err = e.delete_note(None, None, "sit_b").unwrap_err();
    assert_eq!(err.kind(), "not_found");
    assert!(err.to_string().contains("sit_b"), "{err}");
}

#[test]
fn the_self_node_is_refused() {
    let mut e = engine();
    let err = e.delete_note(None, None, "sem_self").unwrap_err();
    assert_eq!(err.kind(), "invalid_argument");
    assert!(err.to_string().contains("sem_self"), "{err}");
    assert!(e.graph().resolve("sem_self").is_some());
}

#[test]
fn the_store_loses_every_row_of_the_note_and_stays_in_sync() {
    let dir = std::env::temp_dir().join(format!("soulmem-note-delete-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut s = Store::open_in(&dir, C).unwrap();
    s.save_graph(engine().graph()).unwrap();
    let b = id("sit_b");
    let now = Utc::now();
    s.append_records(&[(b, now)]).unwrap();
    s.append_feedback(&b, 1, now).unwrap();
    s.put_embedding(&b, "m", &[3u8; 32], &[0.5, 0.5]).unwrap();
    s.set_forget_state(
        &b,
        &ForgetState {
            missing_degree: 0.3,
            band: 1,
            revised_text: None,
            original_text: None,
            updated_at: now,
        },
    )
    .unwrap();
    let mut e = Engine::new(s.load_graph().unwrap());
    let r = e.delete_note(Some(&mut s), None, "sit_b").unwrap();
    assert_eq!(r.links_removed, 3);
    assert!(s.note(&b).unwrap().is_none());
    assert!(s.link_ids_touching(&b).unwrap().is_empty());
    assert!(s
        .records_since(chrono::DateTime::<Utc>::MIN_UTC)
        .unwrap()
        .is_empty());
    assert!(s.feedback().unwrap().is_empty());
    assert!(s.embedding(&b, "m").unwrap().is_none());
    assert!(s.forget_state(&b).unwrap().is_none());
    assert_eq!(s.counts().unwrap(), (3, 0, 1));
    // Still synced: the next checkpoint writes only the touched notes and agrees.
    let stats = e.checkpoint(&mut s, &[]).unwrap();
    assert_eq!(stats.mode, CheckpointMode::Incremental);
    assert_eq!(s.counts().unwrap(), (3, 0, 1));

    // A note only in the store (archived) is deleted there.
    s.archive_note(&id("proc_c")).unwrap();
    let mut bare = Engine::new(crate::graph::MemoryGraph::new(C));
    let r = bare.delete_note(Some(&mut s), None, "proc_c").unwrap();
    assert_eq!(
        r,
        DeleteReport {
            id: "proc_c".into(),
            links_removed: 0
        }
    );
    assert!(s.note(&id("proc_c")).unwrap().is_none());
    let err = bare.delete_note(Some(&mut s), None, "proc_c").unwrap_err();
    assert_eq!(err.kind(), "not_found");
    std::fs::remove_dir_all(&dir).unwrap();
}
