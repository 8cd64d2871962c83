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
//! Reported failures: a host that sees a worker fail (its store process exited, its connections
//! reset) calls [`ClusterManager::report_failure`]; the next `check` treats that worker exactly as
//! if its lease had expired, so recovery need not wait for the lease. A report is consumed by the
//! rollback it causes (or by another manager's rollback that got there first). A report about a
//! worker that already reported back during a recovery waits until that recovery finished, then
//! starts a rollback of its own.
//!
//! Sessions learn of the failure from a `Rollback` response or from the store's world-line and
//! compute their surviving prefix from the cut in the new world-line.

use std::collections::{BTreeMap, BTreeSet};
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
    /// Workers reported failed by [`report_failure`](Self::report_failure), not yet rolled back.
    reported: Mutex<BTreeSet<WorkerId>>,
}

impl ClusterManager {
    /// A manager over `store` expiring leases after `lease_ms`.
    pub fn new(store: Arc<dyn MetadataStore>, clock: Arc<dyn Clock>, lease_ms: u64) -> Self {
        Self {
            store,
            clock,
            lease_ms,
            controls: Mutex::new(BTreeMap::new()),
            reported: Mutex::new(BTreeSet::new()),
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

    /// Reports that `worker` failed (seen by its host, e.g. its store process exited): the next
    /// [`check`](Self::check) starts a rollback for it without waiting for its lease to expire.
    /// Call `check` right after to act at once.
    pub fn report_failure(&self, worker: WorkerId) {
        self.reported.lock().insert(worker);
    }

    /// One round of failure detection and recovery bookkeeping (see the module docs). Call it
    /// periodically.
    pub fn check(&self) -> Result<CheckOutcome, MetadataError> {
        let state = self.store.cluster_state()?;
        let workers = self.store.workers()?;
        let now_ms = self.clock.now_ms();
        let reported = self.reported.lock().clone();
        let expired = |w: &crate::metadata::WorkerRecord| {
            now_ms.saturating_sub(w.last_heartbeat_ms) > self.lease_ms
                || reported.contains(&w.worker)
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
            self.reported.lock().retain(|w| !failed.contains(w));
            return Ok(CheckOutcome::Healthy);
        }
        // Failed workers get a fresh lease to restart and report in; only if they miss that too is
        // it a nested failure. Their reports are handled by this rollback.
        self.reported.lock().retain(|w| !failed.contains(w));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::SqliteMetadataStore;

    #[test]
    fn a_reported_failure_rolls_back_before_the_lease_expires() {
        let directory = tempfile::tempdir().unwrap();
        let store: Arc<dyn MetadataStore> =
            Arc::new(SqliteMetadataStore::open(directory.path().join("m.sqlite")).unwrap());
        let clock = Arc::new(ManualClock::default());
        clock.set_ms(1_000);
        for worker in [0, 1] {
            store.register_worker(worker, 1_000).unwrap();
        }
        let manager = ClusterManager::new(Arc::clone(&store), clock.clone(), 60_000);
        assert_eq!(manager.check().unwrap(), CheckOutcome::Healthy);
        manager.report_failure(1);
        match manager.check().unwrap() {
            CheckOutcome::RollbackStarted {
                failed, world_line, ..
            } => assert_eq!((failed, world_line), (vec![1], 1)),
            other => panic!("expected a rollback, got {other:?}"),
        }
        // The report was consumed by that rollback: no second one.
        assert!(matches!(
            manager.check().unwrap(),
            CheckOutcome::Recovering { .. }
        ));
    }
}
