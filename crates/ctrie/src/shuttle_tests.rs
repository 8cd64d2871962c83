//! Shuttle: randomised (and PCT) schedules of larger scenarios than loom can exhaust — three
//! threads mixing inserts, removes that contract and compress the trie, conditional updates,
//! `len` and both kinds of snapshots — each history checked for linearizability.
//!
//! Run: `RUSTFLAGS="--cfg shuttle" cargo test -p prefixkv-ctrie --release --lib shuttle`
//! (`PREFIXKV_CTRIE_SHUTTLE_ITERATIONS` sets the schedules per test, default 300).

use crate::lincheck::{is_linearizable, perform, random_operations, Clock, Event, SHAPES};
use crate::CTrie;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn iterations() -> usize {
    std::env::var("PREFIXKV_CTRIE_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(300)
}

/// One schedule: a trie with two preset keys, three threads of five operations on three keys.
fn scenario(seed: u64) {
    let shape = SHAPES[(seed % SHAPES.len() as u64) as usize];
    let trie = Arc::new(CTrie::with_hasher(shape));
    let mut initial = BTreeMap::new();
    for key in 0..2u64 {
        trie.insert(key, 100 + key as u32);
        initial.insert(key, 100 + key as u32);
    }
    let clock = Arc::new(Clock::new());
    let history = Arc::new(Mutex::new(Vec::<Event>::new()));
    let handles: Vec<_> = (0..3u64)
        .map(|thread| {
            let (trie, clock, history) = (trie.clone(), clock.clone(), history.clone());
            let operations = random_operations(seed * 3 + thread, 5, 3);
            shuttle::thread::spawn(move || {
                for operation in operations {
                    let event = perform(&trie, &clock, operation);
                    history.lock().unwrap().push(event);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let history = history.lock().unwrap().clone();
    // Every thread has joined: free what the trie retired, inside this execution.
    drop(trie);
    crate::sync::reclaim_all();
    assert!(
        is_linearizable(&history, &initial),
        "seed {seed}: not linearizable: {history:#?}"
    );
}

/// Each shuttle execution gets its own seed for the operation mix.
static SEEDS: AtomicU64 = AtomicU64::new(0);

#[test]
fn shuttle_random_schedules_are_linearizable() {
    shuttle::check_random(
        || scenario(SEEDS.fetch_add(1, Ordering::Relaxed)),
        iterations(),
    );
}

#[test]
fn shuttle_pct_schedules_are_linearizable() {
    shuttle::check_pct(
        || scenario(SEEDS.fetch_add(1, Ordering::Relaxed) + 1_000_000),
        iterations(),
        3,
    );
}
