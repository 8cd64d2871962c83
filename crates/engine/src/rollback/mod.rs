//! D-FASTER's non-blocking rollback (DPR, SIGMOD'21, section 5): a surviving worker returns its
//! in-memory state to an earlier checkpoint `to_version` while sessions keep operating.
//!
//! The two phases:
//! - THROW(n): the versions `(to_version, current]` become *invalid* (every chain walk skips
//!   records of those versions), the world-line counter grows by one and the store's version jumps
//!   to `n = current + 1`, all in the state word, which sessions adopt on their next refresh. A
//!   session that adopts a new world-line returns `EngineError::RolledBack` once, with its serial
//!   reset to its CPR point in `to_version`. `Store::rollback` returns once every protected
//!   session has adopted it (an epoch trigger action, like every CPR phase).
//! - PURGE(n): a background thread neutralises (flags `FLAG_INVALID`) every record of an invalid
//!   version and unlinks them from the chains; then the invalid range is forgotten and the store
//!   is in REST(n).
//!
//! Invariants that make the in-memory state after THROW equal checkpoint `to_version`:
//! 1. `rollback_ready`: a write running as version `s` changes a record in place only if the
//!    record's version is `s` (`Session::must_copy`), so a record of version `r` holds, once the
//!    store passed `r`, the key's value as of the end of `r`, and the newest record of version
//!    `<= v` of a key is the key's state at the end of `v`.
//! 2. Compaction drops a record only if a newer record of its key has a version `<=`
//!    max(its own version, floor) (`compaction.rs`), with floor at most the oldest rollback target:
//!    the newest record as of every target version stays in memory.
//! 3. Every operation of the old world-line runs as a version in `(to_version, current]`: the
//!    checkpoint `to_version` was published, so every session had adopted a later version before
//!    (a suspended one adopts the current version before its next operation). Its records are
//!    therefore invalid, and skipped by every walk that knows the range; the only change it can
//!    make to a *valid* record is a seal (it read-copy-updates a record of an older version), which
//!    walkers recognise as stale (`Session::recheck_locked`, `compaction::copy_if_live_rollback`).
//! 4. After THROW no operation of the old world-line can take effect: see `Store::rollback`.
//! 5. New versions start above every version ever used, so a new record is never invalid.

mod purge;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::state::{Phase, SystemState, MAX_WORLD_LINE};
use crate::store::{Shared, Store};
use crate::{EngineError, SessionId};

/// How long [`Store::rollback`] waits, at most, for each thing it waits for (a running checkpoint
/// or compaction chunk, the previous rollback's PURGE, every session adopting THROW).
pub const ROLLBACK_WAIT_LIMIT: Duration = Duration::from_secs(30);

/// A range of invalid versions `(after, through]`, packed in one word (32 bits each, as record
/// versions); 0 means none. Copied into each session when it adopts the state word, so that chain
/// walks on the hot path test a register, not shared memory: with no rollback in flight the test
/// is one compare with zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InvalidVersions(u64);

impl InvalidVersions {
    /// No invalid versions.
    pub(crate) const NONE: InvalidVersions = InvalidVersions(0);

    /// Versions `(after, through]`; `through > after`, both below 2^32.
    pub(crate) fn new(after: u64, through: u64) -> InvalidVersions {
        debug_assert!(after < through && through <= u32::MAX as u64);
        InvalidVersions((after << 32) | through)
    }

    pub(crate) fn word(self) -> u64 {
        self.0
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether records of `version` are invalid.
    #[inline(always)]
    pub(crate) fn contains(self, version: u64) -> bool {
        self.0 != 0 && version > self.0 >> 32 && version <= self.0 & 0xFFFF_FFFF
    }
}

/// What [`Store::rollback`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct RollbackReport {
    /// The world-line the store runs in now (one more than before).
    pub world_line: u64,
    /// The checkpoint version the state was rolled back to (0: empty).
    pub to_version: u64,
    /// The versions discarded, first and last (inclusive): `(to_version + 1, version before)`.
    pub discarded: (u64, u64),
    /// The version operations run as from now on, above every version used before.
    pub next_version: u64,
    /// Published checkpoints above `to_version` that were deleted (durably, newest first).
    pub deleted_checkpoints: Vec<u64>,
    /// Milliseconds from the THROW state being published until every protected session adopted
    /// it (the part of `rollback` that waits for sessions).
    pub throw_ms: f64,
}

