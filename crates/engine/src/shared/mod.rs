//! State shared by the store, its sessions and its background threads: the engine's parts (epoch,
//! index, log, latches, the state word, the checkpoint directory) and, split by owner, the state
//! of each protocol that runs on them:
//!
//! | field | type (module) | written by |
//! |---|---|---|
//! | `machine` | [`MachineState`] (`machine.rs`): the state-machine slot, seal lock, sealed versions, results | store (requests), checkpoint thread (finish, strategy, sealed), rollback (acquire, abort, release) |
//! | `sessions` | [`SessionRegistry`] (`sessions.rs`) | store, recovery, checkpoint (forgets ended sessions), rollback (resets) — all under its lock |
//! | `rollback` | [`RollbackState`] (`rollback.rs`) | rollback; targets by the checkpoint driver; version starts by `publish_state` |
//! | `compaction` | [`CompactionState`] (`maintenance.rs`) | compaction (takes requests, yields the lock), checkpoints and PURGE (take the lock), store (shutdown) |
//! | `memory` | [`MemoryGate`] (`maintenance.rs`) | compaction (notifies), writers (wait) |
//! | `pause` | [`PauseBarrier`] (`maintenance.rs`) | checkpoint driver (`blocking`: releases), sessions (wait) |
//!
//! Every field of those is private to its type; other modules change them only through the
//! methods, which keep each lock's purpose (documented on the type). This module imports none of
//! the modules that run the protocols (`store`, `checkpoint`, `compaction`, `rollback`,
//! `session`): they all import it, so it is the bottom of their dependency order.
//!
//! Invariant (state word): only the one state machine running stores the state word, through
//! [`Shared::publish_state`] (a checkpoint driver or a rollback, or the epoch actions they queue).

mod durable_tier;
mod machine;
mod maintenance;
pub(crate) mod relocate;
mod rollback;
mod sessions;
mod thread_epoch;

use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use crate::accounting::LiveBytes;
use crate::checkpoint_files::CheckpointDirectory;
use crate::epoch::LightEpoch;
use crate::index::{EntrySlot, HashIndex, KeyHash};
use crate::latch::VersionLatches;
use crate::log::{HybridLog, Record, FLAG_INVALID, FLAG_STABLE};
use crate::scan_progress::ScanProgress;
use crate::state::{GlobalState, InvalidVersions, Phase, SystemState};
use crate::{EngineError, StoreConfig, Strategy};

pub(crate) use durable_tier::DurableTier;
pub(crate) use machine::{CheckpointFailure, MachineState};
pub(crate) use maintenance::{CompactionState, MemoryGate, PauseBarrier};
pub(crate) use rollback::RollbackState;
pub use sessions::MAX_OPEN_SESSIONS;
pub(crate) use sessions::{SessionRegistry, EPOCH_SLOTS};
pub(crate) use thread_epoch::{ThreadEpoch, REFRESH_CHAINS};

/// A key's index entry and newest record, read in the one order that is safe while compaction
/// runs: the begin address first, then the chain head.
///
/// Why the order matters (the bug behind a "missing key" at 10M keys, see `docs/engine.md`,
/// "Chain walks and the begin address"): compaction copies a key's newest record to the tail,
/// re-points the index entry at the copy, and only then moves the begin address past the old
/// record. A reader that loaded the head *before* that re-pointing and the begin *after* the move
/// holds an address below its own lower bound: the walk stops at once and reports the key absent
/// although it never was. Reading the begin first makes the bound no newer than the head, and a
/// key's newest record at the time the head was read lies at or above the begin of that time
/// (compaction's invariant), so the walk reaches it; epoch protection keeps its page allocated.
pub(crate) struct Located<'a> {
    /// The index entry as read (its word is the expected value for a publishing CAS).
    pub(crate) entry: EntrySlot<'a>,
    /// The key's newest valid record, if any.
    pub(crate) record: Option<Record<'a>>,
    /// For a walk that pends ([`Shared::walk_chain`] with `pend`): the address below the head
    /// where it stopped, the record not being in memory or read ahead (`record` is then
    /// `None`); 0 otherwise.
    pub(crate) cold: u64,
}

