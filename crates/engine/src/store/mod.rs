//! The store: opening with recovery, sessions, checkpoint requests, and the background threads
//! (compaction, the checkpoint thread) it owns. The state they all share is in `shared`.
//!
//! Durability statement: an acknowledged operation is visible to every later operation, and it is
//! durable once its session's commit point (`Session::committed_serial`, or the CPR point in the
//! `CheckpointReport` of a published checkpoint) covers its serial number; a crash loses exactly the
//! operations after each session's commit point in the newest checkpoint that verifies.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::checkpoint_files::CheckpointDirectory;
use crate::cpr_points::SessionShared;
use crate::log::HybridLog;
use crate::report::{CheckpointReport, CheckpointToken};
use crate::session::Session;
use crate::shared::{CheckpointFailure, Shared};
use crate::{EngineError, SessionId, StoreConfig, Strategy};

mod recovery;
mod sealed;

/// What `Store::open` recovered.
#[derive(Clone, Debug)]
pub struct RecoveryInfo {
    /// Recovered checkpoint version.
    pub version: u64,
    /// Commit point per session.
    pub session_commit_points: BTreeMap<SessionId, u64>,
    /// Entries loaded (an incremental checkpoint: its index entries plus the records replayed and
    /// copied from the page file).
    pub records: u64,
    /// Why a newer checkpoint was skipped, if one was.
    pub fell_back: Option<String>,
    /// The commit cookie the recovered checkpoint was requested with (empty if none).
    pub cookie: Vec<u8>,
}

/// What `Store::open_observed` calls with each recovered key and value.
pub(crate) type Observer<'a> = dyn Fn(&[u8], &[u8]) + Sync + 'a;

/// What `Store::open_observed_unless` asks with the recovered checkpoint's cookie.
pub(crate) type CookieSuffices<'a> = dyn Fn(&[u8]) -> bool + 'a;

/// The store. Share it as `Arc<Store>`.
pub struct Store {
    pub(crate) shared: Arc<Shared>,
    recovery: Option<RecoveryInfo>,
    compactor: Mutex<Option<JoinHandle<()>>>,
    checkpoint_thread: Mutex<Option<JoinHandle<()>>>,
}

impl Store {
    /// Opens the store in `config.dir`, recovering the newest checkpoint that verifies.
    pub fn open(config: StoreConfig) -> Result<Arc<Store>, EngineError> {
        Self::open_with(config, None, None)
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
        Self::open_with(config, Some(observe), None)
    }

    /// [`Store::open_observed`] for an application that can also derive what it observes from
    /// the commit cookie it gave the checkpoint (counts it took when it requested it, say).
    /// Where observing costs a read of the dataset of its own — an incremental checkpoint, whose
    /// records are in the page file and not loaded — recovery first calls
    /// `cookie_suffices(cookie)`: `true` means the application took what it needed from the
    /// cookie, and `observe` is then never called (the restart reads only the index and the
    /// replay range); `false` observes by a scan, as `open_observed` does. Other checkpoints
    /// are observed as they load, and `cookie_suffices` is not called.
    pub fn open_observed_unless(
        config: StoreConfig,
        cookie_suffices: &dyn Fn(&[u8]) -> bool,
        observe: &(dyn Fn(&[u8], &[u8]) + Sync),
    ) -> Result<Arc<Store>, EngineError> {
        Self::open_with(config, Some(observe), Some(cookie_suffices))
    }

