//! The global CPR state: a phase and a version packed in one atomic word.
//!
//! Version semantics: REST(v) and PREPARE(v) run operations as v; IN_PROGRESS, WAIT_PENDING and
//! WAIT_FLUSH carry v+1 (operations run as v+1 while version v is being captured). PAUSE(v) is the
//! `blocking` strategy's barrier: sessions that see it adopt v+1 and wait until REST(v+1).

use std::sync::atomic::{AtomicU64, Ordering};

/// A phase of the CPR state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// No checkpoint running.
    Rest = 0,
    /// Checkpoint requested; threads still run as v and take *old* latches.
    Prepare = 1,
    /// Threads move to v+1 (recording their CPR points) and take *new* latches.
    InProgress = 2,
    /// Every thread is in v+1; waiting out operations of v still pending.
    WaitPending = 3,
    /// Version v is frozen; the checkpoint thread captures and writes it.
    WaitFlush = 4,
    /// Stop-the-world barrier of the `blocking` strategy.
    Pause = 5,
}

impl Phase {
    fn from_bits(bits: u64) -> Phase {
        match bits & 0xFF {
            0 => Phase::Rest,
            1 => Phase::Prepare,
            2 => Phase::InProgress,
            3 => Phase::WaitPending,
            4 => Phase::WaitFlush,
            5 => Phase::Pause,
            other => unreachable!("invalid phase bits {other}"),
        }
    }

    /// Whether operations in this phase run as the new version v+1 of a running checkpoint.
    #[inline]
    pub(crate) fn is_new_version(self) -> bool {
        matches!(
            self,
            Phase::InProgress | Phase::WaitPending | Phase::WaitFlush
        )
    }
}

/// A (phase, version) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SystemState {
    pub(crate) phase: Phase,
    pub(crate) version: u64,
}

impl SystemState {
    #[inline]
    fn pack(self) -> u64 {
        (self.version << 8) | self.phase as u64
    }
    #[inline]
    fn unpack(word: u64) -> Self {
        SystemState {
            phase: Phase::from_bits(word),
            version: word >> 8,
        }
    }
}

/// The shared state word.
pub(crate) struct GlobalState(AtomicU64);

impl GlobalState {
    pub(crate) fn new(state: SystemState) -> Self {
        GlobalState(AtomicU64::new(state.pack()))
    }
    #[inline]
    pub(crate) fn load(&self) -> SystemState {
        SystemState::unpack(self.0.load(Ordering::SeqCst))
    }
    /// Cheap check for the per-operation fast path.
    #[inline]
    pub(crate) fn load_relaxed_word(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    #[inline]
    pub(crate) fn word_of(state: SystemState) -> u64 {
        state.pack()
    }
    pub(crate) fn store(&self, state: SystemState) {
        self.0.store(state.pack(), Ordering::SeqCst);
    }
}
