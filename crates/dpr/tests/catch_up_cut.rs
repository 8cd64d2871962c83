//! Regression (found by `prefixkv-dprsim`): `Vmax` catch-up must not relabel operations that
//! already ran into a larger version.
//!
//! The approximate cut (`Vmin`) is closed only if no version depends on a larger version. A
//! commit with catch-up used to seal the current version under the label `Vmax`: operations that
//! ran in version 1 (and that another worker's version 1 already depends on) moved into token 5.
//! With `Vmin` = 1 the cut then held the dependent version but not the token holding what it
//! depends on, and a rollback to it kept a batch whose predecessor was lost (a broken prefix).
//! Catch-up now seals under the version's own number and moves on to `Vmax`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::sqlite_opener;
use prefixkv_dpr::finder::{ApproximateFinder, DprFinder};
use prefixkv_dpr::session::Completion;
use prefixkv_dpr::state_object::{MapOperation, VersionedMap};
use prefixkv_dpr::worker::BatchOutcome;
use prefixkv_dpr::{DprSession, DprWorker};

const WAIT: Duration = Duration::from_secs(30);

fn put(key: &str) -> Vec<MapOperation> {
    vec![MapOperation::Put(key.as_bytes().to_vec(), vec![1])]
}

fn scenario(finder: Arc<dyn DprFinder>) {
    let data = tempfile::tempdir().unwrap();
    let mut workers: Vec<DprWorker<VersionedMap>> = (0..4)
        .map(|id| {
            let map = VersionedMap::open(data.path().join(format!("w{id}"))).unwrap();
            DprWorker::start(id, map, Arc::clone(&finder), 64, 0).unwrap()
        })
        .collect();
    // Worker 3 runs ahead: it persists version 5, so Vmax = 5.
    workers[3].commit_to(5).unwrap();
    let sealed = workers[3].commit().unwrap();
    assert_eq!(sealed, 5);
    assert!(workers[3].wait_persisted(5, WAIT));
    // A session writes to worker 1, then (depending on it) to worker 0; both run in version 1.
    let mut session = DprSession::new(0, 0, 4);
    for (worker, key) in [(1usize, "first"), (0, "second")] {
        let (header, ticket) = session.issue_batch(worker as u64, 1).unwrap();
        let response = match workers[worker].process_batch(&header, &put(key)).unwrap() {
            BatchOutcome::Executed { response, .. } => response,
            BatchOutcome::Rejected { .. } => panic!("rejected"),
        };
        assert_eq!(response.version, 1);
        assert!(matches!(
            session.complete_batch(ticket, &response).unwrap(),
            Completion::Executed { version: 1 }
        ));
    }
    for worker in [0, 2] {
        let sealed = workers[worker].commit().unwrap();
        assert!(workers[worker].wait_persisted(sealed, WAIT));
    }
    // Worker 1 lags and catches up.
    let sealed = workers[1].commit_with_catch_up().unwrap();
    assert!(workers[1].wait_persisted(sealed, WAIT));
    let state = finder.refresh().unwrap();
    // Worker 0's version 1 depends on what worker 1 ran in version 1: the cut may hold the
    // former only together with the latter's token.
    if state.cut_version(0) >= 1 {
        let holding = workers[1].persisted_version();
        assert!(
            state.cut_version(1) >= 1 && state.cut_version(1) <= holding,
            "cut {:?} holds worker 0's version 1 without worker 1's operations",
            state.cut
        );
    }
    // End to end: a failure rolls back to this cut; the surviving prefix must not keep the
    // second batch without the first.
    let store = finder.store();
    let advanced = store.advance_world_line(state.world_line).unwrap();
    for worker in &mut workers {
        worker.restore_to(&advanced).unwrap();
    }
    let target = finder.rollback_target(0).unwrap();
    let prefix = session.handle_rollback(&target).unwrap();
    let first_survived = workers[1]
        .state_object()
        .entries()
        .contains_key(&b"first"[..]);
    let second_survived = workers[0]
        .state_object()
        .entries()
        .contains_key(&b"second"[..]);
    assert!(
        first_survived || !second_survived,
        "the second batch survived without the first it depends on: {prefix:?}"
    );
}

#[test]
fn catch_up_keeps_the_approximate_cut_closed() {
    let (_metadata, open) = sqlite_opener();
    scenario(Arc::new(ApproximateFinder::new(open())));
}
