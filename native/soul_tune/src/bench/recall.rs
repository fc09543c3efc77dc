//! `soul_tune bench recall`: a stored character's full-mode recall of chat messages, in
//! process, with the model — the server's path (`engine_recall`) without the BEAM.
//!
//! The character is loaded from its store (`--data-dir`, `--character`) and indexed with the
//! model through the data dir's embedding cache (`embeddings.sqlite3`: a character the server
//! has embedded loads from it without computing). Each text becomes the server's sub-queries
//! (`text_queries`: the text and up to four keywords) and is timed twice: the query embedding
//! alone (the texts are new: `--salt` makes them so), then the whole recall
//! ([`Engine::recall_at`], the query vectors now cached: what remains is the pipeline). The
//! digest pins the recall lists (ids and score bits; every recall runs at one time, `--now`,
//! default the start) to check that a change leaves results unchanged. `--gap-ms` pauses
//! before each message, as a chat does (the compute pool's workers fall asleep meanwhile).
//! Query vectors are written to the cache: run it on a copy of the data dir.
//!
//! `--working` runs the character in working memory instead (`recall_working.rs`).

use super::{ms, p50_p95_p99};
use chrono::{DateTime, Utc};
use soul_mem_core::engine::{EmbedderChoice, Engine, ModelEmbedder};
use soul_mem_core::retrieval::{embed_queries, PipelineConfig, PipelineResult, SubQuery};
use soul_mem_core::store::Store;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: soul_tune bench recall --data-dir DIR --texts FILE [--character demo] [--salt S] [--n N] [--gap-ms MS] [--now RFC3339] [--model PATH] [--working [--warmup N] [--check N]]";

/// What the command line asks for.
pub(super) struct Args {
    pub(super) data_dir: PathBuf,
    pub(super) character: String,
    pub(super) texts: PathBuf,
    pub(super) salt: String,
    pub(super) n: usize,
    pub(super) gap: Duration,
    pub(super) now: DateTime<Utc>,
    pub(super) model: Option<PathBuf>,
    // The character in working memory (the server's mode above its threshold).
    working: bool,
    // Messages recalled untimed first (`bench/ws_recall.js --warmup`); working memory only.
    pub(super) warmup: usize,
    // Messages whose seeds are compared with the exact f32 top-k afterwards; working memory
    // only.
    pub(super) check: usize,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let (mut data_dir, mut texts, mut model) = (None, None, None);
    let (mut character, mut salt, mut n) = ("demo".to_owned(), String::new(), 200usize);
    let mut gap = Duration::ZERO;
    let mut now = Utc::now();
    let mut working = false;
    let mut warmup = 0usize;
    let mut check = 0usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--data-dir" => data_dir = Some(PathBuf::from(value()?)),
            "--texts" => texts = Some(PathBuf::from(value()?)),
            "--model" => model = Some(PathBuf::from(value()?)),
            "--character" => character = value()?,
            "--salt" => salt = value()?,
            "--n" => {
                n = value()?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or("--n needs a positive number")?
            }
            "--now" => {
                now = DateTime::parse_from_rfc3339(&value()?)
                    .map_err(|e| format!("--now: {e}"))?
                    .with_timezone(&Utc)
            }
            "--working" => working = true,
            "--warmup" => {
                warmup = value()?
                    .parse()
                    .map_err(|_| "--warmup needs a number of messages")?
            }
            "--check" => {
                check = value()?
                    .parse()
                    .map_err(|_| "--check needs a number of messages")?
            }
            "--gap-ms" => {
                gap = Duration::from_millis(
                    value()?
                        .parse()
                        .map_err(|_| "--gap-ms needs a number of milliseconds")?,
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        data_dir: data_dir.ok_or("--data-dir is required")?,
        texts: texts.ok_or("--texts is required")?,
        character,
        salt,
        n,
        gap,
        now,
        model,
        working,
        warmup,
        check,
    })
}

/// The texts of `path`: one per line, or JSON lines with a `"text"` field (what
/// `bench/ws_recall.js --dump` writes).
pub(super) fn read_texts(path: &Path) -> Result<Vec<String>, String> {
    let raw = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(raw
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v.get("text").and_then(|t| t.as_str()).map(str::to_owned))
                .unwrap_or_else(|| l.to_owned())
        })
        .collect())
}

/// `soul_tune bench recall` (see the module doc).
pub fn run(args: &[String]) -> ExitCode {
    let run = |a: Args| {
        if a.warmup > 0 && !a.working {
            return Err("--warmup is for --working".to_owned());
        }
        if a.check > 0 && !a.working {
            return Err("--check is for --working".to_owned());
        }
        if a.working {
            super::recall_working::bench(&a)
        } else {
            bench(&a)
        }
    };
    match parse(args).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}

