//! Making whole files and directory entries durable: the write-temp, fsync, rename,
//! fsync-directory sequence, directory fsync, and durable directory creation.
//!
//! Crash-safety argument for [`write_file_durably`] (see `docs/storage.md`):
//! 1. The bytes go to `<name>.tmp` (a leftover temp from an earlier crash is replaced), which is
//!    `fsync`ed: the new content is durable under the temporary name before anything points at it.
//! 2. `rename(<name>.tmp, <name>)` replaces the old file atomically: a reader (or a reboot) sees
//!    the old content or the new, never a mixture, and never a partial file.
//! 3. The directory is `fsync`ed, so the rename itself survives a power cut. Only then does the
//!    call return, so a caller that acknowledges after it never acknowledges a write that a power
//!    cut can take back. Before step 3, a cut leaves either the old file (the rename was lost)
//!    or the new one, both complete.
//!
//! Any error is returned with the path and the step; nothing here retries a failed fsync.

use crate::io::{self, Disk, DiskFile, OpenMode};
use std::path::{Path, PathBuf};

/// Suffix of the temporary file [`write_file_durably`] writes first.
pub const TEMP_SUFFIX: &str = ".tmp";

/// The directory holding `path` (`.` for a bare name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `fsync` of a directory: its entries created, renamed or removed so far become durable.
pub fn sync_dir(disk: &dyn Disk, dir: &Path) -> std::io::Result<()> {
    disk.sync_dir(dir)
        .map_err(|error| io::context(error, "fsync of the directory", dir))
}

/// Replaces the file at `path` with `bytes` durably and atomically (temp, write, fsync, rename,
/// directory fsync; see the module docs). The directory must exist.
pub fn write_file_durably(disk: &dyn Disk, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_file_durably_with(disk, path, |file| file.write_all_at(bytes, 0))
}

/// [`write_file_durably`] for content too large to hold in memory: `write` fills the temporary
/// file (through `write_at`, from offset 0, in as many calls as it likes); then the same fsync,
/// rename and directory fsync follow. An error from `write` stops the sequence before the rename,
/// so `path` keeps its old content; the temporary file is left for the next call to replace.
pub fn write_file_durably_with(
    disk: &dyn Disk,
    path: &Path,
    write: impl FnOnce(&dyn DiskFile) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut temp_name = path.as_os_str().to_owned();
    temp_name.push(TEMP_SUFFIX);
    let temp = PathBuf::from(temp_name);
    match disk.remove_file(&temp) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(io::context(
                error,
                "removing the stale temporary file",
                &temp,
            ))
        }
    }
    let file = disk
        .open(&temp, OpenMode::CreateNew)
        .map_err(|error| io::context(error, "creating", &temp))?;
    write(&*file).map_err(|error| io::context(error, "writing", &temp))?;
    file.sync_all()
        .map_err(|error| io::context(error, "fsync of", &temp))?;
    drop(file);
    disk.rename(&temp, path).map_err(|error| {
        io::context(
            error,
            &format!("renaming to {} the file", path.display()),
            &temp,
        )
    })?;
    sync_dir(disk, &parent_dir(path))
}

/// Creates `path` and any missing parents, and makes each new entry durable (fsync of the
/// directory that holds it). Returns whether `path` was created.
pub fn create_dir_all_durably(disk: &dyn Disk, path: &Path) -> std::io::Result<bool> {
    let created = io::create_dir_all(disk, path)
        .map_err(|error| io::context(error, "creating the directory", path))?;
    for dir in &created {
        sync_dir(disk, &parent_dir(dir))?;
    }
    Ok(!created.is_empty())
}

/// Reads a whole file of at most `limit` bytes; `Ok(None)` if it does not exist.
pub fn read_file(disk: &dyn Disk, path: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let file = match disk.open(path, OpenMode::Read) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io::context(error, "opening", path)),
    };
    file.read_to_end_bounded(limit)
        .map(Some)
        .map_err(|error| io::context(error, "reading", path))
}

/// Suffix a directory gets while [`remove_dir_all_durably`] deletes it.
pub const REMOVING_SUFFIX: &str = ".removing";

/// `<dir>.removing`: where [`remove_dir_all_durably`] moves `dir` before deleting it.
pub fn removing_name(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(REMOVING_SUFFIX);
    PathBuf::from(name)
}

/// Removes `dir` and everything in it so that a crash at any moment leaves either the whole
/// directory under its name, or nothing under that name: first a durable rename to
/// `<dir>.removing` (a rename is atomic, and the fsync of the parent makes it survive a power
/// cut), then the deletion, then an fsync of the parent. A leftover `<dir>.removing` of an
/// earlier crash is deleted first; owners of a directory call [`remove_leftover`] when they open
/// it so that none lingers. Missing `dir`: nothing to do.
pub fn remove_dir_all_durably(disk: &dyn Disk, dir: &Path) -> std::io::Result<()> {
    remove_leftover(disk, dir)?;
    let removing = removing_name(dir);
    match disk.rename(dir, &removing) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(io::context(
                error,
                &format!("renaming to {} the directory", removing.display()),
                dir,
            ))
        }
    }
    sync_dir(disk, &parent_dir(dir))?;
    remove_leftover(disk, dir)
}

/// Deletes `<dir>.removing` (left by a crash inside [`remove_dir_all_durably`]) if it exists.
pub fn remove_leftover(disk: &dyn Disk, dir: &Path) -> std::io::Result<()> {
    let removing = removing_name(dir);
    if disk.metadata(&removing).is_err() {
        return Ok(());
    }
    remove_tree(disk, &removing)?;
    sync_dir(disk, &parent_dir(&removing))
}

fn remove_tree(disk: &dyn Disk, dir: &Path) -> std::io::Result<()> {
    let entries = disk
        .list(dir)
        .map_err(|error| io::context(error, "listing", dir))?;
    for entry in entries {
        let path = dir.join(&entry.name);
        if entry.is_dir {
            remove_tree(disk, &path)?;
        } else {
            disk.remove_file(&path)
                .map_err(|error| io::context(error, "removing", &path))?;
        }
    }
    disk.remove_dir(dir)
        .map_err(|error| io::context(error, "removing the directory", dir))
}
