//! Power cuts and disk faults under checkpoints of every strategy, on the simulated disk
//! (`StoreConfig::disk` = a `prefixkv_storage::SimDisk`), checked with the prefix oracle
//! (`prefixkv_testkit::oracle::verify_recovery`) against what the client side recorded itself.
//!
//! Each seed: a loader session upserts every key, a worker session runs the deterministic
//! workload, and the test thread requests checkpoints (more worker operations run while each
//! checkpoint is in flight) until a power cut armed at a random call kills the disk. Before each
//! request the client notes each session's acknowledged serial; a checkpoint whose
//! `wait_for_commit` returned `Ok` is acknowledged. After the crash (seeded: unsynced writes
//! dropped, kept or torn; unsynced directory entries lost) the store must reopen, and the
//! recovered image must be exactly every session's prefix up to the recovered CPR points, with
//! points no lower than those of the newest acknowledged checkpoint (checkpoints lose only a
//! suffix, never a mixture) and no higher than what ran.
//!
//! `ENGINE_POWER_CUT_SEEDS` (default 100) seeds per strategy; `ENGINE_POWER_CUT_SEED=n` replays
//! one seed for every strategy. The fault tests: `ENOSPC` in the middle of a checkpoint (its
//! segments or its MANIFEST), `EIO` from a segment's fsync.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use prefixkv_engine::{EngineError, SessionId, Store, StoreConfig, Strategy};
use prefixkv_storage::{CrashMode, Fault, FaultError, FaultOp, SimDisk};
use prefixkv_testkit::oracle::{self, Op, PointBounds, WorkloadSpec};
use prefixkv_testkit::rng::{env_count, Rng};

const KEYS: u64 = 300;
const WORKER: u32 = 1;

fn config(disk: &SimDisk) -> StoreConfig {
    let mut config = StoreConfig::new("/data/store");
    config.index_buckets = 1 << 9;
    config.log_memory_bytes = 4 << 20;
    config.log_page_bytes = 16 << 10;
    config.flusher_threads = 2;
    config.keep_checkpoints = 2;
    config.disk = disk.as_disk();
    config
}

fn spec(seed: u64) -> WorkloadSpec {
    WorkloadSpec {
        keys: KEYS,
        read_percent: 20,
        delete_percent: 10,
        cycle: 0,
        zipfian: seed.is_multiple_of(2),
        seed,
    }
}

/// What the client side recorded: it outlives the sessions, for the check after the crash.
#[derive(Clone, Debug)]
struct Record {
    spec: WorkloadSpec,
    indices: BTreeMap<SessionId, u32>,
    worker_serial: u64,
    /// (loader, worker) serials acknowledged before the request of the newest checkpoint whose
    /// commit was acknowledged.
    acknowledged: Option<(u64, u64)>,
}

/// The client side of one run: the sessions and the record. The loader's session stays open
/// (suspended): a dropped session leaves the manifests once a checkpoint holds all of it, and the
/// oracle needs every session's point.
struct Client {
    loader: prefixkv_engine::Session,
    worker: prefixkv_engine::Session,
    record: Record,
}

impl Client {
    fn start(store: &Arc<Store>, spec: WorkloadSpec) -> Result<Client, EngineError> {
        let mut loader = store.start_session();
        for serial in 1..=KEYS {
            let Op::Upsert(key) = oracle::op_at(&spec, oracle::LOADER_SESSION, serial) else {
                unreachable!("the loader only upserts")
            };
            loader.upsert(&oracle::encode_key(key), &oracle::encode_value(0, serial))?;
        }
        loader.suspend();
        let worker = store.start_session();
        let mut indices = BTreeMap::new();
        indices.insert(loader.id(), oracle::LOADER_SESSION);
        indices.insert(worker.id(), WORKER);
        Ok(Client {
            loader,
            worker,
            record: Record {
                spec,
                indices,
                worker_serial: 0,
                acknowledged: None,
            },
        })
    }

