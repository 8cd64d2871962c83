//! The global CPR state: a phase and a version packed in one atomic word.
//!
//! Version semantics: REST(v) and PREPARE(v) run operations as v; IN_PROGRESS, WAIT_PENDING and
//! WAIT_FLUSH carry v+1 (operations run as v+1 while version v is being captured). PAUSE(v) is the
//! `blocking` strategy's barrier: sessions that see it adopt v+1 and wait until REST(v+1).
//! THROW(n) and PURGE(n) are the rollback's phases (`rollback` module): operations run as n, the
//! first version of a new world-line, exactly as in REST.
//!
//! The word packs the world-line too (bits 40..64), so that a session adopts a new world-line and
//! its first version in one load: it can never run an operation of the new world-line's version
//! while still counting itself in the old world-line, or the reverse. Versions fit 32 bits (record
//! headers hold 32) and world-lines 24 bits (16.7 million rollbacks per process).
//!
//! [`InvalidVersions`], the versions a rollback discarded, lives here beside the versions it
//! names: sessions, chain walks, compaction, checkpoints and PURGE all test records against it.

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
    /// Rollback: a new world-line began; sessions adopting it learn that their operations after
    /// their surviving serial were rolled back (`EngineError::RolledBack`).
    Throw = 6,
    /// Rollback: every session adopted the new world-line; a background thread unlinks and
    /// neutralises the records of the discarded versions.
    Purge = 7,
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
            6 => Phase::Throw,
            7 => Phase::Purge,
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

/// Bits of the version in the state word.
const VERSION_BITS: u32 = 32;
/// Where the world-line starts in the state word.
const WORLD_LINE_SHIFT: u32 = 8 + VERSION_BITS;
/// The largest world-line the state word holds.
pub(crate) const MAX_WORLD_LINE: u64 = (1 << (64 - WORLD_LINE_SHIFT)) - 1;

/// A (phase, version, world-line) triple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SystemState {
    pub(crate) phase: Phase,
    pub(crate) version: u64,
    /// Rollbacks so far in this process (in memory only).
    pub(crate) world_line: u64,
}

impl SystemState {
    #[inline]
    fn pack(self) -> u64 {
        debug_assert!(self.version < 1 << VERSION_BITS && self.world_line <= MAX_WORLD_LINE);
        (self.world_line << WORLD_LINE_SHIFT) | (self.version << 8) | self.phase as u64
    }
    #[inline]
    fn unpack(word: u64) -> Self {
        SystemState {
            phase: Phase::from_bits(word),
            version: (word >> 8) & ((1 << VERSION_BITS) - 1),
            world_line: word >> WORLD_LINE_SHIFT,
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
    /// Stores `phase` and `version`, keeping the world-line. Only the one state machine running
    /// (a checkpoint driver or a rollback: they exclude each other through the store's
    /// state-machine slot, `shared::MachineState`, which a nested rollback takes over from the
    /// PURGE it stops) stores, so the world-line read here cannot change meanwhile. Outside recovery, stores go
    /// through `Shared::publish_state`, which notes where new versions start in the log.
    pub(crate) fn store_phase(&self, phase: Phase, version: u64) {
        let world_line = self.load().world_line;
        self.store(SystemState {
            phase,
            version,
            world_line,
        });
    }
}

/// A range of invalid versions `(after, through]`, packed in one word (32 bits each, as record
/// versions); 0 means none. Copied into each session when it adopts the state word, so that chain
/// walks on the hot path test a register, not shared memory: with no rollback in flight the test
/// is one compare with zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InvalidVersions(u64);

impl InvalidVersions {
    /// No invalid versions.
    pub(crate) const NONE: InvalidVersions = InvalidVersions(0);

    /// Versions `(after, through]`; `through > after`, both below 2^32.
    pub(crate) fn new(after: u64, through: u64) -> InvalidVersions {
        debug_assert!(after < through && through <= u32::MAX as u64);
        InvalidVersions((after << 32) | through)
    }

    /// The range packed in `word` (from [`InvalidVersions::word`]).
    pub(crate) fn from_word(word: u64) -> InvalidVersions {
        InvalidVersions(word)
    }

    /// The packed word (0 when empty).
    pub(crate) fn word(self) -> u64 {
        self.0
    }

    /// Whether no version is invalid.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether records of `version` are invalid.
    #[inline(always)]
    pub(crate) fn contains(self, version: u64) -> bool {
        self.0 != 0 && version > self.0 >> 32 && version <= self.0 & 0xFFFF_FFFF
    }

    /// The versions as (after, through): `(after, through]`; (0, 0) when empty.
    pub(crate) fn bounds(self) -> (u64, u64) {
        (self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

#[cfg(test)]
mod tests {
    use super::InvalidVersions;

    #[test]
    fn invalid_versions_hold_exactly_their_half_open_range() {
        let invalid = InvalidVersions::new(3, 7);
        let holds: Vec<u64> = (0..10).filter(|&v| invalid.contains(v)).collect();
        assert_eq!(holds, vec![4, 5, 6, 7]);
        assert!((0..10).all(|v| !InvalidVersions::NONE.contains(v)));
        let from_zero = InvalidVersions::new(0, u32::MAX as u64);
        assert!(from_zero.contains(1) && from_zero.contains(u32::MAX as u64));
        assert!(!from_zero.contains(0));
    }
}
