//! An exclusive body's writes (MULTI/EXEC, a script) are one unit for durability: after a power
//! cut at any point, in every durability mode, the recovered state holds all of a body's writes
//! or none, and each mode keeps what it promised.
//!
//! The writer runs bodies one after another: body `n` writes the value `n` to the `KEYS_PER_BODY`
//! keys of slot `n % SLOTS`, through several transactions (as an EXEC of several commands does),
//! and counts `n` acknowledged once the body's mark `wait`ed. The split size is lowered so that
//! every body's log group spans several records (a first part, middle parts, a last part), and
//! every `BIG_EVERY`th body is many times larger. The oracle is the writer's own count: the
//! recovered state must be exactly the state after bodies `1..=k` for one `k` (every key of a slot
//! holds the newest `n <= k` of that slot: a body cut in two would leave a slot with two values),
//! with `k` at least what the mode promised:
//! - `always`: the last acknowledged body;
//! - `everysec`: the last body before a returned `sync`, or covered by a finished checkpoint;
//! - `checkpoint`: the last body acknowledged before the request of the last finished checkpoint.
//!
//! `tampered_logs_*` shows the oracle is not vacuous and that the group format is what keeps it:
//! a log edited so that a group's first parts read as whole records is recovered as half a body,
//! and the oracle reports it; a log cut before a group's last part is recovered without the
//! group.
//!
//! `STORE_GROUP_CUTS` (default 240) power-cut points; `STORE_GROUP_CUT=n` replays one.

use std::collections::BTreeMap;
use std::sync::Arc;

use prefixkv_storage::log::{Log, LogConfig};
use prefixkv_storage::{CrashMode, SimDisk};
use prefixkv_store::record::{decode_record, encode_operation, set_part, start_record, Part};
use prefixkv_store::{Durability, DurableStore, Options};
use prefixkv_testkit::rng::{env_count, Rng};

const DIR: &str = "/data/store";
const SLOTS: u64 = 16;
const KEYS_PER_BODY: u64 = 6;
/// Keys per transaction inside a body.
const KEYS_PER_TXN: u64 = 2;
/// Every this many bodies, one writes values `BIG_FACTOR` times longer.
const BIG_EVERY: u64 = 7;
const BIG_FACTOR: usize = 20;
/// Small enough that every body spans several log records.
const SPLIT_BYTES: usize = 96;

fn options(durability: Durability) -> Options {
    let mut options = Options::new(DIR, durability);
    options.engine.index_buckets = 1 << 8;
    options.engine.log_memory_bytes = 16 << 20;
    options.engine.log_page_bytes = 64 << 10;
    options.engine.flusher_threads = 2;
    options.oplog_segment_bytes = 8192;
    options.record_split_bytes = SPLIT_BYTES;
    options
}

fn sim_options(disk: &SimDisk, durability: Durability) -> Options {
    let mut options = options(durability);
    options.disk = disk.as_disk();
    options
}

fn key(slot: u64, index: u64) -> Vec<u8> {
    format!("s{slot}:k{index}").into_bytes()
}

/// The value body `n` writes: `n`, padded (long for the big bodies).
fn value(n: u64) -> Vec<u8> {
    let width = if n.is_multiple_of(BIG_EVERY) {
        24 * BIG_FACTOR
    } else {
        24
    };
    format!("{n:0>width$}").into_bytes()
}

fn parse(value: &[u8]) -> u64 {
    std::str::from_utf8(value).unwrap().parse().unwrap()
}

/// What the writer knows.
#[derive(Default, Clone, Copy, Debug)]
struct Writer {
    /// Bodies started (body numbers start at 1).
    started: u64,
    /// Highest body whose mark `wait` returned.
    acknowledged: u64,
    /// Highest body known durable (before a returned `sync`, or before a finished checkpoint's
    /// request).
    durable: u64,
}

/// The state after bodies `1..=k`.
fn prefix_state(k: u64) -> BTreeMap<Vec<u8>, u64> {
    let mut state = BTreeMap::new();
    for n in k.saturating_sub(SLOTS - 1).max(1)..=k {
        for index in 0..KEYS_PER_BODY {
            state.insert(key(n % SLOTS, index), n);
        }
    }
    state
}

fn read_state(store: &Arc<DurableStore>) -> BTreeMap<Vec<u8>, u64> {
    let mut session = store.session().unwrap();
    let mut state = BTreeMap::new();
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, 64, |key, value| {
                state.insert(key.to_vec(), parse(value));
            })
            .unwrap();
        if cursor == 0 {
            return state;
        }
    }
}

