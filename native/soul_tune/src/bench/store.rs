//! `soul_tune bench store`: cold open + full load of a synthetic graph, incremental and full
//! write-back of the loaded graph, and the rate of acknowledged (fsynced) single writes.
//!
//! ```text
//! cargo run --release -p soul_tune -- bench store [--nodes 10000,100000] [--dir DIR]
//! ```
//!
//! Prints one JSON line ([`StoreBench`]) per graph size.

use chrono::{TimeZone, Utc};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;
use soul_mem_core::rng::SplitMix64;
use soul_mem_core::store::{CheckpointMode, Store};
use soul_mem_core::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Results of [`bench_store`]. Times in milliseconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoreBench {
    /// Notes in the synthetic graph.
    pub nodes: usize,
    /// Links in the synthetic graph.
    pub links: usize,
    /// `save_graph` of the whole graph (one transaction).
    pub save_ms: f64,
    /// `Store::open` of the existing file by a fresh handle.
    pub cold_open_ms: f64,
    /// `load_graph` right after the cold open.
    pub load_ms: f64,
    /// `activate` of one seed, 2 hops, cap 200.
    pub activate_ms: f64,
    /// Notes touched in the loaded graph before the incremental checkpoint (retrieval
    /// statistics of each, plus a link intensity of every other one).
    pub touched: usize,
    /// `checkpoint` of the loaded graph after touching them (incremental, one transaction).
    pub incremental_checkpoint_ms: f64,
    /// Notes that checkpoint wrote.
    pub incremental_notes_written: usize,
    /// `checkpoint` of the loaded graph with nothing changed (incremental: an empty write).
    pub noop_checkpoint_ms: f64,
    /// `save_graph` of the loaded graph over the stored one (the whole-graph rewrite).
    pub full_checkpoint_ms: f64,
    /// Number of single `put_note` writes timed.
    pub single_writes: usize,
    /// Acknowledged single writes per second (each one transaction, fsynced).
    pub single_writes_per_sec: f64,
    /// Size of the database file after the run (bytes, WAL excluded).
    pub db_bytes: u64,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// A synthetic semantic note `n{i}` with a chain link to `n{i-1}` and one pseudo-random link.
fn synthetic(character: &str, i: usize, n: usize, rng: &mut SplitMix64) -> MemoryNote {
    let t = Utc
        .timestamp_opt(1_780_000_000 + i as i64, 0)
        .single()
        .unwrap_or_default();
    let mut note = MemoryNote::new(
        character,
        format!("n{i}"),
        MemoryType::Semantic(SemMemory {
            content: format!("合成概念 {i}"),
            aliases: vec![format!("alias{i}")],
            concept_type: ConceptType::Entity,
            description: "synthetic benchmark note with a short description".into(),
        }),
        t,
    );
    note.tags = vec!["bench".into()];
    let mut targets = Vec::new();
    if i > 0 {
        targets.push(i - 1);
    }
    if n > 1 {
        targets.push(rng.below(n));
    }
    for (ord, j) in targets.into_iter().enumerate() {
        let to = MemoryId::derive(character, &format!("n{j}"));
        note.links.push(MemoryLink {
            id: LinkId::derive(note.id, to, ord),
            from: note.id,
            to,
            intensity: 0.5,
            link_type: MemoryLinkType::Sem(SemMemLink {
                verb: "相关".into(),
                confidence: 0.8,
            }),
        });
    }
    note
}

/// Builds a `nodes`-note synthetic character in a fresh store under `dir` and times save, cold
/// open, load, activation and single acknowledged writes. The store file is left in `dir`.
pub fn bench_store(dir: &Path, nodes: usize) -> Result<StoreBench> {
    let character = format!("bench{nodes}");
    let path = Store::path_for(dir, &character);
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(Path::new(&p), &e)),
        }
    }
    let mut rng = SplitMix64::new(0x5EED);
    let mut graph = MemoryGraph::new(character.clone());
    for i in 0..nodes {
        graph.insert(synthetic(&character, i, nodes, &mut rng))?;
    }
    let links = graph.link_count() + graph.pending_links().count();

    let mut store = Store::open(&path, &character)?;
    let t = Instant::now();
    store.save_graph(&graph)?;
    let save_ms = ms(t);
    drop(store);
    drop(graph);

    let t = Instant::now();
    let mut store = Store::open(&path, &character)?;
    let cold_open_ms = ms(t);
    let t = Instant::now();
    let mut loaded = store.load_graph()?;
    let load_ms = ms(t);
    if loaded.len() != nodes {
        return Err(Error::invalid_argument(
            "bench",
            format!("loaded {} of {nodes} notes", loaded.len()),
        ));
    }
    let t = Instant::now();
    let seed_id = MemoryId::derive(&character, &format!("n{}", nodes / 2));
    store.activate(&[seed_id], 2, 200)?;
    let activate_ms = ms(t);

    let touched = nodes.min(100);
    let at = Utc
        .timestamp_opt(1_790_000_000, 0)
        .single()
        .unwrap_or_default();
    for k in 0..touched {
        let id = MemoryId::derive(&character, &format!("n{}", k * nodes / touched));
        loaded.record_retrieval(&id, at);
        let first = loaded.get(&id).and_then(|n| n.links.first()).map(|l| l.id);
        if let Some(link) = first.filter(|_| k % 2 == 0) {
            loaded.set_link_intensity(&id, &link, 0.75)?;
        }
    }
    let t = Instant::now();
    let incremental = store.checkpoint(&mut loaded, &[])?;
    let incremental_checkpoint_ms = ms(t);
    if incremental.mode != CheckpointMode::Incremental {
        return Err(Error::invalid_argument(
            "bench",
            format!("expected an incremental checkpoint, got {incremental:?}"),
        ));
    }
    let t = Instant::now();
    store.checkpoint(&mut loaded, &[])?;
    let noop_checkpoint_ms = ms(t);
    let t = Instant::now();
    store.save_graph(&loaded)?;
    let full_checkpoint_ms = ms(t);

    let single_writes = 200;
    let t = Instant::now();
    for i in 0..single_writes {
        store.put_note(&synthetic(&character, nodes + i, nodes, &mut rng))?;
    }
    let secs = t.elapsed().as_secs_f64().max(1e-9);
    let db_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    Ok(StoreBench {
        nodes,
        links,
        save_ms,
        cold_open_ms,
        load_ms,
        activate_ms,
        touched,
        incremental_checkpoint_ms,
        incremental_notes_written: incremental.notes_written,
        noop_checkpoint_ms,
        full_checkpoint_ms,
        single_writes,
        single_writes_per_sec: single_writes as f64 / secs,
        db_bytes,
    })
}

