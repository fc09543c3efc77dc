//! Helpers of the card tests: PNG and CHARX builders and graph comparison.
#![allow(dead_code, clippy::unwrap_used)]

use base64::Engine as _;
use chrono::{DateTime, Utc};
use soul_mem_core::card::{import_card, CardImport, CardOptions};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::import::{import_bytes, ImportOptions};
use soul_mem_core::model::*;
use std::io::Write;

pub const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];

/// One PNG chunk (length, type, data, CRC).
pub fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    soul_mem_core::card::png::encode_chunk(kind, data)
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

pub fn b64(json: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(json.as_bytes())
}

/// A tEXt chunk `keyword` with base64 of `json`.
pub fn text_chunk(keyword: &str, json: &str) -> Vec<u8> {
    chunk(b"tEXt", format!("{keyword}\0{}", b64(json)).as_bytes())
}

/// A zTXt chunk `keyword` holding `text` compressed.
pub fn ztxt_chunk(keyword: &str, text: &[u8]) -> Vec<u8> {
    let mut data = format!("{keyword}\0").into_bytes();
    data.push(0);
    data.extend(zlib(text));
    chunk(b"zTXt", &data)
}

/// A compressed iTXt chunk `keyword` with base64 of `json`.
pub fn itxt_chunk(keyword: &str, json: &str) -> Vec<u8> {
    let mut data = format!("{keyword}\0").into_bytes();
    data.extend_from_slice(&[1, 0]);
    data.extend_from_slice(b"\0\0");
    data.extend(zlib(b64(json).as_bytes()));
    chunk(b"iTXt", &data)
}

/// A valid 1×1 RGBA PNG with `before` chunks ahead of IDAT and `after` chunks behind it.
pub fn png(before: &[Vec<u8>], after: &[Vec<u8>]) -> Vec<u8> {
    let mut out = PNG_SIGNATURE.to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&1u32.to_be_bytes());
    ihdr.extend_from_slice(&1u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    out.extend(chunk(b"IHDR", &ihdr));
    for c in before {
        out.extend_from_slice(c);
    }
    out.extend(chunk(b"IDAT", &zlib(&[0, 0, 0, 0, 0])));
    for c in after {
        out.extend_from_slice(c);
    }
    out.extend(chunk(b"IEND", b""));
    out
}

/// A CHARX (zip) with the given `(name, bytes)` entries, deflated.
pub fn charx(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        zip.start_file(*name, opts).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

pub fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-07-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

pub fn opts(name: Option<&str>) -> CardOptions {
    CardOptions {
        name: name.map(str::to_owned),
    }
}

pub fn import(bytes: &[u8], name: Option<&str>) -> CardImport {
    import_card(bytes, &opts(name)).unwrap()
}

/// The Graph JSON through the real importer (proves it is valid).
pub fn graph_of(json: &str) -> MemoryGraph {
    let o = ImportOptions {
        now: now(),
        ..ImportOptions::default()
    };
    import_bytes("card", json.as_bytes(), &o).unwrap()
}

/// Everything a note is, with link targets as readable ids (link ids included).
pub type NoteView = (
    String,
    Vec<String>,
    MemoryType,
    bool,
    Vec<(String, MemoryLinkType, String)>,
);

pub fn notes(graph: &MemoryGraph) -> Vec<NoteView> {
    graph
        .notes()
        .map(|n| {
            let links = n
                .links
                .iter()
                .map(|l| {
                    (
                        graph.readable_of(&l.to),
                        l.link_type.clone(),
                        format!("{} {}", l.intensity, l.id),
                    )
                })
                .collect();
            (
                n.readable_id.clone(),
                n.tags.clone(),
                n.mem_type.clone(),
                n.core,
                links,
            )
        })
        .collect()
}

pub fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/cards")
        .join(name);
    std::fs::read(path).unwrap()
}

pub fn semantic<'a>(graph: &'a MemoryGraph, id: &str) -> &'a SemMemory {
    match &graph.get_by_readable(id).unwrap().mem_type {
        MemoryType::Semantic(s) => s,
        other => panic!("{id} is not semantic: {other:?}"),
    }
}

/// A V2 card JSON with `entries` lorebook entries `{id, keys, comment, content}`.
pub fn v2_card(name: &str, entries: &[serde_json::Value]) -> String {
    serde_json::json!({
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {
            "name": name,
            "description": "{{char}} is a test character who knows about the sword.",
            "personality": "calm",
            "scenario": "{{user}} visits {{char}} at the forge.",
            "first_mes": "Hello, {{user}}.",
            "alternate_greetings": ["Welcome back."],
            "mes_example": "<START>\n{{user}}: hi\n{{char}}: Hi there.",
            "character_book": { "entries": entries },
        }
    })
    .to_string()
}