/// What a rollback's PURGE did ([`Store::wait_for_purge`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PurgeReport {
    /// The world-line whose PURGE this was.
    pub world_line: u64,
    /// From the start of PURGE (THROW adopted by every session) to REST.
    pub duration: Duration,
    /// Records of the discarded versions that were flagged invalid.
    pub records_invalidated: u64,
    /// Index entries re-pointed past invalid records, plus records re-linked past them.
    pub links_repaired: u64,
}

/// The store's rollback bookkeeping.
pub(crate) struct RollbackState {
    /// The invalid range of the rollback in flight ([`InvalidVersions`] word), 0 outside one.
    invalid: AtomicU64,
    /// [`Store::set_rollback_floor`].
    floor: AtomicU64,
    /// Versions a rollback may return to: published by this process (or recovered) and still on
    /// disk, with each session's CPR point in them.
    targets: Mutex<BTreeMap<u64, BTreeMap<SessionId, u64>>>,
    /// One rollback at a time.
    one_at_a_time: Mutex<()>,
    /// Test-only sabotage ([`Store::tamper_rollback_for_tests`]): skip the invalidation.
    tamper_skip_invalidation: AtomicBool,
    purge: Mutex<PurgeControl>,
    purge_changed: Condvar,
}

#[derive(Default)]
struct PurgeControl {
    running: bool,
    last: Option<PurgeReport>,
    thread: Option<JoinHandle<()>>,
}

impl RollbackState {
    pub(crate) fn new() -> RollbackState {
        RollbackState {
            invalid: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            targets: Mutex::new(BTreeMap::new()),
            one_at_a_time: Mutex::new(()),
            tamper_skip_invalidation: AtomicBool::new(false),
            purge: Mutex::new(PurgeControl::default()),
            purge_changed: Condvar::new(),
        }
    }

    /// The invalid range of the rollback in flight (for threads that are not sessions).
    pub(crate) fn invalid(&self) -> InvalidVersions {
        InvalidVersions(self.invalid.load(Ordering::SeqCst))
    }

    /// A checkpoint of `version` was published (or recovered) with these CPR points.
    pub(crate) fn record_published(&self, version: u64, points: BTreeMap<SessionId, u64>) {
        self.targets.lock().insert(version, points);
    }

    /// Checkpoints that were deleted from disk are no longer rollback targets.
    pub(crate) fn forget_published(&self, versions: &[u64]) {
        let mut targets = self.targets.lock();
        for version in versions {
            targets.remove(version);
        }
    }

    /// The floor compaction works with: a record may be dropped only if a newer record of its key
    /// has a version `<=` max(its own version, this). Every version a rollback may still return to
    /// is at least this: the caller's floor raises it; otherwise it is the oldest checkpoint still
    /// on disk (older ones can never be rollback targets), or, with none, the current version
    /// (every later checkpoint is of a version at least that).
    pub(crate) fn compaction_floor(&self, current_version: u64) -> u64 {
        let oldest_target = self.targets.lock().keys().next().copied();
        let possible = oldest_target.map_or(current_version, |oldest| oldest.min(current_version));
        possible.max(self.floor.load(Ordering::SeqCst))
    }

