//! Helpers shared by the store and working-memory tests.
#![allow(clippy::unwrap_used, dead_code)]

use chrono::{DateTime, TimeZone, Utc};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// The directories [`tmp`] made in this process.
static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the directories [`tmp`] made. Runs at process exit: the test harness ends through
/// libc's `exit` (after all tests, passed or failed), so a run leaves nothing behind in the
/// temp dir; a test that needs its directory only while it runs cannot drop it too early.
extern "C" fn remove_made() {
    if let Ok(dirs) = MADE.lock() {
        for d in dirs.iter() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A fresh, empty directory under the system temp dir, unique per process and call, removed
/// when the process exits.
pub fn tmp(prefix: &str, name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    static AT_EXIT: Once = Once::new();
    // SAFETY: `remove_made` is a plain `extern "C" fn()` that never unwinds.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(remove_made);
    });
    let d = std::env::temp_dir().join(format!(
        "soulmem-{prefix}-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    MADE.lock().unwrap().push(d.clone());
    d
}

/// A fixed instant plus `s` seconds.
pub fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_780_000_000 + s, 0).unwrap()
}

/// A small graph with every kind of note and link (sem_self → sit_b → proc_c, sem_self ⇄
/// sem_cat), for the store import and export tests.
pub const STORE_GRAPH: &str = r#"[
  {"id":"sem_self","tags":["我"],"mem_type":{"Semantic":{"content":"小红","aliases":[],"concept_type":"Entity","description":"自己"}},
   "mem_links":[{"from":"sem_self","to":"sit_b","intensity":0.8,"link_type":{"Sem":{"verb":"参与","confidence":0.7}}},
                {"from":"sem_self","to":"sem_cat","intensity":0.5,"link_type":{"Sem":{"verb":"养","confidence":0.9}}}]},
  {"id":"sit_b","tags":[],"mem_type":{"Situation":{"SpecificSituation":{"narrative":"吃麻辣烫","time_span":"2026-06-01T08:00:00Z","context":{"location":{"name":"店","coordinates":""},"participants":[],"emotions":[],"sensory_data":[],"environment":{"atmosphere":"","tone":""},"event":[]}}}},
   "mem_links":[{"from":"sit_b","to":"proc_c","intensity":0.9,"link_type":{"Proc":{"prob":0.6}}}]},
  {"id":"proc_c","tags":[],"mem_type":{"Procedure":{"action":{"content":"摸辫子","action_type":{"Skill":{}}}}},"mem_links":[]},
  {"id":"sem_cat","tags":["猫"],"mem_type":{"Semantic":{"content":"橘猫","aliases":[],"concept_type":"Entity","description":"家里的猫"}},
   "mem_links":[{"from":"sem_cat","to":"sem_self","intensity":0.3,"link_type":{"Sem":{"verb":"属于","confidence":0.8}}}]}
]"#;
