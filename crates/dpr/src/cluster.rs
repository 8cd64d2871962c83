//! The cluster manager (§4.1–4.2): detects failed workers by lease expiry, advances the
//! world-line, tells every worker to restore to the current cut, and resumes DPR progress once all
//! workers have reported back.
//!
//! Leases: each worker renews its lease with [`ClusterManager::heartbeat`], which records the time
//! in the metadata store (so a restarted manager, or one in another process, sees the same leases).
//! A worker whose last heartbeat is older than `lease_ms` is failed.
//!
//! Protocol of [`ClusterManager::check`]:
//! 1. While recovering: if every worker has reported the current world-line, clear `recovering`
//!    (finders publish cuts again). If a worker that has not reported lets its lease expire too
//!    (a nested failure, e.g. its restart failed), start another rollback as in step 2; the cut is
//!    unchanged because no cut is published during a recovery. Failed workers get a fresh lease
//!    when a rollback starts, so a restart has one lease period to report in.
//! 2. Otherwise, if a lease expired: `advance_world_line` atomically bumps the world-line, sets
//!    `recovering` and deletes the lost versions above the cut; then every registered worker's
//!    [`WorkerControl`] receives a [`RestoreCommand`] (the failed worker's control is expected to
//!    restart it, which restores it to the cut as well).
//!
//! Sessions learn of the failure from a `Rollback` response or from the store's world-line and
//! compute their surviving prefix from the cut in the new world-line.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::metadata::{MetadataError, MetadataStore};
use crate::{Cut, WorkerId, WorldLine};

/// A source of milliseconds for leases.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since an arbitrary fixed origin.
    fn now_ms(&self) -> u64;
}

/// Wall-clock milliseconds since the Unix epoch (shared by processes on one machine).
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told (deterministic tests).
#[derive(Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// Sets the time.
    pub fn set_ms(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
    /// Advances the time.
    pub fn advance_ms(&self, delta_ms: u64) {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Tells a worker to restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreCommand {
    /// The new world-line.
    pub world_line: WorldLine,
    /// The cut to restore to.
    pub cut: Cut,
    /// Whether this worker is the one that failed (its control should restart it).
    pub failed: bool,
}

/// How the manager reaches a worker (a channel to an in-process thread, an RPC, ...).
pub trait WorkerControl: Send + Sync {
    /// Delivers a restore command. Must not block on the worker finishing the restore; the
    /// worker reports completion through the metadata store.
    fn restore(&self, command: RestoreCommand);
}

/// What [`ClusterManager::check`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// Nothing to do.
    Healthy,
    /// Workers failed; the world-line advanced and restore commands were sent.
    RollbackStarted {
        /// Workers whose lease expired.
        failed: Vec<WorkerId>,
        /// The new world-line.
        world_line: WorldLine,
        /// The cut everyone restores to.
        cut: Cut,
    },
    /// A recovery is under way; these workers have not reported yet.
    Recovering {
        /// Workers still restoring.
        waiting_for: Vec<WorkerId>,
    },
    /// Every worker reported; progress resumed.
    RecoveryFinished {
        /// The world-line now in force.
        world_line: WorldLine,
    },
}

/// The cluster manager. See the module docs.
pub struct ClusterManager {
    store: Arc<dyn MetadataStore>,
    clock: Arc<dyn Clock>,
    lease_ms: u64,
    controls: Mutex<BTreeMap<WorkerId, Arc<dyn WorkerControl>>>,
}

impl ClusterManager {
    /// A manager over `store` expiring leases after `lease_ms`.
    pub fn new(store: Arc<dyn MetadataStore>, clock: Arc<dyn Clock>, lease_ms: u64) -> Self {
        Self {
            store,
            clock,
            lease_ms,
            controls: Mutex::new(BTreeMap::new()),
        }
    }

    /// The clock leases use.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Registers how to reach `worker`.
    pub fn attach(&self, worker: WorkerId, control: Arc<dyn WorkerControl>) {
        self.controls.lock().insert(worker, control);
    }

    /// Renews `worker`'s lease.
    pub fn heartbeat(&self, worker: WorkerId) -> Result<(), MetadataError> {
        self.store.heartbeat(worker, self.clock.now_ms())
    }

    /// One round of failure detection and recovery bookkeeping (see the module docs). Call it
    /// periodically.
    pub fn check(&self) -> Result<CheckOutcome, MetadataError> {
        let state = self.store.cluster_state()?;
        let workers = self.store.workers()?;
        let now_ms = self.clock.now_ms();
        let expired = |w: &crate::metadata::WorkerRecord| {
            now_ms.saturating_sub(w.last_heartbeat_ms) > self.lease_ms
        };
        let failed: Vec<WorkerId>;
        if state.recovering {
            if self.store.finish_recovery(state.world_line)? {
                return Ok(CheckOutcome::RecoveryFinished {
                    world_line: state.world_line,
                });
            }
            let waiting_for: Vec<WorkerId> = workers
                .iter()
                .filter(|w| w.recovered_world_line < state.world_line)
                .map(|w| w.worker)
                .collect();
            // Nested failure: a worker died before reporting back (e.g. its restart failed).
            // Without a new rollback the recovery would wait for it forever.
            failed = workers
                .iter()
                .filter(|w| w.recovered_world_line < state.world_line && expired(w))
                .map(|w| w.worker)
                .collect();
            if failed.is_empty() {
                return Ok(CheckOutcome::Recovering { waiting_for });
            }
        } else {
            failed = workers
                .iter()
                .filter(|w| expired(w))
                .map(|w| w.worker)
                .collect();
            if failed.is_empty() {
                return Ok(CheckOutcome::Healthy);
            }
        }
        let advanced = self.store.advance_world_line(state.world_line)?;
        if advanced.world_line == state.world_line {
            // Another manager handled it first.
            return Ok(CheckOutcome::Healthy);
        }
        // Failed workers get a fresh lease to restart and report in; only if they miss that too is
        // it a nested failure.
        for worker in &failed {
            self.store.heartbeat(*worker, now_ms)?;
        }
        tracing::warn!(
            ?failed,
            world_line = advanced.world_line,
            "DPR workers failed; rolling back to the cut"
        );
        let controls: Vec<(WorkerId, Arc<dyn WorkerControl>)> = self
            .controls
            .lock()
            .iter()
            .map(|(w, c)| (*w, Arc::clone(c)))
            .collect();
        for (worker, control) in controls {
            control.restore(RestoreCommand {
                world_line: advanced.world_line,
                cut: advanced.cut.clone(),
                failed: failed.contains(&worker),
            });
        }
        Ok(CheckOutcome::RollbackStarted {
            failed,
            world_line: advanced.world_line,
            cut: advanced.cut,
        })
    }
}
