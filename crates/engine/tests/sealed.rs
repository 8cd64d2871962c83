//! Seals under concurrent writers, with the checkpoints written behind as deltas and whole
//! images (`Store::seal`, `Store::checkpoint_sealed`), checked against what the writers know of
//! their own operations.
//!
//! Writer `s` upserts `w{s}:{i % keys}` = `i` for its serials `i = 1, 2, ...`; the sealer seals
//! every few hundred microseconds, noting each writer's acknowledged serial just before the seal;
//! a persister writes each sealed version's checkpoint in order (a whole image every fourth, a
//! delta on the previous one otherwise). Afterwards, for sampled versions, only the checkpoints up
//! to that version are copied to a fresh directory and opened: each writer's recovered commit
//! point `p` must be at least the serial acknowledged before that seal and at most what ran, and
//! its keys must hold exactly the prefix `1..=p` of its operations.
//!
//! A second test rolls back to a delta with versions above it written, sealed and current, then
//! writes a delta on the target and restarts: the chain must give exactly the surviving history.
//!
//! `ENGINE_SEALED_ROUNDS` (default 300) seals per run; `ENGINE_SEALED_KEYS` (default 64) keys
//! per writer (each writer writes all of them once before the first seal, so a large value makes
//! every image hold that many keys; the log budget grows with it); `ENGINE_SEALED_FULL_EVERY`
//! (default 4) how often a whole image is written. Writers pause while more than
//! [`MAX_UNWRITTEN`] sealed versions wait (the log keeps them all in memory).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use prefixkv_engine::{Scope, SessionId, Store, StoreConfig};
use prefixkv_testkit::rng::env_count;

const WRITERS: usize = 3;

/// Sealed, unwritten versions beyond which writers pause.
const MAX_UNWRITTEN: usize = 4;

/// Keys per writer (`ENGINE_SEALED_KEYS`).
fn keys() -> u64 {
    static KEYS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *KEYS.get_or_init(|| env_count("ENGINE_SEALED_KEYS", 64).max(1))
}

fn config(dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    let keys = keys() * WRITERS as u64;
    config.index_buckets = (keys as usize).next_power_of_two().max(1 << 12);
    // Room for a few versions of every key (records of 40 bytes and more).
    config.log_memory_bytes = (keys * 512).max(64 << 20);
    config.rollback_ready = true;
    config.keep_checkpoints = usize::MAX;
    config
}

fn key(writer: usize, serial: u64) -> Vec<u8> {
    format!("w{writer}:{}", serial % keys()).into_bytes()
}

/// One published checkpoint: its version and each writer's serial acknowledged before its seal.
#[derive(Clone, Debug)]
struct Published {
    version: u64,
    acknowledged: [u64; WRITERS],
}

/// Checks the store recovered at `version` against the writers' own operations: `ids` maps engine
/// session ids to writers, `issued` is how far each writer got.
fn check(
    store: &Arc<Store>,
    published: &Published,
    ids: &BTreeMap<SessionId, usize>,
    issued: &[u64; WRITERS],
) -> Result<(), String> {
    let info = store
        .recovery_info()
        .ok_or_else(|| format!("v{}: nothing recovered", published.version))?;
    if info.version != published.version {
        return Err(format!(
            "recovered v{} instead of v{}",
            info.version, published.version
        ));
    }
    let mut reader = store.start_session();
    let mut value = Vec::new();
    for (id, &writer) in ids {
        let point = info.session_commit_points.get(id).copied().unwrap_or(0);
        if point < published.acknowledged[writer] || point > issued[writer] {
            return Err(format!(
                "v{}: writer {writer}'s point {point} is outside [{}, {}]",
                published.version, published.acknowledged[writer], issued[writer]
            ));
        }
        let keys = keys();
        for slot in 0..keys {
            // The last serial <= point that wrote this key, if any.
            let expected = (point >= slot.max(1))
                .then(|| point - (point + keys - slot) % keys)
                .filter(|&serial| serial >= 1);
            let found = reader
                .read(&key(writer, slot), &mut value)
                .map_err(|e| e.to_string())?
                .then(|| u64::from_le_bytes(value[..8].try_into().expect("8 bytes")));
            if found != expected {
                return Err(format!(
                    "v{}: writer {writer} key {slot}: found {found:?}, its prefix up to {point} \
                     wrote {expected:?}",
                    published.version
                ));
            }
        }
    }
    Ok(())
}

/// Links (or, across file systems, copies) the checkpoints at or below `version` into a fresh
/// store directory: recovery only reads them.
fn copy_up_to(from: &Path, version: u64, to: &Path) {
    let source = from.join("checkpoints");
    let target = to.join("checkpoints");
    std::fs::create_dir_all(&target).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let Some(number) = name.strip_prefix('v').and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        if number > version {
            continue;
        }
        let dir = target.join(&name);
        std::fs::create_dir(&dir).unwrap();
        for file in std::fs::read_dir(entry.path()).unwrap() {
            let file = file.unwrap();
            let target = dir.join(file.file_name());
            if std::fs::hard_link(file.path(), &target).is_err() {
                std::fs::copy(file.path(), &target).unwrap();
            }
        }
    }
}

