//! Worker + session protocol: fast-forward, dependency sets, world-line checks, relaxed commit
//! points, and the Figure 3 schedule making progress once sessions carry `Vs`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::sqlite_opener;
use prefixkv_dpr::finder::{DprFinder, ExactFinder};
use prefixkv_dpr::header::{DprHeader, HeaderKind};
use prefixkv_dpr::session::{Completion, SequenceRange};
use prefixkv_dpr::state_object::{MapOperation, VersionedMap};
use prefixkv_dpr::worker::{BatchOutcome, FastForward};
use prefixkv_dpr::{DprSession, DprWorker, WorkerVersion};

const WAIT: Duration = Duration::from_secs(30);

struct Rig {
    _directories: (tempfile::TempDir, tempfile::TempDir),
    finder: Arc<dyn DprFinder>,
    workers: Vec<DprWorker<VersionedMap>>,
}

fn rig(count: u64) -> Rig {
    let (metadata_directory, open) = sqlite_opener();
    let finder: Arc<dyn DprFinder> = Arc::new(ExactFinder::new(open()).unwrap());
    let data = tempfile::tempdir().unwrap();
    let workers = (0..count)
        .map(|id| {
            let map = VersionedMap::open(data.path().join(format!("worker-{id}"))).unwrap();
            DprWorker::start(id, map, Arc::clone(&finder), 64, 0).unwrap()
        })
        .collect();
    Rig {
        _directories: (metadata_directory, data),
        finder,
        workers,
    }
}

fn put(key: &str, value: u64) -> MapOperation {
    MapOperation::Put(key.as_bytes().to_vec(), value.to_le_bytes().to_vec())
}

/// Sends one batch through `session` to `worker` and completes it.
fn run_batch(
    session: &mut DprSession,
    worker: &mut DprWorker<VersionedMap>,
    operations: &[MapOperation],
) -> u64 {
    let (header, ticket) = session
        .issue_batch(worker.id(), operations.len() as u64)
        .unwrap();
    let bytes = header.encode().unwrap();
    let (decoded, _) = DprHeader::decode(&bytes, 64).unwrap();
    match worker.process_batch(&decoded, operations).unwrap() {
        BatchOutcome::Executed { response, .. } => {
            let (response, _) = DprHeader::decode(&response.encode().unwrap(), 64).unwrap();
            match session.complete_batch(ticket, &response).unwrap() {
                Completion::Executed { version } => version,
                other => panic!("unexpected completion {other:?}"),
            }
        }
        BatchOutcome::Rejected { response } => panic!("rejected: {response:?}"),
    }
}

fn commit_and_wait(worker: &mut DprWorker<VersionedMap>) {
    let sealed = worker.commit().unwrap();
    assert!(
        worker.wait_persisted(sealed, WAIT),
        "version {sealed} never persisted"
    );
}

#[test]
fn fast_forward_and_dependency_sets() {
    let mut rig = rig(2);
    let mut session = DprSession::new(100, 0, 4);
    let (a, b) = rig.workers.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let first = run_batch(&mut session, a, &[put("a", 1)]);
    a.commit().unwrap();
    let second = run_batch(&mut session, a, &[put("a", 2)]);
    assert!(second > first);
    assert_eq!(session.seen_version(), second);
    assert!(b.version() < second);
    // B is behind: the batch's Vs forces B to seal and jump (Lamport rule).
    let on_b = run_batch(&mut session, b, &[put("b", 1)]);
    assert_eq!(on_b, second);
    assert_eq!(b.version(), second);
    assert_eq!(
        b.current_dependencies(),
        vec![WorkerVersion::new(0, second)]
    );
}

