//! The store: shared state, opening with recovery, session registry, checkpoint requests.
//!
//! Durability statement: an acknowledged operation is visible to every later operation, and it is
//! durable once its session's commit point (`Session::committed_serial`, or the CPR point in the
//! `CheckpointReport` of a published checkpoint) covers its serial number; a crash loses exactly the
//! operations after each session's commit point in the newest checkpoint that verifies.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::checkpoint_files::CheckpointDirectory;
use crate::cpr_points::SessionShared;
use crate::epoch::LightEpoch;
use crate::index::{EntrySlot, HashIndex, KeyHash};
use crate::latch::VersionLatches;
use crate::log::{HybridLog, Record, FLAG_INVALID};
use crate::rollback::{InvalidVersions, RollbackState};
use crate::session::Session;
use crate::state::{GlobalState, Phase, SystemState};
use crate::{EngineError, SessionId, StoreConfig, Strategy};

mod recovery;
mod sealed;

pub use sealed::Scope;

/// Maximum number of sessions (epoch table slots) open at once, plus internal threads.
/// How many sessions may be open at once (each holds one slot of the epoch table).
pub const MAX_OPEN_SESSIONS: usize = 1024;
/// Checkpoint results kept for `wait_for_commit`.
const KEPT_RESULTS: usize = 64;

/// Returned by [`Store::checkpoint`]; pass to [`Store::wait_for_commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointToken {
    /// The version this checkpoint makes durable.
    pub version: u64,
}

/// What a published checkpoint contains.
#[derive(Clone, Debug)]
pub struct CheckpointReport {
    /// Checkpoint version.
    pub version: u64,
    /// Strategy used.
    pub strategy: Strategy,
    /// From the request to the durable manifest.
    pub duration: Duration,
    /// Segment bytes written.
    pub bytes: u64,
    /// Entries written.
    pub records: u64,
    /// CPR point (last serial included) per session.
    pub session_points: BTreeMap<SessionId, u64>,
    /// The published checkpoint directory.
    pub dir: PathBuf,
    /// Where the checkpoint's time went.
    pub breakdown: crate::checkpoint::CheckpointBreakdown,
}

/// What `Store::open` recovered.
#[derive(Clone, Debug)]
pub struct RecoveryInfo {
    /// Recovered checkpoint version.
    pub version: u64,
    /// Commit point per session.
    pub session_commit_points: BTreeMap<SessionId, u64>,
    /// Entries loaded.
    pub records: u64,
    /// Why a newer checkpoint was skipped, if one was.
    pub fell_back: Option<String>,
    /// The commit cookie the recovered checkpoint was requested with (empty if none).
    pub cookie: Vec<u8>,
}

/// A key's index entry and newest record, read in the one order that is safe while compaction
/// runs: the begin address first, then the chain head.
///
/// Why the order matters (the bug behind a "missing key" at 10M keys, see `docs/engine.md`,
/// "Chain walks and the begin address"): compaction copies a key's newest record to the tail,
/// re-points the index entry at the copy, and only then moves the begin address past the old
/// record. A reader that loaded the head *before* that re-pointing and the begin *after* the move
/// holds an address below its own lower bound: the walk stops at once and reports the key absent
/// although it never was. Reading the begin first makes the bound no newer than the head, and a
/// key's newest record at the time the head was read lies at or above the begin of that time
/// (compaction's invariant), so the walk reaches it; epoch protection keeps its page allocated.
pub(crate) struct Located<'a> {
    /// The index entry as read (its word is the expected value for a publishing CAS).
    pub(crate) entry: EntrySlot<'a>,
    /// The key's newest valid record, if any.
    pub(crate) record: Option<Record<'a>>,
}

/// Why a checkpoint has no report.
#[derive(Clone, Debug)]
pub(crate) enum CheckpointFailure {
    /// It could not be made durable (the error's text).
    Failed(String),
    /// A rollback discarded its version: stopped before it was published, or deleted after.
    Discarded,
}