    fn run(&mut self, operations: u64) -> Result<(), EngineError> {
        let mut value = Vec::new();
        for _ in 0..operations {
            self.record.worker_serial += 1;
            let serial = self.record.worker_serial;
            match oracle::op_at(&self.record.spec, WORKER, serial) {
                Op::Read(key) => {
                    self.worker.read(&oracle::encode_key(key), &mut value)?;
                }
                Op::Upsert(key) => self.worker.upsert(
                    &oracle::encode_key(key),
                    &oracle::encode_value(WORKER, serial),
                )?,
                Op::Delete(key) => {
                    self.worker.delete(&oracle::encode_key(key))?;
                }
            }
        }
        Ok(())
    }

    /// Requests a checkpoint, runs more operations while it is in flight, waits for it.
    fn checkpoint(
        &mut self,
        store: &Arc<Store>,
        strategy: Strategy,
        rng: &mut Rng,
    ) -> Result<(), EngineError> {
        let request = (KEYS, self.record.worker_serial);
        let token = store.checkpoint(strategy)?;
        self.run(rng.below(80))?;
        self.worker.suspend();
        store.wait_for_commit(token, Duration::from_secs(60))?;
        self.record.acknowledged = Some(request);
        Ok(())
    }

    /// Drops the session (the machine died) and keeps the record.
    fn finish(self) -> Record {
        drop(self.worker);
        drop(self.loader);
        self.record
    }
}

impl Record {
    fn bounds(&self) -> Vec<PointBounds> {
        let (loader, worker) = self.acknowledged.unwrap_or((0, 0));
        vec![
            PointBounds {
                session: oracle::LOADER_SESSION,
                acknowledged_before_request: loader,
                issued: KEYS,
            },
            PointBounds {
                session: WORKER,
                acknowledged_before_request: worker,
                issued: self.worker_serial,
            },
        ]
    }
}

fn image(store: &Arc<Store>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut reader = store.start_session();
    let mut image = Vec::new();
    for key in 0..KEYS {
        let mut value = Vec::new();
        if reader.read(&oracle::encode_key(key), &mut value).unwrap() {
            image.push((oracle::encode_key(key).to_vec(), value));
        }
    }
    image
}

/// Reopens the store after a crash and checks it against what `client` recorded; panics naming
/// `what` on any difference.
fn check_recovery(disk: &SimDisk, client: &Record, what: &str) -> Arc<Store> {
    try_check_recovery(disk, client).unwrap_or_else(|problem| panic!("{what}: {problem}"))
}

fn try_check_recovery(disk: &SimDisk, client: &Record) -> Result<Arc<Store>, String> {
    let store = Store::open(config(disk)).map_err(|e| format!("reopen failed: {e}"))?;
    let bounds = client.bounds();
    let reported: Vec<(u32, u64)> = match store.recovery_info() {
        None => Vec::new(),
        Some(info) => info
            .session_commit_points
            .iter()
            .map(|(id, point)| {
                // An unknown session gets an index no client used: the oracle rejects it.
                let index = client
                    .indices
                    .get(id)
                    .copied()
                    .unwrap_or(u32::from(u16::MAX));
                (index, *point)
            })
            .collect(),
    };
    oracle::verify_recovery(&client.spec, &reported, &bounds, image(&store))?;
    Ok(store)
}

