//! Multi-process: three worker processes (`prefixkv-cluster worker`), the cluster manager, and
//! client sessions writing unique keys across the workers while they commit every 40 ms; one
//! worker is SIGKILLed mid-run. Every session must see the rollback, the killed worker is started
//! again and restores its checkpoint in the cut, sessions commit on the new world-line, and each
//! session's surviving keys must be exactly what its rollback report says — checked key by key,
//! through the workers, against an oracle built only from what the client was acknowledged and
//! told (never from the workers' own versions or counts).
//!
//! Every data type is in the workload: besides its unique string keys, each session appends to
//! a list, a set, a hash, a sorted set and a stream on keys of its own (one hash tag, owned by
//! worker `session % 3`, so the killed worker always holds one session's collections and the
//! survivors the others'). After the recovery each is read back (`LRANGE`, `SMEMBERS`,
//! `HGETALL`, `ZRANGE … WITHSCORES`, `XRANGE`) and must be exactly the elements of its operations
//! `1..=k` for a `k` the session's oracle accepts (`crates/dprnet/tests/common/collections.rs`).
//!
//! The session threads and the oracle are the shared DPR session oracle
//! (`crates/dprnet/tests/common`, D-Redis's tests use it too): the same client library drives
//! both kinds of cluster.
//!
//! The kill runs twice: with the default SQLite metadata file, and with the metadata in
//! PostgreSQL (`--metadata <conninfo>` for every worker, the manager and the clients), on
//! libDPR's private test server: the one `scripts/with-postgres` started (`DPR_POSTGRES_HOST`,
//! `DPR_POSTGRES_PORT`) or else one of its own, as libDPR's PostgreSQL tests do (they need the
//! `postgresql` package; `scripts/test` installs it).

#[path = "../../dprnet/tests/common/mod.rs"]
mod sessions;
// libDPR's private PostgreSQL server helper (initdb + pg_ctl on a free port, or the server of
// `scripts/with-postgres`), shared rather than copied.
#[path = "../../dpr/tests/common/mod.rs"]
mod dpr_common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use prefixkv_cluster::{LocalCluster, LocalClusterConfig};
use prefixkv_dprnet::client::ClientError;
use prefixkv_dprnet::{DprRedisClient, MetadataLocation};
use prefixkv_resp::Reply;
use rand::RngExt;
use sessions::collections::{
    assert_collection_check_catches_tampering, check_collection, read_collections,
    verify_collections,
};
use sessions::*;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A session writing only keys the surviving workers own, publishing its world-line and how
/// many operations completed since it last saw a rollback.
struct Probe {
    world_line: Arc<AtomicU64>,
    completed_since_rollback: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<()>,
}

fn spawn_probe(client: Arc<DprRedisClient>, victim: usize, stop: Arc<AtomicBool>) -> Probe {
    let world_line = Arc::new(AtomicU64::new(0));
    let completed_since_rollback = Arc::new(AtomicU64::new(0));
    let handle = {
        let (world_line, completed) = (
            Arc::clone(&world_line),
            Arc::clone(&completed_since_rollback),
        );
        std::thread::spawn(move || {
            let mut session = client.session(900).expect("probe session");
            let mut next = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let step: Result<(), ClientError> = (|| {
                    let mut pushed = 0;
                    while pushed < 32 {
                        // A bounded key set: the probe runs for the whole test.
                        let key = format!("probe:{}", next % 4096);
                        next += 1;
                        if session.shard_of(key.as_bytes())? == victim {
                            continue;
                        }
                        session.push(&[b"SET", key.as_bytes(), b"x"])?;
                        pushed += 1;
                    }
                    session.drain()
                })();
                match step {
                    Ok(()) => {
                        let done = session.take_completed().len() as u64;
                        completed.fetch_add(done, Ordering::SeqCst);
                    }
                    Err(ClientError::Rollback(_)) => {
                        session.take_completed();
                        completed.store(0, Ordering::SeqCst);
                    }
                    Err(other) => panic!("probe: {other}"),
                }
                world_line.store(session.world_line(), Ordering::SeqCst);
            }
        })
    };
    Probe {
        world_line,
        completed_since_rollback,
        handle,
    }
}