/// State shared by the store, its sessions and its background threads.
pub(crate) struct Shared {
    pub(crate) config: StoreConfig,
    pub(crate) epoch: LightEpoch,
    pub(crate) index: HashIndex,
    pub(crate) log: HybridLog,
    pub(crate) latches: VersionLatches,
    pub(crate) state: GlobalState,
    /// Strategy of the checkpoint in flight (index into `Strategy::ALL`).
    pub(crate) running_strategy: AtomicU64,
    /// How far the Persian scanners have emitted the image (`scan_progress` module).
    pub(crate) scan_progress: crate::scan_progress::ScanProgress,
    pub(crate) sessions: Mutex<BTreeMap<u64, Arc<SessionShared>>>,
    pub(crate) next_session_id: AtomicU64,
    /// Sessions open now; at most [`MAX_OPEN_SESSIONS`] (the epoch table has two more slots, for
    /// the engine's own threads).
    pub(crate) open_sessions: AtomicUsize,
    pub(crate) checkpoints: CheckpointDirectory,
    /// A state machine runs: a checkpoint, or a rollback until its PURGE ended (a nested
    /// rollback takes it over from the PURGE it stops).
    checkpoint_running: AtomicBool,
    /// Set by a rollback while it waits for the state machine: the running checkpoint (whose
    /// version the rollback is about to discard) stops writing and is not published.
    pub(crate) abort_checkpoint: AtomicBool,
    /// Rollback bookkeeping (`rollback` module).
    pub(crate) rollback: RollbackState,
    results: Mutex<HashMap<u64, Result<CheckpointReport, CheckpointFailure>>>,
    results_changed: Condvar,
    /// `blocking` strategy barrier.
    pub(crate) pause_lock: Mutex<()>,
    pub(crate) pause_changed: Condvar,
    /// Back-pressure: writers wait here for compaction to free pages.
    pub(crate) memory_lock: Mutex<u64>,
    pub(crate) memory_changed: Condvar,
    /// Compaction and checkpoints exclude each other. Checkpoints and PURGE take it with
    /// [`Shared::lock_maintenance`], which compaction yields to.
    pub(crate) maintenance: Mutex<()>,
    /// Threads waiting in [`Shared::lock_maintenance`]: compaction starts no chunk meanwhile.
    pub(crate) maintenance_waiters: AtomicUsize,
    /// Held by a [`Store::seal`] for its whole version switch, and by whatever else starts
    /// changing the phase (a classic checkpoint's PREPARE or PAUSE, a rollback's THROW): a seal
    /// starts only from REST and never interleaves with another state machine's phases.
    pub(crate) seal_lock: Mutex<()>,
    /// A classic checkpoint ([`Store::checkpoint`]) runs: its phases are under way, so seals wait.
    pub(crate) classic_running: AtomicBool,
    /// Versions sealed by [`Store::seal`] and not yet published, with each session's CPR point
    /// in them (recorded at the seal, before any session could move on).
    pub(crate) sealed: Mutex<BTreeMap<u64, BTreeMap<SessionId, u64>>>,
    pub(crate) compaction_requested: Mutex<bool>,
    /// A writer is held at the memory limit: compaction must run even if the log looks live.
    pub(crate) memory_wanted: AtomicBool,
    pub(crate) compaction_wakeup: Condvar,
    pub(crate) shutdown: AtomicBool,
    /// The access word new keys start with ([`Store::set_access_stamp`]).
    pub(crate) access_stamp: AtomicU32,
    /// Bytes of live records (`accounting` module).
    pub(crate) live: crate::accounting::LiveBytes,
}

/// The store. Share it as `Arc<Store>`.
pub struct Store {
    pub(crate) shared: Arc<Shared>,
    recovery: Option<RecoveryInfo>,
    compactor: Mutex<Option<JoinHandle<()>>>,
    checkpoint_thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    pub(crate) fn strategy_in_flight(&self) -> Strategy {
        Strategy::ALL[self.running_strategy.load(Ordering::Acquire) as usize]
    }

    /// `FLAG_STABLE_SLOT` if records written now get the stable-copy word, else 0: while the
    /// default strategy or the newest checkpoint's is cpr-copy, whose v+1 writers store a stable
    /// copy's address in the record they then write in place. Other records cost 8 bytes less;
    /// cpr-copy copies them instead (read-copy-update, as the other strategies do).
    #[inline]
    pub(crate) fn stable_slot_flag(&self) -> u64 {
        if self.config.default_strategy == Strategy::CprCopy
            || self.strategy_in_flight() == Strategy::CprCopy
        {
            crate::log::FLAG_STABLE_SLOT
        } else {
            0
        }
    }

