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
//!   is in REST(n). Its passes start at the log tail of the moment the store first let a session
//!   run a version above `to_version` (`RollbackState::note_allowed` says why no discarded record
//!   lies below), so a rollback to a recent checkpoint reads only the recent log.
//!
//! Nested rollbacks (a second failure while the first one's PURGE runs): the second rollback
//! does not wait for that PURGE. Once the first THROW was adopted, it takes over the state
//! machine that PURGE holds and stops it (a generation counter the PURGE checks per page and
//! chunk, and under its lock before changing anything shared); its own range contains the first
//! one's, because the first rollback deleted every checkpoint above its target and none is
//! published while PURGE holds the state machine, so the second target is at most the first:
//! `(to2, current2]` ⊇ `(to1, current1]`. So there is always one invalid range (sessions test one
//! register; with no rollback in flight, one compare with zero), and the last PURGE covers all.
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
use std::path::PathBuf;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::report::PurgeReport;
use crate::shared::Shared;
use crate::state::{InvalidVersions, Phase, SystemState, MAX_WORLD_LINE};
use crate::store::Store;
use crate::{EngineError, SessionId};

/// How long [`Store::rollback`] waits, at most, for each thing it waits for (a running checkpoint,
/// the previous rollback's THROW being adopted, every session adopting this THROW).
pub const ROLLBACK_WAIT_LIMIT: Duration = Duration::from_secs(30);

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
    /// Milliseconds spent before THROW waiting for the state machine (a running checkpoint, the
    /// previous rollback's THROW being adopted).
    pub wait_ms: f64,
    /// Milliseconds spent unpublishing the checkpoints above the target (durably: renamed aside,
    /// one directory sync) before THROW; their files are removed in the background after PURGE.
    pub delete_ms: f64,
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
    /// - A running checkpoint is stopped, not waited for: its version is above every published
    ///   one, hence above `to_version`, and would be deleted anyway. It stops at its next check
    ///   (every 4,096 records of a log scan, and before it publishes) and its token reports
    ///   `CheckpointAborted`; one already publishing finishes and is deleted below. Until this
    ///   rollback's PURGE ends, `checkpoint` returns `CheckpointInProgress` (one state machine at a
    ///   time). A previous rollback's PURGE still running is not waited for: this rollback takes
    ///   it over (its own PURGE covers both ranges) once that rollback's THROW was adopted.
    /// - Every published checkpoint above `to_version` is unpublished durably before anything
    ///   changes in memory (renamed `.deleting`, one directory sync for all of them): a restart
    ///   from here on recovers `to_version` or older. Their files are removed by the PURGE thread
    ///   once PURGE is done (a fold-over checkpoint holds the whole log: removing ten of them took
    ///   over 100 ms, which batches would otherwise wait for).
    /// - THROW: the versions `(to_version, current]` become invalid, the world-line grows by one,
    ///   the version jumps to `current + 1`. Each session's next operation (or its operation in
    ///   progress that had not taken effect) returns [`EngineError::RolledBack`] once, with its
    ///   serial reset to its CPR point in `to_version`. Suspended sessions do not hold it up.
    /// - PURGE runs on a background thread ([`Store::wait_for_purge`]).
    ///
    /// Errors: `InvalidArgument` (not rollback-ready, unknown version, below the floor),
    /// `Io` (deleting a checkpoint failed: nothing changed in memory; a PURGE that was taken over
    /// starts again), `Timeout` (a wait ran out:
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
        let started = Instant::now();
        let deadline = started + ROLLBACK_WAIT_LIMIT;
        let _one = shared
            .rollback
            .one_at_a_time(deadline)
            .ok_or(EngineError::Timeout)?;
        // The state machine: taken over from a PURGE still running (which stops: this rollback's
        // PURGE covers its range too), or acquired (a running checkpoint is waited for).
        let inherited = self.take_over_purge(deadline)?;
        if !inherited {
            // A checkpoint still being written is of a version above every published one, hence
            // above the target: this rollback deletes it anyway, so it is stopped, not waited for.
            shared.machine.set_abort(true);
            let acquired = shared.acquire_state_machine(deadline);
            shared.machine.set_abort(false);
            acquired?;
        }
        let wait_ms = started.elapsed().as_secs_f64() * 1e3;
        // No seal may switch versions under THROW (see `store::sealed`); one in progress is
        // short (it waits only for sessions to refresh) and is waited for.
        let Some(seal_guard) = shared.machine.try_seal_lock_until(deadline) else {
            if inherited {
                self.restart_purge();
            } else {
                shared.release_state_machine();
            }
            return Err(EngineError::Timeout);
        };
        let thrown = self.throw(to_version, deadline);
        drop(seal_guard);
        match thrown {
            Ok(report) => Ok(RollbackReport { wait_ms, ..report }),
            Err((error, released)) => {
                if !released {
                    if inherited {
                        // Nothing changed in memory, but the PURGE in flight was stopped: start
                        // it again (it gives the state machine back when it ends).
                        self.restart_purge();
                    } else {
                        shared.release_state_machine();
                    }
                }
                Err(error)
            }
        }
    }

    /// If a rollback's PURGE is in flight, stops it and takes over the state machine it holds
    /// (`Ok(true)`); first waits until its THROW was adopted by every session (until `deadline`;
    /// then nothing changed). `Ok(false)`: no rollback in flight. Caller holds `one_at_a_time`,
    /// so no other rollback starts meanwhile.
    fn take_over_purge(&self, deadline: Instant) -> Result<bool, EngineError> {
        let rollback = &self.shared.rollback;
        let adopted = {
            let control = rollback.purge_control();
            if !control.running {
                return Ok(false);
            }
            control.adopted.clone()
        };
        // Before THROW(n) is adopted its epoch action (which stores PURGE(n)) has not run: a new
        // THROW must not be overwritten by it.
        if let Some(adopted) = adopted {
            if !wait_flag(&self.shared, &adopted, deadline) {
                return Err(EngineError::Timeout);
            }
        }
        let control = rollback.purge_control();
        if !control.running {
            // It ended meanwhile and gave the state machine back.
            return Ok(false);
        }
        // Under the lock its job checks the generation before it changes anything shared (the
        // invalid range, the state word, the state machine): from here it changes nothing.
        rollback.next_purge_generation();
        Ok(true)
    }

    /// Starts a PURGE again for the range in flight, after a rollback that stopped it failed
    /// before its THROW.
    fn restart_purge(&self) {
        let shared = &self.shared;
        let state = shared.state.load();
        let invalid = shared.rollback.invalid();
        let bound = shared.rollback.purge_bound(invalid.bounds().0).unwrap_or(0);
        let adopted = Arc::new((Mutex::new(true), Condvar::new()));
        self.start_purge(
            adopted,
            invalid,
            bound,
            (state.world_line, state.version),
            Vec::new(),
        );
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
        let targets = self.shared.rollback.targets();
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
        debug_assert!(
            matches!(state.phase, Phase::Rest | Phase::Purge),
            "no other state machine runs: {state:?}"
        );
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
        let delete_started = Instant::now();
        let (deleted, retired) = self
            .retire_newer_checkpoints(to_version)
            .map_err(|e| (e, false))?;
        let delete_ms = delete_started.elapsed().as_secs_f64() * 1e3;
        // The range this rollback invalidates. If an earlier rollback's PURGE was taken over, its
        // range `(after, through]` is still invalid and must stay so: every target left is at
        // most `after` (the targets above it were deleted by that rollback, and no checkpoint
        // publishes while its PURGE holds the state machine), and `current` is above `through`,
        // so the union is the one range `(to_version, current]`.
        let in_flight = shared.rollback.invalid();
        let invalid = if shared.rollback.tamper_skip_invalidation() {
            InvalidVersions::NONE
        } else if in_flight.is_empty() {
            InvalidVersions::new(to_version, current)
        } else {
            let (after, through) = in_flight.bounds();
            debug_assert!(to_version <= after && through <= current, "{in_flight:?}");
            InvalidVersions::new(to_version.min(after), current)
        };
        // Where PURGE's log pass starts (see `RollbackState::note_allowed`): no record of a version
        // in the range lies below the tail of the moment the store first allowed its first
        // version. Unknown (before this process opened the store): from the begin address.
        let bound = if shared.rollback.tamper_purge_bound() {
            shared.log.tail_address()
        } else {
            shared.rollback.purge_bound(invalid.bounds().0).unwrap_or(0)
        };
        // Sealed, unwritten versions are all above the target (it is published): discarded.
        shared.machine.forget_all_sealed();
        // THROW. The invalid range first: a session that sees the new world-line sees it too.
        shared.rollback.set_invalid(invalid);
        let world_line = state.world_line + 1;
        {
            // Under the registry lock: a session starts either before (its points are reset here)
            // or after (it reads the new world-line and never sees RolledBack).
            let sessions = shared.sessions.lock();
            for session in sessions.values() {
                let surviving = points.get(&session.id).copied().unwrap_or(0);
                session.roll_back(next_version, surviving, world_line);
            }
            shared.publish_state(SystemState {
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
                target.publish_phase(Phase::Purge, next_version);
                *adopted.0.lock() = true;
                adopted.1.notify_all();
            });
        }
        self.start_purge(
            adopted.clone(),
            invalid,
            bound,
            (world_line, next_version),
            retired,
        );
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
            wait_ms: 0.0,
            delete_ms,
        })
    }

    /// Unpublishes every checkpoint above `to_version`, durably; returns their versions (newest
    /// first) and the directories left to remove.
    fn retire_newer_checkpoints(
        &self,
        to_version: u64,
    ) -> Result<(Vec<u64>, Vec<PathBuf>), EngineError> {
        let shared = &self.shared;
        let mut doomed: Vec<u64> = shared
            .checkpoints
            .published_versions()?
            .into_iter()
            .filter(|&version| version > to_version)
            .collect();
        doomed.sort_unstable_by(|a, b| b.cmp(a));
        // Renamed aside and the directory synced once: durable for every one of them at once. The
        // files (a fold-over checkpoint holds the whole log) go after PURGE, in the background.
        let retired = shared.checkpoints.retire(&doomed)?;
        shared.rollback.forget_published(&doomed);
        shared.machine.forget_results_above(to_version);
        Ok((doomed, retired))
    }

    /// Spawns the thread that waits for THROW to be adopted, then purges. Any PURGE still
    /// running stops (its generation is no longer the latest); this one covers its range.
    fn start_purge(
        &self,
        adopted: Arc<(Mutex<bool>, Condvar)>,
        invalid: InvalidVersions,
        bound: u64,
        (world_line, next_version): (u64, u64),
        retired: Vec<PathBuf>,
    ) {
        let rollback = &self.shared.rollback;
        let mut control = rollback.purge_control();
        // Reap the threads that ended (they already reported, or were superseded); a superseded
        // one still stopping is joined later (here or at shutdown), never waited for here.
        let (ended, live): (Vec<_>, Vec<_>) = std::mem::take(&mut control.threads)
            .into_iter()
            .partition(|thread| thread.is_finished());
        control.threads = live;
        for thread in ended {
            let _ = thread.join();
        }
        let generation = rollback.next_purge_generation();
        control.running = true;
        control.adopted = Some(adopted.clone());
        let job = PurgeJob {
            shared: self.shared.clone(),
            adopted,
            invalid,
            bound,
            generation,
            world_line,
            next_version,
            retired,
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
            Ok(handle) => control.threads.push(handle),
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
    /// if this store never rolled back). A PURGE taken over by a later rollback does not report:
    /// the later one's covers its range (`PurgeReport::versions`).
    pub fn wait_for_purge(&self, timeout: Duration) -> Result<Option<PurgeReport>, EngineError> {
        let deadline = Instant::now() + timeout;
        let rollback = &self.shared.rollback;
        let mut control = rollback.purge_control();
        while control.running {
            if rollback
                .wait_purge_changed(&mut control, deadline)
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
        self.shared.rollback.raise_floor(version);
        self.shared.request_compaction();
    }

    /// Test-only sabotage, to show that a test's oracle detects a broken rollback: with
    /// `skip_invalidation`, later rollbacks do everything except invalidating the discarded
    /// versions (their records stay visible). Never use it outside tests.
    #[doc(hidden)]
    pub fn tamper_rollback_for_tests(&self, skip_invalidation: bool) {
        self.shared
            .rollback
            .set_tamper_skip_invalidation(skip_invalidation);
    }

    /// Test-only sabotage, to show that a test's oracle detects a PURGE that scans too little of
    /// the log: with `from_throw_tail`, later PURGEs start their log pass at the tail of their
    /// THROW instead of the sound bound, so the discarded records written before stay unflagged
    /// and become visible once the range is forgotten. Never use it outside tests.
    #[doc(hidden)]
    pub fn tamper_purge_bound_for_tests(&self, from_throw_tail: bool) {
        self.shared.rollback.set_tamper_purge_bound(from_throw_tail);
    }

    /// Test-only: with `hold`, a PURGE waits after its log pass (flagged, not yet unlinked, the
    /// range still in force) until released or taken over by a later rollback, so that a test can
    /// start a rollback while a PURGE is certainly running. Never use it outside tests.
    #[doc(hidden)]
    pub fn hold_purge_for_tests(&self, hold: bool) {
        self.shared.rollback.set_hold_purge(hold);
    }

    /// Whether a rollback's PURGE (or its THROW) is in flight.
    pub fn purge_running(&self) -> bool {
        self.shared.rollback.purge_control().running
    }

    /// The floor set by [`Store::set_rollback_floor`] (0 by default).
    pub fn rollback_floor(&self) -> u64 {
        self.shared.rollback.floor()
    }
}

/// The PURGE thread's work: wait until THROW is adopted, purge, forget the range, REST — unless
/// a later rollback took over meanwhile (`generation` is no longer the latest): then it stops
/// and changes nothing shared; the later rollback's PURGE covers its range.
struct PurgeJob {
    shared: Arc<Shared>,
    adopted: Arc<(Mutex<bool>, Condvar)>,
    invalid: InvalidVersions,
    /// Where the log pass starts, at the least (`RollbackState::purge_bound`; 0: begin).
    bound: u64,
    generation: u64,
    world_line: u64,
    next_version: u64,
    /// Checkpoint directories this rollback unpublished, removed once PURGE is done (whether it
    /// finished or was superseded): store shutdown joins this thread, so no reopen of the
    /// directory races with the removal.
    retired: Vec<PathBuf>,
}

impl PurgeJob {
    fn run(mut self) {
        let retired = std::mem::take(&mut self.retired);
        let shared = Arc::clone(&self.shared);
        self.purge();
        if let Err(error) = shared.checkpoints.remove_retired(&retired) {
            // Unpublished already: only space is at stake, and the next open removes them.
            tracing::warn!(%error, "removing rolled-back checkpoints failed");
        }
    }

    fn superseded(&self) -> bool {
        self.shared.rollback.purge_generation() != self.generation
    }

    fn purge(self) {
        let shared = &self.shared;
        let rollback = &shared.rollback;
        // Unbounded: THROW completes once the last protected session refreshes.
        while !wait_flag(shared, &self.adopted, Instant::now() + ROLLBACK_WAIT_LIMIT) {}
        let started = Instant::now();
        // Compaction and checkpoints wait; a superseded PURGE gives it up at its next check.
        let maintenance = shared.compaction.lock_maintenance();
        let check_below = !rollback.tamper_purge_bound();
        let Some(counts) = purge::run(shared, self.invalid, self.bound, check_below, &|| {
            self.superseded()
        }) else {
            return;
        };
        // The discarded versions' records no longer count: every session adopted the new
        // world-line, so only writes of the new one race with this walk (`accounting` module).
        // A later rollback that supersedes this PURGE recounts in its own.
        let live = shared.recount_live_bytes(self.invalid);
        shared.live.set(shared.epoch.high_water(), live);
        let mut control = rollback.purge_control();
        // Under the lock a later rollback takes over (`take_over_purge`): either it did already,
        // or it finds this PURGE ended and acquires the state machine anew.
        if self.superseded() {
            return;
        }
        // No walker relies on the range any more: every record of it is flagged (`purge::run`).
        rollback.set_invalid(InvalidVersions::NONE);
        shared.publish_phase(Phase::Rest, self.next_version);
        shared.release_state_machine();
        let (first, last) = self.invalid.bounds();
        control.running = false;
        control.adopted = None;
        control.last = Some(PurgeReport {
            world_line: self.world_line,
            duration: started.elapsed(),
            records_invalidated: counts.flagged,
            links_repaired: counts.repaired,
            versions: (first + 1, last),
            scanned_from: counts.from,
            scanned_until: counts.until,
            records_scanned: counts.scanned,
            log_pass: counts.log_pass,
            index_pass: counts.index_pass,
        });
        rollback.notify_purge_changed();
        drop(control);
        drop(maintenance);
        // Compaction was excluded meanwhile.
        shared.request_compaction();
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
