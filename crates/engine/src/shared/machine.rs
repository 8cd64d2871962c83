//! The state-machine slot: one CPR state machine at a time (a checkpoint, or a rollback until
//! its PURGE ended), the seal lock that keeps a seal's version switch apart from every other
//! phase change, the versions sealed and not yet written, and the results `wait_for_commit`
//! reads.
//!
//! Writers: the store's checkpoint requests claim the slot (`store`, `store::sealed`) and the
//! checkpoint thread gives it back with its result ([`MachineState::finish`]); a rollback
//! acquires it, sets `abort` while it waits, and releases it after PURGE (`rollback`); the
//! checkpoint driver records its strategy and publishes sealed versions. Every change goes
//! through a method here; no other module touches the fields.
//!
//! Locks, in the order they may nest (never the reverse):
//! - `seal_lock` (held across a seal's whole version switch, a classic checkpoint's claim, a
//!   rollback's THROW) before `results` (the claim flag changes and its wake-ups);
//! - `sealed` is taken alone, briefly.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::report::CheckpointReport;
use crate::{EngineError, SessionId, Strategy};

/// Checkpoint results kept for `wait_for_commit`.
const KEPT_RESULTS: usize = 64;

/// Why a checkpoint has no report.
#[derive(Clone, Debug)]
pub(crate) enum CheckpointFailure {
    /// It could not be made durable (the error's text).
    Failed(String),
    /// A rollback discarded its version: stopped before it was published, or deleted after.
    Discarded,
}

/// See the module docs.
pub(crate) struct MachineState {
    /// A state machine runs: a checkpoint, or a rollback until its PURGE ended (a nested
    /// rollback takes it over from the PURGE it stops). Changed under `results` when given back,
    /// so that a waiter in [`MachineState::acquire`] never misses the wake-up.
    running: AtomicBool,
    /// A classic checkpoint (`Store::checkpoint`) runs: its phases are under way, so seals wait.
    classic_running: AtomicBool,
    /// Set by a rollback while it waits for the state machine: the running checkpoint (whose
    /// version the rollback is about to discard) stops writing and is not published.
    abort: AtomicBool,
    /// Strategy of the checkpoint in flight (index into `Strategy::ALL`).
    strategy: AtomicU64,
    /// Held by a `Store::seal` for its whole version switch, and by whatever else starts changing
    /// the phase (a classic checkpoint's PREPARE or PAUSE, a rollback's THROW): a seal starts
    /// only from REST and never interleaves with another state machine's phases.
    seal_lock: Mutex<()>,
    /// Versions sealed by `Store::seal` and not yet published, with each session's CPR point in
    /// them (recorded at the seal, before any session could move on).
    sealed: Mutex<BTreeMap<u64, BTreeMap<SessionId, u64>>>,
    /// The last [`KEPT_RESULTS`] checkpoint results by version; its lock also orders the changes
    /// of `running` with their wake-ups on `results_changed`.
    results: Mutex<HashMap<u64, Result<CheckpointReport, CheckpointFailure>>>,
    results_changed: Condvar,
}

impl MachineState {
    /// No state machine running, nothing sealed, no results.
    pub(crate) fn new() -> MachineState {
        MachineState {
            running: AtomicBool::new(false),
            classic_running: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            strategy: AtomicU64::new(0),
            seal_lock: Mutex::new(()),
            sealed: Mutex::new(BTreeMap::new()),
            results: Mutex::new(HashMap::new()),
            results_changed: Condvar::new(),
        }
    }

    /// Claims the slot if free, without waiting; whether it was claimed. A caller that gives it
    /// back on a path that starts nothing uses [`MachineState::release`] (a rollback may wait).
    pub(crate) fn try_claim(&self) -> bool {
        !self.running.swap(true, Ordering::SeqCst)
    }