    /// Records the strategy of the checkpoint starting now (see [`Shared::strategy_in_flight`]).
    pub(crate) fn set_running_strategy(&self, strategy: Strategy) {
        let index = Strategy::ALL
            .iter()
            .position(|candidate| *candidate == strategy)
            .expect("every strategy is listed");
        self.running_strategy.store(index as u64, Ordering::Release);
    }

    /// The newest record of `key` for a reader: `None` if the index has no entry for its tag.
    /// Caller holds epoch protection. `invalid`: versions a rollback discarded (the session's
    /// copy, see `rollback` module).
    ///
    /// The walk's lower bound is read *before* the chain head: see [`Located`].
    #[inline(always)]
    pub(crate) fn locate(
        &self,
        hash: KeyHash,
        key: &[u8],
        invalid: InvalidVersions,
    ) -> Option<Located<'_>> {
        let begin = self.log.begin_address();
        let entry = self.index.find(hash)?;
        let record = self.find_record(key, entry.address(), begin, invalid);
        Some(Located { entry, record })
    }

    /// The newest record of `key` for a writer, creating the index entry for its tag if missing.
    /// Caller holds epoch protection. Same read order as [`Shared::locate`].
    #[inline(always)]
    pub(crate) fn locate_or_create(
        &self,
        hash: KeyHash,
        key: &[u8],
        invalid: InvalidVersions,
    ) -> Result<Located<'_>, EngineError> {
        let begin = self.log.begin_address();
        let entry = self
            .index
            .find_or_create(hash, begin)
            .map_err(|_| self.index_full_error())?;
        let record = self.find_record(key, entry.address(), begin, invalid);
        Ok(Located { entry, record })
    }

    /// The newest record with `key` in the chain starting at `head` (skipping invalid records:
    /// flagged, or of a version in `invalid`), walking down to `begin`. Caller holds epoch
    /// protection (or is the only thread), and read `begin` no later than `head` (see
    /// [`Located`]) or holds the maintenance lock.
    #[inline(always)]
    pub(crate) fn find_record(
        &self,
        key: &[u8],
        head: u64,
        begin: u64,
        invalid: InvalidVersions,
    ) -> Option<Record<'_>> {
        let mut address = head;
        while address >= begin && address != 0 {
            let record = self.log.record(address);
            let word0 = record.word0();
            // `invalid` is empty outside a rollback: one compare of a register with zero.
            if word0 & FLAG_INVALID == 0
                && !invalid.contains(record.version())
                && record.key_equals(key)
            {
                return Some(record);
            }
            let previous = word0 & crate::log::ADDRESS_MASK;
            // Walks stop below `begin`, which is only sound if chains point down the log.
            debug_assert!(
                previous < address,
                "record {address} links up the log to {previous}: a chain walk that stops below the \
                 begin address would lose what lies behind it"
            );
            address = previous;
        }
        None
    }

    pub(crate) fn index_full_error(&self) -> EngineError {
        EngineError::OutOfMemory {
            detail: format!(
                "the hash index overflow pool ({} buckets) is exhausted; raise StoreConfig::index_buckets",
                self.index.bucket_count()
            ),
        }
    }

    /// Takes the one state-machine slot (no checkpoint may start; a running one is waited for,
    /// until `deadline`).
    pub(crate) fn acquire_state_machine(&self, deadline: Instant) -> Result<(), EngineError> {
        let mut results = self.results.lock();
        loop {
            if !self.checkpoint_running.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EngineError::Timeout);
            }
            // `finish_checkpoint` clears the flag and notifies under this lock: no lost wake-up.
            self.results_changed.wait_until(&mut results, deadline);
        }
    }

    /// Stores `next` as the state word. If it lets sessions run a version they could not run
    /// before (IN_PROGRESS(v+1), PAUSE(v) whose sessions adopt v+1, THROW(n)), first notes the
    /// log tail for PURGE's bound (`RollbackState::note_allowed`): read before the store, so that
    /// every record of the new versions lies above it. Only the one state machine running stores
    /// (a checkpoint driver or a rollback, or the epoch actions they queue).
    pub(crate) fn publish_state(&self, next: SystemState) {
        let runnable = |state: SystemState| state.version + u64::from(state.phase == Phase::Pause);
        let before = runnable(self.state.load());
        if runnable(next) > before {
            self.rollback
                .note_allowed(before, runnable(next), self.log.tail_address());
        }
        self.state.store(next);
    }

    /// [`Shared::publish_state`] keeping the world-line.
    pub(crate) fn publish_phase(&self, phase: Phase, version: u64) {
        let world_line = self.state.load().world_line;
        self.publish_state(SystemState {
            phase,
            version,
            world_line,
        });
    }

    /// Gives back what [`Shared::acquire_state_machine`] took.
    pub(crate) fn release_state_machine(&self) {
        let _results = self.results.lock();
        self.checkpoint_running.store(false, Ordering::SeqCst);
        self.results_changed.notify_all();
    }

    /// Checkpoints above `version` were deleted by a rollback: their tokens now report
    /// `CheckpointAborted`.
    pub(crate) fn forget_results_above(&self, version: u64) {
        let mut results = self.results.lock();
        for (&checkpoint, result) in results.iter_mut() {
            if checkpoint > version {
                *result = Err(CheckpointFailure::Discarded);
            }
        }
    }

    fn finish_checkpoint(&self, version: u64, result: Result<CheckpointReport, CheckpointFailure>) {
        let mut results = self.results.lock();
        if results.len() >= KEPT_RESULTS {
            if let Some(oldest) = results.keys().min().copied() {
                results.remove(&oldest);
            }
        }
        results.insert(version, result);
        self.classic_running.store(false, Ordering::SeqCst);
        self.checkpoint_running.store(false, Ordering::SeqCst);
        self.results_changed.notify_all();
    }

    /// Takes the maintenance lock ahead of compaction: compaction takes it chunk by chunk with
    /// `try_lock` and would otherwise win it again and again while the log stays above its
    /// trigger (measured: a checkpoint, and the rollback waiting for it to stop, waited 5 s).
    pub(crate) fn lock_maintenance(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.maintenance_waiters.fetch_add(1, Ordering::SeqCst);
        let guard = self.maintenance.lock();
        self.maintenance_waiters.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    /// Wakes writers waiting for memory.
    pub(crate) fn notify_memory(&self) {
        let mut generation = self.memory_lock.lock();
        *generation += 1;
        self.memory_changed.notify_all();
    }

    pub(crate) fn request_compaction(&self) {
        *self.compaction_requested.lock() = true;
        self.compaction_wakeup.notify_all();
    }
}

