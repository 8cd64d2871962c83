//! prefixkv-dprnet: Distributed Prefix Recovery (DPR) on the network, for every kind of
//! DPR worker: D-Redis's proxies (`prefixkv-dredis`) and prefixkv's cluster workers
//! (`prefixkv-cluster`) both serve it, and their clients use it.
//!
//! - [`wire`]: the framed protocol: a preamble, then length-prefixed frames of a DPR header and a
//!   batch of RESP commands, answered by a DPR response header and the replies.
//! - [`serve`]: the connection loops of a worker ([`serve::accept_connections`]): framed batches
//!   through a [`serve::DprHost`], plain RESP connections as DPR sessions the host keeps
//!   ([`serve::serve_resp`]: `PREFIXKV.COMMITPOINT`, `-ROLLBACK` errors).
//! - [`client`]: [`DprRedisClient`] and its [`DprRedisSession`]s: batching, windows, routing by
//!   hash slot or CRC32C, commit points from the published cut, and exact rollback reports; a
//!   co-located client hands one shard's batches to a [`client::LocalShard`] in its own process.
//! - [`slots`]: Redis Cluster's hash slots (CRC16, hash tags) and an even split of them.
//! - [`options`]: which DPR finder and which metadata store (SQLite file or PostgreSQL) a
//!   deployment uses.
//! - [`connection`]: a minimal blocking RESP connection ([`connection::RedisConnection`]).
//!
//! What is not here is each worker's own job: D-Redis's proxy, its `redis-server` child and RDB
//! versions (`prefixkv-dredis`); the cluster's engine worker, ownership and migration
//! (`prefixkv-cluster`). Neither of those crates depends on the other.
//!
//! Invariants:
//! - A worker tells framed and plain RESP connections apart by their first byte (NUL: framed),
//!   which no RESP request can start with.
//! - Every length read from the network is checked against [`wire::FrameLimits`] (or
//!   `prefixkv_resp`'s limits) before anything is allocated for it.
//! - Every client wait is bounded (`ClientConfig`'s timeouts).
#![warn(missing_docs)]

pub mod client;
pub mod connection;
pub mod options;
pub mod serve;
pub mod slots;
pub mod wire;

pub use client::{ClientConfig, ClientError, DprRedisClient, DprRedisSession};
pub use options::{FinderKind, MetadataLocation};

use std::net::TcpListener;

/// A loopback port nothing listens on right now (the OS picks it; another process may take it
/// before the caller binds it, which a caller that starts servers on it reports as an error).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

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
