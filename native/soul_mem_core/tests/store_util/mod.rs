//! Helpers shared by the store and working-memory tests.
#![allow(clippy::unwrap_used, dead_code)]

use chrono::{DateTime, TimeZone, Utc};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty directory under the system temp dir, unique per process and call.
pub fn tmp(prefix: &str, name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "soulmem-{prefix}-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fixed instant plus `s` seconds.
pub fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_780_000_000 + s, 0).unwrap()
}
