//! Large zeroed regions for the index and log pages, mapped straight from the kernel.
//!
//! Invariants:
//! - A region of 2 MiB or more is an anonymous private mapping of its own, so its bytes are zero
//!   until written and nothing in user space touches them first. (`std::alloc::alloc_zeroed` with
//!   an alignment above 16 bytes allocates and then `memset`s, faulting in and zeroing every page a
//!   second time: a third of a restart's time before this module mapped its own regions.) Smaller
//!   regions come from the global allocator, which packs them: one mapping each could exhaust
//!   `vm.max_map_count` with 4 KiB log pages.
//! - Regions of 2 MiB or more start on a 2 MiB boundary and are advised `MADV_HUGEPAGE` *before*
//!   their first touch, so with THP in `madvise` mode (the common default) each 2 MiB is faulted
//!   in as one huge page. The index and the log are read at random; with 4 KiB pages every such
//!   read also missed the TLB, and a random read of a 2 GB region cost about 120 ns against about
//!   45 ns on huge pages (measured on the 2-core VM; `docs/engine.md`, "Memory"). The advice is best
//!   effort: where THP is off the region is simply made of 4 KiB pages.
//! - A region is freed only with [`free_region`] and the layout it was made with.

use std::alloc::Layout;

const HUGE_PAGE_BYTES: usize = 2 << 20;
const PAGE_BYTES: usize = 4096;

/// The layout used for a zeroed region of `bytes` (callers free with the same layout). The size
/// is a multiple of the alignment, and the alignment is at least one 4 KiB page.
pub(crate) fn region_layout(bytes: usize, min_align: usize) -> Layout {
    let align = if bytes >= HUGE_PAGE_BYTES {
        HUGE_PAGE_BYTES
    } else {
        min_align.max(PAGE_BYTES)
    };
    Layout::from_size_align(bytes.next_multiple_of(align), align).expect("region size fits memory")
}

/// A zeroed region for `layout` (from [`region_layout`]), mapped from the kernel from 2 MiB up.
/// Aborts through `handle_alloc_error` only if the kernel refuses the memory.
pub(crate) fn allocate_zeroed(layout: Layout) -> *mut u8 {
    let (bytes, align) = (layout.size(), layout.align());
    assert!(bytes > 0 && bytes.is_multiple_of(align) && align >= PAGE_BYTES);
    if bytes < HUGE_PAGE_BYTES {
        // SAFETY: `layout` is not zero-sized (asserted above).
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        if pointer.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        return pointer;
    }
    // mmap aligns to 4 KiB only: map `align` extra bytes and trim both ends to the boundary.
    let mapped_bytes = bytes.checked_add(align).expect("region size fits memory");
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
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
        std::alloc::handle_alloc_error(layout);
    }
    let raw_start = raw as usize;
    let start = raw_start.next_multiple_of(align);
    let head_bytes = start - raw_start;
    let tail_bytes = mapped_bytes - head_bytes - bytes;
    // SAFETY: both trims lie inside the mapping just made and outside the region handed out.
    unsafe {
        if head_bytes > 0 {
            let unmapped = libc::munmap(raw, head_bytes);
            assert_eq!(unmapped, 0, "munmap of a region's head failed");
        }
        if tail_bytes > 0 {
            let unmapped = libc::munmap((start + bytes) as *mut libc::c_void, tail_bytes);
            assert_eq!(unmapped, 0, "munmap of a region's tail failed");
        }
    }
    // SAFETY: advice on memory we own and have not touched; failure only means 4 KiB pages.
    unsafe {
        libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
    }
    start as *mut u8
}

/// Returns a region to the kernel (or, below 2 MiB, to the allocator).
///
/// # Safety
/// `pointer` came from [`allocate_zeroed`]`(layout)` and no reference into the region remains.
pub(crate) unsafe fn free_region(pointer: *mut u8, layout: Layout) {
    if layout.size() < HUGE_PAGE_BYTES {
        // SAFETY: the caller guarantees it came from `alloc_zeroed(layout)` and is unused.
        unsafe { std::alloc::dealloc(pointer, layout) };
        return;
    }
    // SAFETY: the caller guarantees the region is ours and unused; exactly `layout.size()` bytes
    // of its mapping were left after trimming.
    let unmapped = unsafe { libc::munmap(pointer as *mut libc::c_void, layout.size()) };
    assert_eq!(unmapped, 0, "munmap of a region failed");
}

/// A fixed-size array of `T` in a zeroed region. `T` must be valid when all-zero.
pub(crate) struct ZeroedArray<T> {
    pointer: *mut T,
    len: usize,
    layout: Layout,
}

// SAFETY: the array owns its elements like a `Box<[T]>`.
unsafe impl<T: Send> Send for ZeroedArray<T> {}
// SAFETY: shared access hands out `&T` only.
unsafe impl<T: Sync> Sync for ZeroedArray<T> {}

impl<T> ZeroedArray<T> {
    /// # Safety
    /// An all-zero `T` must be a valid value.
    pub(crate) unsafe fn new(len: usize) -> Self {
        assert!(len > 0 && std::mem::size_of::<T>() > 0);
        let bytes = std::mem::size_of::<T>()
            .checked_mul(len)
            .expect("array size fits memory");
        let layout = region_layout(bytes, std::mem::align_of::<T>());
        ZeroedArray {
            pointer: allocate_zeroed(layout) as *mut T,
            len,
            layout,
        }
    }
}

impl<T> std::ops::Deref for ZeroedArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` zero-initialised (valid) elements live at `pointer`.
        unsafe { std::slice::from_raw_parts(self.pointer, self.len) }
    }
}

impl<T> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        // SAFETY: allocated with `self.layout`; elements need no drop beyond their memory
        // (the engine only stores atomics here).
        unsafe { free_region(self.pointer as *mut u8, self.layout) };
    }
}

/// Hints the CPU to start loading the cache line at `pointer` into every cache level. A hint: it
/// never faults (any address is allowed) and has no effect on memory.
#[inline(always)]
pub(crate) fn prefetch(pointer: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` never faults and does not access memory architecturally.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(pointer as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = pointer;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_zeroed_aligned_and_writable_at_every_size_class() {
        for (bytes, min_align) in [(4096, 8), (64 << 10, 64), (2 << 20, 8), (5 << 20, 4096)] {
            let layout = region_layout(bytes, min_align);
            assert!(layout.size() >= bytes && layout.size().is_multiple_of(layout.align()));
            let pointer = allocate_zeroed(layout);
            assert!((pointer as usize).is_multiple_of(layout.align()));
            // SAFETY: the region is `layout.size()` bytes, ours until freed below.
            let region = unsafe { std::slice::from_raw_parts_mut(pointer, layout.size()) };
            assert!(region.iter().all(|&byte| byte == 0));
            region.fill(0xA5);
            // SAFETY: made above with this layout; `region` is not used after this.
            unsafe { free_region(pointer, layout) };
        }
        assert_eq!(region_layout(3 << 20, 8).align(), HUGE_PAGE_BYTES);
        assert_eq!(region_layout(3 << 20, 8).size(), 4 << 20);
    }
}
