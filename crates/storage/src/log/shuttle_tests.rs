//! Shuttle tests of the real appender / I/O thread / waiter protocol (this crate's unit-test
//! build swaps in shuttle's Mutex, Condvar, atomics and threads, see `sync.rs`; file I/O is
//! real). Shuttle explores random schedules of appenders blocking on a tiny queue, the I/O
//! thread swapping groups, ticket waiters, `flush_and_sync` callers, callbacks and close.
//!
//! Properties: every completion fires exactly once, with the record's own LSN; under `always` a
//! completed LSN is already durable; `flush_and_sync` returns only when everything appended
//! before it is durable; after close, replay holds exactly the appended records, dense.
//! `OPLOG_SHUTTLE_ITERATIONS` sets schedules per test (default 60).

use super::{BackendChoice, Log as Oplog, LogConfig as Config, SyncPolicy};
use shuttle::sync::Mutex;
use std::sync::Arc;

fn iterations() -> usize {
    std::env::var("OPLOG_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

fn config(policy: SyncPolicy) -> Config {
    // A queue that holds about one frame, so appenders hit back-pressure.
    Config {
        policy,
        backend: BackendChoice::Pwritev,
        queue_capacity_bytes: 24,
        segment_bytes: 4096,
        ..Config::default()
    }
}

fn scenario(policy: SyncPolicy) {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Oplog::open(dir.path(), config(policy)).unwrap();
    let log = Arc::new(log);
    let appended = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for thread in 0..2u8 {
        let log = Arc::clone(&log);
        let appended = Arc::clone(&appended);
        threads.push(shuttle::thread::spawn(move || {
            for i in 0..2u8 {
                let payload = [thread, i];
                let ticket = log.append(&payload).unwrap();
                let lsn = ticket.wait().unwrap();
                assert_eq!(lsn, ticket.lsn());
                if policy == SyncPolicy::Always {
                    assert!(
                        log.durable_lsn() >= lsn,
                        "always: completed LSN {lsn} is not durable"
                    );
                }
                assert!(log.written_lsn() >= lsn);
                appended.lock().unwrap().push((lsn, payload.to_vec()));
            }
        }));
    }
    // Callbacks run on the I/O thread after the watermark moved; they are checked after close.
    let fired = Arc::new(Mutex::new(Vec::new()));
    {
        let log = Arc::clone(&log);
        let appended = Arc::clone(&appended);
        let fired = Arc::clone(&fired);
        threads.push(shuttle::thread::spawn(move || {
            let lsn = log
                .append_with_callback(
                    b"cb",
                    Box::new(move |result| fired.lock().unwrap().push(result.unwrap())),
                )
                .unwrap();
            appended.lock().unwrap().push((lsn, b"cb".to_vec()));
            let synced = log.flush_and_sync().unwrap();
            assert!(synced >= lsn);
            assert!(
                log.durable_lsn() >= synced,
                "flush_and_sync returned before its LSN was durable"
            );
        }));
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let log = Arc::try_unwrap(log).expect("all threads joined");
    let mut expected = appended.lock().unwrap().clone();
    expected.sort();
    let replayed: Vec<(u64, Vec<u8>)> = log.replay(1).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(replayed, expected);
    let lsns: Vec<u64> = replayed.iter().map(|r| r.0).collect();
    assert_eq!(lsns, (1..=5).collect::<Vec<u64>>());
    log.close().unwrap();
    let callback_lsns = fired.lock().unwrap().clone();
    let expected_callback: Vec<u64> = expected
        .iter()
        .filter(|r| r.1 == b"cb")
        .map(|r| r.0)
        .collect();
    assert_eq!(
        callback_lsns, expected_callback,
        "the callback fires exactly once, with its LSN"
    );
}

#[test]
fn shuttle_always() {
    shuttle::check_random(|| scenario(SyncPolicy::Always), iterations());
}

#[test]
fn shuttle_none() {
    shuttle::check_random(|| scenario(SyncPolicy::None), iterations());
}

#[test]
fn shuttle_everysec_pct() {
    shuttle::check_pct(|| scenario(SyncPolicy::EverySec), iterations(), 3);
}
