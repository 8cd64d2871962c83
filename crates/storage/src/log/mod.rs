//! The segmented, CRC-framed append log with group commit: one mechanism for every log of
//! prefixkv (the store's operation log, tick-state logs, Raft's log, the cluster worker's
//! baseline log). Each of its types has one name (`Log`, `LogConfig`, `LogError`, ...).
//!
//! Records (opaque byte strings) get dense log sequence numbers (LSNs) starting at 1, are framed
//! with their length, LSN and a CRC32C, and are appended to segment files named after their
//! first LSN (byte format: [`format`], and `docs/storage.md`). Any number of threads append
//! concurrently; one I/O thread writes everything queued as one vectored write followed by one
//! data sync (group commit), through io_uring (a linked `Writev` → `Fsync(DATASYNC)`) where the
//! kernel allows it and the file is a real one, or through the [`crate::Disk`] trait's
//! `write_at` + `sync_data` otherwise ([`BackendChoice`]). The log can be cut at both ends:
//! [`Log::truncate_through`] deletes whole segments behind a checkpoint, [`Log::truncate_after`]
//! removes a suffix (Raft's conflicting entries).
//!
//! ```no_run
//! use prefixkv_storage::log::{Log, LogConfig, SyncPolicy};
//! let (log, report) = Log::open("wal", LogConfig { policy: SyncPolicy::Always, ..LogConfig::default() })?;
//! assert!(report.torn_tail.is_none());
//! let ticket = log.append(b"set k v")?;
//! let lsn = ticket.wait()?; // durable: its fsync completed
//! for record in log.replay(1)? {
//!     let (lsn, payload) = record?;
//! }
//! log.truncate_through(lsn)?; // after a checkpoint covers `lsn`
//! # Ok::<(), prefixkv_storage::log::LogError>(())
//! ```
//!
//! Invariants of the whole module: an `always` completion fires only after the record's bytes
//! were synced; the files always hold a dense LSN prefix plus at most one partially written
//! group at the end of the last segment; nothing is ever skipped silently on open or replay; a
//! failed write or sync fails the log for good (never retried).

mod backend;
mod error;
pub mod format;
mod handle;
mod io_thread;
mod recovery;
mod replay;
mod shared;
#[cfg(test)]
mod shuttle_tests;
mod sync;
mod ticket;

pub use backend::{BackendChoice, BackendKind};
pub use error::{LogError, Result};
pub use handle::{Log, OpenReport, Stats, TruncateReport};
pub use recovery::{Repair, TornTail};
pub use replay::Replay;
pub use shared::Callback;
pub use ticket::AppendTicket;

/// When appends are made durable, and when their completion fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every group is synced before its completions fire. A crash loses only records whose
    /// completion never fired.
    #[default]
    Always,
    /// Completion fires once the record is written to the file (the OS page cache); written data
    /// is synced at most once a second. A power loss can lose about the last second of
    /// completed records (a suffix); a process crash alone loses none of them.
    EverySec,
    /// Completion fires on write; no sync except on segment roll, `flush_and_sync` and close. A
    /// power loss can lose everything since the last of those (a suffix).
    None,
}

/// How to open a log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// When to sync (see [`SyncPolicy`]).
    pub policy: SyncPolicy,
    /// A segment is closed and a new one started before a group would grow it past this size
    /// (a single record larger than this gets a segment of its own).
    pub segment_bytes: u64,
    /// Largest payload accepted by `append`; a stored length above it is corruption.
    pub max_record_bytes: u32,
    /// Bytes of frames that may wait in memory (queued or being written); appenders block
    /// beyond it (back-pressure).
    pub queue_capacity_bytes: usize,
    /// io_uring, the disk trait's `pwritev`, or probe and choose.
    pub backend: BackendChoice,
    /// On a corrupt record that is not a torn tail: truncate the log there and report it in
    /// [`OpenReport::repair`], instead of failing to open.
    pub repair: bool,
    /// The LSN the first record gets when the directory holds no segment yet (a new log, or one
    /// its owner removed because a checkpoint covers all of it). Ignored when segments exist.
    /// An owner whose checkpoints name LSNs passes one above every LSN they name, so that LSNs
    /// are never reused after its log lost an unsynced tail.
    pub first_lsn: u64,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            policy: SyncPolicy::Always,
            segment_bytes: 64 << 20,
            max_record_bytes: 16 << 20,
            queue_capacity_bytes: 16 << 20,
            backend: BackendChoice::Auto,
            repair: false,
            first_lsn: 1,
        }
    }
}

impl LogConfig {
    fn validate(&self) -> Result<()> {
        let limit = u32::MAX - format::FRAME_HEADER_BYTES as u32;
        if self.max_record_bytes == 0 || self.max_record_bytes > limit {
            return Err(LogError::InvalidConfig(format!(
                "max_record_bytes must be in 1..={limit}"
            )));
        }
        if self.segment_bytes < 4096 {
            return Err(LogError::InvalidConfig(
                "segment_bytes must be at least 4096".into(),
            ));
        }
        if self.first_lsn == 0 {
            return Err(LogError::InvalidConfig(
                "first_lsn must be at least 1 (LSN 0 means no record)".into(),
            ));
        }
        if self.queue_capacity_bytes == 0 {
            return Err(LogError::InvalidConfig(
                "queue_capacity_bytes must be positive".into(),
            ));
        }
        Ok(())
    }
}