    /// `open`, `open_observed` and `open_observed_unless`: without an observer, a tiered store
    /// recovered from an incremental checkpoint reads no record it does not need.
    fn open_with(
        config: StoreConfig,
        observe: Option<&Observer<'_>>,
        cookie_suffices: Option<&CookieSuffices<'_>>,
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
        let tier = if config.storage_tier {
            Some(crate::tier::open(&config)?)
        } else {
            None
        };
        let shared = Arc::new(Shared::new(config, checkpoints, tier));
        let recovery = Self::recover(&shared, observe, cookie_suffices)?;
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
    /// If [`MAX_OPEN_SESSIONS`](crate::MAX_OPEN_SESSIONS) sessions are already open; use [`Store::try_start_session`] where
    /// the number of sessions is not under the caller's control (one per client connection).
    pub fn start_session(self: &Arc<Self>) -> Session {
        self.try_start_session()
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// Starts a new session with a fresh id, or fails with [`EngineError::TooManySessions`] when
    /// [`MAX_OPEN_SESSIONS`](crate::MAX_OPEN_SESSIONS) are already open.
    pub fn try_start_session(self: &Arc<Self>) -> Result<Session, EngineError> {
        let slot = self.acquire_session_slot()?;
        let id = self.shared.sessions.take_id();
        // Under the registry lock: a rollback resets the registered sessions and publishes its
        // world-line under the same lock, so this session is either reset or starts in the new
        // world-line.
        let mut sessions = self.shared.sessions.lock();
        let state = self.shared.state.load();
        let shared = Arc::new(SessionShared::new(id, state.version, 0, state.world_line));
        sessions.insert(id.0, shared.clone());
        drop(sessions);
        Ok(Session::new(
            self.shared.clone(),
            self.clone(),
            shared,
            0,
            slot,
            state.world_line,
        ))
    }

    /// Reserves an epoch slot for a session (released by the session's `Drop`).
    fn acquire_session_slot(&self) -> Result<usize, EngineError> {
        self.shared.sessions.acquire_slot(&self.shared.epoch)
    }

    /// Gives back what [`Store::acquire_session_slot`] took.
    fn release_session_slot(&self, slot: usize) {
        self.shared.release_session_slot(slot);
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
                Session::new(
                    self.shared.clone(),
                    self.clone(),
                    shared,
                    serial,
                    slot,
                    world_line,
                ),
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
        let seal_guard = self.shared.machine.seal_lock();
        if !self.shared.machine.try_claim() {
            return Err(EngineError::CheckpointInProgress);
        }
        self.shared.machine.set_classic_running(true);
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
                // A panic (a read of an evicted record that the disk refused: `log::cold`) is
                // reported as the checkpoint's failure, so that its waiters do not wait out their
                // timeouts for a result that never comes.
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    job(&shared, Instant::now())
                }));
                let result = match ran {
                    Ok(result) => result.map_err(|error| match error {
                        EngineError::CheckpointAborted { .. } => CheckpointFailure::Discarded,
                        other => CheckpointFailure::Failed(other.to_string()),
                    }),
                    Err(panic) => Err(CheckpointFailure::Failed(format!(
                        "the checkpoint thread panicked: {}",
                        panic
                            .downcast_ref::<String>()
                            .map(String::as_str)
                            .or_else(|| panic.downcast_ref::<&str>().copied())
                            .unwrap_or("(no message)")
                    ))),
                };
                shared.machine.finish(version, result);
            });
        match spawned {
            Ok(handle) => {
                *slot = Some(handle);
                Ok(CheckpointToken { version })
            }
            Err(error) => {
                self.shared.machine.set_classic_running(false);
                self.shared.machine.release();
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
        let result = self
            .shared
            .machine
            .wait_result(token.version, deadline)
            .ok_or(EngineError::Timeout)?;
        result.map_err(|failure| match failure {
            CheckpointFailure::Failed(detail) => EngineError::CheckpointFailed {
                version: token.version,
                detail,
            },
            CheckpointFailure::Discarded => EngineError::CheckpointAborted {
                version: token.version,
            },
        })
    }

    /// The largest value, in bytes, that fits one record with a key of `key_bytes` bytes (a
    /// record must fit a log page and the record limit, a little under 4 MiB, with the largest
    /// header the key can get), or `None` when the key alone is too large.
    pub fn max_value_bytes(&self, key_bytes: usize) -> Option<usize> {
        self.shared.max_value_bytes(key_bytes)
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

    /// Bytes of the storage tier's page file (its data segments, dead records included): what
    /// the log keeps on disk beyond [`log_memory_in_use_bytes`](Self::log_memory_in_use_bytes).
    /// 0 without a tier. Lists the page file's directory (one `stat` per segment).
    pub fn page_file_bytes(&self) -> Result<u64, EngineError> {
        if !self.shared.log.is_tiered() {
            return Ok(0);
        }
        let dir = self.shared.log.page_file().dir();
        prefixkv_storage::pagefile::data_bytes(&*self.shared.config.disk, dir)
            .map_err(|error| EngineError::io("list the storage tier's page file in", dir, error))
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
        let _maintenance = self.shared.compaction.lock_maintenance();
        self.shared
            .recount_live_bytes(self.shared.rollback.invalid())
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
        self.shared.rollback.set_hold_purge(false);
        self.shared.rollback.join();
        self.shared.compaction.shut_down();
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
