//! Non-blocking rollback (D-FASTER's THROW/PURGE): the in-memory state returns to a checkpoint
//! while sessions keep operating.
//!
//! - `single_threaded_rollback_*`: keys written across three checkpoints, rollback to the middle
//!   one, state compared with a model of that checkpoint (reads and scan), writes after it, a
//!   checkpoint and a reopen from disk, the checkpoints above deleted. Every strategy.
//! - `concurrent_rollback_*`: the prefix oracle. Writer threads each own their keys and record
//!   what they were acknowledged (world-line, serial, key); a controller checkpoints every few ms
//!   (recording each session's acknowledged serial before the request and issued serial after the
//!   commit) and rolls back to a published version while the writers run. Each writer must see
//!   `RolledBack` once; its surviving serial must lie within the bounds the controller recorded
//!   for that checkpoint; the final state must be exactly the writers' surviving acknowledged
//!   writes; every other write is a read-modify-write that checks, online, that it reads the
//!   writer's own last surviving write. The oracle uses only what the threads recorded, never
//!   the store's own counts. Size: `ROLLBACK_KEYS` (default 16,384 keys), `ROLLBACK_SECONDS` of
//!   writing after the rollback (default 1), `ROLLBACK_SEED` (the moment of the rollback).
//! - `the_oracle_fails_when_the_rollback_skips_invalidation`: the same run with the engine's
//!   test-only sabotage; the oracle must fail.
//! - `nested_rollback_while_purge_runs`: the same with a second rollback, further back, while the
//!   first one's PURGE runs (held by a test hook); `the_oracle_fails_when_purge_scans_too_little`:
//!   that run with a PURGE that scans only from its THROW's tail; the oracle must fail.
//!   `nested_rollback_right_after_the_first`: the second rollback at once, without the hook
//!   (the first PURGE stopped wherever it is), also under compaction.
//! - `purge_scans_only_the_versions_it_discards`: PURGE's log pass covers only the records of the
//!   discarded versions after a long history (exact counts from `PurgeReport`), also after a
//!   restart.
//! - `rollback_edge_cases`: two rollbacks in a row, rollback to 0, below the floor, without
//!   `rollback_ready`, unknown versions.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prefixkv_engine::{EngineError, Session, Store, StoreConfig, Strategy};

const WAIT: Duration = Duration::from_secs(60);

fn config(dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = 1 << 12;
    config.log_memory_bytes = 16 << 20;
    config.log_page_bytes = 64 << 10;
    config.flusher_threads = 2;
    config.keep_checkpoints = 4;
    config.checkpoint_direct_io = false;
    config.rollback_ready = true;
    config
}

