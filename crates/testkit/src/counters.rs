//! Client-side counters that survive the SIGKILL of the process that wrote them.
//!
//! A crash test's oracle needs what the clients knew at the moment of the kill: per session, the
//! last serial it *issued* (an upper bound of anything the store can hold) and the last serial it
//! was *acknowledged* (work the store promised to keep once a covering checkpoint is durable).
//! Lines on a pipe lag behind; a file mapped `MAP_SHARED` does not: the child stores a counter
//! into the mapping before (issued) or after (acknowledged) each operation, the stores land in the
//! kernel's page cache at once, and the parent reads the file after the child died. A kill keeps
//! the page cache, so nothing the child stored is lost (this is the point of SIGKILL tests: a
//! power cut is simulated elsewhere).
//!
//! Invariant: counters only grow (`fetch_max`), so a reader sees a value the child really stored.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// `count` u64 counters in a file, shared with every process that maps it.
pub struct SharedCounters {
    base: *mut AtomicU64,
    count: usize,
}

// SAFETY: the mapping is only accessed through atomics and lives until `drop`.
unsafe impl Send for SharedCounters {}
// SAFETY: as above; every access is an atomic operation.
unsafe impl Sync for SharedCounters {}

impl SharedCounters {
    /// Creates (or truncates) the file at `path` with `count` zero counters and maps it.
    pub fn create(path: &Path, count: usize) -> std::io::Result<SharedCounters> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len((count.max(1) * 8) as u64)?;
        Self::map(&file, count)
    }

    /// Maps an existing file made by [`SharedCounters::create`].
    pub fn open(path: &Path) -> std::io::Result<SharedCounters> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let count = (file.metadata()?.len() / 8) as usize;
        Self::map(&file, count)
    }

    fn map(file: &std::fs::File, count: usize) -> std::io::Result<SharedCounters> {
        use std::os::fd::AsRawFd;
        let length = count.max(1) * 8;
        // SAFETY: a fresh shared mapping of a file we hold open with the right length; the
        // pointer is page-aligned, so every 8-byte slot is aligned for AtomicU64.
        let pointer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                length,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if pointer == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedCounters {
            base: pointer as *mut AtomicU64,
            count,
        })
    }

    /// Counter `index`.
    pub fn get(&self, index: usize) -> &AtomicU64 {
        assert!(index < self.count, "counter {index} of {}", self.count);
        // SAFETY: in bounds of the live mapping; the mapping outlives `&self`.
        unsafe { &*self.base.add(index) }
    }

    /// Raises counter `index` to `value` (never lowers it).
    pub fn raise(&self, index: usize, value: u64) {
        self.get(index).fetch_max(value, Ordering::Release);
    }

    /// Every counter's current value.
    pub fn values(&self) -> Vec<u64> {
        (0..self.count)
            .map(|index| self.get(index).load(Ordering::Acquire))
            .collect()
    }

    /// Reads the counters from the file at `path` (after the writer died), without mapping it.
    pub fn read_file(path: &Path) -> std::io::Result<Vec<u64>> {
        let bytes = std::fs::read(path)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|chunk| u64::from_ne_bytes(chunk.try_into().expect("8 bytes")))
            .collect())
    }
}

impl Drop for SharedCounters {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference outlives `self`.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.count.max(1) * 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_shared_through_the_file() {
        let dir = std::env::temp_dir().join(format!("testkit-counters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("counters");
        let writer = SharedCounters::create(&path, 3).unwrap();
        writer.raise(1, 42);
        writer.raise(1, 7);
        let other = SharedCounters::open(&path).unwrap();
        assert_eq!(other.values(), vec![0, 42, 0]);
        drop(writer);
        assert_eq!(SharedCounters::read_file(&path).unwrap(), vec![0, 42, 0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