/// What one seed saw: (checkpoints acknowledged, version recovered).
fn run_seed(strategy: Strategy, seed: u64) -> (u64, u64) {
    let what = format!("{strategy} seed {seed} (ENGINE_POWER_CUT_SEED={seed})");
    let disk = SimDisk::new(seed);
    let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9) ^ strategy as u64);
    disk.cut_after(rng.below(140));
    let store = match Store::open(config(&disk)) {
        Ok(store) => store,
        // Cut while creating the directories: there is nothing to recover.
        Err(_) => {
            disk.crash(CrashMode::Random);
            let store = Store::open(config(&disk)).unwrap();
            assert!(store.recovery_info().is_none(), "{what}");
            return (0, 0);
        }
    };
    let mut client = Client::start(&store, spec(seed)).unwrap();
    let mut acknowledged = 0;
    for _ in 0..5 {
        let ran = client
            .run(rng.below(150))
            .and_then(|()| client.checkpoint(&store, strategy, &mut rng));
        if ran.is_err() || disk.is_dead() {
            break;
        }
        acknowledged += 1;
    }
    disk.kill();
    let record = client.finish();
    drop(store);
    let mode = if seed % 7 == 3 {
        CrashMode::TornLastSector
    } else {
        CrashMode::Random
    };
    disk.crash(mode);
    let store = check_recovery(&disk, &record, &what);
    let recovered = store.recovery_info().map_or(0, |info| info.version);
    (acknowledged, recovered)
}

fn run_strategy(strategy: Strategy) {
    if let Some(seed) = std::env::var("ENGINE_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_seed(strategy, seed);
        return;
    }
    let seeds = env_count("ENGINE_POWER_CUT_SEEDS", 100);
    let (mut acknowledged, mut unacknowledged_recovered, mut none) = (0, 0, 0);
    for seed in 0..seeds {
        let (acked, recovered) = run_seed(strategy, seed);
        acknowledged += acked;
        unacknowledged_recovered += u64::from(recovered > acked);
        none += u64::from(recovered == 0);
    }
    eprintln!(
        "{strategy}: {seeds} power-cut seeds, {acknowledged} checkpoints acknowledged, \
         {unacknowledged_recovered} recoveries of a checkpoint whose acknowledgement the cut \
         prevented, {none} recoveries of no checkpoint"
    );
    // The cut points must reach into the checkpoints, not only before or after them.
    if seeds >= 30 {
        assert!(acknowledged > 0 && unacknowledged_recovered > 0 && none > 0);
    }
}

#[test]
fn power_cuts_under_blocking_checkpoints() {
    run_strategy(Strategy::Blocking);
}

#[test]
fn power_cuts_under_cpr_copy_checkpoints() {
    run_strategy(Strategy::CprCopy);
}

#[test]
fn power_cuts_under_fold_over_checkpoints() {
    run_strategy(Strategy::FoldOver);
}

#[test]
fn power_cuts_under_snapshot_checkpoints() {
    run_strategy(Strategy::Snapshot);
}

#[test]
fn power_cuts_under_persian_checkpoints() {
    run_strategy(Strategy::Persian);
}

/// `ENOSPC` in the middle of a checkpoint (writing a segment, or the MANIFEST): the checkpoint
/// fails with a clear error, the store keeps serving reads and writes, the previous checkpoint is
/// intact (a power cut now recovers it), and once space returns the next checkpoint succeeds.
#[test]
fn no_space_mid_checkpoint_keeps_the_previous_checkpoint_and_heals() {
    for (seed, target) in [(1u64, "segment-"), (2, "MANIFEST")] {
        let disk = SimDisk::new(seed);
        let store = Store::open(config(&disk)).unwrap();
        let mut client = Client::start(&store, spec(seed)).unwrap();
        let mut rng = Rng::new(seed);
        client.run(100).unwrap();
        client
            .checkpoint(&store, Strategy::Persian, &mut rng)
            .unwrap();
        client.run(100).unwrap();
        disk.inject(Fault::always(FaultOp::Write, target, FaultError::NoSpace));
        let error = client
            .checkpoint(&store, Strategy::Persian, &mut rng)
            .unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, EngineError::CheckpointFailed { .. })
                && text.contains("No space left on device")
                && text.contains("the previous checkpoint is still the recovery point"),
            "{target}: {text}"
        );
        // The store keeps answering and accepting writes.
        client.run(50).unwrap();
        disk.clear_faults();
        client
            .checkpoint(&store, Strategy::Persian, &mut rng)
            .unwrap();
        client.run(30).unwrap();
        disk.kill();
        let record = client.finish();
        drop(store);
        disk.crash(CrashMode::Random);
        check_recovery(&disk, &record, target);
    }
}

