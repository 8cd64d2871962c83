//! Hardware counters (instructions, cache misses) around a run, through `perf_event_open`.
//!
//! Counters are opened on the calling thread with `inherit`, before the worker threads exist, so
//! they count every worker (a child's counts join the parent's when it exits, and workers exit
//! before [`Counters::read`]). Where the kernel or the virtual machine offers no hardware
//! counters (this project's machines do not), opening fails and the figures are reported as
//! null, never as zero.

use std::os::fd::{FromRawFd, OwnedFd};

// From <linux/perf_event.h>.
const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_INHERIT: u64 = 1 << 1;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;

/// `struct perf_event_attr` up to `config2` (version 2 layout, 80 bytes); the rest is zero.
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
}

fn open(config: u64) -> Option<OwnedFd> {
    let attr = Attr {
        kind: PERF_TYPE_HARDWARE,
        size: std::mem::size_of::<Attr>() as u32,
        config,
        flags: FLAG_DISABLED | FLAG_INHERIT | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
        ..Attr::default()
    };
    // SAFETY: the attribute struct is valid for the declared size; pid 0 / cpu -1 = this thread
    // on any CPU; no group, no flags.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const Attr,
            0,
            -1,
            -1,
            0,
        )
    };
    // SAFETY: a non-negative return is a new file descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Open counters, enabled.
pub struct Counters {
    instructions: OwnedFd,
    cache_misses: OwnedFd,
}

/// What a run counted.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// Instructions retired in user space.
    pub instructions: u64,
    /// Last-level cache misses.
    pub cache_misses: u64,
}

impl Counters {
    /// Opens and enables both counters; `None` where hardware counters are unavailable.
    pub fn start() -> Option<Counters> {
        let counters = Counters {
            instructions: open(PERF_COUNT_HW_INSTRUCTIONS)?,
            cache_misses: open(PERF_COUNT_HW_CACHE_MISSES)?,
        };
        for fd in [&counters.instructions, &counters.cache_misses] {
            use std::os::fd::AsRawFd;
            // SAFETY: an ioctl without argument on a perf event descriptor we own.
            unsafe { libc::ioctl(fd.as_raw_fd(), IOC_ENABLE, 0) };
        }
        Some(counters)
    }

    /// Stops counting and reads both counters.
    pub fn read(self) -> Option<Counts> {
        use std::os::fd::AsRawFd;
        let read = |fd: &OwnedFd| -> Option<u64> {
            let mut value = 0u64;
            // SAFETY: ioctl and read of 8 bytes into a u64 we own, on a descriptor we own.
            let got = unsafe {
                libc::ioctl(fd.as_raw_fd(), IOC_DISABLE, 0);
                libc::read(fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8)
            };
            (got == 8).then_some(value)
        };
        Some(Counts {
            instructions: read(&self.instructions)?,
            cache_misses: read(&self.cache_misses)?,
        })
    }
}
