//! The storage tier (`StoreConfig::storage_tier`): data several times the log's memory budget is
//! written, read, updated, deleted and checkpointed; old pages go to the page file in `dir/log`
//! and reads of their records come back from it. Every check compares with what the test wrote
//! (a model), never with what the store reports about itself.

mod common;

use common::tier::{check_model, key, page_file_bytes, tier_config, value};

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use prefixkv_engine::{EngineError, Store, Strategy};
use prefixkv_testkit::rng::Rng;

#[test]
fn four_times_the_budget_reads_back_from_the_page_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(tier_config(dir.path())).unwrap();
    let keys = 4 * (1 << 20) / 140; // records of ~136 bytes: four budgets of data
    let mut session = store.start_session();
    let mut model = HashMap::new();
    for index in 0..keys {
        session.upsert(&key(index), &value(index, 0)).unwrap();
        model.insert(index, Some(value(index, 0)));
    }
    assert!(
        store.log_memory_in_use_bytes() <= 1 << 20,
        "memory stays within the budget: {}",
        store.log_memory_in_use_bytes()
    );
    assert!(
        page_file_bytes(dir.path()) >= 2 << 20,
        "old pages went to the page file: {} bytes",
        page_file_bytes(dir.path())
    );
    drop(session);
    check_model(&store, &model, "read back");
}

#[test]
fn updates_deletes_and_rmw_of_cold_keys_keep_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(tier_config(dir.path())).unwrap();
    let keys = 30_000u64; // ~4 MiB of records
    let mut session = store.start_session();
    let mut model = HashMap::new();
    for index in 0..keys {
        session.upsert(&key(index), &value(index, 0)).unwrap();
        model.insert(index, Some(value(index, 0)));
    }
    let mut rng = Rng::from_env("PREFIXKV_TIER_SEED");
    let mut out = Vec::new();
    for generation in 1..40_000u64 {
        let index = rng.next_u64() % keys;
        match rng.next_u64() % 4 {
            0 => {
                session
                    .upsert(&key(index), &value(index, generation))
                    .unwrap();
                model.insert(index, Some(value(index, generation)));
            }
            1 => {
                session.delete(&key(index)).unwrap();
                model.insert(index, None);
            }
            2 => {
                // Append a byte to the value (or start one): a read-modify-write of a record
                // that is usually on disk.
                let mut expected = model[&index].clone().unwrap_or_default();
                expected.push(b'+');
                session
                    .rmw(&key(index), |old, new| {
                        new.extend_from_slice(old.unwrap_or_default());
                        new.push(b'+');
                    })
                    .unwrap();
                model.insert(index, Some(expected));
            }
            _ => {
                let found = session.read(&key(index), &mut out).unwrap();
                assert_eq!(found.then_some(&out), model[&index].as_ref(), "key {index}");
            }
        }
    }
    drop(session);
    check_model(&store, &model, "read back");
}

/// Two threads increment the same counters at the same moments, and between two increments of
/// a counter its record has left memory: no increment is lost (a read-copy-update from a record
/// read off disk must not overwrite a newer one).
#[test]
fn concurrent_increments_of_cold_counters_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(tier_config(dir.path())).unwrap();
    const COUNTERS: u64 = 2048;
    const INCREMENTS: u64 = 12_000;
    // Between two increments of one counter both threads write 2048 * 4 filler records of ~136
    // bytes each: over 2 MiB, twice the memory budget.
    const FILLER_PER_STEP: u64 = 4;
    std::thread::scope(|scope| {
        for thread in 0..2u64 {
            let mut session = store.start_session();
            scope.spawn(move || {
                for step in 0..INCREMENTS {
                    let counter = step % COUNTERS;
                    session
                        .rmw(&(1u64 << 40 | counter).to_be_bytes(), |old, new| {
                            let current = old.map_or(0, |bytes| {
                                u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
                            });
                            new.extend_from_slice(&(current + 1).to_le_bytes());
                        })
                        .unwrap();
                    for filler in 0..FILLER_PER_STEP {
                        let filler_key = (thread << 32) | (step * FILLER_PER_STEP + filler);
                        session
                            .upsert(&key(filler_key), &value(filler_key, 0))
                            .unwrap();
                    }
                }
                session.suspend();
            });
        }
    });
    assert!(
        page_file_bytes(dir.path()) > 4 << 20,
        "the filler was evicted"
    );
    let mut session = store.start_session();
    let mut out = Vec::new();
    let mut total = 0;
    for counter in 0..COUNTERS {
        assert!(session
            .read(&(1u64 << 40 | counter).to_be_bytes(), &mut out)
            .unwrap());
        total += u64::from_le_bytes(out.as_slice().try_into().unwrap());
    }
    assert_eq!(total, 2 * INCREMENTS);
}

