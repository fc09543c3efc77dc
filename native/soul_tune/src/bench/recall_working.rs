//! `soul_tune bench recall --working`: the same chat messages as `recall.rs`, recalled by the
//! stored character in working memory — the server's mode above its threshold
//! (`working_recall`, then the recall recorded and working memory settled, as the
//! character's process does once the answer is out).
//!
//! Working memory opens over the data dir's store with the library's default
//! [`WorkingConfig`] and the model (vectors from the embedding cache). Each message is timed
//! whole — its query embedding included, since the texts are new — and by stage, from the
//! recall's own [`soul_mem_core::working::RecallTimings`]; the settle after it is timed apart.
//! `--warmup N` recalls the first N texts untimed first, as `bench/ws_recall.js` does (the
//! caches in front of the store fill; the recall is also reported by blocks of 40 measured
//! messages, which shows how long that lasts). The digest pins the recall lists as
//! `recall.rs`'s does (at one time, `--now`). The store and the cache are written (released
//! notes, recorded retrievals, query vectors): run it on a copy of the data dir. `--check N`
//! compares, after the timed messages, the seeds of the first N measured texts with the exact
//! f32 top-k (the store's brute-force scan).

use super::recall::{
    digest_result, message_queries, message_text, model_and_config, open_store, read_texts, Args,
};
use super::{ms, p50_p95_p99};
use soul_mem_core::engine::Engine;
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::working::{RecallTimings, WorkingConfig, WorkingMemory};
use std::hash::Hasher;
use std::time::Instant;

/// Per-message samples, ms.
#[derive(Default)]
struct Samples {
    total: Vec<f64>,
    stages: Vec<RecallTimings>,
    settle: Vec<f64>,
    loaded: usize,
    from_released: usize,
    reruns: usize,
    digest: u64,
    /// Seeds that are exact f32 top-k notes, of the exact top-k notes checked.
    agree: (usize, usize),
}

/// Runs the benchmark (see the module doc).
pub(super) fn bench(a: &Args) -> Result<(), String> {
    let texts = read_texts(&a.texts)?;
    if texts.is_empty() {
        return Err(format!("{}: no texts", a.texts.display()));
    }
    let t0 = Instant::now();
    let mut store = open_store(a)?;
    let (embedder, cfg) = model_and_config(a)?;
    let mut engine = Engine::new(MemoryGraph::new(&a.character));
    let (mut wm, index) = WorkingMemory::open(
        &mut engine,
        &mut store,
        embedder,
        WorkingConfig::default(),
        &|_, _| {},
    )
    .map_err(|e| e.to_string())?;
    eprintln!(
        "working memory over {} stored notes ({:?}, {} vectors reused, {} embedded) opened in {:.1} s",
        index.notes,
        index.kind,
        index.reused,
        index.embedded,
        t0.elapsed().as_secs_f64()
    );
    let (n, warmup, gap, now, check) = (a.n, a.warmup, a.gap, a.now, a.check);
    let salt = a.salt.clone();
    // The server calls from a dirty scheduler thread, not the main thread (recall.rs).
    let worker = std::thread::spawn(move || -> Result<Samples, String> {
        let mut s = Samples::default();
        let mut digest = std::hash::DefaultHasher::new();
        for i in 0..warmup + n {
            std::thread::sleep(gap);
            let queries = message_queries(&texts, i, &salt);
            let t = Instant::now();
            let (result, report) = wm
                .recall_at(&mut engine, &mut store, &queries, &cfg, None, now)
                .map_err(|e| e.to_string())?;
            let total = ms(t);
            // What `SoulMem.recall/3` records: the memories and the actions.
            let ids: Vec<_> = result
                .memories
                .iter()
                .map(|m| m.id)
                .chain(result.actions.iter().map(|x| x.id))
                .collect();
            engine.record(&ids, now);
            let t = Instant::now();
            wm.settle(&mut engine, &mut store)
                .map_err(|e| e.to_string())?;
            let settle = ms(t);
            if i < warmup {
                continue;
            }
            digest_result(&result, &mut digest);
            s.total.push(total);
            s.settle.push(settle);
            s.loaded += report.loaded.len();
            s.from_released += report.from_released;
            s.reruns += usize::from(report.rerun);
            s.stages.push(report.timings);
        }
        s.digest = digest.finish();
        let k = WorkingConfig::default().seeds_per_query;
        for i in warmup..warmup + check.min(n) {
            let text = message_text(&texts, i, &salt);
            let q = wm.embed_queries(&[&text]).map_err(|e| e.to_string())?;
            let got = wm.seeds(&store, &q).map_err(|e| e.to_string())?;
            let exact = store
                .nearest(wm.model(), &q[0], k)
                .map_err(|e| e.to_string())?;
            s.agree.1 += exact.len();
            s.agree.0 += exact
                .iter()
                .filter(|(id, _)| got.iter().any(|(g, _)| g == id))
                .count();
        }
        Ok(s)
    });
    let s = worker
        .join()
        .map_err(|_| "the benchmark thread panicked".to_owned())??;
    print(&s, n, now);
    if check > 0 {
        let (agree, total) = s.agree;
        println!(
            "seeds = exact f32 top-{} for {:.1} % ({agree}/{total}; the texts of {} messages)",
            WorkingConfig::default().seeds_per_query,
            100.0 * agree as f64 / total.max(1) as f64,
            check.min(n)
        );
    }
    Ok(())
}