/// Takes a checkpoint and waits for it (retrying while a rollback's PURGE holds the machine).
fn checkpoint(store: &Store, strategy: Strategy) -> prefixkv_engine::CheckpointReport {
    let deadline = Instant::now() + WAIT;
    loop {
        match store.checkpoint(strategy) {
            Ok(token) => return store.wait_for_commit(token, WAIT).expect("checkpoint"),
            Err(EngineError::CheckpointInProgress) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(error) => panic!("checkpoint: {error}"),
        }
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(index: u32) -> Vec<u8> {
    format!("key-{index:05}").into_bytes()
}

/// The whole store, read through a scan, and key by key.
fn assert_state(session: &mut Session, model: &Model, keys: u32, context: &str) {
    let mut scanned = Model::new();
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, 256, |key, value| {
                assert!(
                    scanned.insert(key.to_vec(), value.to_vec()).is_none(),
                    "{context}: scan visited a key twice"
                );
            })
            .expect("scan");
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(&scanned, model, "{context}: scan differs from the model");
    let mut value = Vec::new();
    for index in 0..keys {
        let key = key(index);
        let found = session.read(&key, &mut value).expect("read");
        assert_eq!(
            found.then_some(&value),
            model.get(&key),
            "{context}: key {index}"
        );
    }
}

/// One round of writes: upserts (some longer than the record, so read-copy-update), rmw, deletes.
fn write_round(session: &mut Session, model: &mut Model, round: u32, keys: u32) {
    for index in 0..keys {
        let key = key(index);
        match (index + round) % 7 {
            0 => {
                session.delete(&key).unwrap();
                model.remove(&key);
            }
            1 => {
                session
                    .rmw(&key, |old, new| {
                        new.extend_from_slice(old.unwrap_or(b"none"));
                        new.extend_from_slice(format!("+r{round}").as_bytes());
                    })
                    .unwrap();
                let mut value = model.get(&key).cloned().unwrap_or(b"none".to_vec());
                value.extend_from_slice(format!("+r{round}").as_bytes());
                model.insert(key, value);
            }
            2 if round.is_multiple_of(2) => {}
            3 => {
                let value = format!(
                    "round {round} key {index} {}",
                    "x".repeat(index as usize % 90)
                );
                session.upsert(&key, value.as_bytes()).unwrap();
                model.insert(key, value.into_bytes());
            }
            _ => {
                let value = format!("r{round}k{index}");
                session.upsert(&key, value.as_bytes()).unwrap();
                model.insert(key, value.into_bytes());
            }
        }
    }
}

fn checkpoint_dirs(dir: &Path) -> Vec<u64> {
    let mut versions: Vec<u64> = std::fs::read_dir(dir.join("checkpoints"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_prefix('v')
                .and_then(|digits| digits.parse().ok())
        })
        .collect();
    versions.sort_unstable();
    versions
}

fn single_threaded(strategies: [Strategy; 4]) {
    let dir = tempfile::tempdir().unwrap();
    let keys = 600;
    let store = Store::open(config(dir.path())).unwrap();
    let mut session = store.start_session();
    let mut model = Model::new();
    let mut models = BTreeMap::new();
    let mut serials = BTreeMap::new();
    for (round, strategy) in strategies[..3].iter().enumerate() {
        write_round(&mut session, &mut model, round as u32, keys);
        write_round(&mut session, &mut model, round as u32 + 10, keys / 2);
        let serial = session.serial();
        session.suspend();
        let report = checkpoint(&store, *strategy);
        assert_eq!(report.session_points[&session.id()], serial);
        models.insert(report.version, model.clone());
        serials.insert(report.version, serial);
    }
    // Writes of the current version, never checkpointed.
    write_round(&mut session, &mut model, 20, keys);
    let before = store.version();
    session.suspend();
    let report = store.rollback(2).expect("rollback");
    assert_eq!(report.world_line, 1);
    assert_eq!(store.world_line(), 1);
    assert_eq!(report.to_version, 2);
    assert_eq!(report.discarded, (3, before));
    assert_eq!(report.next_version, before + 1);
    assert_eq!(report.deleted_checkpoints, vec![3]);
    assert_eq!(checkpoint_dirs(dir.path()), vec![1, 2]);
    // The session learns about it once, with its serial in checkpoint 2.
    let mut value = Vec::new();
    match session.read(b"anything", &mut value) {
        Err(EngineError::RolledBack {
            world_line: 1,
            surviving_serial,
        }) => assert_eq!(surviving_serial, serials[&2]),
        other => panic!("expected RolledBack, got {other:?}"),
    }
    assert_eq!(session.serial(), serials[&2]);
    assert_eq!(session.committed_serial(), serials[&2]);
    let mut model = models[&2].clone();
    assert_state(&mut session, &model, keys, "after rollback");
    // A second session sees the same, and never RolledBack.
    let mut other = store.start_session();
    assert_state(&mut other, &model, keys, "new session");
    drop(other);
    // PURGE waits for every protected session to refresh, like every phase: idle ones suspend.
    session.suspend();
    let purge = store.wait_for_purge(WAIT).unwrap().expect("a purge ran");
    assert!(purge.records_invalidated > 0, "{purge:?}");
    assert_state(&mut session, &model, keys, "after purge");
    // Writes after the rollback, a checkpoint, a reopen.
    write_round(&mut session, &mut model, 30, keys);
    assert_state(&mut session, &model, keys, "after new writes");
    session.suspend();
    let report = checkpoint(&store, strategies[3]);
    assert_eq!(report.version, before + 1);
    assert_eq!(checkpoint_dirs(dir.path()), vec![1, 2, before + 1]);
    drop(session);
    drop(store);
    let store = Store::open(config(dir.path())).unwrap();
    assert_eq!(store.recovery_info().unwrap().version, before + 1);
    let mut session = store.start_session();
    assert_state(&mut session, &model, keys, "reopened");
}

#[test]
fn single_threaded_rollback_fold_over_persian_snapshot() {
    single_threaded([
        Strategy::FoldOver,
        Strategy::Persian,
        Strategy::Snapshot,
        Strategy::FoldOver,
    ]);
}

#[test]
fn single_threaded_rollback_cpr_copy_blocking() {
    single_threaded([
        Strategy::CprCopy,
        Strategy::Blocking,
        Strategy::Persian,
        Strategy::Snapshot,
    ]);
    single_threaded([
        Strategy::Snapshot,
        Strategy::CprCopy,
        Strategy::Blocking,
        Strategy::Persian,
    ]);
}

/// Compaction under rollback_ready keeps what a rollback needs: many overwrites across
/// checkpoints in a small log, then a rollback to the oldest kept checkpoint.
#[test]
fn rollback_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.log_memory_bytes = 4 << 20;
    config.log_page_bytes = 16 << 10;
    config.keep_checkpoints = 2;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    let keys = 500;
    let mut model = Model::new();
    let mut models = BTreeMap::new();
    // Every round copies each written key once (a new version): about 100 bytes x 500 keys x
    // 100 rounds, several times the budget, so compaction must free pages many times.
    for round in 0..100u32 {
        write_round(&mut session, &mut model, round, keys);
        session.suspend();
        let report = checkpoint(&store, Strategy::ALL[round as usize % 5]);
        models.insert(report.version, model.clone());
    }
    assert!(store.log_memory_in_use_bytes() <= 4 << 20);
    let on_disk = checkpoint_dirs(dir.path());
    assert_eq!(on_disk.len(), 2);
    let target = on_disk[0];
    session.suspend();
    store.rollback(target).expect("rollback");
    assert!(matches!(
        session.read(b"x", &mut Vec::new()),
        Err(EngineError::RolledBack { .. })
    ));
    let mut model = models[&target].clone();
    assert_state(
        &mut session,
        &model,
        keys,
        "after rollback past compactions",
    );
    for round in 100..130u32 {
        write_round(&mut session, &mut model, round, keys);
    }
    assert_state(&mut session, &model, keys, "writes after");
    session.suspend();
    checkpoint(&store, Strategy::FoldOver);
    drop(session);
    drop(store);
    let store = Store::open(self::config(dir.path())).unwrap();
    let mut session = store.start_session();
    assert_state(&mut session, &model, keys, "reopened");
}

