//! The worker side of DPR: wraps one [`StateObject`] and applies the protocol to every batch.
//!
//! Per batch ([`DprWorker::process_batch`]):
//! 1. World-line check: a batch from an older world-line is rejected with a `Rollback` header
//!    carrying the current world-line; a batch from a newer one makes the worker restore to the
//!    published cut first (it missed the rollback).
//! 2. Version fast-forward (the Lamport rule of §3.2): if the batch carries `Vs` above the local
//!    version, the current version is sealed and the worker jumps to `Vs`.
//! 3. The batch's dependencies join the current version's dependency set.
//! 4. The batch runs; the response header names the version it ran in.
//!
//! Invariants:
//! - `version` only grows; after a restore it continues above every version ever used
//!   (`highest_version_used`), so no `(worker, version)` pair is ever reused.
//! - The dependency set of a version holds, per other worker, the largest version depended on
//!   (depending on `w-v` implies depending on `w`'s earlier versions).
//! - No version depends on a larger version: a dependency `(w, x)` arrives with `Vs >= x`, and
//!   fast-forward makes the executing version `>= Vs`; every seal keeps the sealed version's
//!   own number. (Except under [`FastForward::Relabel`], which is why that mode is for the exact
//!   finder only.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::finder::DprFinder;
use crate::header::{DprHeader, HeaderKind};
use crate::metadata::MetadataError;
use crate::state_object::{StateObject, StateObjectError};
use crate::{ClusterState, Version, WorkerId, WorkerVersion, WorldLine};

/// Errors from a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The state object failed.
    #[error(transparent)]
    StateObject(#[from] StateObjectError),
    /// The metadata store failed.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// A header that is not a request was sent to a worker.
    #[error("worker {worker}: expected a request header, got {kind:?}")]
    NotARequest {
        /// This worker.
        worker: WorkerId,
        /// The kind received.
        kind: HeaderKind,
    },
    /// The request claims a world-line the metadata store has not reached.
    #[error("worker {worker}: request from world-line {request} but the cluster is at {cluster}")]
    WorldLineAhead {
        /// This worker.
        worker: WorkerId,
        /// The request's world-line.
        request: WorldLine,
        /// The store's world-line.
        cluster: WorldLine,
    },
    /// A batch has more dependencies than allowed.
    #[error("worker {worker}: batch has {count} dependencies, more than the maximum {max}")]
    TooManyDependencies {
        /// This worker.
        worker: WorkerId,
        /// Received.
        count: usize,
        /// Configured maximum.
        max: u32,
    },
}

/// The result of [`DprWorker::process_batch`].
#[derive(Debug)]
pub enum BatchOutcome<O> {
    /// The batch ran; send `response` with `outputs`.
    Executed {
        /// Response header (kind `Response`, the executed-in version).
        response: DprHeader,
        /// One output per operation.
        outputs: Vec<O>,
    },
    /// The batch is from an older world-line and did not run; send `response` (kind `Rollback`).
    Rejected {
        /// Response header carrying the current world-line.
        response: DprHeader,
    },
}

/// A sealed version waiting to be reported to the finder.
struct PendingReport {
    world_line: WorldLine,
    version: Version,
    dependencies: Vec<WorkerVersion>,
    /// Set by the state object's callback.
    outcome: Option<Result<Version, String>>,
}

/// Where persistence stands, shared with the state object's persistence callbacks.
///
/// Reports reach the finder strictly in commit order, whatever order the state object's callbacks
/// fire in: the exact finder relies on it (a token stands for all earlier versions, so their
/// dependency sets must be known first). A version that failed to persist hands its dependencies
/// to the next one, whose snapshot contains its operations.
#[derive(Default)]
struct PersistStatus {
    /// Largest version reported durable in `world_line`.
    latest: Version,
    world_line: WorldLine,
    errors: Vec<String>,
    /// Sealed versions in commit order, not yet reported.
    queue: std::collections::VecDeque<PendingReport>,
}