/// The two kill runs take turns: each runs three worker processes under load, which on a small
/// test machine is enough at a time.
static KILL_RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A cluster sized for about `keys` keys in all, its metadata in `metadata_url` if given (else
/// the SQLite file in its directory).
fn start(
    workers: usize,
    keys: u64,
    metadata_url: Option<String>,
) -> (tempfile::TempDir, LocalCluster) {
    let directory = tempfile::tempdir().expect("tempdir");
    let mut config = LocalClusterConfig::new(
        env!("CARGO_BIN_EXE_prefixkv-cluster").into(),
        workers,
        directory.path().join("cluster"),
    );
    config.metadata_url = metadata_url;
    config.checkpoint_interval_ms = 40;
    // The killed worker's exit is reported to the manager at once; the lease only catches hung
    // workers. Heartbeats are fsynced SQLite transactions, which a loaded test machine can stall
    // for seconds: a spurious expiry after the sessions stopped would roll back operations they
    // completed but had not seen committed yet, which the oracle expects present.
    config.lease_ms = 10_000;
    // The test starts the killed worker again itself, once it has seen the survivors serve.
    config.restart_failed = false;
    let keys_per_worker = keys / workers as u64 + 1;
    config.index_buckets = (keys_per_worker as usize).next_power_of_two().max(1 << 14);
    // Records are 64-byte lines; fold-over checkpoints copy every key written since the last
    // one, and compaction needs room to work.
    config.log_memory_bytes = (keys_per_worker * 512).max(64 << 20);
    let cluster = LocalCluster::start(config).expect("start the cluster");
    (directory, cluster)
}

#[test]
fn a_worker_killed_mid_run_rolls_the_cluster_back_to_the_cut() {
    let (_directory, cluster) = kill_a_worker_mid_run(None);
    assert_eq!(
        cluster.metadata_location(),
        MetadataLocation::Sqlite(cluster.metadata_path())
    );
    cluster.shutdown();
}

#[test]
fn a_worker_killed_mid_run_with_postgresql_metadata() {
    let server = dpr_common::PostgresServer::start();
    let url = server.connection_string(&server.create_database());
    let (_directory, cluster) = kill_a_worker_mid_run(Some(url));
    assert!(matches!(
        cluster.metadata_location(),
        MetadataLocation::Postgres(_)
    ));
    // Workers, manager and clients all used PostgreSQL: nobody fell back to a SQLite file.
    assert!(
        !cluster.metadata_path().exists(),
        "{} was created",
        cluster.metadata_path().display()
    );
    cluster.shutdown();
}

/// Kills one of three workers under load and checks every session's surviving keys against its
/// oracle; returns the cluster, still running, and the guard of its directory (None if kept).
fn kill_a_worker_mid_run(
    metadata_url: Option<String>,
) -> (Option<tempfile::TempDir>, LocalCluster) {
    let _turn = KILL_RUNS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // The manager's and launcher's messages (failures, rollbacks, restarts) in the test output.
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    // `CLUSTER_TEST_SESSIONS` and `CLUSTER_TEST_COMMITTED` (the most operations each session
    // commits before the kill) scale the run up.
    let session_count = env_u64("CLUSTER_TEST_SESSIONS", 3);
    let most_committed = env_u64("CLUSTER_TEST_COMMITTED", 1000).max(201);
    // Sessions issue far more than they see committed; leave room for that.
    let (directory, cluster) = start(3, session_count * most_committed * 20, metadata_url);
    // `CLUSTER_TEST_KEEP=1` keeps the cluster directory (worker logs, metadata) for inspection.
    let directory = if std::env::var_os("CLUSTER_TEST_KEEP").is_some() {
        eprintln!("keeping {}", directory.keep().display());
        None
    } else {
        Some(directory)
    };
    let client = Arc::new(DprRedisClient::new(cluster.client_config()).expect("client"));
    let stop = Arc::new(AtomicBool::new(false));
    let sessions = spawn_sessions_with(0..session_count, |_| Arc::clone(&client), &stop, 0, true);
    let victim = rand::rng().random_range(0..3usize);
    let probe = spawn_probe(Arc::clone(&client), victim, Arc::clone(&stop));
    let threshold = rand::rng().random_range(200..most_committed);
    wait_until("sessions to commit before the failure", || {
        sessions
            .iter()
            .all(|(p, _)| p.committed_until.load(Ordering::SeqCst) >= threshold)
    });
    let world_line_before = cluster.cluster_state().unwrap().world_line;
    cluster.kill(victim).expect("SIGKILL a worker");
    eprintln!("SIGKILLed worker {victim} after {threshold} committed operations per session");
    // Survivors are served throughout the rollback: the killed worker is not started again yet,
    // so the recovery cannot finish, and still the probe's operations on the surviving workers
    // complete on the new world-line (the survivors rolled back in memory and went on serving).
    wait_until(
        "the probe to complete operations on the new world-line",
        || {
            probe.world_line.load(Ordering::SeqCst) > world_line_before
                && probe.completed_since_rollback.load(Ordering::SeqCst) >= 256
        },
    );
    assert!(
        cluster.cluster_state().unwrap().recovering,
        "the recovery cannot have finished without the killed worker"
    );
    cluster
        .restart(victim)
        .expect("start the killed worker again");
    wait_rolled_back(&sessions);
    wait_until("the recovery to finish", || {
        let state = cluster.cluster_state().unwrap();
        !state.recovering && state.world_line > world_line_before
    });
    wait_committed_since_rollback(&sessions, 3);
    stop.store(true, Ordering::SeqCst);
    probe.handle.join().expect("probe thread");
    let records = join_sessions(sessions);
    assert_eq!(
        cluster.restarts()[victim],
        1,
        "the killed worker was started again"
    );
    for record in &records {
        let found = read_back(&client, record);
        let (present, absent, either) = verify_found(&found, record);
        let collections = read_collections(&client, record);
        let elements = verify_collections(&collections, record);
        eprintln!(
            "session {}: {} rollbacks, {present} string operations present, {absent} absent, \
             {either} uncertain; {elements} elements in {} collections",
            record.id,
            record.rollbacks,
            collections.len()
        );
        assert!(present > 0, "session {} kept nothing", record.id);
        assert!(elements > 0, "session {} kept no element", record.id);
        // The oracle can fail: claiming one surviving operation lost must be caught, and so
        // must a collection with a hole or an element never sent.
        assert_oracle_catches_tampering(&found, record, |_| true);
        assert_collection_check_catches_tampering(&collections, record);
    }
    (directory, cluster)
}

#[test]
fn every_recoverability_level_serves_reads_and_writes() {
    use prefixkv_cluster::worker::Recoverability;
    for level in [
        Recoverability::None,
        Recoverability::Eventual,
        Recoverability::Dpr,
        Recoverability::Synchronous,
    ] {
        let directory = tempfile::tempdir().expect("tempdir");
        let mut config = LocalClusterConfig::new(
            env!("CARGO_BIN_EXE_prefixkv-cluster").into(),
            2,
            directory.path().join("cluster"),
        );
        config.checkpoint_interval_ms = 20;
        // No failure is injected here: a lease that a loaded machine cannot make expire.
        config.lease_ms = 10_000;
        config.recoverability = level;
        config.index_buckets = 1 << 12;
        config.log_memory_bytes = 32 << 20;
        let cluster = LocalCluster::start(config).expect("start the cluster");
        let client = DprRedisClient::new(cluster.client_config()).expect("client");
        let mut session = client.session(1).expect("session");
        for i in 0..500u64 {
            session
                .push(&[
                    b"SET",
                    format!("k{i}").as_bytes(),
                    format!("{i}").as_bytes(),
                ])
                .unwrap();
        }
        session.drain().unwrap();
        for i in 0..500u64 {
            session.push(&[b"GET", format!("k{i}").as_bytes()]).unwrap();
        }
        session.drain().unwrap();
        let mut completed = session.take_completed();
        // Completions arrive per worker; tags follow push order.
        completed.sort_by_key(|c| c.tag);
        assert_eq!(completed.len(), 1000, "{level:?}");
        for (i, read) in completed[500..].iter().enumerate() {
            assert_eq!(read.reply, Reply::bulk(i.to_string()), "{level:?}");
        }
        if level == Recoverability::Dpr || level == Recoverability::Synchronous {
            // Commit points reach the end: the workers' checkpoints are published into cuts.
            let point = session
                .wait_for_commit(session.next_sequence(), sessions::WAIT)
                .expect("commit");
            assert_eq!(point.until_sequence, 1000, "{level:?}");
        }
        if level == Recoverability::Synchronous {
            assert!(directory.path().join("cluster/worker-0/oplog").is_dir());
        }
        cluster.shutdown();
    }
}

/// The collection check on made-up read-backs (no cluster): operations 1..=3 must be present,
/// 4 and 5 may be, 6 and 7 were lost; then with an operation a worker refused without running.
#[test]
fn the_collection_check_rejects_a_hole_an_extra_element_and_a_lost_one() {
    use sessions::Expected::{Absent, Either, Present, Refused};
    let operations = [
        (1, Present),
        (2, Present),
        (3, Present),
        (4, Either),
        (5, Either),
        (6, Absent),
        (7, Absent),
    ];
    for read in [&[1, 2, 3][..], &[1, 2, 3, 4], &[1, 2, 3, 4, 5]] {
        assert_eq!(check_collection(read, &operations), Ok(read.len() as u64));
    }
    let rejected: [&[u64]; 7] = [
        &[1, 3, 4],          // a hole in the middle
        &[1, 2, 3, 5],       // a hole among the uncertain
        &[1, 2, 3, 4, 9],    // an element never sent
        &[1, 2, 3, 4, 5, 6], // a lost operation
        &[1, 2],             // a surviving operation missing
        &[1, 2, 2, 3],       // a duplicate
        &[2, 1, 3],          // out of order
    ];
    for read in rejected {
        assert!(
            check_collection(read, &operations).is_err(),
            "{read:?} was accepted"
        );
    }
    // A refused operation is skipped, never present.
    let with_refused = [(1, Present), (2, Refused), (3, Present), (4, Either)];
    assert_eq!(check_collection(&[1, 3], &with_refused), Ok(3));
    assert_eq!(check_collection(&[1, 3, 4], &with_refused), Ok(4));
    assert!(check_collection(&[1, 2, 3], &with_refused).is_err());
    assert!(check_collection(&[1], &with_refused).is_err());
}
