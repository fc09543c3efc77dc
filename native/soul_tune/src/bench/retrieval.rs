//! `soul_tune bench retrieval`: latency of the retrieval core on synthetic graphs.
//!
//! Graphs have a realistic kind mix (40 % semantic, 35 % specific situations, 10 % abstract,
//! 15 % procedures), power-law out-degrees (Pareto, α = 1.5, capped at 200) with targets
//! biased towards early nodes (power-law in-degrees), trigger links from situations to
//! procedures, 200 tags in Zipf use, and 384-dim vectors drawn around 64 topic centroids
//! (cosine ≈ 0.7 to their centroid) so that a query from one topic has genuine hits above
//! the similarity floor. Notes were created over the 30 days before the query time, so
//! forgetting decays their links by different amounts. Everything is single-threaded unless
//! `--parallel`. Query embedding is excluded: query vectors are precomputed.
//!
//! What is timed is the production recall path ([`soul_mem_core::engine::Engine::recall_at`]
//! minus embedding): the DefaultPipeline over link intensities decayed by the forgetting
//! curve, with the retention factors of the current time bucket computed once and the
//! decayed transition matrix cached by the index (the table's last column counts the
//! matrices built: one per graph means the cache held). PPR push and power iteration run on
//! that same decayed matrix. The one-off costs the cache avoids — building the decayed
//! matrix (once per time bucket or graph change) and patching it after recording 10
//! retrievals — are printed on stderr.
//!
//! `SOUL_BENCH_DUMP=FILE` appends, for every benchmark query, the similarity top-k and the
//! undecayed pipeline's memories and actions with exact score bits, to check that an
//! optimisation leaves results unchanged (diff two dumps).

use super::p50_p99;
use soul_mem_core::forget::{decay_factor, ForgetConfig};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;
use soul_mem_core::retrieval::query::EmbeddedQuery;
use soul_mem_core::retrieval::*;
use soul_mem_core::rng::SplitMix64;
use std::time::Instant;

const DIM: usize = 384;
const TOPICS: usize = 64;
const TAGS: usize = 200;

/// The shared seeded generator plus the distributions the synthetic graphs need.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }
    fn unit(&mut self) -> f64 {
        self.0.next_f64_open()
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }
    /// Approximately standard normal (sum of uniforms), enough for noise.
    fn gauss(&mut self) -> f32 {
        ((0..4).map(|_| self.unit()).sum::<f64>() - 2.0) as f32 * 1.732
    }
    fn zipf(&mut self, n: usize) -> usize {
        // Inverse-CDF of a continuous power law over [1, n].
        let u = self.unit();
        ((n as f64).powf(u) as usize).saturating_sub(1).min(n - 1)
    }
}

