//! The pending path of a tiered store (`session/pending.rs`): reads and upserts of keys whose
//! records are in the page file park, their reads run many at a time, and `complete_pending`
//! finishes them. The oracles are what the test was told: values it wrote, in the order it
//! started the operations, and the serials the engine handed back.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::tier::{check_model, key, tier_config, value};
use prefixkv_engine::{EngineError, Finished, Session, Started, Store, Strategy};

const KEYS: u64 = 30_000;

/// A tiered store holding `KEYS` keys (generation 0), most of them evicted.
fn loaded(dir: &std::path::Path, copy_reads: bool) -> Arc<Store> {
    let mut config = tier_config(dir);
    config.copy_cold_reads_to_tail = copy_reads;
    let store = Store::open(config).unwrap();
    let mut session = store.start_session();
    for index in 0..KEYS {
        session.upsert(&key(index), &value(index, 0)).unwrap();
    }
    store
}

/// What finished, by token: (serial, found, value).
type Results = HashMap<u64, (u64, bool, Vec<u8>)>;

/// Keeps many reads in flight: finishes what completed once 48 operations are parked.
fn keep_in_flight(session: &mut Session, results: &mut Results) {
    if session.pending() >= 48 {
        session
            .complete_pending(false, |finished| record(finished, results))
            .unwrap();
    }
}

fn drain(session: &mut Session, results: &mut Results) {
    while session.pending() > 0 {
        session
            .complete_pending(true, |finished| record(finished, results))
            .unwrap();
    }
}

fn record(finished: Result<Finished<'_>, (u64, EngineError)>, results: &mut Results) {
    let finished = finished.unwrap_or_else(|(token, error)| panic!("operation {token}: {error}"));
    let previous = results.insert(
        finished.token,
        (finished.serial, finished.found, finished.value.to_vec()),
    );
    assert!(
        previous.is_none(),
        "token {} finished twice",
        finished.token
    );
}

#[test]
fn cold_reads_park_and_finish_with_the_written_values() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded(dir.path(), false);
    let mut session = store.start_session();
    let mut results = Results::new();
    let mut out = Vec::new();
    let mut parked = 0;
    for index in 0..KEYS {
        match session.start_read(&key(index), &mut out, index).unwrap() {
            Started::Done(found) => {
                assert!(found, "key {index} is missing");
                assert_eq!(out, value(index, 0), "key {index}");
            }
            Started::Pending => {
                parked += 1;
                keep_in_flight(&mut session, &mut results);
            }
        }
    }
    drain(&mut session, &mut results);
    // Most keys left memory: without parking, this test would not exercise the pending path.
    assert!(parked > KEYS / 2, "only {parked} of {KEYS} reads parked");
    assert_eq!(results.len() as u64, parked);
    for (&index, (_, found, bytes)) in &results {
        assert!(found, "pending read of key {index} found nothing");
        assert_eq!(bytes, &value(index, 0), "pending read of key {index}");
    }
    // Every operation took exactly one serial: the parked ones when they finished.
    assert_eq!(session.serial(), KEYS);
    let mut serials: Vec<u64> = results.values().map(|(serial, ..)| *serial).collect();
    serials.sort_unstable();
    serials.dedup();
    assert_eq!(
        serials.len() as u64,
        parked,
        "two operations share a serial"
    );
}

#[test]
fn operations_on_one_key_finish_in_start_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded(dir.path(), false);
    let mut session = store.start_session();
    let mut results = Results::new();
    let mut out = Vec::new();
    // For each cold key: upsert generation 1, read, upsert generation 2, read. The reads must
    // see the upsert started just before them, whatever order the page reads complete in.
    let mut expected = HashMap::new();
    let mut token = 0;
    let mut model = HashMap::new();
    for index in (0..KEYS).step_by(97) {
        for generation in 1..=2 {
            let written = value(index, generation);
            if let Started::Done(existed) =
                session.start_upsert(&key(index), &written, token).unwrap()
            {
                assert!(existed, "key {index} existed");
            }
            token += 1;
            match session.start_read(&key(index), &mut out, token).unwrap() {
                Started::Done(found) => {
                    assert!(found);
                    assert_eq!(
                        out, written,
                        "key {index} read after generation {generation}"
                    );
                }
                Started::Pending => {
                    expected.insert(token, written.clone());
                }
            }
            token += 1;
            model.insert(index, Some(written));
            keep_in_flight(&mut session, &mut results);
        }
    }
    drain(&mut session, &mut results);
    assert!(
        expected.len() > 50,
        "too few reads parked: {}",
        expected.len()
    );
    for (token, written) in &expected {
        let (_, found, bytes) = &results[token];
        assert!(found);
        assert_eq!(
            bytes, written,
            "read {token} did not see the upsert started before it"
        );
    }
    check_model(&store, &model, "after the pending upserts");
    // The pending upserts are durable as synchronous ones are: checkpoint, restart, check.
    session.suspend();
    let token = store.checkpoint(Strategy::FoldOver).unwrap();
    store
        .wait_for_commit(token, std::time::Duration::from_secs(120))
        .unwrap();
    drop(session);
    drop(store);
    let store = Store::open(tier_config(dir.path())).unwrap();
    check_model(&store, &model, "after a restart");
}

#[test]
fn copied_reads_stay_in_memory() {
    for copy_reads in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = loaded(dir.path(), copy_reads);
        let mut session = store.start_session();
        let mut out = Vec::new();
        let hot: Vec<u64> = (0..KEYS / 2).step_by(50).collect();
        let mut parked = [0u64; 2];
        for parked in parked.iter_mut() {
            let mut results = Results::new();
            for &index in &hot {
                if let Started::Pending = session.start_read(&key(index), &mut out, index).unwrap()
                {
                    *parked += 1;
                    keep_in_flight(&mut session, &mut results);
                }
            }
            drain(&mut session, &mut results);
        }
        assert!(
            parked[0] > hot.len() as u64 / 2,
            "the hot keys were cold at first: {parked:?} of {} (copies {copy_reads})",
            hot.len()
        );
        if copy_reads {
            // Read once from the page file, then copied to the tail: in memory the second time.
            assert_eq!(
                parked[1], 0,
                "copied records were read from the page file again"
            );
        } else {
            assert_eq!(
                parked[1], parked[0],
                "without copies the hot keys stay cold"
            );
        }
        let model = (0..KEYS)
            .map(|index| (index, Some(value(index, 0))))
            .collect();
        check_model(&store, &model, "after the copies");
    }
}

#[test]
fn a_damaged_page_file_fails_the_operation_not_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let store = loaded(dir.path(), false);
    // Cut every data segment of the page file to nothing: the records are gone.
    for entry in std::fs::read_dir(dir.path().join("log")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .extension()
            .is_some_and(|extension| extension == "pages")
        {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(0)
                .unwrap();
        }
    }
    let mut session = store.start_session();
    let mut out = Vec::new();
    assert_eq!(
        session.start_read(&key(0), &mut out, 7).unwrap(),
        Started::Pending,
        "key 0 was evicted first"
    );
    let mut failed = None;
    while session.pending() > 0 {
        session
            .complete_pending(true, |finished| {
                let (token, error) = finished.expect_err("the record's bytes are gone");
                failed = Some((token, error.to_string()));
            })
            .unwrap();
    }
    let (token, error) = failed.expect("the read finished");
    assert_eq!(token, 7);
    assert!(error.contains("read a record"), "unclear error: {error}");
}