impl PersistStatus {
    /// Reports every finished version at the front of the queue, in order. Runs under the lock,
    /// which is what keeps reports ordered across callback threads.
    fn drain(&mut self, finder: &dyn DprFinder, worker: WorkerId) {
        while self.queue.front().is_some_and(|r| r.outcome.is_some()) {
            let report = self.queue.pop_front().expect("front exists");
            let outcome = report.outcome.expect("checked above").and_then(|version| {
                finder
                    .report_persisted(
                        report.world_line,
                        WorkerVersion::new(worker, version),
                        &report.dependencies,
                    )
                    .map_err(|e| e.to_string())
                    .map(|_| version)
            });
            match outcome {
                Ok(version) if self.world_line == report.world_line => {
                    self.latest = self.latest.max(version)
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::error!(worker, version = report.version, %error, "persisting a DPR version failed");
                    self.errors.push(error);
                    if let Some(next) = self.queue.front_mut() {
                        if next.world_line == report.world_line {
                            next.dependencies.extend(report.dependencies);
                        }
                    }
                }
            }
        }
    }
}

/// What a batch whose `Vs` (or a dependency) is above the worker's version does (§3.2's rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FastForward {
    /// Seal the current version (a commit of the state object) and jump to the new version: the
    /// paper's rule, for state objects whose commit is cheap to start at any moment.
    #[default]
    Seal,
    /// Raise the current, unsealed version's number to the new version without sealing it; the
    /// next periodic commit seals it under that number. Meant for state objects that can run
    /// only one commit at a time, so that a batch never waits for a commit to finish; the engine
    /// cluster used it until its seals became cheap, and no longer does: under continuous load
    /// relabelling can stop the cut (`docs/simulation.md`). Kept for the simulator's comparison.
    ///
    /// Only for the exact finder: operations that already ran under the old number (which other
    /// workers' smaller versions may depend on) end up in the larger version, so a version can
    /// depend on a larger one. The exact finder's graph follows such a dependency to the version
    /// holding it; the approximate cut (`Vmin`, also half of the hybrid cut) assumes it cannot
    /// happen and may then hold a version without what it depends on.
    Relabel,
}

/// A worker: one shard's state object plus the DPR protocol state.
pub struct DprWorker<S: StateObject> {
    id: WorkerId,
    fast_forward: FastForward,
    state_object: S,
    finder: Arc<dyn DprFinder>,
    max_dependencies: u32,
    world_line: WorldLine,
    version: Version,
    highest_version_used: Version,
    dependencies: BTreeMap<WorkerId, Version>,
    persisted: Arc<(Mutex<PersistStatus>, Condvar)>,
}

impl<S: StateObject> DprWorker<S> {
    /// Joins the cluster (registering with the store at `now_ms`) and restores `state_object` to
    /// this worker's entry in the published cut: a (re)started worker begins from the guaranteed
    /// prefix, never from unguaranteed state.
    pub fn start(
        id: WorkerId,
        mut state_object: S,
        finder: Arc<dyn DprFinder>,
        max_dependencies: u32,
        now_ms: u64,
    ) -> Result<Self, WorkerError> {
        finder.store().register_worker(id, now_ms)?;
        let state = finder.cluster_state()?;
        let local_highest = state_object
            .persisted_versions()?
            .last()
            .copied()
            .unwrap_or(0);
        let highest = local_highest.max(finder.max_version()?);
        state_object.restore(state.cut_version(id))?;
        let worker = Self {
            id,
            fast_forward: FastForward::Seal,
            state_object,
            finder,
            max_dependencies,
            world_line: state.world_line,
            version: highest + 1,
            highest_version_used: highest + 1,
            dependencies: BTreeMap::new(),
            persisted: Arc::new((Mutex::new(PersistStatus::default()), Condvar::new())),
        };
        worker.persisted.0.lock().world_line = state.world_line;
        worker
            .finder
            .store()
            .report_recovered(id, state.world_line)?;
        Ok(worker)
    }

    /// Chooses what a batch with a larger `Vs` does (default [`FastForward::Seal`]).
    pub fn set_fast_forward(&mut self, mode: FastForward) {
        self.fast_forward = mode;
    }

    /// This worker's id.
    pub fn id(&self) -> WorkerId {
        self.id
    }

