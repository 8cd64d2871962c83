//! Large zero-initialised arrays of atomic cells.
//!
//! Outside loom a [`Region`] is an anonymous private `mmap`, so it starts zeroed (the kernel
//! hands out zero pages lazily), is page aligned (so 2 MiB transparent huge pages can back it
//! when `huge_pages` asks for `madvise(MADV_HUGEPAGE)`, as in §5.6 of the paper), and is
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
            // SAFETY: anonymous private mapping with no address hint; checked for MAP_FAILED.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    mapped_bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            if huge_pages {
                // Advice only: failure (no THP support) leaves ordinary pages, which is correct.
                // SAFETY: the range is the mapping just created.
                unsafe { libc::madvise(raw, mapped_bytes, libc::MADV_HUGEPAGE) };
            }
            // Fault every page in now (after the huge-page advice), so that the first
            // checkpoints do not pay page faults and the memory is really reserved.
            let page_bytes = 4096;
            for offset in (0..mapped_bytes).step_by(page_bytes) {
                // SAFETY: inside the fresh private mapping, which nobody else can see yet;
                // writing zero keeps it all-zero.
                unsafe { raw.cast::<u8>().add(offset).write_volatile(0) };
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
