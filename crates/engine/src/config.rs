//! Configuration and small public value types: session ids, strategies, store configuration.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use prefixkv_storage::Disk;

/// A session's identity. Ids are never reused within a store's lifetime and survive restarts
/// (they are recorded in every checkpoint manifest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "s{}", self.0)
    }
}

/// How a checkpoint captures the image of version v. See `docs/engine.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Stop the world at a barrier, write every live record, resume. A baseline.
    Blocking,
    /// CPR (SIGMOD 2019): the first v+1 write to a record saves a stable copy of its v value.
    CprCopy,
    /// FASTER fold-over: freeze the log up to the version switch and write it in address order.
    FoldOver,
    /// FASTER snapshot: write the in-memory log pages in address order, in parallel segments.
    Snapshot,
    /// Persian: no stable copy; K scanners emit the newest <= v record of each key in parallel.
    Persian,
}

impl Strategy {
    /// Every strategy, in a fixed order.
    pub const ALL: [Strategy; 5] = [
        Strategy::Blocking,
        Strategy::CprCopy,
        Strategy::FoldOver,
        Strategy::Snapshot,
        Strategy::Persian,
    ];

    /// The name used on the command line and in manifests.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Blocking => "blocking",
            Strategy::CprCopy => "cpr-copy",
            Strategy::FoldOver => "fold-over",
            Strategy::Snapshot => "snapshot",
            Strategy::Persian => "persian",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.name() == text)
            .ok_or_else(|| {
                format!("unknown strategy {text:?}; expected one of blocking, cpr-copy, fold-over, snapshot, persian")
            })
    }
}

/// Default niceness of checkpoint threads (`StoreConfig::checkpoint_thread_nice`).
pub const DEFAULT_CHECKPOINT_THREAD_NICE: i32 = 10;

/// Default floor rate of the idle checkpoint priority
/// (`StoreConfig::checkpoint_idle_floor_bytes_per_s`): 16 MiB/s, so a 2 GiB image is raised to
/// the fixed niceness at the latest about two minutes in.
pub const DEFAULT_CHECKPOINT_IDLE_FLOOR_BYTES_PER_S: u64 = 16 << 20;

/// How a non-blocking checkpoint's threads are scheduled (`StoreConfig::checkpoint_thread_priority`;
/// see `checkpoint_priority.rs` for the bound on a save's time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckpointPriority {
    /// Linux `SCHED_IDLE` (a core only when no request thread wants it) while the checkpoint
    /// writes at least its floor rate, the fixed niceness once it falls behind. Where the process
    /// may not leave `SCHED_IDLE` again (no `CAP_SYS_NICE` or `RLIMIT_NICE`) and on platforms
    /// without it, the same as [`CheckpointPriority::Nice`].
    Idle,
    /// The fixed niceness (`checkpoint_thread_nice`) throughout.
    Nice,
}

impl CheckpointPriority {
    /// The name used in configuration (`idle`, `nice`).
    pub fn name(self) -> &'static str {
        match self {
            CheckpointPriority::Idle => "idle",
            CheckpointPriority::Nice => "nice",
        }
    }
}

impl fmt::Display for CheckpointPriority {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for CheckpointPriority {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "idle" => Ok(CheckpointPriority::Idle),
            "nice" => Ok(CheckpointPriority::Nice),
            _ => Err(format!(
                "unknown checkpoint priority {text:?}; expected idle or nice"
            )),
        }
    }
}

