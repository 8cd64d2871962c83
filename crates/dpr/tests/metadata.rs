//! The same metadata-store suite against SQLite and against a private PostgreSQL server.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{postgres_opener, sqlite_opener, Opener, PostgresServer};
use prefixkv_dpr::finder::{ApproximateFinder, DprFinder, ExactFinder, HybridFinder};
use prefixkv_dpr::{Cut, WorkerVersion};

fn cut(pairs: &[(u64, u64)]) -> Cut {
    pairs.iter().copied().collect()
}

fn fresh_state(open: &Opener) {
    let store = open();
    let state = store.cluster_state().unwrap();
    assert_eq!(state.world_line, 0);
    assert!(state.cut.is_empty());
    assert!(!state.recovering);
    assert_eq!(store.max_version().unwrap(), 0);
}

fn membership_and_leases(open: &Opener) {
    let store = open();
    store.register_worker(1, 100).unwrap();
    store.register_worker(2, 100).unwrap();
    store.register_worker(1, 150).unwrap();
    store.heartbeat(2, 300).unwrap();
    store.heartbeat(2, 200).unwrap(); // older heartbeat never moves the lease back
    let workers = store.workers().unwrap();
    assert_eq!(workers.len(), 2);
    assert_eq!(workers[0].last_heartbeat_ms, 150);
    assert_eq!(workers[1].last_heartbeat_ms, 300);
    assert_eq!(store.cluster_state().unwrap().cut, cut(&[(1, 0), (2, 0)]));
    store.remove_worker(2).unwrap();
    assert_eq!(store.workers().unwrap().len(), 1);
    assert_eq!(store.cluster_state().unwrap().cut, cut(&[(1, 0)]));
}

fn versions_and_cut(open: &Opener) {
    let store = open();
    store.register_worker(1, 0).unwrap();
    store.register_worker(2, 0).unwrap();
    let deps = [WorkerVersion::new(2, 1)];
    assert!(store
        .add_persisted_version(0, WorkerVersion::new(1, 1), Some(&deps))
        .unwrap());
    assert!(store
        .add_persisted_version(0, WorkerVersion::new(1, 2), None)
        .unwrap());
    assert!(store
        .add_persisted_version(0, WorkerVersion::new(2, 1), Some(&[]))
        .unwrap());
    let persisted = store.persisted_versions().unwrap();
    assert_eq!(persisted.len(), 3);
    assert_eq!(persisted[0].dependencies.as_deref(), Some(&deps[..]));
    assert_eq!(persisted[1].dependencies, None);
    assert_eq!(persisted[2].dependencies.as_deref(), Some(&[][..]));
    assert_eq!(store.max_version().unwrap(), 2);
    // A stale world-line is refused.
    assert!(!store
        .add_persisted_version(7, WorkerVersion::new(1, 3), None)
        .unwrap());
    assert!(!store.publish_cut(7, &cut(&[(1, 1)])).unwrap());

    assert!(store.publish_cut(0, &cut(&[(1, 2), (2, 1)])).unwrap());
    // Publishing lower values never moves the cut back.
    assert!(store.publish_cut(0, &cut(&[(1, 1), (2, 0)])).unwrap());
    let state = store.cluster_state().unwrap();
    assert_eq!(state.cut, cut(&[(1, 2), (2, 1)]));
    // Versions below the cut are pruned; the cut's own versions stay.
    let persisted: Vec<_> = store
        .persisted_versions()
        .unwrap()
        .iter()
        .map(|p| p.version)
        .collect();
    assert_eq!(
        persisted,
        vec![WorkerVersion::new(1, 2), WorkerVersion::new(2, 1)]
    );
}

