//! `Session::upsert_existed_with_capacity`: a record created under a capacity hint has that
//! capacity (live bytes count it with its slack), later writes that fit it go in place (no log
//! space is allocated for them), a write beyond it makes a new record, and the hint is cut to the
//! store's largest value.

mod common;

use prefixkv_engine::{Store, StoreConfig, Strategy};
use std::time::Duration;

fn config(dir: &std::path::Path) -> StoreConfig {
    let mut config = common::small_config(dir);
    config.checkpoint_direct_io = false;
    config
}

#[test]
fn a_hinted_record_has_the_capacity_and_grows_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).unwrap();
    let mut session = store.start_session();
    let key = b"bucket";
    let existed = session
        .upsert_existed_with_capacity(key, b"x", 4000)
        .unwrap();
    assert!(!existed);
    let hinted = store.record_bytes(key.len(), 4000) as u64;
    assert_eq!(store.live_record_bytes(), hinted, "counted with its slack");
    assert_eq!(store.recount_live_record_bytes(), hinted);

    // 20,000 writes growing up to the capacity: without the room each would copy the record
    // (up to 4 KiB each, 40 MiB in all: several times the 8 MiB budget, which fails without
    // compaction); in place they allocate nothing.
    let pages = store.log_memory_in_use_bytes();
    let mut out = Vec::new();
    for round in 0..20_000usize {
        let value = vec![round as u8; 1 + round % 4000];
        let existed = session.upsert_existed(key, &value).unwrap();
        assert!(existed);
        if round % 1000 == 0 {
            assert!(session.read(key, &mut out).unwrap());
            assert_eq!(out, value);
        }
    }
    assert_eq!(store.log_memory_in_use_bytes(), pages, "no write allocated");
    assert_eq!(store.live_record_bytes(), hinted);

    // A value beyond the capacity: a new record of the value's size (no hint this time).
    session.upsert(key, &[7u8; 4100]).unwrap();
    assert_eq!(
        store.live_record_bytes(),
        store.record_bytes(key.len(), 4100) as u64
    );
    // A hint below the value is the value: the record is exact.
    session
        .upsert_existed_with_capacity(key, &[8u8; 5000], 10)
        .unwrap();
    assert_eq!(
        store.live_record_bytes(),
        store.record_bytes(key.len(), 5000) as u64
    );
    assert_eq!(store.recount_live_record_bytes(), store.live_record_bytes());
    assert!(session.read(key, &mut out).unwrap());
    assert_eq!(out, vec![8u8; 5000]);
}

#[test]
fn the_hint_is_cut_to_the_largest_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    // Pages of 64 KiB: the largest record is smaller than a page.
    config.log_memory_bytes = 16 << 20;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    let key = b"k";
    let max = store.max_value_bytes(key.len()).unwrap();
    session
        .upsert_existed_with_capacity(key, b"small", usize::MAX)
        .unwrap();
    assert_eq!(
        store.live_record_bytes(),
        store.record_bytes(key.len(), max) as u64
    );
    // The largest value then goes in place.
    let pages = store.log_memory_in_use_bytes();
    session.upsert(key, &vec![1u8; max]).unwrap();
    assert_eq!(store.log_memory_in_use_bytes(), pages);
    let mut out = Vec::new();
    assert!(session.read(key, &mut out).unwrap());
    assert_eq!(out.len(), max);
}

#[test]
fn compaction_keeps_the_capacity_and_recovery_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.compact_dead_fraction = Some(0.25);
    let store = Store::open(config.clone()).unwrap();
    let mut session = store.start_session();
    session
        .upsert_existed_with_capacity(b"hinted", b"v", 1000)
        .unwrap();
    let hinted = store.record_bytes(6, 1000) as u64;
    // Garbage over the budget: compaction must copy the hinted record forward to free its page.
    for round in 0..40_000u64 {
        session
            .upsert(format!("g{}", round % 50).as_bytes(), &[0u8; 400])
            .unwrap();
    }
    let others = (0..50u64)
        .map(|n| store.record_bytes(format!("g{n}").len(), 400) as u64)
        .sum::<u64>();
    assert_eq!(store.live_record_bytes(), hinted + others);
    assert_eq!(store.recount_live_record_bytes(), hinted + others);
    // Still in place after the copy: a shorter value keeps the hinted record (a new record for
    // it would be smaller).
    session.upsert(b"hinted", &[3u8; 100]).unwrap();
    assert!(store.record_bytes(6, 100) < store.record_bytes(6, 1000));
    assert_eq!(store.live_record_bytes(), hinted + others);
    assert_eq!(store.recount_live_record_bytes(), hinted + others);

    session.suspend();
    let token = store.checkpoint(Strategy::FoldOver).unwrap();
    store
        .wait_for_commit(token, Duration::from_secs(60))
        .unwrap();
    drop(session);
    drop(store);
    // Recovery writes each record for its value: the slack is engine memory only.
    let store = Store::open(config).unwrap();
    assert_eq!(
        store.live_record_bytes(),
        store.record_bytes(6, 100) as u64 + others
    );
}
