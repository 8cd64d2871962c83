//! D-Redis: Distributed Prefix Recovery (DPR, the SIGMOD 2021 paper's D-Redis) for an unmodified `redis-server`.
//!
//! Each shard is a `redis-server` child process behind a [`proxy::Proxy`]. Clients
//! ([`client::DprRedisClient`]) send batches of RESP commands wrapped in a DPR header
//! ([`wire`]); the proxy runs the libDPR worker protocol, forwards the commands to Redis and
//! answers with a DPR response header. A version is committed with `BGSAVE` and kept as a
//! checksummed RDB file ([`state_object`], [`manifest`]); restoring a version restarts Redis from
//! that RDB. A DPR finder (exact by default; [`options`]) publishes the cut in a metadata store
//! (SQLite by default, or PostgreSQL), and a cluster manager ([`cluster::LocalCluster`]) rolls
//! every shard back to the cut when a Redis dies (its proxy reports the process exit at once; the
//! lease is the fallback); sessions then learn exactly which of their operations survived. The
//! proxies also speak plain RESP: each plain connection is a DPR session the proxy keeps, with
//! `PREFIXKV.COMMITPOINT` and `-ROLLBACK` errors (see [`proxy`]); the connection loops are in
//! [`serve`], shared with prefixkv's cluster workers, and [`slots`] maps keys to Redis Cluster
//! hash slots (the client routes by slot when a cluster publishes slot ownership).
//!
//! Invariants:
//! - A commit of version `v` starts `BGSAVE` under the proxy's exclusive latch, so Redis's fork
//!   holds exactly the batches that ran in versions ≤ `v`.
//! - A version exists only once its manifest is durable and verifies; restore verifies the RDB's
//!   checksum before Redis loads it.
//! - A proxy renews its lease only while its Redis answers PING.
//! - A proxy tells framed and plain RESP connections apart by their first byte (NUL: framed),
//!   which no RESP request can start with.
#![warn(missing_docs)]

pub mod client;
pub mod cluster;
pub mod manifest;
pub mod options;
pub mod proxy;
pub mod redis;
pub mod serve;
pub mod slots;
pub mod state_object;
pub mod wire;

pub use client::{ClientConfig, ClientError, DprRedisClient, DprRedisSession};
pub use cluster::{LocalCluster, LocalClusterConfig};
pub use options::{FinderKind, MetadataLocation};
pub use proxy::{PassThroughProxy, Proxy, ProxyConfig};

/// Blocks SIGINT and SIGTERM in every thread (call before spawning any) and returns a function
/// that waits for one of them: how the `prefixkv-dredis` and `prefixkv-cluster` commands stop
/// cleanly (their threads never see the signal; the main thread waits for it, then shuts down).
pub fn block_termination_signals() -> impl FnOnce() -> i32 {
    // SAFETY: plain libc signal-mask calls on a local, initialised sigset_t.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    move || {
        let mut signal = 0;
        // SAFETY: `set` is initialised and `signal` is a valid out pointer.
        unsafe { libc::sigwait(&set, &mut signal) };
        signal
    }
}
