//! What the compaction thread, writers at the memory limit and the `blocking` strategy's pause
//! wait on: three small pieces of state, each a lock with the condition it guards.
//!
//! - [`CompactionState`]: the maintenance lock (compaction and checkpoints or PURGE exclude each
//!   other; compaction yields to a waiter), compaction requests and shutdown. Written by
//!   `compaction` (takes requests, yields), by checkpoints and PURGE (take the lock, request a
//!   run when done), writers (request a run) and the store (shutdown).
//! - [`MemoryGate`]: a generation counter writers held at the memory limit wait on; compaction
//!   bumps it when it freed pages.
//! - [`PauseBarrier`]: where sessions wait while the `blocking` strategy holds PAUSE; the
//!   checkpoint driver stores REST under its lock and wakes them.
//!
//! None of these locks is held while another lock of the store is taken, except the maintenance
//! lock, which the checkpoint driver and PURGE hold for their whole image or pass (it is taken
//! before, never inside, any lock of `machine`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

/// See the module docs.
pub(crate) struct CompactionState {
    /// Compaction and checkpoints exclude each other. Checkpoints and PURGE take it with
    /// [`CompactionState::lock_maintenance`], which compaction yields to.
    maintenance: Mutex<()>,
    /// Threads waiting in [`CompactionState::lock_maintenance`]: compaction starts no chunk
    /// meanwhile.
    maintenance_waiters: AtomicUsize,
    /// A run was requested since the compaction thread last looked; guards `wakeup`.
    requested: Mutex<bool>,
    wakeup: Condvar,
    /// A writer is held at the memory limit: compaction must run even if the log looks live.
    memory_wanted: AtomicBool,
    /// The store is closing: the compaction thread exits.
    shutdown: AtomicBool,
}

impl CompactionState {
    /// Nothing requested, running.
    pub(crate) fn new() -> CompactionState {
        CompactionState {
            maintenance: Mutex::new(()),
            maintenance_waiters: AtomicUsize::new(0),
            requested: Mutex::new(false),
            wakeup: Condvar::new(),
            memory_wanted: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
        }
    }

    /// Takes the maintenance lock ahead of compaction: compaction takes it chunk by chunk with
    /// `try_lock` and would otherwise win it again and again while the log stays above its
    /// trigger (measured: a checkpoint, and the rollback waiting for it to stop, waited 5 s).
    pub(crate) fn lock_maintenance(&self) -> MutexGuard<'_, ()> {
        self.maintenance_waiters.fetch_add(1, Ordering::SeqCst);
        let guard = self.maintenance.lock();
        self.maintenance_waiters.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    /// The maintenance lock for one compaction chunk: `None` if a checkpoint or PURGE waits for
    /// it (let it have it; the next request resumes) or holds it.
    pub(crate) fn try_lock_for_chunk(&self) -> Option<MutexGuard<'_, ()>> {
        if self.maintenance_waiters.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.maintenance.try_lock()
    }

    /// Wakes the compaction thread.
    pub(crate) fn request(&self) {
        *self.requested.lock() = true;
        self.wakeup.notify_all();
    }

    /// The compaction thread waits for a request (at most `timeout`, then it looks anyway) and
    /// takes it.
    pub(crate) fn wait_for_request(&self, timeout: Duration) {
        let mut requested = self.requested.lock();
        if !*requested && !self.is_shut_down() {
            self.wakeup.wait_for(&mut requested, timeout);
        }
        *requested = false;
    }

    /// A writer is held at the memory limit (set again on every failed allocation).
    pub(crate) fn want_memory(&self) {
        self.memory_wanted.store(true, Ordering::SeqCst);
    }

    /// Whether a writer was held at the memory limit since the last call (clears it).
    pub(crate) fn take_memory_wanted(&self) -> bool {
        self.memory_wanted.swap(false, Ordering::SeqCst)
    }

    /// Tells the compaction thread to exit, and wakes it.
    pub(crate) fn shut_down(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.request();
    }

    /// Whether the store is closing.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }
}

/// See the module docs. The counter counts compaction passes that may have freed pages.
pub(crate) struct MemoryGate {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl MemoryGate {
    /// Generation 0.
    pub(crate) fn new() -> MemoryGate {
        MemoryGate {
            generation: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    /// The generation now: read before asking for memory, so that a wake-up after the request
    /// is never missed ([`MemoryGate::wait_past`]).
    pub(crate) fn generation(&self) -> u64 {
        *self.generation.lock()
    }

    /// Waits until the generation moved past `seen`, at most `timeout`.
    pub(crate) fn wait_past(&self, seen: u64, timeout: Duration) {
        let mut current = self.generation.lock();
        if *current == seen {
            self.changed.wait_for(&mut current, timeout);
        }
    }

    /// Wakes writers waiting for memory.
    pub(crate) fn notify(&self) {
        let mut generation = self.generation.lock();
        *generation += 1;
        self.changed.notify_all();
    }
}

/// See the module docs. The lock guards no data: it orders the driver's store of REST and its
/// wake-up with a session's check of the phase, so that no wake-up is lost.
pub(crate) struct PauseBarrier {
    lock: Mutex<()>,
    changed: Condvar,
}

impl PauseBarrier {
    /// Nobody paused.
    pub(crate) fn new() -> PauseBarrier {
        PauseBarrier {
            lock: Mutex::new(()),
            changed: Condvar::new(),
        }
    }

    /// A session waits while `paused()` holds (checked under the lock, re-checked at least every
    /// `recheck`).
    pub(crate) fn wait_while(&self, paused: impl Fn() -> bool, recheck: Duration) {
        let mut guard = self.lock.lock();
        while paused() {
            self.changed.wait_for(&mut guard, recheck);
        }
    }

    /// The driver ends the pause: `end` (which stores the next phase) runs under the lock, then
    /// every waiting session is woken.
    pub(crate) fn release(&self, end: impl FnOnce()) {
        let _pause = self.lock.lock();
        end();
        self.changed.notify_all();
    }
}
