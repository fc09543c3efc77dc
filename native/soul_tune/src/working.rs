//! `soul_tune bench working`: working-memory activation on a large stored character.
//!
//! Builds a synthetic character of `--nodes` notes in a fresh store (60 % semantic notes,
//! 40 % specific situations; texts are 2-character words drawn from 400 topics, so a query
//! made of one note's words has genuine neighbours; each note links to 3 others — 90 % in
//! its own topic — so a 2-hop neighbourhood holds a few dozen notes; 5 core notes), then:
//!
//! * first open: the long-term index is built from scratch (every note embedded and written
//!   to the `embeddings` table) — with the hash embedder; the real model embeds ~60 texts/s
//!   on this kind of CPU, i.e. ~30 min for 100k notes, once per character and model;
//! * cold start: a fresh process-equivalent (new `Store`, new `Engine`) opens the store,
//!   builds the long-term index from the table and runs the first activation;
//! * `--queries` recalls through `WorkingMemory::recall_at` with a `--working` cap (activation +
//!   boundary expansion + `Engine::recall` on the working graph), p50/p99, plus the pipeline
//!   alone on the resulting working graph;
//! * a partial checkpoint of the working graph; peak RSS (VmHWM);
//! * with `--agreement N`, after all that: the whole stored graph in one engine (full mode)
//!   answers the first N recalls again, and the report says how many of its memories and
//!   actions working memory also returned.
//!
//! The hash embedder (384 dims, as e5-small) stands in for the model everywhere, so query
//! embedding costs microseconds here; with the model add ~15–30 ms per query text.

use crate::bench::{ms, p50_p99};
use soul_mem_core::engine::{EmbedderChoice, Engine};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;
use soul_mem_core::retrieval::{distinct_query_texts, HashEmbedder, PipelineConfig, SubQuery};
use soul_mem_core::rng::SplitMix64;
use soul_mem_core::store::Store;
use soul_mem_core::working::{WorkingConfig, WorkingMemory};
use soul_mem_core::{Error, Result};
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

const DIM: usize = 384;
const TOPICS: usize = 400;
const WORDS_PER_TOPIC: usize = 24;
const CHARACTER: &str = "bench_working";

struct Args {
    nodes: usize,
    working: usize,
    queries: usize,
    k_hops: usize,
    // WorkingConfig::activation_budget and seeds_per_query (default: the library's).
    budget: Option<usize>,
    seeds: Option<usize>,
    rerun: bool,
    reuse: bool,
    // Sub-queries as the service makes them from a chat message (the text plus its keywords:
    // several query vectors per recall) instead of one situation query per text.
    text_queries: bool,
    // WorkingConfig::ann_from: the long-term index is an HNSW graph from this many notes on.
    ann_from: Option<usize>,
    // Queries checked against the exact scan (slow at 1M: each reads every stored vector).
    check: usize,
    // Recalls compared with full mode (the whole stored graph in one engine), after timing.
    agreement: usize,
    dir: PathBuf,
    json: Option<String>,
}

fn usage() -> &'static str {
    "usage: soul_tune bench working [--nodes 100000] [--working 1000] [--queries 200] [--k-hops 2] [--budget 256] [--seeds 5] [--no-rerun] [--text-queries] [--ann-from N|off] [--check 40] [--agreement 0] [--reuse] [--dir DIR] [--json OUT|-]"
}