#[test]
fn sealed_versions_written_behind_recover_each_writers_prefix() {
    let rounds = env_count("ENGINE_SEALED_ROUNDS", 300);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<[AtomicU64; WRITERS]> = Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
    let (id_sender, id_receiver) = mpsc::channel();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (store, stop, acked, ids) = (
                Arc::clone(&store),
                Arc::clone(&stop),
                Arc::clone(&acked),
                id_sender.clone(),
            );
            std::thread::spawn(move || {
                let mut session = store.start_session();
                ids.send((session.id(), writer)).unwrap();
                let mut serial = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if serial.is_multiple_of(1024) {
                        session.suspend();
                        while store.sealed_versions().len() > MAX_UNWRITTEN
                            && !stop.load(Ordering::Relaxed)
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    serial += 1;
                    session
                        .upsert(&key(writer, serial), &serial.to_le_bytes())
                        .unwrap();
                    assert_eq!(session.serial(), serial);
                    acked[writer].store(serial, Ordering::SeqCst);
                }
                session.suspend();
                // Kept open: a dropped session leaves the manifests once a checkpoint holds all
                // of it, and the check needs every writer's point.
                (serial, session)
            })
        })
        .collect();
    drop(id_sender);
    let ids: BTreeMap<SessionId, usize> = id_receiver.iter().take(WRITERS).collect();
    // Every key written once before the first seal, so every image holds all of them.
    while (0..WRITERS).any(|writer| acked[writer].load(Ordering::SeqCst) < keys()) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The persister: each sealed version's checkpoint, in seal order.
    let (jobs, queue) = mpsc::channel::<Published>();
    let full_every = env_count("ENGINE_SEALED_FULL_EVERY", 4).max(1) as usize;
    let persister = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            let mut published = Vec::new();
            let mut tip = None;
            for (written, job) in queue.into_iter().enumerate() {
                let scope = match tip {
                    Some(base) if written % full_every != 0 => Scope::Since(base),
                    _ => Scope::Full,
                };
                let token = store
                    .checkpoint_sealed(job.version, scope, Vec::new())
                    .unwrap();
                store
                    .wait_for_commit(token, Duration::from_secs(60))
                    .unwrap();
                tip = Some(job.version);
                // The check recovers from disk, never in memory: compaction may drop what only
                // versions below the newest checkpoint needed (bounded memory at any length).
                store.set_rollback_floor(job.version);
                published.push(job);
            }
            published
        })
    };
    for round in 0..rounds {
        std::thread::sleep(Duration::from_micros(200 + 100 * (round % 7)));
        let acknowledged = std::array::from_fn(|writer| acked[writer].load(Ordering::SeqCst));
        let version = store.seal(Duration::from_secs(10)).unwrap();
        jobs.send(Published {
            version,
            acknowledged,
        })
        .unwrap();
    }
    drop(jobs);
    let published = persister.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let finished: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let issued: [u64; WRITERS] = std::array::from_fn(|writer| finished[writer].0);
    assert_eq!(published.len() as u64, rounds);
    drop(finished);
    drop(store);
    // The newest versions, the first, and a spread in between (every delta position is hit).
    let mut sampled: Vec<&Published> = published.iter().rev().take(6).collect();
    sampled.extend(
        published
            .iter()
            .step_by(published.len().div_ceil(10).max(1)),
    );
    for entry in sampled {
        let copy = tempfile::tempdir().unwrap();
        copy_up_to(dir.path(), entry.version, copy.path());
        let store = Store::open(config(copy.path())).unwrap();
        check(&store, entry, &ids, &issued).unwrap();
    }
    // The check is not vacuous: a changed value in the recovered image is caught.
    let newest = published.last().unwrap();
    let copy = tempfile::tempdir().unwrap();
    copy_up_to(dir.path(), newest.version, copy.path());
    let store = Store::open(config(copy.path())).unwrap();
    store
        .start_session()
        .upsert(&key(0, 1), &u64::MAX.to_le_bytes())
        .unwrap();
    let problem = check(&store, newest, &ids, &issued).unwrap_err();
    assert!(problem.contains("writer 0 key 1"), "{problem}");
}

