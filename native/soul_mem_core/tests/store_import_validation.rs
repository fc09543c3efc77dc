//! A character import is checked as a whole: generated corruptions of a valid export are
//! refused with the reason and place named, no message carries a filesystem path, and the
//! store is left exactly as it was.
#![allow(clippy::unwrap_used)]

mod store_util;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use soul_mem_core::import::{import_bytes, ImportOptions};
use soul_mem_core::model::MemoryId;
use soul_mem_core::store::{ForgetState, Message, Store};

const C: &str = "小红";

use store_util::STORE_GRAPH as GRAPH;

/// A store holding every kind of row an export carries.
fn filled_store(dir: &std::path::Path) -> Store {
    let t = store_util::t;
    let graph = import_bytes(
        C,
        GRAPH.as_bytes(),
        &ImportOptions {
            now: t(0),
            ..ImportOptions::default()
        },
    )
    .unwrap();
    let mut s = Store::open_in(dir, C).unwrap();
    s.save_graph(&graph).unwrap();
    for (i, role) in ["user", "assistant"].iter().enumerate() {
        s.append_message(&Message {
            role: (*role).into(),
            text: format!("第{i}句"),
            at: t(i as i64),
            tagged: false,
        })
        .unwrap();
    }
    let b = MemoryId::derive(C, "sit_b");
    s.append_records(&[(b, t(3))]).unwrap();
    s.set_forget_state(
        &b,
        &ForgetState {
            missing_degree: 0.2,
            band: 1,
            revised_text: None,
            original_text: Some("吃麻辣烫".into()),
            updated_at: t(4),
        },
    )
    .unwrap();
    s.put_embedding(&b, "m", &[1u8; 32], &[0.5, -0.5]).unwrap();
    s.put_embedding(
        &MemoryId::derive(C, "sem_cat"),
        "m",
        &[2u8; 32],
        &[0.1, 0.2],
    )
    .unwrap();
    s
}

/// Every (note index, link index) of the document.
fn links(doc: &Value) -> Vec<(usize, usize)> {
    let notes = doc["notes"].as_array().unwrap();
    (0..notes.len())
        .flat_map(|i| (0..notes[i]["mem_links"].as_array().unwrap().len()).map(move |j| (i, j)))
        .collect()
}

