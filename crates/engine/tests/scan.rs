//! `Session::scan` (every key present for the whole scan visited exactly once, with its value;
//! deleted keys not visited; cursor errors), `upsert_existed`, the recovery observer of
//! `Store::open_observed` (every recovered key once, every strategy), and the commit cookie (it
//! travels with the checkpoint and comes back from recovery; an oversized one is refused).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::small_config;
use prefixkv_engine::{EngineError, Store, Strategy};

fn full_scan(store: &Arc<Store>, buckets: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut session = store.start_session();
    let mut seen = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, buckets, |key, value| {
                seen.push((key.to_vec(), value.to_vec()))
            })
            .unwrap();
        if cursor == 0 {
            return seen;
        }
    }
}

#[test]
fn a_full_scan_visits_every_live_key_once_with_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    let mut expected = BTreeMap::new();
    for key in 0..20_000u64 {
        let value = key
            .wrapping_mul(7)
            .to_le_bytes()
            .repeat(1 + (key % 5) as usize);
        session.upsert(&key.to_be_bytes(), &value).unwrap();
        expected.insert(key.to_be_bytes().to_vec(), value);
    }
    for key in (0..20_000u64).step_by(3) {
        session.delete(&key.to_be_bytes()).unwrap();
        expected.remove(key.to_be_bytes().as_slice());
    }
    // Overwrites that move records (a larger value does not fit in place).
    for key in (1..20_000u64).step_by(7) {
        let value = vec![key as u8; 100];
        session.upsert(&key.to_be_bytes(), &value).unwrap();
        if expected.contains_key(key.to_be_bytes().as_slice()) || key % 3 == 0 {
            expected.insert(key.to_be_bytes().to_vec(), value);
        }
    }
    for buckets in [1, 7, 1000, 1 << 20] {
        let mut seen = full_scan(&store, buckets);
        let count = seen.len();
        seen.sort();
        seen.dedup_by(|a, b| a.0 == b.0);
        assert_eq!(
            seen.len(),
            count,
            "a key was visited twice ({buckets} buckets a call)"
        );
        assert_eq!(
            seen,
            expected.clone().into_iter().collect::<Vec<_>>(),
            "{buckets} buckets a call"
        );
    }
    let error = session.scan(1 << 40, 1, |_, _| {}).unwrap_err();
    assert!(matches!(error, EngineError::InvalidArgument(_)), "{error}");
}

#[test]
fn keys_present_throughout_are_visited_exactly_once_while_others_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    {
        let mut loader = store.start_session();
        for key in 0..5_000u64 {
            loader.upsert(&key.to_be_bytes(), b"stable").unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut session = store.start_session();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let key = 1_000_000 + n % 3_000;
                if n.is_multiple_of(2) {
                    session
                        .upsert(&key.to_be_bytes(), &n.to_le_bytes())
                        .unwrap();
                } else {
                    session.delete(&key.to_be_bytes()).unwrap();
                }
                // Checkpoints (and the compaction after them) move records under the scan.
                if n.is_multiple_of(20_000) {
                    // An idle session must not hold the epoch while it waits.
                    session.suspend();
                    let token = store.checkpoint(Strategy::Persian).unwrap();
                    store
                        .wait_for_commit(token, Duration::from_secs(60))
                        .unwrap();
                }
            }
        })
    };
    for _ in 0..5 {
        let mut stable = BTreeMap::new();
        for (key, value) in full_scan(&store, 16) {
            let key = u64::from_be_bytes(key.try_into().unwrap());
            if key < 5_000 {
                assert_eq!(value, b"stable");
                *stable.entry(key).or_insert(0) += 1;
            }
        }
        assert_eq!(stable.len(), 5_000, "every stable key is visited");
        assert!(stable.values().all(|&count| count == 1), "exactly once");
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
}

#[test]
fn the_commit_cookie_travels_with_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(small_config(dir.path())).unwrap();
        store.start_session().upsert(b"k", b"v").unwrap();
        let too_large = vec![0u8; prefixkv_engine::checkpoint_files::MAX_COOKIE_BYTES + 1];
        assert!(matches!(
            store.checkpoint_with_cookie(Strategy::Persian, too_large),
            Err(EngineError::InvalidArgument(_))
        ));
        for cookie in [b"first".to_vec(), b"oplog through 42".to_vec()] {
            let token = store
                .checkpoint_with_cookie(Strategy::Persian, cookie)
                .unwrap();
            store
                .wait_for_commit(token, Duration::from_secs(60))
                .unwrap();
        }
    }
    let store = Store::open(small_config(dir.path())).unwrap();
    assert_eq!(store.recovery_info().unwrap().cookie, b"oplog through 42");
}

#[test]
fn recovery_observes_every_recovered_key_once_for_every_strategy() {
    for strategy in Strategy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mut expected = BTreeMap::new();
        {
            let store = Store::open(small_config(dir.path())).unwrap();
            let mut session = store.start_session();
            for key in 0..3_000u64 {
                let value = key.to_le_bytes().repeat(1 + (key % 3) as usize);
                assert!(!session.upsert_existed(&key.to_be_bytes(), &value).unwrap());
                expected.insert(key.to_be_bytes().to_vec(), value);
            }
            for key in (0..3_000u64).step_by(4) {
                assert!(session.delete(&key.to_be_bytes()).unwrap());
                expected.remove(key.to_be_bytes().as_slice());
            }
            for key in (0..3_000u64).step_by(5) {
                let value = vec![9u8; 40];
                let existed = expected.insert(key.to_be_bytes().to_vec(), value.clone());
                assert_eq!(
                    session.upsert_existed(&key.to_be_bytes(), &value).unwrap(),
                    existed.is_some()
                );
            }
            session.suspend();
            let token = store.checkpoint(strategy).unwrap();
            store
                .wait_for_commit(token, Duration::from_secs(60))
                .unwrap();
        }
        let observed = std::sync::Mutex::new(Vec::new());
        let store = Store::open_observed(small_config(dir.path()), &|key, value| {
            observed
                .lock()
                .unwrap()
                .push((key.to_vec(), value.to_vec()));
        })
        .unwrap();
        let mut observed = observed.into_inner().unwrap();
        observed.sort();
        assert_eq!(
            observed,
            expected.clone().into_iter().collect::<Vec<_>>(),
            "{strategy}"
        );
        assert_eq!(full_scan(&store, 64).len(), expected.len(), "{strategy}");
    }
}
