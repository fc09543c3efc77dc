//! Card import refuses bad input with an error that says what and where.
#![allow(clippy::unwrap_used)]

mod card_support;

// In a module named after the file, so `cargo test card` selects these tests.
mod card_errors {
    use crate::card_support::*;
    use serde_json::json;
    use soul_mem_core::card::import_card;
    use soul_mem_core::Error;

    fn err(bytes: &[u8]) -> Error {
        import_card(bytes, &opts(None)).unwrap_err()
    }

    fn card() -> String {
        v2_card(
            "Ann",
            &[json!({"id": 1, "keys": ["sword"], "content": "x"})],
        )
    }

    fn assert_err(e: &Error, kind: &str, needles: &[&str]) {
        assert_eq!(e.kind(), kind, "{e}");
        for n in needles {
            assert!(e.to_string().contains(n), "{n:?} not in {e}");
        }
    }

    #[test]
    fn png_without_card_chunk() {
        let e = err(&png(&[chunk(b"tEXt", b"Comment\0hello")], &[]));
        assert_err(&e, "invalid_card", &["no character card chunk"]);
    }

    #[test]
    fn png_with_bad_crc_names_the_chunk() {
        let mut bytes = png(&[text_chunk("chara", &card())], &[]);
        let at = bytes.windows(4).position(|w| w == b"tEXt").unwrap();
        bytes[at + 10] ^= 0xff; // a byte of the data, not of the length
        assert_err(&err(&bytes), "invalid_card", &["tEXt", "CRC mismatch"]);
    }

    #[test]
    fn truncated_png() {
        let bytes = png(&[text_chunk("chara", &card())], &[]);
        let e = err(&bytes[..bytes.len() - 20]);
        assert_err(&e, "invalid_card", &["truncated"]);
        // Cut right after a whole chunk: no IEND.
        let iend = bytes.len() - 12;
        assert_err(&err(&bytes[..iend]), "invalid_card", &["missing IEND"]);
    }

    #[test]
    fn chunk_claiming_4_gb_allocates_nothing() {
        let mut bytes = png(&[], &[]);
        let iend = bytes.len() - 12;
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.extend_from_slice(b"tEXt");
        huge.extend_from_slice(b"chara\0abc");
        bytes.splice(iend..iend, huge);
        assert_err(
            &err(&bytes),
            "invalid_card",
            &["tEXt", "claims 4294967295 bytes"],
        );
    }

    #[test]
    fn ztxt_bomb_is_refused() {
        let bomb = vec![b'A'; 17 * 1024 * 1024];
        let bytes = png(&[ztxt_chunk("chara", &bomb)], &[]);
        assert!(bytes.len() < 100_000);
        assert_err(
            &err(&bytes),
            "invalid_card",
            &["zTXt", "decompression bomb"],
        );
    }

    #[test]
    fn base64_that_is_not_json() {
        let bytes = png(
            &[chunk(
                b"tEXt",
                format!("chara\0{}", b64("not json")).as_bytes(),
            )],
            &[],
        );
        assert_err(
            &err(&bytes),
            "invalid_card",
            &["chara", "does not decode to JSON"],
        );
        let bytes = png(&[chunk(b"tEXt", b"chara\0!!!*")], &[]);
        assert_err(&err(&bytes), "invalid_card", &["not base64"]);
    }

    #[test]
    fn card_missing_its_name() {
        let v2 = json!({"spec": "chara_card_v2", "data": {"description": "d"}}).to_string();
        assert_err(
            &err(v2.as_bytes()),
            "invalid_card",
            &["missing required field data.name"],
        );
        let v1 = json!({"description": "d", "first_mes": "hi"}).to_string();
        assert_err(&err(v1.as_bytes()), "invalid_card", &["name"]);
        let spec = json!({"spec": "chara_card_v9", "data": {"name": "x"}}).to_string();
        assert_err(&err(spec.as_bytes()), "invalid_card", &["chara_card_v9"]);
        let wrong =
            json!({"spec": "chara_card_v2", "data": {"name": "x", "first_mes": 3}}).to_string();
        assert_err(
            &err(wrong.as_bytes()),
            "invalid_card",
            &["data.first_mes", "string"],
        );
    }

    #[test]
    fn ten_megabyte_description_names_the_field() {
        let big = "a".repeat(10 * 1024 * 1024);
        let v2 =
            json!({"spec": "chara_card_v2", "data": {"name": "x", "description": big}}).to_string();
        assert_err(
            &err(v2.as_bytes()),
            "limit_exceeded",
            &["data.description", "262144"],
        );
        let entry =
            json!({"id": 5, "keys": ["k"], "comment": "Big one", "content": "b".repeat(300_000)});
        let e = err(v2_card("Ann", &[entry]).as_bytes());
        assert_err(&e, "limit_exceeded", &["uid 5", "Big one", "content"]);
    }

    #[test]
    fn fifty_thousand_entries_are_refused() {
        let entries: Vec<_> = (0..50_000)
            .map(|i| json!({"id": i, "keys": ["k"]}))
            .collect();
        let e = err(v2_card("Ann", &entries).as_bytes());
        assert_err(
            &e,
            "limit_exceeded",
            &["lorebook entries", "50000", "10000"],
        );
    }

    #[test]
    fn duplicate_entry_ids_name_both_entries() {
        let entries = [
            json!({"id": 3, "keys": ["sword"], "comment": "Sword", "content": "x"}),
            json!({"id": 3, "keys": ["shield"], "content": "y"}),
        ];
        let e = err(v2_card("Ann", &entries).as_bytes());
        assert_err(
            &e,
            "invalid_card",
            &["uid 3", "shield", "Sword", "duplicate"],
        );
        let wi = json!({"entries": {"0": {"uid": 1, "key": ["a"]}, "1": {"uid": 1, "key": ["b"]}}});
        let e = import_card(wi.to_string().as_bytes(), &opts(Some("W"))).unwrap_err();
        assert_err(&e, "invalid_card", &["uid 1", "duplicate"]);
    }

    #[test]
    fn zip_with_path_traversal_or_bomb() {
        let zip = charx(&[
            ("card.json", card().as_bytes()),
            ("../evil.sh", b"rm -rf /"),
        ]);
        assert_err(
            &err(&zip),
            "invalid_card",
            &["../evil.sh", "path traversal"],
        );
        let zip = charx(&[("/etc/passwd", b"x"), ("card.json", card().as_bytes())]);
        assert_err(&err(&zip), "invalid_card", &["/etc/passwd"]);
        let bomb = vec![b' '; 17 * 1024 * 1024];
        let zip = charx(&[("card.json", &bomb)]);
        assert!(zip.len() < 200_000);
        assert_err(
            &err(&zip),
            "invalid_card",
            &["card.json", "decompression bomb"],
        );
        assert_err(
            &err(&charx(&[("other.json", b"{}")])),
            "invalid_card",
            &["no card.json"],
        );
    }

    #[test]
    fn oversized_input_and_garbage() {
        let big = vec![b' '; 21 * 1024 * 1024];
        assert_err(&err(&big), "too_large", &[]);
        assert_err(&err(b"\xff\xfe"), "invalid_card", &["UTF-8"]);
        assert_err(&err(b"[1,2]"), "invalid_card", &["object"]);
    }
}
