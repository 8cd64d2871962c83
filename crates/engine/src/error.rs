//! The one error type of the engine.
//!
//! Every message says what happened, where (file and byte offset when a file is involved) and what
//! the operator can do about it. Errors never carry a half-loaded state: a function that returns an
//! error has either changed nothing on disk or left only files that the next `open` recognises and
//! removes (unfinished `.tmp` checkpoint directories).

use std::path::PathBuf;

use crate::SessionId;

/// Errors returned by the store, its sessions and its checkpoint files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// An I/O operation on `path` failed.
    #[error(
        "I/O error while trying to {operation} {}: {source}; check that the path exists, is writable \
         and that the disk is not full; existing checkpoints are untouched",
        path.display()
    )]
    Io {
        /// What the engine was doing, as a verb phrase ("create", "fsync").
        operation: String,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint file failed verification.
    #[error("corrupt checkpoint data in {} at offset {offset}: {detail}", path.display())]
    Corrupt {
        /// The file that failed verification.
        path: PathBuf,
        /// Byte offset of the problem within the file.
        offset: u64,
        /// What was wrong, and what to do.
        detail: String,
    },
    /// The in-memory log budget is exhausted and compaction could not free room in time.
    #[error(
        "out of log memory: {detail}; raise StoreConfig::log_memory_bytes or store less live data"
    )]
    OutOfMemory {
        /// What could not be allocated and the current budget.
        detail: String,
    },
    /// A key and value together are too large for one log record.
    #[error(
        "a record of a {key_bytes}-byte key and a {value_bytes}-byte value does not fit: with this \
         key the largest value is {max_value_bytes} bytes; store the value in smaller pieces or \
         raise StoreConfig::log_page_bytes"
    )]
    RecordTooLarge {
        /// The key's length.
        key_bytes: usize,
        /// The value's length.
        value_bytes: usize,
        /// The largest value that fits with this key.
        max_value_bytes: usize,
    },
    /// `Store::checkpoint` was called while another checkpoint is still running.
    #[error(
        "a checkpoint is already in progress; wait for it with Store::wait_for_commit and retry"
    )]
    CheckpointInProgress,
    /// A checkpoint started but could not be made durable.
    #[error("checkpoint v{version} failed: {detail}; the previous checkpoint is still the recovery point")]
    CheckpointFailed {
        /// The version that failed.
        version: u64,
        /// Why.
        detail: String,
    },
    /// A rollback discarded the checkpoint's version: it was stopped before it was published
    /// (`Store::rollback` does not wait for a checkpoint it would delete), or deleted after.
    #[error("checkpoint v{version} was discarded by a rollback (its versions are gone)")]
    CheckpointAborted {
        /// The version that was being written.
        version: u64,
    },
    /// A bounded wait ran out.
    #[error("timed out waiting; the operation may still complete later")]
    Timeout,
    /// `resume_session` named a session that no recovered checkpoint knows.
    #[error(
        "unknown session {0}: no recovered checkpoint records it; start a new session instead"
    )]
    UnknownSession(SessionId),
    /// Every session slot is taken.
    #[error(
        "too many open sessions (the limit is {limit}); drop idle sessions or end idle connections"
    )]
    TooManySessions {
        /// The limit, [`crate::MAX_OPEN_SESSIONS`].
        limit: usize,
    },
    /// A caller passed an argument the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The store rolled back ([`crate::Store::rollback`]) while this session still counted itself
    /// in the previous world-line. Returned once per session, by its first operation after the
    /// rollback (or by an operation that was in progress and had not taken effect); that
    /// operation did not run. Every operation of this session with a serial up to
    /// `surviving_serial` is part of the restored state; every later one of the old world-line
    /// is gone. The session's serial counter was reset to `surviving_serial`: its next operation
    /// takes `surviving_serial + 1` and runs normally in the new world-line.
    #[error(
        "the store rolled back to world-line {world_line}: this session's operations after serial \
         {surviving_serial} are lost; reissue what is needed and continue"
    )]
    RolledBack {
        /// The world-line the session now runs in ([`crate::Store::world_line`]).
        world_line: u64,
        /// The session's CPR point in the checkpoint rolled back to (0 if it had none there).
        surviving_serial: u64,
    },
}

impl EngineError {
    /// Builds an [`EngineError::Io`] for `operation` on `path` (same signature as engine-files').
    pub fn io(
        operation: impl Into<String>,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        EngineError::Io {
            operation: operation.into(),
            path: path.into(),
            source,
        }
    }

    /// Builds an [`EngineError::Corrupt`].
    pub fn corrupt(path: impl Into<PathBuf>, offset: u64, detail: impl Into<String>) -> Self {
        EngineError::Corrupt {
            path: path.into(),
            offset,
            detail: detail.into(),
        }
    }
}