/// The reads of evicted keys really come from the page file, and the model check sees a change
/// there: with the value bytes in the page file's data rewritten, an early key reads back
/// changed, and [`check_model`] would fail.
#[test]
fn evicted_keys_are_read_from_the_page_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tier_config(dir.path());
    // The first read would copy key 0 to the tail and the second read it from memory.
    config.copy_cold_reads_to_tail = false;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    for index in 0..30_000u64 {
        session.upsert(&key(index), &value(index, 0)).unwrap();
    }
    let mut out = Vec::new();
    assert!(session.read(&key(0), &mut out).unwrap());
    assert_eq!(out, value(0, 0));
    for entry in std::fs::read_dir(dir.path().join("log")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .extension()
            .is_some_and(|extension| extension == "pages")
        {
            let bytes = std::fs::read(&path).unwrap();
            let tampered: Vec<u8> = bytes
                .iter()
                .map(|&byte| if byte == b'v' { b'w' } else { byte })
                .collect();
            std::fs::write(&path, tampered).unwrap();
        }
    }
    assert!(session.read(&key(0), &mut out).unwrap());
    assert_ne!(
        out,
        value(0, 0),
        "key 0 was read from memory, not from the page file"
    );
    assert!(
        out.starts_with(b"0:0:w"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
}

/// Every strategy checkpoints a store larger than its budget, and a restart (which loads the
/// checkpoint, evicting as it goes) holds the checkpointed values.
#[test]
fn checkpoints_of_every_strategy_recover_a_store_larger_than_memory() {
    for strategy in Strategy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let mut model = HashMap::new();
        {
            let store = Store::open(tier_config(dir.path())).unwrap();
            let mut session = store.start_session();
            for index in 0..30_000u64 {
                session.upsert(&key(index), &value(index, 0)).unwrap();
                model.insert(index, Some(value(index, 0)));
            }
            for index in (0..30_000u64).step_by(3) {
                session.upsert(&key(index), &value(index, 1)).unwrap();
                model.insert(index, Some(value(index, 1)));
            }
            for index in (1..30_000u64).step_by(5) {
                session.delete(&key(index)).unwrap();
                model.insert(index, None);
            }
            session.suspend();
            let token = store.checkpoint(strategy).unwrap();
            store
                .wait_for_commit(token, Duration::from_secs(120))
                .unwrap_or_else(|error| panic!("{strategy}: {error}"));
        }
        let store = Store::open(tier_config(dir.path())).unwrap();
        assert!(store.recovery_info().is_some(), "{strategy}");
        assert!(store.log_memory_in_use_bytes() <= 1 << 20, "{strategy}");
        check_model(&store, &model, "read back");
    }
}

#[test]
fn a_tier_refuses_rollback_and_garbage_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tier_config(dir.path());
    config.rollback_ready = true;
    assert!(matches!(
        Store::open(config),
        Err(EngineError::InvalidArgument(message)) if message.contains("rollback_ready")
    ));
    let mut config = tier_config(dir.path());
    config.compact_dead_fraction = Some(0.5);
    assert!(matches!(
        Store::open(config),
        Err(EngineError::InvalidArgument(message)) if message.contains("compact_dead_fraction")
    ));
}

/// The first pages of the page file's data segments (from their names, `log-<20 digits>.pages`).
fn segment_first_pages(dir: &Path) -> Vec<u64> {
    let mut firsts: Vec<u64> = std::fs::read_dir(dir.join("log"))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let digits = name
                .strip_prefix("log-")?
                .strip_suffix(".pages")?
                .to_string();
            Some(digits.parse::<u64>().unwrap())
        })
        .collect();
    firsts.sort_unstable();
    firsts
}

