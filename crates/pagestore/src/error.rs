//! The crate's error type: every variant names the file or the condition and what to do.

use std::path::PathBuf;

/// Errors of the page store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done ("reading frame 17 of", "fsync of", ...).
        what: String,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The files do not match the options they were opened with.
    #[error("{path}: {message}")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What differs and what to do.
        message: String,
    },
    /// A lock or read mark could not be taken within the busy timeout (or at once, for
    /// non-waiting operations); nothing was changed by the failed step.
    #[error("busy: {0}")]
    Busy(String),
    /// A caller error: bad page number, wrong buffer size, bad option.
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn io_error(
    what: impl Into<String>,
    path: &std::path::Path,
    source: std::io::Error,
) -> Error {
    Error::Io {
        what: what.into(),
        path: path.to_path_buf(),
        source,
    }
}
