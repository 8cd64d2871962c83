//! Slot migration under load (`prefixkv_cluster::migrate`): three worker processes, client
//! sessions writing unique keys across every slot while a range of slots moves from one worker
//! to another. Commands on the moving slots are refused (`-TRYAGAIN`, then `-MOVED`) while it
//! happens and never run; everything acknowledged must be readable afterwards through the new
//! owner, checked key by key against an oracle built only from what the sessions were
//! acknowledged and told (the shared DPR session oracle, `crates/dprnet/tests/common`). A failure
//! injected in the middle of a migration (reported to the manager, or a SIGKILL of the old
//! owner) must abandon it cleanly: the table unchanged, the old owner serving again, nothing
//! acknowledged lost beyond what the rollback reported.
//!
//! Besides the sessions' strings, the moving slots hold one key of every collection type (a
//! list with a TTL, a large hash, a set, a sorted set, a stream with a consumer group and
//! pending entries), stored as many engine records keyed by their object id: each must arrive
//! element for element at the new owner, leave no record behind at the old one, and survive
//! every abandoned migration unchanged (neither lost nor resurrected after a delete).

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

/// One key of every collection type, all in one slot of `0..=2000` (a hash tag), and a key
/// deleted again (it must never come back).
struct Collections {
    tag: String,
}

impl Collections {
    fn key(&self, name: &str) -> String {
        format!("{{{}}}{name}", self.tag)
    }

    /// Writes them at `worker` (which owns `0..=2000`) through plain RESP.
    fn write(cluster: &LocalCluster, worker: usize) -> Collections {
        let tag = (0..)
            .map(|n| format!("coll{n}"))
            .find(|tag| key_slot(tag.as_bytes()) <= 2000)
            .expect("a tag");
        let this = Collections { tag };
        let run = |args: Vec<String>| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            match resp(cluster, worker, &args) {
                Reply::Error(text) => panic!("{args:?}: {}", String::from_utf8_lossy(&text)),
                reply => reply,
            }
        };
        let words = |head: &[&str], tail: Vec<String>| -> Vec<String> {
            head.iter().map(|w| w.to_string()).chain(tail).collect()
        };
        let list = this.key("list");
        run(words(
            &["RPUSH", &list],
            (0..300).map(|i| format!("e{i}")).collect(),
        ));
        run(words(&["PEXPIRE", &list, "3600000"], Vec::new()));
        let hash = this.key("hash");
        // Values past hash-max-listpack-value: the hash moves into records.
        let fields = (0..200)
            .flat_map(|i| [format!("f{i}"), format!("v{i:0>80}")])
            .collect();
        run(words(&["HSET", &hash], fields));
        let set = this.key("set");
        run(words(
            &["SADD", &set],
            (0..200).map(|i| format!("m{i}")).collect(),
        ));
        let zset = this.key("zset");
        let members = (0..200)
            .flat_map(|i| [format!("{}", i % 13), format!("m{i}")])
            .collect();
        run(words(&["ZADD", &zset], members));
        let stream = this.key("stream");
        for i in 1..=30 {
            run(words(
                &["XADD", &stream, &format!("{i}-1"), "f", &format!("{i}")],
                Vec::new(),
            ));
        }
        run(words(&["XGROUP", "CREATE", &stream, "g", "0"], Vec::new()));
        for (consumer, count) in [("alice", "5"), ("bob", "4")] {
            let read = [
                "XREADGROUP",
                "GROUP",
                "g",
                consumer,
                "COUNT",
                count,
                "STREAMS",
                &stream,
                ">",
            ];
            run(words(&read, Vec::new()));
        }
        run(words(&["XACK", &stream, "g", "2-1"], Vec::new()));
        run(words(&["XDEL", &stream, "20-1"], Vec::new()));
        let gone = this.key("gone");
        run(words(&["RPUSH", &gone, "a", "b", "c"], Vec::new()));
        run(words(&["DEL", &gone], Vec::new()));
        this
    }

    /// Everything they hold, as `worker` reports it (unordered replies sorted).
    fn read(&self, cluster: &LocalCluster, worker: usize) -> Vec<String> {
        let ask = |args: &[&str]| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            resp(cluster, worker, &args)
        };
        let sorted = |reply: Reply, width: usize| {
            let Reply::Array(items) = reply else {
                panic!("not an array: {reply:?}")
            };
            let mut groups: Vec<String> = items
                .chunks(width)
                .map(|group| format!("{group:?}"))
                .collect();
            groups.sort();
            groups.join(",")
        };
        let (list, hash, set, zset, stream) = (
            self.key("list"),
            self.key("hash"),
            self.key("set"),
            self.key("zset"),
            self.key("stream"),
        );
        let ttl = match ask(&["PTTL", &list]) {
            Reply::Integer(ms) => ms > 0 && ms <= 3_600_000,
            other => panic!("PTTL answered {other:?}"),
        };
        vec![
            format!("{:?}", ask(&["LRANGE", &list, "0", "-1"])),
            format!("list ttl kept: {ttl}"),
            sorted(ask(&["HGETALL", &hash]), 2),
            sorted(ask(&["SMEMBERS", &set]), 1),
            format!("{:?}", ask(&["ZRANGE", &zset, "0", "-1", "WITHSCORES"])),
            format!("{:?}", ask(&["XRANGE", &stream, "-", "+"])),
            format!("{:?}", ask(&["XINFO", "STREAM", &stream, "FULL"])),
            // The summary form: no idle times (they grow).
            format!("{:?}", ask(&["XPENDING", &stream, "g"])),
            format!("{:?}", ask(&["EXISTS", &self.key("gone")])),
            format!("{:?}", ask(&["OBJECT", "ENCODING", &hash])),
        ]
    }
}