#[test]
fn rollback_edge_cases() {
    let dir = tempfile::tempdir().unwrap();
    // Without rollback_ready: refused.
    {
        let mut plain = config(&dir.path().join("plain"));
        plain.rollback_ready = false;
        let store = Store::open(plain).unwrap();
        let error = store.rollback(0).unwrap_err();
        assert!(
            matches!(&error, EngineError::InvalidArgument(text) if text.contains("rollback_ready")),
            "{error}"
        );
    }
    let store = Store::open(config(dir.path())).unwrap();
    let mut session = store.start_session();
    let keys = 100;
    let mut model = Model::new();
    let mut models = BTreeMap::new();
    let mut serials = BTreeMap::new();
    for round in 0..3 {
        write_round(&mut session, &mut model, round, keys);
        session.suspend();
        let version = checkpoint(&store, Strategy::Persian).version;
        models.insert(version, model.clone());
        serials.insert(version, session.serial());
    }
    // A checkpoint still running when the rollback is called is stopped (or, if it published
    // first, deleted): either way its token reports that a rollback discarded it.
    write_round(&mut session, &mut model, 5, keys);
    session.suspend();
    let running = store.checkpoint(Strategy::Snapshot).unwrap();
    let report = store.rollback(3).unwrap();
    assert!(
        report.deleted_checkpoints.is_empty()
            || report.deleted_checkpoints == vec![running.version],
        "{report:?}"
    );
    assert!(matches!(
        store.wait_for_commit(running, WAIT),
        Err(EngineError::CheckpointAborted { .. })
    ));
    assert!(
        !checkpoint_dirs(dir.path()).contains(&running.version),
        "nothing of the discarded version is published"
    );
    assert!(matches!(
        session.read(b"k", &mut Vec::new()),
        Err(EngineError::RolledBack { world_line: 1, .. })
    ));
    model = models[&3].clone();
    assert_state(
        &mut session,
        &model,
        keys,
        "after a rollback over a running checkpoint",
    );
    session.suspend();
    // Unknown versions.
    for bad in [7, store.version()] {
        let error = store.rollback(bad).unwrap_err();
        assert!(matches!(error, EngineError::InvalidArgument(_)), "{error}");
    }
    // Two rollbacks in a row: to 3 (nothing lost but the current version), then to 1.
    write_round(&mut session, &mut model, 9, keys);
    session.suspend();
    store.rollback(3).unwrap();
    store.rollback(1).unwrap();
    assert_eq!(store.world_line(), 3);
    match session.read(b"k", &mut Vec::new()) {
        Err(EngineError::RolledBack {
            world_line: 3,
            surviving_serial,
        }) => assert_eq!(surviving_serial, serials[&1]),
        other => panic!("expected one RolledBack for both, got {other:?}"),
    }
    let mut model = models[&1].clone();
    assert_state(&mut session, &model, keys, "after two rollbacks");
    write_round(&mut session, &mut model, 11, keys);
    session.suspend();
    let after = checkpoint(&store, Strategy::FoldOver).version;
    // The floor: rollback below it is refused, naming both versions.
    store.set_rollback_floor(after);
    let error = store.rollback(1).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("v1") && text.contains(&format!("v{after}")),
        "{text}"
    );
    // Rollback to 0 (below a floor of 0 is impossible, so a fresh store): empty.
    let dir0 = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir0.path())).unwrap();
    let mut session = store.start_session();
    let mut model = Model::new();
    write_round(&mut session, &mut model, 0, keys);
    session.suspend();
    checkpoint(&store, Strategy::Snapshot);
    write_round(&mut session, &mut model, 1, keys);
    session.suspend();
    let report = store.rollback(0).unwrap();
    assert_eq!(report.deleted_checkpoints, vec![1]);
    assert!(matches!(
        session.upsert(b"k", b"v"),
        Err(EngineError::RolledBack {
            surviving_serial: 0,
            ..
        })
    ));
    let mut model = Model::new();
    assert_state(&mut session, &model, keys, "after rollback to 0");
    write_round(&mut session, &mut model, 2, keys);
    assert_state(&mut session, &model, keys, "writes after a rollback to 0");
}

