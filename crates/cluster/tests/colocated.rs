//! Co-located clients: worker 0 runs in this test's process, workers 1 and 2 as processes
//! (`prefixkv-cluster worker`), the cluster manager on a thread. Sessions of a client co-located
//! with worker 0 (`Worker::local_client`: batches of the keys worker 0 owns run on its engine
//! directly, the others go over TCP) write unique keys beside a plain remote session. Once every
//! session has commit points, worker 1 or 2 fails — reported to the manager without a crash
//! (every worker rolls back in memory), or SIGKILLed (reported at once, as the launcher does,
//! then started again: it reloads its checkpoint in the cut). Each session's keys are then read
//! back over TCP and checked against an oracle built only from what the session was acknowledged
//! and told (`verify_found`, shared with the kill test), for local and remote operations alike.

#[path = "../../dprnet/tests/common/mod.rs"]
mod sessions;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prefixkv_cluster::{EngineConfig, Worker, WorkerConfig};
use prefixkv_dpr::cluster::{ClusterManager, SystemClock};
use prefixkv_dpr::finder::DprFinder;
use prefixkv_dprnet::client::ClientConfig;
use prefixkv_dprnet::options::{FinderKind, MetadataLocation};
use prefixkv_dprnet::DprRedisClient;
use prefixkv_engine::StoreConfig;
use rand::RngExt;
use sessions::*;

const WORKERS: usize = 3;

fn finder(metadata: &Path) -> Arc<dyn DprFinder> {
    let store = MetadataLocation::Sqlite(metadata.to_path_buf())
        .open()
        .expect("open the metadata store");
    FinderKind::Exact.open(store).expect("finder")
}

fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Worker `id` as a `prefixkv-cluster worker` process, logging to `worker-<id>.log`.
fn spawn_worker(directory: &Path, metadata: &Path, id: usize, address: SocketAddr) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(directory.join(format!("worker-{id}.log")))
        .expect("worker log");
    let child = Command::new(env!("CARGO_BIN_EXE_prefixkv-cluster"))
        .arg("worker")
        .args(["--id", &id.to_string(), "--listen", &address.to_string()])
        .arg("--dir")
        .arg(directory.join(format!("worker-{id}")))
        .arg("--metadata")
        .arg(metadata)
        .args(["--checkpoint-interval-ms", "40", "--index-buckets", "16384"])
        .args(["--log-memory-bytes", &(64u64 << 20).to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn a worker process");
    wait_until("a worker process to listen", || {
        TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok()
    });
    child
}

/// The worker processes, SIGKILLed when dropped: a failing test must not leave them running
/// (they would keep writing checkpoints into its removed directory).
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Worker 0 in this process, workers 1.. as processes, with the hash slots split evenly.
fn start_workers(directory: &Path, metadata: &Path) -> (Worker, Processes, Vec<SocketAddr>) {
    let addresses: Vec<SocketAddr> = (0..WORKERS).map(|_| free_address()).collect();
    prefixkv_cluster::launcher::publish_ownership(finder(metadata).store().as_ref(), &addresses)
        .expect("publish ownership");
    let mut store = StoreConfig::new(directory.join("worker-0"));
    store.index_buckets = 1 << 14;
    store.log_memory_bytes = 64 << 20;
    let engine = EngineConfig { store };
    let mut config = WorkerConfig::new(0, addresses[0], engine);
    config.checkpoint_interval_ms = 40;
    let host = Worker::start(config, finder(metadata)).expect("start worker 0");
    let processes = (1..WORKERS)
        .map(|id| spawn_worker(directory, metadata, id, addresses[id]))
        .collect();
    (host, Processes(processes), addresses)
}

/// How the other worker fails.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Failure {
    /// Reported to the manager, no crash: every worker rolls back in memory.
    Reported,
    /// SIGKILLed, reported at once, then started again.
    Killed,
}

#[test]
fn colocated_sessions_roll_back_like_remote_ones_after_a_reported_failure() {
    run(Failure::Reported);
}

#[test]
fn colocated_sessions_roll_back_like_remote_ones_after_a_worker_is_killed() {
    run(Failure::Killed);
}