impl Store {
    /// Opens the store in `config.dir`, recovering the newest checkpoint that verifies.
    pub fn open(config: StoreConfig) -> Result<Arc<Store>, EngineError> {
        Self::open_observed(config, &|_, _| {})
    }

    /// [`Store::open`], calling `observe(key, value)` once for every key of the recovered image
    /// (from several recovery threads at once, in no particular order) before `open` returns: an
    /// application builds what it derives from the data (counts, say) while the checkpoint
    /// loads, instead of a second pass. Key-unique checkpoints are observed as they load;
    /// log-ordered ones (fold-over, snapshot), whose entries may be superseded later in the
    /// file, by a scan of the index once loading is done.
    pub fn open_observed(
        config: StoreConfig,
        observe: &(dyn Fn(&[u8], &[u8]) + Sync),
    ) -> Result<Arc<Store>, EngineError> {
        config.validate()?;
        prefixkv_storage::durable::create_dir_all_durably(&*config.disk, &config.dir)
            .map_err(|error| EngineError::io("create data directory", &config.dir, error))?;
        let mut checkpoints = CheckpointDirectory::open_on(
            Arc::clone(&config.disk),
            &config.dir.join("checkpoints"),
            crate::checkpoint_files::DecodeLimits::default(),
        )?;
        checkpoints.set_write_rate(config.checkpoint_write_bytes_per_s);
        checkpoints.set_direct_io(config.checkpoint_direct_io);
        let latch_words = (config.index_buckets / 4)
            .clamp(1 << 10, 1 << 20)
            .next_power_of_two();
        let shared = Arc::new(Shared {
            epoch: LightEpoch::new(MAX_OPEN_SESSIONS + 2),
            index: HashIndex::new(config.index_buckets),
            log: HybridLog::new(config.log_page_bytes, config.log_memory_bytes),
            latches: VersionLatches::new(latch_words),
            state: GlobalState::new(SystemState {
                phase: Phase::Rest,
                version: 1,
                world_line: 0,
            }),
            running_strategy: AtomicU64::new(0),
            scan_progress: crate::scan_progress::ScanProgress::new(config.flusher_threads),
            sessions: Mutex::new(BTreeMap::new()),
            next_session_id: AtomicU64::new(1),
            open_sessions: AtomicUsize::new(0),
            checkpoints,
            checkpoint_running: AtomicBool::new(false),
            abort_checkpoint: AtomicBool::new(false),
            rollback: RollbackState::new(),
            results: Mutex::new(HashMap::new()),
            results_changed: Condvar::new(),
            pause_lock: Mutex::new(()),
            pause_changed: Condvar::new(),
            memory_lock: Mutex::new(0),
            memory_changed: Condvar::new(),
            maintenance: Mutex::new(()),
            maintenance_waiters: AtomicUsize::new(0),
            seal_lock: Mutex::new(()),
            classic_running: AtomicBool::new(false),
            sealed: Mutex::new(BTreeMap::new()),
            compaction_requested: Mutex::new(false),
            memory_wanted: AtomicBool::new(false),
            compaction_wakeup: Condvar::new(),
            shutdown: AtomicBool::new(false),
            access_stamp: AtomicU32::new(config.access_stamp),
            live: crate::accounting::LiveBytes::new(MAX_OPEN_SESSIONS + 2),
            config,
        });
        let recovery = Self::recover(&shared, observe)?;
        if recovery.is_some() {
            // Alone: no session or background thread exists yet.
            let live = crate::accounting::recount(&shared, InvalidVersions::NONE);
            shared.live.set(shared.epoch.high_water(), live);
        }
        // The first version sessions run as: every record recovery loaded is of the recovered
        // version or older (none of a fresh store), all below the tail now.
        shared.rollback.note_allowed(
            recovery.as_ref().map_or(0, |info| info.version),
            shared.state.load().version,
            shared.log.tail_address(),
        );
        let compactor = {
            let background = shared.clone();
            std::thread::Builder::new()
                .name("prefixkv-compactor".into())
                .spawn(move || crate::compaction::run(&background))
                .map_err(|error| {
                    EngineError::io("spawn compaction thread for", shared_dir(&shared), error)
                })?
        };
        Ok(Arc::new(Store {
            shared,
            recovery,
            compactor: Mutex::new(Some(compactor)),
            checkpoint_thread: Mutex::new(None),
        }))
    }

