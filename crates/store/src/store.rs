//! Opening (recovery), checkpoints with the log position they cover, log truncation, shutdown.
//!
//! Directory layout: `<dir>/LOCK` (the directory lock), `<dir>/checkpoints/` (the engine's),
//! `<dir>/oplog/` (the operation log, in the logging modes).
//!
//! The crash-safety argument, in steps:
//! 0. *Whole transactions.* A checkpoint is requested with the exec gate held exclusively (no
//!    write transaction runs: every one holds the gate shared from `begin` to its drop), and the
//!    gate is held until the engine's version has switched
//!    ([`prefixkv_engine::Store::wait_for_version_switch`]). A transaction that ran before the
//!    request ran entirely in the checkpoint's version v; one that begins after the switch has
//!    its first operation adopt v+1 (the state word changed), and the next switch waits for it to
//!    end. So each session's CPR point falls between two of its transactions, and a checkpoint
//!    holds every transaction whole or not at all: a crash that recovers the checkpoint alone
//!    (the `checkpoint` mode, or `everysec` having lost the record's log tail) never brings back
//!    half an MSET or half of a structure kept in several records (`tests/txn_atomicity.rs`).
//!    Writers wait only for the phase changes (the image is written after the gate is released);
//!    so do commands run inside `StoreSession::shared`; plain reads take no gate and never wait.
//! 1. *Order.* A write transaction holds the stripe locks of its keys from its first engine write
//!    until its log record is appended ([`crate::Txn`]), so for every key the log order of its
//!    writes equals the engine order.
//! 2. *Cover.* A record is appended after its engine operations completed. The store reads
//!    `next_lsn - 1` (the covered LSN) just before it requests a checkpoint, so every operation of
//!    a covered record was acknowledged before the request and is in the checkpoint. The covered
//!    LSN travels in the checkpoint's manifest as its commit cookie.
//! 3. *Replay.* Recovery loads the newest checkpoint that verifies, then replays the log from its
//!    covered LSN + 1 in LSN order, skipping every operation at or below its session's CPR point
//!    in that checkpoint (the checkpoint holds those, and none after). Records carry absolute
//!    effects, so by step 1 replaying them in LSN order from any point at or before the covered
//!    LSN ends in the final state: no acknowledged write is lost that the log held.
//! 4. *Truncate.* The log is truncated only through the covered LSN of the *oldest* checkpoint the
//!    engine keeps: if the newest one fails verification at the next start and recovery falls back
//!    to an older one, the records after that one's covered LSN are still there.
//! 5. *Never reuse a covered LSN.* A power cut can take the log's unsynced tail while a checkpoint
//!    taken after those records were appended survives: the log then ends at or below the LSN the
//!    checkpoint covers. New records appended there would reuse LSNs the checkpoint names, and a
//!    recovery from it would skip them (found by `tests/power_cut.rs`). So opening starts such a
//!    log over: everything left in it is in the checkpoint, it is removed durably (renamed aside,
//!    then deleted) and a new one begins at the covered LSN + 1. A crash in between leaves no log,
//!    and the next open starts a new one at the same LSN.
//! 6. *Heal a failed log.* A log that failed (ENOSPC, EIO from a sync) accepts no append again and
//!    never retries a sync, so writes get errors. [`DurableStore::checkpoint`] heals it: if the log
//!    had failed *before* the checkpoint's covered LSN was read, no record after that LSN was ever
//!    acknowledged (a failed log acknowledges nothing more), and every record through it is in the
//!    checkpoint (step 2); so once that checkpoint is durable the failed log holds nothing that is
//!    not in it, and the store replaces it by a new one at the covered LSN + 1, as in step 5.
//!    (A log that fails while the checkpoint runs is left for the next one.) The periodic
//!    checkpoints of every logging mode thus resume writes once space returns. Writes whose
//!    append failed were applied to the engine: their clients got an error, and they may or may
//!    not survive (the next checkpoint holds them), as with any write whose outcome was an error.
//! 7. *Groups whole or not at all.* A transaction, and every transaction of an exclusive body, is
//!    one log group, its parts appended back to back under the exec gate (so a covered LSN never
//!    falls inside one either); replay applies a group only once it reads its last part and
//!    drops a group that a crash cut (`record` module docs, [`replay`]).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::sync::ShardedLock;
use parking_lot::Mutex;
use prefixkv_engine::{
    CheckpointToken, EngineError, RecoveryInfo, SessionId, Store as Engine, Strategy,
};
use prefixkv_storage::log::{AppendTicket, Log, LogError, SyncPolicy};
use prefixkv_storage::{real_disk, DirLock, Disk};

use crate::record::{decode_record, part_of};
use crate::{Durability, StoreError, StoreSession};

mod over_engine;

