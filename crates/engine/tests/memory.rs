//! Bounded memory: sustained updates with periodic checkpoints stay within `log_memory_bytes`
//! (8 MiB here) over many checkpoint cycles, with no OutOfMemory error.
//! `PREFIXKV_MEMORY_CHECKPOINTS` (default 50) cycles.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prefixkv_engine::{Store, Strategy};

#[test]
fn memory_stays_within_budget_over_many_checkpoints() {
    let cycles = common::env_count("PREFIXKV_MEMORY_CHECKPOINTS", 50);
    let dir = tempfile::tempdir().unwrap();
    let config = common::small_config(dir.path());
    let budget = config.log_memory_bytes;
    let store = Store::open(config).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2u64)
        .map(|thread| {
            let mut session = store.start_session();
            let (stop, writes) = (stop.clone(), writes.clone());
            std::thread::spawn(move || {
                let mut counter = 0u64;
                let value_a = vec![7u8; 64];
                let value_b = vec![9u8; 100];
                while !stop.load(Ordering::Relaxed) {
                    counter += 1;
                    let key = (thread << 32) | (counter % 2500);
                    // Alternate sizes so in-place updates fail and read-copy-update leaves garbage.
                    let value = if counter.is_multiple_of(3) {
                        &value_b
                    } else {
                        &value_a
                    };
                    session
                        .upsert(&key.to_be_bytes(), value)
                        .expect("writes never fail under the budget");
                    if counter.is_multiple_of(7) {
                        session.delete(&(key ^ 1).to_be_bytes()).unwrap();
                    }
                    writes.fetch_add(1, Ordering::Relaxed);
                }
                session.suspend();
            })
        })
        .collect();
    let mut peak = 0;
    for cycle in 0..cycles {
        let before = writes.load(Ordering::Relaxed);
        while writes.load(Ordering::Relaxed) < before + 20_000 {
            peak = peak.max(store.log_memory_in_use_bytes());
            std::thread::yield_now();
        }
        let strategy = Strategy::ALL[cycle as usize % 5];
        let token = store.checkpoint(strategy).unwrap();
        store
            .wait_for_commit(token, Duration::from_secs(120))
            .unwrap();
        peak = peak.max(store.log_memory_in_use_bytes());
        assert!(store.log_memory_in_use_bytes() <= budget);
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    assert!(peak <= budget, "peak {peak} > budget {budget}");
    eprintln!(
        "peak log memory {peak} of {budget} bytes, {} writes",
        writes.load(Ordering::Relaxed)
    );
}
