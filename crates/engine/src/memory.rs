//! Large zeroed allocations for the index and log pages: fresh zero pages from the allocator are
//! not touched until written, and regions of 2 MiB or more are 2 MiB-aligned and advised as
//! transparent huge pages (fewer TLB misses on random access). The advice is best effort.

use std::alloc::Layout;

const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The layout used for a zeroed region of `bytes` (callers free with the same layout).
pub(crate) fn region_layout(bytes: usize, min_align: usize) -> Layout {
    let align = if bytes >= HUGE_PAGE_BYTES {
        HUGE_PAGE_BYTES
    } else {
        min_align.max(4096)
    };
    Layout::from_size_align(bytes.next_multiple_of(align), align).expect("region size fits memory")
}

/// Allocates a zeroed region; aborts through `handle_alloc_error` only if the OS refuses memory.
pub(crate) fn allocate_zeroed(layout: Layout) -> *mut u8 {
    // SAFETY: regions are never zero-sized (callers pass at least one page or bucket).
    let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
    if pointer.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    if layout.size() >= HUGE_PAGE_BYTES {
        // SAFETY: advice on memory we own; failure only means no huge pages.
        unsafe {
            libc::madvise(
                pointer as *mut libc::c_void,
                layout.size(),
                libc::MADV_HUGEPAGE,
            );
        }
    }
    pointer
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
        unsafe { std::alloc::dealloc(self.pointer as *mut u8, self.layout) };
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
