//! Card import: containers (PNG, CHARX, JSON), specs (V1, V2, V3, World Info) and mapping.
#![allow(clippy::unwrap_used)]

mod card_support;

// In a module named after the file, so `cargo test card` selects these tests.
mod card_import {
    use crate::card_support::*;
    use serde_json::json;
    use soul_mem_core::model::*;

    fn small_card(name: &str) -> String {
        v2_card(
            name,
            &[
                json!({"id": 1, "keys": ["sword", "blade"], "comment": "The Sword", "content": "A blade forged by {{char}}."}),
            ],
        )
    }

    #[test]
    fn v2_png_imports() {
        let bytes = png(&[text_chunk("chara", &small_card("Ann"))], &[]);
        let out = import(&bytes, None);
        assert_eq!(out.report.format, "png_v2");
        assert_eq!(out.report.name, "Ann");
        let g = graph_of(&out.graph_json);
        let lore = semantic(&g, "sem_lore_1");
        assert_eq!(lore.content, "The Sword");
        assert_eq!(lore.aliases, ["sword", "blade"]);
        assert_eq!(lore.description, "A blade forged by Ann.");
        assert_eq!(g.stats().nodes, out.report.notes);
        assert_eq!(g.link_count(), out.report.links);
    }

    #[test]
    fn v3_png_prefers_ccv3_over_chara() {
        let v3 = small_card("Bea").replace("chara_card_v2", "chara_card_v3");
        let bytes = png(
            &[text_chunk("chara", &small_card("Ann"))],
            &[text_chunk("ccv3", &v3)],
        );
        let out = import(&bytes, None);
        assert_eq!(
            (out.report.format.as_str(), out.report.name.as_str()),
            ("png_v3", "Bea")
        );
    }

    #[test]
    fn card_chunk_after_idat_and_compressed_chunks_are_read() {
        let after = png(&[], &[text_chunk("chara", &small_card("Ann"))]);
        assert_eq!(import(&after, None).report.name, "Ann");
        let z = png(
            &[ztxt_chunk("chara", b64(&small_card("Zed")).as_bytes())],
            &[],
        );
        assert_eq!(import(&z, None).report.name, "Zed");
        let i = png(&[], &[itxt_chunk("chara", &small_card("Ivy"))]);
        assert_eq!(import(&i, None).report.name, "Ivy");
    }

    #[test]
    fn json_v1_v2_v3_and_charx() {
        let v1 =
        json!({"name": "Old", "description": "{{char}} is old.", "personality": "", "scenario": "",
                    "first_mes": "Hi", "mes_example": ""})
        .to_string();
        let out = import(v1.as_bytes(), None);
        assert_eq!(out.report.format, "json_v1");
        assert_eq!(
            semantic(&graph_of(&out.graph_json), "sem_self").description,
            "Old is old."
        );

        assert_eq!(
            import(small_card("Ann").as_bytes(), None).report.format,
            "json_v2"
        );
        let v3 = json!({"spec": "chara_card_v3", "spec_version": "3.0",
                    "data": {"name": "Neo", "nickname": "N", "description": "d"}})
        .to_string();
        let out = import(v3.as_bytes(), None);
        assert_eq!(out.report.format, "json_v3");
        assert_eq!(
            semantic(&graph_of(&out.graph_json), "sem_self").aliases,
            ["N"]
        );

        let zip = charx(&[("assets/icon.png", b"x"), ("card.json", v3.as_bytes())]);
        let out = import(&zip, None);
        assert_eq!(
            (out.report.format.as_str(), out.report.name.as_str()),
            ("charx_v3", "Neo")
        );
    }

