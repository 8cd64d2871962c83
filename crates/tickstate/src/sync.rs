//! Atomics shim: std atomics normally, loom's under `--cfg loom` so that the wait-free bit
//! protocols can be model-checked with the very code the library runs.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicU8};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8};

pub(crate) use std::sync::atomic::Ordering;

/// Back off while another thread finishes a step that takes a bounded number of instructions
/// (the mutator copying one word). Under loom this must yield so the model can schedule the
/// other thread.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
