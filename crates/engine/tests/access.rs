//! The access word and sampling API for evicting callers: `read_touch`, `touch`, `access_of`,
//! `sample`, `Store::set_access_stamp`. Which records carry the word: a new key starts with the
//! store's stamp; in-place writes keep it; read-copy-update and compaction copies carry it
//! forward; a deleted key written again is a new key.

mod common;

use std::collections::BTreeSet;

use prefixkv_engine::{Sampled, Store, Strategy, MAX_SAMPLE_KEYS};

fn key(n: u64) -> Vec<u8> {
    format!("key:{n:08}").into_bytes()
}

#[test]
fn a_new_key_starts_with_the_stamp_and_touches_change_only_live_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(common::small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    assert_eq!(store.access_stamp(), 0);
    store.set_access_stamp(7);
    assert_eq!(store.access_stamp(), 7);
    session.upsert(b"a", b"one").unwrap();
    assert_eq!(session.access_of(b"a").unwrap(), Some(7));
    assert_eq!(session.access_of(b"absent").unwrap(), None);

    assert!(session.touch(b"a", |old| old + 10).unwrap());
    assert_eq!(session.access_of(b"a").unwrap(), Some(17));
    let mut ran = false;
    assert!(!session
        .touch(b"absent", |old| {
            ran = true;
            old
        })
        .unwrap());
    assert!(!ran, "a touch of an absent key runs nothing");

    let mut value = Vec::new();
    assert!(session.read_touch(b"a", &mut value, |old| old * 2).unwrap());
    assert_eq!(value, b"one");
    assert_eq!(session.access_of(b"a").unwrap(), Some(34));
    assert!(!session
        .read_touch(b"absent", &mut value, |_| unreachable!("absent"))
        .unwrap());
    assert!(value.is_empty());

    // A deleted key is absent to touches, and written again it is a new key: the stamp.
    session.delete(b"a").unwrap();
    assert_eq!(session.access_of(b"a").unwrap(), None);
    assert!(!session.touch(b"a", |_| unreachable!("deleted")).unwrap());
    store.set_access_stamp(50);
    session.upsert(b"a", b"two").unwrap();
    assert_eq!(session.access_of(b"a").unwrap(), Some(50));
    // Also through rmw's path (a tombstone placeholder updated in place).
    session.delete(b"a").unwrap();
    store.set_access_stamp(60);
    session
        .rmw(b"a", |old, new| {
            assert!(old.is_none());
            new.extend_from_slice(b"3");
        })
        .unwrap();
    assert_eq!(session.access_of(b"a").unwrap(), Some(60));
}

#[test]
fn in_place_writes_keep_the_word_and_copies_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(common::small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    store.set_access_stamp(1);
    session.upsert(b"k", &[1u8; 8]).unwrap();
    session.touch(b"k", |_| 1000).unwrap();
    store.set_access_stamp(2);
    // In place (same size), then read-copy-update (a value far larger than the record), then
    // an rmw that grows it again, then a delete-free shrink in place.
    session.upsert(b"k", &[2u8; 8]).unwrap();
    assert_eq!(session.access_of(b"k").unwrap(), Some(1000));
    session.upsert(b"k", &[3u8; 500]).unwrap();
    assert_eq!(session.access_of(b"k").unwrap(), Some(1000));
    session
        .rmw(b"k", |old, new| {
            new.extend_from_slice(old.unwrap());
            new.extend_from_slice(&[4u8; 700]);
        })
        .unwrap();
    assert_eq!(session.access_of(b"k").unwrap(), Some(1000));
    session.upsert(b"k", &[5u8; 4]).unwrap();
    assert_eq!(session.access_of(b"k").unwrap(), Some(1000));

    // A fold-over checkpoint makes the record read-only: the next write copies it.
    let token = store.checkpoint(Strategy::FoldOver).unwrap();
    // An idle session holds no checkpoint back.
    session.suspend();
    store
        .wait_for_commit(token, std::time::Duration::from_secs(30))
        .unwrap();
    session.upsert(b"k", &[6u8; 4]).unwrap();
    assert_eq!(session.access_of(b"k").unwrap(), Some(1000));
}

#[test]
fn compaction_copies_carry_the_word() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::small_config(dir.path());
    let budget = config.log_memory_bytes;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    store.set_access_stamp(3);
    for n in 0..100 {
        session.upsert(&key(n), b"kept").unwrap();
        session.touch(&key(n), |_| 0x00AB_0000 + n as u32).unwrap();
    }
    store.set_access_stamp(9);
    // Write the budget over four times: the pages that held the kept keys' records were freed,
    // so compaction must have copied them.
    let filler = vec![0u8; 200];
    let mut written = 0u64;
    let mut n = 0u64;
    while written < 4 * budget {
        session.upsert(&key(1_000 + n % 1_000), &filler).unwrap();
        written += 256;
        n += 1;
    }
    for n in 0..100 {
        assert_eq!(
            session.access_of(&key(n)).unwrap(),
            Some(0x00AB_0000 + n as u32),
            "key {n}"
        );
    }
}

