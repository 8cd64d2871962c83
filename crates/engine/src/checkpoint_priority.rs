//! Adaptive scheduling priority of a non-blocking checkpoint's threads (its scan/encode segment
//! threads and their I/O threads): they take the CPU only when request threads leave it idle, as
//! long as the checkpoint keeps up, and at the fixed niceness once it falls behind.
//!
//! With [`CheckpointPriority::Idle`] every checkpoint thread runs under Linux's `SCHED_IDLE`: the
//! scheduler gives it a core only when no normal thread wants one (its weight is 3 against 1024 of
//! a nice-0 thread, so against a saturating load it gets almost nothing). The checkpoint driver is
//! the watchdog: between waits of at most [`WATCHDOG_TICK`] it compares the bytes the segment
//! writers have handed to their I/O threads (`progress`) with a floor rate, and once, after the
//! [`GRACE`] allowance, `progress < floor × (elapsed − GRACE)`, it raises every registered thread
//! to `SCHED_OTHER` at the fixed niceness (`StoreConfig::checkpoint_thread_nice`) for the rest of
//! that checkpoint; threads registered later start at that niceness. A checkpoint is never
//! lowered back after a raise: one raise per checkpoint at most, no oscillation.
//!
//! Starvation freedom (what bounds a save's time, for a checkpoint that writes `S` bytes at floor
//! `F`): before the raise, every tick after `GRACE` saw `progress ≥ F × (t − GRACE)`, and
//! `progress ≤ S`, so the raise happens (if at all) by `GRACE + S/F + WATCHDOG_TICK`; a
//! checkpoint that is never raised finished within the same bound. After the raise it runs
//! exactly as under [`CheckpointPriority::Nice`], so a save takes at most
//! `GRACE + S/F + WATCHDOG_TICK` longer than the same save at the fixed niceness. With pacing
//! (`checkpoint_write_bytes_per_s`), the floor is at most half the pacing rate, so pacing alone
//! never triggers a raise.
//!
//! Leaving `SCHED_IDLE` needs `CAP_SYS_NICE` or an `RLIMIT_NICE` that allows the niceness (Linux
//! refuses it otherwise, checked by `sched_setscheduler`). So before a checkpoint uses the idle
//! policy, a throwaway thread tries the round trip once per process and niceness
//! ([`can_leave_idle`]); where it fails, and on platforms without `SCHED_IDLE` (non-Linux), the
//! threads run at the fixed niceness from the start (logged once): the bound above never depends
//! on a raise that the kernel could refuse.
//!
//! Invariants:
//! - A thread id is in `threads` only while its thread runs a checkpoint's work ([`Registered`]
//!   removes it before the thread ends, under the lock the raise holds), so a raise never touches
//!   a reused id of another thread.
//! - `raised` goes false → true at most once, under the `threads` lock; a thread that registers
//!   afterwards sees it and takes the fixed niceness itself.
//! - Only threads of a checkpoint are ever changed: never the driver, never a session's thread.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::{CheckpointPriority, StoreConfig};

/// The progress allowance at the start of a checkpoint's image: a first 4 MiB write buffer and
/// the scan's start (first chain heads, first pages) before anything is handed over.
pub(crate) const GRACE: Duration = Duration::from_millis(500);

/// How often the driver checks progress while the segment threads run.
pub(crate) const WATCHDOG_TICK: Duration = Duration::from_millis(50);

