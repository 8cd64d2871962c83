//! Power cuts on the simulated disk (`prefixkv_storage::SimDisk`) under every durability mode,
//! checked against what the writer was told, never against what the store reports.
//!
//! Each seed runs generations on one simulated disk: open the store (mode by seed), write
//! transactions (`put(key seq % 64, seq)`), take a checkpoint now and then, call `sync` now and
//! then, until an armed power cut kills the disk at a random call; then crash it with seeded
//! choices (unsynced writes dropped, kept or torn at a sector; unsynced directory entries lost),
//! reopen and check that the recovered state is exactly the writer's writes `0..=k` for one `k`
//! (a prefix: nothing lost in the middle, nothing that was never written, no mixture), where
//! - `always`: `k` is at least the last acknowledged write;
//! - `everysec`: `k` is at least the last write before a returned `sync`, or covered by a
//!   finished checkpoint;
//! - `checkpoint`: `k` is at least the last write acknowledged before the request of the last
//!   checkpoint that finished.
//!
//! This test found that a log which lost its unsynced tail could end below the LSN a surviving
//! checkpoint covers, so new records reused covered LSNs and a later recovery skipped them
//! (`store` module docs, step 5); seed 139 failed about one run in ten before the fix.
//!
//! `STORE_POWER_CUT_SEEDS` (default 300) seeds; `STORE_POWER_CUT_SEED=n` replays one (the
//! engine's and the log's threads make a seed's interleaving vary from run to run).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use prefixkv_storage::{CrashMode, Fault, FaultError, FaultOp, SimDisk};
use prefixkv_store::{Durability, DurableStore, Options, StoreError};
use prefixkv_testkit::rng::{env_count, Rng};

const KEYS: u64 = 64;

fn options(disk: &SimDisk, durability: Durability) -> Options {
    common::sim_options(disk, durability)
}

/// What the writer knows.
#[derive(Default)]
struct Writer {
    /// Writes issued, by sequence number (the value written is the sequence number).
    issued: u64,
    /// Highest sequence whose `wait` returned.
    acknowledged: Option<u64>,
    /// Highest sequence known durable: before a returned `sync` (logging modes) or before the
    /// request of a finished checkpoint.
    durable: Option<u64>,
}

fn key(seq: u64) -> Vec<u8> {
    format!("k{}", seq % KEYS).into_bytes()
}

/// The state after writes `0..=k` (or none).
fn prefix_state(k: Option<u64>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut state = BTreeMap::new();
    if let Some(k) = k {
        for seq in k.saturating_sub(KEYS - 1)..=k {
            state.insert(key(seq), seq.to_string().into_bytes());
        }
    }
    state
}

fn read_state(store: &Arc<DurableStore>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut session = store.session().unwrap();
    let mut state = BTreeMap::new();
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, 64, |key, value| {
                state.insert(key.to_vec(), value.to_vec());
            })
            .unwrap();
        if cursor == 0 {
            return state;
        }
    }
}

