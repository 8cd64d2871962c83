//! No leak, no double free: the count of live nodes (kept in builds with debug assertions, as
//! the test profile is) must return to zero once tries, snapshots sharing their nodes,
//! concurrent writers and half-finished iterators are all dropped and the epoch garbage is
//! collected. Valgrind (see `docs/ctrie.md`) checks the same at the byte level.
//!
//! This file holds a single test: the node count is process-wide.

use prefixkv_ctrie::{debug_live_nodes, CTrie};

/// Collects deferred garbage (each `flush` tries to advance the global epoch and runs what is
/// due) until no node is alive, within a bounded number of rounds.
fn settles_to_zero() -> bool {
    for _ in 0..100_000 {
        if debug_live_nodes() == Some(0) {
            return true;
        }
        crossbeam_epoch::pin().flush();
    }
    false
}

fn workload() {
    let trie: CTrie<u64, String> = CTrie::new();
    for key in 0..20_000u64 {
        trie.insert(key, key.to_string());
    }
    let frozen = trie.read_only_snapshot();
    let copy = trie.snapshot();
    // Writers on the live trie and on the writable snapshot while both share nodes with the
    // frozen one, plus snapshots taken meanwhile.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for key in 0..20_000u64 {
                if key % 2 == 0 {
                    trie.remove(&key);
                } else {
                    trie.insert(key, "odd".to_string());
                }
            }
        });
        scope.spawn(|| {
            for key in 10_000..30_000u64 {
                copy.insert(key, "copy".to_string());
            }
            for key in 0..5_000u64 {
                copy.remove(&key);
            }
        });
        scope.spawn(|| {
            for _ in 0..50 {
                let snapshot = trie.read_only_snapshot();
                assert!(snapshot.len() >= 10_000);
            }
        });
    });
    let nested = copy.snapshot();
    let mut half_way = nested.iter();
    for _ in 0..1000 {
        half_way.next();
    }
    assert_eq!(frozen.len(), 20_000);
    assert_eq!(trie.len(), 10_000);
    assert_eq!(copy.len(), 25_000);
    trie.clear();
    drop(trie);
    drop(frozen);
    assert_eq!(nested.len(), 25_000);
    drop(copy);
    drop(half_way);
    drop(nested);
}

#[test]
fn every_node_is_freed() {
    assert!(
        debug_live_nodes().is_some(),
        "run with debug assertions (the test profile has them)"
    );
    workload();
    assert!(
        settles_to_zero(),
        "{:?} nodes still alive after dropping every trie",
        debug_live_nodes()
    );
}
