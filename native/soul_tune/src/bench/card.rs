//! `soul_tune bench card`: import time of a generated V2 character card with a large
//! lorebook, as JSON and as a PNG, and of loading the resulting Graph JSON (no embedding);
//! then one page of the character's notes listing (`GET …/notes`) over that graph: searched
//! by a key, by two words, and unfiltered.
//!
//! ```text
//! cargo run --release -p soul_tune -- bench card [--entries 1000,10000] [--runs 20]
//! ```
//!
//! Prints one JSON line ([`CardBench`]) per lorebook size; times are medians in ms.

use base64::Engine as _;
use soul_mem_core::card::png::encode_chunk as chunk;
use soul_mem_core::card::{import_card, CardOptions};
use soul_mem_core::import::{import_bytes, ImportOptions};
use soul_mem_core::listing::{list_graph, ListRequest};
use soul_mem_core::{Error, Result};
use std::process::ExitCode;
use std::time::Instant;

/// Results of [`bench_card`]. Times are medians over the runs, in milliseconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CardBench {
    /// Lorebook entries in the card.
    pub entries: usize,
    /// Size of the card JSON.
    pub json_bytes: usize,
    /// Size of the PNG holding it.
    pub png_bytes: usize,
    /// Runs timed.
    pub runs: usize,
    /// `import_card` of the JSON (parse, map, mention links, Graph JSON out).
    pub card_json_ms: f64,
    /// `import_card` of the PNG (chunk walk, CRCs, base64, then as above).
    pub card_png_ms: f64,
    /// `import_bytes` of the resulting Graph JSON (the graph a character gets).
    pub graph_import_ms: f64,
    /// One page of [`list_graph`] searched by one entry's key (a substring of few notes).
    pub list_key_ms: f64,
    /// One page of [`list_graph`] searched by two words (jieba tokens, every note scanned).
    pub list_words_ms: f64,
    /// The first page of [`list_graph`] without a query.
    pub list_all_ms: f64,
    /// Notes and links of the graph.
    pub notes: usize,
    /// Links of the graph.
    pub links: usize,
}

/// A V2 card whose `n` entries each have an English and a Chinese key and mention two others.
fn generate(n: usize) -> String {
    let entries: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let (a, b) = ((i * 7 + 1) % n, (i * 13 + 5) % n);
            serde_json::json!({
                "id": i,
                "keys": [format!("place{i}"), format!("地点{i}号")],
                "secondary_keys": [],
                "comment": format!("Place {i}"),
                "content": format!(
                    "{{{{char}}}} remembers place{i}: a quiet street near place{a}, where the bakery sells bread. 从这里走到地点{b}号要十分钟，路上有一家旧书店和一只橘猫。"
                ),
                "constant": i % 100 == 0,
                "enabled": i % 50 != 1,
                "insertion_order": 100,
                "extensions": {},
            })
        })
        .collect();
    serde_json::json!({
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {
            "name": "Bench",
            "description": "{{char}} knows place1 and place2 well.",
            "personality": "curious",
            "scenario": "{{user}} asks {{char}} for directions to place3.",
            "first_mes": "Lost, {{user}}?",
            "alternate_greetings": ["Need a map?"],
            "mes_example": "<START>\n{{user}}: Where is place4?\n{{char}}: Two streets down.",
            "character_book": { "entries": entries },
        }
    })
    .to_string()
}

/// A PNG (signature, IHDR, the card's tEXt chunk, IEND; no image data is read by the importer).
fn png(json: &str) -> Vec<u8> {
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    out.extend(chunk(b"IHDR", &[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0]));
    let text = base64::engine::general_purpose::STANDARD.encode(json);
    out.extend(chunk(b"tEXt", format!("chara\0{text}").as_bytes()));
    out.extend(chunk(b"IEND", b""));
    out
}

fn median_ms(runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Times the import of a generated card with `entries` lorebook entries, `runs` times.
pub fn bench_card(entries: usize, runs: usize) -> Result<CardBench> {
    let json = generate(entries);
    let png = png(&json);
    let opts = CardOptions::default();
    let imported = import_card(json.as_bytes(), &opts)?;
    let graph_opts = ImportOptions::default();
    let graph = import_bytes("bench", imported.graph_json.as_bytes(), &graph_opts)?;
    let search = |query: &str| ListRequest {
        query: (!query.is_empty()).then(|| query.to_owned()),
        ..ListRequest::default()
    };
    let (key, words, all) = (search("place7"), search("旧书店 橘猫"), search(""));
    // The first segmentation loads jieba's dictionary: not part of a listing.
    list_graph(&graph, &words)?;
    Ok(CardBench {
        entries,
        json_bytes: json.len(),
        png_bytes: png.len(),
        runs,
        card_json_ms: median_ms(runs, || import_card(json.as_bytes(), &opts).map(drop))?,
        card_png_ms: median_ms(runs, || import_card(&png, &opts).map(drop))?,
        graph_import_ms: median_ms(runs, || {
            import_bytes("bench", imported.graph_json.as_bytes(), &graph_opts).map(drop)
        })?,
        list_key_ms: median_ms(runs, || list_graph(&graph, &key).map(drop))?,
        list_words_ms: median_ms(runs, || list_graph(&graph, &words).map(drop))?,
        list_all_ms: median_ms(runs, || list_graph(&graph, &all).map(drop))?,
        notes: graph.len(),
        links: graph.link_count(),
    })
}

/// `soul_tune bench card [--entries 1000,10000] [--runs 20]`.
pub fn run(args: &[String]) -> ExitCode {
    let usage = "usage: soul_tune bench card [--entries 1000,10000] [--runs 20]";
    let mut sizes = vec![1000];
    let mut runs = 20;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match (a.as_str(), rest.next()) {
            ("--entries", Some(v)) => match super::parse_sizes(v) {
                Ok(v) => sizes = v,
                Err(e) => {
                    eprintln!("bad --entries: {e}");
                    return ExitCode::from(2);
                }
            },
            ("--runs", Some(v)) => match v.parse::<usize>() {
                Ok(n) if n > 0 => runs = n,
                _ => {
                    eprintln!("bad --runs: {v}");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("{usage}");
                return ExitCode::from(2);
            }
        }
    }
    for n in sizes {
        let line = bench_card(n, runs).and_then(|r| {
            serde_json::to_string(&r).map_err(|e| Error::InvalidJson(format!("card bench: {e}")))
        });
        match line {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
