//! A small brute-force linearizability checker (Wing & Gong search with memoisation) for short
//! recorded histories on a few keys, and the workload that records them. Used by the std-thread
//! tests here and by the shuttle tests.
//!
//! A history is a list of completed operations with logical invoke/return ticks from one global
//! counter. It is linearizable if some total order of the operations respects real time (an
//! operation that returned before another was invoked comes first) and replays on a sequential
//! map to the same results. Snapshots are operations whose result is the whole map, so a
//! snapshot passes only if it equals the map at one point between its call and its return.

use crate::unit_tests::ShapedHash;
use crate::CTrie;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

/// A map operation of the recorded workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Get(u64),
    Insert(u64, u32),
    Remove(u64),
    PutIfAbsent(u64, u32),
    Replace(u64, u32),
    /// A read-only snapshot, iterated.
    ReadOnlySnapshot,
    /// A writable snapshot, iterated (through its own read-only snapshot).
    WritableSnapshot,
    /// `len()` of the live trie.
    Len,
}

/// What an operation returned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    Value(Option<u32>),
    Entries(Vec<(u64, u32)>),
    Count(usize),
}

/// One completed operation.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub(crate) operation: Operation,
    pub(crate) outcome: Outcome,
    pub(crate) invoked: u64,
    pub(crate) returned: u64,
}

/// The sequential specification.
fn apply(state: &BTreeMap<u64, u32>, operation: Operation) -> (BTreeMap<u64, u32>, Outcome) {
    let mut next = state.clone();
    let outcome = match operation {
        Operation::Get(key) => Outcome::Value(state.get(&key).copied()),
        Operation::Insert(key, value) => Outcome::Value(next.insert(key, value)),
        Operation::Remove(key) => Outcome::Value(next.remove(&key)),
        Operation::PutIfAbsent(key, value) => {
            let existing = state.get(&key).copied();
            if existing.is_none() {
                next.insert(key, value);
            }
            Outcome::Value(existing)
        }
        Operation::Replace(key, value) => {
            let existing = state.get(&key).copied();
            if existing.is_some() {
                next.insert(key, value);
            }
            Outcome::Value(existing)
        }
        Operation::ReadOnlySnapshot | Operation::WritableSnapshot => {
            Outcome::Entries(state.iter().map(|(key, value)| (*key, *value)).collect())
        }
        Operation::Len => Outcome::Count(state.len()),
    };
    (next, outcome)
}

/// True if `history` (at most 64 events) is linearizable from `initial`.
pub(crate) fn is_linearizable(history: &[Event], initial: &BTreeMap<u64, u32>) -> bool {
    assert!(
        history.len() <= 64,
        "the checker tracks done operations in a u64"
    );
    fn search(
        history: &[Event],
        done: u64,
        state: &BTreeMap<u64, u32>,
        seen: &mut HashSet<(u64, Vec<(u64, u32)>)>,
    ) -> bool {
        if done.count_ones() as usize == history.len() {
            return true;
        }
        if !seen.insert((
            done,
            state.iter().map(|(key, value)| (*key, *value)).collect(),
        )) {
            return false;
        }
        // An operation may go next only if no other pending one returned before it started.
        let earliest_return = (0..history.len())
            .filter(|index| done & (1 << index) == 0)
            .map(|index| history[index].returned)
            .min()
            .expect("some operation is pending");
        for index in 0..history.len() {
            let event = &history[index];
            if done & (1 << index) != 0 || event.invoked > earliest_return {
                continue;
            }
            let (next, outcome) = apply(state, event.operation);
            if outcome == event.outcome && search(history, done | (1 << index), &next, seen) {
                return true;
            }
        }
        false
    }
    search(history, 0, initial, &mut HashSet::new())
}

/// The logical clock that orders invocations and returns.
pub(crate) struct Clock(AtomicU64);

