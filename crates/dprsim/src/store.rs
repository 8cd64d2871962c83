//! [`CountingStore`]: the real metadata store (SQLite) behind a wrapper that counts every call,
//! which is how the simulation measures finder load: in operations, not in wall time.
//!
//! Invariant: the wrapper only counts; every call goes to the inner store unchanged, so libDPR
//! sees exactly the store it would see in production.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prefixkv_dpr::metadata::{MetadataError, MetadataStore, PersistedVersion, WorkerRecord};
use prefixkv_dpr::{ClusterState, Cut, Version, WorkerId, WorkerVersion, WorldLine};

/// The store's methods, in the order of [`CountingStore::counts`].
const METHODS: [(&str, bool); 13] = [
    ("register_worker", true),
    ("remove_worker", true),
    ("heartbeat", true),
    ("workers", false),
    ("add_persisted_version", true),
    ("persisted_versions", false),
    ("cluster_state", false),
    ("publish_cut", true),
    ("advance_world_line", true),
    ("rollback_target", false),
    ("report_recovered", true),
    ("finish_recovery", true),
    ("max_version", false),
];

/// Counts calls per method and the size of the last `persisted_versions` answer.
pub struct CountingStore {
    inner: Arc<dyn MetadataStore>,
    calls: [AtomicU64; METHODS.len()],
    /// Rows (versions above the cut) and dependency entries in the last `persisted_versions`.
    last_versions: AtomicU64,
    last_dependencies: AtomicU64,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn MetadataStore>) -> Self {
        Self {
            inner,
            calls: Default::default(),
            last_versions: AtomicU64::new(0),
            last_dependencies: AtomicU64::new(0),
        }
    }

    fn count(&self, method: usize) {
        self.calls[method].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls so far per method name.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        METHODS
            .iter()
            .zip(&self.calls)
            .map(|((name, _), calls)| (name.to_string(), calls.load(Ordering::Relaxed)))
            .collect()
    }

    /// (reads, writes) so far; a write is a method that opens a write transaction.
    pub fn reads_writes(&self) -> (u64, u64) {
        let mut totals = (0, 0);
        for ((_, write), calls) in METHODS.iter().zip(&self.calls) {
            let calls = calls.load(Ordering::Relaxed);
            if *write {
                totals.1 += calls;
            } else {
                totals.0 += calls;
            }
        }
        totals
    }

    /// (versions, dependency entries) returned by the last `persisted_versions`: the part of the
    /// precedence graph above the cut a finder read.
    pub fn last_graph(&self) -> (u64, u64) {
        (
            self.last_versions.load(Ordering::Relaxed),
            self.last_dependencies.load(Ordering::Relaxed),
        )
    }
}

impl MetadataStore for CountingStore {
    fn register_worker(&self, worker: WorkerId, now_ms: u64) -> Result<(), MetadataError> {
        self.count(0);
        self.inner.register_worker(worker, now_ms)
    }
    fn remove_worker(&self, worker: WorkerId) -> Result<(), MetadataError> {
        self.count(1);
        self.inner.remove_worker(worker)
    }
    fn heartbeat(&self, worker: WorkerId, now_ms: u64) -> Result<(), MetadataError> {
        self.count(2);
        self.inner.heartbeat(worker, now_ms)
    }
    fn workers(&self) -> Result<Vec<WorkerRecord>, MetadataError> {
        self.count(3);
        self.inner.workers()
    }
    fn add_persisted_version(
        &self,
        world_line: WorldLine,
        version: WorkerVersion,
        dependencies: Option<&[WorkerVersion]>,
    ) -> Result<bool, MetadataError> {
        self.count(4);
        self.inner
            .add_persisted_version(world_line, version, dependencies)
    }
    fn persisted_versions(&self) -> Result<Vec<PersistedVersion>, MetadataError> {
        self.count(5);
        let versions = self.inner.persisted_versions()?;
        let dependencies: usize = versions
            .iter()
            .map(|v| v.dependencies.as_ref().map_or(0, Vec::len))
            .sum();
        self.last_versions
            .store(versions.len() as u64, Ordering::Relaxed);
        self.last_dependencies
            .store(dependencies as u64, Ordering::Relaxed);
        Ok(versions)
    }
    fn cluster_state(&self) -> Result<ClusterState, MetadataError> {
        self.count(6);
        self.inner.cluster_state()
    }
    fn publish_cut(&self, world_line: WorldLine, cut: &Cut) -> Result<bool, MetadataError> {
        self.count(7);
        self.inner.publish_cut(world_line, cut)
    }
    fn advance_world_line(&self, expected: WorldLine) -> Result<ClusterState, MetadataError> {
        self.count(8);
        self.inner.advance_world_line(expected)
    }
    fn rollback_target(&self, from: WorldLine) -> Result<ClusterState, MetadataError> {
        self.count(9);
        self.inner.rollback_target(from)
    }
    fn report_recovered(
        &self,
        worker: WorkerId,
        world_line: WorldLine,
    ) -> Result<(), MetadataError> {
        self.count(10);
        self.inner.report_recovered(worker, world_line)
    }
    fn finish_recovery(&self, world_line: WorldLine) -> Result<bool, MetadataError> {
        self.count(11);
        self.inner.finish_recovery(world_line)
    }
    fn max_version(&self) -> Result<Version, MetadataError> {
        self.count(12);
        self.inner.max_version()
    }
}