fn parse(args: &[String]) -> std::result::Result<Args, String> {
    let mut a = Args {
        nodes: 100_000,
        working: 1000,
        queries: 200,
        k_hops: 2,
        budget: None,
        seeds: None,
        rerun: true,
        reuse: false,
        text_queries: false,
        ann_from: WorkingConfig::default().ann_from,
        check: 40,
        agreement: 0,
        dir: std::env::temp_dir().join("soul_tune_working"),
        json: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--nodes" => a.nodes = num(value()?)?,
            "--working" => a.working = num(value()?)?,
            "--queries" => a.queries = num(value()?)?,
            "--k-hops" => a.k_hops = num(value()?)?,
            "--budget" => a.budget = Some(num(value()?)?),
            "--seeds" => a.seeds = Some(num(value()?)?),
            "--no-rerun" => a.rerun = false,
            "--text-queries" => a.text_queries = true,
            "--reuse" => a.reuse = true,
            "--check" => a.check = num(value()?)?,
            "--agreement" => a.agreement = num(value()?)?,
            "--ann-from" => {
                a.ann_from = match value()?.as_str() {
                    "off" => None,
                    v => Some(num(v.to_owned())?),
                }
            }
            "--dir" => a.dir = PathBuf::from(value()?),
            "--json" => a.json = Some(value()?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.nodes < 10 || a.working == 0 || a.queries == 0 {
        return Err("--nodes must be at least 10, --working and --queries at least 1".into());
    }
    Ok(a)
}

/// Entry point of `soul_tune bench working`.
pub fn run(args: &[String]) -> ExitCode {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    match bench(&a, args) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(report)) => {
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            match a.json.as_deref() {
                Some("-") => println!("{text}"),
                Some(path) => {
                    if let Err(e) = std::fs::write(path, &text) {
                        eprintln!("error: {path}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
                None => {}
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A deterministic vocabulary: `TOPICS × WORDS_PER_TOPIC` distinct 2-character words.
fn vocabulary(rng: &mut SplitMix64) -> Vec<Vec<String>> {
    let mut seen = std::collections::HashSet::new();
    let mut topics = Vec::with_capacity(TOPICS);
    for _ in 0..TOPICS {
        let mut words = Vec::with_capacity(WORDS_PER_TOPIC);
        while words.len() < WORDS_PER_TOPIC {
            let w: String = (0..2)
                .filter_map(|_| char::from_u32(0x4E00 + rng.below(0x51A5) as u32))
                .collect();
            if w.chars().count() == 2 && seen.insert(w.clone()) {
                words.push(w);
            }
        }
        topics.push(words);
    }
    topics
}

fn pick<'a>(rng: &mut SplitMix64, words: &'a [String], n: usize) -> Vec<&'a str> {
    (0..n)
        .map(|_| words[rng.below(words.len())].as_str())
        .collect()
}

fn topic_of(i: usize, nodes: usize) -> usize {
    // Contiguous blocks: notes of one topic are neighbours in id order.
    i * TOPICS / nodes.max(1)
}

/// The synthetic character.
fn synth(nodes: usize) -> Result<MemoryGraph> {
    let mut rng = SplitMix64::new(0x5EED_0006);
    let vocab = vocabulary(&mut rng);
    // soul_tune does not depend on chrono: the timestamp type is inferred from MemoryNote::new.
    let created = serde_json::from_str("\"2026-06-01T00:00:00Z\"")
        .map_err(|e| Error::InvalidJson(e.to_string()))?;
    let mut g = MemoryGraph::new(CHARACTER);
    let per_topic = nodes.div_ceil(TOPICS).max(1);
    for i in 0..nodes {
        let t = topic_of(i, nodes);
        let words = &vocab[t];
        let mem_type = if i % 5 < 3 {
            MemoryType::Semantic(SemMemory {
                content: format!("{}{}", pick(&mut rng, words, 2).concat(), i),
                aliases: vec![],
                concept_type: ConceptType::Entity,
                description: pick(&mut rng, words, 5).join(""),
            })
        } else {
            MemoryType::Situation(Situation::SpecificSituation(SpecificSituation {
                narrative: format!("{}，{}", pick(&mut rng, words, 4).join(""), i),
                time_span: Some(created),
                context: Context {
                    participants: vec![Participant {
                        name: pick(&mut rng, words, 1).concat(),
                        role: String::new(),
                    }],
                    ..Context::default()
                },
            }))
        };
        let mut note = MemoryNote::new(CHARACTER, format!("n{i}"), mem_type, created);
        note.core = i < 5;
        note.tags = vec![format!("t{t}")];
        let mut targets = Vec::with_capacity(3);
        while targets.len() < 3 {
            let j = if rng.next_f64_open() < 0.9 {
                let start = t * per_topic;
                (start + rng.below(per_topic)).min(nodes - 1)
            } else {
                rng.below(nodes)
            };
            if j != i && !targets.contains(&j) {
                targets.push(j);
            }
        }
        for (ord, j) in targets.into_iter().enumerate() {
            let to = MemoryId::derive(CHARACTER, &format!("n{j}"));
            note.links.push(MemoryLink {
                id: LinkId::derive(note.id, to, ord),
                from: note.id,
                to,
                intensity: 0.2 + 0.8 * rng.next_f64_open(),
                link_type: MemoryLinkType::Sem(SemMemLink {
                    verb: "相关".into(),
                    confidence: 0.8,
                }),
            });
        }
        g.insert(note)?;
    }
    Ok(g)
}

/// Peak resident set size of this process in MiB (VmHWM), when the OS tells.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn remove_store(path: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(Path::new(&p), &e)),
        }
    }
    soul_mem_core::working::remove_saved_index(path)
}

fn query_for(text: &str) -> Result<SubQuery> {
    serde_json::from_value(serde_json::json!({
        "priority": 1,
        "tag": [],
        "variant": {"Situation": [{"narrative": text}]}
    }))
    .map_err(|e| Error::InvalidJson(e.to_string()))
}

/// Builds the character (unless `--reuse`), then measures in a fresh child process
/// (`--reuse`), so cold start and peak RSS are the character's alone, not the generator's.
fn bench(a: &Args, raw: &[String]) -> Result<Option<serde_json::Value>> {
    if a.reuse {
        return measure(a).map(Some);
    }
    let built = build(a)?;
    let side = a.dir.join("build.json");
    std::fs::write(&side, built.to_string()).map_err(|e| Error::io(&side, &e))?;
    let exe = std::env::current_exe().map_err(|e| Error::io("current_exe", &e))?;
    let status = std::process::Command::new(&exe)
        .args(["bench", "working", "--reuse"])
        .args(raw)
        .status()
        .map_err(|e| Error::io(&exe, &e))?;
    if !status.success() {
        return Err(Error::invalid_argument(
            "bench",
            format!("the measuring process failed: {status}"),
        ));
    }
    Ok(None)
}

/// The working-memory configuration of the arguments.
fn working_config(a: &Args) -> WorkingConfig {
    let d = WorkingConfig::default();
    WorkingConfig {
        k_hops: a.k_hops,
        cap: a.working,
        activation_budget: a.budget.unwrap_or(d.activation_budget),
        seeds_per_query: a.seeds.unwrap_or(d.seeds_per_query),
        rerun: a.rerun,
        ann_from: a.ann_from,
        ..d
    }
}

/// Generates and saves the character and builds its index once (first open).
fn build(a: &Args) -> Result<serde_json::Value> {
    let embedder = EmbedderChoice::Hash(HashEmbedder::new(DIM)?);
    std::fs::create_dir_all(&a.dir).map_err(|e| Error::io(&a.dir, &e))?;
    let path = Store::path_for(&a.dir, CHARACTER);
    remove_store(&path)?;

    println!(
        "building a {}-note character in {}",
        a.nodes,
        path.display()
    );
    let t = Instant::now();
    let graph = synth(a.nodes)?;
    let gen_ms = ms(t);
    let links = graph.link_count() + graph.pending_links().count();
    let t = Instant::now();
    {
        let mut store = Store::open(&path, CHARACTER)?;
        store.save_graph(&graph)?;
    }
    let save_ms = ms(t);
    drop(graph);
    println!("  generated in {gen_ms:.0} ms ({links} links), saved in {save_ms:.0} ms");

    let cfg = working_config(a);

    // First open: every vector computed and written.
    let t = Instant::now();
    let first = {
        let mut store = Store::open(&path, CHARACTER)?;
        let mut engine = Engine::new(MemoryGraph::new(CHARACTER));
        let (_, r) = WorkingMemory::open(
            &mut engine,
            &mut store,
            embedder.clone(),
            cfg.clone(),
            &|_, _| {},
        )?;
        r
    };
    let first_open_ms = ms(t);
    println!(
        "  first open (index built from scratch, {} notes embedded with {}): {first_open_ms:.0} ms",
        first.embedded, first.model
    );
    Ok(serde_json::json!({
        "links": links,
        "generate_ms": gen_ms,
        "save_ms": save_ms,
        "first_open_ms": first_open_ms,
        "first_open_embedded": first.embedded,
        "build_peak_rss_mib": peak_rss_mib(),
    }))
}

/// Cold start and recalls on the stored character (a fresh process).
fn measure(a: &Args) -> Result<serde_json::Value> {
    let embedder = EmbedderChoice::Hash(HashEmbedder::new(DIM)?);
    let path = Store::path_for(&a.dir, CHARACTER);
    if !path.exists() {
        return Err(Error::NotFound(format!(
            "{} (run without --reuse first)",
            path.display()
        )));
    }
    let built: serde_json::Value = std::fs::read_to_string(a.dir.join("build.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(serde_json::Value::Null);
    let cfg = working_config(a);
    // Query texts: the primary texts of random notes (read before timing; warm page cache).
    let mut rng = SplitMix64::new(42);
    let texts: Vec<String> = {
        let store = Store::open(&path, CHARACTER)?;
        let mut v = Vec::with_capacity(a.queries + 1);
        while v.len() < a.queries + 1 {
            let i = rng.below(a.nodes);
            let id = MemoryId::derive(CHARACTER, &format!("n{i}"));
            if let Some(t) = store
                .note(&id)?
                .and_then(|n| soul_mem_core::working::primary_text(&n.mem_type))
            {
                v.push(t);
            }
        }
        v
    };
    let first_text = texts[0].clone();
    let rss_before = peak_rss_mib();
    let t0 = Instant::now();
    let mut store = Store::open(&path, CHARACTER)?;
    let open_ms = ms(t0);
    let t = Instant::now();
    let mut engine = Engine::new(MemoryGraph::new(CHARACTER));
    let (mut wm, index) = WorkingMemory::open(
        &mut engine,
        &mut store,
        embedder.clone(),
        cfg.clone(),
        &|_, _| {},
    )?;
    let index_ms = ms(t);
    let t = Instant::now();
    let act = wm.activate_texts(&mut engine, &mut store, &[&first_text])?;
    let first_activation_ms = ms(t);
    let cold_start_ms = ms(t0);
    let t = Instant::now();
    let pcfg = PipelineConfig::default();
    engine.recall(&[query_for(&first_text)?], &pcfg, None)?;
    let first_recall_ms = ms(t);
    let rss_after_cold = peak_rss_mib();
    println!(
        "  cold start: store open {open_ms:.1} ms + long-term index {index_ms:.0} ms ({:?}: {} vectors reused, {} from the saved graph, {} embedded{}) + first activation {first_activation_ms:.1} ms ({} loaded) = {cold_start_ms:.0} ms; first recall after it {first_recall_ms:.1} ms",
        index.kind, index.reused, index.from_saved, index.embedded,
        if index.saved { ", graph saved" } else { "" },
        act.loaded.len()
    );

    // Seeds (the index's candidates re-scored on the stored f32 vectors) and the index's own
    // top-10 against the exact f32 top-k (the store's brute-force scan over the stored
    // vectors), on a sample of the queries.
    let sample = texts.len().min(a.check);
    const TOP: usize = 10;
    let (mut agree, mut exact_total, mut own, mut own_total) = (0usize, 0usize, 0usize, 0usize);
    for text in &texts[..sample] {
        let q = wm.embed_queries(&[text.as_str()])?;
        let got: Vec<MemoryId> = wm
            .seeds(&store, &q)?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let exact = store.nearest(wm.model(), &q[0], TOP.max(cfg.seeds_per_query))?;
        let seeds_exact = &exact[..exact.len().min(cfg.seeds_per_query)];
        exact_total += seeds_exact.len();
        agree += seeds_exact
            .iter()
            .filter(|(id, _)| got.contains(id))
            .count();
        let top = wm.index_top_k(&q[0], TOP)?;
        let top10 = &exact[..exact.len().min(TOP)];
        own_total += top10.len();
        own += top10
            .iter()
            .filter(|(id, _)| top.iter().any(|(t, _)| t == id))
            .count();
    }
    let seed_agreement = agree as f64 / exact_total.max(1) as f64;
    let index_recall_at_10 = own as f64 / own_total.max(1) as f64;
    println!(
        "  long-term index ({:?}): {:.1} MB ({:.0} bytes per note); its own top-10 = exact f32 top-10 for {:.1} % ({own}/{own_total}); seeds = exact f32 top-{} for {:.1} % ({agree}/{exact_total}, {sample} queries)",
        index.kind,
        wm.index_bytes() as f64 / 1e6,
        wm.index_bytes() as f64 / wm.index_len().max(1) as f64,
        100.0 * index_recall_at_10,
        cfg.seeds_per_query,
        100.0 * seed_agreement
    );
    // The seeds alone (the long-term index's scan for all query vectors of a recall, and the
    // exact re-scoring of its candidates) for one vector and for five, as a chat message's
    // text and four keywords give; then five of which four were asked just before (keywords
    // that came up before: the index remembers their candidates). The texts get a suffix no
    // earlier question had, so the others are scanned.
    let mut seeds_ms = Vec::new();
    for (n, asked) in [(1usize, 0usize), (5, 0), (5, 4)] {
        let mut times = Vec::new();
        for chunk in texts.chunks(n).take(60).filter(|c| c.len() == n) {
            let fresh: Vec<String> = chunk
                .iter()
                .enumerate()
                .map(|(j, t)| format!("{t} ·{n}{asked}{}", if j < asked { "k" } else { "q" }))
                .collect();
            let refs: Vec<&str> = fresh.iter().map(String::as_str).collect();
            let q = wm.embed_queries(&refs)?;
            if asked > 0 {
                wm.seeds(&store, &q[..asked])?;
            }
            let t = Instant::now();
            wm.seeds(&store, &q)?;
            times.push(ms(t));
        }
        let (p50, p99) = p50_p99(times);
        seeds_ms
            .push(serde_json::json!({"vectors": n, "asked_before": asked, "p50": p50, "p99": p99}));
        println!(
            "  seeds for {n} query vector(s), {asked} of them asked before: p50 {p50:.2} ms, p99 {p99:.2} ms"
        );
    }
    println!(
        "  stored adjacency in memory: {:.1} MB ({:.0} bytes per note)",
        wm.links_bytes() as f64 / 1e6,
        wm.links_bytes() as f64 / wm.index_len().max(1) as f64,
    );

    // Recall loop.
    let mut total = Vec::with_capacity(a.queries);
    let mut pipeline = Vec::with_capacity(a.queries);
    let mut settle = Vec::with_capacity(a.queries);
    let (mut loaded, mut released, mut persisted, mut reruns, mut found) = (0, 0, 0, 0, 0);
    let mut working_sizes = Vec::with_capacity(a.queries);
    // Digest of every recall's result and activation (ids in order): equal digests across
    // builds mean identical recall lists and identical working-memory traffic.
    let mut digest = std::hash::DefaultHasher::new();
    let mut vectors = 0usize;
    let mut answers: Vec<Answer> = Vec::with_capacity(a.agreement);
    for text in &texts[1..] {
        let q = if a.text_queries {
            soul_mem_core::text::text_queries(text, soul_mem_core::text::DEFAULT_KEYWORDS)
        } else {
            vec![query_for(text)?]
        };
        vectors += distinct_query_texts(&q).len();
        let t = Instant::now();
        let (result, rep) =
            wm.recall_at(&mut engine, &mut store, &q, &pcfg, None, chrono::Utc::now())?;
        total.push(ms(t));
        {
            let ids: Vec<_> = result.memories.iter().map(|m| m.id).collect();
            let actions: Vec<_> = result.actions.iter().map(|m| m.id).collect();
            (&ids, &actions, &rep.seeds.len(), &rep.loaded, &rep.released).hash(&mut digest);
            if answers.len() < a.agreement {
                answers.push(Answer {
                    queries: q.clone(),
                    memories: ids,
                    actions,
                });
            }
        }
        // Write something now and then, so releases have changed notes to persist.
        if let Some(m) = result.memories.first() {
            let at = engine.graph().get(&m.id).map(|n| n.last_accessed_time);
            if let Some(at) = at {
                engine.record(&[m.id], at);
            }
        }
        let t = Instant::now();
        engine.recall(&q, &pcfg, None)?;
        pipeline.push(ms(t));
        // What the service runs after the answer: the release over the cap.
        let t = Instant::now();
        let settled = wm.settle(&mut engine, &mut store)?;
        settle.push(ms(t));
        settled.released.hash(&mut digest);
        loaded += rep.loaded.len();
        released += rep.released.len() + settled.released.len();
        persisted += rep.persisted + settled.persisted;
        reruns += usize::from(rep.rerun);
        found += usize::from(!result.memories.is_empty());
        working_sizes.push(rep.working_size as f64);
    }
    let digest = format!("{:016x}", std::hash::Hasher::finish(&digest));
    let (p50, p99) = p50_p99(total.clone());
    let (pp50, pp99) = p50_p99(pipeline);
    let (sp50, sp99) = p50_p99(settle);
    let mean = total.iter().sum::<f64>() / total.len() as f64;
    let n = a.queries as f64;
    let (ws50, _) = p50_p99(working_sizes);
    println!(
        "  recall (activation + boundary expansion + pipeline) over {} queries: p50 {p50:.1} ms, p99 {p99:.1} ms, mean {mean:.1} ms; settle after it (release over the cap) p50 {sp50:.1} ms, p99 {sp99:.1} ms; pipeline alone on the working graph p50 {pp50:.1} ms, p99 {pp99:.1} ms",
        a.queries
    );
    println!(
        "  per query: {:.1} query vectors, {:.0} notes loaded, {:.0} released ({:.1} persisted), rerun after expansion {:.0} %, working size p50 {ws50:.0}; {found}/{} recalls returned memories; digest {digest}",
        vectors as f64 / n,
        loaded as f64 / n,
        released as f64 / n,
        persisted as f64 / n,
        100.0 * reruns as f64 / n,
        a.queries
    );

    let t = Instant::now();
    let ck = wm.checkpoint(&mut engine, &mut store, &[])?;
    let checkpoint_ms = ms(t);
    let peak = peak_rss_mib();
    drop(engine);
    let agreement = if answers.is_empty() {
        serde_json::Value::Null
    } else {
        let agreed = agreement_with_full_mode(&store, &embedder, &answers, &pcfg)?;
        println!(
            "  against full mode (the whole stored graph in one engine, {} recalls): memories {:.1} % of full mode's top {} found (top 1 {:.1} %), actions {:.1} %",
            answers.len(),
            100.0 * agreed.memories,
            pcfg.max_memories,
            100.0 * agreed.top1,
            100.0 * agreed.actions
        );
        serde_json::json!({
            "recalls": answers.len(),
            "memories": agreed.memories,
            "top1": agreed.top1,
            "actions": agreed.actions,
        })
    };
    let (active, _, _) = store.counts()?;
    if active != a.nodes {
        return Err(Error::invalid_argument(
            "bench",
            format!("{active} active notes after the run, expected {}", a.nodes),
        ));
    }
    println!(
        "  partial checkpoint of {} working notes: {checkpoint_ms:.0} ms (store still holds all {active}); peak RSS {:.0} MiB (after cold start {:.0} MiB)",
        ck.notes,
        peak.unwrap_or(f64::NAN),
        rss_after_cold.unwrap_or(f64::NAN)
    );
    Ok(serde_json::json!({
        "nodes": a.nodes,
        "build": built,
        "working_cap": a.working,
        "k_hops": a.k_hops,
        "activation_budget": cfg.activation_budget,
        "seeds_per_query": cfg.seeds_per_query,
        "rerun": a.rerun,
        "queries": a.queries,
        "embedder": index.model,
        "dim": DIM,
        "cold_start": {
            "store_open_ms": open_ms,
            "index_ms": index_ms,
            "first_activation_ms": first_activation_ms,
            "total_ms": cold_start_ms,
            "first_recall_ms": first_recall_ms,
        },
        "recall_ms": {"p50": p50, "p99": p99, "mean": mean},
        "pipeline_only_ms": {"p50": pp50, "p99": pp99},
        "settle_ms": {"p50": sp50, "p99": sp99},
        "per_query": {
            "loaded": loaded as f64 / n,
            "released": released as f64 / n,
            "persisted": persisted as f64 / n,
            "rerun_share": reruns as f64 / n,
        },
        "working_size_p50": ws50,
        "index_bytes": wm.index_bytes(),
        "links_bytes": wm.links_bytes(),
        "seed_agreement_with_f32": seed_agreement,
        "seeds_ms": seeds_ms,
        "index_kind": index.kind,
        "index_from_saved": index.from_saved,
        "index_saved": index.saved,
        "index_recall_at_10": index_recall_at_10,
        "digest": digest,
        "agreement_with_full_mode": agreement,
        "checkpoint_ms": checkpoint_ms,
        "checkpoint_notes": ck.notes,
        "peak_rss_mib": peak,
        "rss_after_cold_start_mib": rss_after_cold,
        "rss_before_open_mib": rss_before,
    }))
}

/// What a working-memory recall returned, kept to compare with full mode.
struct Answer {
    queries: Vec<SubQuery>,
    memories: Vec<MemoryId>,
    actions: Vec<MemoryId>,
}

/// Shares of full mode's answers that working memory also gave.
struct Agreement {
    // Full mode's memories (all it returns) found among working memory's, pooled.
    memories: f64,
    // Recalls whose first memory is the same.
    top1: f64,
    // Full mode's actions found among working memory's, pooled.
    actions: f64,
}

/// Loads the whole stored graph into one engine (full mode: every note indexed) and runs the
/// recalls of `answers` again there. Run after the timed loop: it holds the whole graph.
fn agreement_with_full_mode(
    store: &Store,
    embedder: &EmbedderChoice,
    answers: &[Answer],
    cfg: &PipelineConfig,
) -> Result<Agreement> {
    let t = Instant::now();
    let mut full = Engine::new(store.load_graph()?);
    full.embed_all(embedder.clone(), &|_, _| {})?;
    println!(
        "  full mode for comparison: {} notes loaded and indexed in {:.0} ms",
        full.graph().len(),
        ms(t)
    );
    // (found, of) pooled: full mode's ids that working memory also returned.
    let (mut memories, mut actions, mut top1) = ((0, 0), (0, 0), 0);
    let pool = |into: &mut (usize, usize), want: Vec<MemoryId>, got: &[MemoryId]| {
        into.0 += want.iter().filter(|id| got.contains(id)).count();
        into.1 += want.len();
    };
    for ans in answers {
        let r = full.recall(&ans.queries, cfg, None)?;
        top1 += usize::from(r.memories.first().map(|m| m.id) == ans.memories.first().copied());
        pool(
            &mut memories,
            r.memories.iter().map(|m| m.id).collect(),
            &ans.memories,
        );
        pool(
            &mut actions,
            r.actions.iter().map(|a| a.id).collect(),
            &ans.actions,
        );
    }
    let share = |hit: usize, total: usize| {
        if total == 0 {
            1.0
        } else {
            hit as f64 / total as f64
        }
    };
    Ok(Agreement {
        memories: share(memories.0, memories.1),
        top1: top1 as f64 / answers.len().max(1) as f64,
        actions: share(actions.0, actions.1),
    })
}