impl Clock {
    pub(crate) fn new() -> Self {
        Clock(AtomicU64::new(0))
    }
    fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

/// Runs `operation` on `trie`, recording its invoke and return ticks.
pub(crate) fn perform(
    trie: &CTrie<u64, u32, ShapedHash>,
    clock: &Clock,
    operation: Operation,
) -> Event {
    let invoked = clock.tick();
    let outcome = match operation {
        Operation::Get(key) => Outcome::Value(trie.get(&key)),
        Operation::Insert(key, value) => Outcome::Value(trie.insert(key, value)),
        Operation::Remove(key) => Outcome::Value(trie.remove(&key)),
        Operation::PutIfAbsent(key, value) => Outcome::Value(trie.put_if_absent(key, value)),
        Operation::Replace(key, value) => Outcome::Value(trie.replace(key, value)),
        Operation::ReadOnlySnapshot => {
            let snapshot = trie.read_only_snapshot();
            let mut entries: Vec<(u64, u32)> = snapshot.iter().collect();
            entries.sort_unstable();
            assert_eq!(entries.len(), snapshot.len());
            Outcome::Entries(entries)
        }
        Operation::WritableSnapshot => {
            let snapshot = trie.snapshot();
            let mut entries: Vec<(u64, u32)> = snapshot.iter().collect();
            entries.sort_unstable();
            Outcome::Entries(entries)
        }
        Operation::Len => Outcome::Count(trie.len()),
    };
    let returned = clock.tick();
    Event {
        operation,
        outcome,
        invoked,
        returned,
    }
}

/// A deterministic pseudo-random sequence of `count` operations on keys `0..keys` (SplitMix64).
pub(crate) fn random_operations(seed: u64, count: usize, keys: u64) -> Vec<Operation> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..count)
        .map(|_| {
            let roll = next();
            let key = (roll >> 8) % keys;
            let value = (roll >> 32) as u32 % 1000;
            match roll % 16 {
                0..=3 => Operation::Insert(key, value),
                4..=6 => Operation::Remove(key),
                7..=8 => Operation::Get(key),
                9 => Operation::PutIfAbsent(key, value),
                10 => Operation::Replace(key, value),
                11..=12 => Operation::ReadOnlySnapshot,
                13 => Operation::WritableSnapshot,
                14 => Operation::Len,
                _ => Operation::Insert(key, value),
            }
        })
        .collect()
}

/// Hash shapes that put the few test keys in interesting places: all in one CNode, all down a
/// deep chain (contraction and cleaning at every level), and all in one LNode.
pub(crate) const SHAPES: [ShapedHash; 3] = [
    ShapedHash {
        multiplier: 1,
        mask: u64::MAX,
    },
    ShapedHash {
        multiplier: 1 << 58,
        mask: u64::MAX,
    },
    ShapedHash {
        multiplier: 1,
        mask: 0,
    },
];

#[cfg(not(any(loom, shuttle)))]
mod tests {
    use super::*;
    use std::sync::Barrier;

    fn stress_iterations() -> usize {
        std::env::var("PREFIXKV_CTRIE_LINCHECK_ITERATIONS")
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(300)
    }

    #[test]
    fn checker_rejects_a_stale_snapshot() {
        let history = vec![
            Event {
                operation: Operation::Insert(1, 5),
                outcome: Outcome::Value(None),
                invoked: 0,
                returned: 1,
            },
            Event {
                operation: Operation::ReadOnlySnapshot,
                outcome: Outcome::Entries(vec![]),
                invoked: 2,
                returned: 3,
            },
        ];
        assert!(!is_linearizable(&history, &BTreeMap::new()));
        let overlapping = vec![
            Event {
                operation: Operation::Insert(1, 5),
                outcome: Outcome::Value(None),
                invoked: 0,
                returned: 3,
            },
            Event {
                operation: Operation::ReadOnlySnapshot,
                outcome: Outcome::Entries(vec![]),
                invoked: 1,
                returned: 2,
            },
        ];
        assert!(is_linearizable(&overlapping, &BTreeMap::new()));
    }

    /// Real threads, short histories on three keys, checked exhaustively.
    #[test]
    fn concurrent_histories_are_linearizable() {
        for iteration in 0..stress_iterations() {
            let shape = SHAPES[iteration % SHAPES.len()];
            let trie = CTrie::with_hasher(shape);
            let mut initial = BTreeMap::new();
            for key in 0..2u64 {
                trie.insert(key, 100 + key as u32);
                initial.insert(key, 100 + key as u32);
            }
            let clock = Clock::new();
            let threads = 3;
            let barrier = Barrier::new(threads);
            let history: Vec<Event> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..threads)
                    .map(|thread| {
                        let operations =
                            random_operations((iteration * threads + thread) as u64, 6, 3);
                        let (trie, clock, barrier) = (&trie, &clock, &barrier);
                        scope.spawn(move || {
                            barrier.wait();
                            operations
                                .into_iter()
                                .map(|operation| perform(trie, clock, operation))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|handle| handle.join().expect("worker panicked"))
                    .collect()
            });
            assert!(
                is_linearizable(&history, &initial),
                "iteration {iteration}: not linearizable: {history:#?}"
            );
        }
    }
}