/// Stripe locks ordering writes per key (a power of two).
pub(crate) const STRIPES: usize = 1024;
/// The commit cookie's tag: "oplog covered through LSN", then the LSN (u64 little-endian).
const COOKIE_TAG: &[u8; 4] = b"OPL1";
/// Tag of a checkpoint cookie with the application's part ([`cookie_of`]).
const COOKIE_TAG_EXTRA: &[u8; 4] = b"OPL2";
/// How long a checkpoint request waits for one already running (a BGSAVE, the periodic one).
const CHECKPOINT_START_WAIT: Duration = Duration::from_secs(60);
/// How long writers may be held at a checkpoint request for the engine's version switch (the
/// CPR phase changes; for `blocking`, the whole image) before the request reports a timeout.
const CHECKPOINT_SWITCH_WAIT: Duration = Duration::from_secs(600);
/// How long a checkpoint may take before [`DurableStore::checkpoint`] reports a timeout.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(3600);
/// How long replacing a failed log waits for other handles to it (`oplog()` callers) to go.
const LOG_RELEASE_WAIT: Duration = Duration::from_secs(10);

/// The operation log of a logging store, replaceable after a failure (module docs, step 6).
struct LogSlot {
    /// The log; `None` only between taking a failed log out and opening its replacement (or after
    /// that opening failed: writes then get an error until a checkpoint succeeds). Appenders take
    /// the read side, which is sharded per thread, so writers do not share a cache line.
    current: ShardedLock<Option<Arc<Log>>>,
    /// The next LSN of the last log taken out, while `current` is `None`.
    retired_next_lsn: AtomicU64,
    dir: PathBuf,
    config: prefixkv_storage::log::LogConfig,
    disk: Arc<dyn Disk>,
}

impl LogSlot {
    fn get(&self) -> Option<Arc<Log>> {
        self.current
            .read()
            .expect("the log slot is never poisoned")
            .clone()
    }

    /// The LSN the next append gets (or would get, while no log is open).
    fn next_lsn(&self) -> u64 {
        self.get().map_or_else(
            || self.retired_next_lsn.load(Ordering::SeqCst),
            |log| log.next_lsn(),
        )
    }
}

/// How to open a [`DurableStore`].
#[derive(Clone, Debug)]
pub struct Options {
    /// The data directory.
    pub dir: PathBuf,
    /// The durability mode.
    pub durability: Durability,
    /// The engine's configuration; its `dir` and `disk` are replaced by this struct's.
    pub engine: prefixkv_engine::StoreConfig,
    /// The strategy of every checkpoint the store takes.
    pub strategy: Strategy,
    /// Largest operation-log record (a log group is split into several records above
    /// `record_split_bytes`).
    pub oplog_max_record_bytes: u32,
    /// A log group (a transaction, an exclusive body) is cut into several records, recovered
    /// together, once its pending payload passes this size ([`RECORD_SPLIT_BYTES`]
    /// (crate::RECORD_SPLIT_BYTES) by default; tests lower it to split small groups).
    pub record_split_bytes: usize,
    /// Size at which the log starts a new segment (truncation removes whole segments).
    pub oplog_segment_bytes: u64,
    /// Where files live: the real disk by default; power-cut tests pass a simulated one.
    pub disk: Arc<dyn Disk>,
}

impl Options {
    /// Defaults for `dir` in `durability` mode: the engine's defaults, Persian checkpoints.
    pub fn new(dir: impl Into<PathBuf>, durability: Durability) -> Options {
        let dir = dir.into();
        Options {
            engine: prefixkv_engine::StoreConfig::new(dir.clone()),
            dir,
            durability,
            strategy: Strategy::Persian,
            oplog_max_record_bytes: 64 << 20,
            record_split_bytes: crate::RECORD_SPLIT_BYTES,
            oplog_segment_bytes: prefixkv_storage::log::LogConfig::default().segment_bytes,
            disk: real_disk(),
        }
    }
}

/// What opening found and did.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// The engine's recovery (version, commit points, records, fallback), if a checkpoint existed.
    pub checkpoint: Option<RecoveryInfo>,
    /// The first LSN replayed, if the log was replayed.
    pub replayed_from: Option<u64>,
    /// Log records replayed.
    pub records_replayed: u64,
    /// Operations applied from them (the rest were already in the checkpoint).
    pub operations_replayed: u64,
    /// Incomplete log groups that were not applied (`record` module docs): the first LSN and
    /// the number of records of each. Only a crash while a group was being appended leaves one.
    pub incomplete_groups: Vec<(u64, u64)>,
    /// A torn log tail that was dropped, described.
    pub torn_tail: Option<String>,
    /// The mode does not log but a log was found: it was folded into a checkpoint through this
    /// LSN and removed.
    pub folded_through: Option<u64>,
    /// The log had lost a tail the checkpoint covers, so it was started over at this LSN.
    pub log_restarted_at: Option<u64>,
    /// How long opening took.
    pub duration: Duration,
}

