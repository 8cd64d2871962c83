//! `Store::live_record_bytes`: a model test. Random upserts (plain, and with a capacity hint:
//! the record counts with its slack), deletes and read-modify-writes with values growing and
//! shrinking; then, quiescent, the count must equal the recount (a walk of
//! the index) and both must equal what the model computes on its own from its live keys with
//! `Store::record_bytes`. With checkpoints and compaction running the model cannot know which
//! writes went in place (that depends on the read-only boundary), so it checks count = recount,
//! and after recovery (which writes every record afresh) count = recount = the model's sum again.
//! A rollback recounts too. The check is shown to fail on a count shifted through the test-only
//! hook.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prefixkv_engine::{EngineError, Store, StoreConfig, Strategy};
use prefixkv_testkit::rng::Rng;

const WAIT: Duration = Duration::from_secs(60);

/// One key as the model knows it: its live value, and the size of the record that holds it (or
/// the tombstone left by a delete in place), if the key has a record at all.
#[derive(Default, Clone)]
struct ModelKey {
    value: Option<Vec<u8>>,
    record: Option<usize>,
}

fn key(n: u64) -> Vec<u8> {
    format!("k{n}").into_bytes()
}

fn value(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// The record size after writing `len` bytes into `entry`'s record: in place if it fits (a
/// record of size `s` holds a value whose fresh record would be at most `s`), else a new record.
fn written(store: &Store, key: &[u8], entry: &ModelKey, len: usize) -> usize {
    let fresh = store.record_bytes(key.len(), len);
    match entry.record {
        Some(size) if fresh <= size => size,
        _ => fresh,
    }
}

/// The count against the recount, and both against `expected` when given.
fn check(store: &Store, expected: Option<u64>) -> Result<(), String> {
    let live = store.live_record_bytes();
    let recount = store.recount_live_record_bytes();
    if live != recount {
        return Err(format!("live_record_bytes {live} != recount {recount}"));
    }
    match expected {
        Some(expected) if expected != recount => {
            Err(format!("recount {recount} != model {expected}"))
        }
        _ => Ok(()),
    }
}

fn model_sum(model: &HashMap<Vec<u8>, ModelKey>) -> u64 {
    model
        .values()
        .filter(|entry| entry.value.is_some())
        .map(|entry| entry.record.expect("a live key has a record") as u64)
        .sum()
}

/// Recovery writes every record afresh: the sum over live keys of `record_bytes`.
fn fresh_sum(store: &Store, model: &HashMap<Vec<u8>, ModelKey>) -> u64 {
    model
        .iter()
        .filter_map(|(key, entry)| entry.value.as_ref().map(|value| (key, value)))
        .map(|(key, value)| store.record_bytes(key.len(), value.len()) as u64)
        .sum()
}

/// One random operation on `model`'s keys `keys`, applied to `session` and to the model.
fn random_op(
    session: &mut prefixkv_engine::Session,
    model: &mut HashMap<Vec<u8>, ModelKey>,
    rng: &mut Rng,
    keys: std::ops::Range<u64>,
    exact: Option<&Store>,
) {
    let key = key(keys.start + rng.next_u64() % (keys.end - keys.start));
    let entry = model.entry(key.clone()).or_default();
    match rng.next_u64() % 10 {
        0..=1 => {
            let len = (rng.next_u64() % 300) as usize;
            let new = value(rng, len);
            session.upsert(&key, &new).unwrap();
            if let Some(store) = exact {
                entry.record = Some(written(store, &key, entry, len));
            }
            entry.value = Some(new);
        }
        2..=3 => {
            // A hinted write: a record it creates has room for `hint` bytes (a hint below the
            // value counts as the value), so later writes up to that size go in place.
            let len = (rng.next_u64() % 300) as usize;
            let hint = (rng.next_u64() % 500) as usize;
            let new = value(rng, len);
            let existed = session
                .upsert_existed_with_capacity(&key, &new, hint)
                .unwrap();
            assert_eq!(existed, entry.value.is_some());
            if let Some(store) = exact {
                let fresh = store.record_bytes(key.len(), len.max(hint));
                entry.record = Some(match entry.record {
                    Some(size) if store.record_bytes(key.len(), len) <= size => size,
                    _ => fresh,
                });
            }
            entry.value = Some(new);
        }
        4..=6 => {
            let existed = session.delete(&key).unwrap();
            assert_eq!(existed, entry.value.is_some());
            entry.value = None;
        }
        _ => {
            // Grow by up to 100 bytes or shrink to a prefix.
            let grow = rng.next_u64().is_multiple_of(2);
            let extra_len = (rng.next_u64() % 100) as usize;
            let extra = value(rng, extra_len);
            let mut seen = None;
            session
                .rmw(&key, |old, new| {
                    seen = Some(old.map(<[u8]>::to_vec));
                    let old = old.unwrap_or_default();
                    if grow {
                        new.extend_from_slice(old);
                        new.extend_from_slice(&extra);
                    } else {
                        new.extend_from_slice(&old[..old.len() / 2]);
                    }
                })
                .unwrap();
            assert_eq!(seen.unwrap(), entry.value);
            let old = entry.value.take().unwrap_or_default();
            let new = if grow {
                [old, extra].concat()
            } else {
                old[..old.len() / 2].to_vec()
            };
            if let Some(store) = exact {
                // No record: rmw writes a placeholder sized for 8 bytes first.
                if entry.record.is_none() {
                    entry.record = Some(store.record_bytes(key.len(), 8));
                }
                entry.record = Some(written(store, &key, entry, new.len()));
            }
            entry.value = Some(new);
        }
    }
}

fn config(dir: &std::path::Path) -> StoreConfig {
    let mut config = common::small_config(dir);
    config.checkpoint_direct_io = false;
    config
}

#[test]
fn the_count_matches_the_recount_and_the_model() {
    let dir = tempfile::tempdir().unwrap();
    // Phase 1: a budget far above what is written, no checkpoint: nothing moves the read-only
    // boundary, so every write that fits goes in place and the model knows every record's size.
    let mut config = config(dir.path());
    config.log_memory_bytes = 64 << 20;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    let mut rng = Rng::new(31);
    let mut model = HashMap::new();
    for round in 0..20 {
        for _ in 0..500 {
            random_op(&mut session, &mut model, &mut rng, 0..300, Some(&store));
        }
        check(&store, Some(model_sum(&model)))
            .unwrap_or_else(|error| panic!("round {round}: {error}"));
    }
    assert!(store.live_record_bytes() > 0);

    // The check detects a wrong count.
    store.tamper_live_bytes_for_tests(64);
    let error = check(&store, Some(model_sum(&model))).unwrap_err();
    assert!(error.contains("!= recount"), "{error}");
    store.tamper_live_bytes_for_tests(-64);
    check(&store, Some(model_sum(&model))).unwrap();
}

#[test]
fn the_count_survives_checkpoints_compaction_and_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    // Compaction runs (the garbage trigger fires early) while writers and checkpoints run.
    config.compact_dead_fraction = Some(0.25);
    let budget = config.log_memory_bytes;
    let store = Store::open(config.clone()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Operations of both writers: each writes at least a 64-byte record.
    let operations = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2u64)
        .map(|thread| {
            let mut session = store.start_session();
            let (stop, operations) = (stop.clone(), operations.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(100 + thread);
                let mut model = HashMap::new();
                let keys = thread * 1000..thread * 1000 + 400;
                while !stop.load(Ordering::Relaxed) {
                    random_op(&mut session, &mut model, &mut rng, keys.clone(), None);
                    operations.fetch_add(1, Ordering::Relaxed);
                }
                model
            })
        })
        .collect();
    // Every strategy twice, and the log budget written over twice: compaction must have run
    // (writes beyond the budget fail without it).
    let strategies = Strategy::ALL;
    let mut round = 0;
    while round < 2 * strategies.len() || operations.load(Ordering::Relaxed) * 64 < 2 * budget {
        let token = store
            .checkpoint(strategies[round % strategies.len()])
            .unwrap();
        store.wait_for_commit(token, WAIT).unwrap();
        round += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut model = HashMap::new();
    for writer in writers {
        model.extend(writer.join().unwrap());
    }
    check(&store, None).unwrap();
    let recount = store.recount_live_record_bytes();
    assert!(
        recount >= fresh_sum(&store, &model),
        "a record is at least as large as a fresh one for its value"
    );
    let token = store.checkpoint(Strategy::Persian).unwrap();
    store.wait_for_commit(token, WAIT).unwrap();
    drop(store);

    let store = Store::open(config).unwrap();
    check(&store, Some(fresh_sum(&store, &model))).unwrap();
    // Writes after recovery keep counting from the recounted base.
    let mut session = store.start_session();
    let mut rng = Rng::new(7);
    for _ in 0..2_000 {
        random_op(&mut session, &mut model, &mut rng, 0..400, None);
    }
    check(&store, None).unwrap();
}

