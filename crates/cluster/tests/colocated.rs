//! Co-located clients: three in-process workers on loopback, the cluster manager on a thread,
//! and sessions of a client co-located with worker 0 (`Worker::local_client`: batches of the keys
//! worker 0 owns run on its engine directly, the others go over TCP) writing unique keys beside a
//! plain remote session. After commit points were reached, a failure of another worker is
//! reported to the manager; every worker rolls back to the cut. Each session's keys are then read
//! back over TCP and checked against an oracle built only from what the session was acknowledged
//! and told (`verify_found`, shared with the kill test), for local and remote operations alike.

#[path = "../../dredis/tests/common/mod.rs"]
mod dredis_common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dredis_common::{spawn_session, verify_found, wait_until, Expected, Progress, SessionRecord};
use prefixkv_cluster::{EngineConfig, Worker, WorkerConfig};
use prefixkv_dpr::cluster::{ClusterManager, SystemClock};
use prefixkv_dpr::finder::DprFinder;
use prefixkv_dredis::client::ClientConfig;
use prefixkv_dredis::options::{FinderKind, MetadataLocation};
use prefixkv_dredis::DprRedisClient;
use prefixkv_engine::{StoreConfig, Strategy};
use prefixkv_resp::Reply;
use rand::RngExt;

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

/// Workers 0..3 in this process, with the hash slots split evenly over them.
fn start_workers(directory: &Path, metadata: &Path) -> (Vec<Worker>, Vec<SocketAddr>) {
    let addresses: Vec<SocketAddr> = (0..WORKERS).map(|_| free_address()).collect();
    prefixkv_cluster::launcher::publish_ownership(finder(metadata).store().as_ref(), &addresses)
        .expect("publish ownership");
    let workers = addresses
        .iter()
        .enumerate()
        .map(|(id, &address)| {
            let mut store = StoreConfig::new(directory.join(format!("worker-{id}")));
            store.index_buckets = 1 << 14;
            store.log_memory_bytes = 64 << 20;
            let engine = EngineConfig {
                store,
                strategy: Strategy::FoldOver,
            };
            let mut config = WorkerConfig::new(id as u64, address, engine);
            config.checkpoint_interval_ms = 40;
            Worker::start(config, finder(metadata)).expect("start a worker")
        })
        .collect();
    (workers, addresses)
}

/// Reads every key the record names over TCP: tag → value (absent keys omitted).
fn read_back(client: &DprRedisClient, record: &SessionRecord) -> BTreeMap<u64, Vec<u8>> {
    let mut reader = client
        .session(1_000_000 + record.id)
        .expect("reader session");
    let tags: Vec<u64> = record.expected.keys().copied().collect();
    for &tag in &tags {
        let key = format!("s{}:{tag}", record.id);
        reader.push(&[b"GET", key.as_bytes()]).expect("GET");
    }
    reader.drain().expect("drain the reads");
    let mut found = BTreeMap::new();
    for completed in reader.take_completed() {
        let tag = tags[completed.tag as usize];
        match completed.reply {
            Reply::BulkString(value) => {
                found.insert(tag, value.to_vec());
            }
            Reply::Null | Reply::NullBulkString => {}
            other => panic!("GET s{}:{tag} answered {other:?}", record.id),
        }
    }
    found
}

#[test]
fn colocated_sessions_commit_and_roll_back_like_remote_ones() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let directory = tempfile::tempdir().expect("tempdir");
    let metadata = directory.path().join("metadata.sqlite");
    let (workers, addresses) = start_workers(directory.path(), &metadata);
    let manager_finder = finder(&metadata);
    let state_store = Arc::clone(manager_finder.store());
    // A lease a loaded machine cannot make expire: the failure is reported, not detected.
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
    let colocated = Arc::new(workers[0].local_client(config.clone()).expect("client"));
    let remote = Arc::new(DprRedisClient::new(config).expect("remote client"));
    assert_eq!(colocated.local_shard(), Some(0));

    // One co-located session: a mix of local and remote batches, all acknowledged and
    // committed, and the local ones readable over TCP.
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
        .wait_for_commit(session.next_sequence(), dredis_common::WAIT)
        .expect("commit");
    assert_eq!(point.until_sequence, 600);
    drop(session);

    let stop = Arc::new(AtomicBool::new(false));
    // Sessions 0 and 1 co-located with worker 0, session 2 remote.
    let sessions: Vec<_> = (0..3u64)
        .map(|id| {
            let progress = Arc::new(Progress::default());
            let client = if id < 2 { &colocated } else { &remote };
            let handle = spawn_session(
                Arc::clone(client),
                id,
                Arc::clone(&stop),
                Arc::clone(&progress),
            );
            (progress, handle)
        })
        .collect();
    let threshold = rand::rng().random_range(200..1000u64);
    wait_until("sessions to commit before the failure", || {
        sessions
            .iter()
            .all(|(p, _)| p.committed_until.load(Ordering::SeqCst) >= threshold)
    });
    let world_line_before = state_store.cluster_state().unwrap().world_line;
    let victim = rand::rng().random_range(1..WORKERS) as u64;
    manager.report_failure(victim);
    eprintln!("reported worker {victim} failed after {threshold} committed operations per session");
    wait_until("every session to see the rollback", || {
        sessions
            .iter()
            .all(|(p, _)| p.rollbacks.load(Ordering::SeqCst) >= 1)
    });
    wait_until("the recovery to finish", || {
        let state = state_store.cluster_state().unwrap();
        !state.recovering && state.world_line > world_line_before
    });
    wait_until("sessions to commit on the new world-line", || {
        sessions
            .iter()
            .all(|(p, _)| p.committed_since_rollback.load(Ordering::SeqCst) >= 3)
    });
    stop.store(true, Ordering::SeqCst);
    let records: Vec<SessionRecord> = sessions
        .into_iter()
        .map(|(_, handle)| handle.join().expect("session thread"))
        .collect();
    let router = colocated
        .session(2_000_000)
        .expect("a session to route keys");
    for record in &records {
        let found = read_back(&remote, record);
        let (present, absent, either) = verify_found(&found, record);
        // Which of the session's operations were local: the oracle covered both kinds.
        let local = record
            .expected
            .keys()
            .filter(|tag| {
                let key = format!("s{}:{tag}", record.id);
                router.shard_of(key.as_bytes()).unwrap() == 0
            })
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
            let (&tag, _) = record
                .expected
                .iter()
                .find(|(tag, &e)| {
                    let key = format!("s{}:{tag}", record.id);
                    e == Expected::Present
                        && (router.shard_of(key.as_bytes()).unwrap() == 0) == want_local
                })
                .expect("a present operation of each kind");
            let mut tampered = SessionRecord {
                id: record.id,
                expected: record.expected.clone(),
                rollbacks: record.rollbacks,
            };
            tampered.expected.insert(tag, Expected::Absent);
            let caught = std::panic::catch_unwind(|| verify_found(&found, &tampered)).is_err();
            assert!(caught, "the oracle missed a tampered expectation");
        }
    }
    stop_manager.store(true, Ordering::SeqCst);
    manager_thread.join().expect("manager thread");
    drop(router);
    drop(colocated);
    for worker in workers {
        worker.shutdown();
    }
}
