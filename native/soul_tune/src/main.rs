//! `soul_tune`: evaluation and benchmark CLI for SoulMem.

use std::process::ExitCode;

fn usage() -> &'static str {
    "usage: soul_tune stats <graph.json>"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("stats") if args.len() == 2 => {
            let opts = soul_mem_core::import::ImportOptions::default();
            match soul_mem_core::import::import_file("cli", &args[1], &opts) {
                Ok(g) => {
                    let s = g.stats();
                    println!(
                        "nodes {} links {} pending {}",
                        s.nodes, s.links, s.pending_links
                    );
                    for (k, v) in &s.nodes_by_kind {
                        println!("  {k}: {v}");
                    }
                    for (k, v) in &s.links_by_kind {
                        println!("  {k}: {v}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!("{}", usage());
            ExitCode::from(2)
        }
    }
}
