//! The two ways the I/O thread writes a group: io_uring (a `Writev` linked to an
//! `Fsync(DATASYNC)`, one submission, one wait) on a real file's descriptor, or the
//! [`crate::DiskFile`] trait's `write_at` + `sync_data` (`pwritev` + `fdatasync` on the real disk,
//! the simulated disk's calls in tests).
//!
//! Invariants: a backend is owned by the I/O thread alone, so the buffers and iovecs handed to the
//! ring stay alive and unmoved until both completions have been reaped (`submit_and_wait` returns
//! only then, and we reap before returning). A short write is completed by further writes before
//! any sync, so a sync never claims bytes that were not written. A failed sync is returned to the
//! caller, which treats the log as failed (no retry: after a failed fsync the kernel may have
//! dropped the dirty pages, so retrying could falsely report durability).

use crate::io::DiskFile;
use std::io;
use std::os::fd::RawFd;

/// Which backend to use, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// io_uring when the probe succeeds, otherwise `pwritev`.
    #[default]
    Auto,
    /// io_uring or fail to open.
    IoUring,
    /// The disk trait's `write_at` + `sync_data` (`pwritev` + `fdatasync` on a real disk), even
    /// where io_uring works.
    Pwritev,
}

/// The backend in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// A linked `Writev` → `Fsync(DATASYNC)` on an io_uring ring.
    IoUring,
    /// The disk trait's `write_at` then `sync_data` (`pwritev` then `fdatasync` on a real disk).
    Pwritev,
}

impl BackendKind {
    /// A short name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::IoUring => "io_uring",
            BackendKind::Pwritev => "pwritev",
        }
    }
}

/// A backend instance, owned by the I/O thread.
pub(crate) enum Backend {
    // Boxed: the ring is a few hundred bytes and the enum is moved into the I/O thread.
    IoUring(Box<io_uring::IoUring>),
    Pwritev,
}

/// Tries to build a ring and run a no-op plus an opcode probe on it. The error text says why
/// io_uring cannot be used (EPERM from seccomp, ENOSYS, the `kernel.io_uring_disabled` sysctl).
pub(crate) fn probe_io_uring() -> Result<io_uring::IoUring, String> {
    let disabled_sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| s != "0");
    let explain = |what: &str, e: io::Error| -> String {
        let mut text = format!("{what}: {e}");
        if let Some(value) = &disabled_sysctl {
            text.push_str(&format!(" (kernel.io_uring_disabled = {value})"));
        } else if e.raw_os_error() == Some(libc::EPERM) {
            text.push_str(
                " (blocked, probably by a seccomp filter such as Docker's default profile)",
            );
        }
        text
    };
    let ring = io_uring::IoUring::new(8).map_err(|e| explain("io_uring_setup failed", e))?;
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_ok() {
        for (code, name) in [
            (io_uring::opcode::Writev::CODE, "Writev"),
            (io_uring::opcode::Fsync::CODE, "Fsync"),
            (io_uring::opcode::Nop::CODE, "Nop"),
        ] {
            if !probe.is_supported(code) {
                return Err(format!(
                    "io_uring opcode {name} is not supported by this kernel"
                ));
            }
        }
    }
    let mut ring = ring;
    let nop = io_uring::opcode::Nop::new().build().user_data(7);
    // SAFETY: a no-op references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| "io_uring submission queue full".to_string())?;
    ring.submit_and_wait(1)
        .map_err(|e| explain("io_uring_enter failed", e))?;
    let completion = ring
        .completion()
        .next()
        .ok_or("io_uring no-op produced no completion")?;
    if completion.result() < 0 {
        let e = io::Error::from_raw_os_error(-completion.result());
        return Err(explain("io_uring no-op failed", e));
    }
    Ok(ring)
}

/// Builds the backend for `choice` on a disk of kind `disk_kind`, logging which one is used.
/// A simulated disk has no file descriptors, so it always gets the trait's calls.
pub(crate) fn select(choice: BackendChoice, disk_kind: &str) -> Result<Backend, String> {
    if disk_kind != "real" {
        return match choice {
            BackendChoice::IoUring => Err(format!(
                "io_uring needs file descriptors, and the {disk_kind} disk has none"
            )),
            BackendChoice::Auto | BackendChoice::Pwritev => Ok(Backend::Pwritev),
        };
    }
    match choice {
        BackendChoice::Pwritev => {
            tracing::info!(
                backend = "pwritev",
                "oplog backend: pwritev + fdatasync (forced by config)"
            );
            Ok(Backend::Pwritev)
        }
        BackendChoice::IoUring => {
            let ring = probe_io_uring()?;
            tracing::info!(
                backend = "io_uring",
                "oplog backend: io_uring linked Writev -> Fsync (forced by config)"
            );
            Ok(Backend::IoUring(Box::new(ring)))
        }
        BackendChoice::Auto => match probe_io_uring() {
            Ok(ring) => {
                tracing::info!(
                    backend = "io_uring",
                    "oplog backend: io_uring linked Writev -> Fsync"
                );
                Ok(Backend::IoUring(Box::new(ring)))
            }
            Err(why) => {
                tracing::info!(backend = "pwritev", reason = %why, "oplog backend: pwritev + fdatasync (io_uring unavailable)");
                Ok(Backend::Pwritev)
            }
        },
    }
}

