//! Slot migration under load (`prefixkv_cluster::migrate`): three worker processes, client
//! sessions writing unique keys across every slot while a range of slots moves from one worker
//! to another. Commands on the moving slots are refused (`-TRYAGAIN`, then `-MOVED`) while it
//! happens and never run; everything acknowledged must be readable afterwards through the new
//! owner, checked key by key against an oracle built only from what the sessions were
//! acknowledged and told (the shared DPR session oracle, `crates/dprnet/tests/common`). A failure
//! injected in the middle of a migration (reported to the manager, or a SIGKILL of the old
//! owner) must abandon it cleanly: the table unchanged, the old owner serving again, nothing
//! acknowledged lost beyond what the rollback reported.

#[path = "../../dprnet/tests/common/mod.rs"]
mod sessions;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prefixkv_cluster::migrate::{migrate_slots, MigrateError, MigrationPlan};
use prefixkv_cluster::{LocalCluster, LocalClusterConfig};
use prefixkv_dpr::metadata::{MetadataStore, SqliteMetadataStore};
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_dprnet::slots::key_slot;
use prefixkv_dprnet::DprRedisClient;
use prefixkv_resp::Reply;
use sessions::*;

fn start() -> (tempfile::TempDir, LocalCluster) {
    let directory = tempfile::tempdir().expect("tempdir");
    let mut config = LocalClusterConfig::new(
        env!("CARGO_BIN_EXE_prefixkv-cluster").into(),
        3,
        directory.path().join("cluster"),
    );
    config.checkpoint_interval_ms = 40;
    // Only the injected failure may roll back (see kill.rs on leases in tests).
    config.lease_ms = 10_000;
    config.restart_failed = false;
    config.index_buckets = 1 << 18;
    config.log_memory_bytes = 128 << 20;
    let cluster = LocalCluster::start(config).expect("start the cluster");
    (directory, cluster)
}

fn start_sessions(client: &Arc<DprRedisClient>, count: u64, stop: &Arc<AtomicBool>) -> Sessions {
    // At most 16,000 writes a second per session, so that the test's key count stays bounded
    // however long the migration takes on a loaded machine.
    spawn_sessions(0..count, |_| Arc::clone(client), stop, 2_000)
}

/// Reads every key of the session through a fresh client (routing by the table as it is now)
/// and checks it against the oracle, also showing the oracle fail on a tampered expectation.
fn verify(cluster: &LocalCluster, record: &SessionRecord) {
    let client = DprRedisClient::new(cluster.client_config()).expect("client");
    let found = read_back(&client, record);
    let (present, absent, either) = verify_found(&found, record);
    eprintln!(
        "session {}: {present} present, {absent} absent, {either} uncertain",
        record.id
    );
    assert!(present > 0, "session {} kept nothing", record.id);
    assert_oracle_catches_tampering(&found, record, |_| true);
}

/// A key of session 0's shape in `slots`, for plain RESP probes.
fn key_in(slots: std::ops::RangeInclusive<u16>) -> String {
    (0..)
        .map(|n| format!("probe:{n}"))
        .find(|key| slots.contains(&key_slot(key.as_bytes())))
        .expect("a key")
}

fn resp(cluster: &LocalCluster, worker: usize, args: &[&[u8]]) -> Reply {
    let address = cluster.addresses()[worker];
    let mut connection =
        RedisConnection::connect(address, std::time::Duration::from_secs(10)).expect("connect");
    connection.command(args).expect("command")
}

