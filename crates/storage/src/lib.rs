//! `prefixkv-storage`: the one place where bytes of prefixkv become durable.
//!
//! - [`io`]: the I/O trait ([`Disk`], [`DiskFile`]) every durable file goes through, with the real
//!   implementation ([`RealDisk`], std and rustix; the log's io_uring path uses its descriptors)
//!   and the simulated one ([`SimDisk`]: unsynced data lost, kept or torn at a power cut, directory
//!   entries lost when their directory was not synced, injected `ENOSPC`/`EIO`; deterministic from
//!   a seed).
//! - [`durable`]: durable whole-file writes (temp, write, fsync, rename, directory fsync),
//!   directory fsync, durable directory creation.
//! - [`lock`]: the directory lock ([`DirLock`]), released on drop.
//! - [`names`]: numbered file names ([`NumberedName`]).
//! - [`catalog`]: the version catalog ([`Catalog`]): publish version v atomically, open the newest
//!   that verifies (the caller's verification), fall back and say why, quarantine, prune.
//! - [`log`]: the segmented, CRC-framed append log with group commit, prefix truncation
//!   (`truncate_through`) and suffix truncation (`truncate_after`).
//! - [`pagefile`]: the page file ([`PageFile`]): the hybrid log's flushed pages in segment files
//!   with a sidecar of per-page CRC entries; whole-page writes and reads (direct I/O where
//!   allowed), ordered sync, verified reads, prefix deletion by whole segments, a durable
//!   discard of the pages from one on.
//!
//! The crash-safety argument of each piece is in its module's documentation, and all of them,
//! with the byte format of every file kind and the simulated disk's fault model, in
//! `docs/storage.md`. Invariant of the whole crate: a call that returns `Ok` after asking for
//! durability (a sync, a publish, an `always` append) never reports bytes durable that a power
//! cut at any later instant can take back; any failed sync is returned, never retried.

#![warn(missing_docs)]

pub mod catalog;
pub mod durable;
pub mod io;
pub mod le;
pub mod lock;
pub mod log;
pub mod names;
pub mod pagefile;
mod real;
mod sim;

pub use catalog::{Catalog, CatalogError, Draft, Rejection, SelectError, Selected};
pub use io::{
    direct_io_aligned, DirEntry, Disk, DiskFile, FileReader, Metadata, OpenMode,
    DIRECT_IO_ALIGNMENT,
};
pub use lock::{DirLock, LockError};
pub use names::NumberedName;
pub use pagefile::{PageFile, PageFileConfig, PageFileError, PageFileOpened};
pub use real::{real_disk, RealDisk, RealFile};
pub use sim::{CrashMode, CrashReport, Fault, FaultError, FaultOp, SimDisk, DEFAULT_SECTOR_BYTES};