fn world_line_and_recovery(open: &Opener) {
    let store = open();
    store.register_worker(1, 0).unwrap();
    store.register_worker(2, 0).unwrap();
    for version in 1..=3 {
        store
            .add_persisted_version(0, WorkerVersion::new(1, version), Some(&[]))
            .unwrap();
        store
            .add_persisted_version(0, WorkerVersion::new(2, version), Some(&[]))
            .unwrap();
    }
    store.publish_cut(0, &cut(&[(1, 2), (2, 1)])).unwrap();
    let state = store.advance_world_line(0).unwrap();
    assert_eq!(state.world_line, 1);
    assert!(state.recovering);
    assert_eq!(state.cut, cut(&[(1, 2), (2, 1)]));
    // A second manager racing on the same failure does not advance again.
    assert_eq!(store.advance_world_line(0).unwrap().world_line, 1);
    // Lost versions (above the cut) are gone.
    let persisted: Vec<_> = store
        .persisted_versions()
        .unwrap()
        .iter()
        .map(|p| p.version)
        .collect();
    assert_eq!(
        persisted,
        vec![WorkerVersion::new(1, 2), WorkerVersion::new(2, 1)]
    );
    // Progress is halted while recovering.
    assert!(!store.publish_cut(1, &cut(&[(1, 5)])).unwrap());
    assert!(!store
        .add_persisted_version(0, WorkerVersion::new(1, 9), None)
        .unwrap());
    store.report_recovered(1, 1).unwrap();
    assert!(!store.finish_recovery(1).unwrap());
    store.report_recovered(2, 1).unwrap();
    assert!(store.finish_recovery(1).unwrap());
    assert!(!store.cluster_state().unwrap().recovering);
    assert!(store.publish_cut(1, &cut(&[(1, 5)])).unwrap());
    // A session still on world-line 0 judges its operations against the cut world-line 1 started
    // from, not against the newer cut.
    let target = store.rollback_target(0).unwrap();
    assert_eq!(target.world_line, 1);
    assert_eq!(target.cut, cut(&[(1, 2), (2, 1)]));
    assert_eq!(
        store.rollback_target(1).unwrap().cut,
        cut(&[(1, 5), (2, 1)])
    );
    let skipped = store.advance_world_line(1).unwrap();
    assert_eq!(skipped.world_line, 2);
    assert_eq!(
        store.rollback_target(0).unwrap().cut,
        cut(&[(1, 2), (2, 1)])
    );
    assert_eq!(
        store.rollback_target(1).unwrap().cut,
        cut(&[(1, 5), (2, 1)])
    );
}

/// Readers on other connections never see half a cut: every published cut has all workers at the
/// same version, so a reader seeing two different versions saw a torn update.
fn no_torn_cuts(open: &Opener) {
    let writer = open();
    let workers = 6u64;
    for worker in 0..workers {
        writer.register_worker(worker, 0).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let reader = open();
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(Ordering::SeqCst) || reads < 5 {
                    let state = reader.cluster_state().unwrap();
                    let versions: Vec<u64> = state.cut.values().copied().collect();
                    assert_eq!(versions.len(), workers as usize);
                    assert!(
                        versions.windows(2).all(|w| w[0] == w[1]),
                        "torn cut {versions:?}"
                    );
                    reads += 1;
                }
            })
        })
        .collect();
    let rounds: u64 = std::env::var("DPR_TORN_CUT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    for round in 1..=rounds {
        let all: Cut = (0..workers).map(|w| (w, round)).collect();
        assert!(writer.publish_cut(0, &all).unwrap());
    }
    done.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.join().unwrap();
    }
}

/// Every finder over this backend: a two-worker chain commits.
fn finders_over_backend(open: &Opener) {
    let store = open();
    store.register_worker(1, 0).unwrap();
    store.register_worker(2, 0).unwrap();
    let finders: Vec<Box<dyn DprFinder>> = vec![
        Box::new(ExactFinder::new(Arc::clone(&store)).unwrap()),
        Box::new(ApproximateFinder::new(Arc::clone(&store))),
        Box::new(HybridFinder::new(Arc::clone(&store)).unwrap()),
    ];
    for (index, finder) in finders.iter().enumerate() {
        let base = 10 * index as u64;
        finder
            .report_persisted(0, WorkerVersion::new(1, base + 1), &[])
            .unwrap();
        finder
            .report_persisted(
                0,
                WorkerVersion::new(2, base + 2),
                &[WorkerVersion::new(1, base + 1)],
            )
            .unwrap();
        finder
            .report_persisted(0, WorkerVersion::new(1, base + 2), &[])
            .unwrap();
        let state = finder.refresh().unwrap();
        assert_eq!(
            state.cut,
            cut(&[(1, base + 2), (2, base + 2)]),
            "finder #{index}"
        );
    }
}

