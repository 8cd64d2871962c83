//! prefixkv-cluster: a sharded cluster of prefixkv engines under Distributed Prefix Recovery.
//!
//! D-FASTER's shape (the DPR paper: Li, Chandramouli et al., SIGMOD 2021) on our engine: each worker is an engine behind
//! libDPR's worker ([`worker`]), a DPR version is a CPR checkpoint ([`state_object`]), clients
//! send batches of RESP commands with a DPR header (the framed protocol and client library of
//! `prefixkv-dprnet`, shared with D-Redis), a cluster manager detects failures by lease and rolls every worker
//! back to the DPR cut, and a failed worker restarts from its checkpoint in the cut
//! ([`launcher`] runs workers as processes). Workers also speak plain RESP, as a Redis Cluster:
//! keys map to hash slots, the launcher publishes which worker owns which slots, and workers
//! redirect foreign keys with `-MOVED` ([`topology`]); [`migrate`] moves slots between workers at
//! checkpoint boundaries. See `docs/cluster.md`.
#![warn(missing_docs)]

pub mod launcher;
pub mod migrate;
pub mod state_object;
pub mod topology;
pub mod worker;

pub use launcher::{LocalCluster, LocalClusterConfig};
pub use state_object::{EngineConfig, EngineStateObject};
pub use worker::{Worker, WorkerConfig};
