//! Cluster manager end to end with in-process workers (one thread each): a worker stops
//! heartbeating, the manager advances the world-line and has every worker restore to the cut,
//! progress resumes once all reported, and the session learns exactly which operations survived.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{sqlite_opener, wait_for};
use prefixkv_dpr::cluster::{
    CheckOutcome, Clock, ClusterManager, ManualClock, RestoreCommand, WorkerControl,
};
use prefixkv_dpr::finder::{DprFinder, ExactFinder, HybridFinder};
use prefixkv_dpr::header::DprHeader;
use prefixkv_dpr::session::{Completion, SequenceRange};
use prefixkv_dpr::state_object::{MapOperation, VersionedMap};
use prefixkv_dpr::worker::BatchOutcome;
use prefixkv_dpr::{ClusterState, DprSession, DprWorker, Version, WorkerId};

const WAIT: Duration = Duration::from_secs(30);

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

enum Message {
    Batch(
        DprHeader,
        Vec<MapOperation>,
        Sender<BatchOutcome<Option<Vec<u8>>>>,
    ),
    Commit(Sender<Version>),
    Heartbeat(Sender<()>),
    Restore(RestoreCommand),
    Contents(Sender<(u64, Map)>),
    Crash(Sender<()>),
}

struct Environment {
    finder: Arc<dyn DprFinder>,
    manager: Arc<ClusterManager>,
    clock: Arc<ManualClock>,
}

fn worker_thread(
    id: WorkerId,
    directory: PathBuf,
    environment: Arc<Environment>,
    inbox: Receiver<Message>,
) {
    let map = VersionedMap::open(directory).unwrap();
    let mut worker = DprWorker::start(
        id,
        map,
        Arc::clone(&environment.finder),
        64,
        environment.clock.now_ms(),
    )
    .unwrap();
    for message in inbox {
        match message {
            Message::Batch(header, operations, reply) => {
                let _ = reply.send(worker.process_batch(&header, &operations).unwrap());
            }
            Message::Commit(reply) => {
                let sealed = worker.commit().unwrap();
                assert!(worker.wait_persisted(sealed, WAIT));
                let _ = reply.send(sealed);
            }
            Message::Heartbeat(reply) => {
                environment.manager.heartbeat(id).unwrap();
                let _ = reply.send(());
            }
            Message::Restore(command) => {
                worker
                    .restore_to(&ClusterState {
                        world_line: command.world_line,
                        cut: command.cut,
                        recovering: true,
                    })
                    .unwrap();
            }
            Message::Contents(reply) => {
                let _ = reply.send((worker.world_line(), worker.state_object().entries().clone()));
            }
            Message::Crash(reply) => {
                // Simulated crash: the in-memory state is dropped and no more heartbeats come.
                drop(worker);
                let _ = reply.send(());
                return;
            }
        }
    }
}

/// The manager's handle on one worker thread; restarts the thread when told the worker failed.
struct ThreadControl {
    id: WorkerId,
    directory: PathBuf,
    environment: Mutex<Option<Arc<Environment>>>,
    sender: Mutex<Sender<Message>>,
    /// The next restart "fails": no worker comes up (a nested failure during recovery).
    fail_next_restart: std::sync::atomic::AtomicBool,
}