impl fmt::Display for Recovered {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.checkpoint {
            Some(info) => {
                write!(
                    formatter,
                    "checkpoint v{} ({} records)",
                    info.version, info.records
                )?;
                if let Some(why) = &info.fell_back {
                    write!(formatter, " [fell back: {why}]")?;
                }
            }
            None => write!(formatter, "no checkpoint")?,
        }
        if let Some(torn) = &self.torn_tail {
            write!(formatter, "; dropped a torn oplog tail ({torn})")?;
        }
        if let Some(from) = self.replayed_from {
            write!(
                formatter,
                "; replayed {} oplog records ({} operations) from LSN {from}",
                self.records_replayed, self.operations_replayed
            )?;
        }
        for (first, records) in &self.incomplete_groups {
            write!(
                formatter,
                "; dropped an incomplete log group of {records} records from LSN {first} (a \
                 crash cut it: none of its writes applied)"
            )?;
        }
        if let Some(lsn) = self.log_restarted_at {
            write!(
                formatter,
                "; the checkpoint covers the whole oplog: started it over at LSN {lsn}"
            )?;
        }
        if let Some(lsn) = self.folded_through {
            write!(
                formatter,
                "; folded the oplog through LSN {lsn} into a checkpoint and removed it"
            )?;
        }
        write!(formatter, " in {} ms", self.duration.as_millis())
    }
}

/// Told every replayed operation: key, `Some(value)` for a put or `None` for a delete, and
/// whether the key held a live value before it.
pub type ReplayObserver<'a> = &'a mut dyn FnMut(&[u8], Option<&[u8]>, bool);

/// What the application learns while the store opens, so that it can build what it derives
/// from the data (key counts, say) without a second pass.
pub struct Observers<'a> {
    /// Every key of the recovered checkpoint with its value, from several threads at once.
    pub loaded: &'a (dyn Fn(&[u8], &[u8]) + Sync),
    /// Every replayed operation in order: key, `Some(value)` for a put or `None` for a delete,
    /// and whether the key held a live value before it.
    pub replayed: ReplayObserver<'a>,
    /// Where the recovered checkpoint would be observed by a read of the whole dataset of its
    /// own (an incremental checkpoint of a storage tier: `Store::open_observed_unless`), called
    /// first with the application's part of its cookie ([`DurableStore::set_cookie_extra`];
    /// never with an empty one): `true` means the application took what it derives from it,
    /// and `loaded` is then not called at all. `None`: always observe.
    pub cookie_suffices: Option<&'a CookieSuffices<'a>>,
}

/// Told the application's part of a recovered checkpoint's cookie ([`Observers::cookie_suffices`]).
pub type CookieSuffices<'a> = dyn Fn(&[u8]) -> bool + 'a;

/// Makes the application's part of a checkpoint's cookie ([`DurableStore::set_cookie_extra`]).
pub type CookieExtra = Box<dyn Fn() -> Vec<u8> + Send + Sync>;

/// Largest application part of a cookie: the engine's limit less this store's header.
pub const MAX_COOKIE_EXTRA_BYTES: usize =
    prefixkv_engine::checkpoint_files::manifest::MAX_COOKIE_BYTES - 16;

/// A finished checkpoint.
#[derive(Clone, Debug)]
pub struct CheckpointDone {
    /// The engine's report (version, duration, bytes, records, CPR points).
    pub report: prefixkv_engine::CheckpointReport,
    /// The log position it covers, when the mode logs.
    pub covered_lsn: Option<u64>,
}

/// The engine and the operation log as one durable store. Share it as `Arc<DurableStore>`.
pub struct DurableStore {
    engine: Arc<Engine>,
    oplog: Option<LogSlot>,
    durability: Durability,
    strategy: Strategy,
    keep_checkpoints: usize,
    pub(crate) stripes: Box<[Mutex<()>]>,
    pub(crate) exec_gate: ShardedLock<()>,
    /// See [`Options::record_split_bytes`].
    pub(crate) record_split_bytes: usize,
    /// Covered LSN of each checkpoint the engine keeps that this process knows, oldest first.
    kept_covered: Mutex<VecDeque<u64>>,
    checkpoint_lock: Mutex<()>,
    pub(crate) writes: AtomicU64,
    /// The application's part of every checkpoint's cookie ([`DurableStore::set_cookie_extra`]).
    cookie_extra: Mutex<Option<CookieExtra>>,
    /// The directory lock; `None` for a store over an engine someone else opened
    /// ([`DurableStore::over_engine`]).
    _lock: Option<DirLock>,
}

