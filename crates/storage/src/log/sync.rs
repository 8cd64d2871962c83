//! The synchronisation primitives the log uses: `parking_lot` (and std threads/atomics) in normal
//! builds, and shuttle's schedulable versions when this crate's own unit tests are built, so the
//! shuttle tests in `shuttle_tests.rs` explore interleavings of the real appender / I/O thread /
//! waiter protocol rather than of a model of it.
//!
//! The API is the small common subset: `Mutex::lock` without poisoning, and `Condvar` waits that
//! take and return the guard.

pub(crate) use imp::{spawn, AtomicU64, Condvar, JoinHandle, Mutex};
use std::time::Instant;

#[cfg(not(test))]
mod imp {
    pub(crate) use parking_lot::{Mutex, MutexGuard};
    pub(crate) use std::sync::atomic::AtomicU64;
    pub(crate) use std::thread::JoinHandle;

    pub(crate) fn spawn<F: FnOnce() + Send + 'static>(
        name: &str,
        body: F,
    ) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(body)
    }

    #[derive(Default)]
    pub(crate) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(parking_lot::Condvar::new())
        }
        pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(&mut guard);
            guard
        }
        pub(crate) fn wait_until<'a, T>(
            &self,
            mut guard: MutexGuard<'a, T>,
            deadline: super::Instant,
        ) -> (MutexGuard<'a, T>, bool) {
            let timed_out = self.0.wait_until(&mut guard, deadline).timed_out();
            (guard, timed_out)
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

#[cfg(test)]
mod imp {
    pub(crate) use shuttle::sync::atomic::AtomicU64;
    pub(crate) use shuttle::sync::MutexGuard;
    pub(crate) use shuttle::thread::JoinHandle;
    use std::sync::PoisonError;

    pub(crate) fn spawn<F: FnOnce() + Send + 'static>(
        name: &str,
        body: F,
    ) -> std::io::Result<JoinHandle<()>> {
        shuttle::thread::Builder::new()
            .name(name.to_string())
            .spawn(body)
    }

    pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(shuttle::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    pub(crate) struct Condvar(shuttle::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(shuttle::sync::Condvar::new())
        }
        pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
        }
        pub(crate) fn wait_until<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            deadline: super::Instant,
        ) -> (MutexGuard<'a, T>, bool) {
            let timeout = deadline.saturating_duration_since(super::Instant::now());
            let (guard, result) = self
                .0
                .wait_timeout(guard, timeout)
                .unwrap_or_else(PoisonError::into_inner);
            (guard, result.timed_out())
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}