    /// Joins the last PURGE thread (store shutdown).
    pub(crate) fn join(&self) {
        let thread = self.purge.lock().thread.take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Store {
    /// Rolls the in-memory state back to checkpoint `to_version` without stopping (D-FASTER's
    /// THROW/PURGE): from the moment this returns, every operation behaves as if the store held
    /// exactly checkpoint `to_version`'s state plus what was written after this call took effect.
    ///
    /// `to_version` is 0 (empty) or a checkpoint this store published (or recovered) and still
    /// holds on disk, not below [`Store::rollback_floor`]. Requires
    /// [`StoreConfig::rollback_ready`](crate::StoreConfig::rollback_ready).
    ///
    /// What happens:
    /// - A running checkpoint is waited for (at most [`ROLLBACK_WAIT_LIMIT`]); until this
    ///   rollback's PURGE ends, `checkpoint` returns `CheckpointInProgress` (one state machine at a
    ///   time).
    /// - Every published checkpoint above `to_version` is deleted durably, newest first, before
    ///   anything changes in memory: a restart from here on recovers `to_version` or older.
    /// - THROW: the versions `(to_version, current]` become invalid, the world-line grows by one,
    ///   the version jumps to `current + 1`. Each session's next operation (or its operation in
    ///   progress that had not taken effect) returns [`EngineError::RolledBack`] once, with its
    ///   serial reset to its CPR point in `to_version`. Suspended sessions do not hold it up.
    /// - PURGE runs on a background thread ([`Store::wait_for_purge`]).
    ///
    /// Errors: `InvalidArgument` (not rollback-ready, unknown version, below the floor),
    /// `Io` (deleting a checkpoint failed: nothing changed in memory), `Timeout` (a wait ran out:
    /// before THROW nothing changed; if THROW itself ran out — a session held epoch protection
    /// without operating for [`ROLLBACK_WAIT_LIMIT`] — the rollback has taken effect and
    /// completes in the background once that session refreshes).
    ///
    /// Do not call it from a thread whose own session holds epoch protection (suspend it first):
    /// THROW waits for every protected session to refresh.
    ///
    /// Why no operation of the old world-line takes effect after this returns: the THROW state is
    /// stored, then the epoch is bumped with an action that runs only once every protected session
    /// called `protect` after the bump; each such call is followed, before the session does
    /// anything else, by `adopt`, which loads the state word and sees the new world-line (it was
    /// stored before the bump). An operation in progress at the bump holds the old epoch, so the
    /// action waits until it finished (its effect has an invalid version: invisible) or refreshed
    /// mid-operation (retry paths refresh): then it returns `RolledBack` without taking effect.
    /// Suspended sessions are between operations (or parked mid-operation in a memory or pause
    /// wait, which refreshes before retrying), so they adopt the new world-line first too. An
    /// operation of the old world-line still in flight may read a mix of old and restored state;
    /// its serial is above its session's surviving serial, so its result is discarded too.
    pub fn rollback(&self, to_version: u64) -> Result<RollbackReport, EngineError> {
        let shared = &self.shared;
        if !shared.config.rollback_ready {
            return Err(EngineError::InvalidArgument(
                "rollback needs StoreConfig::rollback_ready = true (set when the store is opened): \
                 without it the in-memory log does not keep the versions a rollback returns to"
                    .into(),
            ));
        }
        // Arguments first (again under the state machine below): a refusal never waits.
        self.check_target(to_version)?;
        let deadline = Instant::now() + ROLLBACK_WAIT_LIMIT;
        let _one = shared
            .rollback
            .one_at_a_time
            .try_lock_until(deadline)
            .ok_or(EngineError::Timeout)?;
        self.wait_for_purge(deadline.saturating_duration_since(Instant::now()))?;
        shared.acquire_state_machine(deadline)?;
        match self.throw(to_version, deadline) {
            Ok(report) => Ok(report),
            Err((error, released)) => {
                if !released {
                    shared.release_state_machine();
                }
                Err(error)
            }
        }
    }

    /// Refuses a version below the floor, or one that is not a rollback target (0 always is).
    /// Returns the sessions' CPR points in it.
    fn check_target(&self, to_version: u64) -> Result<BTreeMap<SessionId, u64>, EngineError> {
        let floor = self.rollback_floor();
        if to_version < floor {
            return Err(EngineError::InvalidArgument(format!(
                "cannot roll back to v{to_version}: it is below the rollback floor v{floor} \
                 (Store::set_rollback_floor), so compaction may have dropped what it needs"
            )));
        }
        if to_version == 0 {
            return Ok(BTreeMap::new());
        }
        let targets = self.shared.rollback.targets.lock();
        match targets.get(&to_version) {
            Some(points) if to_version < self.shared.state.load().version => Ok(points.clone()),
            _ => {
                let known: Vec<u64> = targets.keys().copied().collect();
                Err(EngineError::InvalidArgument(format!(
                    "cannot roll back to v{to_version}: it is not a checkpoint this store \
                     published or recovered and still holds on disk (those are {known:?}; 0 \
                     means empty)"
                )))
            }
        }
    }

    /// Validates, deletes newer checkpoints, publishes THROW and waits for it. On error, says
    /// whether the state machine was handed to the PURGE thread (which then releases it).
    fn throw(
        &self,
        to_version: u64,
        deadline: Instant,
    ) -> Result<RollbackReport, (EngineError, bool)> {
        let shared = &self.shared;
        let state = shared.state.load();
        debug_assert_eq!(state.phase, Phase::Rest, "no state machine runs");
        let current = state.version;
        // Again, now that no checkpoint can publish or prune meanwhile.
        let points = self
            .check_target(to_version)
            .map_err(|error| (error, false))?;
        let next_version = current + 1;
        if next_version >= u32::MAX as u64 || state.world_line >= MAX_WORLD_LINE {
            return Err((
                EngineError::InvalidArgument(
                    "this store has used every version or world-line the headers can hold".into(),
                ),
                false,
            ));
        }
        let deleted = self
            .delete_newer_checkpoints(to_version)
            .map_err(|e| (e, false))?;
        // THROW. The invalid range first: a session that sees the new world-line sees it too.
        let invalid = if shared
            .rollback
            .tamper_skip_invalidation
            .load(Ordering::SeqCst)
        {
            InvalidVersions::NONE
        } else {
            InvalidVersions::new(to_version, current)
        };
        shared
            .rollback
            .invalid
            .store(invalid.word(), Ordering::SeqCst);
        let world_line = state.world_line + 1;
        {
            // Under the registry lock: a session starts either before (its points are reset here)
            // or after (it reads the new world-line and never sees RolledBack).
            let sessions = shared.sessions.lock();
            for session in sessions.values() {
                let surviving = points.get(&session.id).copied().unwrap_or(0);
                session.roll_back(next_version, surviving, world_line);
            }
            shared.state.store(SystemState {
                phase: Phase::Throw,
                version: next_version,
                world_line,
            });
        }
        let throw_started = Instant::now();
        let adopted = Arc::new((Mutex::new(false), Condvar::new()));
        {
            let adopted = adopted.clone();
            let target = shared.clone();
            shared.epoch.bump(move || {
                target.state.store_phase(Phase::Purge, next_version);
                *adopted.0.lock() = true;
                adopted.1.notify_all();
            });
        }
        self.start_purge(adopted.clone(), invalid, world_line, next_version);
        if !wait_flag(shared, &adopted, deadline) {
            return Err((EngineError::Timeout, true));
        }
        let throw_ms = throw_started.elapsed().as_secs_f64() * 1e3;
        Ok(RollbackReport {
            world_line,
            to_version,
            discarded: (to_version + 1, current),
            next_version,
            deleted_checkpoints: deleted,
            throw_ms,
        })
    }

    /// Deletes every published checkpoint above `to_version`, newest first, durably.
    fn delete_newer_checkpoints(&self, to_version: u64) -> Result<Vec<u64>, EngineError> {
        let shared = &self.shared;
        let mut doomed: Vec<u64> = shared
            .checkpoints
            .published_versions()?
            .into_iter()
            .filter(|&version| version > to_version)
            .collect();
        doomed.sort_unstable_by(|a, b| b.cmp(a));
        for &version in &doomed {
            shared.checkpoints.remove(version)?;
            shared.rollback.forget_published(&[version]);
        }
        shared.forget_results_above(to_version);
        Ok(doomed)
    }

    /// Spawns the thread that waits for THROW to be adopted, then purges.
    fn start_purge(
        &self,
        adopted: Arc<(Mutex<bool>, Condvar)>,
        invalid: InvalidVersions,
        world_line: u64,
        next_version: u64,
    ) {
        let mut control = self.shared.rollback.purge.lock();
        if let Some(previous) = control.thread.take() {
            // It already reported; joining only reaps it.
            let _ = previous.join();
        }
        control.running = true;
        let job = PurgeJob {
            shared: self.shared.clone(),
            adopted,
            invalid,
            world_line,
            next_version,
        };
        let job = Arc::new(Mutex::new(Some(job)));
        let handed = job.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("prefixkv-purge-w{world_line}"))
            .spawn(move || {
                if let Some(job) = handed.lock().take() {
                    job.run();
                }
            });
        match spawned {
            Ok(handle) => control.thread = Some(handle),
            Err(error) => {
                // No thread: purge here (correct, only not in the background).
                tracing::warn!("could not spawn the purge thread ({error}); purging inline");
                drop(control);
                if let Some(job) = job.lock().take() {
                    job.run();
                }
            }
        }
    }

    /// Waits until no PURGE runs (at most `timeout`) and returns the last one's report (`None`
    /// if this store never rolled back).
    pub fn wait_for_purge(&self, timeout: Duration) -> Result<Option<PurgeReport>, EngineError> {
        let deadline = Instant::now() + timeout;
        let rollback = &self.shared.rollback;
        let mut control = rollback.purge.lock();
        while control.running {
            if rollback
                .purge_changed
                .wait_until(&mut control, deadline)
                .timed_out()
                && control.running
            {
                return Err(EngineError::Timeout);
            }
        }
        Ok(control.last.clone())
    }

    /// Rollbacks so far in this process (starts at 0, one more per [`Store::rollback`]). In
    /// memory only: a restarted store starts again at 0.
    pub fn world_line(&self) -> u64 {
        self.shared.state.load().world_line
    }

    /// Promises never to roll back below `version`: with
    /// [`StoreConfig::rollback_ready`](crate::StoreConfig::rollback_ready), compaction may then
    /// drop a record once a newer record of its key has a version `<= version`, and
    /// [`Store::rollback`] refuses versions below it. The floor only rises (a lower value is
    /// ignored). The DPR worker raises it to the cluster's committed cut every interval.
    ///
    /// Memory stays bounded without it: the floor compaction uses is at least the oldest
    /// checkpoint still on disk (`keep_checkpoints`), since only those are rollback targets; and
    /// the log never exceeds `log_memory_bytes` — at the limit writes wait for compaction and then
    /// fail with `OutOfMemory`, as without rollback.
    pub fn set_rollback_floor(&self, version: u64) {
        self.shared
            .rollback
            .floor
            .fetch_max(version, Ordering::SeqCst);
        self.shared.request_compaction();
    }

    /// Test-only sabotage, to show that a test's oracle detects a broken rollback: with
    /// `skip_invalidation`, later rollbacks do everything except invalidating the discarded
    /// versions (their records stay visible). Never use it outside tests.
    #[doc(hidden)]
    pub fn tamper_rollback_for_tests(&self, skip_invalidation: bool) {
        self.shared
            .rollback
            .tamper_skip_invalidation
            .store(skip_invalidation, Ordering::SeqCst);
    }

    /// The floor set by [`Store::set_rollback_floor`] (0 by default).
    pub fn rollback_floor(&self) -> u64 {
        self.shared.rollback.floor.load(Ordering::SeqCst)
    }
}

/// The PURGE thread's work: wait until THROW is adopted, purge, forget the range, REST.
struct PurgeJob {
    shared: Arc<Shared>,
    adopted: Arc<(Mutex<bool>, Condvar)>,
    invalid: InvalidVersions,
    world_line: u64,
    next_version: u64,
}

impl PurgeJob {
    fn run(self) {
        let shared = &self.shared;
        // Unbounded: THROW completes once the last protected session refreshes.
        while !wait_flag(shared, &self.adopted, Instant::now() + ROLLBACK_WAIT_LIMIT) {}
        let started = Instant::now();
        let (records_invalidated, links_repaired) = purge::run(shared, self.invalid);
        let report = PurgeReport {
            world_line: self.world_line,
            duration: started.elapsed(),
            records_invalidated,
            links_repaired,
        };
        shared.state.store_phase(Phase::Rest, self.next_version);
        shared.release_state_machine();
        let mut control = shared.rollback.purge.lock();
        control.running = false;
        control.last = Some(report);
        shared.rollback.purge_changed.notify_all();
    }
}

/// Waits (draining the epoch, so an idle store progresses) until `flag` is set, or `deadline`.
fn wait_flag(shared: &Shared, flag: &(Mutex<bool>, Condvar), deadline: Instant) -> bool {
    let mut done = flag.0.lock();
    while !*done {
        if Instant::now() >= deadline {
            return false;
        }
        drop(done);
        shared.epoch.drain();
        done = flag.0.lock();
        if !*done {
            flag.1.wait_for(&mut done, Duration::from_millis(1));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{InvalidVersions, RollbackState};
    use std::collections::BTreeMap;

    #[test]
    fn invalid_versions_hold_exactly_their_half_open_range() {
        let invalid = InvalidVersions::new(3, 7);
        let holds: Vec<u64> = (0..10).filter(|&v| invalid.contains(v)).collect();
        assert_eq!(holds, vec![4, 5, 6, 7]);
        assert!((0..10).all(|v| !InvalidVersions::NONE.contains(v)));
        let from_zero = InvalidVersions::new(0, u32::MAX as u64);
        assert!(from_zero.contains(1) && from_zero.contains(u32::MAX as u64));
        assert!(!from_zero.contains(0));
    }

    #[test]
    fn the_compaction_floor_is_the_oldest_target_or_the_callers_floor() {
        let state = RollbackState::new();
        // No checkpoint: every later target is at least the current version.
        assert_eq!(state.compaction_floor(9), 9);
        state.record_published(4, BTreeMap::new());
        state.record_published(6, BTreeMap::new());
        assert_eq!(state.compaction_floor(9), 4);
        state.forget_published(&[4]);
        assert_eq!(state.compaction_floor(9), 6);
        state.floor.store(8, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(state.compaction_floor(9), 8);
    }
}