/// PURGE's log pass starts where the discarded versions can start (the tail when the store first
/// ran a version above the target), not at the begin address: after a long history, a rollback
/// to the newest checkpoint scans only what was written since. Checked through the report's
/// counts, exactly: every upsert below writes one new record (a new key, or a key whose record
/// is of an older version: `rollback_ready` copies), and the log budget is far above what
/// compaction starts at, so no copies. Debug builds also check, inside PURGE, that no record
/// below the bound is of a discarded version. Also after a restart (the bound of the recovered
/// version is the tail after loading) and for a rollback further back (a lower bound).
#[test]
fn purge_scans_only_the_versions_it_discards() {
    let keys = (prefixkv_testkit::env_count("ROLLBACK_KEYS", 16_384) / 8).max(64) as u32;
    let rounds = 24u32;
    let recent = keys / 16;
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut config = config(dir.path());
        config.index_buckets = (keys as usize).next_power_of_two();
        // Far above twice the whole history (about 40 bytes a record): no compaction.
        config.log_memory_bytes = (u64::from(keys) * u64::from(rounds + 4) * 256).max(64 << 20);
        config.log_page_bytes = 256 << 10;
        config
    };
    let store = Store::open(config()).unwrap();
    let mut session = store.start_session();
    let mut model = Model::new();
    let mut models = BTreeMap::new();
    let upsert_all = |session: &mut Session, model: &mut Model, round: u32, count: u32| {
        for index in 0..count {
            let value = format!("r{round:03}k{index:07}");
            session.upsert(&key(index), value.as_bytes()).unwrap();
            model.insert(key(index), value.into_bytes());
        }
    };
    // The long history: every key rewritten in every version.
    for round in 0..rounds {
        upsert_all(&mut session, &mut model, round, keys);
        session.suspend();
        let report = checkpoint(&store, Strategy::ALL[round as usize % 5]);
        models.insert(report.version, model.clone());
    }
    let on_disk = checkpoint_dirs(dir.path());
    let newest = *on_disk.last().unwrap();
    // A few writes after the newest checkpoint, then a rollback to it.
    upsert_all(&mut session, &mut model, 100, recent);
    session.suspend();
    store.rollback(newest).unwrap();
    let purge = store.wait_for_purge(WAIT).unwrap().unwrap();
    assert_eq!(purge.versions, (newest + 1, newest + 1), "{purge:?}");
    assert_eq!(purge.records_invalidated, u64::from(recent), "{purge:?}");
    assert_eq!(
        purge.records_scanned,
        u64::from(recent),
        "only the records written since the checkpoint's version switch: {purge:?}"
    );
    assert!(matches!(
        session.read(b"x", &mut Vec::new()),
        Err(EngineError::RolledBack { .. })
    ));
    let mut model = models[&newest].clone();
    assert_state(
        &mut session,
        &model,
        keys,
        "after the rollback to the newest",
    );
    // Further back: the oldest checkpoint on disk. Its discarded versions are the rounds after it
    // (plus the records the first rollback flagged, scanned again but not counted).
    let oldest = on_disk[0];
    let later_rounds = u64::try_from(on_disk.len() - 1).unwrap();
    session.suspend();
    store.rollback(oldest).unwrap();
    let purge = store.wait_for_purge(WAIT).unwrap().unwrap();
    assert_eq!(
        purge.records_invalidated,
        later_rounds * u64::from(keys),
        "{purge:?}"
    );
    assert_eq!(
        purge.records_scanned,
        later_rounds * u64::from(keys) + u64::from(recent),
        "{purge:?}"
    );
    assert!(matches!(
        session.read(b"x", &mut Vec::new()),
        Err(EngineError::RolledBack { .. })
    ));
    model = models[&oldest].clone();
    assert_state(
        &mut session,
        &model,
        keys,
        "after the rollback to the oldest",
    );
    // A restart: recovery loads the newest checkpoint (one record a key), a few writes, a
    // rollback to the recovered version scans only those writes.
    upsert_all(&mut session, &mut model, 200, keys);
    session.suspend();
    let recovered = checkpoint(&store, Strategy::Snapshot).version;
    drop(session);
    drop(store);
    let store = Store::open(config()).unwrap();
    assert_eq!(store.recovery_info().unwrap().version, recovered);
    let mut session = store.start_session();
    let saved = model.clone();
    upsert_all(&mut session, &mut model, 300, recent);
    session.suspend();
    store.rollback(recovered).unwrap();
    let purge = store.wait_for_purge(WAIT).unwrap().unwrap();
    assert_eq!(purge.records_invalidated, u64::from(recent), "{purge:?}");
    assert_eq!(purge.records_scanned, u64::from(recent), "{purge:?}");
    assert!(purge.scanned_from > 0, "{purge:?}");
    let mut session = {
        drop(session);
        store.start_session()
    };
    assert_state(
        &mut session,
        &saved,
        keys,
        "after a rollback to the recovered version",
    );
}

