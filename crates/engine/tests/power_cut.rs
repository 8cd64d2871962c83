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
//! The same runs with sealed versions (`Store::seal`, as the DPR cluster commits): one or two
//! versions are sealed per round, with operations between and after, and their checkpoints are
//! written behind (`Store::checkpoint_sealed`), deltas on the previous one and a whole image every
//! third: recovery must load the chain.
//!
//! `ENGINE_POWER_CUT_SEEDS` (default 100) seeds per strategy; `ENGINE_POWER_CUT_SEED=n` replays
//! one seed for every strategy. The fault tests: `ENOSPC` in the middle of a checkpoint (its
//! segments or its MANIFEST), `EIO` from a segment's fsync.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use prefixkv_engine::{EngineError, Scope, SessionId, Store, StoreConfig, Strategy};
use prefixkv_storage::{CrashMode, Fault, FaultError, FaultOp, SimDisk};
use prefixkv_testkit::oracle::{self, Op, PointBounds, WorkloadSpec};
use prefixkv_testkit::rng::{env_count, Rng};

const KEYS: u64 = 300;
/// Keys of [`Mode::Tiered`] runs: their records (about 160 KB) are five times its budget.
const TIERED_KEYS: u64 = 4000;
const WORKER: u32 = 1;

/// How a run makes its checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `Store::checkpoint` with this strategy.
    Classic(Strategy),
    /// `Store::seal`, then `Store::checkpoint_sealed` (deltas and whole images).
    Sealed,
    /// `Store::checkpoint` with this strategy on a store with a storage tier and a 32 KiB budget:
    /// the cut may also land in eviction's page writes and syncs.
    Tiered(Strategy),
}

impl Mode {
    fn keys(self) -> u64 {
        match self {
            Mode::Tiered(_) => TIERED_KEYS,
            _ => KEYS,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Classic(strategy) => write!(f, "{strategy}"),
            Mode::Sealed => f.write_str("sealed"),
            Mode::Tiered(strategy) => write!(f, "tiered {strategy}"),
        }
    }
}

fn config(disk: &SimDisk) -> StoreConfig {
    config_for(disk, Mode::Classic(Strategy::FoldOver))
}

fn config_for(disk: &SimDisk, mode: Mode) -> StoreConfig {
    let mut config = StoreConfig::new("/data/store");
    config.index_buckets = 1 << 9;
    config.log_memory_bytes = 4 << 20;
    config.log_page_bytes = 16 << 10;
    config.flusher_threads = 2;
    config.keep_checkpoints = 2;
    config.disk = disk.as_disk();
    if mode == Mode::Sealed {
        // Sealing needs it; deltas need the caller to prune.
        config.rollback_ready = true;
        config.keep_checkpoints = usize::MAX;
    }
    if let Mode::Tiered(_) = mode {
        config.storage_tier = true;
        config.log_page_bytes = 4 << 10;
        config.log_memory_bytes = 8 * (4 << 10);
        // A dead disk stops eviction: writers at the budget fail soon instead of after 30 s.
        config.memory_wait_limit = Duration::from_millis(300);
    }
    config
}

