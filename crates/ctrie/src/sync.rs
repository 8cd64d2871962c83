//! Atomics and memory reclamation, switchable for model checkers.
//!
//! Three builds share this one seam:
//! - normal: `std` atomics, reclamation through crossbeam-epoch;
//! - `--cfg loom`: loom's atomics (so loom explores every interleaving of the GCAS / RDCSS
//!   protocol) and a reclamation stand-in that keeps every retired count in a list until the
//!   test calls [`reclaim_all`] after all model threads have joined (loom runs threads as
//!   coroutines, and crossbeam-epoch's thread-locals are not modelled);
//! - `--cfg shuttle`: shuttle's atomics (its randomised scheduler preempts at each of them) and
//!   the loom build's reclamation stand-in (shuttle also runs a test's threads as coroutines on
//!   its OS thread). Not crossbeam-epoch: its global collector runs retired closures on whatever
//!   thread pins next, so one test's nodes were freed on another test's thread outside any
//!   shuttle execution, and dropping their shuttle atomics there panicked (a flaky
//!   `shuttle_random_schedules_are_linearizable`).
//!
//! Invariant of every shared pointer field in this crate (`INode::main`, `MainNode::prev`, the
//! root slot): the field owns one strong count of the `Arc` it points at. A successful CAS hands
//! the new value's count to the field and *retires* the old value's count through
//! [`Guard::defer_release`], never drops it at once, because a thread pinned before the CAS may
//! still be reading the old node through the pointer it loaded.

use std::sync::Arc;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicPtr, AtomicU8, AtomicUsize};
#[cfg(all(shuttle, not(loom)))]
pub(crate) use shuttle::sync::atomic::{fence, AtomicPtr, AtomicU8, AtomicUsize};
#[cfg(not(any(loom, shuttle)))]
pub(crate) use std::sync::atomic::{fence, AtomicPtr, AtomicU8, AtomicUsize};

/// A raw `Arc` pointer moved into a deferred closure. Sending it is sound because the pointee is
/// `Send + Sync` (enforced where [`Guard::defer_release`] is called).
struct RetiredCount<T>(*const T);

// SAFETY: only ever built from `Arc<T>` pointers with `T: Send + Sync` (see `defer_release`), and
// the deferred closure that owns it is the sole owner of that one strong count.
unsafe impl<T: Send + Sync> Send for RetiredCount<T> {}

impl<T> RetiredCount<T> {
    /// Drops the strong count this value owns.
    ///
    /// # Safety
    /// `self.0` came from `Arc::into_raw` (or an equivalent count increment) and this is the only
    /// release of that count.
    unsafe fn release(self) {
        // SAFETY: guaranteed by the caller.
        drop(unsafe { Arc::from_raw(self.0) });
    }
}

/// Proof that the current thread is pinned: pointers loaded from shared fields stay valid while
/// it lives.
#[cfg(not(any(loom, shuttle)))]
pub(crate) struct Guard {
    inner: crossbeam_epoch::Guard,
}

/// Pins the current thread.
#[cfg(not(any(loom, shuttle)))]
pub(crate) fn pin() -> Guard {
    Guard {
        inner: crossbeam_epoch::pin(),
    }
}

#[cfg(not(any(loom, shuttle)))]
impl Guard {
    /// Retires one strong count of the `Arc<T>` behind `pointer`: it is dropped once every thread
    /// that is pinned now has unpinned.
    ///
    /// # Safety
    /// `pointer` came from `Arc::into_raw`, the caller owned one count of it (typically the count
    /// a shared field held until the CAS that just unlinked it), and gives that count up here.
    pub(crate) unsafe fn defer_release<T: Send + Sync + 'static>(&self, pointer: *const T) {
        let retired = RetiredCount(pointer);
        // SAFETY: the closure only releases a count we own; `T: Send + Sync` makes running it on
        // another thread sound; `'static` means no borrowed data can expire before it runs.
        unsafe {
            self.inner.defer_unchecked(move || retired.release());
        }
    }
}

#[cfg(any(loom, shuttle))]
mod loom_reclaim {
    use super::RetiredCount;
    use std::cell::RefCell;

    type Deferred = Box<dyn FnOnce() + Send>;

    std::thread_local! {
        /// Every retired count of the current loom execution. Loom runs a model's threads as
        /// coroutines on the test's own OS thread, so a thread-local list is per test, and
        /// tests running in parallel never free each other's nodes.
        static RETIRED: RefCell<Vec<Deferred>> = const { RefCell::new(Vec::new()) };
    }

    /// Loom stand-in for a pinned epoch: nothing is freed before [`reclaim_all`].
    pub(crate) struct Guard;

    pub(crate) fn pin() -> Guard {
        Guard
    }

    impl Guard {
        /// Keeps the count until [`reclaim_all`].
        ///
        /// # Safety
        /// As for the crossbeam-epoch build.
        pub(crate) unsafe fn defer_release<T: Send + Sync + 'static>(&self, pointer: *const T) {
            let retired = RetiredCount(pointer);
            // SAFETY: the count is ours (caller contract) and is released exactly once, later.
            let deferred: Deferred = Box::new(move || unsafe { retired.release() });
            RETIRED.with(|retired| retired.borrow_mut().push(deferred));
        }
    }

    /// Releases every retired count. Call only when no model thread is running.
    #[cfg(test)]
    pub(crate) fn reclaim_all() {
        let drained: Vec<Deferred> =
            RETIRED.with(|retired| std::mem::take(&mut *retired.borrow_mut()));
        for deferred in drained {
            deferred();
        }
    }
}

#[cfg(all(any(loom, shuttle), test))]
pub(crate) use loom_reclaim::reclaim_all;
#[cfg(any(loom, shuttle))]
pub(crate) use loom_reclaim::{pin, Guard};

/// Turns a pointer loaded under `guard` into a reference that lives as long as the guard.
///
/// # Safety
/// `pointer` is non-null and was loaded from a shared field (or reached through nodes loaded so)
/// while `guard` was pinned; the retirement rule above then keeps the pointee alive.
#[inline]
pub(crate) unsafe fn protected<T>(pointer: *const T, _guard: &Guard) -> &T {
    debug_assert!(!pointer.is_null());
    // SAFETY: guaranteed by the caller.
    unsafe { &*pointer }
}

/// A new `Arc` owning one more strong count of the node behind `pointer`.
///
/// # Safety
/// `pointer` came from an `Arc` (`Arc::into_raw` or `Arc::as_ptr`) whose node is alive, for
/// example because it is protected by a guard.
#[inline]
pub(crate) unsafe fn clone_arc<T>(pointer: *const T) -> Arc<T> {
    // SAFETY: guaranteed by the caller.
    unsafe {
        Arc::increment_strong_count(pointer);
        Arc::from_raw(pointer)
    }
}