/// Where a chain walk ended ([`Shared::walk_chain`]).
pub(crate) enum Walk<'a> {
    /// The key's newest valid record.
    Found(Record<'a>),
    /// No valid record of the key at or above the walk's begin.
    Absent,
    /// A walk that pends stopped at this address below the head: its record is neither in memory
    /// nor read ahead (`log::cold`'s read-ahead copies), so the pending path reads it first.
    Cold(u64),
}

impl<'a> Walk<'a> {
    /// The record found and the address a pending walk stopped at (0 if none).
    #[inline(always)]
    fn split(self) -> (Option<Record<'a>>, u64) {
        match self {
            Walk::Found(record) => (Some(record), 0),
            Walk::Absent => (None, 0),
            Walk::Cold(address) => (None, address),
        }
    }
}

/// Stripes of `Shared::tier_stripes` (a power of two): enough that two writers of different
/// keys rarely share one.
const TIER_STRIPES: usize = 4096;

/// State shared by the store, its sessions and its background threads (see the module docs).
pub(crate) struct Shared {
    pub(crate) config: StoreConfig,
    pub(crate) epoch: LightEpoch,
    pub(crate) index: HashIndex,
    pub(crate) log: HybridLog,
    pub(crate) latches: VersionLatches,
    pub(crate) state: GlobalState,
    /// How far the Persian scanners have emitted the image (`scan_progress` module).
    pub(crate) scan_progress: ScanProgress,
    pub(crate) checkpoints: CheckpointDirectory,
    /// The access word new keys start with (`Store::set_access_stamp`).
    pub(crate) access_stamp: AtomicU32,
    /// Bytes of live records (`accounting` module).
    pub(crate) live: LiveBytes,
    /// The state-machine slot, seals and checkpoint results.
    pub(crate) machine: MachineState,
    /// The session registry.
    pub(crate) sessions: SessionRegistry,
    /// Rollback bookkeeping.
    pub(crate) rollback: RollbackState,
    /// The maintenance lock, compaction requests, shutdown.
    pub(crate) compaction: CompactionState,
    /// Back-pressure: writers wait here for compaction to free pages.
    pub(crate) memory: MemoryGate,
    /// `blocking` strategy barrier.
    pub(crate) pause: PauseBarrier,
    /// With a storage tier: the locks of read-copy-updates of records below the read-only
    /// address, by key hash (`Session::hold_tier_stripe`); empty without a tier.
    tier_stripes: Box<[parking_lot::Mutex<()>]>,
    /// With a storage tier: the pages incremental checkpoints need, and crashed runs' dead
    /// ranges (`durable_tier.rs`).
    pub(crate) durable_tier: parking_lot::Mutex<DurableTier>,
}

impl Shared {
    /// The shared state of a store opened with `config` on `checkpoints` (evicting into `tier`, if
    /// any), before recovery: REST
    /// of version 1, world-line 0, no sessions.
    pub(crate) fn new(
        config: StoreConfig,
        checkpoints: CheckpointDirectory,
        tier: Option<crate::log::Tier>,
    ) -> Shared {
        let latch_words = (config.index_buckets / 4)
            .clamp(1 << 10, 1 << 20)
            .next_power_of_two();
        Shared {
            epoch: LightEpoch::new(EPOCH_SLOTS),
            index: HashIndex::new(config.index_buckets),
            log: HybridLog::new(config.log_page_bytes, config.log_memory_bytes, tier),
            latches: VersionLatches::new(latch_words),
            state: GlobalState::new(SystemState {
                phase: Phase::Rest,
                version: 1,
                world_line: 0,
            }),
            scan_progress: ScanProgress::new(config.flusher_threads),
            checkpoints,
            access_stamp: AtomicU32::new(config.access_stamp),
            live: LiveBytes::new(EPOCH_SLOTS),
            machine: MachineState::new(),
            sessions: SessionRegistry::new(),
            rollback: RollbackState::new(),
            compaction: CompactionState::new(),
            memory: MemoryGate::new(),
            pause: PauseBarrier::new(),
            tier_stripes: (0..if config.storage_tier { TIER_STRIPES } else { 0 })
                .map(|_| parking_lot::Mutex::new(()))
                .collect(),
            durable_tier: parking_lot::Mutex::new(DurableTier::default()),
            config,
        }
    }