// ---------------------------------------------------------------------------------------------
// The concurrent prefix oracle.

/// What one writer thread recorded, from what it was told only.
#[derive(Default)]
struct WriterLog {
    /// Its acknowledged operations that survive every rollback it was told of, in serial order:
    /// (world-line, serial, key index, and for a read-modify-write that read something other
    /// than the writer's own last surviving write of the key, what it read and expected). A
    /// `RolledBack` with surviving serial `s` drops the entries above `s`: they were discarded
    /// (the serials after it restart at `s + 1`, so the history stays in serial order).
    history: Vec<(u64, u64, u32, Option<String>)>,
    /// Each `RolledBack`: (world-line, surviving serial, last serial issued before).
    thrown: Vec<(u64, u64, u64)>,
}

fn encode(world: u64, serial: u64) -> [u8; 16] {
    let mut value = [0; 16];
    value[..8].copy_from_slice(&world.to_le_bytes());
    value[8..].copy_from_slice(&serial.to_le_bytes());
    value
}

fn writer_key(writer: usize, index: u32) -> [u8; 8] {
    (((writer as u64) << 32) | index as u64).to_be_bytes()
}

/// Checks the writers' logs against the store (and against the controller's bounds): the prefix
/// oracle. `bounds[w]`: each writer's bounds on its CPR point in the target of the rollback that
/// began world-line `w`. `Err` says what differs.
fn verify(
    store: &Arc<Store>,
    logs: &[WriterLog],
    bounds: &BTreeMap<u64, Vec<(u64, u64)>>,
    keys_per_writer: u32,
) -> Result<(), String> {
    let final_world = store.world_line();
    let mut reader = store.start_session();
    let mut value = Vec::new();
    let mut problems = Vec::new();
    for (writer, log) in logs.iter().enumerate() {
        // Told once per world-line it adopted (one for several that came before its next
        // operation), in order, the last being the store's.
        let worlds: Vec<u64> = log.thrown.iter().map(|thrown| thrown.0).collect();
        if worlds.last() != Some(&final_world) || worlds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("writer {writer} saw RolledBack {:?}", log.thrown));
        }
        let mismatches: Vec<&String> = log
            .history
            .iter()
            .filter_map(|entry| entry.3.as_ref())
            .collect();
        if let Some(first) = mismatches.first() {
            problems.push(format!(
                "writer {writer}: {} read-modify-writes saw a value other than its last surviving \
                 write, first: {first}",
                mismatches.len()
            ));
        }
        for &(world, surviving, last_issued) in &log.thrown {
            let (low, high) = bounds[&world][writer];
            if surviving < low || surviving > high || surviving > last_issued {
                problems.push(format!(
                    "writer {writer}: surviving serial {surviving} of world-line {world} outside \
                     [{low}, {high}] (the checkpoint's bounds) or above the last issued \
                     {last_issued}"
                ));
            }
        }
        // Expected: the last surviving acknowledged write of each key.
        let mut expected: BTreeMap<u32, [u8; 16]> = BTreeMap::new();
        for &(world, serial, index, _) in &log.history {
            expected.insert(index, encode(world, serial));
        }
        let mut wrong = Vec::new();
        for index in 0..keys_per_writer {
            let found = reader
                .read(&writer_key(writer, index), &mut value)
                .map_err(|error| error.to_string())?;
            let want = expected.get(&index);
            if found.then_some(&value[..]) != want.map(|v| &v[..]) {
                wrong.push(format!(
                    "key {index}: store has {:?}, acknowledged surviving writes say {want:?}",
                    found.then(|| value.clone())
                ));
            }
        }
        if let Some(first) = wrong.first() {
            let surviving = log.thrown.last().map_or(0, |thrown| thrown.1);
            problems.push(format!(
                "writer {writer} (surviving serial {surviving}): {} keys differ from the final \
                 state, first {first}",
                wrong.len()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// What the writers and the controller share: only what the writers were told.
struct Counters {
    stop: AtomicBool,
    /// Operations acknowledged, all writers.
    completed: AtomicU64,
    /// Per writer: the last serial acknowledged (in its current world-line).
    acked: Vec<AtomicU64>,
    /// Per writer: the last serial issued.
    issued: Vec<AtomicU64>,
}

/// One writer: upserts and rmws over its own keys until stopped, recording what it was told.
fn run_writer(
    store: &Arc<Store>,
    writer: usize,
    keys_per_writer: u32,
    counters: &Counters,
) -> WriterLog {
    let mut session = store.start_session();
    let mut log = WriterLog::default();
    let mut world = 0;
    let mut step = 0u64;
    // What each of this writer's keys holds, by its own acknowledgements (world-line,
    // serial): every other rmw checks the value it reads against it, online.
    let mut current: Vec<Option<(u64, u64)>> = vec![None; keys_per_writer as usize];
    while !counters.stop.load(Ordering::Relaxed) {
        step += 1;
        // A stride over the writer's keys: every key written, in a scrambled order.
        // After the rollback only the lower half, so that the upper half keeps the
        // state the rollback exposed for the oracle to check.
        let range = if world == 0 {
            keys_per_writer
        } else {
            keys_per_writer.div_ceil(2)
        };
        let index = ((step * 7919) % range as u64) as u32;
        let serial = session.serial() + 1;
        counters.issued[writer].store(serial, Ordering::SeqCst);
        let key = writer_key(writer, index);
        let result = if step.is_multiple_of(2) {
            let mut seen = None;
            session
                .rmw(&key, |old, new| {
                    seen = Some(old.map(<[u8]>::to_vec));
                    new.extend_from_slice(&encode(world, serial));
                })
                .map(|()| seen)
        } else {
            session.upsert(&key, &encode(world, serial)).map(|()| None)
        };
        match result {
            Ok(seen) => {
                let want = current[index as usize].map(|(w, s)| encode(w, s).to_vec());
                let mut mismatch = None;
                if let Some(old) = seen.filter(|old| *old != want) {
                    let decode = |v: &[u8]| {
                        let word = |r: std::ops::Range<usize>| {
                            u64::from_le_bytes(v[r].try_into().unwrap())
                        };
                        (word(0..8), word(8..16))
                    };
                    let message = format!(
                        "world {world} serial {serial} key {index}: read (world, \
                             serial) {:?}, expected {:?}; thrown {:?}",
                        old.as_deref().map(decode),
                        want.as_deref().map(decode),
                        log.thrown
                    );
                    mismatch = Some(message);
                }
                current[index as usize] = Some((world, serial));
                log.history.push((world, serial, index, mismatch));
                counters.acked[writer].store(serial, Ordering::SeqCst);
                counters.completed.fetch_add(1, Ordering::Relaxed);
            }
            Err(EngineError::RolledBack {
                world_line,
                surviving_serial,
            }) => {
                log.thrown.push((world_line, surviving_serial, serial - 1));
                // Operations after the surviving serial are discarded, what they read
                // included: one in flight during THROW may have seen part of the
                // restored state (a compaction copy of an older version above its own
                // discarded record), which is allowed.
                while log
                    .history
                    .last()
                    .is_some_and(|entry| entry.1 > surviving_serial)
                {
                    log.history.pop();
                }
                // The state the rollback restored, by this writer's own record.
                current.iter_mut().for_each(|slot| *slot = None);
                for &(w, s, i, _) in &log.history {
                    current[i as usize] = Some((w, s));
                }
                world = world_line;
                assert_eq!(session.serial(), surviving_serial);
                counters.acked[writer].store(surviving_serial, Ordering::SeqCst);
            }
            Err(error) => panic!("writer {writer}: {error}"),
        }
        if step.is_multiple_of(64) {
            // Let the other writers and the controller in (2 cores).
            std::thread::yield_now();
        }
    }
    log
}

struct Outcome {
    result: Result<(), String>,
    /// Operations completed from the (first) rollback call to the end of the last PURGE.
    ops_during_rollback: u64,
    /// Nested: operations completed while the first PURGE was held, before the second rollback.
    ops_between: u64,
    /// Nested: whether the first PURGE still ran when the second rollback was called.
    first_purge_running: bool,
    purge: prefixkv_engine::PurgeReport,
    throw_ms: f64,
}

/// What a run does to the engine.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sabotage {
    None,
    /// `tamper_rollback_for_tests`: the discarded versions stay visible.
    SkipInvalidation,
    /// `tamper_purge_bound_for_tests`: PURGE scans only from its THROW's tail.
    PurgeBound,
}

/// Whether a run has a second rollback, to an older checkpoint, as in the paper's nested failure
/// pair.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Nesting {
    None,
    /// While the first one's PURGE certainly runs: held after its log pass by the test hook, with
    /// requests served meanwhile. A held PURGE holds the maintenance lock (no compaction), so
    /// only with a log that has room for the writes meanwhile.
    Held,
    /// Right after the first rollback returns: its PURGE is stopped wherever it is (waiting for
    /// the maintenance lock, in its log pass, in its index pass) or has just ended.
    Immediate,
}

/// The prefix oracle's run.
fn concurrent(
    strategy: Strategy,
    sabotage: Sabotage,
    small_log: bool,
    nesting: Nesting,
) -> Outcome {
    let nested = nesting != Nesting::None;
    let held = nesting == Nesting::Held;
    assert!(!(held && small_log), "a held PURGE blocks compaction");
    let total_keys = prefixkv_testkit::env_count("ROLLBACK_KEYS", 16_384);
    let seconds = prefixkv_testkit::env_count("ROLLBACK_SECONDS", 1) as f64;
    let writers = 3usize;
    let keys_per_writer = (total_keys / writers as u64).max(1) as u32;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.index_buckets = (total_keys as usize / 2).next_power_of_two().max(1 << 12);
    config.log_memory_bytes = (total_keys * 64 * 12).max(32 << 20);
    config.log_page_bytes = if total_keys > 100_000 {
        1 << 20
    } else {
        64 << 10
    };
    if small_log {
        // About 8 times the live data: compaction runs all the time, and must keep the versions
        // of the three checkpoints on disk.
        config.log_memory_bytes = (total_keys * 64 * 8).max(8 << 20);
        config.log_page_bytes = if total_keys > 100_000 {
            256 << 10
        } else {
            16 << 10
        };
    }
    config.keep_checkpoints = 3;
    let store = Store::open(config).unwrap();
    store.tamper_rollback_for_tests(sabotage == Sabotage::SkipInvalidation);
    store.tamper_purge_bound_for_tests(sabotage == Sabotage::PurgeBound);
    let counters = Arc::new(Counters {
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        acked: (0..writers).map(|_| AtomicU64::new(0)).collect(),
        issued: (0..writers).map(|_| AtomicU64::new(0)).collect(),
    });
    let handles: Vec<_> = (0..writers)
        .map(|writer| {
            let (store, counters) = (store.clone(), counters.clone());
            std::thread::spawn(move || run_writer(&store, writer, keys_per_writer, &counters))
        })
        .collect();
    let (acked, issued, completed) = (&counters.acked, &counters.issued, &counters.completed);
    // The controller: checkpoints every few ms, each with each writer's bounds, then a rollback
    // at a seeded moment, then more checkpoints.
    let seed = prefixkv_testkit::env_count("ROLLBACK_SEED", 1);
    let mut rng_state =
        (strategy as u64 + 1 + seed * 16).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ total_keys;
    let mut next = || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state
    };
    // Every key written once before the first checkpoint (the stride visits each of them).
    let start = Instant::now();
    while acked
        .iter()
        .any(|a| a.load(Ordering::SeqCst) < keys_per_writer as u64)
    {
        assert!(
            start.elapsed() < WAIT,
            "writers too slow to fill their keys"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let checkpoints_before = 4 + next() % 4;
    let mut bounds: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for _ in 0..checkpoints_before {
        std::thread::sleep(Duration::from_millis(2 + next() % 6));
        let low: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        let report = checkpoint(&store, strategy);
        let high: Vec<u64> = issued.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        bounds.insert(report.version, low.into_iter().zip(high).collect());
    }
    // The second-newest published checkpoint: the newest is deleted. Nested: then the oldest
    // (of three on disk), deleting the first target.
    let on_disk: Vec<u64> = bounds.keys().rev().take(3).copied().collect();
    let target = on_disk[1];
    let mut by_world = BTreeMap::from([(1, bounds[&target].clone())]);
    std::thread::sleep(Duration::from_millis(next() % 5));
    store.hold_purge_for_tests(held);
    let before = completed.load(Ordering::SeqCst);
    let report = store.rollback(target).expect("rollback");
    assert_eq!(report.deleted_checkpoints.len(), 1);
    let mut ops_between = 0;
    let mut throw_ms = report.throw_ms;
    if held {
        // Requests are served while the first PURGE runs (held: it cannot end by itself).
        let first_done = completed.load(Ordering::SeqCst);
        let deadline = Instant::now() + WAIT;
        while completed.load(Ordering::SeqCst) < first_done + 2_000 {
            assert!(Instant::now() < deadline, "no requests served during PURGE");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            store.purge_running(),
            "the first PURGE is held: still running"
        );
        ops_between = completed.load(Ordering::SeqCst) - first_done;
    }
    let mut first_purge_running = false;
    if nested {
        first_purge_running = store.purge_running();
        let second = on_disk[2];
        // Returns without waiting for the held PURGE: it takes over.
        let report = store.rollback(second).expect("nested rollback");
        assert_eq!(report.deleted_checkpoints, vec![target]);
        assert_eq!(report.world_line, 2);
        by_world.insert(2, bounds[&second].clone());
        throw_ms = report.throw_ms;
        store.hold_purge_for_tests(false);
    }
    let purge = store.wait_for_purge(WAIT).unwrap().unwrap();
    let ops_during_rollback = completed.load(Ordering::SeqCst) - before;
    assert_eq!(
        purge.world_line,
        store.world_line(),
        "the last PURGE reports"
    );
    let seconds = if sabotage == Sabotage::SkipInvalidation {
        0.0
    } else {
        seconds
    };
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        checkpoint(&store, strategy);
    }
    counters.stop.store(true, Ordering::SeqCst);
    let logs: Vec<WriterLog> = handles
        .into_iter()
        .map(|handle| handle.join().unwrap())
        .collect();
    let result = verify(&store, &logs, &by_world, keys_per_writer);
    if held && result.is_ok() {
        // Both rollbacks were really seen apart: a writer that operated between them was told
        // of both (one told of world-line 2 only is checked too, but would not show nesting).
        let told_twice = logs.iter().filter(|log| log.thrown.len() == 2).count();
        assert!(
            told_twice > 0,
            "no writer operated between the two rollbacks"
        );
    }
    Outcome {
        result,
        ops_during_rollback,
        ops_between,
        first_purge_running,
        purge,
        throw_ms,
    }
}

fn concurrent_passes(strategy: Strategy, small_log: bool, nesting: Nesting) {
    let outcome = concurrent(strategy, Sabotage::None, small_log, nesting);
    eprintln!(
        "{strategy}{}: throw {:.3} ms, purge {:.3} ms ({} records scanned of [{:#x}, {:#x})), {} \
         operations completed from the rollback call to the end of PURGE ({} while the first \
         PURGE was held; it still ran at the second call: {})",
        match nesting {
            Nesting::None => "",
            Nesting::Held => " nested (held)",
            Nesting::Immediate => " nested (immediate)",
        },
        outcome.throw_ms,
        outcome.purge.duration.as_secs_f64() * 1e3,
        outcome.purge.records_scanned,
        outcome.purge.scanned_from,
        outcome.purge.scanned_until,
        outcome.ops_during_rollback,
        outcome.ops_between,
        outcome.first_purge_running,
    );
    outcome.result.expect("prefix oracle");
    assert!(
        outcome.ops_during_rollback > 0,
        "no request completed while the rollback ran"
    );
}

#[test]
fn concurrent_rollback_fold_over() {
    concurrent_passes(Strategy::FoldOver, false, Nesting::None);
}

#[test]
fn concurrent_rollback_persian() {
    concurrent_passes(Strategy::Persian, false, Nesting::None);
}

/// A log budget a few times the live data: compaction runs during the whole test, before,
/// during and after the rollback (snapshot and cpr-copy images).
#[test]
fn concurrent_rollback_under_compaction() {
    concurrent_passes(Strategy::Snapshot, true, Nesting::None);
    concurrent_passes(Strategy::CprCopy, true, Nesting::None);
}

/// The nested failure pair: a second rollback, further back, while the first one's PURGE runs
/// (held by the test hook after flagging, before unlinking). It must not wait for that PURGE; its
/// own PURGE covers both ranges; the oracle checks both `RolledBack`s of every writer against
/// their checkpoints' bounds and the final state against the surviving acknowledged writes.
#[test]
fn nested_rollback_while_purge_runs() {
    concurrent_passes(Strategy::FoldOver, false, Nesting::Held);
    concurrent_passes(Strategy::Persian, false, Nesting::Held);
}

/// The nested pair without the hook: the second rollback right after the first returns, so the
/// first PURGE is stopped at whatever point it reached (or has ended); under compaction too.
#[test]
fn nested_rollback_right_after_the_first() {
    concurrent_passes(Strategy::Snapshot, true, Nesting::Immediate);
    concurrent_passes(Strategy::FoldOver, false, Nesting::Immediate);
}

#[test]
fn the_oracle_fails_when_the_rollback_skips_invalidation() {
    let outcome = concurrent(
        Strategy::Persian,
        Sabotage::SkipInvalidation,
        false,
        Nesting::None,
    );
    let error = outcome
        .result
        .expect_err("the oracle must catch a rollback that leaves discarded writes visible");
    eprintln!("the oracle caught it:\n{error}");
    // Both checks see it: the online read-modify-writes and the final state.
    assert!(error.contains("read-modify-writes"), "{error}");
    assert!(error.contains("differ from the final state"), "{error}");
}

/// A PURGE that scans less than the sound bound (only from its THROW's tail) leaves discarded
/// records unflagged; once the range is forgotten they are visible again, and the oracle sees the
/// keys no writer touched after the rollbacks holding discarded values.
#[test]
fn the_oracle_fails_when_purge_scans_too_little() {
    let outcome = concurrent(
        Strategy::FoldOver,
        Sabotage::PurgeBound,
        false,
        Nesting::Held,
    );
    let error = outcome
        .result
        .expect_err("the oracle must catch a PURGE that leaves discarded records unflagged");
    eprintln!("the oracle caught it:\n{error}");
    assert!(error.contains("differ from the final state"), "{error}");
}