/// Applies corruption `kind` chosen with `a`, `b` (any numbers; reduced to valid indices) and
/// returns the reasons an import may give for it.
fn corrupt(doc: &mut Value, kind: u8, a: usize, b: usize) -> &'static [&'static str] {
    let n = doc["notes"].as_array().unwrap().len();
    let (i, j) = (a % n, (a + 1 + b % (n - 1)) % n); // two different notes
    let ls = links(doc);
    let (li, lj) = (
        ls[a % ls.len()],
        ls[(a + 1 + b % (ls.len() - 1)) % ls.len()],
    );
    match kind {
        0 => {
            doc["notes"][j]["uuid"] = doc["notes"][i]["uuid"].clone();
            &["duplicate_id"]
        }
        1 => {
            doc["notes"][j]["id"] = doc["notes"][i]["id"].clone();
            &["duplicate_id"]
        }
        2 => {
            let copy = doc["notes"][i].clone();
            doc["notes"].as_array_mut().unwrap().push(copy);
            &["duplicate_id"]
        }
        3 => {
            doc["notes"][li.0]["mem_links"][li.1]["to"] = json!(uuid::Uuid::from_u128(b as u128));
            &["missing_link_target"]
        }
        4 => {
            // Dropping a note another note links to leaves that link dangling.
            let target = doc["notes"][li.0]["mem_links"][li.1]["to"].clone();
            let notes = doc["notes"].as_array_mut().unwrap();
            notes.retain(|x| x["id"] != target);
            &["missing_link_target"]
        }
        5 => {
            // Version 2 writes no derivable link id: give two links the same one.
            let id = json!(uuid::Uuid::from_u128(0xd0_0b1e + b as u128));
            doc["notes"][lj.0]["mem_links"][lj.1]["id"] = id.clone();
            doc["notes"][li.0]["mem_links"][li.1]["id"] = id;
            &["duplicate_id"]
        }
        6 => {
            doc["notes"][li.0]["mem_links"][li.1]["intensity"] = json!(-(1.0 + b as f64));
            &["invalid_value"]
        }
        7 => {
            doc["notes"][i]["mem_type"] = json!({"Bogus": {}});
            &["invalid_json"]
        }
        8 => {
            doc["notes"][li.0]["mem_links"][li.1]["link_type"] = json!({"Telepathy": {}});
            &["invalid_json"]
        }
        9 => {
            doc["notes"][i]["create_time"] = json!("2099-01-01T00:00:00Z");
            &["invalid_value"]
        }
        10 => {
            doc["records"][0]["at"] = json!(["yesterday", "", "2026-13-01T00:00:00Z"][b % 3]);
            &["invalid_json"]
        }
        11 => {
            doc["feedback"] = json!([{"node": doc["notes"][i]["uuid"], "value": 2 + (b % 5), "at": "2026-01-01T00:00:00Z"}]);
            &["invalid_value"]
        }
        12 => {
            doc["forget"][0]["missing_degree"] = json!(1.0 + (b % 7) as f64 + 0.5);
            &["invalid_value"]
        }
        13 => {
            doc["embeddings"][a % 2]["vec"] = json!(vec![0.25; 3 + b % 4]);
            &["invalid_value"]
        }
        14 => {
            doc["window"][a % 2]["role"] = json!(["system", "", "USER"][b % 3]);
            &["invalid_value"]
        }
        15 => {
            doc["window"][1]["seq"] = doc["window"][0]["seq"].clone();
            &["invalid_value"]
        }
        16 => {
            doc["notes"][li.0]["mem_links"][li.1] = json!({"id": uuid::Uuid::from_u128(7), "to": doc["notes"][j]["uuid"], "intensity": 0.5, "link_type": {"Sem": {"verb": "x", "confidence": 0.5}}, "extra": 1});
            &["invalid_json"]
        }
        _ => {
            let id = json!(uuid::Uuid::from_u128(0x0f_0f + b as u128));
            doc["notes"][li.0]["mem_links"][li.1]["id"] = id.clone();
            doc["orphan_links"] = json!([{"id": id, "from": uuid::Uuid::from_u128(10), "to": uuid::Uuid::from_u128(b as u128), "intensity": 0.5, "link_type": {"Sem": {"verb": "x", "confidence": 0.5}}}]);
            &["duplicate_id"]
        }
    }
}
#[test]
fn corrupted_exports_are_refused_and_change_nothing() {
    let dir = store_util::tmp("import-validation", "target");
    let store = std::cell::RefCell::new(filled_store(&dir));
    let doc = store.borrow().export_character().unwrap();
    let dir_text = dir.display().to_string();

    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(0u8..18, any::<usize>(), any::<usize>()),
            |(kind, a, b)| {
                let mut bad = doc.clone();
                let expected = corrupt(&mut bad, kind, a, b);
                let err = match store.borrow_mut().import_character(&bad) {
                    Ok(()) => return Err(TestCaseError::fail(format!("kind {kind} was accepted"))),
                    Err(e) => e,
                };
                let message = err.to_string();
                prop_assert!(
                    expected.contains(&err.kind()),
                    "kind {kind}: expected {expected:?}, got {}: {message}",
                    err.kind()
                );
                prop_assert!(!message.contains(&dir_text), "path in {message}");
                prop_assert_eq!(store.borrow().export_character().unwrap(), doc.clone());
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn refusals_name_the_note_and_field() {
    let dir = store_util::tmp("import-validation", "names");
    let mut store = filled_store(&dir);
    let doc = store.export_character().unwrap();
    let id_of = |i: usize| doc["notes"][i]["id"].as_str().unwrap().to_owned();

    let mut bad = doc.clone();
    bad["notes"][0]["mem_links"][0]["to"] = json!(uuid::Uuid::from_u128(1));
    let e = store.import_character(&bad).unwrap_err();
    assert!(e.to_string().contains(&id_of(0)), "{e}");

    let mut bad = doc.clone();
    let same = json!(uuid::Uuid::from_u128(5));
    bad["notes"][0]["mem_links"][0]["id"] = same.clone();
    bad["notes"][1]["mem_links"][0]["id"] = same;
    let e = store.import_character(&bad).unwrap_err();
    assert!(
        e.to_string().contains(&id_of(1)) && e.to_string().contains("mem_links[0].id"),
        "{e}"
    );

    let mut bad = doc.clone();
    bad["notes"][2]["id"] = json!(id_of(0));
    let e = store.import_character(&bad).unwrap_err();
    assert!(e.to_string().contains(&id_of(0)), "{e}");

    let mut bad = doc.clone();
    bad["forget"][0]["missing_degree"] = json!(2.0);
    let e = store.import_character(&bad).unwrap_err();
    assert!(
        e.to_string().contains("forget[0]") && e.to_string().contains("missing_degree"),
        "{e}"
    );
    // The valid document itself still imports.
    store.import_character(&doc).unwrap();
    assert_eq!(store.export_character().unwrap(), doc);
}
