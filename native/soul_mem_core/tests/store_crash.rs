//! Durability: every acknowledged write survives `kill -9` at a random moment.
//!
//! The test re-executes its own binary (`current_exe`) with `SOULMEM_CRASH_DB` set; in that
//! mode `crash_writer` performs `WRITES` single-transaction writes and prints `ack <n>` after
//! each one returned `Ok`. The parent SIGKILLs the child after a random number of acks, then
//! reopens the store and checks that every acknowledged write is there and intact.
#![allow(clippy::unwrap_used)]

use chrono::{TimeZone, Utc};
use soul_mem_core::model::*;
use soul_mem_core::rng::SplitMix64;
use soul_mem_core::store::{Change, Message, Store};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const C: &str = "小红";
const WRITES: usize = 1000;
const ENV_DB: &str = "SOULMEM_CRASH_DB";

fn note(i: usize) -> MemoryNote {
    let mut n = MemoryNote::new(
        C,
        format!("n{i}"),
        MemoryType::Semantic(SemMemory {
            content: format!("概念{i}"),
            aliases: vec![],
            concept_type: ConceptType::Entity,
            description: "x".repeat(i % 200),
        }),
        Utc.timestamp_opt(1_780_000_000 + i as i64, 0).unwrap(),
    );
    if i > 0 {
        let to = MemoryId::derive(C, &format!("n{}", i - 1));
        n.links.push(MemoryLink {
            id: LinkId::derive(n.id, to, 0),
            from: n.id,
            to,
            intensity: 0.5,
            link_type: MemoryLinkType::Sem(SemMemLink {
                verb: "后".into(),
                confidence: 1.0,
            }),
        });
    }
    n
}

fn message(i: usize) -> Message {
    Message {
        role: "user".into(),
        text: format!("消息{i}"),
        at: Utc.timestamp_opt(1_780_000_000 + i as i64, 0).unwrap(),
        tagged: i % 7 == 3,
    }
}

/// Write `i`: alternately a note (with a link), a message, and a batch of both plus a summary.
fn write(s: &mut Store, i: usize) -> soul_mem_core::Result<()> {
    match i % 3 {
        0 => s.put_note(&note(i)),
        1 => s.append_message(&message(i)).map(|_| ()),
        _ => s.apply(&[
            Change::PutNote(note(i)),
            Change::AppendMessage(message(i)),
            Change::SetSummary(format!("summary after {i}")),
        ]),
    }
}

/// Child mode: a no-op unless the parent set `SOULMEM_CRASH_DB`.
#[test]
fn crash_writer() {
    let Ok(db) = std::env::var(ENV_DB) else {
        return;
    };
    let mut s = Store::open(&db, C).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "open").unwrap();
    out.flush().unwrap();
    for i in 0..WRITES {
        write(&mut s, i).unwrap();
        // Not println!: libtest captures that; a raw stdout handle reaches the pipe at once.
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
    }
    writeln!(out, "done").unwrap();
    out.flush().unwrap();
}

/// Asserts writes `0..acked` are present and intact (later, unacknowledged ones may be too).
fn verify(db: &Path, acked: usize) -> usize {
    let s = Store::open(db, C).unwrap();
    assert!(s.check_integrity().unwrap().is_empty());
    let g = s.load_graph().unwrap();
    let window = s.window().unwrap();
    let texts: std::collections::HashSet<String> =
        window.iter().map(|(_, m)| m.text.clone()).collect();
    for i in 0..acked {
        if i % 3 != 1 {
            let n = g
                .get_by_readable(&format!("n{i}"))
                .unwrap_or_else(|| panic!("acknowledged note n{i} lost"));
            assert_eq!(n, &{
                let mut want = note(i);
                // A link to a note that is not there yet (odd writes carry no note) waits as
                // pending in the graph, not on the note.
                want.links.retain(|l| g.get(&l.to).is_some());
                want
            });
        }
        if i % 3 != 0 {
            assert!(
                texts.contains(&message(i).text),
                "acknowledged message {i} lost"
            );
        }
    }
    // Atomic batches: a batch's message is present iff its note is.
    for i in (2..WRITES).step_by(3) {
        let has_note = g.get_by_readable(&format!("n{i}")).is_some();
        assert_eq!(
            has_note,
            texts.contains(&message(i).text),
            "half a batch {i}"
        );
    }
    g.len()
}

/// A generator seeded from the clock (or `SOULMEM_CRASH_SEED`); the seed is printed so a
/// failure can be replayed.
fn rng() -> impl FnMut(u64) -> u64 {
    let x = std::env::var("SOULMEM_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("seed {x}");
    let mut r = SplitMix64::new(x);
    move |n| r.next_u64() % n
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    if std::env::var(ENV_DB).is_ok() {
        return;
    }
    let mut rand = rng();
    let base = std::env::temp_dir().join(format!("soulmem-store-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    // Round 0 kills while the store is being created/opened (no ack read), round 1 right
    // after the first ack, the others at random points.
    let rounds = 8;
    for round in 0..rounds {
        let dir = base.join(format!("r{round}"));
        std::fs::create_dir_all(&dir).unwrap();
        let db = Store::path_for(&dir, C);
        let kill_after = if round < 2 {
            round
        } else {
            1 + rand(WRITES as u64 - 50) as usize
        };
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_writer", "--nocapture", "--test-threads=1"])
            .env(ENV_DB, &db)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acked = 0;
        let mut checked_in_use = false;
        if kill_after == 0 {
            // Somewhere in process start-up, store creation or the first writes.
            std::thread::sleep(std::time::Duration::from_micros(rand(10_000)));
        }
        for line in lines.by_ref() {
            if kill_after == 0 {
                break;
            }
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("ack ") {
                acked = n.parse::<usize>().unwrap() + 1;
                if !checked_in_use {
                    // The child holds the lock: another process is refused.
                    let e = Store::open(&db, C).unwrap_err();
                    assert_eq!(e.kind(), "in_use", "{e}");
                    checked_in_use = true;
                }
                if acked >= kill_after {
                    break;
                }
            }
        }
        // Let the child run into its next writes for a moment, so the kill lands anywhere
        // in a transaction, not just after a flush.
        std::thread::sleep(std::time::Duration::from_micros(rand(3000)));
        child.kill().unwrap(); // SIGKILL on unix
        let status = child.wait().unwrap();
        // Acks printed after our last read still count as acknowledged.
        for line in lines {
            if let Some(n) = line.unwrap().strip_prefix("ack ") {
                acked = n.parse::<usize>().unwrap() + 1;
            }
        }
        assert!(
            acked >= kill_after && acked <= WRITES,
            "round {round}: {acked}"
        );
        let present = verify(&db, acked);
        println!(
            "round {round}: kill after ack {kill_after}, {acked} acknowledged, {present} notes on disk, status {status}"
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn uninterrupted_writer_completes_all_writes() {
    if std::env::var(ENV_DB).is_ok() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("soulmem-store-crash-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = Store::path_for(&dir, C);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_writer", "--nocapture", "--test-threads=1"])
        .env(ENV_DB, &db)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("done"), "{text}");
    let present = verify(&db, WRITES);
    assert_eq!(present, WRITES - WRITES / 3);
    let _ = std::fs::remove_dir_all(&dir);
}