fn normalise(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

fn around(rng: &mut Rng, c: &[f32], noise: f32) -> Vec<f32> {
    let mut v: Vec<f32> = c
        .iter()
        .map(|x| x + noise * rng.gauss() / (DIM as f32).sqrt())
        .collect();
    normalise(&mut v);
    v
}

struct Synthetic {
    graph: MemoryGraph,
    vectors: NodeVectors,
    centroids: Vec<Vec<f32>>,
    tag_vecs: Vec<Vec<f32>>,
}

fn synth(n: usize, seed: u64) -> soul_mem_core::Result<Synthetic> {
    let mut rng = Rng::new(seed);
    let centroids: Vec<Vec<f32>> = (0..TOPICS)
        .map(|_| {
            let mut v: Vec<f32> = (0..DIM).map(|_| rng.gauss()).collect();
            normalise(&mut v);
            v
        })
        .collect();
    let tag_vecs: Vec<Vec<f32>> = (0..TAGS)
        .map(|_| {
            let mut v: Vec<f32> = (0..DIM).map(|_| rng.gauss()).collect();
            normalise(&mut v);
            v
        })
        .collect();
    // soul_tune does not depend on chrono: the timestamp type is inferred from MemoryNote::new.
    let at = |day: usize, hour: usize| {
        serde_json::from_str(&format!("\"2026-05-{day:02}T{hour:02}:00:00Z\""))
            .map_err(|e| soul_mem_core::Error::InvalidJson(e.to_string()))
    };
    let kinds: Vec<NodeKind> = (0..n)
        .map(|_| match rng.below(100) {
            0..40 => NodeKind::Semantic,
            40..75 => NodeKind::SpecificSituation,
            75..85 => NodeKind::AbstractSituation,
            _ => NodeKind::Procedure,
        })
        .collect();
    let rid = |i: usize| format!("n{i}");
    let ids: Vec<MemoryId> = (0..n).map(|i| MemoryId::derive("bench", &rid(i))).collect();
    let by_kind = |k: NodeKind| -> Vec<usize> { (0..n).filter(|&i| kinds[i] == k).collect() };
    let procs = by_kind(NodeKind::Procedure);
    let abstracts = by_kind(NodeKind::AbstractSituation);
    let mut graph = MemoryGraph::new("bench");
    let mut vectors = NodeVectors::new(DIM)?;
    for i in 0..n {
        let topic = rng.below(TOPICS);
        let mem_type = match kinds[i] {
            NodeKind::Semantic => MemoryType::Semantic(SemMemory {
                content: format!("概念{i}"),
                aliases: vec![],
                concept_type: ConceptType::Entity,
                description: format!("描述{topic}"),
            }),
            NodeKind::SpecificSituation => {
                MemoryType::Situation(Situation::SpecificSituation(SpecificSituation {
                    narrative: format!("情境{i}"),
                    time_span: None,
                    context: Context::default(),
                }))
            }
            NodeKind::AbstractSituation => MemoryType::Situation(Situation::AbstractSituation(
                AbstractSituation::Location(Location {
                    name: format!("地点{i}"),
                    coordinates: String::new(),
                }),
            )),
            NodeKind::Procedure => MemoryType::Procedure(ProcMemory {
                action: Action {
                    content: format!("动作{i}"),
                    action_type: ActionType::Speak,
                },
            }),
        };
        // Created over May (no random draw, so the graph is the same as without decay).
        let mut note = MemoryNote::new("bench", rid(i), mem_type, at(1 + i % 30, i % 24)?);
        note.tags = (0..1 + rng.below(3))
            .map(|_| format!("tag{}", rng.zipf(TAGS)))
            .collect();
        note.tags.dedup();
        // Links: power-law out-degree, targets biased to early nodes.
        let deg = ((1.0 / rng.unit().powf(1.0 / 1.5)) as usize).min(200);
        for _ in 0..deg {
            let j = ((rng.unit() * rng.unit()) * n as f64) as usize % n;
            if kinds[j] == NodeKind::Procedure {
                continue;
            }
            let link_type = if kinds[i].is_situation() && kinds[j].is_situation() {
                MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {})
            } else {
                MemoryLinkType::Sem(SemMemLink {
                    verb: "related".into(),
                    confidence: 0.5 + 0.5 * rng.unit() as f32,
                })
            };
            push_link(&mut note, ids[j], rng.unit() + 0.2, link_type);
        }
        if kinds[i] == NodeKind::SpecificSituation && !abstracts.is_empty() {
            let a = abstracts[rng.below(abstracts.len())];
            push_link(
                &mut note,
                ids[a],
                1.0,
                MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {}),
            );
        }
        if kinds[i].is_situation() && !procs.is_empty() {
            for _ in 0..1 + rng.below(2) {
                let p = procs[rng.below(procs.len())];
                push_link(
                    &mut note,
                    ids[p],
                    1.0,
                    MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob: rng.unit() }),
                );
            }
        }
        let texts = node_texts(&note);
        let vecs: Vec<Vec<f32>> = texts
            .iter()
            .map(|(k, t)| match k {
                FieldKind::Tag => {
                    let tid: usize = t.trim_start_matches("tag").parse().unwrap_or(0);
                    tag_vecs[tid % TAGS].clone()
                }
                _ => around(&mut rng, &centroids[topic], 1.0),
            })
            .collect();
        let items: Vec<(FieldKind, &str, &[f32])> = texts
            .iter()
            .zip(&vecs)
            .map(|((k, t), v)| (*k, t.as_str(), v.as_slice()))
            .collect();
        vectors.push_node(note.id, &items)?;
        graph.insert(note)?;
    }
    Ok(Synthetic {
        graph,
        vectors,
        centroids,
        tag_vecs,
    })
}