    /// What `open` recovered; `None` for a fresh store.
    pub fn recovery_info(&self) -> Option<&RecoveryInfo> {
        self.recovery.as_ref()
    }

    /// Starts a new session with a fresh id.
    ///
    /// # Panics
    /// If [`MAX_OPEN_SESSIONS`] sessions are already open; use [`Store::try_start_session`] where
    /// the number of sessions is not under the caller's control (one per client connection).
    pub fn start_session(self: &Arc<Self>) -> Session {
        self.try_start_session()
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// Starts a new session with a fresh id, or fails with [`EngineError::TooManySessions`] when
    /// [`MAX_OPEN_SESSIONS`] are already open.
    pub fn try_start_session(self: &Arc<Self>) -> Result<Session, EngineError> {
        let slot = self.acquire_session_slot()?;
        let id = SessionId(self.shared.next_session_id.fetch_add(1, Ordering::SeqCst));
        // Under the registry lock: a rollback resets the registered sessions and publishes its
        // world-line under the same lock, so this session is either reset or starts in the new
        // world-line.
        let mut sessions = self.shared.sessions.lock();
        let state = self.shared.state.load();
        let shared = Arc::new(SessionShared::new(id, state.version, 0, state.world_line));
        sessions.insert(id.0, shared.clone());
        drop(sessions);
        Ok(Session::new(
            self.clone(),
            shared,
            0,
            slot,
            state.world_line,
        ))
    }

    /// Reserves an epoch slot for a session (released by the session's `Drop`).
    fn acquire_session_slot(&self) -> Result<usize, EngineError> {
        let too_many = EngineError::TooManySessions {
            limit: MAX_OPEN_SESSIONS,
        };
        if self.shared.open_sessions.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN_SESSIONS {
            self.shared.open_sessions.fetch_sub(1, Ordering::SeqCst);
            return Err(too_many);
        }
        match self.shared.epoch.acquire_slot() {
            Some(slot) => Ok(slot),
            None => {
                self.shared.open_sessions.fetch_sub(1, Ordering::SeqCst);
                Err(too_many)
            }
        }
    }

    /// Gives back what [`Store::acquire_session_slot`] took.
    pub(crate) fn release_session_slot(&self, slot: usize) {
        self.shared.epoch.release_slot(slot);
        let previous = self.shared.open_sessions.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(
            previous > 0,
            "released more session slots than were acquired"
        );
    }

    /// Resumes a session recorded by the recovered checkpoint; returns it with its recovered serial.
    /// A session dropped in this process can be resumed too, until a checkpoint holds all of its
    /// operations (then the store forgets it); to keep an id for later, `suspend` the session
    /// instead of dropping it.
    pub fn resume_session(self: &Arc<Self>, id: SessionId) -> Result<(Session, u64), EngineError> {
        let slot = self.acquire_session_slot()?;
        // Claim under the registry lock: a finishing checkpoint forgets ended sessions under the
        // same lock, so a session is never claimed after it was forgotten.
        let claimed = {
            let sessions = self.shared.sessions.lock();
            let world_line = self.shared.state.load().world_line;
            match sessions.get(&id.0) {
                None => Err(EngineError::UnknownSession(id)),
                Some(shared) => shared
                    .claim()
                    .map(|serial| (shared.clone(), serial, world_line)),
            }
        };
        match claimed {
            Ok((shared, serial, world_line)) => Ok((
                Session::new(self.clone(), shared, serial, slot, world_line),
                serial,
            )),
            Err(error) => {
                self.release_session_slot(slot);
                Err(error)
            }
        }
    }

    /// Forgets an inactive session (one recovered from a checkpoint and never resumed, or one
    /// dropped), so later manifests leave it out; a later `resume_session(id)` then fails with
    /// [`EngineError::UnknownSession`]. Sessions dropped in this process are forgotten on their
    /// own once a checkpoint holds all their operations; recovered ones are kept until resumed
    /// and dropped, or until this call. Errors if the session is active or unknown.
    pub fn forget_session(&self, id: SessionId) -> Result<(), EngineError> {
        let mut sessions = self.shared.sessions.lock();
        let shared = sessions.get(&id.0).ok_or(EngineError::UnknownSession(id))?;
        if shared.points.lock().active {
            return Err(EngineError::InvalidArgument(format!(
                "session {id} is active; drop its Session before forgetting it"
            )));
        }
        sessions.remove(&id.0);
        Ok(())
    }

    /// Starts a checkpoint of the current version on a checkpoint thread and returns at once.
    pub fn checkpoint(&self, strategy: Strategy) -> Result<CheckpointToken, EngineError> {
        self.checkpoint_with_cookie(strategy, Vec::new())
    }

    /// [`Store::checkpoint`], recording `cookie` (at most
    /// [`checkpoint_files::MAX_COOKIE_BYTES`](crate::checkpoint_files::MAX_COOKIE_BYTES)) in the
    /// checkpoint's manifest; recovery returns it in [`RecoveryInfo::cookie`]. The cookie is the
    /// caller's state as of this request: whatever it describes must be true of every operation
    /// acknowledged before the request (those are in the checkpoint), e.g. "the operation log up
    /// to position p" when every record up to p was appended after its operation completed.
    pub fn checkpoint_with_cookie(
        &self,
        strategy: Strategy,
        cookie: Vec<u8>,
    ) -> Result<CheckpointToken, EngineError> {
        check_cookie(&cookie)?;
        // Under the seal lock: no seal is switching versions now, and none starts until this
        // checkpoint's phases are over (`classic_running`), so `version` stays the current one.
        let seal_guard = self.shared.seal_lock.lock();
        if self.shared.checkpoint_running.swap(true, Ordering::SeqCst) {
            return Err(EngineError::CheckpointInProgress);
        }
        self.shared.classic_running.store(true, Ordering::SeqCst);
        drop(seal_guard);
        let version = self.shared.state.load().version;
        self.spawn_checkpoint(version, move |shared, started| {
            crate::checkpoint::run(shared, strategy, version, cookie, started)
        })
    }

    /// Runs `job` for checkpoint `version` on the checkpoint thread and returns its token; the
    /// result goes to [`Store::wait_for_commit`]. The caller claimed the state machine
    /// (`checkpoint_running`); if the thread cannot start, it is given back.
    fn spawn_checkpoint(
        &self,
        version: u64,
        job: impl FnOnce(&Arc<Shared>, Instant) -> Result<CheckpointReport, EngineError>
            + Send
            + 'static,
    ) -> Result<CheckpointToken, EngineError> {
        let shared = self.shared.clone();
        let mut slot = self.checkpoint_thread.lock();
        if let Some(previous) = slot.take() {
            // It already reported its result; joining only reaps the thread.
            let _ = previous.join();
        }
        let spawned = std::thread::Builder::new()
            .name(format!("prefixkv-checkpoint-v{version}"))
            .spawn(move || {
                let result = job(&shared, Instant::now()).map_err(|error| match error {
                    EngineError::CheckpointAborted { .. } => CheckpointFailure::Discarded,
                    other => CheckpointFailure::Failed(other.to_string()),
                });
                shared.finish_checkpoint(version, result);
            });
        match spawned {
            Ok(handle) => {
                *slot = Some(handle);
                Ok(CheckpointToken { version })
            }
            Err(error) => {
                self.shared.classic_running.store(false, Ordering::SeqCst);
                self.shared.release_state_machine();
                Err(EngineError::io(
                    "spawn checkpoint thread for",
                    shared_dir(&self.shared),
                    error,
                ))
            }
        }
    }

    /// Waits until no operation of checkpoint `token`'s version can begin any more: the store's
    /// version passed `token.version` (the non-blocking strategies switch at IN_PROGRESS, before
    /// the image is written; `blocking` after it), at most `timeout`. From then on a session's
    /// next operation adopts the new version before it runs.
    ///
    /// A caller that keeps its own writers out from the request until this returns (the durable
    /// store's transaction barrier) gets a checkpoint that holds each of their multi-operation
    /// writes whole or not at all: none of them can straddle the version switch.
    pub fn wait_for_version_switch(
        &self,
        token: CheckpointToken,
        timeout: Duration,
    ) -> Result<(), EngineError> {
        let deadline = Instant::now() + timeout;
        while self.shared.state.load().version <= token.version {
            if Instant::now() >= deadline {
                return Err(EngineError::Timeout);
            }
            // Help the phase along: with the caller's writers parked (suspended), the epoch action
            // that advances the phase may be waiting for any thread to drain it.
            self.shared.epoch.drain();
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Waits until checkpoint `token` is durable (or failed), at most `timeout`.
    pub fn wait_for_commit(
        &self,
        token: CheckpointToken,
        timeout: Duration,
    ) -> Result<CheckpointReport, EngineError> {
        let deadline = Instant::now() + timeout;
        let mut results = self.shared.results.lock();
        loop {
            if let Some(result) = results.get(&token.version) {
                return result.clone().map_err(|failure| match failure {
                    CheckpointFailure::Failed(detail) => EngineError::CheckpointFailed {
                        version: token.version,
                        detail,
                    },
                    CheckpointFailure::Discarded => EngineError::CheckpointAborted {
                        version: token.version,
                    },
                });
            }
            if self
                .shared
                .results_changed
                .wait_until(&mut results, deadline)
                .timed_out()
            {
                return Err(EngineError::Timeout);
            }
        }
    }

    /// The largest value, in bytes, that fits one record with a key of `key_bytes` bytes (a
    /// record must fit a log page and the record limit, a little under 4 MiB, with the largest
    /// header the key can get), or `None` when the key alone is too large.
    pub fn max_value_bytes(&self, key_bytes: usize) -> Option<usize> {
        if key_bytes > u32::MAX as usize {
            return None;
        }
        // With the largest header the key can get (the stable-copy word may be added to any
        // record a write creates, and long keys carry their length in a word of their own).
        let record_words = self.shared.log.max_record_bytes() / 8;
        let value_words = record_words
            .checked_sub(crate::log::header_words(key_bytes, true) + key_bytes.div_ceil(8))?;
        Some(value_words * 8)
    }

    /// The version operations currently run as (the next checkpoint makes this version durable).
    pub fn version(&self) -> u64 {
        self.shared.state.load().version
    }

    /// The number of main index buckets: valid `Session::scan` cursors are `0..index_buckets()`.
    pub fn index_buckets(&self) -> usize {
        self.shared.index.bucket_count()
    }

    /// Bytes of log pages currently allocated.
    pub fn log_memory_in_use_bytes(&self) -> u64 {
        self.shared.log.memory_in_use_bytes()
    }

    /// Sets the access word that new keys start with (and records loaded by recovery): the
    /// caller's clock (an LRU clock, an LFU counter's initial value). Any later record of an
    /// existing key carries its predecessor's word forward instead; see [`Session::touch`].
    pub fn set_access_stamp(&self, stamp: u32) {
        self.shared.access_stamp.store(stamp, Ordering::Relaxed);
    }

    /// The access word new keys start with now ([`Store::set_access_stamp`]; 0 initially).
    pub fn access_stamp(&self) -> u32 {
        self.shared.access_stamp.load(Ordering::Relaxed)
    }

    /// Bytes of the live records: every record that is its key's newest and not a tombstone,
    /// counted at the size the log allocated for it. Drops as soon as a key is deleted, unlike
    /// [`Store::log_memory_in_use_bytes`], which drops only when compaction frees pages. Exact
    /// while no write is in flight; cheap (a sum over the open sessions' counters).
    pub fn live_record_bytes(&self) -> u64 {
        self.shared.live_record_bytes()
    }

    /// Walks the whole index and returns what [`Store::live_record_bytes`] should be: the check
    /// behind tests, and the count recovery and rollback start from. Excludes compaction for the
    /// walk (seconds at tens of millions of keys): not for a request path.
    pub fn recount_live_record_bytes(&self) -> u64 {
        let _maintenance = self.shared.lock_maintenance();
        crate::accounting::recount(&self.shared, self.shared.rollback.invalid())
    }

    /// Bytes of the hash index in use: the main buckets and the overflow buckets taken from the
    /// pool (64 bytes each).
    pub fn index_bytes(&self) -> u64 {
        self.shared.index.bytes_in_use()
    }

    /// The bytes a record written now for a key of `key_bytes` and a value of `value_bytes`
    /// occupies in the log (header, key and value capacity): what one such live key adds to
    /// [`Store::live_record_bytes`]. Records carry the stable-copy word while cpr-copy is the
    /// default or newest strategy, so the answer depends on the store's state.
    pub fn record_bytes(&self, key_bytes: usize, value_bytes: usize) -> usize {
        HybridLog::record_size(
            key_bytes,
            crate::log::words_for(value_bytes),
            self.shared.stable_slot_flag() != 0,
        )
    }

    /// Test-only sabotage, to show that a test's check of [`Store::live_record_bytes`] against
    /// [`Store::recount_live_record_bytes`] detects a wrong count: shifts the count by `delta`.
    /// Never use it outside tests.
    #[doc(hidden)]
    pub fn tamper_live_bytes_for_tests(&self, delta: i64) {
        self.shared.live.tamper(delta);
    }
}

/// Refuses a commit cookie above
/// [`checkpoint_files::MAX_COOKIE_BYTES`](crate::checkpoint_files::MAX_COOKIE_BYTES).
fn check_cookie(cookie: &[u8]) -> Result<(), EngineError> {
    let limit = crate::checkpoint_files::MAX_COOKIE_BYTES;
    if cookie.len() > limit {
        return Err(EngineError::InvalidArgument(format!(
            "a commit cookie holds at most {limit} bytes, got {}",
            cookie.len()
        )));
    }
    Ok(())
}

fn shared_dir(shared: &Shared) -> PathBuf {
    shared.config.dir.clone()
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(handle) = self.checkpoint_thread.lock().take() {
            let _ = handle.join();
        }
        // A PURGE held by the test hook lets go at shutdown, so a failing test does not hang here.
        self.shared
            .rollback
            .hold_purge
            .store(false, Ordering::SeqCst);
        self.shared.rollback.join();
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.request_compaction();
        if let Some(handle) = self.compactor.lock().take() {
            let _ = handle.join();
        }
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
}