    /// The current world-line.
    pub fn world_line(&self) -> WorldLine {
        self.world_line
    }

    /// The version batches currently execute in.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The state object (e.g. to inspect it in tests).
    pub fn state_object(&self) -> &S {
        &self.state_object
    }

    /// The state object, mutably. Executing or committing through it bypasses DPR; meant for
    /// store-specific maintenance and tests.
    pub fn state_object_mut(&mut self) -> &mut S {
        &mut self.state_object
    }

    /// The current version's dependency set.
    pub fn current_dependencies(&self) -> Vec<WorkerVersion> {
        self.dependencies
            .iter()
            .map(|(&worker, &version)| WorkerVersion::new(worker, version))
            .collect()
    }

    fn response(&self, kind: HeaderKind, request: &DprHeader) -> DprHeader {
        DprHeader {
            kind,
            world_line: self.world_line,
            version: self.version,
            sender: self.id,
            batch_sequence: request.batch_sequence,
            dependencies: Vec::new(),
        }
    }

    /// Runs one batch under the DPR rules (see the module docs).
    pub fn process_batch(
        &mut self,
        request: &DprHeader,
        operations: &[S::Operation],
    ) -> Result<BatchOutcome<S::Output>, WorkerError> {
        if request.kind != HeaderKind::Request {
            return Err(WorkerError::NotARequest {
                worker: self.id,
                kind: request.kind,
            });
        }
        if request.dependencies.len() > self.max_dependencies as usize {
            return Err(WorkerError::TooManyDependencies {
                worker: self.id,
                count: request.dependencies.len(),
                max: self.max_dependencies,
            });
        }
        if request.world_line > self.world_line {
            // Until this worker reports the current world-line, the cluster stays in recovery, so
            // the published cut is still the cut the current world-line started from.
            let state = self.finder.cluster_state()?;
            if state.world_line < request.world_line {
                return Err(WorkerError::WorldLineAhead {
                    worker: self.id,
                    request: request.world_line,
                    cluster: state.world_line,
                });
            }
            self.restore_to(&state)?;
        }
        if request.world_line < self.world_line {
            return Ok(BatchOutcome::Rejected {
                response: self.response(HeaderKind::Rollback, request),
            });
        }
        let floor = request.version_floor();
        if floor > self.version {
            match self.fast_forward {
                FastForward::Seal => self.seal(self.version, floor)?,
                FastForward::Relabel => {
                    self.version = floor;
                    self.highest_version_used = self.highest_version_used.max(floor);
                }
            }
        }
        for dependency in &request.dependencies {
            if dependency.worker == self.id {
                continue;
            }
            let entry = self.dependencies.entry(dependency.worker).or_insert(0);
            *entry = (*entry).max(dependency.version);
        }
        let outputs = self.state_object.execute(self.version, operations)?;
        Ok(BatchOutcome::Executed {
            response: self.response(HeaderKind::Response, request),
            outputs,
        })
    }

    /// Seals the current version (a local checkpoint) and moves to the next one. Returns the
    /// sealed version. Call it periodically (the commit interval).
    pub fn commit(&mut self) -> Result<Version, WorkerError> {
        let sealed = self.version;
        self.seal(sealed, sealed + 1)?;
        Ok(sealed)
    }

    /// Seals the current version and moves to `next` (at least the current version + 1):
    /// commits aligned to wall-clock slots, so that every worker uses the same numbers at the same
    /// time and a session's `Vs` rarely runs ahead of a worker. Returns the sealed version.
    pub fn commit_to(&mut self, next: Version) -> Result<Version, WorkerError> {
        let sealed = self.version;
        self.seal(sealed, next.max(sealed + 1))?;
        Ok(sealed)
    }

    /// Like [`commit`](Self::commit), but first reads `Vmax` and moves on to at least `Vmax`, so a
    /// worker that commits less often than others catches up (§3.4). Returns the sealed version.
    ///
    /// The sealed version keeps its own number: labelling it `Vmax` instead would move operations
    /// other workers' smaller versions may already depend on into a larger version, and the
    /// approximate cut (`Vmin`) is closed only if no version depends on a larger one
    /// (`tests/catch_up_cut.rs`).
    pub fn commit_with_catch_up(&mut self) -> Result<Version, WorkerError> {
        let next = self.finder.max_version()?;
        self.commit_to(next)
    }

