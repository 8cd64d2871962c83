//! libDPR: Distributed Prefix Recovery (DPR) for any store that can execute batches in versions,
//! commit a version durably and restore a committed version.
//!
//! The pieces, from the bottom up:
//! - [`state_object`]: the contract a store implements ([`StateObject`]), plus a real in-memory
//!   reference implementation ([`state_object::VersionedMap`]) that snapshots each version to an
//!   fsynced, checksummed file.
//! - [`header`]: the little-endian wire header piggybacked on every batch and response.
//! - [`worker`]: the server side: version counter with fast-forward, per-version dependency sets,
//!   world-line checks.
//! - [`session`]: the client side: sequence numbers, `Vs`, dependencies, the outstanding window,
//!   commit points and the surviving prefix after a rollback (relaxed DPR, §5.4); a per-worker
//!   batcher.
//! - [`finder`]: DPR finders (exact, approximate, hybrid) computing the DPR cut.
//! - [`metadata`]: the durable metadata store (SQLite by default, PostgreSQL optional).
//! - [`cluster`]: the cluster manager (leases, world-line advance, coordinated restore).
//!
//! Invariants that hold across the crate:
//! - Versions of one worker only grow within a world-line, and after a restore the worker continues
//!   above every version it ever used, so a `(worker, version)` pair names one set of operations.
//! - A version never depends on a larger version (the Lamport rule of §3.2), which is what makes
//!   the approximate cut (`Vmin`) correct.
//! - A published cut is closed under dependencies and never moves backwards within a world-line.
#![warn(missing_docs)]

pub mod cluster;
pub mod connection;
pub mod finder;
pub mod header;
pub mod metadata;
pub mod session;
pub mod state_object;
pub mod worker;

use std::collections::BTreeMap;

/// Identifies a worker (a shard running a [`StateObject`]). Sessions use their own id space in
/// headers; the header's `kind` says which one a sender id is.
pub type WorkerId = u64;
/// A version (checkpoint token number) of one worker. Version 0 is the empty initial state, which
/// every worker has "persisted" implicitly.
pub type Version = u64;
/// A world-line id: 0 at cluster creation, advanced by one per handled failure.
pub type WorldLine = u64;

/// One vertex of the precedence graph: version `version` of worker `worker`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerVersion {
    /// The worker.
    pub worker: WorkerId,
    /// The version of that worker.
    pub version: Version,
}

impl WorkerVersion {
    /// Shorthand constructor.
    pub fn new(worker: WorkerId, version: Version) -> Self {
        Self { worker, version }
    }
}

/// A DPR cut: for each worker the largest version included. Workers absent from the map are at
/// version 0 (nothing of theirs is included).
pub type Cut = BTreeMap<WorkerId, Version>;

/// The cluster-wide state a session or worker needs to act on: which world-line is current, and
/// the latest published cut in it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClusterState {
    /// The current world-line.
    pub world_line: WorldLine,
    /// The latest published DPR cut (in `world_line`).
    pub cut: Cut,
    /// True while a rollback is under way: DPR progress (cut updates) is halted until every worker
    /// has reported that it restored to `cut`.
    pub recovering: bool,
}

impl ClusterState {
    /// The cut's version for `worker` (0 if absent).
    pub fn cut_version(&self, worker: WorkerId) -> Version {
        self.cut.get(&worker).copied().unwrap_or(0)
    }
}

pub use finder::DprFinder;
pub use header::{DprHeader, HeaderError, HeaderKind};
pub use metadata::MetadataStore;
pub use session::DprSession;
pub use state_object::StateObject;
pub use worker::DprWorker;
