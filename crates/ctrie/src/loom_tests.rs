//! Loom model checks of the GCAS / RDCSS protocol on tiny tries: two threads, two or three
//! operations, every interleaving (up to a preemption bound) of their atomic accesses.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p prefixkv-ctrie --release --lib loom`
//! (`LOOM_MAX_PREEMPTIONS` overrides the bound of 6).

use crate::sync::reclaim_all;
use crate::unit_tests::ShapedHash;
use crate::CTrie;
use loom::thread;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Keys 0, 1, 2 share the root CNode.
const FLAT: ShapedHash = ShapedHash {
    multiplier: 1,
    mask: u64::MAX,
};
/// Keys 0, 1, 2 share root slot 0 and part one level down: removes contract and clean.
const TWO_LEVELS: ShapedHash = ShapedHash {
    multiplier: 1 << 6,
    mask: u64::MAX,
};

/// Preemptions per execution unless `LOOM_MAX_PREEMPTIONS` says otherwise; 6 explores tens of
/// thousands of executions per test in seconds.
const PREEMPTION_BOUND: usize = 6;

fn model(test: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTION_BOUND);
    }
    let executions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = executions.clone();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        test();
        // Every model thread has joined and every trie is dropped: free what was retired.
        reclaim_all();
    });
    eprintln!(
        "loom explored {} executions",
        executions.load(std::sync::atomic::Ordering::Relaxed)
    );
}

fn entries(pairs: &[(u64, u32)]) -> BTreeMap<u64, u32> {
    pairs.iter().copied().collect()
}

#[test]
fn loom_insert_races_read_only_snapshot() {
    model(|| {
        let trie = Arc::new(CTrie::with_hasher(FLAT));
        trie.insert(1, 10);
        let writer = {
            let trie = trie.clone();
            thread::spawn(move || assert_eq!(trie.insert(2, 20), None))
        };
        let frozen = trie.read_only_snapshot();
        let seen: BTreeMap<u64, u32> = frozen.iter().collect();
        writer.join().unwrap();
        assert!(
            seen == entries(&[(1, 10)]) || seen == entries(&[(1, 10), (2, 20)]),
            "{seen:?}"
        );
        // Frozen means frozen: the same after the writer finished.
        assert_eq!(frozen.iter().collect::<BTreeMap<_, _>>(), seen);
        assert_eq!(
            trie.iter().collect::<BTreeMap<_, _>>(),
            entries(&[(1, 10), (2, 20)])
        );
    });
}

#[test]
fn loom_two_inserts_into_one_cnode() {
    model(|| {
        let trie = Arc::new(CTrie::with_hasher(FLAT));
        let writer = {
            let trie = trie.clone();
            thread::spawn(move || assert_eq!(trie.insert(1, 10), None))
        };
        assert_eq!(trie.insert(2, 20), None);
        writer.join().unwrap();
        assert_eq!(trie.get(&1), Some(10));
        assert_eq!(trie.get(&2), Some(20));
    });
}

#[test]
fn loom_remove_with_contraction_races_insert() {
    model(|| {
        let trie = Arc::new(CTrie::with_hasher(TWO_LEVELS));
        trie.insert(0, 0);
        trie.insert(1, 10);
        let remover = {
            let trie = trie.clone();
            thread::spawn(move || assert_eq!(trie.remove(&1), Some(10)))
        };
        assert_eq!(trie.insert(2, 20), None);
        remover.join().unwrap();
        assert_eq!(
            trie.iter().collect::<BTreeMap<_, _>>(),
            entries(&[(0, 0), (2, 20)])
        );
    });
}

#[test]
fn loom_remove_with_contraction_races_snapshot() {
    model(|| {
        let trie = Arc::new(CTrie::with_hasher(TWO_LEVELS));
        trie.insert(0, 0);
        trie.insert(1, 10);
        let remover = {
            let trie = trie.clone();
            thread::spawn(move || assert_eq!(trie.remove(&1), Some(10)))
        };
        let frozen = trie.read_only_snapshot();
        let seen: BTreeMap<u64, u32> = frozen.iter().collect();
        remover.join().unwrap();
        assert!(
            seen == entries(&[(0, 0), (1, 10)]) || seen == entries(&[(0, 0)]),
            "{seen:?}"
        );
        assert_eq!(frozen.len(), seen.len());
        assert_eq!(trie.iter().collect::<BTreeMap<_, _>>(), entries(&[(0, 0)]));
    });
}

#[test]
fn loom_writable_snapshot_diverges_from_racing_insert() {
    model(|| {
        let trie = Arc::new(CTrie::with_hasher(FLAT));
        trie.insert(1, 10);
        let writer = {
            let trie = trie.clone();
            thread::spawn(move || assert_eq!(trie.insert(2, 20), None))
        };
        let copy = trie.snapshot();
        copy.insert(3, 30);
        writer.join().unwrap();
        assert_eq!(
            trie.get(&3),
            None,
            "a write to the snapshot leaked into the trie"
        );
        assert_eq!(trie.get(&2), Some(20));
        let seen: BTreeMap<u64, u32> = copy.iter().collect();
        assert!(
            seen == entries(&[(1, 10), (3, 30)]) || seen == entries(&[(1, 10), (2, 20), (3, 30)]),
            "{seen:?}"
        );
    });
}