/// Runs body `n`: its writes through several transactions in one exclusive body. Whether it was
/// acknowledged.
fn body(session: &mut prefixkv_store::StoreSession, n: u64) -> bool {
    let slot = n % SLOTS;
    let (written, mark) = session.exclusive(|session| {
        for first in (0..KEYS_PER_BODY).step_by(KEYS_PER_TXN as usize) {
            let keys: Vec<Vec<u8>> = (first..first + KEYS_PER_TXN)
                .map(|index| key(slot, index))
                .collect();
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let mut txn = session.begin(&refs);
            for key in &keys {
                if txn.put(key, &value(n)).is_err() {
                    return false;
                }
            }
            match txn.commit() {
                // Inside a body a transaction's mark has no log position: the body's has it.
                Ok(Some(mark)) => assert!(mark.lsn.is_none() && mark.ticket.is_none()),
                _ => return false,
            }
        }
        true
    });
    written
        && matches!(
            mark.map(|mark| mark.map(|mark| mark.wait())),
            Ok(Some(Ok(())))
        )
}

/// One generation of bodies until the disk dies (or `limit` bodies).
fn run(store: &Arc<DurableStore>, writer: &mut Writer, rng: &mut Rng, limit: u64) {
    let mut session = store.session().unwrap();
    for _ in 0..limit {
        writer.started += 1;
        if !body(&mut session, writer.started) {
            return;
        }
        writer.acknowledged = writer.started;
        match rng.below(12) {
            0 => {
                let before = writer.acknowledged;
                session.suspend();
                if store.checkpoint().is_err() {
                    return;
                }
                writer.durable = writer.durable.max(before);
            }
            1 if store.oplog().is_some() => {
                let before = writer.acknowledged;
                if store.sync().is_err() {
                    return;
                }
                writer.durable = writer.durable.max(before);
            }
            _ => {}
        }
    }
}

/// Checks the recovered state; returns the `k` it is the state after, or what is wrong.
fn check(
    state: &BTreeMap<Vec<u8>, u64>,
    writer: &Writer,
    durability: Durability,
) -> Result<u64, String> {
    let k = state.values().copied().max().unwrap_or(0);
    let expected = prefix_state(k);
    if *state != expected {
        let (key, found) = state
            .iter()
            .find(|(key, value)| expected.get(*key) != Some(value))
            .map(|(key, value)| (String::from_utf8_lossy(key).into_owned(), Some(*value)))
            .unwrap_or_else(|| ("(a key missing)".into(), None));
        return Err(format!(
            "({durability}): the recovered state is not the state after bodies 1..={k}: key \
             {key} holds {found:?} (a body cut in two?)"
        ));
    }
    if k > writer.started {
        return Err(format!(
            "body {k} recovered but only {} were started",
            writer.started
        ));
    }
    let must_have = match durability {
        Durability::Always => writer.acknowledged.max(writer.durable),
        _ => writer.durable,
    };
    if k < must_have {
        return Err(format!(
            "({durability}): recovered through body {k}, but body {must_have} was acknowledged \
             as durable"
        ));
    }
    Ok(k)
}

fn run_cut(cut: u64) {
    let disk = SimDisk::new(cut);
    let mut rng = Rng::new(cut);
    let durability = [
        Durability::Always,
        Durability::EverySec,
        Durability::Checkpoint,
    ][cut as usize % 3];
    let mut writer = Writer::default();
    for generation in 0..3 {
        let (store, recovered) = DurableStore::open(sim_options(&disk, durability))
            .unwrap_or_else(|e| panic!("cut {cut} generation {generation}: reopen failed: {e}"));
        if generation > 0 {
            let k = check(&read_state(&store), &writer, durability).unwrap_or_else(|problem| {
                panic!("cut {cut} generation {generation}: {problem}; recovery: {recovered}")
            });
            writer = Writer {
                started: k,
                acknowledged: k,
                durable: k,
            };
        }
        // Power cut at disk call `cut / 3 + generation * 37`: the cuts walk through the disk
        // calls of a run (every mode meets every region), so some land inside a group's parts.
        disk.cut_after(cut / 3 + generation * 37 + rng.below(3));
        run(&store, &mut writer, &mut rng, 120);
        disk.kill();
        drop(store);
        disk.crash(CrashMode::Random);
    }
}

#[test]
fn a_power_cut_anywhere_recovers_every_body_whole_or_not_at_all() {
    if let Ok(cut) = std::env::var("STORE_GROUP_CUT") {
        run_cut(cut.parse().unwrap());
        return;
    }
    for cut in 0..env_count("STORE_GROUP_CUTS", 240) {
        if std::panic::catch_unwind(|| run_cut(cut)).is_err() {
            panic!("cut {cut} failed; STORE_GROUP_CUT={cut} replays it");
        }
    }
}