fn push_link(note: &mut MemoryNote, to: MemoryId, intensity: f64, link_type: MemoryLinkType) {
    let ord = note.links.len();
    note.links.push(MemoryLink {
        id: LinkId::derive(note.id, to, ord),
        from: note.id,
        to,
        intensity,
        link_type,
    });
}

/// A query of one topic, with its vectors in `QueryTexts` order.
fn make_query(s: &Synthetic, rng: &mut Rng) -> (SubQuery, QueryVectors) {
    let topic = rng.below(TOPICS);
    let tags = vec![format!("tag{}", rng.zipf(TAGS))];
    let variant = if rng.below(2) == 0 {
        QueryVariant::Semantic(vec![soul_mem_core::retrieval::query::SemQueryUnit {
            concept_identifier: format!("概念{}", rng.below(s.graph.len())),
            description: format!("描述{topic}"),
        }])
    } else {
        QueryVariant::Situation(vec![soul_mem_core::retrieval::query::SitQueryUnit {
            narrative: format!("情境{topic}"),
            ..Default::default()
        }])
    };
    let q = SubQuery {
        priority: 1 + rng.below(10) as u32,
        tag: tags,
        variant,
    };
    let texts = QueryTexts::of(&q);
    let vecs = texts
        .items
        .iter()
        .map(|(slot, t)| match slot {
            soul_mem_core::retrieval::query::QuerySlot::Tag(_) => {
                let tid: usize = t.trim_start_matches("tag").parse().unwrap_or(0);
                s.tag_vecs[tid % TAGS].clone()
            }
            _ => around(rng, &s.centroids[topic], 0.5),
        })
        .collect();
    (q, vecs)
}

/// A chat message as `soul_mem_core::text::text_queries` makes it: the text as a Situation
/// narrative query tagged with its keywords (priority 2) and one Semantic identifier query per
/// keyword (priority 1); 4 keywords, each the name of a note (the string channel finds it).
fn make_message(s: &Synthetic, rng: &mut Rng) -> (Vec<SubQuery>, Vec<QueryVectors>) {
    use soul_mem_core::retrieval::query::{QuerySlot, SemQueryUnit, SitQueryUnit};
    let topic = rng.below(TOPICS);
    let words: Vec<String> = (0..4)
        .map(|_| format!("概念{}", rng.below(s.graph.len())))
        .collect();
    let mut queries = vec![SubQuery {
        priority: 2,
        tag: words.clone(),
        variant: QueryVariant::Situation(vec![SitQueryUnit {
            narrative: format!("情境{topic}"),
            ..Default::default()
        }]),
    }];
    queries.extend(words.iter().map(|w| SubQuery {
        priority: 1,
        tag: vec![w.clone()],
        variant: QueryVariant::Semantic(vec![SemQueryUnit {
            concept_identifier: w.clone(),
            description: String::new(),
        }]),
    }));
    // Keywords come from the text: their vectors lie near its topic.
    let vectors = queries
        .iter()
        .map(|q| {
            QueryTexts::of(q)
                .items
                .iter()
                .map(|(slot, _)| match slot {
                    QuerySlot::Tag(_) => around(rng, &s.centroids[topic], 0.8),
                    _ => around(rng, &s.centroids[topic], 0.5),
                })
                .collect()
        })
        .collect();
    (queries, vectors)
}

fn time_ms(mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e3
}