    /// The read-copy-update lock of `hash`'s key in a tiered store.
    #[inline]
    pub(crate) fn tier_stripe(&self, hash: KeyHash) -> &parking_lot::Mutex<()> {
        &self.tier_stripes[(hash.0 as usize) & (TIER_STRIPES - 1)]
    }

    /// The strategy of the checkpoint in flight.
    pub(crate) fn strategy_in_flight(&self) -> Strategy {
        self.machine.strategy()
    }

    /// `FLAG_STABLE_SLOT` if records written now get the stable-copy word, else 0: while the
    /// default strategy or the newest checkpoint's is cpr-copy, whose v+1 writers store a stable
    /// copy's address in the record they then write in place. Other records cost 8 bytes less;
    /// cpr-copy copies them instead (read-copy-update, as the other strategies do).
    #[inline]
    pub(crate) fn stable_slot_flag(&self) -> u64 {
        if self.config.default_strategy == Strategy::CprCopy
            || self.machine.strategy() == Strategy::CprCopy
        {
            crate::log::FLAG_STABLE_SLOT
        } else {
            0
        }
    }

    /// The newest record of `key` for a reader: `None` if the index has no entry for its tag.
    /// Caller holds epoch protection. `invalid`: versions a rollback discarded (the session's
    /// copy, see `rollback` module).
    ///
    /// The walk's lower bound is read *before* the chain head: see [`Located`].
    #[inline(always)]
    pub(crate) fn locate(
        &self,
        hash: KeyHash,
        key: &[u8],
        invalid: InvalidVersions,
    ) -> Option<Located<'_>> {
        self.locate_in(hash, key, invalid, false)
    }

    /// [`Shared::locate`]; with `pend`, a walk that meets a record below the head that is not
    /// read ahead stops there ([`Located::cold`]) instead of reading it from the page file.
    #[inline(always)]
    pub(crate) fn locate_in(
        &self,
        hash: KeyHash,
        key: &[u8],
        invalid: InvalidVersions,
        pend: bool,
    ) -> Option<Located<'_>> {
        let begin = self.log.begin_address();
        let entry = self.index.find(hash)?;
        let (record, cold) = self
            .walk_chain(key, entry.address(), begin, invalid, pend)
            .split();
        Some(Located {
            entry,
            record,
            cold,
        })
    }

    /// The newest record of `key` for a writer, creating the index entry for its tag if missing.
    /// Caller holds epoch protection. Same read order as [`Shared::locate`]; `pend` as
    /// [`Shared::locate_in`].
    #[inline(always)]
    pub(crate) fn locate_or_create(
        &self,
        hash: KeyHash,
        key: &[u8],
        invalid: InvalidVersions,
        pend: bool,
    ) -> Result<Located<'_>, EngineError> {
        let begin = self.log.begin_address();
        let entry = self
            .index
            .find_or_create(hash, begin)
            .map_err(|_| self.index_full_error())?;
        let (record, cold) = self
            .walk_chain(key, entry.address(), begin, invalid, pend)
            .split();
        Ok(Located {
            entry,
            record,
            cold,
        })
    }

    /// The newest record with `key` in the chain starting at `head` (skipping invalid records:
    /// flagged, or of a version in `invalid`), walking down to `begin`. Caller holds epoch
    /// protection (or is the only thread), and read `begin` no later than `head` (see
    /// [`Located`]) or holds the maintenance lock.
    #[inline(always)]
    pub(crate) fn find_record(
        &self,
        key: &[u8],
        head: u64,
        begin: u64,
        invalid: InvalidVersions,
    ) -> Option<Record<'_>> {
        match self.walk_chain(key, head, begin, invalid, false) {
            Walk::Found(record) => Some(record),
            Walk::Absent => None,
            Walk::Cold(_) => unreachable!("a walk that does not pend reads every record"),
        }
    }

    /// [`Shared::find_record`]; with `pend`, the walk stops at the first record below the head
    /// that is neither in memory nor read ahead by the calling thread (`Walk::Cold`). Without
    /// `pend` (a constant at every caller but the pending path's) the check folds away.
    #[inline(always)]
    pub(crate) fn walk_chain(
        &self,
        key: &[u8],
        head: u64,
        begin: u64,
        invalid: InvalidVersions,
        pend: bool,
    ) -> Walk<'_> {
        let mut address = head;
        while address >= begin && address != 0 {
            if pend && address < self.log.head_address() && !crate::log::read_ahead(address) {
                return Walk::Cold(address);
            }
            let record = self.log.record(address);
            let word0 = record.word0();
            // `invalid` is empty outside a rollback: one compare of a register with zero.
            if word0 & FLAG_INVALID == 0
                && !invalid.contains(record.version())
                && record.key_equals(key)
            {
                return Walk::Found(record);
            }
            let previous = word0 & crate::log::ADDRESS_MASK;
            // Walks stop below `begin`, which is only sound if chains point down the log.
            debug_assert!(
                previous < address,
                "record {address} links up the log to {previous}: a chain walk that stops below the \
                 begin address would lose what lies behind it"
            );
            address = previous;
        }
        Walk::Absent
    }

    pub(crate) fn index_full_error(&self) -> EngineError {
        EngineError::OutOfMemory {
            detail: format!(
                "the hash index overflow pool ({} buckets) is exhausted; raise StoreConfig::index_buckets",
                self.index.bucket_count()
            ),
        }
    }

    /// Stores `next` as the state word. If it lets sessions run a version they could not run
    /// before (IN_PROGRESS(v+1), PAUSE(v) whose sessions adopt v+1, THROW(n)), first notes the
    /// log tail for PURGE's bound (`RollbackState::note_allowed`): read before the store, so that
    /// every record of the new versions lies above it. Only the one state machine running stores
    /// (a checkpoint driver or a rollback, or the epoch actions they queue).
    pub(crate) fn publish_state(&self, next: SystemState) {
        let runnable = |state: SystemState| state.version + u64::from(state.phase == Phase::Pause);
        let before = runnable(self.state.load());
        if runnable(next) > before {
            self.rollback
                .note_allowed(before, runnable(next), self.log.tail_address());
        }
        self.state.store(next);
    }

    /// [`Shared::publish_state`] keeping the world-line.
    pub(crate) fn publish_phase(&self, phase: Phase, version: u64) {
        let world_line = self.state.load().world_line;
        self.publish_state(SystemState {
            phase,
            version,
            world_line,
        });
    }

    /// Bumps the epoch with an action that (optionally) stores `next` and waits until it ran
    /// ([`LightEpoch::bump_and_wait`]). The caller must not hold epoch protection.
    pub(crate) fn bump_and_wait(self: &Arc<Self>, next: Option<SystemState>) {
        let target = self.clone();
        self.epoch.bump_and_wait(move || {
            if let Some(state) = next {
                target.publish_state(state);
            }
        });
    }

    /// Wakes the compaction thread.
    pub(crate) fn request_compaction(&self) {
        self.compaction.request();
    }

    /// Takes the state-machine slot, waiting for a running checkpoint until `deadline`.
    pub(crate) fn acquire_state_machine(
        &self,
        deadline: std::time::Instant,
    ) -> Result<(), EngineError> {
        self.machine.acquire(deadline)
    }

    /// Gives the state-machine slot back.
    pub(crate) fn release_state_machine(&self) {
        self.machine.release();
    }

    /// The largest value, in bytes, that fits one record with a key of `key_bytes` bytes, or
    /// `None` when the key alone is too large (`Store::max_value_bytes`).
    pub(crate) fn max_value_bytes(&self, key_bytes: usize) -> Option<usize> {
        if key_bytes > u32::MAX as usize {
            return None;
        }
        // With the largest header the key can get (the stable-copy word may be added to any
        // record a write creates, and long keys carry their length in a word of their own).
        let record_words = self.log.max_record_bytes() / 8;
        let value_words = record_words
            .checked_sub(crate::log::header_words(key_bytes, true) + key_bytes.div_ceil(8))?;
        Some(value_words * 8)
    }

    /// Gives back a session's epoch slot (its `Drop`).
    pub(crate) fn release_session_slot(&self, slot: usize) {
        self.sessions.release_slot(&self.epoch, slot);
    }
}