fn spec(seed: u64, mode: Mode) -> WorkloadSpec {
    WorkloadSpec {
        keys: mode.keys(),
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
    mode: Mode,
}

/// The client side of one run: the sessions and the record. The loader's session stays open
/// (suspended): a dropped session leaves the manifests once a checkpoint holds all of it, and the
/// oracle needs every session's point.
struct Client {
    loader: prefixkv_engine::Session,
    worker: prefixkv_engine::Session,
    record: Record,
    /// Sealed mode: the newest published checkpoint (the next delta's base) and how many were
    /// written.
    tip: Option<u64>,
    written: u64,
}

impl Client {
    fn start(store: &Arc<Store>, spec: WorkloadSpec) -> Result<Client, EngineError> {
        let mut loader = store.start_session();
        for serial in 1..=spec.keys {
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
                mode: Mode::Classic(Strategy::FoldOver),
            },
            tip: None,
            written: 0,
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
        let request = (self.record.spec.keys, self.record.worker_serial);
        let token = store.checkpoint(strategy)?;
        self.run(rng.below(80))?;
        self.worker.suspend();
        store.wait_for_commit(token, Duration::from_secs(60))?;
        self.record.acknowledged = Some(request);
        Ok(())
    }

    /// A round of [`Mode::Sealed`]: seals one or two versions (operations run before the first
    /// and after each), then writes their checkpoints in seal order, each a delta on the
    /// previous one except every third (and the first), which is whole.
    fn sealed_round(&mut self, store: &Arc<Store>, rng: &mut Rng) -> Result<(), EngineError> {
        let mut sealed = Vec::new();
        for _ in 0..1 + rng.below(2) {
            let request = (self.record.spec.keys, self.record.worker_serial);
            // The seal waits for protected sessions to refresh: this thread's own must not be.
            self.worker.suspend();
            sealed.push((store.seal(Duration::from_secs(10))?, request));
            self.run(rng.below(80))?;
        }
        self.worker.suspend();
        for (version, request) in sealed {
            let scope = match self.tip {
                Some(base) if !self.written.is_multiple_of(3) => Scope::Since(base),
                _ => Scope::Full,
            };
            let token = store.checkpoint_sealed(version, scope, Vec::new())?;
            store.wait_for_commit(token, Duration::from_secs(60))?;
            self.tip = Some(version);
            self.written += 1;
            self.record.acknowledged = Some(request);
        }
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
                issued: self.spec.keys,
            },
            PointBounds {
                session: WORKER,
                acknowledged_before_request: worker,
                issued: self.worker_serial,
            },
        ]
    }
}

fn image(store: &Arc<Store>, keys: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut reader = store.start_session();
    let mut image = Vec::new();
    for key in 0..keys {
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
    let store =
        Store::open(config_for(disk, client.mode)).map_err(|e| format!("reopen failed: {e}"))?;
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
    oracle::verify_recovery(
        &client.spec,
        &reported,
        &bounds,
        image(&store, client.spec.keys),
    )?;
    Ok(store)
}

/// What one seed saw: (checkpoints acknowledged, version recovered).
fn run_seed(mode: Mode, seed: u64) -> (u64, u64) {
    let what = format!("{mode} seed {seed} (ENGINE_POWER_CUT_SEED={seed})");
    let disk = SimDisk::new(seed);
    let salt = match mode {
        Mode::Classic(strategy) => strategy as u64,
        Mode::Sealed => 0xDE17A,
        Mode::Tiered(strategy) => 0x71E2 ^ strategy as u64,
    };
    let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9) ^ salt);
    let cut_after = rng.below(140);
    let tiered = matches!(mode, Mode::Tiered(_));
    if !tiered {
        disk.cut_after(cut_after);
    }
    let store = match Store::open(config_for(&disk, mode)) {
        Ok(store) => store,
        // Cut while creating the directories: there is nothing to recover.
        Err(_) => {
            disk.crash(CrashMode::Random);
            let store = Store::open(config_for(&disk, mode)).unwrap();
            assert!(store.recovery_info().is_none(), "{what}");
            return (0, 0);
        }
    };
    let mut client = Client::start(&store, spec(seed, mode)).unwrap();
    client.record.mode = mode;
    if tiered {
        // After the load, which already evicts: the cut lands in the workload's evictions and
        // the checkpoints (a load that failed would leave no client record to check).
        disk.cut_after(cut_after);
    }
    let mut acknowledged = 0;
    for _ in 0..5 {
        // A read of an evicted record on the dead disk panics (the synchronous cold read has no
        // error path yet: docs/engine.md, "Storage tier"); after a power cut that is one more way
        // for the machine to stop, and what follows is the crash and the recovery.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            client.run(rng.below(150)).and_then(|()| match mode {
                Mode::Classic(strategy) | Mode::Tiered(strategy) => {
                    client.checkpoint(&store, strategy, &mut rng)
                }
                Mode::Sealed => client.sealed_round(&store, &mut rng),
            })
        }));
        if let Err(panic) = &ran {
            assert!(
                tiered && disk.is_dead(),
                "{what}: a panic that is not a cold read after the cut: {panic:?}"
            );
        }
        if !matches!(ran, Ok(Ok(()))) || disk.is_dead() {
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
    run_mode(Mode::Classic(strategy));
}