/// Store configuration. Build with [`StoreConfig::new`] and adjust fields.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Data directory; checkpoints live in `dir/checkpoints`.
    pub dir: PathBuf,
    /// Number of main hash buckets (power of two). The overflow pool holds as many again.
    pub index_buckets: usize,
    /// In-memory log budget in bytes. Writes get back-pressure and then
    /// `EngineError::OutOfMemory` at this limit.
    pub log_memory_bytes: u64,
    /// Log page size in bytes (power of two, at least 4 KiB).
    pub log_page_bytes: usize,
    /// Strategy used by callers that do not choose one.
    pub default_strategy: Strategy,
    /// Persian's K: scanner/flusher threads per checkpoint (and snapshot's segment count).
    pub flusher_threads: usize,
    /// Number of published checkpoints kept on disk.
    pub keep_checkpoints: usize,
    /// Pacing: the bytes per second one checkpoint may write, all its segment writers together,
    /// so a large checkpoint does not take the disk and page-cache writeback from request
    /// threads. `None` (the default): as fast as the disk allows. Slower checkpoints mean older
    /// commit points, never blocked sessions (except with the `blocking` strategy, which stops
    /// the world for the whole write).
    pub checkpoint_write_bytes_per_s: Option<u64>,
    /// Scheduling niceness (0..=19) of the threads that scan and write a checkpoint, so that
    /// request threads win the cores while a checkpoint runs: at 10 (the default) a checkpoint
    /// thread competing with a busy request thread gets about a tenth of its CPU (the kernel's
    /// weights are 110 against 1024), and all of an idle core. 0 runs them like request threads.
    /// Not applied under the `blocking` strategy, which stops the world anyway.
    pub checkpoint_thread_nice: i32,
    /// How checkpoint threads are scheduled: [`CheckpointPriority::Idle`] runs them under `SCHED_IDLE` while the checkpoint writes at least
    /// `checkpoint_idle_floor_bytes_per_s`, and at `checkpoint_thread_nice` once it falls
    /// behind; [`CheckpointPriority::Nice`] (the engine's default) at `checkpoint_thread_nice`
    /// throughout. Not applied under the `blocking` strategy. prefixkv-server defaults to `Idle`
    /// (measured there: writes keep more of their rate during a save, the save takes longer);
    /// the engine keeps `Nice` because an embedding program's other threads, not request
    /// threads, are what its checkpoint competes with, and only it can say which should yield.
    pub checkpoint_thread_priority: CheckpointPriority,
    /// The idle priority's floor: bytes per second (averaged since the image started, after a
    /// half-second allowance) below which the checkpoint's threads are raised to the fixed
    /// niceness. At least 64 KiB/s; with pacing, at most half the paced rate is used. Bounds a
    /// save's delay against the fixed niceness (`checkpoint_priority.rs`).
    pub checkpoint_idle_floor_bytes_per_s: u64,
    /// Write checkpoint segments with direct I/O (`O_DIRECT`), bypassing the page cache: no kernel
    /// copy of every byte into cache pages, and a checkpoint does not push the requests' data out
    /// of the cache. On by default; where the file system has no direct I/O (tmpfs), segments go
    /// through the page cache anyway. Off, a restart right after a process kill reads the newest
    /// checkpoint from the page cache instead of the disk.
    pub checkpoint_direct_io: bool,
    /// Where checkpoint files are written and read: the real disk by default; power-cut tests
    /// pass a `prefixkv_storage::SimDisk`. Used by the checkpoint writer and recovery only, never
    /// on a session's path.
    pub disk: Arc<dyn Disk>,
    /// How long a write held at the log's memory budget waits for compaction to free pages before
    /// it fails with `EngineError::OutOfMemory` (30 s by default; 1 ms to 1 h). While writers
    /// wait, compaction takes the maintenance lock ahead of the next checkpoint (see
    /// `compaction.rs`), so only a log that is truly full of live data runs out.
    pub memory_wait_limit: Duration,
    /// Keep the in-memory log ready for [`Store::rollback`](crate::Store::rollback) (D-FASTER's
    /// non-blocking rollback, DPR). Off by default. On, the engine guarantees that for every
    /// checkpointed version `v` the in-memory log still holds, for every key, the record that was
    /// the key's newest at `v` (unless the compaction floor, [`Store::set_rollback_floor`]
    /// (crate::Store::set_rollback_floor), allowed compaction to drop it): a write running as
    /// version `s` never changes a record of a version below `s` in place, in any phase or
    /// strategy; it copies it to the tail (read-copy-update). Writes to records of their own
    /// version still go in place. The price: the first write to a key in each version copies its
    /// record, and compaction keeps the versions a rollback may still need (see `docs/engine.md`,
    /// "Non-blocking rollback").
    pub rollback_ready: bool,
    /// Compact on garbage too: compaction also starts when the log's dead bytes (pages in use
    /// minus [`Store::live_record_bytes`](crate::Store::live_record_bytes)) exceed this fraction
    /// of the pages in use, once at least [`MIN_PAGES_FOR_DEAD_TRIGGER`] pages are in use. For a
    /// store that deletes as much as it writes (a cache that evicts): its live bytes stay under
    /// a limit while its log fills with dead records, and without this it would compact only at
    /// half the page budget. `None` (the default): only the page-budget trigger. In `(0, 1)`.
    pub compact_dead_fraction: Option<f64>,
    /// The access word new keys start with when the store opens, and so the word of every record
    /// recovery loads (see [`Store::set_access_stamp`](crate::Store::set_access_stamp), which
    /// changes it later). 0 by default.
    pub access_stamp: u32,
    /// A storage tier: when the log reaches its memory budget, its oldest pages are written to a
    /// page file in `dir/log` and leave memory, so the data may be larger than
    /// `log_memory_bytes` (the index stays in memory). Reads of records that left memory are
    /// served from the file; the file is compacted once more than half of the log is dead
    /// (live records copied forward, whole segments deleted). Off by default. Not with
    /// `rollback_ready` or `compact_dead_fraction` (in-memory compaction does not run with a
    /// tier). Recovery still loads the newest checkpoint, evicting as it goes (see
    /// `docs/engine.md`, "Storage tier").
    pub storage_tier: bool,
    /// With a storage tier: a read that finds its key's newest record in the page file copies
    /// that record to the log's tail (FASTER's copy-reads-to-tail), so a key read often stays
    /// in memory as a key written often does, at the cost of a log append per cold read and of
    /// more dead records for page-file compaction. Only outside checkpoints (phase REST), and
    /// never at the expense of writers (no copy when the log is at its budget). On by default.
    pub copy_cold_reads_to_tail: bool,
}

