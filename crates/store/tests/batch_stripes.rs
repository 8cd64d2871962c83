//! Stripes kept across a batch (`StoreSession::batch`, `txn` module docs): a committed
//! transaction leaves its stripes with the session for the next one, and the batch's end
//! releases them; two sessions batching over the same keys in crossing orders never deadlock,
//! lose no write, and a checkpoint requested meanwhile completes.
//!
//! Every wait here is bounded: the workers report on a channel and the test gives up (fails)
//! after a generous deadline instead of hanging on a deadlock.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use prefixkv_store::{Durability, DurableStore, Options, BATCH_MAX_COMMANDS};

/// Far above what the work takes on a loaded machine; reached only by a deadlock.
const DEADLINE: Duration = Duration::from_secs(120);

fn open(dir: &std::path::Path, durability: Durability) -> Arc<DurableStore> {
    let mut options = Options::new(dir, durability);
    options.engine.index_buckets = 1 << 10;
    options.engine.log_memory_bytes = 32 << 20;
    options.engine.log_page_bytes = 64 << 10;
    DurableStore::open(options).unwrap().0
}

fn read_u64(session: &mut prefixkv_store::StoreSession, key: &[u8]) -> u64 {
    let mut out = Vec::new();
    if session.read(key, &mut out).unwrap() {
        u64::from_le_bytes(out.try_into().unwrap())
    } else {
        0
    }
}

/// Adds one to each of `keys` in one transaction.
fn increment(session: &mut prefixkv_store::StoreSession, keys: &[&[u8]]) {
    let mut txn = session.begin(keys);
    for key in keys {
        let mut out = Vec::new();
        let old = if txn.get(key, &mut out).unwrap() {
            u64::from_le_bytes(out.try_into().unwrap())
        } else {
            0
        };
        txn.put(key, &(old + 1).to_le_bytes()).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn a_batch_keeps_its_stripes_until_its_end_or_a_different_begin() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::None);
    let mut session = store.session().unwrap();
    session
        .batch(
            || false,
            |session| {
                increment(session, &[b"hot"]);
                assert_eq!(
                    session.kept_stripes(),
                    1,
                    "a committed txn keeps its stripe"
                );
                increment(session, &[b"hot"]);
                assert_eq!(session.kept_stripes(), 1, "the same stripe is reused");
                increment(session, &[b"hot", b"other"]);
                assert!(session.kept_stripes() >= 1);
                // Suspending (what precedes any wait) releases everything kept.
                session.suspend();
                assert_eq!(session.kept_stripes(), 0);
                increment(session, &[b"hot"]);
                assert_eq!(session.kept_stripes(), 1);
            },
        )
        .unwrap();
    assert_eq!(
        session.kept_stripes(),
        0,
        "the batch's end releases its stripes"
    );
    // Outside a batch nothing is kept.
    increment(&mut session, &[b"hot"]);
    assert_eq!(session.kept_stripes(), 0);
    assert_eq!(read_u64(&mut session, b"hot"), 5);

    // Another thread gets the stripe at once after the batch (a leaked lock would hang it).
    let (done, finished) = mpsc::channel();
    let other = store.clone();
    let worker = std::thread::spawn(move || {
        let mut session = other.session().unwrap();
        increment(&mut session, &[b"hot"]);
        let value = read_u64(&mut session, b"hot");
        session.suspend();
        done.send(value).unwrap();
    });
    assert_eq!(
        finished.recv_timeout(DEADLINE).expect("stripe left locked"),
        6
    );
    worker.join().unwrap();
    session.suspend();
}

#[test]
fn crossing_batches_on_two_threads_never_deadlock_and_lose_nothing() {
    const BATCHES: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Checkpoint);
    let keys: [&'static [u8]; 3] = [b"a", b"b", b"c"];
    let (done, finished) = mpsc::channel();
    let mut workers = Vec::new();
    for worker in 0..2u64 {
        let store = store.clone();
        let done = done.clone();
        workers.push(std::thread::spawn(move || {
            let mut session = store.session().unwrap();
            let mut increments = [0u64; 3];
            for batch in 0..BATCHES {
                session
                    .batch(
                        || false,
                        |session| {
                            for step in 0..BATCH_MAX_COMMANDS as u64 {
                                // Worker 0 walks the keys forwards, worker 1 backwards, with
                                // one- and two-key transactions in crossing orders.
                                let turn = (batch + step) as usize;
                                let first = if worker == 0 { turn % 3 } else { 2 - turn % 3 };
                                let second = (first + 1 + (step as usize % 2)) % 3;
                                if step % 3 == 0 {
                                    increment(session, &[keys[first], keys[second]]);
                                    increments[first] += 1;
                                    increments[second] += 1;
                                } else {
                                    increment(session, &[keys[first]]);
                                    increments[first] += 1;
                                }
                            }
                        },
                    )
                    .unwrap();
            }
            session.suspend();
            done.send(increments).unwrap();
        }));
    }
    // A checkpoint requested while the batches run completes (it waits for one batch at most).
    let checkpointer = {
        let store = store.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            for _ in 0..5 {
                store.checkpoint().unwrap();
            }
            done.send([0; 3]).unwrap();
        })
    };
    drop(done);
    let mut expected = [0u64; 3];
    for _ in 0..3 {
        let increments = finished
            .recv_timeout(DEADLINE)
            .expect("a worker or the checkpointer is stuck: deadlock");
        for (total, n) in expected.iter_mut().zip(increments) {
            *total += n;
        }
    }
    for worker in workers {
        worker.join().unwrap();
    }
    checkpointer.join().unwrap();
    let mut session = store.session().unwrap();
    for (key, total) in keys.iter().zip(expected) {
        assert_eq!(read_u64(&mut session, key), total, "key {key:?}");
    }
    let per_batch = BATCH_MAX_COMMANDS as u64;
    let two_key_steps = per_batch.div_ceil(3);
    assert_eq!(
        expected.iter().sum::<u64>(),
        2 * BATCHES * (per_batch + two_key_steps)
    );
    session.suspend();
}