/// Walks for memory accounting (`accounting` module: the live-bytes invariants).
impl Shared {
    /// Calls `visit` with the newest valid record of every key of the chain starting at `head`
    /// (tombstones included), newest key first, until `visit` returns `false`; returns whether it
    /// ran to the end. Skips records flagged invalid or stable (cpr-copy's copies are outside
    /// every chain's meaning) and versions in `invalid`. `settled` is scratch space. Caller holds
    /// epoch protection (or is alone) and read `begin` no later than `head` (see `Located`).
    ///
    /// The one walk behind `Session::scan`, `Session::sample` and [`Shared::recount_live_bytes`].
    pub(crate) fn for_each_newest<'a>(
        &'a self,
        head: u64,
        begin: u64,
        invalid: InvalidVersions,
        settled: &mut Vec<Record<'a>>,
        mut visit: impl FnMut(Record<'a>) -> bool,
    ) -> bool {
        settled.clear();
        let mut address = head;
        while address >= begin && address != 0 {
            let record = self.log.record(address);
            let word0 = record.word0();
            address = record.previous();
            if word0 & (FLAG_INVALID | FLAG_STABLE) != 0
                || invalid.contains(record.version())
                || settled.iter().any(|other| other.same_key(&record))
            {
                continue;
            }
            settled.push(record);
            if !visit(record) {
                return false;
            }
        }
        true
    }

