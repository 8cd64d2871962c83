//! Long concurrent runs: writers insert and remove (compressing the trie) while a snapshotter
//! takes read-only and writable snapshots; every snapshot must equal the map at one instant
//! between its call and return.
//!
//! Each writer owns its keys and logs every operation with invoke/return ticks of one global
//! clock. For a snapshot, each writer's keys must match the writer's state after some prefix of
//! its log, and one instant `t` inside the snapshot's call must fit every writer's prefix: the
//! last included operation was invoked before `t`, the first excluded one returned after `t`.
//! Iteration count: `PREFIXKV_CTRIE_STRESS` (operations per writer, default 20 000).

use prefixkv_ctrie::CTrie;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const WRITERS: u64 = 2;
const KEYS_PER_WRITER: u64 = 48;

#[derive(Clone, Copy)]
struct Logged {
    key: u64,
    /// `Some(value)` for an insert, `None` for a remove.
    value: Option<u64>,
    invoked: u64,
    returned: u64,
}

struct Taken {
    entries: HashMap<u64, u64>,
    invoked: u64,
    returned: u64,
}

fn operations_per_writer() -> u64 {
    std::env::var("PREFIXKV_CTRIE_STRESS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(20_000)
}

/// Interval of instants `t` (exclusive bounds) at which the writer's state equals `seen`, one
/// per matching prefix.
fn matching_intervals(log: &[Logged], seen: &HashMap<u64, u64>, writer: u64) -> Vec<(u64, u64)> {
    let owned = |key: u64| key / KEYS_PER_WRITER == writer;
    let mut state: HashMap<u64, u64> = HashMap::new();
    // Number of the writer's keys on which the replayed state and the snapshot disagree.
    let mut mismatches = seen.keys().filter(|key| owned(**key)).count();
    let mut intervals = Vec::new();
    for prefix in 0..=log.len() {
        if mismatches == 0 {
            let low = if prefix == 0 {
                0
            } else {
                log[prefix - 1].invoked
            };
            let high = if prefix == log.len() {
                u64::MAX
            } else {
                log[prefix].returned
            };
            intervals.push((low, high));
        }
        if prefix == log.len() {
            break;
        }
        let entry = log[prefix];
        let before = state.get(&entry.key).copied() == seen.get(&entry.key).copied();
        match entry.value {
            Some(value) => state.insert(entry.key, value),
            None => state.remove(&entry.key),
        };
        let after = state.get(&entry.key).copied() == seen.get(&entry.key).copied();
        match (before, after) {
            (true, false) => mismatches += 1,
            (false, true) => mismatches -= 1,
            _ => {}
        }
    }
    intervals
}

fn consistent_at_one_instant(taken: &Taken, logs: &[Vec<Logged>]) -> bool {
    let per_writer: Vec<Vec<(u64, u64)>> = logs
        .iter()
        .enumerate()
        .map(|(writer, log)| matching_intervals(log, &taken.entries, writer as u64))
        .collect();
    // Candidate instants: just after each interval's lower bound and the snapshot's call. Ticks
    // are distinct integers, so `x + 0.5` stands for "just after x" (scaled by 2 below).
    let mut candidates: Vec<u64> = per_writer
        .iter()
        .flatten()
        .map(|(low, _)| low * 2 + 1)
        .collect();
    candidates.push(taken.invoked * 2 + 1);
    candidates.into_iter().any(|t| {
        t > taken.invoked * 2
            && t < taken.returned * 2
            && per_writer.iter().all(|intervals| {
                intervals
                    .iter()
                    .any(|(low, high)| t > low * 2 && t < high.saturating_mul(2))
            })
    })
}

#[test]
fn snapshots_taken_during_writes_are_atomic() {
    let trie: CTrie<u64, u64> = CTrie::new();
    let clock = AtomicU64::new(1);
    let done = AtomicBool::new(false);
    let operations = operations_per_writer();
    let (logs, taken) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (trie, clock) = (&trie, &clock);
                scope.spawn(move || {
                    let mut log = Vec::with_capacity(operations as usize);
                    let mut random = writer.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    for sequence in 0..operations {
                        random ^= random << 13;
                        random ^= random >> 7;
                        random ^= random << 17;
                        let key = writer * KEYS_PER_WRITER + random % KEYS_PER_WRITER;
                        let insert = random % 5 < 3;
                        let invoked = clock.fetch_add(1, Ordering::SeqCst);
                        if insert {
                            trie.insert(key, sequence);
                        } else {
                            trie.remove(&key);
                        }
                        let returned = clock.fetch_add(1, Ordering::SeqCst);
                        log.push(Logged {
                            key,
                            value: insert.then_some(sequence),
                            invoked,
                            returned,
                        });
                    }
                    log
                })
            })
            .collect();
        let snapshotter = {
            let (trie, clock, done) = (&trie, &clock, &done);
            scope.spawn(move || {
                let mut taken = Vec::new();
                let mut writable = false;
                while (!done.load(Ordering::SeqCst) && taken.len() < 200) || taken.is_empty() {
                    let invoked = clock.fetch_add(1, Ordering::SeqCst);
                    let entries: HashMap<u64, u64> = if writable {
                        // A writable snapshot written to afterwards must keep the first state.
                        let copy = trie.snapshot();
                        let before: HashMap<u64, u64> = copy.iter().collect();
                        copy.insert(u64::MAX, 0);
                        let after: HashMap<u64, u64> =
                            copy.iter().filter(|(key, _)| *key != u64::MAX).collect();
                        assert_eq!(before, after);
                        before
                    } else {
                        let frozen = trie.read_only_snapshot();
                        let entries: HashMap<u64, u64> = frozen.iter().collect();
                        assert_eq!(entries.len(), frozen.len());
                        entries
                    };
                    // The return tick follows the iteration: that only widens the window, and a
                    // frozen snapshot cannot change while it is iterated.
                    let returned = clock.fetch_add(1, Ordering::SeqCst);
                    taken.push(Taken {
                        entries,
                        invoked,
                        returned,
                    });
                    writable = !writable;
                }
                taken
            })
        };
        let logs: Vec<Vec<Logged>> = writers
            .into_iter()
            .map(|writer| writer.join().expect("writer panicked"))
            .collect();
        done.store(true, Ordering::SeqCst);
        (logs, snapshotter.join().expect("snapshotter panicked"))
    });
    assert!(!taken.is_empty());
    for (index, snapshot) in taken.iter().enumerate() {
        assert!(
            consistent_at_one_instant(snapshot, &logs),
            "snapshot {index} of {} (ticks {}..{}) is not the map at one instant",
            taken.len(),
            snapshot.invoked,
            snapshot.returned
        );
    }
    // The live trie ends as the writers left it.
    let mut expected: HashMap<u64, u64> = HashMap::new();
    for log in &logs {
        for entry in log {
            match entry.value {
                Some(value) => expected.insert(entry.key, value),
                None => expected.remove(&entry.key),
            };
        }
    }
    let live: HashMap<u64, u64> = trie.iter().collect();
    assert_eq!(live, expected);
}