fn log_being_replaced() -> StoreError {
    LogError::Failed(
        "the operation log failed and is being replaced: writes resume once a checkpoint \
         succeeds (the periodic one, or BGSAVE)"
            .into(),
    )
    .into()
}

/// A checkpoint's commit cookie: [`COOKIE_TAG`] and the covered LSN (the format of a store
/// without an application part), or [`COOKIE_TAG_EXTRA`], whether an LSN follows (one byte),
/// the LSN (0 if none) and the application's bytes. Empty with neither.
fn cookie_of(covered: Option<u64>, extra: &[u8]) -> Vec<u8> {
    match (covered, extra.is_empty()) {
        (None, true) => Vec::new(),
        (Some(lsn), true) => {
            let mut cookie = COOKIE_TAG.to_vec();
            cookie.extend_from_slice(&lsn.to_le_bytes());
            cookie
        }
        (covered, false) => {
            let mut cookie = COOKIE_TAG_EXTRA.to_vec();
            cookie.push(u8::from(covered.is_some()));
            cookie.extend_from_slice(&covered.unwrap_or(0).to_le_bytes());
            cookie.extend_from_slice(extra);
            cookie
        }
    }
}

/// The covered LSN in a checkpoint's cookie (`None` if it carries none: written without a log)
/// and the application's part (empty if none).
fn covered_of(cookie: &[u8]) -> Result<(Option<u64>, &[u8]), String> {
    if cookie.is_empty() {
        return Ok((None, &[]));
    }
    let lsn = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    match cookie.split_first_chunk::<4>() {
        Some((tag, rest)) if tag == COOKIE_TAG && rest.len() == 8 => Ok((Some(lsn(rest)), &[])),
        Some((tag, rest)) if tag == COOKIE_TAG_EXTRA && rest.len() >= 9 && rest[0] <= 1 => {
            let covered = (rest[0] == 1).then(|| lsn(&rest[1..9]));
            Ok((covered, &rest[9..]))
        }
        _ => Err(format!(
            "the checkpoint's commit cookie ({} bytes) was not written by this store",
            cookie.len()
        )),
    }
}

impl DurableStore {
    /// Opens (creating if needed) the store in `options.dir`: recovers the newest checkpoint that
    /// verifies, replays the log suffix after it, and folds a leftover log into a checkpoint when
    /// the mode does not log.
    pub fn open(options: Options) -> Result<(Arc<DurableStore>, Recovered), StoreError> {
        Self::open_observed(
            options,
            Observers {
                loaded: &|_, _| {},
                replayed: &mut |_, _, _| {},
                cookie_suffices: None,
            },
        )
    }