/// Waits (at most a minute) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Overwrites: the page file is compacted (its oldest segments deleted, its size bounded by the
/// live data rather than by the bytes written), and every key keeps its newest value.
#[test]
fn the_page_file_is_compacted_under_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(tier_config(dir.path())).unwrap();
    let mut session = store.start_session();
    let mut model = HashMap::new();
    // More live data than the budget (so some of it must be in the file), far more written.
    const KEYS: u64 = 12_000; // ~1.6 MiB live
    const ROUNDS: u64 = 20; // ~32 MiB written
    let mut rng = Rng::new(7);
    for round in 0..ROUNDS {
        for index in 0..KEYS {
            // A few keys are deleted and come back later: tombstones go through the file too.
            if rng.below(50) == 0 {
                session.delete(&key(index)).unwrap();
                model.insert(index, None);
            } else {
                session.upsert(&key(index), &value(index, round)).unwrap();
                model.insert(index, Some(value(index, round)));
            }
        }
    }
    session.suspend();
    // Without compaction the file holds everything evicted: over 30 MiB.
    wait_until("the page file shrinks below 8 MiB", || {
        page_file_bytes(dir.path()) < 8 << 20
    });
    assert!(
        segment_first_pages(dir.path()).first() > Some(&0),
        "the oldest segment was deleted: {:?}",
        segment_first_pages(dir.path())
    );
    assert!(store.log_memory_in_use_bytes() <= 1 << 20);
    check_model(&store, &model, "read back");
    drop(session);
    // A checkpoint and a restart after compaction hold the same.
    let token = store.checkpoint(Strategy::Persian).unwrap();
    store
        .wait_for_commit(token, Duration::from_secs(120))
        .unwrap();
    drop(store);
    let store = Store::open(tier_config(dir.path())).unwrap();
    check_model(&store, &model, "read back");
}

/// Compaction of the page file runs while sessions read-modify-write cold counters and
/// overwrite keys: no increment and no overwrite is lost (compaction decides whether a record
/// is its key's newest under the writers' tier stripe).
#[test]
fn concurrent_writes_while_the_page_file_is_compacted_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(tier_config(dir.path())).unwrap();
    const COUNTERS: u64 = 2048;
    const INCREMENTS: u64 = 12_000;
    const CHURN_KEYS: u64 = 4096;
    const CHURN_PER_STEP: u64 = 4;
    let counter_key = |counter: u64| (1u64 << 40 | counter).to_be_bytes();
    std::thread::scope(|scope| {
        for thread in 0..2u64 {
            let mut session = store.start_session();
            scope.spawn(move || {
                for step in 0..INCREMENTS {
                    session
                        .rmw(&counter_key(step % COUNTERS), |old, new| {
                            let current = old.map_or(0, |bytes| {
                                u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
                            });
                            new.extend_from_slice(&(current + 1).to_le_bytes());
                        })
                        .unwrap();
                    for churn in 0..CHURN_PER_STEP {
                        let index = (step * CHURN_PER_STEP + churn) % CHURN_KEYS;
                        let churn_key = (thread << 32) | index;
                        session
                            .upsert(&key(churn_key), &value(churn_key, step))
                            .unwrap();
                    }
                }
                session.suspend();
            });
        }
    });
    // ~13 MiB written, ~1.4 MiB live: compaction must delete old segments. It runs on its own
    // thread (every 10 ms while the file is mostly garbage), so on a loaded machine it may still
    // be behind the writers when they end: wait for it, bounded.
    wait_until("compaction deletes the oldest segment", || {
        segment_first_pages(dir.path()).first() > Some(&0)
    });
    let mut session = store.start_session();
    let mut out = Vec::new();
    let mut total = 0;
    for counter in 0..COUNTERS {
        assert!(session.read(&counter_key(counter), &mut out).unwrap());
        total += u64::from_le_bytes(out.as_slice().try_into().unwrap());
    }
    assert_eq!(total, 2 * INCREMENTS);
    // Each churn key's last write: the last step that wrote its index.
    let writes = INCREMENTS * CHURN_PER_STEP;
    for thread in 0..2u64 {
        for index in 0..CHURN_KEYS {
            let last_write = (writes - 1 - index) / CHURN_KEYS * CHURN_KEYS + index;
            let churn_key = (thread << 32) | index;
            assert!(session.read(&key(churn_key), &mut out).unwrap());
            assert_eq!(out, value(churn_key, last_write / CHURN_PER_STEP));
        }
    }
}

/// Records longer than a cold read's first 512 bytes (its header and most records) come back
/// whole: the rest of the record is read after the header says how long it is.
#[test]
fn long_records_read_back_from_the_page_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(tier_config(dir.path())).unwrap();
    let mut session = store.start_session();
    let long_value = |index: u64| {
        let mut value = format!("{index}:").into_bytes();
        // 513 to ~3 KiB: every length class past the first read, none a multiple of 8.
        value.resize(513 + (index as usize * 37) % 2600, b'L');
        value
    };
    let keys = 2_000u64; // ~4 MiB: four budgets
    for index in 0..keys {
        session.upsert(&key(index), &long_value(index)).unwrap();
    }
    assert!(
        page_file_bytes(dir.path()) > 0,
        "the long records were evicted"
    );
    let mut out = Vec::new();
    for index in 0..keys {
        assert!(session.read(&key(index), &mut out).unwrap(), "key {index}");
        assert_eq!(out, long_value(index), "key {index}");
    }
}
