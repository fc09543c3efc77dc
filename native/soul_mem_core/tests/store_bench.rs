//! Runs the store benchmark (ignored by default: it writes ~100 MB and takes a while).
//! `cargo test -p soul_mem_core --test store_bench -- --ignored --nocapture`
#![allow(clippy::unwrap_used)]

use soul_mem_core::store::bench_store;

#[test]
fn bench_small_runs() {
    let dir = std::env::temp_dir().join(format!("soulmem-store-bench-s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let r = bench_store(&dir, 500).unwrap();
    assert_eq!(r.nodes, 500);
    assert!(r.links > 500);
    assert_eq!((r.touched, r.incremental_notes_written), (100, 100));
    assert!(r.single_writes_per_sec > 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

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
