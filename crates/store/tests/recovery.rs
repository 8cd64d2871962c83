//! Recovery of the durable store on the real disk: what every mode keeps across a restart
//! without a checkpoint, replay of only the suffix a checkpoint does not hold, per-key order under
//! concurrent writers, the fallback checkpoint still finding its log, folding a log into a
//! checkpoint when the mode stops logging, and the observers seeing every key.
//!
//! The expected state is what the test's own writers were acknowledged, never what the store
//! reports about itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prefixkv_store::{Durability, DurableStore, Observers, Options};

fn options(dir: &std::path::Path, durability: Durability) -> Options {
    let mut options = Options::new(dir, durability);
    options.engine.index_buckets = 1 << 12;
    options.engine.log_memory_bytes = 32 << 20;
    options.engine.log_page_bytes = 64 << 10;
    // Small segments, so that truncation really removes records.
    options.oplog_segment_bytes = 4096;
    options
}

type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// Writes `count` transactions of 1-3 operations (puts and deletes) from `first`; returns the
/// state they leave on top of `state`.
fn write(store: &Arc<DurableStore>, state: &mut State, first: u64, count: u64) {
    let mut session = store.session().unwrap();
    for n in first..first + count {
        let keys: Vec<Vec<u8>> = (0..1 + n % 3)
            .map(|i| format!("key{}", (n * 7 + i * 13) % 500).into_bytes())
            .collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let mut txn = session.begin(&key_refs);
        for (i, key) in keys.iter().enumerate() {
            if (n + i as u64).is_multiple_of(5) {
                let existed = txn.delete(key).unwrap();
                assert_eq!(existed, state.remove(key).is_some());
            } else {
                let value = format!("value{n}.{i}").into_bytes();
                let existed = txn.put(key, &value).unwrap();
                assert_eq!(existed, state.insert(key.clone(), value).is_some());
            }
        }
        if let Some(mark) = txn.commit().unwrap() {
            mark.wait().unwrap();
        }
    }
}

fn read_all(store: &Arc<DurableStore>) -> State {
    let mut session = store.session().unwrap();
    let mut state = State::new();
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, 256, |key, value| {
                assert!(state.insert(key.to_vec(), value.to_vec()).is_none());
            })
            .unwrap();
        if cursor == 0 {
            return state;
        }
    }
}

#[test]
fn logging_modes_keep_every_acknowledged_write_across_a_restart() {
    for durability in [Durability::EverySec, Durability::Always] {
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new();
        {
            let (store, _) = DurableStore::open(options(dir.path(), durability)).unwrap();
            write(&store, &mut state, 0, 600);
            store.checkpoint().unwrap();
            write(&store, &mut state, 600, 600);
            store.sync().unwrap();
        }
        let (store, recovered) = DurableStore::open(options(dir.path(), durability)).unwrap();
        assert_eq!(read_all(&store), state, "{durability}: {recovered}");
        assert!(recovered.records_replayed > 0 && recovered.records_replayed <= 600);
    }
}

#[test]
fn checkpoint_mode_keeps_what_the_last_checkpoint_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = State::new();
    {
        let (store, _) = DurableStore::open(options(dir.path(), Durability::Checkpoint)).unwrap();
        assert!(store.oplog().is_none());
        write(&store, &mut state, 0, 300);
        store.checkpoint().unwrap();
        let mut lost = state.clone();
        write(&store, &mut lost, 300, 100);
    }
    let (store, recovered) =
        DurableStore::open(options(dir.path(), Durability::Checkpoint)).unwrap();
    assert_eq!(read_all(&store), state, "{recovered}");
}