/// The calling thread's kernel id.
fn this_thread_id() -> libc::pid_t {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

/// Sets thread `tid`'s niceness. Raising niceness needs no privilege; a failure only means the
/// thread keeps its priority, so it is logged, not fatal.
pub(crate) fn set_nice(tid: libc::pid_t, nice: i32) {
    // SAFETY: a plain syscall on a thread id of this process.
    let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if result != 0 {
        tracing::debug!(
            "could not set checkpoint thread niceness: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Sets thread `tid`'s scheduling policy (`SCHED_IDLE` or `SCHED_OTHER`, which keeps the
/// thread's niceness). Returns whether the kernel accepted it.
#[cfg(target_os = "linux")]
fn set_policy(tid: libc::pid_t, policy: libc::c_int) -> bool {
    let parameters = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain syscall on a thread id of this process with a valid parameter block.
    unsafe { libc::sched_setscheduler(tid, policy, &parameters) == 0 }
}

/// Whether this process may move a thread from `SCHED_IDLE` back to `SCHED_OTHER` at `nice`,
/// tried once per niceness on a throwaway thread (so no request thread is ever changed). Always
/// false without `SCHED_IDLE`.
pub(crate) fn can_leave_idle(nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        // 0 = not tried yet, 1 = yes, 2 = no; one entry per niceness 0..=19.
        static TRIED: [AtomicU8; 20] = [const { AtomicU8::new(0) }; 20];
        let slot = &TRIED[nice.clamp(0, 19) as usize];
        match slot.load(Ordering::Relaxed) {
            1 => return true,
            2 => return false,
            _ => {}
        }
        let allowed = std::thread::spawn(move || {
            let tid = this_thread_id();
            set_nice(tid, nice);
            set_policy(tid, libc::SCHED_IDLE) && set_policy(tid, libc::SCHED_OTHER)
        })
        .join()
        .unwrap_or(false);
        slot.store(if allowed { 1 } else { 2 }, Ordering::Relaxed);
        if !allowed {
            tracing::warn!(
                nice,
                "checkpoint-priority idle needs CAP_SYS_NICE or an RLIMIT_NICE of at least {} to \
                 raise a lagging checkpoint; checkpoint threads run at the fixed niceness instead",
                20 - nice
            );
        }
        allowed
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = nice;
        false
    }
}

/// The priority control of one checkpoint, shared by its driver (the watchdog) and its threads.
#[derive(Debug)]
pub(crate) struct ThreadPriority {
    nice: i32,
    /// Whether threads start under `SCHED_IDLE` (the idle policy, where the kernel lets a thread
    /// leave it again).
    idle: bool,
    floor_bytes_per_s: u64,
    grace: Duration,
    started: Instant,
    /// Bytes the segment writers handed to their I/O threads so far.
    progress: AtomicU64,
    raised: AtomicBool,
    /// When the raise happened, after `started`.
    raised_after: Mutex<Option<Duration>>,
    /// Ids of the threads running this checkpoint's work now.
    threads: Mutex<Vec<libc::pid_t>>,
}

impl ThreadPriority {
    /// The control for a checkpoint starting now under `config`, or `None` when its threads
    /// keep the default priority (the fixed policy at niceness 0).
    pub(crate) fn for_config(config: &StoreConfig) -> Option<Arc<ThreadPriority>> {
        let nice = config.checkpoint_thread_nice;
        let idle =
            config.checkpoint_thread_priority == CheckpointPriority::Idle && can_leave_idle(nice);
        if !idle && nice == 0 {
            return None;
        }
        // Pacing alone must never look like starvation: the floor stays below the paced rate.
        let floor = match config.checkpoint_write_bytes_per_s {
            Some(rate) => config.checkpoint_idle_floor_bytes_per_s.min(rate / 2),
            None => config.checkpoint_idle_floor_bytes_per_s,
        };
        Some(Arc::new(ThreadPriority::new(nice, idle, floor, GRACE)))
    }

    fn new(nice: i32, idle: bool, floor_bytes_per_s: u64, grace: Duration) -> ThreadPriority {
        ThreadPriority {
            nice,
            idle,
            floor_bytes_per_s,
            grace,
            started: Instant::now(),
            progress: AtomicU64::new(0),
            raised: AtomicBool::new(false),
            raised_after: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Registers the calling thread as one of the checkpoint's and gives it the checkpoint's
    /// current priority; the returned guard unregisters it (drop it before the thread ends).
    pub(crate) fn enter(self: &Arc<Self>) -> Registered {
        let tid = this_thread_id();
        let mut threads = self.threads.lock();
        set_nice(tid, self.nice);
        #[cfg(target_os = "linux")]
        if self.idle && !self.raised.load(Ordering::Relaxed) && !set_policy(tid, libc::SCHED_IDLE) {
            tracing::debug!(
                "could not put a checkpoint thread under SCHED_IDLE: {}",
                std::io::Error::last_os_error()
            );
        }
        threads.push(tid);
        Registered {
            control: Arc::clone(self),
            tid,
        }
    }

    /// Counts `bytes` written by a segment writer.
    pub(crate) fn add_progress(&self, bytes: u64) {
        self.progress.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The watchdog's check: raises the checkpoint's threads to the fixed niceness if its
    /// progress fell below the floor (see the module comment). Returns whether it is raised.
    pub(crate) fn check(&self) -> bool {
        if !self.idle || self.raised.load(Ordering::Relaxed) {
            return self.raised.load(Ordering::Relaxed);
        }
        let elapsed = self.started.elapsed();
        let Some(due_time) = elapsed.checked_sub(self.grace) else {
            return false;
        };
        let due = self.floor_bytes_per_s as f64 * due_time.as_secs_f64();
        let progress = self.progress.load(Ordering::Relaxed);
        if progress as f64 >= due {
            return false;
        }
        self.raise(elapsed, progress);
        true
    }

    #[cfg(target_os = "linux")]
    fn raise(&self, elapsed: Duration, progress: u64) {
        let threads = self.threads.lock();
        self.raised.store(true, Ordering::Relaxed);
        *self.raised_after.lock() = Some(elapsed);
        for &tid in threads.iter() {
            if !set_policy(tid, libc::SCHED_OTHER) {
                tracing::warn!(
                    "could not raise a checkpoint thread from SCHED_IDLE: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        tracing::info!(
            elapsed_ms = elapsed.as_millis() as u64,
            progress_bytes = progress,
            floor_bytes_per_s = self.floor_bytes_per_s,
            nice = self.nice,
            "checkpoint fell behind its floor rate under SCHED_IDLE; raised to the fixed niceness"
        );
    }

    #[cfg(not(target_os = "linux"))]
    fn raise(&self, _elapsed: Duration, _progress: u64) {
        unreachable!("the idle policy is never chosen without SCHED_IDLE")
    }

    /// How long after the start the threads were raised; `None` if they never were.
    pub(crate) fn raised_after(&self) -> Option<Duration> {
        *self.raised_after.lock()
    }
}

/// A thread registered with a [`ThreadPriority`]; unregisters it when dropped.
#[derive(Debug)]
pub(crate) struct Registered {
    control: Arc<ThreadPriority>,
    tid: libc::pid_t,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.control.threads.lock().retain(|&tid| tid != self.tid);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn policy_and_nice() -> (libc::c_int, i32) {
        // SAFETY: plain syscalls on the calling thread.
        unsafe {
            let tid = this_thread_id();
            (
                libc::sched_getscheduler(tid),
                libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t),
            )
        }
    }

    /// Runs `check` on a thread registered with `control`, reporting its policy before and after.
    fn registered_thread(
        control: &Arc<ThreadPriority>,
        between: impl FnOnce() + Send,
    ) -> ((libc::c_int, i32), (libc::c_int, i32)) {
        let (entered_sender, entered) = std::sync::mpsc::channel();
        let (checked, checked_receiver) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let worker = scope.spawn(move || {
                let _registered = control.enter();
                let before = policy_and_nice();
                entered_sender.send(()).unwrap();
                checked_receiver.recv().unwrap();
                (before, policy_and_nice())
            });
            entered.recv().unwrap();
            between();
            checked.send(()).unwrap();
            worker.join().unwrap()
        })
    }

    #[test]
    fn a_lagging_checkpoint_is_raised_to_the_fixed_niceness() {
        if !can_leave_idle(12) {
            eprintln!("skipped: this process may not leave SCHED_IDLE (no CAP_SYS_NICE)");
            return;
        }
        // A floor no checkpoint reaches and no grace: the first check raises.
        let control = Arc::new(ThreadPriority::new(12, true, u64::MAX, Duration::ZERO));
        let (before, after) = registered_thread(&control, || assert!(control.check()));
        assert_eq!(before, (libc::SCHED_IDLE, 12));
        assert_eq!(after, (libc::SCHED_OTHER, 12));
        assert!(control.raised_after().is_some());
        assert!(control.threads.lock().is_empty(), "the guard unregistered");
        // A thread that starts after the raise takes the niceness, not SCHED_IDLE.
        let (late, _) = registered_thread(&control, || {});
        assert_eq!(late, (libc::SCHED_OTHER, 12));
    }

    #[test]
    fn a_checkpoint_that_keeps_up_stays_idle() {
        if !can_leave_idle(12) {
            eprintln!("skipped: this process may not leave SCHED_IDLE (no CAP_SYS_NICE)");
            return;
        }
        // 1 byte per second after a 1 h grace: never behind.
        let control = Arc::new(ThreadPriority::new(12, true, 1, Duration::from_secs(3600)));
        control.add_progress(1);
        let (before, after) = registered_thread(&control, || assert!(!control.check()));
        assert_eq!(before, (libc::SCHED_IDLE, 12));
        assert_eq!(after, (libc::SCHED_IDLE, 12));
        assert_eq!(control.raised_after(), None);
    }

    #[test]
    fn the_fixed_policy_only_sets_the_niceness() {
        let caller = policy_and_nice();
        let control = Arc::new(ThreadPriority::new(9, false, u64::MAX, Duration::ZERO));
        let (before, after) = registered_thread(&control, || assert!(!control.check()));
        assert_eq!(before, (libc::SCHED_OTHER, 9));
        assert_eq!(after, (libc::SCHED_OTHER, 9));
        assert_eq!(
            policy_and_nice(),
            caller,
            "the calling thread keeps its priority"
        );
    }
}
