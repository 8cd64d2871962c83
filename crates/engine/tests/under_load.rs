//! Checkpoints of every strategy while worker sessions write values that encode (session,
//! serial); each checkpoint is recovered into a fresh store and checked for per-session prefix
//! consistency. `PREFIXKV_STRESS_ROUNDS` (default 2) checkpoints per strategy.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{encode_value, env_count, op_at, small_config, verify_recovered, Op};
use prefixkv_engine::{SessionId, Store, Strategy};

const KEYS: u64 = 2000;
const WORKERS: u32 = 3;

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn checkpoints_under_load_recover_prefix_consistent_images() {
    let rounds = env_count("PREFIXKV_STRESS_ROUNDS", 3);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();

    let mut indices: BTreeMap<SessionId, u32> = BTreeMap::new();
    let mut loader = store.start_session();
    indices.insert(loader.id(), 0);
    for serial in 1..=KEYS {
        let Op::Upsert(key) = op_at(KEYS, 0, serial) else {
            unreachable!()
        };
        loader
            .upsert(&key.to_be_bytes(), &encode_value(0, serial))
            .unwrap();
    }
    loader.suspend();

    let stop = Arc::new(AtomicBool::new(false));
    let total_ops = Arc::new(AtomicU64::new(0));
    // Workers stop (suspended) when they reach the allowance, so the verifier's replay stays small.
    let allowance = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for index in 1..=WORKERS {
        let session = store.start_session();
        indices.insert(session.id(), index);
        let (stop, total_ops, allowance) = (stop.clone(), total_ops.clone(), allowance.clone());
        workers.push(std::thread::spawn(move || {
            let mut session = session;
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if total_ops.load(Ordering::Relaxed) >= allowance.load(Ordering::Relaxed) {
                    session.suspend();
                    std::thread::yield_now();
                    continue;
                }
                let serial = session.serial() + 1;
                match op_at(KEYS, index, serial) {
                    Op::Read(key) => {
                        session.read(&key.to_be_bytes(), &mut out).unwrap();
                    }
                    Op::Upsert(key) => session
                        .upsert(&key.to_be_bytes(), &encode_value(index, serial))
                        .unwrap(),
                    Op::Delete(key) => {
                        session.delete(&key.to_be_bytes()).unwrap();
                    }
                }
                assert_eq!(session.serial(), serial);
                total_ops.fetch_add(1, Ordering::Relaxed);
            }
            session.suspend();
        }));
    }

    let mut checked = 0;
    for round in 0..rounds {
        for strategy in Strategy::ALL {
            // Let the workers run a little between checkpoints (no sleeping: wait for progress).
            let before = total_ops.load(Ordering::Relaxed);
            allowance.fetch_add(60_000, Ordering::Relaxed);
            while total_ops.load(Ordering::Relaxed) < before + 1000 {
                std::thread::yield_now();
            }
            let token = store.checkpoint(strategy).unwrap();
            let report = store
                .wait_for_commit(token, Duration::from_secs(120))
                .unwrap();
            assert_eq!(report.strategy, strategy);
            eprintln!(
                "{strategy} v{} took {:?}, {} records, points {:?}",
                report.version,
                report.duration,
                report.records,
                report.session_points.values().collect::<Vec<_>>()
            );
            let copy = tempfile::tempdir().unwrap();
            copy_dir(
                &report.dir,
                &copy
                    .path()
                    .join("checkpoints")
                    .join(report.dir.file_name().unwrap()),
            );

            let recovered = Store::open(small_config(copy.path())).unwrap();
            let info = recovered.recovery_info().unwrap().clone();
            assert_eq!(info.version, report.version);
            assert_eq!(info.session_commit_points, report.session_points);
            if let Err(problem) =
                verify_recovered(&recovered, KEYS, &indices, &report.session_points)
            {
                panic!(
                    "round {round} strategy {strategy} v{}: {problem}",
                    report.version
                );
            }
            checked += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(checked, rounds * 5);
}