fn bench(a: &Args) -> Result<(), String> {
    let texts = read_texts(&a.texts)?;
    if texts.is_empty() {
        return Err(format!("{}: no texts", a.texts.display()));
    }
    let t0 = Instant::now();
    let store = open_store(a)?;
    let graph = store.load_graph().map_err(|e| e.to_string())?;
    let loaded = t0.elapsed().as_secs_f64();
    let (embedder, cfg) = model_and_config(a)?;
    let mut engine = Engine::new(graph);
    let t1 = Instant::now();
    engine
        .embed_all(embedder.clone(), &|_, _| {})
        .map_err(|e| e.to_string())?;
    eprintln!(
        "{} notes: store loaded in {loaded:.1} s, indexed in {:.1} s",
        engine.graph().len(),
        t1.elapsed().as_secs_f64()
    );
    // The server calls from a dirty scheduler thread, not the main thread (which runs the
    // model measurably slower: bench/README.md, the 4-bit engine).
    let (n, gap, now) = (a.n, a.gap, a.now);
    let salt = a.salt.clone();
    let worker = std::thread::spawn(move || -> Result<Samples, String> {
        let mut s = Samples::default();
        let mut digest = std::hash::DefaultHasher::new();
        for i in 0..n {
            std::thread::sleep(gap);
            let queries = message_queries(&texts, i, &salt);
            let t = Instant::now();
            embed_queries(&queries, embedder.as_dyn()).map_err(|e| e.to_string())?;
            let embedded = ms(t);
            let t = Instant::now();
            let result = engine
                .recall_at(&queries, &cfg, None, now)
                .map_err(|e| e.to_string())?;
            let recalled = ms(t);
            digest_result(&result, &mut digest);
            s.embed.push(embedded);
            s.recall.push(recalled);
        }
        s.digest = digest.finish();
        Ok(s)
    });
    let s = worker
        .join()
        .map_err(|_| "the benchmark thread panicked".to_owned())??;
    println!("| stage ({n} messages) | p50 ms | p95 ms | p99 ms |");
    println!("|---|---|---|---|");
    let both: Vec<f64> = s.embed.iter().zip(&s.recall).map(|(e, r)| e + r).collect();
    for (name, v) in [
        ("query embedding (uncached)", s.embed),
        ("recall, query vectors cached (the pipeline)", s.recall),
        ("both", both),
    ] {
        let [p50, p95, p99] = p50_p95_p99(v);
        println!("| {name} | {p50:.2} | {p95:.2} | {p99:.2} |");
    }
    println!(
        "result digest {:016x} (recalls at {})",
        s.digest,
        now.to_rfc3339()
    );
    Ok(())
}

/// The `i`-th message's text: the `i`-th text (cycling) with `salt` appended, so that its
/// query embedding is not cached.
pub(super) fn message_text(texts: &[String], i: usize, salt: &str) -> String {
    format!("{} {salt}", texts[i % texts.len()])
}

/// The sub-queries of the `i`-th message, as the server makes them from a chat message's
/// text (the text and up to four keywords) of [`message_text`].
pub(super) fn message_queries(texts: &[String], i: usize, salt: &str) -> Vec<SubQuery> {
    soul_mem_core::text::text_queries(&message_text(texts, i, salt), 4)
}

/// Hashes a recall's lists (ids and score bits of its memories and actions) into `digest`.
pub(super) fn digest_result(result: &PipelineResult, digest: &mut impl Hasher) {
    for m in &result.memories {
        (m.id.to_string(), m.score.to_bits()).hash(digest);
    }
    for x in &result.actions {
        (x.id.to_string(), x.score.to_bits()).hash(digest);
    }
}

/// The character's store in the data dir (opening would create an empty store for a
/// character that is not there).
pub(super) fn open_store(a: &Args) -> Result<Store, String> {
    let path = Store::path_for(&a.data_dir, &a.character);
    if !path.is_file() {
        return Err(format!(
            "no store of {:?} in {}",
            a.character,
            a.data_dir.display()
        ));
    }
    Store::open(&path, &a.character).map_err(|e| e.to_string())
}

/// The model with the data dir's embedding cache, and the pipeline config the server uses
/// with it (its similarity floor).
pub(super) fn model_and_config(a: &Args) -> Result<(EmbedderChoice, PipelineConfig), String> {
    let cache = a.data_dir.join("embeddings.sqlite3");
    let model = ModelEmbedder::load(a.model.as_deref(), Some(&cache), None)
        .map_err(|e| format!("cannot load the embedding model: {e}"))?;
    let embedder = EmbedderChoice::Model(std::sync::Arc::new(model));
    let mut cfg = PipelineConfig::default();
    cfg.similarity.similarity_threshold = embedder.similarity_floor();
    Ok((embedder, cfg))
}

/// Per-message timings, ms, and the digest of the recall lists.
#[derive(Default)]
struct Samples {
    embed: Vec<f64>,
    recall: Vec<f64>,
    digest: u64,
}
