//! Errors.

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum TickError {
    /// File I/O failed or an image file does not match the configuration (the message names the
    /// file).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The logical log failed.
    #[error("logical log: {0}")]
    Log(#[from] prefixkv_storage::log::LogError),
    /// The asynchronous writer stopped on an error; no further checkpoints are taken. Reopen the
    /// directory (recovery re-reads what is on disk) to continue.
    #[error("the asynchronous image writer failed: {0}")]
    WriterFailed(String),
    /// A logical log record is not one this crate writes, or out of order.
    #[error("logical log record at LSN {lsn}: {reason}")]
    BadLogRecord {
        /// The record's LSN.
        lsn: u64,
        /// What is wrong.
        reason: String,
    },
    /// The API was used against its contract (message says how).
    #[error("{0}")]
    Usage(String),
}

/// Result with [`TickError`].
pub type Result<T> = std::result::Result<T, TickError>;