    #[test]
    fn world_info_with_500_entries() {
        let mut entries = serde_json::Map::new();
        for uid in 0..500 {
            entries.insert(
            uid.to_string(),
            json!({"uid": uid, "key": [format!("place{uid}"), format!("地点{uid}")], "keysecondary": ["x"],
                   "comment": format!("Place {uid}"), "content": format!("Place {uid} is next to place{}.", (uid + 1) % 500),
                   "constant": uid == 7, "disable": uid == 9}),
        );
        }
        let wi = json!({ "entries": entries }).to_string();
        let err = soul_mem_core::card::import_card(wi.as_bytes(), &opts(None)).unwrap_err();
        assert!(err.to_string().contains("name"), "{err}");

        let out = import(wi.as_bytes(), Some("Mapper"));
        let r = &out.report;
        assert_eq!(r.format, "world_info");
        assert_eq!(
            (r.lore_entries, r.skipped_disabled, r.core_notes),
            (499, 1, 2)
        );
        let g = graph_of(&out.graph_json);
        assert_eq!(g.stats().nodes, 500);
        // Sorted by numeric uid, not by the object's text key order.
        let ids: Vec<_> = g.notes().map(|n| n.readable_id.clone()).take(4).collect();
        assert_eq!(ids, ["sem_self", "sem_lore_0", "sem_lore_1", "sem_lore_2"]);
        let n = g.get_by_readable("sem_lore_3").unwrap();
        assert_eq!(semantic(&g, "sem_lore_3").aliases, ["place3", "地点3", "x"]);
        let to: Vec<_> = n.links.iter().map(|l| g.readable_of(&l.to)).collect();
        assert_eq!(to, ["sem_lore_4"]);
        assert!(g.get_by_readable("sem_lore_7").unwrap().core);
        assert!(g.get_by_readable("sem_lore_9").is_none());
    }

    #[test]
    fn demo_card_json_and_png_give_the_same_graph() {
        let json_out = import(&fixture("su_wan.json"), None);
        let png_out = import(&fixture("su_wan.png"), None);
        assert_eq!(json_out.graph_json, png_out.graph_json);
        assert_eq!(png_out.report.format, "png_v2");
        let r = &json_out.report;
        assert_eq!(
            (r.lore_entries, r.skipped_disabled, r.core_notes),
            (19, 1, 2)
        );
        // Byte-identical on a second run.
        assert_eq!(
            import(&fixture("su_wan.json"), None).graph_json,
            json_out.graph_json
        );

        let g = graph_of(&json_out.graph_json);
        let me = semantic(&g, "sem_self");
        assert_eq!(me.content, "苏晚");
        assert!(
            me.description.starts_with("我是港口小镇上"),
            "{}",
            me.description
        );
        assert!(g.get_by_readable("sem_self").unwrap().core);
        assert!(g.get_by_readable("sem_lore_0").unwrap().core);
        let ink = g.get_by_readable("sem_lore_18").unwrap();
        assert_eq!(ink.tags, ["decorator:depth=4"]);
        assert!(semantic(&g, "sem_lore_18")
            .description
            .starts_with("苏晚自己调制"));
        assert!(
            g.get_by_readable("sem_lore_17").is_none(),
            "disabled entry skipped"
        );

        // Greetings hang off the first meeting; examples keep only the character's lines.
        let meeting = g.get_by_readable("spec_first_meeting").unwrap();
        let procs: Vec<_> = meeting
            .links
            .iter()
            .filter(|l| matches!(l.link_type, MemoryLinkType::Proc(_)))
            .map(|l| g.readable_of(&l.to))
            .collect();
        assert_eq!(procs, ["proc_greeting_0", "proc_greeting_1"]);
        let MemoryType::Procedure(ex) = &g.get_by_readable("proc_example_0").unwrap().mem_type
        else {
            panic!()
        };
        assert_eq!(
            ex.action.content,
            "能修的。书坏了可以修——这是外婆常说的话。\n*她用指尖轻轻抚过书脊。*"
        );
        assert!(g.get_by_readable("proc_example_2").is_none());
        // Mentions: the bookshop entry mentions the lighthouse; the scenario the bookshop.
        let targets = |id: &str| -> Vec<String> {
            g.get_by_readable(id)
                .unwrap()
                .links
                .iter()
                .map(|l| g.readable_of(&l.to))
                .collect()
        };
        assert!(targets("sem_lore_0").contains(&"sem_lore_3".to_owned()));
        assert!(targets("abs_scenario").contains(&"sem_lore_0".to_owned()));
        assert!(targets("sem_lore_1").contains(&"sem_self".to_owned()));
    }

    #[test]
    fn mention_links_are_capped_per_note() {
        // Every entry shares the key "common" and mentions it: without the cap this is n².
        let entries: Vec<_> = (0..2000)
        .map(|i| json!({"id": i, "keys": ["common", format!("k{i}")], "content": "the common thing"}))
        .collect();
        let out = import(v2_card("Cap", &entries).as_bytes(), None);
        let g = graph_of(&out.graph_json);
        for n in g.notes() {
            assert!(
                n.links.len() <= 16 + 4,
                "{} has {} links",
                n.readable_id,
                n.links.len()
            );
        }
    }
}
