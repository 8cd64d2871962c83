//! prefixkv-server as a cache: Redis's `maxmemory-policy` eviction, the access word behind
//! OBJECT IDLETIME / OBJECT FREQ, and the one memory figure everything counts against
//! maxmemory.
//!
//! Invariants:
//! - [`memory`] is the only place `used_memory` is computed; INFO, MEMORY STATS, metrics, the
//!   OOM checks and eviction all call it. It is the store's live bytes (live records and the
//!   index: it drops as soon as keys are deleted) plus what the server holds for data outside
//!   the store (the script cache's bodies).
//! - Eviction runs before a command that may write, inside the exec gate held shared (so no
//!   EXEC or script body sees a key vanish half way), and only when `used_memory > maxmemory`
//!   and the policy is not `noeviction`. It deletes through the keyspace's write transaction,
//!   exactly as DEL does: the delete is logged, a collection's records go with it, WATCHers are
//!   marked, and recovery never brings the key back. Each eviction counts in `evicted_keys` and
//!   raises an `evicted` keyspace event (class `e`).
//! - The work per command is bounded: at most [`MAX_SAMPLE`] keys read per round and a time
//!   budget from `maxmemory-eviction-tenacity` (Redis's formula); a command that found nothing
//!   to evict is refused with OOM, one that ran out of budget after evicting runs (Redis's
//!   `EVICT_RUNNING`) and the next write continues.
//! - Only user keys (`[db] ++ key`) are candidates: collection records and the functions record
//!   are never evicted on their own (a collection goes with its key).

pub mod access;
pub mod pool;
mod run;
pub mod settings;

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

pub use access::AccessClock;
pub use run::{evict_for_command, over_maxmemory, Outcome};
pub use settings::{Policy, Settings};

use crate::state::Server;

/// The most keys one sampling round reads, whatever `maxmemory-samples` says (the store's
/// sample limit; Redis's own bound is the stack).
pub const MAX_SAMPLE: usize = prefixkv_engine::MAX_SAMPLE_KEYS;

/// Eviction state shared by every thread.
#[derive(Default)]
pub struct Evictor {
    /// The candidates kept between rounds and commands, as Redis's pool. Its lock also makes
    /// eviction one thread at a time (the others re-check memory after waiting).
    pub(crate) pool: Mutex<pool::Pool>,
    /// Keys evicted since start or CONFIG RESETSTAT (INFO `evicted_keys`).
    pub evicted_keys: AtomicU64,
    /// The highest `used_memory` seen by INFO, MEMORY STATS or an eviction check.
    peak: AtomicU64,
}

/// What the server's memory figures are, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Counted against maxmemory: `dataset + overhead`.
    pub used: u64,
    /// Live record bytes in the store.
    pub dataset: u64,
    /// The store's index and what the server holds outside the store (the script cache).
    pub overhead: u64,
    /// The engine's log pages in use (dead records included, until compaction frees them).
    pub log_in_use: u64,
    /// The highest `used` seen so far.
    pub peak: u64,
}

/// Takes the eviction settings of `config` (at start and on CONFIG SET): the access words'
/// meaning, the LFU parameters, and a fresh pool (the old scores may mean something else now).
pub fn apply_settings(server: &Server, config: &crate::settings::Settings) {
    let eviction = &config.eviction;
    server.keyspace.access.configure(
        eviction.policy.is_lfu(),
        eviction.lfu_log_factor,
        eviction.lfu_decay_time,
    );
    server.evictor.pool.lock().clear();
    server.keyspace.refresh_access_stamp();
}

/// The server's memory figures (see the module invariants: the one place they are computed).
pub fn memory(server: &Server) -> Memory {
    let store = &server.keyspace.store;
    let live = store.live_bytes();
    let index = store.engine().index_bytes().min(live);
    let scripts = server.scripting.cache_bytes();
    let used = live + scripts;
    let peak = server
        .evictor
        .peak
        .fetch_max(used, Ordering::Relaxed)
        .max(used);
    Memory {
        used,
        dataset: live - index,
        overhead: index + scripts,
        log_in_use: store.used_memory_bytes(),
        peak,
    }
}

/// `used_memory` alone.
pub fn used_memory(server: &Server) -> u64 {
    memory(server).used
}

/// The process's resident set in bytes, from /proc/self/statm (0 where it cannot be read).
pub fn rss_bytes() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Redis's `bytesToHuman`: `512B`, `1.50K`, `2.00M`, `3.00G`.
pub fn human(bytes: u64) -> String {
    let value = bytes as f64;
    const K: f64 = 1024.0;
    if value < K {
        format!("{bytes}B")
    } else if value < K * K {
        format!("{:.2}K", value / K)
    } else if value < K * K * K {
        format!("{:.2}M", value / (K * K))
    } else if value < K * K * K * K {
        format!("{:.2}G", value / (K * K * K))
    } else {
        format!("{:.2}T", value / (K * K * K * K))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes_as_redis() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(100 << 20), "100.00M");
        assert_eq!(human(3 << 30), "3.00G");
    }

    #[test]
    fn rss_is_read() {
        assert!(rss_bytes() > 0, "/proc/self/statm exists on Linux");
    }
}
