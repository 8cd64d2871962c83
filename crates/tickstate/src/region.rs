//! Large zero-initialised arrays of atomic cells.
//!
//! Outside loom a [`Region`] is an anonymous private `mmap`, so it starts zeroed (the kernel
//! hands out zero pages lazily), is page aligned — 2 MiB aligned when `huge_pages` asks for
//! `madvise(MADV_HUGEPAGE)` (§5.6 of the paper), so transparent huge pages can back all of it;
//! a refused advice is logged once and counted ([`huge_pages_status`]) — and is
//! returned to the kernel on drop. Every page is touched at creation, so the arrays are resident
//! before the first checkpoint (no page faults inside measured ticks). Every element type used here is valid when all its bytes
//! are zero (atomics of integers and `repr(C)` records of them): that is the `ZeroValid`
//! contract.

use crate::sync::{AtomicU64, AtomicU8};

/// Types whose all-zero bit pattern is a valid value equal to "zero".
///
/// # Safety
/// An implementer must be valid when every byte is zero, and must have no drop glue.
pub(crate) unsafe trait ZeroValid: Sized {
    /// A fresh zero value (used under loom, where atomics cannot come from raw memory).
    #[cfg(loom)]
    fn zero() -> Self;
}

// SAFETY: integer atomics are plain integers in memory; zero is valid.
unsafe impl ZeroValid for AtomicU64 {
    #[cfg(loom)]
    fn zero() -> Self {
        AtomicU64::new(0)
    }
}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicU8 {
    #[cfg(loom)]
    fn zero() -> Self {
        AtomicU8::new(0)
    }
}

#[cfg(not(loom))]
const SMALL_PAGE_BYTES: usize = 4096;
#[cfg(not(loom))]
const HUGE_PAGE_BYTES: usize = 2 << 20;

static HUGE_PAGE_REFUSALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static HUGE_PAGE_ADVISED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
#[cfg(not(loom))]
use std::sync::atomic::Ordering::Relaxed;

/// What became of the huge-page advice in this process (see [`huge_pages_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugePagesStatus {
    /// Bytes of arrays for which `madvise(MADV_HUGEPAGE)` succeeded (cumulative).
    pub advised_bytes: u64,
    /// Calls the kernel refused (each logged once to stderr).
    pub refusals: u64,
    /// The kernel's transparent huge page mode (`/sys/kernel/mm/transparent_hugepage/enabled`,
    /// the bracketed word), if readable: with `never`, the advice is accepted but has no effect.
    pub kernel_mode: Option<String>,
    /// Anonymous memory of this process backed by huge pages right now (`AnonHugePages` of
    /// `/proc/self/smaps_rollup`), if readable.
    pub anon_huge_bytes: Option<u64>,
}

