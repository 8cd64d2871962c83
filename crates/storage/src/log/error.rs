//! Errors of the segmented log. Every error that concerns a file names it (and the offset, for
//! corruption) and says what the caller can do.

use std::path::PathBuf;

/// An error of the segmented log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An I/O call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A segment holds a bad record or header somewhere other than a torn tail.
    #[error(
        "corrupt log segment {path} at byte offset {offset}: {reason}; the data before this offset \
         is intact. Restore the log from a backup, or open it with `repair: true` to truncate the log \
         at this offset (records from here on are dropped and reported)"
    )]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Offset of the bad header or frame.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The directory's segments do not form one dense LSN sequence.
    #[error("log directory {dir} is inconsistent: {reason}")]
    Inconsistent {
        /// The log directory.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A record larger than the configured max record size was appended.
    #[error("record of {bytes} bytes exceeds the configured max_record_bytes {max_record_bytes}")]
    RecordTooLarge {
        /// The record's size.
        bytes: usize,
        /// The configured limit.
        max_record_bytes: u32,
    },
    /// Replay was asked for records that truncation already deleted.
    #[error("LSN {requested} was truncated; the oldest retained LSN is {oldest_retained}")]
    Truncated {
        /// The LSN asked for.
        requested: u64,
        /// The oldest LSN still in the log.
        oldest_retained: u64,
    },
    /// The I/O thread failed earlier; the log accepts no more appends. Records that were not yet
    /// acknowledged may or may not be on disk: reopen the log to find out.
    #[error("the log failed and accepts no more appends: {0}; reopen it to recover")]
    Failed(String),
    /// Another open handle (in this or another process) holds the log directory's lock.
    #[error(
        "log directory {dir} is already open (its LOCK file is held by another handle or process); \
         close that one first"
    )]
    Locked {
        /// The log directory.
        dir: PathBuf,
    },
    /// The configured backend cannot be used on this machine.
    #[error("log backend unavailable: {0}")]
    BackendUnavailable(String),
    /// A configuration value is out of range.
    #[error("invalid log configuration: {0}")]
    InvalidConfig(String),
}

impl LogError {
    /// Wraps an I/O error with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> LogError {
        LogError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Shorthand for results of the log.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
