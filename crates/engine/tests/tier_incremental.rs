//! Incremental checkpoints (`fold-over` on a store with a storage tier): the checkpoint writes
//! only the log's pages not yet in the page file plus a copy of the index, and a restart loads
//! the index and reads records on demand instead of the whole dataset. Every check compares
//! with what the test's sessions were told (acknowledged writes), never with the store's
//! account of itself.
//!
//! The tests in this file run one at a time (one `#[test]` that calls them in turn): the
//! restart-reads check counts the process's read bytes (`/proc/self/io`), which another test
//! running in the same process would inflate.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::tier::{check_model, key, page_file_bytes, tier_config as config, value};
use prefixkv_engine::{EngineError, Store, StoreConfig, Strategy};

/// Bytes this process has read through system calls so far (`rchar` of `/proc/self/io`).
fn bytes_read_by_process() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn checkpoint(store: &Arc<Store>, strategy: Strategy) {
    let token = store.checkpoint(strategy).unwrap();
    store
        .wait_for_commit(token, Duration::from_secs(120))
        .unwrap_or_else(|error| panic!("{strategy}: {error}"));
}

/// Whether a checkpoint being written under `root` (a `.tmp` directory) has its index copy.
fn index_copy_started(root: &Path) -> bool {
    std::fs::read_dir(root).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|entry| {
            entry.file_name().to_string_lossy().ends_with(".tmp")
                && entry.path().join("INDEX").exists()
        })
    })
}

/// 16 budgets of data, checkpointed; writes after the checkpoint are lost at the restart, which
/// reads far less than the page file; then a second round on the recovered store (the crashed
/// run's pages are discarded and their page numbers written again), and a restart after a
/// second checkpoint.
fn restart_reads_the_index_not_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let keys = 16 * (1 << 20) / 140;
    let mut model = HashMap::new();
    {
        let store = Store::open(config(dir.path())).unwrap();
        let mut session = store.start_session();
        for index in 0..keys {
            session.upsert(&key(index), &value(index, 0)).unwrap();
            model.insert(index, Some(value(index, 0)));
        }
        for index in (0..keys).step_by(7) {
            session.delete(&key(index)).unwrap();
            model.insert(index, None);
        }
        session.suspend();
        checkpoint(&store, Strategy::FoldOver);
        // Not checkpointed: lost at the restart (evicted pages of them included).
        let mut late = store.start_session();
        for index in 0..keys / 2 {
            late.upsert(&key(index), &value(index, 9)).unwrap();
        }
    }
    let file_bytes = page_file_bytes(dir.path());
    let read_before = bytes_read_by_process();
    let store = Store::open(config(dir.path())).unwrap();
    let restart_read = bytes_read_by_process() - read_before;
    assert!(
        restart_read < file_bytes / 4,
        "the restart read {restart_read} bytes; the page file holds {file_bytes}"
    );
    check_model(&store, &model, "after the first restart");
    // A second run on the recovered store: overwrite a third, checkpoint, write more, restart.
    {
        let mut session = store.start_session();
        for index in (0..keys).step_by(3) {
            session.upsert(&key(index), &value(index, 2)).unwrap();
            model.insert(index, Some(value(index, 2)));
        }
        session.suspend();
        checkpoint(&store, Strategy::FoldOver);
        let mut late = store.start_session();
        for index in keys..keys + 20_000 {
            late.upsert(&key(index), &value(index, 3)).unwrap();
        }
        for index in keys..keys + 20_000 {
            model.insert(index, None);
        }
    }
    drop(store);
    // A restart that hands every live key to an observer (as the server's key counts need):
    // each exactly once, with its value; the deleted and lost ones not at all.
    let observed = std::sync::Mutex::new(HashMap::new());
    let store = Store::open_observed(config(dir.path()), &|key, value| {
        let index = u64::from_be_bytes(key.try_into().unwrap());
        let previous = observed.lock().unwrap().insert(index, value.to_vec());
        assert!(previous.is_none(), "key {index} observed twice");
    })
    .unwrap();
    let observed = observed.into_inner().unwrap();
    let live: HashMap<u64, Vec<u8>> = model
        .iter()
        .filter_map(|(index, value)| value.clone().map(|value| (*index, value)))
        .collect();
    assert_eq!(observed.len(), live.len(), "keys observed at the restart");
    assert!(
        observed == live,
        "an observed value differs from the model's"
    );
    check_model(&store, &model, "after the second restart");
    // A snapshot (log-ordered) checkpoint of the recovered store skips the crashed runs' dead
    // records: a restart from it holds the same state.
    checkpoint(&store, Strategy::Snapshot);
    drop(store);
    let store = Store::open(config(dir.path())).unwrap();
    check_model(&store, &model, "after a snapshot of the recovered store");
}

