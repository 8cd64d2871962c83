//! The directory lock: an exclusive advisory lock on `<dir>/LOCK`, so that two handles (in this
//! process or another) never own the same directory. One implementation, released on drop.
//!
//! Invariant: a [`DirLock`] holds the only handle of the lock file it opened; dropping it closes
//! that handle, which releases the lock (the kernel also releases it when the process dies, so a
//! SIGKILL never leaves a directory locked). Nothing is leaked on any error path: the handle is
//! dropped before an error is returned.

use crate::io::{self, Disk, DiskFile, OpenMode};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the lock file inside a locked directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another handle holds the lock.
    #[error(
        "directory {dir} is already in use (its LOCK file is held by another handle or process); \
         close that one first"
    )]
    Held {
        /// The directory.
        dir: PathBuf,
    },
    /// Opening or locking the lock file failed.
    #[error("locking directory {dir}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// An exclusive lock on a directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: Arc<dyn DiskFile>,
    dir: PathBuf,
}

impl DirLock {
    /// Locks `dir` (which must exist) without waiting.
    pub fn acquire(disk: &dyn Disk, dir: &Path) -> Result<DirLock, LockError> {
        let path = dir.join(LOCK_FILE_NAME);
        let io_error = |source| LockError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let file = disk
            .open(&path, OpenMode::Create)
            .map_err(|error| io_error(io::context(error, "opening the lock file", &path)))?;
        match file.try_lock() {
            Ok(true) => Ok(DirLock {
                _file: file,
                dir: dir.to_path_buf(),
            }),
            Ok(false) => Err(LockError::Held {
                dir: dir.to_path_buf(),
            }),
            Err(error) => Err(io_error(io::context(error, "locking", &path))),
        }
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
