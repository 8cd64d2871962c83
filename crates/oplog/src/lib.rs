//! `prefixkv-oplog`: the logical operation log of the server and of tick-state logs: records
//! (opaque byte strings, one per logical operation) with dense log sequence numbers, group
//! commit, truncation behind a checkpoint, replay, torn-tail handling.
//!
//! The mechanism (segments, CRC-framed records, the I/O thread with io_uring or `pwritev`, the
//! recovery rules) is `prefixkv_storage::log`, the one segmented log of prefixkv; this crate is its
//! operation-log face, under the names its users know (`Oplog`, `Config`, `OplogError`). Byte
//! format and crash-safety argument: `docs/storage.md`; behaviour: `docs/oplog.md`.
//!
//! ```no_run
//! use prefixkv_oplog::{Config, Oplog, SyncPolicy};
//! let (log, report) = Oplog::open("wal", Config { policy: SyncPolicy::Always, ..Config::default() })?;
//! assert!(report.torn_tail.is_none());
//! let ticket = log.append(b"set k v")?;
//! let lsn = ticket.wait()?; // durable: its fsync completed
//! for record in log.replay(1)? {
//!     let (lsn, payload) = record?;
//! }
//! log.truncate_through(lsn)?; // after a checkpoint covers `lsn`
//! # Ok::<(), prefixkv_oplog::OplogError>(())
//! ```
//!
//! Invariants (those of the storage log): an `always` completion fires only after the record's
//! bytes were synced; the files hold a dense LSN prefix plus at most a torn tail at the end of
//! the last segment; nothing is skipped silently on open or replay; a failed write or sync fails
//! the log for good.

#![warn(missing_docs)]

pub use prefixkv_storage::log::format;
/// The operation log: [`prefixkv_storage::log::Log`].
pub use prefixkv_storage::log::Log as Oplog;
/// How to open an operation log: [`prefixkv_storage::log::LogConfig`].
pub use prefixkv_storage::log::LogConfig as Config;
/// An error of the operation log: [`prefixkv_storage::log::LogError`].
pub use prefixkv_storage::log::LogError as OplogError;
pub use prefixkv_storage::log::{
    AppendTicket, BackendChoice, BackendKind, Callback, OpenReport, Repair, Replay, Result, Stats,
    SyncPolicy, TornTail, TruncateReport,
};
/// The disk trait, the real disk and the simulated disk ([`Oplog::open_on`] takes a disk).
pub use prefixkv_storage::{real_disk, Disk, SimDisk};
