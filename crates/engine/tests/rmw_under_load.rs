//! Read-modify-write counters under concurrent checkpoints of every strategy. Worker i adds
//! `1 << (16 * i)` to counter `op_key(i, serial)` at every serial, so each recovered checkpoint
//! must hold, per key and per worker, exactly the number of that worker's increments up to its CPR
//! point (prefix consistency and RMW atomicity in one check). `PREFIXKV_RMW_OPS` per worker.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{env_count, small_config};
use prefixkv_engine::{SessionId, Store, Strategy};

const COUNTERS: u64 = 64;
const WORKERS: u32 = 3;

fn op_key(worker: u32, serial: u64) -> u64 {
    (serial.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ worker as u64).rotate_left(17) % COUNTERS
}

fn expected(points: &[(u32, u64)]) -> BTreeMap<u64, u64> {
    let mut counters = BTreeMap::new();
    for &(worker, point) in points {
        for serial in 1..=point {
            *counters.entry(op_key(worker, serial)).or_insert(0u64) += 1 << (16 * worker);
        }
    }
    counters
}

fn image(store: &Arc<Store>) -> BTreeMap<u64, u64> {
    let mut session = store.start_session();
    let mut out = Vec::new();
    let mut image = BTreeMap::new();
    for key in 0..COUNTERS {
        if session.read(&key.to_be_bytes(), &mut out).unwrap() {
            image.insert(key, u64::from_le_bytes(out[..].try_into().unwrap()));
        }
    }
    image
}

#[test]
fn rmw_counters_are_prefix_consistent_in_every_checkpoint() {
    let ops = env_count("PREFIXKV_RMW_OPS", 200_000);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut indices: BTreeMap<SessionId, u32> = BTreeMap::new();
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let mut session = store.start_session();
            indices.insert(session.id(), worker);
            let done = done.clone();
            std::thread::spawn(move || {
                for serial in 1..=ops {
                    session
                        .rmw(&op_key(worker, serial).to_be_bytes(), |old, new| {
                            let value = old
                                .map_or(0, |bytes| u64::from_le_bytes(bytes.try_into().unwrap()));
                            new.extend_from_slice(&(value + (1 << (16 * worker))).to_le_bytes());
                        })
                        .unwrap();
                    assert_eq!(session.serial(), serial);
                }
                session.suspend();
                done.fetch_add(1, Ordering::SeqCst);
                session
            })
        })
        .collect();
    let mut round = 0;
    while done.load(Ordering::SeqCst) < WORKERS as u64 || round < 5 {
        let strategy = Strategy::ALL[round % 5];
        round += 1;
        let token = store.checkpoint(strategy).unwrap();
        let report = store
            .wait_for_commit(token, Duration::from_secs(120))
            .unwrap();
        let copy = tempfile::tempdir().unwrap();
        let target = copy
            .path()
            .join("checkpoints")
            .join(report.dir.file_name().unwrap());
        std::fs::create_dir_all(&target).unwrap();
        for entry in std::fs::read_dir(&report.dir).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), target.join(entry.file_name())).unwrap();
        }
        let recovered = Store::open(small_config(copy.path())).unwrap();
        let points: Vec<(u32, u64)> = report
            .session_points
            .iter()
            .map(|(id, point)| (indices[id], *point))
            .collect();
        eprintln!("{strategy} v{} points {points:?}", report.version);
        assert_eq!(
            image(&recovered),
            expected(&points),
            "{strategy} v{} points {points:?}",
            report.version
        );
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    let sessions: Vec<_> = workers
        .into_iter()
        .map(|worker| worker.join().unwrap())
        .collect();
    let finals: Vec<(u32, u64)> = sessions
        .iter()
        .map(|session| (indices[&session.id()], session.serial()))
        .collect();
    assert_eq!(image(&store), expected(&finals));
}
