//! Checkpoints of every strategy while worker sessions write values that encode (session,
//! serial); each checkpoint is recovered into a fresh store and checked against what the workers
//! were acknowledged: each session's CPR point must lie between the last serial it had been
//! acknowledged before the checkpoint was requested and the last it had issued when the copy was
//! checked, and the image must be exactly the state those points name.
//! `PREFIXKV_STRESS_ROUNDS` (default 3) checkpoints per strategy.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{apply, bounds, env_count, load, small_config, spec, verify_recovered};
use prefixkv_engine::{SessionId, Store, Strategy};

const KEYS: u64 = 2000;
const WORKERS: u32 = 3;

#[test]
fn checkpoints_under_load_recover_prefix_consistent_images() {
    let rounds = env_count("PREFIXKV_STRESS_ROUNDS", 3);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(small_config(dir.path())).unwrap();

    let spec = spec(KEYS, 11);
    let mut indices: BTreeMap<SessionId, u32> = BTreeMap::new();
    let loader = load(&store, &spec);
    indices.insert(loader.id(), 0);
    // Client-side counters per session index (0 = the loader, done): issued before each
    // operation, acknowledged after it returned.
    let issued: Arc<Vec<AtomicU64>> = Arc::new((0..=WORKERS).map(|_| AtomicU64::new(0)).collect());
    let acknowledged: Arc<Vec<AtomicU64>> =
        Arc::new((0..=WORKERS).map(|_| AtomicU64::new(0)).collect());
    issued[0].store(KEYS, Ordering::SeqCst);
    acknowledged[0].store(KEYS, Ordering::SeqCst);
    let snapshot = |counters: &[AtomicU64]| -> Vec<u64> {
        counters.iter().map(|c| c.load(Ordering::SeqCst)).collect()
    };

    let stop = Arc::new(AtomicBool::new(false));
    let total_ops = Arc::new(AtomicU64::new(0));
    // Workers stop (suspended) when they reach the allowance, so the verifier's replay stays small.
    let allowance = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for index in 1..=WORKERS {
        let session = store.start_session();
        indices.insert(session.id(), index);
        let (stop, total_ops, allowance) = (stop.clone(), total_ops.clone(), allowance.clone());
        let (issued, acknowledged) = (issued.clone(), acknowledged.clone());
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
                issued[index as usize].store(serial, Ordering::SeqCst);
                apply(&mut session, &spec, index, serial, &mut out).unwrap();
                acknowledged[index as usize].store(serial, Ordering::SeqCst);
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
            let acknowledged_before = snapshot(&acknowledged);
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
            prefixkv_testkit::fs::copy_dir(
                &report.dir,
                &copy
                    .path()
                    .join("checkpoints")
                    .join(report.dir.file_name().unwrap()),
            )
            .unwrap();

            let recovered = Store::open(small_config(copy.path())).unwrap();
            let info = recovered.recovery_info().unwrap().clone();
            assert_eq!(info.version, report.version);
            let bounds = bounds(&acknowledged_before, &snapshot(&issued));
            if let Err(problem) = verify_recovered(&recovered, &spec, &indices, &bounds) {
                panic!("round {round} strategy {strategy}: {problem}");
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