fn print(s: &Samples, n: usize, now: chrono::DateTime<chrono::Utc>) {
    let stage = |f: fn(&RecallTimings) -> u64| -> Vec<f64> {
        s.stages.iter().map(|t| f(t) as f64 / 1e3).collect()
    };
    println!("| working memory, stage ({n} messages) | p50 ms | p95 ms | p99 ms | mean ms |");
    println!("|---|---|---|---|---|");
    let rows: [(&str, Vec<f64>); 12] = [
        ("recall (what the answer waits for)", s.total.clone()),
        ("release left over by a settle", stage(|t| t.release_us)),
        ("query embedding", stage(|t| t.embed_us)),
        ("seeds (scan + exact re-scoring)", stage(|t| t.seeds_us)),
        ("loading the seeds' neighbourhoods", stage(|t| t.load_us)),
        ("indexing new notes + decay", stage(|t| t.index_us)),
        ("pipeline", stage(|t| t.pipeline_us)),
        ("boundary expansion", stage(|t| t.expand_us)),
        ("rerun (index + pipeline)", stage(|t| t.rerun_us)),
        ("closing counts", stage(|t| t.finish_us)),
        ("settle after the answer (release)", s.settle.clone()),
        (
            "recall + settle",
            s.total.iter().zip(&s.settle).map(|(a, b)| a + b).collect(),
        ),
    ];
    for (name, v) in rows {
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let [p50, p95, p99] = p50_p95_p99(v);
        println!("| {name} | {p50:.2} | {p95:.2} | {p99:.2} | {mean:.2} |");
    }
    // The caches in front of the store fill over the first messages after an open: the
    // recall and its indexing stage by blocks of 40 measured messages show how long that lasts.
    const BLOCK: usize = 40;
    let blocks: Vec<String> = s
        .total
        .chunks(BLOCK)
        .zip(s.stages.chunks(BLOCK))
        .enumerate()
        .map(|(b, (total, stages))| {
            let [p50, p95, _] = p50_p95_p99(total.to_vec());
            let [i50, i95, _] =
                p50_p95_p99(stages.iter().map(|t| t.index_us as f64 / 1e3).collect());
            let first = b * BLOCK + 1;
            let last = b * BLOCK + total.len();
            format!("{first}–{last}: {p50:.1} / {p95:.1} (indexing {i50:.1} / {i95:.1})")
        })
        .collect();
    println!(
        "recall p50 / p95 ms by measured message: {}",
        blocks.join("; ")
    );
    println!(
        "notes loaded per message {:.0} ({:.0} % held parsed since their release); reruns {:.0} %",
        s.loaded as f64 / n as f64,
        100.0 * s.from_released as f64 / s.loaded.max(1) as f64,
        100.0 * s.reruns as f64 / n as f64
    );
    println!(
        "result digest {:016x} (recalls at {})",
        s.digest,
        now.to_rfc3339()
    );
}