/// The most checkpoint threads a store runs ([`StoreConfig::flusher_threads`]); the epoch table
/// keeps a slot for each of them beyond the sessions' (a tiered store's scanners are protected).
pub const MAX_FLUSHER_THREADS: usize = 256;

/// With [`StoreConfig::compact_dead_fraction`], garbage alone starts compaction only from this
/// many log pages in use: below it, the pages a compaction could free are too few to matter.
pub const MIN_PAGES_FOR_DEAD_TRIGGER: u64 = 4;

impl StoreConfig {
    /// Defaults with the given data directory.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            ..StoreConfig::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<(), crate::EngineError> {
        let invalid = |message: String| Err(crate::EngineError::InvalidArgument(message));
        if !self.index_buckets.is_power_of_two() || self.index_buckets < 2 {
            return invalid(format!(
                "index_buckets must be a power of two >= 2, got {}",
                self.index_buckets
            ));
        }
        if self.index_buckets > 1 << 32 {
            return invalid(format!(
                "index_buckets must be <= 2^32, got {}",
                self.index_buckets
            ));
        }
        if !self.log_page_bytes.is_power_of_two()
            || !(4096..=1 << 30).contains(&self.log_page_bytes)
        {
            return invalid(format!(
                "log_page_bytes must be a power of two in [4 KiB, 1 GiB], got {}",
                self.log_page_bytes
            ));
        }
        if self.log_memory_bytes < 8 * self.log_page_bytes as u64 {
            return invalid(format!(
                "log_memory_bytes ({}) must hold at least 8 pages of log_page_bytes ({})",
                self.log_memory_bytes, self.log_page_bytes
            ));
        }
        if self.flusher_threads == 0 || self.flusher_threads > MAX_FLUSHER_THREADS {
            return invalid(format!(
                "flusher_threads must be in 1..={MAX_FLUSHER_THREADS}, got {}",
                self.flusher_threads
            ));
        }
        if let Some(rate) = self.checkpoint_write_bytes_per_s {
            let minimum = crate::checkpoint_files::pacer::MIN_WRITE_BYTES_PER_S;
            if rate < minimum {
                return invalid(format!(
                    "checkpoint_write_bytes_per_s must be at least {minimum} (64 KiB/s), got \
                     {rate}; use None for no limit"
                ));
            }
        }
        if !(0..=19).contains(&self.checkpoint_thread_nice) {
            return invalid(format!(
                "checkpoint_thread_nice must be in 0..=19, got {}",
                self.checkpoint_thread_nice
            ));
        }
        let minimum = crate::checkpoint_files::pacer::MIN_WRITE_BYTES_PER_S;
        if self.checkpoint_idle_floor_bytes_per_s < minimum {
            return invalid(format!(
                "checkpoint_idle_floor_bytes_per_s must be at least {minimum} (64 KiB/s), got {}",
                self.checkpoint_idle_floor_bytes_per_s
            ));
        }
        if self.memory_wait_limit < Duration::from_millis(1)
            || self.memory_wait_limit > Duration::from_secs(3600)
        {
            return invalid(format!(
                "memory_wait_limit must be between 1 ms and 1 h, got {:?}",
                self.memory_wait_limit
            ));
        }
        if let Some(fraction) = self.compact_dead_fraction {
            if !(fraction > 0.0 && fraction < 1.0) {
                return invalid(format!(
                    "compact_dead_fraction must be in (0, 1), got {fraction}; use None to compact \
                     only at half the page budget"
                ));
            }
        }
        if self.storage_tier && self.rollback_ready {
            return invalid(
                "storage_tier cannot be combined with rollback_ready: a rollback changes records \
                 in place, and records on disk cannot be changed"
                    .to_string(),
            );
        }
        if self.storage_tier && self.compact_dead_fraction.is_some() {
            return invalid(
                "storage_tier cannot be combined with compact_dead_fraction: with a tier, old \
                 pages are evicted to disk instead of compacted in memory"
                    .to_string(),
            );
        }
        if self.keep_checkpoints == 0 {
            return invalid("keep_checkpoints must be >= 1".to_string());
        }
        Ok(())
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            dir: PathBuf::from("prefixkv-data"),
            index_buckets: 1 << 20,
            log_memory_bytes: 1 << 30,
            log_page_bytes: 1 << 20,
            default_strategy: Strategy::Persian,
            flusher_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            keep_checkpoints: 2,
            checkpoint_write_bytes_per_s: None,
            checkpoint_thread_nice: DEFAULT_CHECKPOINT_THREAD_NICE,
            checkpoint_thread_priority: CheckpointPriority::Nice,
            checkpoint_idle_floor_bytes_per_s: DEFAULT_CHECKPOINT_IDLE_FLOOR_BYTES_PER_S,
            checkpoint_direct_io: true,
            disk: prefixkv_storage::real_disk(),
            memory_wait_limit: Duration::from_secs(30),
            rollback_ready: false,
            compact_dead_fraction: None,
            access_stamp: 0,
            storage_tier: false,
            copy_cold_reads_to_tail: true,
        }
    }
}
