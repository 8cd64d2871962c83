//! The one error type of the engine.
//!
//! Every message says what happened, where (file and byte offset when a file is involved) and what
//! the operator can do about it. Errors never carry a half-loaded state: a function that returns an
//! error has either changed nothing on disk or left only files that the next `open` recognises and
//! removes (unfinished `.tmp` checkpoint directories).

use std::path::PathBuf;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A system call on a file or directory failed.
    #[error(
        "I/O error while trying to {operation} {path}: {source}; check that the path exists, \
         is writable and that the disk is not full"
    )]
    Io {
        /// What we were doing, as a verb phrase ("create", "fsync", "rename to ...").
        operation: String,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A file failed verification: a checksum, a magic number, a length or a structural rule.
    #[error("corrupt data in {path} at byte offset {offset}: {detail}")]
    Corrupt {
        /// The file (or, for a summary of several files, the directory) that failed.
        path: PathBuf,
        /// Byte offset of the first bad byte found, 0 when the problem concerns the whole file.
        offset: u64,
        /// What is wrong and what to do about it.
        detail: String,
    },
    /// The caller passed something the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl EngineError {
    /// Builds an [`EngineError::Io`] for `operation` on `path`.
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