#[test]
fn seals_and_deltas_refuse_what_they_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let mut plain = config(dir.path());
    plain.rollback_ready = false;
    let store = Store::open(plain).unwrap();
    let error = store.seal(Duration::from_secs(1)).unwrap_err();
    assert!(error.to_string().contains("rollback_ready"), "{error}");
    drop(store);

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).unwrap();
    store.start_session().upsert(b"k", b"v").unwrap();
    let error = store
        .checkpoint_sealed(1, Scope::Full, Vec::new())
        .unwrap_err();
    assert!(error.to_string().contains("not a sealed"), "{error}");
    let first = store.seal(Duration::from_secs(1)).unwrap();
    let second = store.seal(Duration::from_secs(1)).unwrap();
    assert_eq!((first, second), (1, 2));
    let error = store
        .checkpoint_sealed(first, Scope::Since(first), Vec::new())
        .unwrap_err();
    assert!(error.to_string().contains("needs a base"), "{error}");
    let token = store
        .checkpoint_sealed(first, Scope::Full, Vec::new())
        .unwrap();
    store
        .wait_for_commit(token, Duration::from_secs(10))
        .unwrap();
    // The sealed version still waiting keeps its own state: a delta of it, on the first.
    let token = store
        .checkpoint_sealed(second, Scope::Since(first), Vec::new())
        .unwrap();
    store
        .wait_for_commit(token, Duration::from_secs(10))
        .unwrap();
    assert!(store.sealed_versions().is_empty());
    // Publishing a version retires the older sealed ones: none is left to write.
    let error = store
        .checkpoint_sealed(first, Scope::Full, Vec::new())
        .unwrap_err();
    assert!(error.to_string().contains("not a sealed"), "{error}");
}

/// Writes `value` to every key of `keys` on `session` and into `model`.
fn write_all(
    session: &mut prefixkv_engine::Session,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    keys: std::ops::Range<u32>,
    value: &str,
) {
    for key in keys {
        let (key, value) = (
            format!("k{key}").into_bytes(),
            format!("{value}{key}").into_bytes(),
        );
        session.upsert(&key, &value).unwrap();
        model.insert(key, value);
    }
    session.suspend();
}

/// Every key of `model` (and no key of `absent`) reads as `model` says.
fn assert_state(
    store: &Arc<Store>,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    what: &str,
) -> Result<(), String> {
    let mut reader = store.start_session();
    let mut value = Vec::new();
    for key in 0..200u32 {
        let key = format!("k{key}").into_bytes();
        let found = reader
            .read(&key, &mut value)
            .unwrap()
            .then(|| value.clone());
        if found.as_ref() != model.get(&key) {
            return Err(format!(
                "{what}: {} reads {:?}, expected {:?}",
                String::from_utf8_lossy(&key),
                found.map(|v| String::from_utf8_lossy(&v).into_owned()),
                model
                    .get(&key)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            ));
        }
    }
    Ok(())
}

/// A rollback to a delta discards the versions sealed above it, written or not; the next delta
/// applies on the rollback's target and skips the discarded records; a restart loads the chain
/// whole image → delta → delta-after-the-rollback and finds exactly the surviving history.
#[test]
fn a_rollback_to_a_delta_and_the_delta_after_it_recover_the_surviving_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).unwrap();
    let mut session = store.start_session();
    let mut model = BTreeMap::new();
    let write = |store: &Arc<Store>, version: u64, scope: Scope| {
        let token = store.checkpoint_sealed(version, scope, Vec::new()).unwrap();
        store
            .wait_for_commit(token, Duration::from_secs(10))
            .unwrap();
    };
    write_all(&mut session, &mut model, 0..100, "a");
    let v1 = store.seal(Duration::from_secs(5)).unwrap();
    write(&store, v1, Scope::Full);
    write_all(&mut session, &mut model, 50..150, "b");
    let v2 = store.seal(Duration::from_secs(5)).unwrap();
    let at_v2 = model.clone();
    // Discarded below: one version written as a delta, one sealed and unwritten, one current.
    write_all(&mut session, &mut model, 0..200, "c");
    let v3 = store.seal(Duration::from_secs(5)).unwrap();
    write(&store, v2, Scope::Since(v1));
    write(&store, v3, Scope::Since(v2));
    write_all(&mut session, &mut model, 100..200, "d");
    let v4 = store.seal(Duration::from_secs(5)).unwrap();
    write_all(&mut session, &mut model, 0..10, "e");
    assert_eq!(store.sealed_versions(), vec![v4]);

    let report = store.rollback(v2).unwrap();
    assert_eq!(report.deleted_checkpoints, vec![v3]);
    assert!(
        store.sealed_versions().is_empty(),
        "sealed versions above the target are gone"
    );
    store.wait_for_purge(Duration::from_secs(10)).unwrap();
    let mut model = at_v2;
    assert_state(&store, &model, "after the rollback").unwrap();
    // The session learns of the rollback once, then writes on the new world-line.
    assert!(matches!(
        session.upsert(b"k0", b"x"),
        Err(prefixkv_engine::EngineError::RolledBack { .. })
    ));
    write_all(&mut session, &mut model, 120..180, "f");
    let v5 = store.seal(Duration::from_secs(5)).unwrap();
    assert!(v5 > v4, "versions are never reused");
    write(&store, v5, Scope::Since(v2));
    let at_v5 = model.clone();
    // Written after v5's seal: not in its checkpoint.
    write_all(&mut session, &mut model, 0..5, "g");
    drop(session);
    drop(store);
    let store = Store::open(config(dir.path())).unwrap();
    assert_eq!(store.recovery_info().unwrap().version, v5);
    assert_state(&store, &at_v5, "after the restart").unwrap();
    // The check is not vacuous: the writes after v5's seal are (rightly) not there.
    assert!(assert_state(&store, &model, "the model with writes after the seal").is_err());
}