    fn seal(&mut self, label: Version, next: Version) -> Result<(), WorkerError> {
        debug_assert!(label >= self.version && next > label);
        let dependencies = self.current_dependencies();
        let mut metadata = Vec::with_capacity(16 + 16 * dependencies.len());
        metadata.extend_from_slice(&self.world_line.to_le_bytes());
        metadata.extend_from_slice(&(dependencies.len() as u64).to_le_bytes());
        for dependency in &dependencies {
            metadata.extend_from_slice(&dependency.worker.to_le_bytes());
            metadata.extend_from_slice(&dependency.version.to_le_bytes());
        }
        let finder = Arc::clone(&self.finder);
        let persisted = Arc::clone(&self.persisted);
        let (world_line, id) = (self.world_line, self.id);
        self.persisted.0.lock().queue.push_back(PendingReport {
            world_line,
            version: label,
            dependencies,
            outcome: None,
        });
        let committed = self.state_object.commit(
            label,
            metadata,
            Box::new(move |result| {
                let (lock, changed) = &*persisted;
                let mut status = lock.lock();
                if let Some(report) = status.queue.iter_mut().find(|r| {
                    r.version == label && r.world_line == world_line && r.outcome.is_none()
                }) {
                    report.outcome = Some(result.map_err(|e| e.to_string()));
                }
                status.drain(finder.as_ref(), id);
                changed.notify_all();
            }),
        );
        if let Err(error) = committed {
            // Nothing was sealed: drop the queued report; the dependencies stay with the
            // current version.
            let mut status = self.persisted.0.lock();
            if let Some(position) = status.queue.iter().position(|r| {
                r.version == label && r.world_line == world_line && r.outcome.is_none()
            }) {
                status.queue.remove(position);
            }
            return Err(error.into());
        }
        self.dependencies.clear();
        self.version = next;
        self.highest_version_used = self.highest_version_used.max(next);
        Ok(())
    }

    /// Restores to `state`'s cut and moves into its world-line (no-op if already there), then
    /// reports the recovery to the store.
    pub fn restore_to(&mut self, state: &ClusterState) -> Result<(), WorkerError> {
        if state.world_line <= self.world_line {
            return Ok(());
        }
        self.state_object.restore(state.cut_version(self.id))?;
        self.world_line = state.world_line;
        self.version = self.highest_version_used + 1;
        self.highest_version_used = self.version;
        self.dependencies.clear();
        {
            let mut status = self.persisted.0.lock();
            status.world_line = state.world_line;
            status.latest = state.cut_version(self.id);
            // Reports of the abandoned world-line are moot (the store would refuse them), and a
            // state object may never call back for commits its restore discarded.
            status.queue.retain(|r| r.world_line >= state.world_line);
        }
        self.finder
            .store()
            .report_recovered(self.id, state.world_line)?;
        Ok(())
    }

    /// Discards state-object versions below this worker's entry in `state`'s cut.
    pub fn prune(&mut self, state: &ClusterState) -> Result<(), WorkerError> {
        if state.world_line == self.world_line {
            self.state_object.prune(state.cut_version(self.id))?;
        }
        Ok(())
    }

    /// The largest version of this world-line reported durable so far.
    pub fn persisted_version(&self) -> Version {
        self.persisted.0.lock().latest
    }

    /// Errors from persistence callbacks so far (a non-empty list means commits are failing).
    pub fn persist_errors(&self) -> Vec<String> {
        self.persisted.0.lock().errors.clone()
    }

    /// Waits up to `timeout` until `version` is reported durable; returns whether it was.
    pub fn wait_persisted(&self, version: Version, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, changed) = &*self.persisted;
        let mut status = lock.lock();
        while status.latest < version {
            if changed.wait_until(&mut status, deadline).timed_out() {
                return status.latest >= version;
            }
        }
        true
    }
}
