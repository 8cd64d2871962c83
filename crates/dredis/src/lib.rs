//! D-Redis: Distributed Prefix Recovery (DPR, seed 002) for an unmodified `redis-server`.
//!
//! Each shard is a `redis-server` child process behind a [`proxy::Proxy`]. Clients
//! ([`client::DprRedisClient`]) send batches of RESP commands wrapped in a DPR header
//! ([`wire`]); the proxy runs the libDPR worker protocol, forwards the commands to Redis and
//! answers with a DPR response header. A version is committed with `BGSAVE` and kept as a
//! checksummed RDB file ([`state_object`], [`manifest`]); restoring a version restarts Redis from
//! that RDB. The exact DPR finder publishes the cut in a SQLite metadata store, and a cluster
//! manager ([`cluster::LocalCluster`]) detects a dead Redis by its lease and rolls every shard
//! back to the cut; sessions then learn exactly which of their operations survived.
//!
//! Invariants:
//! - A commit of version `v` starts `BGSAVE` under the proxy's exclusive latch, so Redis's fork
//!   holds exactly the batches that ran in versions ≤ `v`.
//! - A version exists only once its manifest is durable and verifies; restore verifies the RDB's
//!   checksum before Redis loads it.
//! - A proxy renews its lease only while its Redis answers PING.
#![warn(missing_docs)]

pub mod client;
pub mod cluster;
pub mod manifest;
pub mod proxy;
pub mod redis;
pub mod state_object;
pub mod wire;

pub use client::{ClientConfig, ClientError, DprRedisClient, DprRedisSession};
pub use cluster::{LocalCluster, LocalClusterConfig};
pub use proxy::{PassThroughProxy, Proxy, ProxyConfig};