#[test]
fn fast_forward_by_relabel_raises_without_sealing() {
    let mut rig = rig(2);
    let mut session = DprSession::new(100, 0, 4);
    let (a, b) = rig.workers.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    b.set_fast_forward(FastForward::Relabel);
    run_batch(&mut session, b, &[put("b", 0)]);
    let before = b.version();
    a.commit().unwrap();
    let on_a = run_batch(&mut session, a, &[put("a", 1)]);
    assert!(on_a > before, "A is ahead of B");
    // B is behind: the batch's Vs raises B's current version to it (the batch runs in a version
    // no smaller than anything it depends on), and nothing is sealed.
    let on_b = run_batch(&mut session, b, &[put("b", 1)]);
    assert_eq!(on_b, on_a);
    assert_eq!(b.version(), on_a);
    assert_eq!(b.persisted_version(), 0, "a relabel seals nothing");
    // The version B ran both batches in carries the dependency, and a commit seals it under the
    // raised number, covering the batch from before the raise.
    assert_eq!(b.current_dependencies(), vec![WorkerVersion::new(0, on_a)]);
    let sealed = b.commit().unwrap();
    assert_eq!(sealed, on_a);
    assert!(b.wait_persisted(sealed, WAIT));
}

#[test]
fn world_line_checks() {
    let mut rig = rig(1);
    let worker = &mut rig.workers[0];
    let store = Arc::clone(rig.finder.store());
    // The cluster moves to world-line 1 without telling the worker (it missed the rollback).
    store.advance_world_line(0).unwrap();
    let request = DprHeader {
        kind: HeaderKind::Request,
        world_line: 1,
        version: 0,
        sender: 7,
        batch_sequence: 0,
        dependencies: vec![],
    };
    // A batch from the newer world-line makes the worker restore first, then run.
    assert!(matches!(
        worker.process_batch(&request, &[put("x", 1)]).unwrap(),
        BatchOutcome::Executed { response, .. } if response.world_line == 1
    ));
    assert_eq!(worker.world_line(), 1);
    // A batch from the old world-line is rejected with the current world-line.
    let stale = DprHeader {
        world_line: 0,
        ..request
    };
    match worker.process_batch(&stale, &[put("x", 2)]).unwrap() {
        BatchOutcome::Rejected { response } => {
            assert_eq!(response.kind, HeaderKind::Rollback);
            assert_eq!(response.world_line, 1);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    let mut session = DprSession::new(1, 0, 1);
    let (_, ticket) = session.issue_batch(0, 1).unwrap();
    let rollback = DprHeader {
        kind: HeaderKind::Rollback,
        world_line: 1,
        version: 0,
        sender: 0,
        batch_sequence: 0,
        dependencies: vec![],
    };
    assert_eq!(
        session.complete_batch(ticket, &rollback).unwrap(),
        Completion::RollbackRequired { world_line: 1 }
    );
}

#[test]
fn relaxed_commit_point_excludes_pending() {
    let mut rig = rig(2);
    let mut session = DprSession::new(5, 0, 2);
    // Batch X to worker 0 stays pending while batch Y to worker 1 completes and commits.
    let (x_header, x_ticket) = session.issue_batch(0, 3).unwrap();
    let y_version = run_batch(&mut session, &mut rig.workers[1], &[put("y", 1)]);
    assert!(session.issue_batch(0, 1).is_ok());
    assert!(matches!(
        session.issue_batch(0, 1),
        Err(prefixkv_dpr::session::SessionError::WindowFull { .. })
    ));
    commit_and_wait(&mut rig.workers[1]);
    let state = rig.finder.refresh().unwrap();
    assert!(state.cut_version(1) >= y_version);
    let point = session.commit_point(&state).unwrap();
    assert_eq!(point.until_sequence, 4);
    assert_eq!(point.excluded, vec![SequenceRange { start: 0, end: 3 }]);
    // X now runs and commits: it is no longer excluded.
    let x_response = match rig.workers[0]
        .process_batch(&x_header, &[put("x", 1), put("x", 2), put("x", 3)])
        .unwrap()
    {
        BatchOutcome::Executed { response, .. } => response,
        other => panic!("{other:?}"),
    };
    session.complete_batch(x_ticket, &x_response).unwrap();
    commit_and_wait(&mut rig.workers[0]);
    let state = rig.finder.refresh().unwrap();
    let point = session.commit_point(&state).unwrap();
    assert_eq!(point.until_sequence, 4);
    assert!(point.excluded.is_empty());
}

/// The Figure 3 schedule (A commits after operations 1, 7, 13, ...; B after 4, 10, ...), but with
/// sessions carrying `Vs`: versions stay in step and the committed prefix keeps growing.
#[test]
fn figure_3_progress_with_coordination() {
    let mut rig = rig(2);
    let mut session = DprSession::new(9, 0, 1);
    let operations = 120u64;
    let mut committed_prefixes = Vec::new();
    for operation in 1..=operations {
        let worker = if operation % 2 == 1 { 0 } else { 1 };
        run_batch(
            &mut session,
            &mut rig.workers[worker],
            &[put("k", operation)],
        );
        let commits = (worker == 0 && operation % 6 == 1) || (worker == 1 && operation % 6 == 4);
        if commits {
            commit_and_wait(&mut rig.workers[worker]);
            let state = rig.finder.refresh().unwrap();
            committed_prefixes.push(session.commit_point(&state).unwrap().until_sequence);
        }
    }
    assert!(committed_prefixes.windows(2).all(|w| w[0] <= w[1]));
    let last = *committed_prefixes.last().unwrap();
    assert!(
        last >= operations - 12,
        "commit point stuck at {last} of {operations}: {committed_prefixes:?}"
    );
}

/// A state object whose persistence callbacks fire only when told, in reverse order.
#[derive(Default)]
struct HeldCallbacks {
    held: Vec<(u64, prefixkv_dpr::state_object::PersistCallback)>,
    persisted: Vec<u64>,
}

impl prefixkv_dpr::StateObject for HeldCallbacks {
    type Operation = ();
    type Output = ();
    fn execute(
        &mut self,
        _: u64,
        operations: &[()],
    ) -> Result<Vec<()>, prefixkv_dpr::state_object::StateObjectError> {
        Ok(vec![(); operations.len()])
    }
    fn commit(
        &mut self,
        version: u64,
        _: Vec<u8>,
        on_persist: prefixkv_dpr::state_object::PersistCallback,
    ) -> Result<(), prefixkv_dpr::state_object::StateObjectError> {
        self.held.push((version, on_persist));
        Ok(())
    }
    fn restore(&mut self, _: u64) -> Result<Vec<u8>, prefixkv_dpr::state_object::StateObjectError> {
        Ok(Vec::new())
    }
    fn persisted_versions(&self) -> Result<Vec<u64>, prefixkv_dpr::state_object::StateObjectError> {
        Ok(self.persisted.clone())
    }
    fn prune(&mut self, _: u64) -> Result<(), prefixkv_dpr::state_object::StateObjectError> {
        Ok(())
    }
}

/// Records the order reports reach the finder.
struct RecordingFinder {
    inner: ExactFinder,
    order: std::sync::Mutex<Vec<u64>>,
}

impl DprFinder for RecordingFinder {
    fn store(&self) -> &Arc<dyn prefixkv_dpr::MetadataStore> {
        self.inner.store()
    }
    fn report_persisted(
        &self,
        world_line: u64,
        version: WorkerVersion,
        dependencies: &[WorkerVersion],
    ) -> Result<bool, prefixkv_dpr::metadata::MetadataError> {
        self.order.lock().unwrap().push(version.version);
        self.inner
            .report_persisted(world_line, version, dependencies)
    }
    fn refresh(&self) -> Result<prefixkv_dpr::ClusterState, prefixkv_dpr::metadata::MetadataError> {
        self.inner.refresh()
    }
}

#[test]
fn reports_reach_the_finder_in_commit_order() {
    let (_directory, open) = sqlite_opener();
    let recording = Arc::new(RecordingFinder {
        inner: ExactFinder::new(open()).unwrap(),
        order: std::sync::Mutex::new(Vec::new()),
    });
    let finder: Arc<dyn DprFinder> = recording.clone();
    let mut worker = DprWorker::start(0, HeldCallbacks::default(), finder, 8, 0).unwrap();
    let sealed: Vec<u64> = (0..4).map(|_| worker.commit().unwrap()).collect();
    assert_eq!(worker.persisted_version(), 0);
    // The state object calls back newest first; the finder must still hear oldest first.
    let held = std::mem::take(&mut worker_state(&mut worker).held);
    for (version, callback) in held.into_iter().rev() {
        callback(Ok(version));
    }
    assert_eq!(*recording.order.lock().unwrap(), sealed);
    assert_eq!(worker.persisted_version(), *sealed.last().unwrap());
}

fn worker_state(worker: &mut DprWorker<HeldCallbacks>) -> &mut HeldCallbacks {
    worker.state_object_mut()
}
