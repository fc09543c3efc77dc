//! Card → graph → card → graph and World Info → notes → World Info → notes give identical
//! notes.
#![allow(clippy::unwrap_used)]

mod card_support;

// In a module named after the file, so `cargo test card` selects these tests.
mod card_roundtrip {
    use crate::card_support::*;
    use serde_json::json;
    use soul_mem_core::card::{export_card_v2, export_world_info};

    #[test]
    fn card_round_trip_gives_identical_notes() {
        let first = graph_of(&import(&fixture("su_wan.png"), None).graph_json);
        let card = export_card_v2(&first).unwrap().to_string();
        let second_import = import(card.as_bytes(), None);
        let second = graph_of(&second_import.graph_json);
        assert_eq!(notes(&first), notes(&second));
        // And once more, byte for byte.
        let third = import(
            export_card_v2(&second).unwrap().to_string().as_bytes(),
            None,
        );
        assert_eq!(third.graph_json, second_import.graph_json);
    }

    #[test]
    fn world_info_round_trip_gives_identical_notes() {
        let wi = json!({"entries": {
        "0": {"uid": 0, "key": ["Fog", "雾"], "keysecondary": ["mist"], "comment": "", "content": "@@depth 2\n@@activate\nThe fog near the Harbor.", "constant": true},
        "12": {"uid": 12, "key": ["harbor"], "comment": "The Harbor", "content": "Boats for {{user}} and {{char}}; fog often."},
        "2": {"uid": 2, "key": [], "comment": "", "content": "A nameless constant note.", "constant": true},
        "3": {"uid": 3, "key": "a, b", "disable": true},
    }})
    .to_string();
        let first = graph_of(&import(wi.as_bytes(), Some("Mo")).graph_json);
        let exported = export_world_info(&first).unwrap();
        assert_eq!(
            exported["entries"]["0"]["key"],
            json!(["Fog", "雾", "mist"])
        );
        assert_eq!(
            exported["entries"]["0"]["content"],
            "@@depth 2\n@@activate\nThe fog near the Harbor."
        );
        assert_eq!(exported["entries"]["12"]["disable"], false);
        let second = graph_of(&import(exported.to_string().as_bytes(), Some("Mo")).graph_json);
        assert_eq!(notes(&first), notes(&second));
        assert_eq!(first.stats().nodes, 4);
    }

    #[test]
    fn any_graph_exports_with_its_note_ids_kept() {
        // The demo character's graph (not made from a card): notes keep their ids in a round trip.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/characters/demo.json");
        let demo = graph_of(&std::fs::read_to_string(path).unwrap());
        let card = export_card_v2(&demo).unwrap();
        assert_eq!(card["data"]["name"], "小红");
        let back = graph_of(&import(card.to_string().as_bytes(), None).graph_json);
        assert!(back.get_by_readable("sem_xiaobai").is_some());
        assert_eq!(
            semantic(&back, "sem_self").aliases,
            semantic(&demo, "sem_self").aliases
        );
    }
}
