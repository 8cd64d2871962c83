//! A worker's configuration, its recoverability levels and its start errors.

use std::net::SocketAddr;
use std::path::PathBuf;

use prefixkv_dpr::worker::WorkerError;
use prefixkv_dpr::{WorkerId, WorldLine};
use prefixkv_dprnet::wire::FrameLimits;

use crate::state_object::EngineConfig;

/// Errors starting a worker.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding or socket setup failed.
    #[error("worker socket {address}: {source}")]
    Socket {
        /// The address.
        address: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The engine or the DPR worker failed to start.
    #[error("worker {worker}: {source}")]
    Worker {
        /// The worker id.
        worker: WorkerId,
        /// The error.
        source: WorkerError,
    },
    /// The incarnation file could not be read or written.
    #[error("worker incarnation file {path}: {source}")]
    Incarnation {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Waiting for the cluster to roll back past this worker's previous incarnation took too
    /// long (is a cluster manager running on the same metadata store?).
    #[error("worker {worker} served in world-line {world_line} before it restarted; the cluster has not rolled back past it within {waited_ms} ms (is a cluster manager running?)")]
    RollbackWait {
        /// The worker id.
        worker: WorkerId,
        /// The world-line of the previous incarnation.
        world_line: WorldLine,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The hash slot ownership table could not be read or is unusable.
    #[error("worker {worker}: reading the hash slot ownership: {source}")]
    Topology {
        /// The worker id.
        worker: WorkerId,
        /// The error.
        source: prefixkv_dpr::metadata::MetadataError,
    },
}

/// What a worker guarantees about acknowledged batches: the DPR paper's recoverability levels
/// (Fig. 19), so that experiments compare them on the same code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Recoverability {
    /// No checkpoints and no DPR: a crash loses everything (a throughput baseline).
    None,
    /// Checkpoints every interval, no DPR tracking: each worker recovers *some* earlier state of
    /// its own, with no cross-worker consistency and no commit points worth reporting (the
    /// "uncoordinated checkpoints" baseline). Batches skip admission; responses carry the current
    /// version only so that clients keep working.
    Eventual,
    /// DPR: every session recovers a prefix and is told which (the default).
    #[default]
    Dpr,
    /// DPR, and every batch is also appended to an operation log and fdatasynced before its reply
    /// (the "synchronous" baseline's cost: one durable write per batch). The log is truncated at
    /// each published checkpoint. Recovery still restores checkpoints: replaying this log after
    /// a crash is not implemented, so this level exists to measure the cost of per-batch
    /// durability, not to provide it.
    Synchronous,
}

impl Recoverability {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Eventual => "eventual",
            Self::Dpr => "dpr",
            Self::Synchronous => "synchronous",
        }
    }
}

impl std::str::FromStr for Recoverability {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "none" => Ok(Self::None),
            "eventual" => Ok(Self::Eventual),
            "dpr" => Ok(Self::Dpr),
            "synchronous" => Ok(Self::Synchronous),
            other => Err(format!(
                "unknown recoverability {other:?} (none, eventual, dpr, synchronous)"
            )),
        }
    }
}

/// Configuration of one worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// What acknowledged batches are guaranteed (default DPR).
    pub recoverability: Recoverability,
    /// This worker's DPR id (unique in the cluster).
    pub worker_id: WorkerId,
    /// Where clients connect (port 0: any free port).
    pub listen: SocketAddr,
    /// Frame limits.
    pub limits: FrameLimits,
    /// The engine (its directory holds the checkpoints and the incarnation file).
    pub engine: EngineConfig,
    /// Commit interval: one CPR checkpoint per slot of this length (default 100 ms).
    pub checkpoint_interval_ms: u64,
    /// Lease renewal interval (keep it well below the manager's lease: every renewal is a
    /// durable metadata transaction).
    pub heartbeat_interval_ms: u64,
    /// How often the worker reads the cluster state for a new world-line (and prunes).
    pub poll_interval_ms: u64,
    /// How long a restarted worker waits for the cluster to roll back past its previous
    /// incarnation before giving up.
    pub rejoin_timeout_ms: u64,
    /// How long a plain RESP connection whose batch failed in the engine waits for the
    /// rollback before answering that the batch's effect is unknown.
    pub recovery_wait_ms: u64,
    /// How often the worker re-reads the hash slot ownership table.
    pub ownership_refresh_ms: u64,
    /// The ownership lease: with a table published, keyed commands are refused
    /// (`-CLUSTERDOWN`) once the table could not be read for this long.
    pub ownership_lease_ms: u64,
}

impl WorkerConfig {
    /// Defaults: 100 ms commits, 200 ms heartbeats, 50 ms world-line polls, a 60 s rejoin wait,
    /// ownership re-read every 500 ms under a 10 s lease.
    pub fn new(worker_id: WorkerId, listen: SocketAddr, engine: EngineConfig) -> Self {
        Self {
            recoverability: Recoverability::Dpr,
            worker_id,
            listen,
            limits: FrameLimits::default(),
            engine,
            checkpoint_interval_ms: 100,
            heartbeat_interval_ms: 200,
            poll_interval_ms: 50,
            rejoin_timeout_ms: 60_000,
            recovery_wait_ms: 30_000,
            ownership_refresh_ms: 500,
            ownership_lease_ms: 10_000,
        }
    }
}
