//! The durability rule (`DurableStore::is_durable`, `DurableStore::wait_durable`) checked
//! against recovery after a power cut on the simulated disk that drops everything unsynced,
//! never against what the store reports: a write `wait_durable` returned for survives in every
//! mode; a write `is_durable` denies is lost (the check can fail); the session that made a write
//! decides its commit point; waiting takes checkpoints only when there is no log, and at most
//! three.

mod common;

use std::sync::Arc;

use prefixkv_storage::{CrashMode, SimDisk};
use prefixkv_store::{Durability, DurableStore, Options, StoreSession, WritePosition};

fn options(disk: &SimDisk, durability: Durability) -> Options {
    common::sim_options(disk, durability)
}

/// Puts `key = value` in one transaction; the write's position.
fn put(session: &mut StoreSession, key: &[u8], value: &[u8]) -> WritePosition {
    let mut txn = session.begin(&[key]);
    txn.put(key, value).unwrap();
    let mark = txn.commit().unwrap().expect("a put writes");
    let at = mark.position();
    mark.wait().unwrap();
    at
}

/// Power cut: the disk dies, every unsynced byte and directory entry is lost, and the store
/// reopens in the same mode.
fn cut_and_reopen(disk: &SimDisk, store: Arc<DurableStore>, mode: Durability) -> Arc<DurableStore> {
    disk.kill();
    drop(store);
    disk.crash(CrashMode::DropAll);
    DurableStore::open(options(disk, mode)).unwrap().0
}

fn read(store: &Arc<DurableStore>, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let found = store.session().unwrap().read(key, &mut out).unwrap();
    found.then_some(out)
}

#[test]
fn a_write_waited_durable_survives_a_power_cut_in_every_mode() {
    for (seed, mode) in Durability::ALL.into_iter().enumerate() {
        let disk = SimDisk::new(seed as u64);
        let (store, _) = DurableStore::open(options(&disk, mode)).unwrap();
        let mut session = store.session().unwrap();
        let watch = session.commit_watch();
        for n in 0..20u32 {
            put(&mut session, format!("k{n}").as_bytes(), b"old");
        }
        let at = put(&mut session, b"k7", b"new");
        // This thread waits below; a checkpoint must not wait for its session.
        session.suspend();
        let mut checkpoints = 0;
        store
            .wait_durable(at, &watch, || {
                checkpoints += 1;
                store.checkpoint().map(drop)
            })
            .unwrap();
        assert!(store.is_durable(at, &watch), "{mode}");
        // A logging mode syncs the log and needs no checkpoint; the others need one.
        assert_eq!(checkpoints, usize::from(!mode.uses_oplog()), "{mode}");
        drop(session);
        let store = cut_and_reopen(&disk, store, mode);
        assert_eq!(read(&store, b"k7").as_deref(), Some(&b"new"[..]), "{mode}");
        assert_eq!(read(&store, b"k19").as_deref(), Some(&b"old"[..]), "{mode}");
    }
}

/// The check above is not vacuous: a write the rule does not call durable is lost by the cut.
#[test]
fn a_write_not_durable_is_lost_by_a_power_cut() {
    let disk = SimDisk::new(7);
    let mode = Durability::Checkpoint;
    let (store, _) = DurableStore::open(options(&disk, mode)).unwrap();
    let mut session = store.session().unwrap();
    let watch = session.commit_watch();
    let before = put(&mut session, b"a", b"1");
    session.suspend();
    store.checkpoint().unwrap();
    assert!(store.is_durable(before, &watch));
    let after = put(&mut session, b"b", b"2");
    assert!(!store.is_durable(after, &watch));
    drop(session);
    let store = cut_and_reopen(&disk, store, mode);
    assert_eq!(read(&store, b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(read(&store, b"b"), None);
}

/// A write made by another session (the server's script thread, on a connection's behalf)
/// carries that session's serial: only that session's commit point decides.
#[test]
fn the_session_that_made_a_write_decides_its_commit_point() {
    let disk = SimDisk::new(3);
    let (store, _) = DurableStore::open(options(&disk, Durability::Checkpoint)).unwrap();
    let mut caller = store.session().unwrap();
    let mut other = store.session().unwrap();
    let caller_watch = caller.commit_watch();
    let other_watch = other.commit_watch();
    put(&mut caller, b"c", b"1");
    caller.suspend();
    store.checkpoint().unwrap();
    // The other session writes after the checkpoint, reaching a serial above the caller's.
    let mut at = put(&mut other, b"s", b"0");
    for n in 1..5u32 {
        at = put(&mut other, b"s", n.to_string().as_bytes());
    }
    assert!(at.serial > caller_watch.committed_serial());
    assert!(!store.is_durable(at, &other_watch));
    other.suspend();
    let mut checkpoints = 0;
    store
        .wait_durable(at, &other_watch, || {
            checkpoints += 1;
            store.checkpoint().map(drop)
        })
        .unwrap();
    assert_eq!(checkpoints, 1);
    assert!(store.is_durable(at, &other_watch));
    // Judged by the caller's commit point (serial 1 covered), the serial would still look new.
    assert!(!store.is_durable(at, &caller_watch));
}

/// A checkpoint hook that never covers the write: waiting gives up after three, with an error.
#[test]
fn waiting_takes_at_most_three_checkpoints() {
    let disk = SimDisk::new(5);
    let (store, _) = DurableStore::open(options(&disk, Durability::Checkpoint)).unwrap();
    let mut session = store.session().unwrap();
    let watch = session.commit_watch();
    let at = put(&mut session, b"k", b"v");
    let mut calls = 0;
    let result = store.wait_durable(at, &watch, || {
        calls += 1;
        Ok(())
    });
    assert!(result.is_err());
    assert_eq!(calls, 3);
    assert!(!store.is_durable(at, &watch));
}