/// The huge-page advice given so far, and what the kernel actually did with it.
pub fn huge_pages_status() -> HugePagesStatus {
    let kernel_mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|text| {
            let start = text.find('[')?;
            let end = text[start..].find(']')?;
            Some(text[start + 1..start + end].to_string())
        });
    let anon_huge_bytes = std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|text| {
            let line = text
                .lines()
                .find(|line| line.starts_with("AnonHugePages:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    HugePagesStatus {
        advised_bytes: HUGE_PAGE_ADVISED_BYTES.load(std::sync::atomic::Ordering::Relaxed),
        refusals: HUGE_PAGE_REFUSALS.load(std::sync::atomic::Ordering::Relaxed),
        kernel_mode,
        anon_huge_bytes,
    }
}

/// A fixed-length array of `T`, zero-initialised.
pub(crate) struct Region<T: ZeroValid> {
    #[cfg(not(loom))]
    pointer: std::ptr::NonNull<T>,
    #[cfg(not(loom))]
    mapped_bytes: usize,
    #[cfg(loom)]
    cells: Box<[T]>,
    len: usize,
}

// SAFETY: a Region owns its memory like a Box<[T]>; T's own Send/Sync decide.
unsafe impl<T: ZeroValid + Send> Send for Region<T> {}
// SAFETY: as above; shared access only hands out &T.
unsafe impl<T: ZeroValid + Sync> Sync for Region<T> {}

impl<T: ZeroValid> Region<T> {
    /// `len` zeroed cells; with `huge_pages`, advise the kernel to back them with huge pages.
    pub(crate) fn new(len: usize, huge_pages: bool) -> std::io::Result<Region<T>> {
        #[cfg(loom)]
        {
            let _ = huge_pages;
            let cells: Box<[T]> = (0..len).map(|_| T::zero()).collect();
            Ok(Region { cells, len })
        }
        #[cfg(not(loom))]
        {
            let bytes = len
                .checked_mul(std::mem::size_of::<T>())
                .ok_or_else(|| std::io::Error::other("region size overflows usize"))?;
            let mapped_bytes = bytes.max(1);
            // With huge pages, map 2 MiB more and start at a 2 MiB boundary, so that the whole
            // array can be backed by huge pages (a transparent huge page must be 2 MiB aligned).
            let slack_bytes = if huge_pages { HUGE_PAGE_BYTES } else { 0 };
            let reserved_bytes = mapped_bytes
                .checked_add(slack_bytes)
                .ok_or_else(|| std::io::Error::other("region size overflows usize"))?;
            // SAFETY: anonymous private mapping with no address hint; checked for MAP_FAILED.
            let reserved = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    reserved_bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if reserved == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let raw = if huge_pages {
                let address = reserved as usize;
                let aligned = address.next_multiple_of(HUGE_PAGE_BYTES);
                let head_bytes = aligned - address;
                let tail_bytes = slack_bytes - head_bytes;
                // Return the unaligned head and the unused tail to the kernel. SAFETY: both
                // ranges are page-aligned parts of the mapping just created, used by nobody.
                unsafe {
                    if head_bytes > 0 {
                        libc::munmap(reserved, head_bytes);
                    }
                    let end = aligned + mapped_bytes.next_multiple_of(SMALL_PAGE_BYTES);
                    let tail = address + reserved_bytes - end;
                    debug_assert!(tail <= tail_bytes);
                    if tail > 0 {
                        libc::munmap(end as *mut libc::c_void, tail);
                    }
                }
                let raw = aligned as *mut libc::c_void;
                // SAFETY: the range is inside the mapping just created.
                if unsafe { libc::madvise(raw, mapped_bytes, libc::MADV_HUGEPAGE) } != 0 {
                    // Advice only: ordinary pages are correct, just slower. Say so once.
                    let error = std::io::Error::last_os_error();
                    if HUGE_PAGE_REFUSALS.fetch_add(1, Relaxed) == 0 {
                        eprintln!(
                            "tickstate: madvise(MADV_HUGEPAGE) refused ({error}); continuing with \
                             ordinary 4 KiB pages"
                        );
                    }
                } else {
                    HUGE_PAGE_ADVISED_BYTES.fetch_add(mapped_bytes as u64, Relaxed);
                }
                raw
            } else {
                reserved
            };
            // Fault every page in now (after the huge-page advice, so the kernel can use huge
            // pages), so that the first checkpoints do not pay page faults and the memory is
            // really reserved. MADV_POPULATE_WRITE (Linux 5.14) does it in one call; older
            // kernels refuse it and get one write per page.
            // SAFETY: the range is inside the mapping just created.
            let populated =
                unsafe { libc::madvise(raw, mapped_bytes, libc::MADV_POPULATE_WRITE) } == 0;
            if !populated {
                for offset in (0..mapped_bytes).step_by(SMALL_PAGE_BYTES) {
                    // SAFETY: inside the fresh private mapping, which nobody else can see yet;
                    // writing zero keeps it all-zero.
                    unsafe { raw.cast::<u8>().add(offset).write_volatile(0) };
                }
            }
            debug_assert_eq!(raw as usize % std::mem::align_of::<T>(), 0);
            let pointer = std::ptr::NonNull::new(raw.cast::<T>()).expect("mmap returned null");
            Ok(Region {
                pointer,
                mapped_bytes,
                len,
            })
        }
    }

    /// The cells.
    #[inline]
    pub(crate) fn cells(&self) -> &[T] {
        #[cfg(loom)]
        {
            &self.cells
        }
        #[cfg(not(loom))]
        // SAFETY: the mapping holds `len` zero-valid `T`s and lives as long as `self`.
        unsafe {
            std::slice::from_raw_parts(self.pointer.as_ptr(), self.len)
        }
    }

    /// Bytes of memory this region reserves.
    pub(crate) fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
}

#[cfg(not(loom))]
impl<T: ZeroValid> Drop for Region<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`; T has no drop glue.
        unsafe { libc::munmap(self.pointer.as_ptr().cast(), self.mapped_bytes) };
    }
}