/// Appends every query's similarity top-k and undecayed pipeline result, with exact score
/// bits, to `path` (see the module doc).
fn dump(
    path: &str,
    n: usize,
    idx: &RetrievalIndex,
    cfg: &PipelineConfig,
    queries: &[(SubQuery, QueryVectors)],
    embedded: &[EmbeddedQuery],
    messages: &[(Vec<SubQuery>, Vec<QueryVectors>)],
) -> soul_mem_core::Result<()> {
    use std::fmt::Write as _;
    let mut out = String::new();
    let results = |r: &PipelineResult| {
        let mem: Vec<_> = r
            .memories
            .iter()
            .map(|m| (m.readable_id.clone(), m.score.to_bits(), m.stage))
            .collect();
        let act: Vec<_> = r
            .actions
            .iter()
            .map(|m| (m.readable_id.clone(), m.score.to_bits()))
            .collect();
        format!("mem={mem:?}\nact={act:?}")
    };
    for (k, (qs, vs)) in messages.iter().enumerate() {
        let r = DefaultPipeline::run(idx, qs, vs, cfg, None)?;
        let _ = writeln!(out, "n={n} message={k}\n{}", results(&r));
    }
    for (k, ((q, v), eq)) in queries.iter().zip(embedded).enumerate() {
        let sim = similarity(idx, eq, &cfg.similarity);
        let sim: Vec<(u32, u32)> = sim.iter().map(|(i, s)| (*i, s.to_bits())).collect();
        let _ = writeln!(out, "n={n} q={k} sim={sim:?}");
        let r = DefaultPipeline::run(
            idx,
            std::slice::from_ref(q),
            std::slice::from_ref(v),
            cfg,
            None,
        )?;
        let _ = writeln!(out, "n={n} q={k}\n{}", results(&r));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, out.as_bytes()))
        .map_err(|e| soul_mem_core::Error::invalid_argument("SOUL_BENCH_DUMP", e.to_string()))
}