    /// The live bytes of the store (see the module comment).
    pub(crate) fn live_record_bytes(&self) -> u64 {
        self.live.total(self.epoch.high_water())
    }

    /// Walks the whole index and sums the sizes of the records that are their key's newest valid
    /// record and not tombstones: what the live-bytes count must equal when no write is in flight.
    /// Caller holds the maintenance lock (compaction, which moves the begin address, is then
    /// excluded) or is the only thread (recovery); in a tiered store, whose eviction frees pages
    /// meanwhile, the walk is epoch-protected (`thread_epoch` module), refreshed between chains.
    pub(crate) fn recount_live_bytes(&self, invalid: InvalidVersions) -> u64 {
        const BATCH: usize = 4096;
        let buckets = self.index.bucket_count();
        let protection = self.thread_epoch();
        let mut heads = Vec::new();
        let mut settled = Vec::new();
        let mut total = 0u64;
        let mut start = 0;
        while start < buckets {
            let end = (start + BATCH).min(buckets);
            let begin = self.log.begin_address();
            heads.clear();
            self.index
                .for_each_entry(start..end, |head| heads.push(head));
            for (position, &head) in heads.iter().enumerate() {
                if position % REFRESH_CHAINS == 0 {
                    // The previous chains' records: copies read from the storage tier
                    // (`log::cold`) are freed, pages in memory may be after the refresh.
                    settled.clear();
                    crate::log::release_cold_copies();
                    protection.protect();
                }
                self.for_each_newest(head, begin, invalid, &mut settled, |record| {
                    if !record.is_tombstone() {
                        total += record.size_bytes() as u64;
                    }
                    true
                });
            }
            settled.clear();
            start = end;
        }
        total
    }
}