fn run_mode(mode: Mode) {
    if let Some(seed) = std::env::var("ENGINE_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_seed(mode, seed);
        return;
    }
    let seeds = env_count("ENGINE_POWER_CUT_SEEDS", 100);
    let (mut acknowledged, mut unacknowledged_recovered, mut none) = (0, 0, 0);
    for seed in 0..seeds {
        let (acked, recovered) = run_seed(mode, seed);
        acknowledged += acked;
        unacknowledged_recovered += u64::from(recovered > acked);
        none += u64::from(recovered == 0);
    }
    eprintln!(
        "{mode}: {seeds} power-cut seeds, {acknowledged} checkpoints acknowledged, \
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

#[test]
fn power_cuts_with_a_storage_tier_under_persian_checkpoints() {
    run_mode(Mode::Tiered(Strategy::Persian));
}

#[test]
fn power_cuts_with_a_storage_tier_under_fold_over_checkpoints() {
    run_mode(Mode::Tiered(Strategy::FoldOver));
}

#[test]
fn power_cuts_under_sealed_versions_written_as_deltas() {
    run_mode(Mode::Sealed);
}

/// `ENOSPC` in the middle of a checkpoint (writing a segment, or the MANIFEST): the checkpoint
/// fails with a clear error, the store keeps serving reads and writes, the previous checkpoint is
/// intact (a power cut now recovers it), and once space returns the next checkpoint succeeds.
#[test]
fn no_space_mid_checkpoint_keeps_the_previous_checkpoint_and_heals() {
    for (seed, target) in [(1u64, "segment-"), (2, "MANIFEST")] {
        let disk = SimDisk::new(seed);
        let store = Store::open(config(&disk)).unwrap();
        let mut client =
            Client::start(&store, spec(seed, Mode::Classic(Strategy::FoldOver))).unwrap();
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
    let mut client = Client::start(&store, spec(3, Mode::Classic(Strategy::FoldOver))).unwrap();
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
    let mut client = Client::start(&store, spec(4, Mode::Classic(Strategy::FoldOver))).unwrap();
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
    let mut client = Client::start(&store, spec(5, Mode::Classic(Strategy::FoldOver))).unwrap();
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
    assert_missing_work_caught(&disk, &record);
}

/// The check of `record` after a tamper must fail, naming acknowledged work that is missing.
fn assert_missing_work_caught(disk: &SimDisk, record: &Record) {
    let problem = try_check_recovery(disk, record)
        .err()
        .expect("the tamper is caught");
    assert!(
        problem.contains("acknowledged work missing from the checkpoint"),
        "{problem}"
    );
}

/// The chain matters, and the check sees it: a test-only tamper deletes the base of the newest
/// (acknowledged) delta; recovery refuses the delta (it names the missing base), falls back to
/// the checkpoint before the base, and the check reports the acknowledged operations missing.
#[test]
fn the_check_catches_a_delta_recovered_without_its_base() {
    let disk = SimDisk::new(6);
    let store = Store::open(config_for(&disk, Mode::Sealed)).unwrap();
    let mut client = Client::start(&store, spec(6, Mode::Classic(Strategy::FoldOver))).unwrap();
    client.record.mode = Mode::Sealed;
    let mut rng = Rng::new(6);
    while client.written < 3 {
        client.run(120).unwrap();
        client.sealed_round(&store, &mut rng).unwrap();
    }
    let record = client.finish();
    drop(store);
    disk.crash(CrashMode::KeepAll);
    // Written: whole, delta, delta (and maybe more deltas). Delete the newest one's base.
    let root = std::path::Path::new("/data/store/checkpoints");
    let mut published: Vec<u64> = disk
        .as_disk()
        .list(root)
        .unwrap()
        .iter()
        .filter_map(|entry| entry.name.strip_prefix('v')?.parse().ok())
        .collect();
    published.sort_unstable();
    assert!(published.len() >= 3, "{published:?}");
    let base = published[published.len() - 2];
    prefixkv_storage::io::remove_dir_all(&disk, &root.join(format!("v{base:020}"))).unwrap();
    assert_missing_work_caught(&disk, &record);
}