/// `soul_tune bench store [--nodes N,N…] [--dir DIR]`: runs [`bench_store`] for each size
/// (default 10 000 and 100 000 notes, ~100 MB of files) and prints one JSON line each. Without
/// `--dir` the files go to a fresh temporary directory that is removed afterwards.
pub fn run(args: &[String]) -> ExitCode {
    let mut sizes = vec![10_000, 100_000];
    let mut dir: Option<PathBuf> = None;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match (a.as_str(), rest.next()) {
            ("--nodes", Some(v)) => match super::parse_sizes(v) {
                Ok(v) => sizes = v,
                Err(e) => {
                    eprintln!("bad --nodes: {e}");
                    return ExitCode::from(2);
                }
            },
            ("--dir", Some(v)) => dir = Some(PathBuf::from(v)),
            _ => {
                eprintln!("usage: soul_tune bench store [--nodes 10000,100000] [--dir DIR]");
                return ExitCode::from(2);
            }
        }
    }
    let temporary = dir.is_none();
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("soulmem-store-bench-{}", std::process::id()))
    });
    let result = std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(&dir, &e))
        .and_then(|()| {
            for &n in &sizes {
                let r = bench_store(&dir, n)?;
                let line = serde_json::to_string(&r)
                    .map_err(|e| Error::InvalidJson(format!("store bench report: {e}")))?;
                println!("{line}");
            }
            Ok(())
        });
    if temporary {
        // Best effort: a leftover temp directory is not worth failing the run for.
        let _ = std::fs::remove_dir_all(&dir);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bench_small_runs() {
        let dir =
            std::env::temp_dir().join(format!("soulmem-store-bench-s-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = bench_store(&dir, 500).unwrap();
        assert_eq!(r.nodes, 500);
        assert!(r.links > 500);
        assert_eq!((r.touched, r.incremental_notes_written), (100, 100));
        assert!(r.single_writes_per_sec > 0.0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The full-size run (ignored: it writes ~100 MB); `soul_tune bench store` prints the same.
    #[test]
    #[ignore]
    fn bench_10k_and_100k() {
        let dir = std::env::temp_dir().join(format!("soulmem-store-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in [10_000, 100_000] {
            let r = bench_store(&dir, n).unwrap();
            // The incremental write-back after touching 100 notes only writes those.
            assert_eq!(r.incremental_notes_written, 100);
            println!("{}", serde_json::to_string(&r).unwrap());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