#[test]
fn slots_move_between_workers_under_load() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (_directory, cluster) = start();
    let store = SqliteMetadataStore::open(cluster.metadata_path()).expect("metadata");
    let client = Arc::new(DprRedisClient::new(cluster.client_config()).expect("client"));
    let stop = Arc::new(AtomicBool::new(false));
    let sessions = start_sessions(&client, 2, &stop);
    wait_committed(&sessions, 300);
    // Worker 0 owns 0..=5460 (the launcher's even split). Move its first 2001 slots around the
    // cluster and back (0 → 1 → 2 → 0): each new owner imports over whatever stale copies it
    // may hold, each old owner forgets its own. `MIGRATE_TEST_LAPS` repeats the tour.
    let laps = std::env::var("MIGRATE_TEST_LAPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64);
    for lap in 0..laps {
        for (from, to) in [(0, 1), (1, 2), (2, 0)] {
            let report = migrate_slots(&store, &MigrationPlan::new(0, 2000, to)).expect("migrate");
            eprintln!("lap {lap}: {report:?}");
            assert_eq!((report.from, report.to), (from, to));
            assert!(
                report.keys > 0,
                "the sessions had written keys in those slots"
            );
            assert!(report.forgotten.is_ok(), "{:?}", report.forgotten);
            let table = store.ownership().expect("table");
            assert_eq!(
                prefixkv_dpr::metadata::ownership::owner_of(&table, 1234).map(|r| r.worker),
                Some(to)
            );
            // Sessions go on, routed anew after their `-MOVED` replies.
            let before: Vec<u64> = sessions
                .iter()
                .map(|(p, _)| p.committed_until.load(Ordering::SeqCst))
                .collect();
            wait_until("sessions to commit after the migration", || {
                sessions
                    .iter()
                    .zip(&before)
                    .all(|((p, _), &b)| p.committed_until.load(Ordering::SeqCst) >= b + 300)
            });
        }
    }
    // One more move, so that the old and new owners differ for the checks below.
    migrate_slots(&store, &MigrationPlan::new(0, 2000, 1)).expect("migrate");
    // Plain RESP: the old owner redirects, the new one serves and says so in CLUSTER SLOTS.
    let key = key_in(0..=2000);
    let slot = key_slot(key.as_bytes());
    match resp(&cluster, 0, &[b"SET", key.as_bytes(), b"x"]) {
        Reply::Error(text) => assert_eq!(
            String::from_utf8_lossy(&text),
            format!("MOVED {slot} {}", cluster.addresses()[1])
        ),
        other => panic!("the old owner answered {other:?}"),
    }
    assert_eq!(
        resp(&cluster, 1, &[b"SET", key.as_bytes(), b"x"]),
        Reply::SimpleString("OK".into())
    );
    stop.store(true, Ordering::SeqCst);
    for (progress, handle) in sessions {
        let record = handle.join().expect("session");
        eprintln!(
            "session {}: {} commands refused during the migration",
            record.id,
            progress.refused.load(Ordering::SeqCst)
        );
        verify(&cluster, &record);
    }
    cluster.shutdown();
}

#[test]
fn a_failure_during_a_migration_abandons_it() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (_directory, cluster) = start();
    let cluster = Arc::new(cluster);
    let store = SqliteMetadataStore::open(cluster.metadata_path()).expect("metadata");
    let table_before = store.ownership().expect("table");
    let client = Arc::new(DprRedisClient::new(cluster.client_config()).expect("client"));
    let stop = Arc::new(AtomicBool::new(false));
    let sessions = start_sessions(&client, 2, &stop);
    wait_committed(&sessions, 300);
    let world_line = cluster.cluster_state().unwrap().world_line;
    // A failure once the old owner's frozen version is in the cut (of the old owner itself),
    // and one when the data is at the new owner but not committed there (of the new owner);
    // reported to the manager: every worker rolls back to the cut, and the worker keeps running.
    // Third: the old owner SIGKILLed once its frozen version is in the cut (its freeze dies
    // with it; started again, it serves the slots from its checkpoint in the cut).
    let failures = [
        ("frozen", 0, false),
        ("copied", 2, false),
        ("frozen", 0, true),
    ];
    for (round, (failing_step, failing_worker, kill)) in failures.into_iter().enumerate() {
        let mut plan = MigrationPlan::new(0, 2000, 2);
        let injected = Arc::clone(&cluster);
        plan.hook = Some(Arc::new(move |step| {
            if step == failing_step {
                if kill {
                    injected
                        .kill(failing_worker)
                        .expect("SIGKILL the old owner");
                } else {
                    injected.report_failure(failing_worker);
                }
            }
        }));
        match migrate_slots(&store, &plan) {
            Err(MigrateError::Aborted { step, reason }) => {
                eprintln!("abandoned at {step}: {reason}");
                // A killed worker breaks the copy's connection; otherwise the driver notices
                // the new world-line.
                assert!(kill || reason.contains("world-line"), "{reason}");
            }
            other => panic!("the migration should have been abandoned: {other:?}"),
        }
        drop(plan);
        assert_eq!(
            store.ownership().unwrap(),
            table_before,
            "the table is unchanged"
        );
        if kill {
            cluster
                .restart(failing_worker)
                .expect("start the killed worker again");
        }
        wait_until("the recovery to finish", || {
            let state = cluster.cluster_state().unwrap();
            !state.recovering && state.world_line > world_line + round as u64
        });
        wait_committed_since_rollback(&sessions, 3);
    }
    // The old owner serves the slots again.
    let key = key_in(0..=2000);
    assert_eq!(
        resp(&cluster, 0, &[b"SET", key.as_bytes(), b"x"]),
        Reply::SimpleString("OK".into())
    );
    // And the same migration, run again, goes through.
    let report = migrate_slots(&store, &MigrationPlan::new(0, 2000, 2)).expect("rerun");
    assert_eq!((report.from, report.to), (0, 2));
    assert_eq!(report.world_line, world_line + 3);
    stop.store(true, Ordering::SeqCst);
    for (_, handle) in sessions {
        let record = handle.join().expect("session");
        assert_eq!(record.rollbacks, 3, "the session saw every rollback");
        verify(&cluster, &record);
    }
    match Arc::try_unwrap(cluster) {
        Ok(cluster) => cluster.shutdown(),
        Err(_) => panic!("the hook still holds the cluster"),
    }
}
