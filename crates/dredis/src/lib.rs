//! D-Redis: Distributed Prefix Recovery (DPR, the SIGMOD 2021 paper's D-Redis) for an unmodified `redis-server`.
//!
//! Each shard is a `redis-server` child process behind a [`proxy::Proxy`]. Clients
//! (`prefixkv_dprnet::DprRedisClient`) send batches of RESP commands wrapped in a DPR header
//! (`prefixkv_dprnet::wire`); the proxy runs the libDPR worker protocol, forwards the commands to Redis and
//! answers with a DPR response header. A version is committed with `BGSAVE` and kept as a
//! checksummed RDB file ([`state_object`], [`manifest`]); restoring a version restarts Redis from
//! that RDB. A DPR finder (exact by default; `prefixkv_dprnet::options`) publishes the cut in a metadata store
//! (SQLite by default, or PostgreSQL), and a cluster manager ([`cluster::LocalCluster`]) rolls
//! every shard back to the cut when a Redis dies (its proxy reports the process exit at once; the
//! lease is the fallback); sessions then learn exactly which of their operations survived. The
//! proxies also speak plain RESP: each plain connection is a DPR session the proxy keeps, with
//! `PREFIXKV.COMMITPOINT` and `-ROLLBACK` errors (see [`proxy`]).
//!
//! What D-Redis shares with prefixkv's cluster workers is in `prefixkv-dprnet`: the wire
//! protocol, the connection loops, the client library and its sessions, hash slots and the
//! finder/metadata options. This crate is only D-Redis's own job: the proxy, its Redis process
//! ([`redis`]), its state object and versions, the local cluster and the binary.
//!
//! Invariants:
//! - A commit of version `v` starts `BGSAVE` under the proxy's exclusive latch, so Redis's fork
//!   holds exactly the batches that ran in versions ≤ `v`.
//! - A version exists only once its manifest is durable and verifies; restore verifies the RDB's
//!   checksum before Redis loads it.
//! - A proxy renews its lease only while its Redis answers PING.
#![warn(missing_docs)]

pub mod cluster;
pub mod manifest;
pub mod proxy;
pub mod redis;
pub mod state_object;

pub use cluster::{LocalCluster, LocalClusterConfig};
pub use proxy::{PassThroughProxy, Proxy, ProxyConfig};
