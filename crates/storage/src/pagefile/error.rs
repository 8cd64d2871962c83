//! Errors of the page file. Each names the page or file concerned and what the caller can do.

use std::path::PathBuf;

/// An error of the page file.
#[derive(Debug, thiserror::Error)]
pub enum PageFileError {
    /// An I/O call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A page's bytes do not match the CRC of its trusted sums entry.
    #[error(
        "page {page} in {path} is corrupt: CRC32C of its {valid_bytes} valid bytes is \
         {computed:#010x}, its sums entry says {stored:#010x}; restore the data from a backup"
    )]
    Corrupt {
        /// The page.
        page: u64,
        /// The data file holding it.
        path: PathBuf,
        /// The trusted entry's valid bytes.
        valid_bytes: u32,
        /// The CRC the entry stores.
        stored: u32,
        /// The CRC of the bytes as read.
        computed: u32,
    },
    /// The data file ends before a trusted page's valid bytes: bytes its synced entry describes
    /// are gone (the file was cut after the fact, or the device lost synced data).
    #[error(
        "page {page} in {path} is corrupt: the file ends before its {valid_bytes} valid bytes \
         (its sums entry was synced after them); restore the data from a backup"
    )]
    DataMissing {
        /// The page.
        page: u64,
        /// The data file.
        path: PathBuf,
        /// The trusted entry's valid bytes.
        valid_bytes: u32,
    },
    /// A sums file's header is damaged although entries follow it (its header was synced before
    /// any entry was written, so this is not a torn creation).
    #[error("corrupt sums file {path}: {reason}; restore the page file from a backup")]
    CorruptSums {
        /// The sums file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The page has no entry (never written, or its entry did not survive): nothing to read.
    #[error("page {page} has no trusted entry in the page file (never written, or not synced before a crash)")]
    NotWritten {
        /// The page.
        page: u64,
    },
    /// A read past the page's valid bytes.
    #[error(
        "read of bytes [{offset}, {end}) of page {page}, which has only {valid_bytes} valid bytes"
    )]
    OutOfRange {
        /// The page.
        page: u64,
        /// Start of the read.
        offset: u64,
        /// End of the read (exclusive).
        end: u64,
        /// The page's valid bytes.
        valid_bytes: u32,
    },
    /// A call's arguments are wrong (buffer size, a page written with fewer valid bytes than
    /// before).
    #[error("invalid page file call: {0}")]
    Invalid(String),
    /// A configuration value is out of range, or the files on disk were made with another one.
    #[error("invalid page file configuration: {0}")]
    InvalidConfig(String),
    /// A write or sync failed earlier; the page file accepts no more writes or syncs (a failed
    /// sync is never retried). Reopen it to find out what is durable.
    #[error("the page file failed and accepts no more writes: {0}; reopen it to recover")]
    Failed(String),
    /// Another handle holds the directory's lock.
    #[error("page file directory {dir} is already open (its LOCK is held): {reason}")]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// The lock's error.
        reason: String,
    },
}

impl PageFileError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> PageFileError {
        PageFileError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Shorthand for results of the page file.
pub type Result<T, E = PageFileError> = std::result::Result<T, E>;