/// Runs the retrieval benchmark for each graph size and prints a table. `parallel` lets
/// similarity use rayon on graphs of at least 20 000 nodes (the production default);
/// otherwise everything is single-threaded.
pub fn retrieval(
    sizes: &[usize],
    parallel: bool,
    reps: Option<usize>,
) -> soul_mem_core::Result<()> {
    println!(
        "| nodes | edges | PPR push p50/p99 ms | pushes (avg) | power iter (50 it) p50/p99 ms | similarity p50/p99 ms | lexical p50/p99 ms | pipeline p50/p99 ms | memories/actions (avg) | matrix rebuilds | lexical update, 1 note p50/p99 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut message_rows = Vec::new();
    for &n in sizes {
        let build = Instant::now();
        let s = synth(n, 0xB3C4 ^ n as u64)?;
        let idx = RetrievalIndex::build(&s.graph, s.vectors.clone())?;
        let mut cfg = PipelineConfig::default();
        if !parallel {
            cfg.similarity.parallel_min_nodes = usize::MAX; // single thread
        }
        let assoc = &cfg.assoc_with_action.association;
        eprintln!(
            "n={n}: synthetic graph + index built in {:.1}s ({} MB vectors)",
            build.elapsed().as_secs_f64(),
            idx.vectors().vector_bytes() / 1_000_000
        );
        // What the engine does once per time bucket: retention of every note at query time
        // (a day after the last note was created), then the decayed matrix.
        let now = serde_json::from_str("\"2026-06-01T00:00:00Z\"")
            .map_err(|e| soul_mem_core::Error::InvalidJson(e.to_string()))?;
        let forget = ForgetConfig::default();
        let decay = EdgeDecay::new(
            s.graph
                .notes()
                .map(|n| decay_factor(n, now, &forget))
                .collect(),
        )?;
        let t = Instant::now();
        let csr = idx.transition_decayed(assoc, Some(&decay))?;
        let csr_ms = t.elapsed().as_secs_f64() * 1e3;
        let reps = reps.unwrap_or(match n {
            0..=2_000 => 1000,
            2_001..=20_000 => 300,
            _ => 60,
        });
        let mut rng = Rng::new(42);
        let queries: Vec<(SubQuery, QueryVectors)> =
            (0..50).map(|_| make_query(&s, &mut rng)).collect();
        let embedded: Vec<EmbeddedQuery> = queries
            .iter()
            .map(|(q, v)| EmbeddedQuery::assemble(q, v, idx.vectors().dim()))
            .collect::<soul_mem_core::Result<_>>()?;
        let messages: Vec<(Vec<SubQuery>, Vec<QueryVectors>)> =
            (0..50).map(|_| make_message(&s, &mut rng)).collect();
        if let Ok(path) = std::env::var("SOUL_BENCH_DUMP") {
            dump(&path, n, &idx, &cfg, &queries, &embedded, &messages)?;
        }
        let run = |q: &SubQuery, v: &QueryVectors| {
            DefaultPipeline::run_decayed(
                &idx,
                std::slice::from_ref(q),
                std::slice::from_ref(v),
                &cfg,
                None,
                Some(&decay),
            )
        };
        // Warm up caches and the workspace.
        for (q, v) in queries.iter().take(5) {
            run(q, v)?;
        }
        let builds_before = idx.csr_builds();
        let (mut sim_t, mut push_t, mut naive_t, mut pipe_t) = (vec![], vec![], vec![], vec![]);
        let (mut pushes, mut mems, mut acts) = (0u64, 0usize, 0usize);
        let mut ws = PprWorkspace::new();
        let params = PprParams {
            damping: assoc.damping_factor,
            epsilon: assoc.residue_threshold,
        };
        let naive_reps = (reps / 10).max(5);
        for r in 0..reps {
            let k = r % queries.len();
            let eq = &embedded[k];
            let mut seeds = Vec::new();
            sim_t.push(time_ms(|| seeds = similarity(&idx, eq, &cfg.similarity)));
            let src: Vec<(u32, f64)> = if seeds.is_empty() {
                vec![(r as u32 % n as u32, 1.0)]
            } else {
                seeds.iter().map(|&(i, sc)| (i, f64::from(sc))).collect()
            };
            let mut err = None;
            push_t.push(time_ms(|| {
                if let Err(e) = forward_push(&csr, &src, &params, &mut ws) {
                    err = Some(e);
                }
            }));
            pushes += ws.last_pushes;
            if r < naive_reps {
                naive_t.push(time_ms(|| {
                    if let Err(e) = naive_ppr(&csr, &src, params.damping, 50) {
                        err = Some(e);
                    }
                }));
            }
            let (q, v) = &queries[k];
            let mut res = None;
            pipe_t.push(time_ms(|| res = Some(run(q, v))));
            if let Some(e) = err {
                return Err(e);
            }
            if let Some(r) = res {
                let r = r?;
                mems += r.memories.len();
                acts += r.actions.len();
            }
        }
        let built = idx.csr_builds() - builds_before;
        // A whole chat message: its five sub-queries in one pipeline run.
        let run_message = |(qs, vs): &(Vec<SubQuery>, Vec<QueryVectors>)| {
            DefaultPipeline::run_decayed(&idx, qs, vs, &cfg, None, Some(&decay))
        };
        for m in messages.iter().take(5) {
            run_message(m)?;
        }
        let message_t: Vec<f64> = (0..reps)
            .map(|r| {
                let mut res = Ok(());
                let ms = time_ms(|| res = run_message(&messages[r % messages.len()]).map(|_| ()));
                res.map(|_| ms)
            })
            .collect::<soul_mem_core::Result<_>>()?;
        message_rows.push((n, p50_p99(message_t)));
        // The lexical channel alone, and one note added to (a copy of) its index.
        let terms: Vec<Vec<String>> = queries.iter().map(|(q, _)| query_terms(q)).collect();
        let lex_t: Vec<f64> = (0..reps)
            .map(|r| {
                let t = &terms[r % terms.len()];
                time_ms(|| {
                    std::hint::black_box(idx.lexical_scores(t));
                })
            })
            .collect();
        let mut lex = idx.lexical().clone();
        let upd_t: Vec<f64> = (0..200)
            .map(|j| {
                let id = MemoryId::derive("bench", &format!("added{j}"));
                let fields = vec![
                    (2.0, format!("新概念{j}")),
                    (1.0, format!("描述{} 码头 老座钟 冬泳", j % TOPICS)),
                ];
                let mut res = Ok(());
                let ms = time_ms(|| res = lex.upsert(id, "added", &fields));
                res.map(|_| ms)
            })
            .collect::<soul_mem_core::Result<_>>()?;
        let edges = csr.edge_count();
        // The engine holds no copy of the matrix, so the patch rewrites it in place.
        drop(csr);
        // Recording 10 retrievals: the engine patches those rows instead of rebuilding.
        let recorded: Vec<(u32, f64)> = (0..10u32)
            .map(|j| (j * (n as u32 / 10).max(1) % n as u32, 1.0))
            .collect();
        let patched = decay.with_updates(&recorded)?;
        let changed: Vec<u32> = recorded.iter().map(|u| u.0).collect();
        let mut ok = Ok(false);
        let patch_ms = time_ms(|| ok = idx.update_decay(&decay, &patched, &changed));
        eprintln!(
            "n={n}: decayed matrix built in {csr_ms:.2} ms (once per time bucket or graph change); \
             patched after recording 10 retrievals in {patch_ms:.3} ms (patched: {})",
            ok?
        );
        let (sp50, sp99) = p50_p99(sim_t);
        let (pp50, pp99) = p50_p99(push_t);
        let (np50, np99) = p50_p99(naive_t);
        let (lp50, lp99) = p50_p99(pipe_t);
        let (xp50, xp99) = p50_p99(lex_t);
        let (up50, up99) = p50_p99(upd_t);
        println!(
            "| {n} | {edges} | {pp50:.3} / {pp99:.3} | {} | {np50:.2} / {np99:.2} | {sp50:.3} / {sp99:.3} | {xp50:.3} / {xp99:.3} | {lp50:.3} / {lp99:.3} | {:.1} / {:.1} | {built} | {up50:.3} / {up99:.3} |",
            pushes / reps as u64,
            mems as f64 / reps as f64,
            acts as f64 / reps as f64,
        );
    }
    println!();
    println!("| nodes | a chat message (text + 4 keywords: 5 sub-queries) pipeline p50/p99 ms |");
    println!("|---|---|");
    for (n, (p50, p99)) in message_rows {
        println!("| {n} | {p50:.3} / {p99:.3} |");
    }
    Ok(())
}

/// `soul_tune bench retrieval [--sizes 1000,10000,100000] [--parallel] [--reps N]` (`--reps`:
/// queries timed per size instead of 1000 / 300 / 60 by size; more give steadier medians).
pub fn run(args: &[String]) -> std::process::ExitCode {
    use std::process::ExitCode;
    let mut sizes = vec![1_000, 10_000, 100_000];
    let mut parallel = false;
    let mut reps = None;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--parallel" => parallel = true,
            "--reps" => match rest.next().and_then(|r| r.parse::<usize>().ok()) {
                Some(r) if r > 0 => reps = Some(r),
                _ => {
                    eprintln!("bad --reps: a positive number of queries");
                    return ExitCode::from(2);
                }
            },
            "--sizes" => match super::parse_sizes(rest.next().map(String::as_str).unwrap_or("")) {
                Ok(v) => sizes = v,
                Err(e) => {
                    eprintln!("bad --sizes: {e}");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!(
                    "usage: soul_tune bench retrieval [--sizes 1000,10000,100000] [--parallel] [--reps N]"
                );
                return ExitCode::from(2);
            }
        }
    }
    match retrieval(&sizes, parallel, reps) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