fn run(failure: Failure) {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let directory = tempfile::tempdir().expect("tempdir");
    let metadata = directory.path().join("metadata.sqlite");
    let (host, mut processes, addresses) = start_workers(directory.path(), &metadata);
    let manager_finder = finder(&metadata);
    let state_store = Arc::clone(manager_finder.store());
    // A lease a loaded machine cannot make expire: failures are reported, not detected.
    let manager = Arc::new(ClusterManager::new(
        Arc::clone(manager_finder.store()),
        Arc::new(SystemClock),
        10_000,
    ));
    let stop_manager = Arc::new(AtomicBool::new(false));
    let manager_thread = {
        let (manager, stop) = (Arc::clone(&manager), Arc::clone(&stop_manager));
        std::thread::spawn(move || {
            prefixkv_cluster::launcher::run_manager(
                &manager,
                manager_finder.as_ref(),
                &stop,
                Duration::from_millis(20),
            )
        })
    };
    let config = ClientConfig::new(addresses.clone(), metadata.clone());
    let colocated = Arc::new(host.local_client(config.clone()).expect("client"));
    let remote = Arc::new(DprRedisClient::new(config).expect("remote client"));
    assert_eq!(colocated.local_shard(), Some(0));

    // One co-located session: a mix of local and remote batches, all acknowledged and
    // committed.
    let mut session = colocated.session(100).expect("session");
    let mut shards = [0usize; WORKERS];
    for i in 0..600u64 {
        let key = format!("mix:{i}");
        shards[session.shard_of(key.as_bytes()).unwrap()] += 1;
        session.push(&[b"SET", key.as_bytes(), b"v"]).unwrap();
    }
    session.drain().unwrap();
    assert!(
        shards.iter().all(|&n| n > 0),
        "keys on every shard: {shards:?}"
    );
    assert_eq!(session.take_completed().len(), 600);
    assert!(session.local_batches() > 0, "worker 0's keys ran locally");
    let point = session
        .wait_for_commit(session.next_sequence(), sessions::WAIT)
        .expect("commit");
    assert_eq!(point.until_sequence, 600);
    drop(session);

    let stop = Arc::new(AtomicBool::new(false));
    // Sessions 0 and 1 co-located with worker 0, session 2 remote.
    let sessions = spawn_sessions(
        0..3,
        |id| Arc::clone(if id < 2 { &colocated } else { &remote }),
        &stop,
        0,
    );
    let threshold = rand::rng().random_range(200..1000u64);
    wait_until("sessions to commit before the failure", || {
        sessions
            .iter()
            .all(|(p, _)| p.committed_until.load(Ordering::SeqCst) >= threshold)
    });
    let world_line_before = state_store.cluster_state().unwrap().world_line;
    let victim = rand::rng().random_range(1..WORKERS);
    if failure == Failure::Killed {
        // SIGKILL, then report the exit at once, as the launcher's reaper does.
        processes.0[victim - 1].kill().expect("SIGKILL a worker");
        processes.0[victim - 1].wait().expect("reap it");
    }
    manager.report_failure(victim as u64);
    eprintln!(
        "{failure:?}: worker {victim} failed after {threshold} committed operations per session"
    );
    if failure == Failure::Killed {
        wait_until("the cluster to start a new world-line", || {
            state_store.cluster_state().unwrap().world_line > world_line_before
        });
        // A restarted worker serves only once the cluster moved past its incarnation.
        processes.0[victim - 1] =
            spawn_worker(directory.path(), &metadata, victim, addresses[victim]);
    }
    wait_rolled_back(&sessions);
    wait_until("the recovery to finish", || {
        let state = state_store.cluster_state().unwrap();
        !state.recovering && state.world_line > world_line_before
    });
    wait_committed_since_rollback(&sessions, 3);
    stop.store(true, Ordering::SeqCst);
    let records = join_sessions(sessions);
    let router = colocated
        .session(2_000_000)
        .expect("a session to route keys");
    let is_local = |id: u64, tag: u64| {
        let key = format!("s{id}:{tag}");
        router.shard_of(key.as_bytes()).unwrap() == 0
    };
    for record in &records {
        let found = read_back(&remote, record);
        let (present, absent, either) = verify_found(&found, record);
        let local = record
            .expected
            .keys()
            .filter(|&&tag| is_local(record.id, tag))
            .count();
        eprintln!(
            "session {}: {} rollbacks, {present} present, {absent} absent, {either} uncertain, \
             {local} of {} operations on the co-located worker",
            record.id,
            record.rollbacks,
            record.expected.len()
        );
        assert!(present > 0, "session {} kept nothing", record.id);
        assert!(local > 0 && local < record.expected.len());
        // The oracle can fail, on a local operation as on a remote one: claiming one that
        // survived lost must be caught.
        for want_local in [true, false] {
            assert_oracle_catches_tampering(&found, record, |tag| {
                is_local(record.id, tag) == want_local
            });
        }
    }
    stop_manager.store(true, Ordering::SeqCst);
    manager_thread.join().expect("manager thread");
    drop(router);
    drop(colocated);
    host.shutdown();
    drop(processes);
}