impl ThreadControl {
    fn spawn(id: WorkerId, directory: PathBuf, environment: Arc<Environment>) -> Arc<Self> {
        let (sender, inbox) = mpsc::channel();
        let thread_environment = Arc::clone(&environment);
        let thread_directory = directory.clone();
        std::thread::spawn(move || worker_thread(id, thread_directory, thread_environment, inbox));
        Arc::new(Self {
            id,
            directory,
            environment: Mutex::new(Some(environment)),
            sender: Mutex::new(sender),
            fail_next_restart: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn send(&self, message: Message) {
        self.sender.lock().unwrap().send(message).unwrap();
    }

    fn ask<T>(&self, make: impl FnOnce(Sender<T>) -> Message) -> T {
        let (reply, answer) = mpsc::channel();
        self.send(make(reply));
        answer.recv_timeout(WAIT).expect("worker thread answered")
    }
}

impl WorkerControl for ThreadControl {
    fn restore(&self, command: RestoreCommand) {
        if command.failed
            && self
                .fail_next_restart
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            // The restarted process dies at once: nothing comes up, no heartbeat, no report.
            let (sender, _inbox) = mpsc::channel();
            *self.sender.lock().unwrap() = sender;
        } else if command.failed {
            // Restart: a fresh worker over the same directory restores itself to the cut.
            let environment = self
                .environment
                .lock()
                .unwrap()
                .clone()
                .expect("environment");
            let (sender, inbox) = mpsc::channel();
            let (id, directory) = (self.id, self.directory.clone());
            std::thread::spawn(move || worker_thread(id, directory, environment, inbox));
            *self.sender.lock().unwrap() = sender;
        } else {
            self.send(Message::Restore(command));
        }
    }
}

fn key(worker: WorkerId, index: u64) -> Vec<u8> {
    format!("w{worker}-k{}", index % 5).into_bytes()
}

struct Issued {
    worker: WorkerId,
    sequences: SequenceRange,
    operations: Vec<MapOperation>,
}

fn run(
    session: &mut DprSession,
    control: &ThreadControl,
    operations: Vec<MapOperation>,
    log: &mut Vec<Issued>,
) -> Completion {
    let (header, ticket) = session
        .issue_batch(control.id, operations.len() as u64)
        .unwrap();
    let outcome = control.ask(|reply| Message::Batch(header, operations.clone(), reply));
    let response = match outcome {
        BatchOutcome::Executed { response, .. } | BatchOutcome::Rejected { response } => response,
    };
    let completion = session.complete_batch(ticket, &response).unwrap();
    if matches!(completion, Completion::Executed { .. }) {
        log.push(Issued {
            worker: control.id,
            sequences: ticket.sequences,
            operations,
        });
    }
    completion
}

fn apply(map: &mut Map, operations: &[MapOperation]) {
    for operation in operations {
        match operation {
            MapOperation::Put(k, v) => {
                map.insert(k.clone(), v.clone());
            }
            MapOperation::Delete(k) => {
                map.remove(k);
            }
            MapOperation::Get(_) => {}
        }
    }
}

fn failure_and_rollback(
    make_finder: fn(Arc<dyn prefixkv_dpr::MetadataStore>) -> Arc<dyn DprFinder>,
    nested: bool,
) {
    let (_metadata, open) = sqlite_opener();
    let data = tempfile::tempdir().unwrap();
    let store = open();
    let clock = Arc::new(ManualClock::default());
    clock.set_ms(1_000);
    let manager = Arc::new(ClusterManager::new(
        Arc::clone(&store),
        clock.clone() as Arc<dyn Clock>,
        1_000,
    ));
    let environment = Arc::new(Environment {
        finder: make_finder(Arc::clone(&store)),
        manager: Arc::clone(&manager),
        clock: Arc::clone(&clock),
    });
    let workers: Vec<Arc<ThreadControl>> = (1..=3)
        .map(|id| {
            ThreadControl::spawn(
                id,
                data.path().join(format!("worker-{id}")),
                Arc::clone(&environment),
            )
        })
        .collect();
    for control in &workers {
        manager.attach(control.id, control.clone() as Arc<dyn WorkerControl>);
        control.ask(Message::Heartbeat);
    }
    assert!(wait_for(WAIT, || store.workers().unwrap().len() == 3));

    let mut session = DprSession::new(77, 0, 1);
    let mut log = Vec::new();
    // Phase 1: operations across all workers with commits; all of it becomes durable.
    for index in 0..30u64 {
        let control = &workers[(index % 3) as usize];
        let value = index.to_le_bytes().to_vec();
        let operations = vec![MapOperation::Put(key(control.id, index), value)];
        assert!(matches!(
            run(&mut session, control, operations, &mut log),
            Completion::Executed { .. }
        ));
        if index % 4 == 3 {
            control.ask(Message::Commit);
        }
    }
    for control in &workers {
        control.ask(Message::Commit);
    }
    let state = environment.finder.refresh().unwrap();
    let phase_1_end = session.next_sequence();
    assert_eq!(
        session.commit_point(&state).unwrap().until_sequence,
        phase_1_end
    );

    // Phase 2: more operations, never committed into the published cut.
    for index in 30..45u64 {
        let control = &workers[(index % 3) as usize];
        let operations = vec![
            MapOperation::Put(key(control.id, index), index.to_le_bytes().to_vec()),
            MapOperation::Delete(key(control.id, index + 1)),
        ];
        assert!(matches!(
            run(&mut session, control, operations, &mut log),
            Completion::Executed { .. }
        ));
    }

    // Worker 2 crashes; the others keep heartbeating past its lease.
    workers[1].ask(Message::Crash);
    workers[1]
        .fail_next_restart
        .store(nested, std::sync::atomic::Ordering::SeqCst);
    clock.advance_ms(5_000);
    workers[0].ask(Message::Heartbeat);
    workers[2].ask(Message::Heartbeat);
    let outcome = manager.check().unwrap();
    let cut = match outcome {
        CheckOutcome::RollbackStarted {
            failed,
            world_line,
            cut,
        } => {
            assert_eq!(failed, vec![2]);
            assert_eq!(world_line, 1);
            cut
        }
        other => panic!("expected a rollback, got {other:?}"),
    };
    assert_eq!(cut, state.cut);
    let final_world_line = if nested {
        // The restart of worker 2 failed: it never reports. Once its lease runs out again the
        // manager starts a second rollback instead of waiting forever.
        assert!(wait_for(WAIT, || {
            store
                .workers()
                .unwrap()
                .iter()
                .filter(|w| w.worker != 2)
                .all(|w| w.recovered_world_line == 1)
        }));
        assert!(matches!(
            manager.check().unwrap(),
            CheckOutcome::Recovering { waiting_for } if waiting_for == vec![2]
        ));
        clock.advance_ms(5_000);
        workers[0].ask(Message::Heartbeat);
        workers[2].ask(Message::Heartbeat);
        match manager.check().unwrap() {
            CheckOutcome::RollbackStarted {
                failed,
                world_line,
                cut,
            } => {
                assert_eq!(failed, vec![2]);
                assert_eq!(world_line, 2);
                assert_eq!(cut, state.cut, "no cut is published during a recovery");
            }
            other => panic!("expected a nested rollback, got {other:?}"),
        }
        2
    } else {
        1
    };
    // Progress is halted until every worker (including the restarted one) reports back.
    let mut last = CheckOutcome::Healthy;
    assert!(
        wait_for(WAIT, || {
            last = manager.check().unwrap();
            matches!(last, CheckOutcome::RecoveryFinished { world_line } if world_line == final_world_line)
        }),
        "recovery did not finish: {last:?}, workers {:?}",
        store.workers().unwrap()
    );
    assert!(!store.cluster_state().unwrap().recovering);
    for control in &workers {
        control.ask(Message::Heartbeat);
    }
    assert_eq!(manager.check().unwrap(), CheckOutcome::Healthy);

    // The session's next batch (still on world-line 0) is rejected; it learns its surviving prefix.
    let stale = run(
        &mut session,
        &workers[0],
        vec![MapOperation::Get(key(1, 0))],
        &mut log,
    );
    assert_eq!(
        stale,
        Completion::RollbackRequired {
            world_line: final_world_line
        }
    );
    let recovered_state = environment
        .finder
        .rollback_target(session.world_line())
        .unwrap();
    let surviving = session.handle_rollback(&recovered_state).unwrap();
    assert_eq!(surviving.world_line, final_world_line);
    assert_eq!(surviving.until_sequence, phase_1_end);
    assert!(surviving.uncertain.is_empty());
    assert_eq!(surviving.rejected.len(), 1, "the refused Get did not run");
    assert!(
        surviving.survived.is_empty(),
        "phase 1 was already known committed"
    );
    let lost: Vec<SequenceRange> = log
        .iter()
        .filter(|b| b.sequences.start >= phase_1_end)
        .map(|b| b.sequences)
        .collect();
    assert_eq!(surviving.lost, lost);

    // Every worker's state is exactly phase 1 replayed (the oracle), in world-line 1.
    for control in &workers {
        let mut expected = Map::new();
        for batch in log
            .iter()
            .filter(|b| b.worker == control.id && b.sequences.end <= surviving.until_sequence)
        {
            apply(&mut expected, &batch.operations);
        }
        let (world_line, contents) = control.ask(Message::Contents);
        assert_eq!(world_line, final_world_line);
        assert_eq!(contents, expected, "worker {}", control.id);
    }

    // The session continues on the new world-line and commits again.
    for index in 100..109u64 {
        let control = &workers[(index % 3) as usize];
        let operations = vec![MapOperation::Put(
            key(control.id, index),
            index.to_le_bytes().to_vec(),
        )];
        assert!(matches!(
            run(&mut session, control, operations, &mut log),
            Completion::Executed { .. }
        ));
    }
    for control in &workers {
        control.ask(Message::Commit);
    }
    let state = environment.finder.refresh().unwrap();
    assert_eq!(state.world_line, final_world_line);
    assert_eq!(
        session.commit_point(&state).unwrap().until_sequence,
        session.next_sequence()
    );
}

#[test]
fn failure_rollback_with_exact_finder() {
    failure_and_rollback(|store| Arc::new(ExactFinder::new(store).unwrap()), false);
}

#[test]
fn nested_failure_during_recovery() {
    failure_and_rollback(|store| Arc::new(ExactFinder::new(store).unwrap()), true);
}

#[test]
fn failure_rollback_with_hybrid_finder() {
    failure_and_rollback(|store| Arc::new(HybridFinder::new(store).unwrap()), false);
}

/// Hybrid finder restart: the new instance has lost the in-memory graph, so exact commits stall
/// on the opaque vertices until the approximate cut carries progress past them.
#[test]
fn hybrid_finder_restart_falls_back_to_approximate() {
    use prefixkv_dpr::WorkerVersion;
    let (_metadata, open) = sqlite_opener();
    let store = open();
    store.register_worker(1, 0).unwrap();
    store.register_worker(2, 0).unwrap();
    let before = HybridFinder::new(Arc::clone(&store)).unwrap();
    before
        .report_persisted(0, WorkerVersion::new(1, 1), &[])
        .unwrap();
    before
        .report_persisted(0, WorkerVersion::new(1, 2), &[])
        .unwrap();
    drop(before); // finder crash: the graph is gone
    let after = HybridFinder::new(Arc::clone(&store)).unwrap();
    // Worker 2's version 2 depends on worker 1's version 2, persisted before the restart.
    after
        .report_persisted(0, WorkerVersion::new(2, 2), &[WorkerVersion::new(1, 2)])
        .unwrap();
    // Exact alone could not pass the opaque 1-2, but Vmin = 2 and both have persisted 2.
    let state = after.refresh().unwrap();
    assert_eq!(state.cut, BTreeMap::from([(1, 2), (2, 2)]));
    // From here the exact part works again on new vertices.
    after
        .report_persisted(0, WorkerVersion::new(1, 3), &[])
        .unwrap();
    let state = after.refresh().unwrap();
    assert_eq!(state.cut, BTreeMap::from([(1, 3), (2, 2)]));
}