/// Engine records of `worker` that are no user key (collections' records).
fn other_records(cluster: &LocalCluster, worker: usize) -> i64 {
    match resp(cluster, worker, &[b"PREFIXKV.SLOTS", b"RECORDS"]) {
        Reply::Integer(count) => count,
        other => panic!("RECORDS answered {other:?}"),
    }
}

/// Waits until `worker`'s current version is in the DPR cut (what it has written is committed,
/// so no rollback can take it back).
fn wait_for_commit(cluster: &LocalCluster, worker: usize) {
    let version = match resp(cluster, worker, &[b"PREFIXKV.SLOTS", b"VERSION"]) {
        Reply::Integer(version) => version as u64,
        other => panic!("VERSION answered {other:?}"),
    };
    wait_until("the collections to commit", || {
        cluster.cluster_state().unwrap().cut_version(worker as u64) >= version
    });
}

#[test]
fn slots_move_between_workers_under_load() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (_directory, cluster) = start();
    let store = SqliteMetadataStore::open(cluster.metadata_path()).expect("metadata");
    let client = Arc::new(DprRedisClient::new(cluster.client_config()).expect("client"));
    let stop = Arc::new(AtomicBool::new(false));
    let sessions = start_sessions(&client, 2, &stop);
    // The sessions write strings only: no worker has other records before the collections.
    let baseline: Vec<i64> = (0..3).map(|w| other_records(&cluster, w)).collect();
    assert_eq!(baseline, vec![0, 0, 0]);
    let collections = Collections::write(&cluster, 0);
    let expected = collections.read(&cluster, 0);
    assert!(
        other_records(&cluster, 0) > 0,
        "collections are stored as records"
    );
    assert!(
        expected[1].ends_with("true") && expected[9].contains("hashtable"),
        "{expected:?}"
    );
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
            // Every collection element for element at the new owner, nothing left at the old.
            assert_eq!(
                collections.read(&cluster, to as usize),
                expected,
                "at worker {to}"
            );
            assert_eq!(
                other_records(&cluster, from as usize),
                0,
                "worker {from} kept records"
            );
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
    assert_eq!(collections.read(&cluster, 1), expected);
    assert_eq!(other_records(&cluster, 0), 0);
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
    let collections = Collections::write(&cluster, 0);
    let expected = collections.read(&cluster, 0);
    wait_for_commit(&cluster, 0);
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
        // The old owner still holds every collection as it was (nothing lost, the deleted key
        // not back), and the new owner serves none of them. (It may hold a stale copy: its
        // `FORGET` can run before its rollback restores a checkpoint that already held part of
        // the import. Never served, the next `IMPORTING` deletes it: checked below.)
        assert_eq!(collections.read(&cluster, 0), expected, "round {round}");
        let list = collections.key("list");
        match resp(&cluster, 2, &[b"LRANGE", list.as_bytes(), b"0", b"-1"]) {
            Reply::Error(text) => assert!(text.starts_with(b"MOVED "), "round {round}"),
            other => panic!("round {round}: the new owner answered {other:?}"),
        }
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
    assert_eq!(collections.read(&cluster, 2), expected);
    assert_eq!(other_records(&cluster, 0), 0);
    // Moved on once more, worker 2 keeps no record: its stale copies from the abandoned rounds
    // went at `IMPORTING`, the import itself at `FORGET`.
    migrate_slots(&store, &MigrationPlan::new(0, 2000, 1)).expect("move on");
    assert_eq!(collections.read(&cluster, 1), expected);
    assert_eq!(other_records(&cluster, 2), 0);
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