    /// [`DurableStore::open`], telling `observers` every recovered key and replayed operation.
    pub fn open_observed(
        options: Options,
        observers: Observers<'_>,
    ) -> Result<(Arc<DurableStore>, Recovered), StoreError> {
        let started = Instant::now();
        let disk = options.disk.clone();
        prefixkv_storage::durable::create_dir_all_durably(&*disk, &options.dir).map_err(
            |error| StoreError::io(format!("creating {}", options.dir.display()), error),
        )?;
        let lock = DirLock::acquire(&*disk, &options.dir)
            .map_err(|error| StoreError::Storage(error.to_string()))?;
        let mut engine_config = options.engine.clone();
        engine_config.dir = options.dir.clone();
        engine_config.disk = disk.clone();
        let engine = match observers.cookie_suffices {
            None => Engine::open_observed(engine_config.clone(), observers.loaded)?,
            Some(suffices) => Engine::open_observed_unless(
                engine_config.clone(),
                &|cookie| match covered_of(cookie) {
                    Ok((_, extra)) if !extra.is_empty() => suffices(extra),
                    _ => false,
                },
                observers.loaded,
            )?,
        };
        let mut recovered = Recovered {
            checkpoint: engine.recovery_info().cloned(),
            ..Recovered::default()
        };
        let covered = match &recovered.checkpoint {
            Some(info) => covered_of(&info.cookie)
                .map(|(covered, _)| covered)
                .map_err(|detail| StoreError::Recovery {
                    context: format!("checkpoint v{} in {}", info.version, options.dir.display()),
                    detail,
                })?,
            None => None,
        };
        let points: BTreeMap<SessionId, u64> = recovered
            .checkpoint
            .as_ref()
            .map(|info| info.session_commit_points.clone())
            .unwrap_or_default();
        // The store never resumes engine sessions across a restart (each thread starts its own),
        // so the recovered ones would otherwise ride along in every later manifest.
        for id in points.keys() {
            engine.forget_session(*id)?;
        }
        let oplog_dir = options.dir.join("oplog");
        let log_exists = disk.metadata(&oplog_dir).is_ok();
        let mut oplog = None;
        if options.durability.uses_oplog() || log_exists {
            let policy = options
                .durability
                .log_policy()
                .unwrap_or(SyncPolicy::EverySec);
            let config = prefixkv_storage::log::LogConfig {
                policy,
                max_record_bytes: options.oplog_max_record_bytes,
                segment_bytes: options.oplog_segment_bytes,
                // A new (or removed) log continues above every LSN the checkpoint names.
                first_lsn: covered.map_or(1, |lsn| lsn + 1),
                ..prefixkv_storage::log::LogConfig::default()
            };
            let config_for_replacement = config.clone();
            prefixkv_storage::durable::remove_leftover(&*disk, &oplog_dir).map_err(|error| {
                StoreError::io(
                    format!("finishing the removal of {}", oplog_dir.display()),
                    error,
                )
            })?;
            let (mut log, report) = Log::open_on(disk.clone(), &oplog_dir, config.clone())?;
            recovered.torn_tail = report.torn_tail.map(|torn| format!("{torn:?}"));
            if covered.is_some_and(|lsn| log.next_lsn() <= lsn) {
                // The log lost an unsynced tail that the checkpoint covers (it was taken after
                // those records were appended): everything left is in the checkpoint, and new
                // records must not reuse the LSNs it names, or a later recovery from it would
                // skip them. Start the log over above them (step 5 of the module docs).
                log.close()?;
                prefixkv_storage::durable::remove_dir_all_durably(&*disk, &oplog_dir).map_err(
                    |error| StoreError::io(format!("removing {}", oplog_dir.display()), error),
                )?;
                log = Log::open_on(disk.clone(), &oplog_dir, config)?.0;
                recovered.log_restarted_at = Some(log.next_lsn());
            }
            replay(
                &engine,
                &log,
                &recovered,
                covered,
                &points,
                observers.replayed,
            )
            .map(|replayed| {
                recovered.replayed_from = replayed.from;
                recovered.records_replayed = replayed.records;
                recovered.operations_replayed = replayed.operations;
                recovered.incomplete_groups = replayed.incomplete_groups;
            })
            .map_err(|detail| StoreError::Recovery {
                context: format!("replaying {}", oplog_dir.display()),
                detail,
            })?;
            oplog = Some(LogSlot {
                current: ShardedLock::new(Some(Arc::new(log))),
                retired_next_lsn: AtomicU64::new(0),
                dir: oplog_dir.clone(),
                config: config_for_replacement,
                disk: disk.clone(),
            });
        }
        let store = Arc::new(DurableStore {
            engine,
            oplog,
            durability: options.durability,
            strategy: options.strategy,
            keep_checkpoints: engine_config.keep_checkpoints,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            exec_gate: ShardedLock::new(()),
            record_split_bytes: options.record_split_bytes.max(1),
            kept_covered: Mutex::new(covered.into_iter().collect()),
            checkpoint_lock: Mutex::new(()),
            writes: AtomicU64::new(0),
            cookie_extra: Mutex::new(None),
            _lock: Some(lock),
        });
        let store = if !options.durability.uses_oplog() && store.oplog.is_some() {
            let (store, folded) = Self::fold_log(store, &*disk, &oplog_dir)?;
            recovered.folded_through = Some(folded);
            store
        } else {
            store
        };
        recovered.duration = started.elapsed();
        Ok((store, recovered))
    }

    /// The mode does not log, but a log from an earlier mode was replayed: take a checkpoint
    /// that holds it, then remove the log, so an old log is never replayed over newer
    /// checkpoints. Returns the folded LSN.
    fn fold_log(
        store: Arc<DurableStore>,
        disk: &dyn Disk,
        oplog_dir: &std::path::Path,
    ) -> Result<(Arc<DurableStore>, u64), StoreError> {
        let done = store.checkpoint()?;
        let folded = done.covered_lsn.unwrap_or(0);
        let mut store = Arc::into_inner(store).expect("opening holds the only handle");
        let slot = store.oplog.take().expect("a log was opened");
        let log = slot
            .current
            .into_inner()
            .expect("the log slot is never poisoned")
            .expect("a log was opened");
        Arc::into_inner(log)
            .expect("opening holds the only handle")
            .close()?;
        prefixkv_storage::durable::remove_dir_all_durably(disk, oplog_dir)
            .map_err(|error| StoreError::io(format!("removing {}", oplog_dir.display()), error))?;
        store.kept_covered.lock().clear();
        Ok((Arc::new(store), folded))
    }

    /// The engine (reads, scans and checkpoints that need no log; writes go through [`crate::Txn`]).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The log (`None` without one, or while a failed one is replaced: step 6), for tests and
    /// tools reading records; durability: [`DurableStore::is_durable`]; reports: `log_status`.
    pub fn oplog(&self) -> Option<Arc<Log>> {
        self.oplog.as_ref().and_then(LogSlot::get)
    }

