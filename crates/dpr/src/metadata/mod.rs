//! The durable metadata store: cluster membership and leases, persisted versions and their
//! dependencies, the current cut and the world-line.
//!
//! Schema (both backends; every integer is a signed 64-bit column, values must fit `i64`):
//!
//! ```sql
//! dpr_cluster(id = 1 PRIMARY KEY, world_line, recovering 0|1)   -- exactly one row
//! dpr_workers(worker_id PRIMARY KEY, last_heartbeat_ms, recovered_world_line)
//! dpr_versions(worker_id, version, world_line, has_dependencies 0|1, PRIMARY KEY (worker_id, version))
//! dpr_dependencies(worker_id, version, dependency_worker_id, dependency_version,
//!                  PRIMARY KEY (worker_id, version, dependency_worker_id))
//! dpr_cut(worker_id PRIMARY KEY, version)
//! dpr_world_lines(world_line, worker_id, version, PRIMARY KEY (world_line, worker_id))  -- recovery cuts
//! dpr_ownership(first_partition PRIMARY KEY, last_partition, worker_id, address TEXT)  -- see ownership
//! ```
//!
//! Atomicity: every method runs in one transaction that first updates the `dpr_cluster` row,
//! which serialises writers on both backends (PostgreSQL row lock, SQLite write lock taken by
//! `BEGIN IMMEDIATE`). So a reader never sees half a cut, a cut is never published into a
//! world-line that has already been abandoned, and a world-line advance and the purge of the lost
//! versions happen together.
//!
//! Backends: [`SqliteMetadataStore`] (default: a file path usable by every process on one machine)
//! and [`PostgresMetadataStore`] (tokio-postgres driven by a private current-thread runtime, so
//! the trait stays synchronous and callable from any thread that is not inside an async runtime).

pub mod ownership;
mod postgres;
mod sql;
mod sqlite;

pub use ownership::PartitionRange;
pub use postgres::PostgresMetadataStore;
pub use sql::{SqlBackend, SqlMetadataStore, SqlValue};
pub use sqlite::SqliteMetadataStore;

use crate::{ClusterState, Cut, Version, WorkerId, WorkerVersion, WorldLine};

/// Errors from a metadata store.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// The SQLite backend failed.
    #[error("SQLite metadata store {path}: {source}")]
    Sqlite {
        /// Database file.
        path: String,
        /// Underlying error.
        source: rusqlite::Error,
    },
    /// The PostgreSQL backend failed.
    #[error("PostgreSQL metadata store: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// Starting the private runtime failed.
    #[error("PostgreSQL metadata store: cannot start its runtime: {0}")]
    Runtime(std::io::Error),
    /// A value does not fit a signed 64-bit column.
    #[error("metadata value {value} ({what}) does not fit a signed 64-bit column")]
    OutOfRange {
        /// Which value.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// The stored data violates an invariant (e.g. a negative version).
    #[error("metadata store holds invalid data: {0}")]
    Invalid(String),
}

/// A worker's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerRecord {
    /// The worker.
    pub worker: WorkerId,
    /// Time of its last heartbeat (milliseconds, on the cluster manager's clock).
    pub last_heartbeat_ms: u64,
    /// The latest world-line the worker reported it restored into (or started in).
    pub recovered_world_line: WorldLine,
}

/// A persisted version with its dependencies (`None`: not recorded, e.g. by the approximate finder).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistedVersion {
    /// The vertex.
    pub version: WorkerVersion,
    /// Its dependencies, if recorded.
    pub dependencies: Option<Vec<WorkerVersion>>,
}

