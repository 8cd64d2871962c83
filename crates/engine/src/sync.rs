//! Atomics and locks used by the concurrency protocols, switched to loom's model-checked versions
//! when built with `RUSTFLAGS="--cfg loom"`. Only the epoch core uses these shims; the rest of the
//! engine uses `std` atomics directly (it is too large for loom and is covered by shuttle and
//! stress tests instead).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// A `std`-backed mutex with loom's `lock()` signature (panics on poisoning are mapped to taking
/// the inner value, because our critical sections keep the data consistent at every step).
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

#[cfg(not(loom))]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(parking_lot::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> Result<parking_lot::MutexGuard<'_, T>, std::convert::Infallible> {
        Ok(self.0.lock())
    }
}