/// Writers run through the checkpoint (their records of both versions interleave around the
/// version switch) and after it; the store is dropped without another checkpoint. Each writer
/// sets its own keys in order, so what it was told forms a sequence: the restart must hold a
/// prefix of each writer's sequence (no hole), at least what was acknowledged before the
/// checkpoint was requested, and exactly as long as the CPR point the store reports.
fn writers_through_the_checkpoint_recover_a_prefix() {
    const WRITERS: u64 = 3;
    const SLOW: u64 = 2;
    // Writes per writer at most (the index holds them all); the switch's length varies with
    // the machine's load, so a writer may reach it during the checkpoint.
    const CAP: u64 = 1_200_000;
    let dir = tempfile::tempdir().unwrap();
    let acknowledged_before: Vec<u64>;
    let sessions: Vec<u64>;
    // Room for what the fast writers add while the slow one holds the epoch (eviction waits for
    // it too).
    let config = |dir: &Path| StoreConfig {
        log_memory_bytes: 256 << 20,
        index_buckets: 1 << 19,
        ..config(dir)
    };
    {
        let store = Store::open(config(dir.path())).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let armed = Arc::new(AtomicBool::new(false));
        let counts: Arc<Vec<AtomicU64>> =
            Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
        let handles: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (store, stop, counts) = (store.clone(), stop.clone(), counts.clone());
                let (armed, root) = (armed.clone(), dir.path().join("checkpoints"));
                std::thread::spawn(move || {
                    let mut session = store.start_session();
                    let id = session.id().0;
                    let mut serial = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if serial >= CAP {
                            // The index's room: idle until told to stop.
                            std::thread::sleep(Duration::from_millis(1));
                            continue;
                        }
                        let index = writer << 32 | serial;
                        if writer == SLOW {
                            // Once the checkpoint copies the index (its `.tmp` directory holds
                            // `INDEX`), one write of this writer lasts 300 ms inside the store:
                            // the version switch that follows waits for it, and the other
                            // writers, which have seen PREPARE, meanwhile fill the log with
                            // records of the checkpoint's version above the switch point.
                            let hold = armed.load(Ordering::SeqCst) && index_copy_started(&root);
                            session
                                .rmw(&key(index), |_, new| {
                                    if hold {
                                        armed.store(false, Ordering::SeqCst);
                                        std::thread::sleep(Duration::from_millis(300));
                                    }
                                    new.extend_from_slice(&value(index, 0));
                                })
                                .unwrap();
                        } else {
                            session.upsert(&key(index), &value(index, 0)).unwrap();
                        }
                        serial += 1;
                        counts[writer as usize].store(serial, Ordering::SeqCst);
                    }
                    session.suspend();
                    id
                })
            })
            .collect();
        // Wait until both wrote several budgets, note what they were told, checkpoint.
        let deadline = Instant::now() + Duration::from_secs(120);
        let wait_for = |target: &dyn Fn(usize) -> u64| {
            while (0..SLOW as usize).any(|w| counts[w].load(Ordering::SeqCst) < target(w)) {
                assert!(
                    Instant::now() < deadline && handles.iter().all(|h| !h.is_finished()),
                    "the writers stopped early (one failed?) or are too slow"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        wait_for(&|_| 100_000);
        acknowledged_before = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        armed.store(true, Ordering::SeqCst);
        checkpoint(&store, Strategy::FoldOver);
        assert!(
            !armed.load(Ordering::SeqCst),
            "the slow writer never held a write across the version switch"
        );
        // Keep writing past the checkpoint, then stop.
        let after: Vec<u64> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        wait_for(&|w| (after[w] + 1_000).min(CAP));
        stop.store(true, Ordering::Relaxed);
        sessions = handles.into_iter().map(|h| h.join().unwrap()).collect();
    }
    let store = Store::open(config(dir.path())).unwrap();
    let points = store.recovery_info().unwrap().session_commit_points.clone();
    let mut reader = store.start_session();
    let mut out = Vec::new();
    for writer in 0..WRITERS {
        // The recovered prefix, from the data alone.
        let mut recovered = 0u64;
        while reader
            .read(&key(writer << 32 | recovered), &mut out)
            .unwrap()
        {
            assert_eq!(out, value(writer << 32 | recovered, 0));
            recovered += 1;
        }
        for later in recovered..recovered + 50_000 {
            assert!(
                !reader.read(&key(writer << 32 | later), &mut out).unwrap(),
                "writer {writer}: key {later} recovered after missing key {recovered}: a hole"
            );
        }
        assert!(
            recovered >= acknowledged_before[writer as usize],
            "writer {writer}: {recovered} writes recovered, {} were acknowledged before the \
             checkpoint was requested",
            acknowledged_before[writer as usize]
        );
        let id = sessions[writer as usize];
        let point = points
            .iter()
            .find(|(session, _)| session.0 == id)
            .map(|(_, point)| *point)
            .unwrap_or(0);
        assert_eq!(
            point, recovered,
            "writer {writer}: the store reports CPR point {point}, the data holds {recovered}"
        );
    }
}

/// A page file that lost a segment an incremental checkpoint needs is refused with an error
/// naming the page, and a damaged index copy is refused too; neither starts with missing keys.
fn damaged_files_are_refused() {
    for damage in ["segment", "index"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(config(dir.path())).unwrap();
            let mut session = store.start_session();
            for index in 0..30_000u64 {
                session.upsert(&key(index), &value(index, 0)).unwrap();
            }
            session.suspend();
            checkpoint(&store, Strategy::FoldOver);
        }
        match damage {
            "segment" => {
                let first = std::fs::read_dir(dir.path().join("log"))
                    .unwrap()
                    .map(|entry| entry.unwrap().path())
                    .filter(|path| path.extension().is_some_and(|e| e == "sums"))
                    .min()
                    .unwrap();
                std::fs::remove_file(first.with_extension("pages")).unwrap();
            }
            _ => {
                let checkpoints = dir.path().join("checkpoints");
                let version_dir = std::fs::read_dir(&checkpoints)
                    .unwrap()
                    .map(|entry| entry.unwrap().path())
                    .find(|path| path.join("INDEX").exists())
                    .unwrap();
                let path = version_dir.join("INDEX");
                let mut bytes = std::fs::read(&path).unwrap();
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x40;
                std::fs::write(&path, bytes).unwrap();
            }
        }
        match Store::open(config(dir.path())) {
            Err(EngineError::Corrupt { detail, .. }) => {
                assert!(!detail.is_empty(), "{damage}: {detail}");
            }
            Err(other) => panic!("{damage}: expected a corruption error, got {other}"),
            Ok(_) => panic!("{damage}: the store opened on damaged files"),
        }
    }
}

#[test]
fn incremental_checkpoints() {
    restart_reads_the_index_not_the_dataset();
    writers_through_the_checkpoint_recover_a_prefix();
    damaged_files_are_refused();
}
