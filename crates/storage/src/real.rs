//! [`RealDisk`]: the [`Disk`] trait on the operating system's file system (std and rustix).
//!
//! Each call is the one system call its name says (`pwritev`, `fdatasync`, `fsync`, `rename`,
//! `flock`, ...); nothing is buffered here, so the durability rules of the trait are exactly the
//! kernel's. The file descriptor is exposed through [`DiskFile::raw_fd`] for io_uring.

use crate::io::{DirEntry, Disk, DiskFile, Metadata, OpenMode};
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealDisk;

/// The shared real disk (what every configuration defaults to).
pub fn real_disk() -> Arc<dyn Disk> {
    static DISK: OnceLock<Arc<dyn Disk>> = OnceLock::new();
    Arc::clone(DISK.get_or_init(|| Arc::new(RealDisk)))
}

/// An open file of the real disk.
#[derive(Debug)]
pub struct RealFile {
    file: File,
    path: PathBuf,
}

impl RealFile {
    /// The std file (for callers that need more than the trait, e.g. `posix_fadvise`).
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Disk for RealDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn DiskFile>> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                options.write(true);
            }
            OpenMode::Create => {
                options.write(true).create(true).truncate(false);
            }
            OpenMode::CreateNew => {
                options.write(true).create_new(true);
            }
        }
        let file = options.open(path)?;
        Ok(Arc::new(RealFile {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let is_dir = entry.file_type()?.is_dir();
            entries.push(DirEntry { name, is_dir });
        }
        entries.sort();
        Ok(entries)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        let metadata = fs::metadata(path)?;
        Ok(Metadata {
            len: if metadata.is_dir() { 0 } else { metadata.len() },
            is_dir: metadata.is_dir(),
        })
    }

    fn kind(&self) -> &'static str {
        "real"
    }
}

impl DiskFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        loop {
            match rustix::io::pwritev(&self.file, bufs, offset) {
                Ok(written) => return Ok(written),
                Err(rustix::io::Errno::INTR) => continue,
                Err(error) => return Err(error.into()),
            }
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(rustix::fs::fdatasync(&self.file)?)
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn try_lock(&self) -> io::Result<bool> {
        match rustix::fs::flock(
            &self.file,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        ) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    fn set_direct_io(&self, on: bool) -> io::Result<bool> {
        use rustix::fs::OFlags;
        let flags = rustix::fs::fcntl_getfl(&self.file)?;
        let wanted = if on {
            flags | OFlags::DIRECT
        } else {
            flags - OFlags::DIRECT
        };
        if wanted == flags {
            return Ok(on);
        }
        match rustix::fs::fcntl_setfl(&self.file, wanted) {
            Ok(()) => Ok(on),
            // The file system has no O_DIRECT (tmpfs, some FUSE): stay buffered.
            Err(rustix::io::Errno::INVAL) if on => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn path(&self) -> &Path {
        &self.path
    }
}