/// Several connections creating the schema at once on a fresh database all succeed.
fn concurrent_first_open(open: Opener) {
    let open = Arc::new(open);
    let handles: Vec<_> = (0..4)
        .map(|worker| {
            let open = Arc::clone(&open);
            std::thread::spawn(move || open().register_worker(worker, 0).unwrap())
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(open().workers().unwrap().len(), 4);
}

fn ownership_table(open: &Opener) {
    use prefixkv_dpr::metadata::PartitionRange;
    let store = open();
    assert!(store.ownership().unwrap().is_empty(), "none published yet");
    let range = |first, last, worker: u64| PartitionRange {
        first,
        last,
        worker,
        address: format!("127.0.0.1:{}", 7000 + worker),
    };
    let ranges = vec![
        range(0, 5460, 0),
        range(5461, 10921, 1),
        range(10922, 16383, 2),
    ];
    store.set_ownership(&ranges).unwrap();
    assert_eq!(
        open().ownership().unwrap(),
        ranges,
        "another connection reads it"
    );
    // Replaced whole, in one transaction.
    let ranges = vec![range(0, 16383, 4)];
    store.set_ownership(&ranges).unwrap();
    assert_eq!(open().ownership().unwrap(), ranges);
    // Invalid tables are refused and leave the old one in place.
    let overlapping = vec![range(0, 10, 0), range(10, 20, 1)];
    let error = store.set_ownership(&overlapping).unwrap_err().to_string();
    assert!(error.contains("sorted and disjoint"), "{error}");
    assert_eq!(open().ownership().unwrap(), ranges);
    // Conditional on the world-line: refused (changing nothing) once the cluster moved on or
    // while it recovers, as a slot migration needs.
    store.register_worker(4, 0).unwrap();
    let world_line = store.cluster_state().unwrap().world_line;
    let moved = vec![range(0, 99, 3), range(100, 16383, 4)];
    assert!(store.set_ownership_in(world_line, &moved).unwrap());
    assert_eq!(open().ownership().unwrap(), moved);
    store.advance_world_line(world_line).unwrap();
    assert!(
        !store.set_ownership_in(world_line, &ranges).unwrap(),
        "an old world-line"
    );
    assert!(
        !store.set_ownership_in(world_line + 1, &ranges).unwrap(),
        "the cluster is recovering"
    );
    assert_eq!(open().ownership().unwrap(), moved);
    let error = store
        .set_ownership_in(world_line + 1, &overlapping)
        .unwrap_err()
        .to_string();
    assert!(error.contains("sorted and disjoint"), "{error}");
}

fn run_suite(open: &Opener, fresh: &dyn Fn() -> Opener) {
    ownership_table(&fresh());
    concurrent_first_open(fresh());
    fresh_state(open);
    membership_and_leases(&fresh());
    versions_and_cut(&fresh());
    world_line_and_recovery(&fresh());
    no_torn_cuts(&fresh());
    finders_over_backend(&fresh());
}

#[test]
fn sqlite_metadata_suite() {
    let directories = std::sync::Mutex::new(Vec::new());
    let fresh = || {
        let (directory, opener) = sqlite_opener();
        directories.lock().unwrap().push(directory);
        opener
    };
    let first = fresh();
    run_suite(&first, &fresh);
}

#[test]
fn sqlite_survives_reopen() {
    let (_directory, open) = sqlite_opener();
    {
        let store = open();
        store.register_worker(4, 0).unwrap();
        store.publish_cut(0, &cut(&[(4, 3)])).unwrap();
    }
    assert_eq!(open().cluster_state().unwrap().cut, cut(&[(4, 3)]));
}

#[test]
fn postgres_metadata_suite() {
    let server = PostgresServer::start();
    let fresh = || postgres_opener(&server);
    let first = fresh();
    run_suite(&first, &fresh);
}