impl Backend {
    pub(crate) fn kind(&self) -> BackendKind {
        match self {
            Backend::IoUring(_) => BackendKind::IoUring,
            Backend::Pwritev => BackendKind::Pwritev,
        }
    }

    /// Writes `bytes` at `offset` of `file`, then, if `sync`, makes them durable with
    /// `fdatasync` semantics. Returns only when both are complete.
    pub(crate) fn write_at(
        &mut self,
        file: &dyn DiskFile,
        offset: u64,
        bytes: &[u8],
        sync: bool,
    ) -> io::Result<()> {
        match (self, file.raw_fd()) {
            (Backend::IoUring(ring), Some(fd)) => uring_write_at(ring, fd, offset, bytes, sync),
            _ => {
                file.write_all_at(bytes, offset)?;
                if sync {
                    file.sync_data()?;
                }
                Ok(())
            }
        }
    }

    /// `fdatasync` of `file`.
    pub(crate) fn sync(&mut self, file: &dyn DiskFile) -> io::Result<()> {
        match (self, file.raw_fd()) {
            (Backend::IoUring(ring), Some(fd)) => uring_write_at(ring, fd, 0, &[], true),
            _ => file.sync_data(),
        }
    }
}

const WRITE_TAG: u64 = 1;
const SYNC_TAG: u64 = 2;

/// One submission of a `Writev` (when there are bytes) linked to an `Fsync(DATASYNC)` (when
/// `sync`), repeated for the remainder after a short write.
fn uring_write_at(
    ring: &mut io_uring::IoUring,
    fd: RawFd,
    mut offset: u64,
    mut bytes: &[u8],
    sync: bool,
) -> io::Result<()> {
    let fd = io_uring::types::Fd(fd);
    loop {
        // Lives until both completions are reaped below, within this iteration.
        let iovec = [libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        }];
        let mut wanted = 0;
        {
            let mut queue = ring.submission();
            if !bytes.is_empty() {
                let mut write = io_uring::opcode::Writev::new(fd, iovec.as_ptr(), 1)
                    .offset(offset)
                    .build()
                    .user_data(WRITE_TAG);
                if sync {
                    write = write.flags(io_uring::squeue::Flags::IO_LINK);
                }
                // SAFETY: `iovec` and `bytes` outlive the completion (reaped before this loop
                // iteration ends) and this thread owns the ring.
                unsafe { queue.push(&write) }
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
                wanted += 1;
            }
            if sync {
                let fsync = io_uring::opcode::Fsync::new(fd)
                    .flags(io_uring::types::FsyncFlags::DATASYNC)
                    .build()
                    .user_data(SYNC_TAG);
                // SAFETY: references only the file descriptor, which stays open.
                unsafe { queue.push(&fsync) }
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
                wanted += 1;
            }
        }
        if wanted == 0 {
            return Ok(());
        }
        let mut reaped = 0;
        let mut written: Option<i32> = None;
        let mut synced: Option<i32> = None;
        while reaped < wanted {
            match ring.submit_and_wait(wanted - reaped) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            for completion in ring.completion() {
                reaped += 1;
                match completion.user_data() {
                    WRITE_TAG => written = Some(completion.result()),
                    SYNC_TAG => synced = Some(completion.result()),
                    other => {
                        return Err(io::Error::other(format!(
                            "unexpected io_uring completion {other}"
                        )))
                    }
                }
            }
        }
        if let Some(result) = written {
            if result < 0 {
                return Err(io::Error::from_raw_os_error(-result));
            }
            let n = result as usize;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "io_uring Writev wrote 0 bytes",
                ));
            }
            if n < bytes.len() {
                // A short write breaks the link: the fsync was cancelled. Write the rest (and
                // sync) in the next round.
                bytes = &bytes[n..];
                offset += n as u64;
                continue;
            }
        }
        if let Some(result) = synced {
            if result < 0 {
                return Err(io::Error::from_raw_os_error(-result));
            }
        }
        return Ok(());
    }
}
