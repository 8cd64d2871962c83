//! The StateObject contract and a reference implementation.
//!
//! A [`StateObject`] is one shard's store as DPR sees it: it executes batches in the current
//! version, seals a version with [`StateObject::commit`] (the prefix of everything executed so far)
//! and tells the caller asynchronously when that version is durable, and can go back to any
//! persisted version with [`StateObject::restore`]. Nothing else is required, which is why DPR can
//! wrap an unmodified store (a later issue wraps redis-server's BGSAVE).
//!
//! Contract (the invariants a worker relies on):
//! - Versions passed to `commit` strictly increase between restores.
//! - Persistence callbacks fire in commit order, at most once each.
//! - After `restore(v)` returns, the state is exactly the state sealed by `commit(v)`, and
//!   persisted versions above `v` are gone (they belong to a lost world-line).
//! - `restore(0)` returns the empty initial state.

mod versioned_map;

pub use versioned_map::{MapOperation, VersionedMap};

use crate::Version;

/// Called once a committed version is durable (or failed to become durable).
pub type PersistCallback = Box<dyn FnOnce(Result<Version, StateObjectError>) + Send>;

/// Errors from a [`StateObject`].
#[derive(Debug, thiserror::Error)]
pub enum StateObjectError {
    /// I/O on a file.
    #[error("state object I/O on {path}: {source}")]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A snapshot file failed verification.
    #[error("state object snapshot {path} is corrupt at offset {offset}: {reason}; it was left in place, restore an earlier version or remove the file")]
    Corrupt {
        /// The file.
        path: std::path::PathBuf,
        /// Byte offset of the problem.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// Restore asked for a version that was never persisted.
    #[error("state object has no persisted version {version} (persisted: {available:?})")]
    NoSuchVersion {
        /// Asked for.
        version: Version,
        /// What exists.
        available: Vec<Version>,
    },
    /// Versions must increase.
    #[error(
        "state object: commit of version {version} is not above the last committed version {last}"
    )]
    VersionNotIncreasing {
        /// Asked for.
        version: Version,
        /// Last committed.
        last: Version,
    },
    /// A field too large for the snapshot format's 32-bit length.
    #[error("state object: {what} of {length_bytes} bytes is too large for a snapshot (limit 4 GiB - 1)")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// Its length.
        length_bytes: usize,
    },
    /// The background persister is gone (it panicked or the object is shutting down).
    #[error("state object persister thread is gone")]
    PersisterGone,
    /// The previous commit is still being made durable and this state object makes one at a
    /// time; nothing was sealed (commit again later).
    #[error("state object: the previous commit is still being written; nothing was sealed")]
    CommitInProgress,
}

/// The store contract DPR needs. See the module docs for the invariants.
pub trait StateObject: Send {
    /// One operation of a batch.
    type Operation;
    /// The result of one operation.
    type Output;

    /// Executes `operations` in order, all in `version` (the worker's current version).
    fn execute(
        &mut self,
        version: Version,
        operations: &[Self::Operation],
    ) -> Result<Vec<Self::Output>, StateObjectError>;

    /// Seals everything executed so far as `version` and starts making it durable, storing
    /// `metadata` with it. Returns once the content of `version` is fixed; calls `on_persist` when
    /// it is durable.
    fn commit(
        &mut self,
        version: Version,
        metadata: Vec<u8>,
        on_persist: PersistCallback,
    ) -> Result<(), StateObjectError>;

    /// Returns to persisted version `version` (0: empty) and returns the metadata stored with it.
    /// Persisted versions above `version` are discarded.
    fn restore(&mut self, version: Version) -> Result<Vec<u8>, StateObjectError>;

    /// Persisted versions, ascending (0 is implicit and not listed).
    fn persisted_versions(&self) -> Result<Vec<Version>, StateObjectError>;

    /// Discards persisted versions below `below` (they can no longer be restored).
    fn prune(&mut self, below: Version) -> Result<(), StateObjectError>;
}