/// A body's writes inside are acknowledged only with the body: each body is one group, split in
/// several records, and a clean reopen (no crash) replays all of it.
#[test]
fn a_body_is_one_group_of_several_records() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
    let mut session = store.session().unwrap();
    let before = store.oplog().unwrap().next_lsn();
    assert!(body(&mut session, 1));
    let after = store.oplog().unwrap().next_lsn();
    assert!(after - before >= 3, "one body, {} records", after - before);
    let parts: Vec<Part> = store
        .oplog()
        .unwrap()
        .replay(before)
        .unwrap()
        .map(|item| decode_record(&item.unwrap().1).unwrap().part)
        .collect();
    assert_eq!(parts.first(), Some(&Part::First));
    assert_eq!(parts.last(), Some(&Part::Last));
    assert!(parts[1..parts.len() - 1].iter().all(|p| *p == Part::Middle));
    drop(session);
    drop(store);
    let (store, recovered) =
        DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
    assert_eq!(read_state(&store), prefix_state(1), "{recovered}");
    assert!(recovered.incomplete_groups.is_empty(), "{recovered}");
}

fn options_at(dir: &std::path::Path, durability: Durability) -> Options {
    let mut options = options(durability);
    options.dir = dir.to_path_buf();
    options.engine.dir = dir.to_path_buf();
    options
}

/// Rewrites the oplog in `dir` (the store closed): `edit` gets every (LSN, payload) and returns
/// the payloads to keep, in order, from the same first LSN.
fn rewrite_log(dir: &std::path::Path, edit: impl FnOnce(Vec<(u64, Vec<u8>)>) -> Vec<Vec<u8>>) {
    let log_dir = dir.join("oplog");
    let (log, _) = Log::open(&log_dir, LogConfig::default()).unwrap();
    let first = log.oldest_lsn();
    let records: Vec<(u64, Vec<u8>)> = log.replay(first).unwrap().map(Result::unwrap).collect();
    log.close().unwrap();
    std::fs::remove_dir_all(&log_dir).unwrap();
    let (log, _) = Log::open(
        &log_dir,
        LogConfig {
            first_lsn: first,
            ..LogConfig::default()
        },
    )
    .unwrap();
    for payload in edit(records) {
        let _appended = log.append(&payload).unwrap();
    }
    log.flush_and_sync().unwrap();
    log.close().unwrap();
}

/// The last group of the log: its records' indexes.
fn last_group(records: &[(u64, Vec<u8>)]) -> std::ops::Range<usize> {
    let last = records.len() - 1;
    assert_eq!(decode_record(&records[last].1).unwrap().part, Part::Last);
    let first = (0..last)
        .rev()
        .find(|&i| decode_record(&records[i].1).unwrap().part == Part::First)
        .unwrap();
    first..records.len()
}

#[test]
fn tampered_logs_show_the_oracle_catches_half_a_body_and_a_cut_group_is_dropped() {
    let bodies = 5;
    let writer = Writer {
        started: bodies,
        acknowledged: bodies,
        durable: bodies,
    };
    let write = |dir: &std::path::Path| {
        let (store, _) = DurableStore::open(options_at(dir, Durability::Always)).unwrap();
        let mut session = store.session().unwrap();
        for n in 1..=bodies {
            assert!(body(&mut session, n));
        }
        drop(session);
        store.sync().unwrap();
    };
    // Untouched: the state after every body.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let (store, _) = DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
    assert_eq!(
        check(&read_state(&store), &writer, Durability::Always),
        Ok(bodies)
    );
    drop(store);

    // The last body's group loses its last part and the rest reads as whole records (as a
    // format without groups would have it): recovery applies half the body, and the oracle
    // reports it.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    rewrite_log(dir.path(), |mut records| {
        let group = last_group(&records);
        records.truncate(group.end - 1);
        records
            .into_iter()
            .map(|(_, mut payload)| {
                set_part(&mut payload, Part::Whole);
                payload
            })
            .collect()
    });
    let (store, _) = DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
    let problem = check(&read_state(&store), &writer, Durability::Always).unwrap_err();
    assert!(problem.contains("cut in two"), "{problem}");
    drop(store);

    // The same cut with the group flags kept: recovery drops the whole group and says so; the
    // state is the state after the bodies before it (the oracle then reports only that an
    // acknowledged body is missing, which is what a cut log means in `always`).
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    rewrite_log(dir.path(), |mut records| {
        let group = last_group(&records);
        records.truncate(group.end - 1);
        records.into_iter().map(|(_, payload)| payload).collect()
    });
    let (store, recovered) =
        DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
    assert_eq!(recovered.incomplete_groups.len(), 1, "{recovered}");
    assert!(recovered.to_string().contains("incomplete log group"));
    let cut_writer = Writer {
        acknowledged: bodies - 1,
        durable: bodies - 1,
        ..writer
    };
    assert_eq!(
        check(&read_state(&store), &cut_writer, Durability::Always),
        Ok(bodies - 1)
    );
    let problem = check(&read_state(&store), &writer, Durability::Always).unwrap_err();
    assert!(problem.contains("acknowledged as durable"), "{problem}");
    drop(store);

    // A group cut by a crash and followed by a new process's writes stays dropped: the next
    // group starts with a first or whole part, which closes nothing.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    rewrite_log(dir.path(), |mut records| {
        let group = last_group(&records);
        records.truncate(group.end - 1);
        let mut payloads: Vec<Vec<u8>> = records.into_iter().map(|(_, p)| p).collect();
        // A later process's transaction: one whole record writing an unrelated key.
        let mut whole = Vec::new();
        start_record(&mut whole, 999);
        encode_operation(
            &mut whole,
            999,
            prefixkv_store::record::Operation {
                serial: 1,
                key: b"later",
                value: Some(b"0"),
            },
        );
        payloads.push(whole);
        payloads
    });
    let (store, recovered) =
        DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
    assert_eq!(recovered.incomplete_groups.len(), 1, "{recovered}");
    let mut state = read_state(&store);
    assert_eq!(state.remove(b"later".as_slice()), Some(0));
    assert_eq!(prefix_state(bodies - 1), state);
}