/// One generation of writes until the disk dies (or `limit` writes).
fn run(store: &Arc<DurableStore>, writer: &mut Writer, rng: &mut Rng, limit: u64) {
    let mut session = store.session().unwrap();
    for _ in 0..limit {
        let seq = writer.issued;
        let key = key(seq);
        let mut txn = session.begin(&[&key]);
        writer.issued += 1;
        if txn.put(&key, seq.to_string().as_bytes()).is_err() {
            return;
        }
        match txn.commit().map(|mark| mark.map(|mark| mark.wait())) {
            Ok(Some(Ok(()))) => writer.acknowledged = Some(seq),
            _ => return,
        }
        match rng.below(25) {
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

/// Checks the recovered state; returns the `k` it is the prefix of, or what is wrong.
fn check(
    store: &Arc<DurableStore>,
    writer: &Writer,
    durability: Durability,
) -> Result<Option<u64>, String> {
    let state = read_state(store);
    let k = state
        .values()
        .map(|value| std::str::from_utf8(value).unwrap().parse::<u64>().unwrap())
        .max();
    if state != prefix_state(k) {
        return Err(format!(
            "({durability}): the recovered state is not the prefix of the writes through {k:?}"
        ));
    }
    if k.is_some_and(|k| k >= writer.issued) {
        return Err(format!(
            "write {k:?} recovered but only {} were issued",
            writer.issued
        ));
    }
    let must_have = match durability {
        Durability::Always => writer.acknowledged.max(writer.durable),
        _ => writer.durable,
    };
    if k < must_have {
        return Err(format!(
            "({durability}): recovered through write {k:?}, but write {must_have:?} was \
             acknowledged as durable"
        ));
    }
    Ok(k)
}

fn run_seed(seed: u64) {
    let disk = SimDisk::new(seed);
    let mut rng = Rng::new(seed);
    let durability = [
        Durability::Always,
        Durability::EverySec,
        Durability::Checkpoint,
    ][seed as usize % 3];
    let mut writer = Writer::default();
    for generation in 0..3 {
        let (store, recovered) = DurableStore::open(options(&disk, durability))
            .unwrap_or_else(|e| panic!("seed {seed} generation {generation}: reopen failed: {e}"));
        if generation > 0 {
            let k = check(&store, &writer, durability).unwrap_or_else(|problem| {
                panic!("seed {seed} generation {generation}: {problem}; recovery: {recovered}")
            });
            // The next generation continues from what survived.
            writer.issued = k.map_or(0, |k| k + 1);
            writer.acknowledged = k;
            writer.durable = k;
        }
        disk.cut_after(rng.below(400));
        run(&store, &mut writer, &mut rng, 300);
        disk.kill();
        drop(store);
        disk.crash(CrashMode::Random);
    }
}

#[test]
fn every_mode_recovers_a_prefix_holding_what_it_promised() {
    if let Ok(seed) = std::env::var("STORE_POWER_CUT_SEED") {
        run_seed(seed.parse().unwrap());
        return;
    }
    let seeds = env_count("STORE_POWER_CUT_SEEDS", 300);
    for seed in 0..seeds {
        let result = std::panic::catch_unwind(|| run_seed(seed));
        if result.is_err() {
            panic!("seed {seed} failed; STORE_POWER_CUT_SEED={seed} replays it");
        }
    }
}

/// The check is not vacuous: a state with one acknowledged write removed is not a prefix.
#[test]
fn the_prefix_check_catches_a_lost_acknowledged_write() {
    let disk = SimDisk::new(1);
    let (store, _) = DurableStore::open(options(&disk, Durability::Always)).unwrap();
    let mut writer = Writer::default();
    let mut rng = Rng::new(1);
    run(&store, &mut writer, &mut rng, 100);
    assert_eq!(check(&store, &writer, Durability::Always), Ok(Some(99)));
    // Lose write 99 (the last acknowledged one): key k35 goes back to write 35.
    {
        let mut session = store.session().unwrap();
        let key = key(99);
        let mut txn = session.begin(&[&key]);
        txn.put(&key, b"35").unwrap();
        txn.commit().unwrap();
    }
    let problem = check(&store, &writer, Durability::Always).unwrap_err();
    assert!(problem.contains("was acknowledged as durable"), "{problem}");
}

/// One write of `seq` (the key of `key(seq)`, the value `seq`), returned once acknowledged.
fn write(store: &Arc<DurableStore>, seq: u64) -> Result<(), StoreError> {
    let mut session = store.session()?;
    let key = key(seq);
    let mut txn = session.begin(&[&key]);
    txn.put(&key, seq.to_string().as_bytes())?;
    match txn.commit()? {
        Some(mark) => mark.wait(),
        None => Ok(()),
    }
}

/// A disk fault on the operation log (`fault`, `trigger` makes it bite), then: writes get a
/// clear error (`expected` in its text) and change nothing acknowledged, reads are still served,
/// a checkpoint while the fault lasts is an error and leaves writes refused, and once the fault
/// is gone a checkpoint heals the log (store module docs, step 6) and writes are acknowledged
/// again. Finally a power cut: every acknowledged write, before the fault and after the heal, is
/// recovered.
fn fault_then_heal(durability: Durability, fault: Fault, expected: &str) {
    let disk = SimDisk::new(21);
    let (store, _) = DurableStore::open(options(&disk, durability)).unwrap();
    for seq in 0..KEYS {
        write(&store, seq).unwrap();
    }
    store.sync().unwrap();
    disk.inject(fault);
    // `always` reports the failure to the write itself; `everysec` to the next sync.
    let first = write(&store, KEYS).and_then(|()| store.sync());
    let error = first.expect_err("the log cannot write").to_string();
    assert!(error.contains(expected), "{durability:?}: {error}");
    let refused = write(&store, KEYS + 1).expect_err("a failed log accepts nothing");
    assert!(refused.to_string().contains("operation log"), "{refused}");
    // Reads are served from memory: every acknowledged write is there. (Write `KEYS`, on key 0,
    // met the failure after it was applied: its outcome is uncertain. Write `KEYS + 1` was
    // refused before it changed anything.)
    let state = read_state(&store);
    for seq in 1..KEYS {
        assert_eq!(
            state[&key(seq)],
            seq.to_string().into_bytes(),
            "{durability:?}"
        );
    }
    if disk.faults_hit() > 0 && matches!(fault_kind(&error), FaultKind::NoSpace) {
        // Still no space: the checkpoint is durable, but the new log cannot be created.
        let error = store
            .checkpoint()
            .expect_err("no space for a new log")
            .to_string();
        assert!(error.contains("No space left on device"), "{error}");
        let refused = write(&store, KEYS + 2)
            .expect_err("still refused")
            .to_string();
        assert!(refused.contains("being replaced"), "{refused}");
    }
    disk.clear_faults();
    store
        .checkpoint()
        .expect("space is back: the checkpoint heals the log");
    let healed: Vec<u64> = (KEYS + 10..3 * KEYS).collect();
    for &seq in &healed {
        write(&store, seq)
            .unwrap_or_else(|e| panic!("{durability:?}: write {seq} after the heal: {e}"));
    }
    store.sync().unwrap();
    disk.kill();
    drop(store);
    disk.crash(CrashMode::Random);
    let (store, recovered) = DurableStore::open(options(&disk, durability)).unwrap();
    let state = read_state(&store);
    for &seq in healed.iter().rev().take(KEYS as usize) {
        assert_eq!(
            state[&key(seq)],
            seq.to_string().into_bytes(),
            "{durability:?}: acknowledged write {seq} after the heal lost; recovery: {recovered}"
        );
    }
}

enum FaultKind {
    NoSpace,
    Other,
}

fn fault_kind(error: &str) -> FaultKind {
    if error.contains("No space left on device") {
        FaultKind::NoSpace
    } else {
        FaultKind::Other
    }
}

#[test]
fn no_space_on_the_log_is_a_clear_error_and_writes_resume_once_space_returns() {
    for durability in [Durability::Always, Durability::EverySec] {
        fault_then_heal(
            durability,
            Fault::always(FaultOp::Write, ".oplog", FaultError::NoSpace),
            "No space left on device",
        );
    }
}

/// `EIO` from a log sync is fail-stop (the sync is never retried): the write fails, and only a
/// checkpoint, whose own syncs succeed, lets writes resume, on a new log.
#[test]
fn eio_from_a_log_sync_fails_the_write_and_a_checkpoint_heals_the_log() {
    fault_then_heal(
        Durability::Always,
        Fault::once(FaultOp::SyncFile, ".oplog", FaultError::Io),
        "Input/output error",
    );
}