/// A power cut right after a failed (`ENOSPC`) checkpoint recovers the previous one.
#[test]
fn power_cut_after_a_failed_checkpoint_recovers_the_previous_one() {
    let disk = SimDisk::new(3);
    let store = Store::open(config(&disk)).unwrap();
    let mut client = Client::start(&store, spec(3)).unwrap();
    let mut rng = Rng::new(3);
    client.run(100).unwrap();
    client
        .checkpoint(&store, Strategy::FoldOver, &mut rng)
        .unwrap();
    let acknowledged = client.record.acknowledged;
    client.run(100).unwrap();
    disk.inject(Fault::always(
        FaultOp::Write,
        "segment-",
        FaultError::NoSpace,
    ));
    assert!(client
        .checkpoint(&store, Strategy::FoldOver, &mut rng)
        .is_err());
    assert_eq!(client.record.acknowledged, acknowledged);
    disk.kill();
    let record = client.finish();
    drop(store);
    disk.crash(CrashMode::Random);
    let store = check_recovery(&disk, &record, "after ENOSPC");
    assert_eq!(store.recovery_info().unwrap().version, 1);
}

/// `EIO` from the fsync of a segment: that checkpoint fails and is never published (its fsync is
/// not retried); the next checkpoint writes new files and succeeds; a power cut then recovers it.
#[test]
fn eio_from_a_segment_fsync_fails_that_checkpoint_only() {
    let disk = SimDisk::new(4);
    let store = Store::open(config(&disk)).unwrap();
    let mut client = Client::start(&store, spec(4)).unwrap();
    let mut rng = Rng::new(4);
    client.run(100).unwrap();
    client
        .checkpoint(&store, Strategy::Snapshot, &mut rng)
        .unwrap();
    disk.inject(Fault::once(FaultOp::SyncFile, "segment-", FaultError::Io));
    let error = client
        .checkpoint(&store, Strategy::Snapshot, &mut rng)
        .unwrap_err();
    assert!(error.to_string().contains("Input/output error"), "{error}");
    assert_eq!(disk.faults_hit(), 1);
    client.run(60).unwrap();
    client
        .checkpoint(&store, Strategy::Snapshot, &mut rng)
        .unwrap();
    disk.kill();
    let record = client.finish();
    drop(store);
    disk.crash(CrashMode::Random);
    let store = check_recovery(&disk, &record, "after EIO");
    assert_eq!(store.recovery_info().unwrap().version, 3);
}

/// The check is not vacuous: a test-only tamper between the crash and the reopen deletes the
/// newest (acknowledged) checkpoint, recovery falls back to the one before, and the check
/// reports the acknowledged operations that are missing.
#[test]
fn the_check_catches_a_lost_acknowledged_checkpoint() {
    let disk = SimDisk::new(5);
    let store = Store::open(config(&disk)).unwrap();
    let mut client = Client::start(&store, spec(5)).unwrap();
    let mut rng = Rng::new(5);
    for _ in 0..2 {
        client.run(120).unwrap();
        client
            .checkpoint(&store, Strategy::Persian, &mut rng)
            .unwrap();
    }
    let record = client.finish();
    drop(store);
    disk.crash(CrashMode::KeepAll);
    let newest = std::path::Path::new("/data/store/checkpoints/v00000000000000000002");
    prefixkv_storage::io::remove_dir_all(&disk, newest).unwrap();
    let problem = try_check_recovery(&disk, &record)
        .err()
        .expect("the tamper is caught");
    assert!(
        problem.contains("acknowledged work missing from the checkpoint"),
        "{problem}"
    );
}