/// A standalone transaction larger than the split size is a group too: cut before its last part,
/// none of it is recovered.
#[test]
fn a_split_transaction_is_recovered_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
        let mut session = store.session().unwrap();
        let keys: Vec<Vec<u8>> = (0..KEYS_PER_BODY).map(|i| key(1, i)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let mut txn = session.begin(&refs);
        for key in &keys {
            txn.put(key, &value(1)).unwrap();
        }
        txn.commit().unwrap().unwrap().wait().unwrap();
    }
    rewrite_log(dir.path(), |records| {
        assert!(records.len() >= 3, "{} records", records.len());
        let keep = records.len() - 1;
        records.into_iter().take(keep).map(|(_, p)| p).collect()
    });
    let (store, recovered) =
        DurableStore::open(options_at(dir.path(), Durability::Always)).unwrap();
    assert!(read_state(&store).is_empty(), "{recovered}");
    assert_eq!(recovered.incomplete_groups.len(), 1, "{recovered}");
}

/// Reads inside `StoreSession::shared` never see part of an exclusive body: a writer's bodies
/// set `a` and `b` to the same value through two transactions; readers read both in one shared
/// scope and must find them equal. (Plain reads outside a shared scope take no gate and may.)
#[test]
fn shared_readers_never_see_part_of_an_exclusive_body() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = DurableStore::open(options_at(dir.path(), Durability::EverySec)).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut session = store.session().unwrap();
            for n in 0..2000u64 {
                let value = n.to_string();
                let (_, mark) = session.exclusive(|session| {
                    for key in [b"a", b"b"] {
                        let mut txn = session.begin(&[key]);
                        txn.put(key, value.as_bytes()).unwrap();
                        txn.commit().unwrap();
                    }
                });
                mark.unwrap().unwrap().wait().unwrap();
            }
            session.suspend();
            done.store(true, Ordering::SeqCst);
        });
        for _ in 0..2 {
            scope.spawn(|| {
                let mut session = store.session().unwrap();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                while !done.load(Ordering::SeqCst) {
                    session.shared(|session| {
                        a.clear();
                        b.clear();
                        session.read(b"a", &mut a).unwrap();
                        std::thread::yield_now();
                        session.read(b"b", &mut b).unwrap();
                    });
                    assert_eq!(a, b, "a shared read saw part of an exclusive body");
                }
                session.suspend();
            });
        }
        writer.join().unwrap();
    });
}

/// A transaction dropped after a write (an error path) closes its group, in every mode: the next
/// transaction that writes nothing commits to no mark, and one inside a body reports no position.
#[test]
fn a_dropped_transaction_leaves_nothing_to_the_next_one() {
    for durability in [Durability::Checkpoint, Durability::EverySec] {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = DurableStore::open(options_at(dir.path(), durability)).unwrap();
        let mut session = store.session().unwrap();
        {
            let mut txn = session.begin(&[b"k"]);
            txn.put(b"k", b"1").unwrap();
        }
        assert!(session.begin(&[b"k"]).commit().unwrap().is_none());
        let ((), mark) = session.exclusive(|session| {
            let mut txn = session.begin(&[b"k"]);
            txn.put(b"k", b"2").unwrap();
        });
        let mark = mark.unwrap().expect("the body wrote");
        assert_eq!(mark.lsn.is_some(), durability.uses_oplog(), "{durability}");
        assert!(session.begin(&[b"k"]).commit().unwrap().is_none());
    }
}
