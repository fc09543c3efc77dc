//! Imports every graph of the original project's corpus (`../shared/fixtures`, when present)
//! and the project's own demo character, checking counts against the files themselves.

use soul_mem_core::import::{export_json, import_bytes, import_file, ImportOptions};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn graph_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            graph_files(&p, out);
        } else if p.file_name().is_some_and(|n| n == "graph.json")
            || p.parent().is_some_and(|d| d.ends_with("graphs"))
        {
            out.push(p);
        }
    }
}

fn counts_in_file(path: &Path) -> (usize, usize) {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json");
    let nodes = v.as_array().expect("array");
    let links = nodes
        .iter()
        .map(|n| n["mem_links"].as_array().map_or(0, Vec::len))
        .sum();
    (nodes.len(), links)
}

fn check(path: &Path) {
    let g = import_file("corpus", path, &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let s = g.stats();
    assert_eq!(
        (s.nodes, s.links),
        counts_in_file(path),
        "{}",
        path.display()
    );
    assert_eq!(s.pending_links, 0);
    let out = export_json(&g, false).expect("export");
    let again =
        import_bytes("corpus", out.as_bytes(), &ImportOptions::default()).expect("re-import");
    assert_eq!(out, export_json(&again, false).expect("export"));
}

#[test]
fn demo_character_imports() {
    check(&repo_root().join("fixtures/characters/demo.json"));
}

#[test]
fn every_corpus_graph_imports_with_file_counts() {
    let dir = repo_root().join("../shared/fixtures");
    if !dir.is_dir() {
        eprintln!("skipping: {} is absent", dir.display());
        return;
    }
    let mut files = Vec::new();
    graph_files(&dir, &mut files);
    assert!(!files.is_empty(), "no graphs under {}", dir.display());
    for f in &files {
        check(f);
    }
    eprintln!("imported {} corpus graphs", files.len());
}
