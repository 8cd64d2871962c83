//! `prefixkv-crashfs`: a FUSE filesystem that loses unsynced file data at a simulated power
//! cut, in the manner of LazyFS, to cross-check `prefixkv-server` on a real kernel path.
//!
//! # Fault model
//!
//! - **File data** written but not yet made durable by `fsync`/`fdatasync` of that file (or
//!   by a write through an `O_SYNC`/`O_DSYNC` handle) lives only in memory, in a per-inode
//!   [`overlay::Overlay`] of unsynced byte ranges and size changes (`write`, `ftruncate`,
//!   `O_TRUNC`). Reads see the overlay over the backing file.
//! - `fsync`/`fdatasync` writes the inode's overlay to the backing file and syncs it.
//! - A **crash** (writing `crash` to `/.crashfs-control`) drops every overlay at once: every
//!   file falls back to its content and length as of its last sync. Nothing is torn *within* a
//!   synced range, and unsynced writes are lost whole (no partial survival, no reordering of
//!   unsynced writes): a strict, simple model, the same as LazyFS's default.
//! - **Namespace operations** (create, mkdir, rename, unlink, rmdir) pass through to the
//!   backing directory at once and survive every crash: this models lost data, not lost
//!   directory entries. `prefixkv-storage`'s `SimDisk` covers those.
//! - `close`, `flush` and process death persist nothing.
//!
//! # Invariants
//!
//! - The backing directory holds exactly the synced state; it is written only by `fsync`.
//! - Unsynced bytes in memory never exceed `--max-unsynced`: a write beyond it fails with
//!   `ENOSPC` and a log line, never grows memory.
//! - The kernel caches nothing a crash could take back (direct I/O, zero attribute TTL).

pub mod fs;
pub mod overlay;