#[test]
fn a_rollback_recounts() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.rollback_ready = true;
    config.keep_checkpoints = 4;
    let store: Arc<Store> = Store::open(config).unwrap();
    let mut session = store.start_session();
    let mut rng = Rng::new(5);
    let mut model = HashMap::new();
    for _ in 0..3_000 {
        random_op(&mut session, &mut model, &mut rng, 0..300, None);
    }
    session.suspend();
    let token = store.checkpoint(Strategy::FoldOver).unwrap();
    let report = store.wait_for_commit(token, WAIT).unwrap();
    let kept = store.recount_live_record_bytes();
    check(&store, None).unwrap();
    // Writes of the next version (new keys, deletes, growth), then rolled back.
    let mut later = model.clone();
    for _ in 0..3_000 {
        random_op(&mut session, &mut later, &mut rng, 0..600, None);
    }
    session.suspend();
    assert_ne!(
        store.live_record_bytes(),
        kept,
        "the discarded writes changed the count"
    );
    store.rollback(report.version).unwrap();
    let deadline = Instant::now() + WAIT;
    // The session learns of the rollback on its next operation.
    match session.read(b"k0", &mut Vec::new()) {
        Err(EngineError::RolledBack { .. }) => {}
        other => panic!("expected RolledBack, got {other:?}"),
    }
    session.suspend();
    store.wait_for_purge(deadline - Instant::now()).unwrap();
    assert_eq!(store.live_record_bytes(), kept);
    check(&store, Some(kept)).unwrap();
}
