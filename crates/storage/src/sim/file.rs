//! An open file of the simulated disk: every call takes the disk's lock, checks that the machine
//! is alive and the handle not stale, counts mutating calls toward an armed power cut, and applies
//! injected faults before touching the state.

use super::state::{apply, stale, Pending, State};
use super::FaultOp;
use crate::io::DiskFile;
use parking_lot::Mutex;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An open file of a [`SimDisk`].
#[derive(Debug)]
pub(super) struct SimFile {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) id: u64,
    pub(super) generation: u64,
    pub(super) handle: u64,
    pub(super) path: PathBuf,
    pub(super) writable: bool,
    /// Direct I/O is on: reads and writes must be aligned as on a real device (see
    /// `set_direct_io`).
    pub(super) direct: AtomicBool,
}

impl SimFile {
    fn live<'a>(&self, state: &'a mut State) -> io::Result<&'a mut State> {
        state.alive()?;
        if state.generation != self.generation {
            return Err(stale());
        }
        Ok(state)
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} was opened read-only", self.path.display()),
            ))
        }
    }

    fn sync(&self, what: &str) -> io::Result<()> {
        let mut guard = self.state.lock();
        let state = self.live(&mut guard)?;
        state.mutate()?;
        if let Err(error) = state.fault(FaultOp::SyncFile, what, &self.path) {
            // Linux after a failed fsync: the dirty pages are marked clean, their data will
            // not reach the disk, and the next fsync has nothing to report.
            state.file(self.id).pending.clear();
            return Err(error);
        }
        let file = state.file(self.id);
        // (After an earlier failed sync, `durable` stays behind `current` for good: the data that
        // sync dropped is not rewritten by this one.)
        for op in std::mem::take(&mut file.pending) {
            apply(&mut file.durable, &op);
        }
        Ok(())
    }
}

impl DiskFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.direct.load(Ordering::Relaxed)
            && !crate::io::direct_io_aligned(&[IoSlice::new(buf)], offset)
        {
            // What Linux answers a misaligned O_DIRECT read (EINVAL), as for writes below.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "misaligned direct read of {} at offset {offset}",
                    self.path.display()
                ),
            ));
        }
        let mut guard = self.state.lock();
        let state = self.live(&mut guard)?;
        let current = &state.file(self.id).current;
        let start = (offset as usize).min(current.len());
        let n = buf.len().min(current.len() - start);
        buf[..n].copy_from_slice(&current[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.check_writable()?;
        if self.direct.load(Ordering::Relaxed) && !crate::io::direct_io_aligned(bufs, offset) {
            // What Linux answers a misaligned O_DIRECT write (EINVAL), so that tests on the
            // simulated disk hold writers to the same alignment as a real device.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "misaligned direct write to {} at offset {offset}",
                    self.path.display()
                ),
            ));
        }
        let mut guard = self.state.lock();
        let state = self.live(&mut guard)?;
        state.mutate()?;
        state.fault(FaultOp::Write, "write", &self.path)?;
        let data: Vec<u8> = bufs.iter().flat_map(|buf| buf.iter().copied()).collect();
        let written = data.len();
        if written == 0 {
            return Ok(0);
        }
        let op = Pending::Write { offset, data };
        let file = state.file(self.id);
        apply(&mut file.current, &op);
        file.pending.push(op);
        Ok(written)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync("fdatasync")
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync("fsync")
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut guard = self.state.lock();
        let state = self.live(&mut guard)?;
        state.mutate()?;
        state.fault(FaultOp::SetLen, "set_len", &self.path)?;
        let op = Pending::SetLen(len);
        let file = state.file(self.id);
        apply(&mut file.current, &op);
        file.pending.push(op);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let mut guard = self.state.lock();
        let state = self.live(&mut guard)?;
        Ok(state.file(self.id).current.len() as u64)
    }

    fn try_lock(&self) -> io::Result<bool> {
        let mut guard = self.state.lock();
        let state = self.live(&mut guard)?;
        match state.locks.get(&self.id) {
            Some(&holder) => Ok(holder == self.handle),
            None => {
                state.locks.insert(self.id, self.handle);
                Ok(true)
            }
        }
    }

    fn set_direct_io(&self, on: bool) -> io::Result<bool> {
        self.direct.store(on, Ordering::Relaxed);
        Ok(on)
    }

    fn raw_fd(&self) -> Option<RawFd> {
        None
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        if state.generation == self.generation && state.locks.get(&self.id) == Some(&self.handle) {
            state.locks.remove(&self.id);
        }
    }
}