    /// Whether writes are logged (the mode logs, or a log was found and is being folded).
    pub(crate) fn logs(&self) -> bool {
        self.oplog.is_some()
    }

    /// Refuses a write before it changes anything when the log is known to have failed (or is
    /// being replaced): only the write that meets a failure is applied and then refused.
    pub(crate) fn check_writable(&self) -> Result<(), StoreError> {
        let Some(slot) = &self.oplog else {
            return Ok(());
        };
        let current = slot.current.read().expect("the log slot is never poisoned");
        match current.as_ref() {
            Some(log) if !log.has_failed() => Ok(()),
            Some(log) => Err(LogError::Failed(format!(
                "{}; writes resume once a checkpoint succeeds (the periodic one, or BGSAVE)",
                log.failure().unwrap_or_default()
            ))
            .into()),
            None => Err(log_being_replaced()),
        }
    }

    /// Appends a write record to the log (the caller checked [`DurableStore::logs`]).
    pub(crate) fn append(&self, record: &[u8]) -> Result<AppendTicket, StoreError> {
        let slot = self.oplog.as_ref().expect("only logging stores append");
        let current = slot.current.read().expect("the log slot is never poisoned");
        match current.as_ref() {
            Some(log) => Ok(log.append(record)?),
            None => Err(log_being_replaced()),
        }
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// A session on this store (one per thread; see [`StoreSession`]).
    pub fn session(self: &Arc<Self>) -> Result<StoreSession, StoreError> {
        Ok(StoreSession::new(
            self.clone(),
            self.engine.try_start_session()?,
        ))
    }

    /// Committed write transactions since open (a periodic checkpointer skips idle periods).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// The engine's log pages in use: memory allocated for records, live or dead (dead ones are
    /// freed only when compaction moves past their pages). What the process holds; see
    /// [`DurableStore::live_bytes`] for what its data needs.
    pub fn used_memory_bytes(&self) -> u64 {
        self.engine.log_memory_in_use_bytes()
    }

    /// The bytes the data needs: the live records (every key's newest record that is not a
    /// tombstone, `prefixkv_engine::Store::live_record_bytes`) plus the hash index in use. Drops
    /// as soon as a key is deleted: what an evicting cache limits.
    pub fn live_bytes(&self) -> u64 {
        self.engine.live_record_bytes() + self.engine.index_bytes()
    }

    /// Sets the access word new keys start with (see `prefixkv_engine::Store::set_access_stamp`).
    pub fn set_access_stamp(&self, stamp: u32) {
        self.engine.set_access_stamp(stamp);
    }

    /// Takes a checkpoint that records the log position it covers, waits until it is durable,
    /// then truncates the log through what the oldest kept checkpoint covers. Blocking; one at a
    /// time (a second caller waits for the first, up to a minute).
    pub fn checkpoint(&self) -> Result<CheckpointDone, StoreError> {
        let _one_at_a_time = self.checkpoint_lock.lock();
        let (token, covered_lsn, failed_before) = self.request_between_transactions()?;
        let report = self.engine.wait_for_commit(token, CHECKPOINT_WAIT)?;
        if let (Some(slot), Some(lsn)) = (&self.oplog, covered_lsn) {
            if failed_before {
                self.replace_failed_log(slot, lsn)?;
            } else if let Some(log) = slot.get() {
                let through = {
                    let mut kept = self.kept_covered.lock();
                    kept.push_back(lsn);
                    while kept.len() > self.keep_checkpoints {
                        kept.pop_front();
                    }
                    *kept.front().expect("just pushed")
                };
                log.truncate_through(through)?;
            }
        }
        Ok(CheckpointDone {
            report,
            covered_lsn,
        })
    }

    /// Sets what the application adds to every later checkpoint's cookie: `make` runs when a
    /// checkpoint is requested, with no write transaction running (module docs, step 0), so what
    /// it returns (counts the application keeps, say) describes exactly the state that
    /// checkpoint holds. Recovery hands it back to [`Observers::cookie_suffices`]. At most
    /// [`MAX_COOKIE_EXTRA_BYTES`]; `make` must not start a transaction.
    pub fn set_cookie_extra(&self, make: CookieExtra) {
        *self.cookie_extra.lock() = Some(make);
    }

    /// Requests the engine checkpoint with no write transaction running (module docs, step 0):
    /// holds the exec gate exclusively from before the covered LSN is read until the engine's
    /// version has switched, so every transaction runs entirely before the checkpoint's version
    /// ends or entirely after. Returns the token, the covered LSN and whether the log had failed
    /// before it was read. Writers wait meanwhile (for the CPR phase changes only, not for the
    /// image); plain reads never do.
    fn request_between_transactions(
        &self,
    ) -> Result<(CheckpointToken, Option<u64>, bool), StoreError> {
        if crate::txn::running_exclusive() || crate::txn::holding_shared() {
            return Err(StoreError::Engine(EngineError::InvalidArgument(
                "a checkpoint cannot be taken inside an exclusive body or a shared one (it would \
                 wait for itself)"
                    .into(),
            )));
        }
        let deadline = Instant::now() + CHECKPOINT_START_WAIT;
        loop {
            let gate = self
                .exec_gate
                .write()
                .expect("the exec gate is never poisoned");
            // Whether the log had failed before the covered LSN is read (module docs, step 6).
            let failed_before = self
                .oplog
                .as_ref()
                .is_some_and(|slot| slot.get().is_none_or(|log| log.failure().is_some()));
            // Read before the request, with no transaction running: every record up to here was
            // appended after its operations completed, so the checkpoint holds them (step 2).
            let covered_lsn = self.oplog.as_ref().map(|slot| slot.next_lsn() - 1);
            // Taken with no transaction running, so the application's counts match the
            // checkpoint's state exactly (step 0).
            let extra = self.cookie_extra.lock().as_ref().map(|make| make());
            let extra = extra.unwrap_or_default();
            if extra.len() > MAX_COOKIE_EXTRA_BYTES {
                return Err(StoreError::Engine(EngineError::InvalidArgument(format!(
                    "the application's part of the checkpoint cookie is {} bytes, more than {}",
                    extra.len(),
                    MAX_COOKIE_EXTRA_BYTES
                ))));
            }
            match self
                .engine
                .checkpoint_with_cookie(self.strategy, cookie_of(covered_lsn, &extra))
            {
                Ok(token) => {
                    self.engine
                        .wait_for_version_switch(token, CHECKPOINT_SWITCH_WAIT)?;
                    drop(gate);
                    return Ok((token, covered_lsn, failed_before));
                }
                Err(EngineError::CheckpointInProgress) if Instant::now() < deadline => {
                    // Someone used the engine directly; wait for it (bounded), letting writers on.
                    drop(gate);
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Replaces a log that had failed before checkpoint `covered` was requested by a new one at
    /// `covered + 1` (module docs, step 6); the checkpoint is durable and holds everything the old
    /// log held. Writers wait on the slot meanwhile. If the new log cannot be opened (still no
    /// space), the slot stays empty and the next checkpoint tries again.
    fn replace_failed_log(&self, slot: &LogSlot, covered: u64) -> Result<(), StoreError> {
        let mut current = slot
            .current
            .write()
            .expect("the log slot is never poisoned");
        if let Some(old) = current.take() {
            slot.retired_next_lsn
                .store(old.next_lsn(), Ordering::SeqCst);
            // `oplog()` callers hold the old log briefly; it must be closed (its directory lock
            // released) before a new log opens in the same directory.
            let deadline = Instant::now() + LOG_RELEASE_WAIT;
            let mut old = old;
            let owned = loop {
                match Arc::try_unwrap(old) {
                    Ok(owned) => break owned,
                    Err(shared) if Instant::now() < deadline => {
                        old = shared;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(shared) => {
                        *current = Some(shared);
                        return Err(StoreError::Storage(format!(
                            "the failed operation log is still in use after {LOG_RELEASE_WAIT:?}; \
                             the next checkpoint replaces it"
                        )));
                    }
                }
            };
            if let Err(error) = owned.close() {
                tracing::info!("replacing the failed operation log: {error}");
            }
        }
        prefixkv_storage::durable::remove_dir_all_durably(&*slot.disk, &slot.dir)
            .map_err(|error| StoreError::io(format!("removing {}", slot.dir.display()), error))?;
        let config = prefixkv_storage::log::LogConfig {
            first_lsn: covered + 1,
            ..slot.config.clone()
        };
        let (log, _) = Log::open_on(slot.disk.clone(), &slot.dir, config)?;
        tracing::warn!(
            "the operation log had failed; checkpoint through LSN {covered} holds all it held: \
             started a new log at LSN {}, writes resume",
            covered + 1
        );
        *current = Some(Arc::new(log));
        // Only this checkpoint's covered LSN is known to the new log (as after step 5).
        let mut kept = self.kept_covered.lock();
        kept.clear();
        kept.push_back(covered);
        Ok(())
    }

    /// Makes every appended log record durable now (a clean shutdown of the logging modes).
    pub fn sync(&self) -> Result<(), StoreError> {
        if let Some(slot) = &self.oplog {
            match slot.get() {
                Some(log) => {
                    log.flush_and_sync()?;
                }
                None => return Err(log_being_replaced()),
            }
        }
        Ok(())
    }
}

/// What [`replay`] did.
struct Replayed {
    /// The first LSN replayed, if any.
    from: Option<u64>,
    records: u64,
    operations: u64,
    /// (first LSN, records) of each incomplete group dropped.
    incomplete_groups: Vec<(u64, u64)>,
}

/// Replays the log after the checkpoint (module docs, step 3), a whole group at a time: the
/// records of a group that spans several are held until its last part arrives, and a group that
/// never completed is dropped (`record` module docs). Holding a group costs memory up to its
/// size, which its writer held in the engine anyway.
fn replay(
    engine: &Arc<Engine>,
    log: &Log,
    recovered: &Recovered,
    covered: Option<u64>,
    points: &BTreeMap<SessionId, u64>,
    observe: ReplayObserver<'_>,
) -> Result<Replayed, String> {
    let mut replayed = Replayed {
        from: None,
        records: 0,
        operations: 0,
        incomplete_groups: Vec::new(),
    };
    if recovered.checkpoint.is_none() && log.oldest_lsn() > 1 {
        return Err(format!(
            "the log starts at LSN {} but no checkpoint exists to hold the earlier records; \
             restore the checkpoints directory, or move the log away to start empty",
            log.oldest_lsn()
        ));
    }
    let start = covered.map_or(log.oldest_lsn(), |lsn| lsn + 1);
    if start >= log.next_lsn() {
        return Ok(replayed);
    }
    if start < log.oldest_lsn() {
        return Err(format!(
            "the recovered checkpoint needs the log from LSN {start}, but it starts at LSN {}",
            log.oldest_lsn()
        ));
    }
    replayed.from = Some(start);
    let mut session = engine.try_start_session().map_err(|e| e.to_string())?;
    let mut apply = |lsn: u64, payload: &[u8]| -> Result<u64, String> {
        let record =
            decode_record(payload).map_err(|detail| format!("record LSN {lsn}: {detail}"))?;
        let point = points
            .get(&SessionId(record.session_id))
            .copied()
            .unwrap_or(0);
        let mut applied = 0;
        for op in record.operations.into_iter().filter(|op| op.serial > point) {
            let existed = match op.value {
                Some(value) => session.upsert_existed(op.key, value),
                None => session.delete(op.key),
            }
            .map_err(|error| format!("record LSN {lsn}: applying it failed: {error}"))?;
            observe(op.key, op.value, existed);
            applied += 1;
        }
        Ok(applied)
    };
    // The parts of the group being read, with their LSNs, until its last part.
    let mut open: Vec<(u64, Vec<u8>)> = Vec::new();
    for item in log.replay(start).map_err(|e| e.to_string())? {
        let (lsn, payload) = item.map_err(|e| e.to_string())?;
        let part = part_of(&payload).map_err(|detail| format!("record LSN {lsn}: {detail}"))?;
        if !part.continues() {
            if let Some(&(first, _)) = open.first() {
                // A new group starts while one is open: that one was cut by a crash.
                replayed.incomplete_groups.push((first, open.len() as u64));
                open.clear();
            }
        } else if open.is_empty() {
            return Err(format!(
                "record LSN {lsn} continues a log group whose first record is not in the replayed \
                 log (the log was edited, or a checkpoint cut a group)"
            ));
        }
        if part.more_follow() {
            open.push((lsn, payload));
            continue;
        }
        replayed.records += open.len() as u64 + 1;
        for (lsn, payload) in open.drain(..) {
            replayed.operations += apply(lsn, &payload)?;
        }
        replayed.operations += apply(lsn, &payload)?;
    }
    if let Some(&(first, _)) = open.first() {
        replayed.incomplete_groups.push((first, open.len() as u64));
    }
    Ok(replayed)
}

#[cfg(test)]
mod cookie_tests {
    use super::{cookie_of, covered_of};

    #[test]
    fn cookies_round_trip_with_and_without_the_application_part() {
        for covered in [None, Some(0), Some(41)] {
            for extra in [&b""[..], b"x", &[7u8; 300]] {
                let cookie = cookie_of(covered, extra);
                assert_eq!(covered_of(&cookie).unwrap(), (covered, extra));
            }
        }
        // Without an application part the cookie is the format older builds wrote.
        assert_eq!(
            cookie_of(Some(9), b""),
            [&b"OPL1"[..], &9u64.to_le_bytes()].concat()
        );
        assert!(cookie_of(None, b"").is_empty());
    }

    #[test]
    fn a_cookie_of_another_writer_is_refused() {
        for cookie in [
            &b"OPL1\x01"[..],
            b"OPL2\x02\0\0\0\0\0\0\0\0",
            b"OPL2\x01",
            b"XXXX\0\0\0\0\0\0\0\0",
        ] {
            assert!(covered_of(cookie).is_err(), "{cookie:?}");
        }
    }
}