    /// Takes the slot (no checkpoint may start; a running one is waited for, until `deadline`).
    pub(crate) fn acquire(&self, deadline: Instant) -> Result<(), EngineError> {
        let mut results = self.results.lock();
        loop {
            if self.try_claim() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EngineError::Timeout);
            }
            // `finish` and `release` clear the flag and notify under this lock: no lost wake-up.
            self.results_changed.wait_until(&mut results, deadline);
        }
    }

    /// Gives back what [`MachineState::acquire`] or [`MachineState::try_claim`] took.
    pub(crate) fn release(&self) {
        let _results = self.results.lock();
        self.running.store(false, Ordering::SeqCst);
        self.results_changed.notify_all();
    }

    /// Checkpoint `version` ended with `result`: records it and gives the slot back.
    pub(crate) fn finish(&self, version: u64, result: Result<CheckpointReport, CheckpointFailure>) {
        let mut results = self.results.lock();
        if results.len() >= KEPT_RESULTS {
            if let Some(oldest) = results.keys().min().copied() {
                results.remove(&oldest);
            }
        }
        results.insert(version, result);
        self.classic_running.store(false, Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
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

    /// The result of checkpoint `version`, waiting for it until `deadline`; `None` on timeout.
    pub(crate) fn wait_result(
        &self,
        version: u64,
        deadline: Instant,
    ) -> Option<Result<CheckpointReport, CheckpointFailure>> {
        let mut results = self.results.lock();
        loop {
            if let Some(result) = results.get(&version) {
                return Some(result.clone());
            }
            if self
                .results_changed
                .wait_until(&mut results, deadline)
                .timed_out()
            {
                return None;
            }
        }
    }

    /// The seal lock (see the field).
    pub(crate) fn seal_lock(&self) -> MutexGuard<'_, ()> {
        self.seal_lock.lock()
    }

    /// The seal lock, waiting at most until `deadline`.
    pub(crate) fn try_seal_lock_until(&self, deadline: Instant) -> Option<MutexGuard<'_, ()>> {
        self.seal_lock.try_lock_until(deadline)
    }

    /// Marks a classic checkpoint as running or not (seals wait while it runs).
    pub(crate) fn set_classic_running(&self, running: bool) {
        self.classic_running.store(running, Ordering::SeqCst);
    }

    /// Whether a classic checkpoint's phases are under way.
    pub(crate) fn classic_running(&self) -> bool {
        self.classic_running.load(Ordering::SeqCst)
    }

    /// Asks the running checkpoint to stop (a rollback waiting for the slot), or stops asking.
    pub(crate) fn set_abort(&self, abort: bool) {
        self.abort.store(abort, Ordering::SeqCst);
    }

    /// Whether the running checkpoint is to stop.
    pub(crate) fn abort_requested(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }

    /// [`MachineState::abort_requested`] for a scanner's periodic check (a late answer only
    /// delays the stop until the next check).
    pub(crate) fn abort_requested_relaxed(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// The strategy of the checkpoint in flight.
    pub(crate) fn strategy(&self) -> Strategy {
        Strategy::ALL[self.strategy.load(Ordering::Acquire) as usize]
    }

    /// Records the strategy of the checkpoint starting now.
    pub(crate) fn set_strategy(&self, strategy: Strategy) {
        let index = Strategy::ALL
            .iter()
            .position(|candidate| *candidate == strategy)
            .expect("every strategy is listed");
        self.strategy.store(index as u64, Ordering::Release);
    }

    /// Records that `version` was sealed with these CPR points.
    pub(crate) fn record_sealed(&self, version: u64, points: BTreeMap<SessionId, u64>) {
        self.sealed.lock().insert(version, points);
    }

    /// The sealed, unpublished versions, oldest first.
    pub(crate) fn sealed_versions(&self) -> Vec<u64> {
        self.sealed.lock().keys().copied().collect()
    }

    /// The CPR points recorded when `version` was sealed, if it is sealed and unpublished.
    pub(crate) fn sealed_points(&self, version: u64) -> Option<BTreeMap<SessionId, u64>> {
        self.sealed.lock().get(&version).cloned()
    }

    /// A checkpoint of `version` was published: it and every older sealed version are done.
    pub(crate) fn forget_sealed_through(&self, version: u64) {
        let mut sealed = self.sealed.lock();
        *sealed = sealed.split_off(&(version + 1));
    }

    /// A rollback discarded every sealed, unwritten version (all above its target).
    pub(crate) fn forget_all_sealed(&self) {
        self.sealed.lock().clear();
    }
}
