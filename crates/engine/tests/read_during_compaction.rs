//! Regression test for the "missing key at 10M keys" of `prefixkv-bench cpr` (see
//! `docs/engine.md`, "Chain walks and the begin address"): a read that loaded a key's chain head
//! before compaction re-pointed it at the key's copy, and the log's begin address after compaction
//! moved past the old record, walked nothing and answered "not found" for a key that was never
//! absent. The bench's verification read the recovered store while compaction ran and reported
//! the key missing from the checkpoint image.
//!
//! Here, 20,000 keys are written once and never touched again while one writer inserts fresh keys
//! and deletes older ones (the tombstones and new records fill the 4 MiB log, so compaction runs
//! without pause and copies the stable keys forward again and again), and 24 readers on the 2
//! cores (oversubscribed on purpose: a reader descheduled between its two loads is the race)
//! read the stable keys. Every read must find its key. Before the fix this failed within about a
//! second in 10 of 10 runs; `PREFIXKV_STRESS_SECONDS` (default 4) sets the duration.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prefixkv_engine::Store;

const STABLE_KEYS: u64 = 20_000;
const READERS: u64 = 24;
/// Keys the writer keeps alive; older ones it deletes.
const WRITER_WINDOW: u64 = 500;

#[test]
fn keys_never_deleted_are_always_found_while_compaction_moves_them() {
    let seconds = common::env_count("PREFIXKV_STRESS_SECONDS", 4);
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::small_config(dir.path());
    config.log_memory_bytes = 4 << 20;
    config.log_page_bytes = 16 << 10;
    // Tombstones hold their index entries until compaction unlinks them.
    config.index_buckets = 1 << 14;
    let store = Store::open(config).unwrap();
    {
        let mut loader = store.start_session();
        for key in 0..STABLE_KEYS {
            loader
                .upsert(&key.to_be_bytes(), &key.to_le_bytes())
                .unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let (miss_sender, misses) = std::sync::mpsc::channel::<u64>();
    let mut threads = Vec::new();
    {
        let mut session = store.start_session();
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let key = STABLE_KEYS + n;
                session
                    .upsert(&key.to_be_bytes(), &n.to_le_bytes())
                    .unwrap();
                if n > WRITER_WINDOW {
                    session
                        .delete(&(key - WRITER_WINDOW).to_be_bytes())
                        .unwrap();
                }
            }
        }));
    }
    for reader in 0..READERS {
        let mut session = store.start_session();
        let (stop, reads, miss_sender) = (stop.clone(), reads.clone(), miss_sender.clone());
        threads.push(std::thread::spawn(move || {
            let mut value = Vec::new();
            let mut key = reader;
            while !stop.load(Ordering::Relaxed) {
                key = (key + 7919) % STABLE_KEYS;
                if !session.read(&key.to_be_bytes(), &mut value).unwrap() {
                    let _ = miss_sender.send(key);
                } else {
                    assert_eq!(value, key.to_le_bytes(), "key {key} read a wrong value");
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    drop(miss_sender);
    let first_miss = misses.recv_timeout(Duration::from_secs(seconds)).ok();
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    eprintln!(
        "{} reads, {} log bytes in use",
        reads.load(Ordering::Relaxed),
        store.log_memory_in_use_bytes()
    );
    if let Some(key) = first_miss {
        let more = misses.try_iter().count();
        panic!(
            "key {key} (written once, never deleted) was read as absent while compaction moved it \
             ({more} more misses)"
        );
    }
}
