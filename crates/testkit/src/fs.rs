//! File helpers for tests that copy a store's directory aside (to recover a checkpoint from a
//! copy, or to put an older state back as a tamper).

use std::path::Path;

/// Copies the directory `from` into `to` (created if missing), subdirectories included. Only
/// regular files and directories are expected: a store's directory holds nothing else.
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