#[test]
fn concurrent_writers_recover_the_final_state_of_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let before;
    {
        let (store, _) = DurableStore::open(options(dir.path(), Durability::Always)).unwrap();
        let next = Arc::new(AtomicU64::new(0));
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (store, next) = (store.clone(), next.clone());
                scope.spawn(move || {
                    let mut session = store.session().unwrap();
                    for i in 0..3_000u64 {
                        // Few keys, many writers: the log order of each key must match the engine.
                        let key = format!("hot{}", (i * 31 + thread) % 40).into_bytes();
                        let mut txn = session.begin(&[&key]);
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n.is_multiple_of(9) {
                            txn.delete(&key).unwrap();
                        } else {
                            txn.put(&key, format!("t{thread}n{n}").as_bytes()).unwrap();
                        }
                        if let Some(mark) = txn.commit().unwrap() {
                            mark.wait().unwrap();
                        }
                        if thread == 0 && i == 1_500 {
                            session.suspend();
                            store.checkpoint().unwrap();
                        }
                    }
                });
            }
        });
        before = read_all(&store);
    }
    let (store, recovered) = DurableStore::open(options(dir.path(), Durability::Always)).unwrap();
    assert_eq!(read_all(&store), before, "{recovered}");
}

#[test]
fn a_fallback_to_the_older_checkpoint_still_finds_the_log_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = State::new();
    {
        let (store, _) = DurableStore::open(options(dir.path(), Durability::EverySec)).unwrap();
        write(&store, &mut state, 0, 200);
        store.checkpoint().unwrap();
        write(&store, &mut state, 200, 200);
        let newest = store.checkpoint().unwrap();
        write(&store, &mut state, 400, 200);
        store.sync().unwrap();
        // Damage the newest checkpoint: recovery must fall back to the older one and replay the
        // log from what that one covers, which truncation must have kept.
        let segment = newest.report.dir.join("segment-000000.seg");
        let mut bytes = std::fs::read(&segment).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xFF;
        std::fs::write(&segment, bytes).unwrap();
    }
    let (store, recovered) = DurableStore::open(options(dir.path(), Durability::EverySec)).unwrap();
    let info = recovered.checkpoint.as_ref().unwrap();
    assert!(info.fell_back.is_some(), "{recovered}");
    assert_eq!(read_all(&store), state, "{recovered}");
}

#[test]
fn a_mode_without_a_log_folds_a_leftover_log_into_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = State::new();
    {
        let (store, _) = DurableStore::open(options(dir.path(), Durability::Always)).unwrap();
        write(&store, &mut state, 0, 300);
    }
    {
        let (store, recovered) =
            DurableStore::open(options(dir.path(), Durability::Checkpoint)).unwrap();
        assert!(recovered.folded_through.is_some(), "{recovered}");
        assert!(!dir.path().join("oplog").exists());
        assert_eq!(read_all(&store), state);
    }
    let (store, recovered) =
        DurableStore::open(options(dir.path(), Durability::Checkpoint)).unwrap();
    assert!(recovered.folded_through.is_none());
    assert_eq!(read_all(&store), state, "{recovered}");
}

#[test]
fn observers_see_every_loaded_key_and_replayed_operation() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = State::new();
    {
        let (store, _) = DurableStore::open(options(dir.path(), Durability::EverySec)).unwrap();
        write(&store, &mut state, 0, 300);
        store.checkpoint().unwrap();
        write(&store, &mut state, 300, 300);
        store.sync().unwrap();
    }
    let loaded = Mutex::new(0i64);
    let mut replayed = 0i64;
    let (store, recovered) = DurableStore::open_observed(
        options(dir.path(), Durability::EverySec),
        Observers {
            loaded: &|_, _| *loaded.lock().unwrap() += 1,
            replayed: &mut |_, value, existed| {
                replayed += i64::from(value.is_some()) - i64::from(existed);
            },
            cookie_suffices: None,
        },
    )
    .unwrap();
    let counted = loaded.into_inner().unwrap() + replayed;
    assert_eq!(counted, state.len() as i64, "{recovered}");
    assert_eq!(read_all(&store).len(), state.len());
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, _) = DurableStore::open(options(dir.path(), Durability::Always)).unwrap();
    let error = DurableStore::open(options(dir.path(), Durability::Always))
        .err()
        .unwrap();
    assert!(error.to_string().contains("in use"), "{error}");
}