#[test]
fn recovered_records_start_with_the_configured_stamp() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(common::small_config(dir.path())).unwrap();
        let mut session = store.start_session();
        session.upsert(b"k", b"v").unwrap();
        session.touch(b"k", |_| 77).unwrap();
        let token = store.checkpoint(Strategy::Persian).unwrap();
        session.suspend();
        store
            .wait_for_commit(token, std::time::Duration::from_secs(30))
            .unwrap();
    }
    let mut config = common::small_config(dir.path());
    config.access_stamp = 5;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    // Not checkpointed: the word restarts at the stamp.
    assert_eq!(session.access_of(b"k").unwrap(), Some(5));
    assert_eq!(store.access_stamp(), 5);
}

fn sampled_keys(samples: &[Sampled]) -> Vec<Vec<u8>> {
    samples.iter().map(|sample| sample.key.clone()).collect()
}

#[test]
fn sample_finds_only_live_keys_and_covers_all_when_asked_for_many() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(common::small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    let mut live = BTreeSet::new();
    for n in 0..600 {
        session.upsert(&key(n), b"v").unwrap();
        session.touch(&key(n), |_| n as u32).unwrap();
        live.insert(key(n));
    }
    for n in (0..600).step_by(3) {
        session.delete(&key(n)).unwrap();
        live.remove(&key(n));
    }
    let mut out = Vec::new();
    for start in [0, 17, store.index_buckets() as u64 - 1, u64::MAX] {
        session.sample(start, 1000, &mut out).unwrap();
        let found: BTreeSet<Vec<u8>> = sampled_keys(&out).into_iter().collect();
        assert_eq!(found.len(), out.len(), "each key once");
        assert_eq!(found, live, "start {start}");
        for sample in &out {
            let n: u64 = std::str::from_utf8(&sample.key[4..])
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(sample.access, n as u32, "the key's own access word");
        }
    }
    // A small sample: exactly that many, all live, from consecutive buckets.
    session.sample(5, 7, &mut out).unwrap();
    assert_eq!(out.len(), 7);
    assert!(out.iter().all(|sample| live.contains(&sample.key)));
    // Asking for nothing gives nothing.
    session.sample(5, 0, &mut out).unwrap();
    assert!(out.is_empty());
}

#[test]
fn sample_is_capped_and_wraps_around() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(common::small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    let mut out = Vec::new();
    // An empty store: every bucket visited once, nothing found.
    session.sample(3, 10, &mut out).unwrap();
    assert!(out.is_empty());
    for n in 0..1500 {
        session.upsert(&key(n), b"v").unwrap();
    }
    session.sample(0, usize::MAX, &mut out).unwrap();
    assert_eq!(out.len(), MAX_SAMPLE_KEYS, "clamped");

    // Three keys: whatever bucket a sample starts at, it wraps around to find all three.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(common::small_config(dir.path())).unwrap();
    let mut session = store.start_session();
    for n in 0..3 {
        session.upsert(&key(n), b"v").unwrap();
    }
    let buckets = store.index_buckets() as u64;
    for start in [0, 1, buckets / 2, buckets - 1, buckets, 3 * buckets + 5] {
        session.sample(start, 10, &mut out).unwrap();
        let found: BTreeSet<Vec<u8>> = sampled_keys(&out).into_iter().collect();
        assert_eq!(found, (0..3).map(key).collect(), "start {start}");
        // Asking for two of three stops at two.
        session.sample(start, 2, &mut out).unwrap();
        assert_eq!(out.len(), 2);
    }
}

/// Two keys whose hashes share the main bucket and the tag share one index entry and one chain.
fn keys_sharing_a_chain(buckets: u64) -> (Vec<u8>, Vec<u8>) {
    let mut seen = std::collections::HashMap::new();
    for n in 0u64.. {
        let candidate = key(n);
        let hash = xxhash_rust::xxh3::xxh3_64(&candidate);
        let id = (hash & (buckets - 1), ((hash >> 48) & 0x3FFF).max(1));
        if let Some(other) = seen.insert(id, candidate.clone()) {
            return (other, candidate);
        }
    }
    unreachable!()
}

#[test]
fn sample_yields_every_live_key_of_a_shared_chain() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::small_config(dir.path());
    config.index_buckets = 2;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    let (first, second) = keys_sharing_a_chain(2);
    session.upsert(&first, b"1").unwrap();
    session.upsert(&second, b"2").unwrap();
    session.touch(&first, |_| 11).unwrap();
    session.touch(&second, |_| 22).unwrap();
    // Several records of the first key in the chain: only the newest counts.
    session.upsert(&first, &[0u8; 300]).unwrap();
    let mut out = Vec::new();
    session.sample(0, 10, &mut out).unwrap();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    let mut expected = vec![
        Sampled {
            key: first.clone(),
            access: 11,
        },
        Sampled {
            key: second.clone(),
            access: 22,
        },
    ];
    expected.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(out, expected);
    session.delete(&second).unwrap();
    session.sample(1, 10, &mut out).unwrap();
    assert_eq!(sampled_keys(&out), vec![first]);
}
