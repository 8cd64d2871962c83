//! The I/O trait every durable file of prefixkv goes through: [`Disk`] (the namespace: open,
//! create and remove directories, rename, remove, list, sync a directory) and [`DiskFile`] (one
//! open file: read at, write at, append, sync, set length, lock).
//!
//! Two implementations: [`crate::RealDisk`] (std, rustix; the log's io_uring path reaches the file
//! descriptor through [`DiskFile::raw_fd`]) and [`crate::SimDisk`] (memory, with power cuts and
//! injected faults). Code above this module never calls `std::fs` for a file it must make durable.
//!
//! Invariants the implementations keep, and callers rely on:
//! - `write_at` may write fewer bytes than given (like `pwritev`); the `*_all` helpers loop.
//! - Written data is visible to every later read through any handle of the same file at once, but
//!   is durable only after `sync_data`/`sync_all` of that file returned `Ok`.
//! - A created, renamed or removed directory entry is durable only after `sync_dir` of the
//!   directory that holds it returned `Ok` (for a rename: of both directories).
//! - An error from a sync means the unsynced data may be lost even though reads still return it:
//!   a caller must never retry the sync and then treat the data as durable (fail-stop).

use std::fmt::Debug;
use std::io::{self, IoSlice, Read};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How [`Disk::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; created empty if missing, kept as it is otherwise.
    Create,
    /// Read and write; created empty, and the call fails with `AlreadyExists` if it exists.
    CreateNew,
}

impl OpenMode {
    /// Whether the mode may create the file.
    pub fn creates(self) -> bool {
        matches!(self, OpenMode::Create | OpenMode::CreateNew)
    }
}

/// One entry of [`Disk::list`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    /// The entry's name (entries whose name is not UTF-8 are left out of listings).
    pub name: String,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// What [`Disk::metadata`] says about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    /// Length in bytes (0 for a directory).
    pub len: u64,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// The file-system namespace: where files are opened, named, renamed and removed.
pub trait Disk: Send + Sync + Debug {
    /// Opens `path` in `mode`.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn DiskFile>>;
    /// Creates one directory; fails with `AlreadyExists` if it exists.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, replacing a file (or empty directory) at `to`. Atomic.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// The entries of a directory, sorted by name.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;
    /// Makes the entries of `dir` durable (creations, renames and removals in it).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Length and kind of `path`.
    fn metadata(&self, path: &Path) -> io::Result<Metadata>;
    /// A short name for logs: `"real"` or `"simulated"`.
    fn kind(&self) -> &'static str;
}

/// What the address, length and offset of a direct-I/O read or write must be multiples of: the
/// largest logical block size of the devices we run on (512-byte-sector devices accept it too).
pub const DIRECT_IO_ALIGNMENT: usize = 4096;

/// Whether a read or write of `bufs` at `offset` meets [`DIRECT_IO_ALIGNMENT`].
pub fn direct_io_aligned(bufs: &[IoSlice<'_>], offset: u64) -> bool {
    let aligned = |value: usize| value.is_multiple_of(DIRECT_IO_ALIGNMENT);
    aligned(offset as usize)
        && bufs
            .iter()
            .all(|buf| aligned(buf.as_ptr() as usize) && aligned(buf.len()))
}

/// One open file.
pub trait DiskFile: Send + Sync + Debug {
    /// Reads into `buf` from `offset`; returns how many bytes were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes `bufs` (in order) at `offset`; may write fewer bytes than given (like `pwritev`).
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize>;
    /// Makes the file's data (and its length) durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;
    /// Truncates or extends (with zeros) the file to `len` bytes (not durable until a sync).
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Takes an exclusive advisory lock on the file without waiting; `Ok(false)` if another
    /// handle (in this process or another) holds it. Released when this handle is dropped.
    fn try_lock(&self) -> io::Result<bool>;
    /// Turns direct I/O (`O_DIRECT`: reads and writes go to and from the device without the page
    /// cache) on or off for this handle, and returns whether it is now on. While it is on, every
    /// read's and write's buffer address, length and offset must be multiples of
    /// [`DIRECT_IO_ALIGNMENT`], or the call fails with `InvalidInput` (a read may still return
    /// fewer bytes than asked at the end of the file). `Ok(false)` for `on` means the file system has no direct
    /// I/O (tmpfs, for one): not an error, writes simply keep going through the page cache.
    /// Durability is unchanged either way: data is durable after [`sync_data`](Self::sync_data).
    fn set_direct_io(&self, on: bool) -> io::Result<bool>;
    /// The OS file descriptor of a real file, for fast paths (io_uring); `None` for simulated
    /// files, which must then be used through this trait only.
    fn raw_fd(&self) -> Option<RawFd>;
    /// The path the file was opened at (for error messages).
    fn path(&self) -> &Path;
}

impl dyn DiskFile + '_ {
    /// Writes all of `bytes` at `offset`.
    pub fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_vectored_at(&mut [IoSlice::new(bytes)], offset)
    }

    /// Writes all of `bufs` at `offset`, looping over short writes.
    pub fn write_all_vectored_at(
        &self,
        mut bufs: &mut [IoSlice<'_>],
        mut offset: u64,
    ) -> io::Result<()> {
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match self.write_at(bufs, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("{}: a write returned 0 bytes", self.path().display()),
                    ))
                }
                Ok(written) => {
                    offset += written as u64;
                    IoSlice::advance_slices(&mut bufs, written);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Appends `bytes` at the current end of the file (single writer: the caller must be the
    /// only one changing the file's length meanwhile); returns the offset they were written at.
    pub fn append(&self, bytes: &[u8]) -> io::Result<u64> {
        let offset = self.len()?;
        self.write_all_at(bytes, offset)?;
        Ok(offset)
    }

    /// Fills `buf` from `offset`; `UnexpectedEof` if the file ends first.
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "{}: the file ended at offset {offset} before the bytes expected",
                            self.path().display()
                        ),
                    ))
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Reads the whole file, refusing one longer than `limit` bytes (a length read from disk
    /// never sizes an allocation unchecked).
    pub fn read_to_end_bounded(&self, limit: u64) -> io::Result<Vec<u8>> {
        let len = self.len()?;
        if len > limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is {len} bytes, above the {limit}-byte limit for this kind of file",
                    self.path().display()
                ),
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        self.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }
}

/// A `std::io::Read` over a [`DiskFile`] from a starting offset (wrap it in a `BufReader`).
#[derive(Debug, Clone)]
pub struct FileReader {
    file: Arc<dyn DiskFile>,
    offset: u64,
}

impl FileReader {
    /// Reads `file` from `offset` on.
    pub fn new(file: Arc<dyn DiskFile>, offset: u64) -> FileReader {
        FileReader { file, offset }
    }

    /// The offset of the next byte to read.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Read for FileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Wraps `error` with what was being done and to which path, keeping its kind (so a caller can
/// still tell `StorageFull` from `NotFound`) and, when it has one, its OS error code in the text.
pub fn context(error: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{what} {}: {error}", path.display()))
}

/// Whether `path` exists on `disk` (an error other than `NotFound` is returned).
pub fn exists(disk: &dyn Disk, path: &Path) -> io::Result<bool> {
    match disk.metadata(path) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Creates `path` and any missing parents. Not durable by itself: see
/// [`crate::durable::create_dir_all_durably`].
pub fn create_dir_all(disk: &dyn Disk, path: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(dir) = at.filter(|dir| !dir.as_os_str().is_empty()) {
        match disk.metadata(dir) {
            Ok(metadata) if metadata.is_dir => break,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a directory", dir.display()),
                ))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => missing.push(dir),
            Err(error) => return Err(error),
        }
        at = dir.parent();
    }
    let mut created = Vec::new();
    for dir in missing.into_iter().rev() {
        match disk.create_dir(dir) {
            Ok(()) => created.push(dir.to_path_buf()),
            // Someone else created it meanwhile: fine.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
    }
    Ok(created)
}

/// Removes `path` and everything below it (deepest entries first). Not durable by itself.
pub fn remove_dir_all(disk: &dyn Disk, path: &Path) -> io::Result<()> {
    for entry in disk.list(path)? {
        let child = path.join(&entry.name);
        if entry.is_dir {
            remove_dir_all(disk, &child)?;
        } else {
            disk.remove_file(&child)?;
        }
    }
    disk.remove_dir(path)
}
