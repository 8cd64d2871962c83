//! Real processes: redis-server children behind in-process proxies, sessions writing across
//! shards while shards commit, a SIGKILLed redis-server mid-load, and a second kill during the
//! recovery. Every session's surviving state must be exactly what its rollback reports say
//! (checked key by key against an oracle of what it wrote, in order).
//!
//! The same failure runs with the approximate and the hybrid finder, and with the metadata in
//! PostgreSQL (a private server; needs the `postgresql` package, as libDPR's tests do).
//!
//! `DREDIS_TEST_SESSIONS` sets the number of concurrent sessions (default 2).

mod common;
// libDPR's private PostgreSQL server helper (initdb + pg_ctl on a free port, or the server of
// `scripts/with-postgres`), shared rather than copied.
#[path = "../../dpr/tests/common/mod.rs"]
mod dpr_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use prefixkv_dprnet::DprRedisClient;
use prefixkv_resp::Reply;
use rand::RngExt;

fn session_count() -> u64 {
    std::env::var("DREDIS_TEST_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

#[test]
fn a_session_writes_across_shards_while_they_commit() {
    let (_directory, cluster) = start_cluster(3);
    let client = DprRedisClient::new(cluster.client_config()).unwrap();
    let mut session = client.session(1).unwrap();
    for i in 0..3000u64 {
        session
            .push(&[
                b"SET",
                format!("k{i}").as_bytes(),
                format!("{i}").as_bytes(),
            ])
            .unwrap();
    }
    session.drain().unwrap();
    let completed = session.take_completed();
    assert_eq!(completed.len(), 3000);
    let shards_used: std::collections::BTreeSet<usize> =
        completed.iter().map(|c| c.shard).collect();
    assert_eq!(shards_used.len(), 3, "keys spread over every shard");
    let callbacks = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let callbacks = Arc::clone(&callbacks);
        session.on_commit(move |point| callbacks.lock().unwrap().push(point.until_sequence));
    }
    let point = session
        .wait_for_commit(session.next_sequence(), WAIT)
        .unwrap();
    assert_eq!(point.until_sequence, 3000);
    assert!(point.excluded.is_empty());
    assert_eq!(callbacks.lock().unwrap().last().copied(), Some(3000));
    // Reads go through the proxies too.
    for i in [0u64, 1234, 2999] {
        session.push(&[b"GET", format!("k{i}").as_bytes()]).unwrap();
    }
    session.drain().unwrap();
    let replies: Vec<Reply> = session
        .take_completed()
        .into_iter()
        .map(|c| c.reply)
        .collect();
    assert_eq!(
        replies,
        vec![Reply::bulk("0"), Reply::bulk("1234"), Reply::bulk("2999")]
    );
    // Every shard kept at least one committed version on disk (a catalog version directory),
    // with a manifest.
    for shard in 0..3 {
        let versions = cluster.directory().join(format!("shard-{shard}/versions"));
        let manifests = std::fs::read_dir(&versions)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .join(prefixkv_dredis::manifest::MANIFEST_FILE)
                    .is_file()
            })
            .count();
        assert!(manifests >= 1, "{} has no manifest", versions.display());
    }
    cluster.shutdown();
}

/// Starts sessions, waits until they have committed something, runs `inject` (the failures),
/// waits for progress on the new world-line, stops the sessions and verifies every session.
fn run_with_failures(shards: usize, inject: impl FnOnce(&prefixkv_dredis::LocalCluster)) {
    run_with_failures_on(start_cluster(shards), inject)
}