/// The metadata store contract. Implementations must make each method atomic (see module docs).
pub trait MetadataStore: Send + Sync {
    /// Adds `worker` (idempotent), with a heartbeat at `now_ms`, as recovered into the current
    /// world-line.
    fn register_worker(&self, worker: WorkerId, now_ms: u64) -> Result<(), MetadataError>;
    /// Removes `worker` and its versions, dependencies and cut entry.
    fn remove_worker(&self, worker: WorkerId) -> Result<(), MetadataError>;
    /// Records a heartbeat (renews the lease).
    fn heartbeat(&self, worker: WorkerId, now_ms: u64) -> Result<(), MetadataError>;
    /// All workers.
    fn workers(&self) -> Result<Vec<WorkerRecord>, MetadataError>;
    /// Records a persisted version (and its dependencies if given) made in `world_line`. Returns
    /// false (recording nothing) if `world_line` is no longer current.
    fn add_persisted_version(
        &self,
        world_line: WorldLine,
        version: WorkerVersion,
        dependencies: Option<&[WorkerVersion]>,
    ) -> Result<bool, MetadataError>;
    /// All persisted versions above the current cut (and the cut's own versions), ascending.
    fn persisted_versions(&self) -> Result<Vec<PersistedVersion>, MetadataError>;
    /// The world-line, the published cut and the recovery flag, read together.
    fn cluster_state(&self) -> Result<ClusterState, MetadataError>;
    /// Publishes `cut` for `world_line` in one transaction: each worker's entry becomes the max of
    /// the old and new value, and versions below the new cut are pruned. Returns false (changing
    /// nothing) if `world_line` is not current or a recovery is under way.
    fn publish_cut(&self, world_line: WorldLine, cut: &Cut) -> Result<bool, MetadataError>;
    /// If the world-line is still `expected`: advances it by one, halts progress (`recovering`),
    /// and deletes every persisted version above the cut (they are lost). Returns the new state.
    fn advance_world_line(&self, expected: WorldLine) -> Result<ClusterState, MetadataError>;
    /// For a session or worker still on world-line `from`: the current world-line together with
    /// the cut world-line `from + 1` started from (the cut `from` was rolled back to). Versions made
    /// in `from` survived iff they are at or below that cut; later cuts contain versions of later
    /// world-lines and must not be used for this. If the cluster is still on `from`, returns the
    /// current state.
    fn rollback_target(&self, from: WorldLine) -> Result<ClusterState, MetadataError>;
    /// Records that `worker` restored into `world_line`.
    fn report_recovered(
        &self,
        worker: WorkerId,
        world_line: WorldLine,
    ) -> Result<(), MetadataError>;
    /// If every worker reported `world_line`, ends the recovery (progress resumes). Returns whether
    /// the cluster is now out of recovery.
    fn finish_recovery(&self, world_line: WorldLine) -> Result<bool, MetadataError>;
    /// The largest persisted version of any worker (`Vmax`), at least the cut's maximum.
    fn max_version(&self) -> Result<Version, MetadataError>;
    /// Replaces the whole partition ownership table in one transaction (see [`ownership`]);
    /// refuses ranges that break its invariants. By default unsupported.
    fn set_ownership(&self, ranges: &[PartitionRange]) -> Result<(), MetadataError> {
        let _ = ranges;
        Err(MetadataError::Invalid(
            "this metadata store keeps no partition ownership table".into(),
        ))
    }
    /// As [`MetadataStore::set_ownership`], in the same transaction as a check that the cluster
    /// is still in `world_line` and not recovering: returns false (changing nothing) otherwise.
    /// A slot migration publishes its result this way, so that it never lands after a rollback
    /// that may have undone what it relied on (see `prefixkv-cluster`'s `migrate` module).
    fn set_ownership_in(
        &self,
        world_line: WorldLine,
        ranges: &[PartitionRange],
    ) -> Result<bool, MetadataError> {
        let _ = (world_line, ranges);
        Err(MetadataError::Invalid(
            "this metadata store keeps no partition ownership table".into(),
        ))
    }
    /// The partition ownership table, sorted by first partition; empty if none was published
    /// (then every worker serves every partition). By default empty.
    fn ownership(&self) -> Result<Vec<PartitionRange>, MetadataError> {
        Ok(Vec::new())
    }
}