fn run_with_failures_on(
    (_directory, cluster): (tempfile::TempDir, prefixkv_dredis::LocalCluster),
    inject: impl FnOnce(&prefixkv_dredis::LocalCluster),
) {
    let client = Arc::new(DprRedisClient::new(cluster.client_config()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let sessions = spawn_sessions(0..session_count(), |_| Arc::clone(&client), &stop, 0);
    let threshold = rand::rng().random_range(100..600u64);
    wait_until("sessions to commit before the failure", || {
        sessions
            .iter()
            .all(|(p, _)| p.committed_until.load(Ordering::SeqCst) >= threshold)
    });
    let world_line_before = cluster.cluster_state().unwrap().world_line;
    inject(&cluster);
    wait_rolled_back(&sessions);
    wait_until("the recovery to finish", || {
        let state = cluster.cluster_state().unwrap();
        !state.recovering
            && state.world_line > world_line_before
            && cluster
                .proxy_world_lines()
                .iter()
                .all(|&w| w == state.world_line)
    });
    wait_committed_since_rollback(&sessions, 3);
    stop.store(true, Ordering::SeqCst);
    let records = join_sessions(sessions);
    // Quiet: no recovery running, every proxy on the cluster's world-line, and every Redis up. A
    // Redis killed late (the nested test's second kill) stays down until its failure is detected
    // and a restore restarts it, so reading before that would race with the restore.
    let redis = cluster.redis_addresses();
    wait_until("a quiet cluster before reading it", || {
        let state = cluster.cluster_state().unwrap();
        !state.recovering
            && cluster
                .proxy_world_lines()
                .iter()
                .all(|&w| w == state.world_line)
            && every_redis_answers(&redis)
            && !cluster.cluster_state().unwrap().recovering
    });
    for record in &records {
        let (present, absent, either) = verify_session(&redis, record);
        eprintln!(
            "session {}: {} rollbacks, {present} operations present, {absent} absent, {either} uncertain",
            record.id, record.rollbacks
        );
        assert!(present > 0);
    }
    cluster.shutdown();
}

#[test]
fn killing_a_redis_mid_load_restores_every_shard_to_the_cut() {
    run_with_failures(2, |cluster| {
        let victim = rand::rng().random_range(0..2);
        let pid = cluster.redis_pids()[victim].expect("redis running");
        kill(pid);
        eprintln!("killed redis of shard {victim} (pid {pid})");
    });
}

fn kill_one(cluster: &prefixkv_dredis::LocalCluster) {
    let shards = cluster.proxy_addresses().len();
    let victim = rand::rng().random_range(0..shards);
    let pid = cluster.redis_pids()[victim].expect("redis running");
    kill(pid);
    eprintln!("killed redis of shard {victim} (pid {pid})");
}

#[test]
fn killing_a_redis_with_the_approximate_finder() {
    // The approximate finder commits with Vmax catch-up; the guarantee must be the same.
    let cluster = start_cluster_with(2, |config| {
        config.finder = prefixkv_dprnet::FinderKind::Approximate
    });
    run_with_failures_on(cluster, kill_one);
}

#[test]
fn killing_a_redis_with_the_hybrid_finder() {
    let cluster = start_cluster_with(2, |config| {
        config.finder = prefixkv_dprnet::FinderKind::Hybrid
    });
    run_with_failures_on(cluster, kill_one);
}

#[test]
fn killing_a_redis_with_postgresql_metadata() {
    // Proxies, manager, finder and clients all use the PostgreSQL store.
    let server = dpr_common::PostgresServer::start();
    let url = server.connection_string(&server.create_database());
    let cluster = start_cluster_with(2, |config| config.metadata_url = Some(url));
    assert!(matches!(
        cluster.1.metadata_location(),
        prefixkv_dprnet::MetadataLocation::Postgres(_)
    ));
    run_with_failures_on(cluster, kill_one);
}

#[test]
fn a_second_kill_during_recovery_converges() {
    run_with_failures(3, |cluster| {
        let first = cluster.redis_pids()[0].expect("redis running");
        let world_line = cluster.cluster_state().unwrap().world_line;
        kill(first);
        wait_until("the first rollback to start", || {
            cluster.cluster_state().unwrap().world_line > world_line
        });
        // Shard 1 is restoring or about to: kill whatever Redis it runs now. The restore itself
        // kills and restarts that Redis, so the pid read here may be gone by the time the signal
        // is sent (ESRCH): then read the new one and try again.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let second = loop {
            if let Some(pid) = cluster.redis_pids()[1] {
                if try_kill(pid) {
                    break pid;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "shard 1 had no live redis to kill for 10 s"
            );
        };
        eprintln!("killed redis of shard 0 (pid {first}) and, during the recovery, of shard 1 (pid {second})");
    });
}
