//! Sessions: the only way to operate on the store. A session owns one epoch slot, numbers its
//! operations (every read, upsert, rmw and delete takes the next serial, starting at 1) and adopts
//! the global CPR state only when it refreshes (every `REFRESH_INTERVAL` operations, or at once when
//! the state word changed, or on a CPR shift).
//!
//! The v/v+1 rules (docs/engine.md, "The CPR phases") are applied per operation, on the newest record `r`
//! (version `rv`) of the key, with `v` the session's version:
//! - acting as v (REST, PREPARE): `rv > v` means another thread already runs v+1: CPR shift
//!   (refresh, adopt v+1 recording the CPR point = serial before this op, retry). PREPARE writes
//!   first take the key's *old* latch; failure is a CPR shift.
//! - acting as v+1 (IN_PROGRESS, WAIT_PENDING, WAIT_FLUSH) on `rv < v`: IN_PROGRESS takes the *new*
//!   latch (failure: retry later), WAIT_PENDING retries while an *old* latch is held; then
//!   read-copy-update to a v+1 record (`cpr-copy` instead saves a stable copy and updates in place).
//!   A v+1 thread never changes a version <= v record's value in place while the checkpoint of v
//!   may still read it; once a Persian scanner has emitted the key's bucket, it may
//!   (`scan_progress` module).
//! - otherwise: in place if `r` is in the mutable region and the value fits, else read-copy-update.
//!
//! In-place writes and read-copy-updates both hold `r`'s record lock; a read-copy-update seals `r`
//! once the new record is published, and in-place writers that find `r` sealed retry, so no write
//! is lost between the two paths.
//!
//! With `StoreConfig::rollback_ready` (see `rollback` module): a write acting as `s` on a record of
//! a version below `s` always read-copy-updates, in every phase and strategy (no in-place write
//! behind a Persian scan, no cpr-copy stable copy), and chain walks skip the versions a rollback
//! discarded. A session adopting a new world-line (the state word carries it) returns
//! `EngineError::RolledBack` once and resets its serial counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpr_points::SessionShared;
use crate::index::KeyHash;
use crate::latch::{old_held, try_lock_new, try_lock_old, unlock_new, unlock_old};
use crate::log::{words_for, HybridLog, Record};
use crate::shared::Shared;
use crate::state::{GlobalState, InvalidVersions, Phase};
use crate::{EngineError, SessionId};

mod pending;
mod scan;
mod write;
pub use pending::{Finished, Started, PENDING_DEPTH, PENDING_READ_BYTES};
use scan::ScanBuffer;
pub use scan::{Sampled, MAX_SAMPLE_KEYS};

/// Operations between unconditional epoch refreshes.
const REFRESH_INTERVAL: u32 = 256;

/// Outcome of one attempt at an operation.
enum Step<T> {
    Done(T),
    /// Retry at once (lost a race).
    Again,
    /// CPR shift: refresh (adopting v+1) and retry.
    Shift,
    /// A conflicting thread of the other version holds the key: refresh and retry.
    RetryLater,
    /// The log budget is exhausted: wait for compaction and retry.
    NeedMemory,
    /// Only with `Session::pend_walks`: the key's chain continues at this address below the
    /// head, whose record is not read ahead; the pending path reads it, then retries.
    Cold(u64),
}

/// How [`Session::run_or_pend`] ended.
enum Ran<T> {
    Done(T),
    /// Stopped at this address below the head (see `Step::Cold`).
    Cold(u64),
}

/// Held version latches, released when the attempt ends.
struct LatchHold<'a> {
    word: &'a AtomicU64,
    old: bool,
    new: bool,
}

impl Drop for LatchHold<'_> {
    fn drop(&mut self) {
        if self.old {
            unlock_old(self.word);
        }
        if self.new {
            unlock_new(self.word);
        }
    }
}

/// What a write does to the key.
#[derive(Clone, Copy)]
enum Write<'v> {
    /// The value, and the value capacity in words a new record for it gets (at least the
    /// value's words; more when the writer asked for room to grow in place).
    Put(&'v [u8], usize),
    Delete,
}

/// A client session. `Send`, not `Sync`; dropping it releases its epoch slot.
pub struct Session {
    /// The store's shared state (named for what it is to the session: its store).
    store: Arc<Shared>,
    /// Keeps the `Store` alive while the session lives, as its background threads (joined when
    /// the `Store` drops) serve the session; opaque, so that sessions do not depend on `store`.
    _owner: Arc<dyn Send + Sync>,
    shared: Arc<SessionShared>,
    slot: usize,
    serial: u64,
    phase: Phase,
    version: u64,
    state_word: u64,
    protected: bool,
    ops_since_refresh: u32,
    /// The world-line this session's serials count in.
    world_line: u64,
    /// `StoreConfig::rollback_ready`, copied: read on every write.
    rollback_ready: bool,
    /// Versions discarded by the rollback in flight, copied when the state word is adopted.
    invalid: InvalidVersions,
    /// Set when adopting a new world-line: the next operation (or the one in progress) returns
    /// `RolledBack` with this (world-line, surviving serial).
    thrown: Option<(u64, u64)>,
    old_value: Vec<u8>,
    new_value: Vec<u8>,
    scan_buffer: ScanBuffer,
    /// Key buffers of [`Session::sample`] results the caller gave back, for the next call.
    sample_spare: Vec<Sampled>,
    /// Set while the pending path runs an operation: chain walks stop at records below the head
    /// that are not read ahead (`Step::Cold`) instead of reading them synchronously.
    pend_walks: bool,
    /// The pending operations and their page reader (`pending` module); created on first use.
    pending: Option<Box<pending::Pending>>,
    /// `Send` but not `Sync`: a session is one thread's sequence of operations.
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl Session {
    /// Wraps an acquired epoch `slot` (see `Store::acquire_session_slot`) into a session of the
    /// store `owner` whose shared state is `store`.
    pub(crate) fn new(
        store: Arc<Shared>,
        owner: Arc<dyn Send + Sync>,
        shared: Arc<SessionShared>,
        serial: u64,
        slot: usize,
        world_line: u64,
    ) -> Session {
        let version = shared.points.lock().version;
        let rollback_ready = store.config.rollback_ready;
        Session {
            store,
            _owner: owner,
            shared,
            slot,
            serial,
            phase: Phase::Rest,
            version,
            state_word: u64::MAX,
            protected: false,
            ops_since_refresh: 0,
            world_line,
            rollback_ready,
            invalid: InvalidVersions::NONE,
            thrown: None,
            old_value: Vec::new(),
            new_value: Vec::new(),
            scan_buffer: ScanBuffer::default(),
            sample_spare: Vec::new(),
            pend_walks: false,
            pending: None,
            _not_sync: std::marker::PhantomData,
        }
    }

    /// This session's id (survives restarts).
    pub fn id(&self) -> SessionId {
        self.shared.id
    }

    /// Serial number of this session's last operation.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The version this session runs as: the version its last operation ran in (an operation
    /// that met a newer version shifted to it before taking effect, so this includes that shift).
    /// A caller reporting versions to clients (DPR) reads it after each operation: an operation
    /// never runs in a version newer than the value read right after it.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Serial covered by the newest durable checkpoint.
    pub fn committed_serial(&self) -> u64 {
        self.shared.committed.load(Ordering::SeqCst)
    }

    /// A handle that reads this session's [`Session::committed_serial`] from anywhere, for a
    /// caller that acknowledges writes this session made on its behalf (the server's script
    /// thread writes for the connection that sent the script).
    pub fn commit_watch(&self) -> CommitWatch {
        CommitWatch(self.shared.clone())
    }

    /// Refreshes the epoch and adopts the global CPR state now.
    pub fn refresh(&mut self) {
        self.store.epoch.protect(self.slot);
        self.protected = true;
        self.adopt(false);
    }

    /// Goes idle: releases epoch protection so checkpoints and compaction never wait for this
    /// session. The next operation resumes it.
    pub fn suspend(&mut self) {
        if self.protected {
            self.set_idle(self.serial);
            self.store.epoch.suspend(self.slot);
            self.protected = false;
        }
    }

    /// Adopts the global state. `in_op`: called in the middle of operation `serial`, which has not
    /// taken effect and will run in the adopted version.
    fn adopt(&mut self, in_op: bool) {
        loop {
            let state = self.store.state.load();
            if state.phase == Phase::Pause && self.version <= state.version {
                self.pause(in_op);
                continue;
            }
            let acting = state.version;
            let mut points = self.shared.points.lock();
            points.idle_serial = None;
            if state.world_line != self.world_line {
                // A rollback: the operations after the surviving serial are gone, this one (if
                // `in_op`) does not run, and the serial counter continues from the survivor. The
                // rollback reset `points` (under the registry lock, before publishing the state).
                let surviving = points.surviving;
                if points.version < acting {
                    points.version = acting;
                    points.last_point = surviving;
                }
                self.world_line = state.world_line;
                self.serial = surviving;
                self.version = acting;
                self.thrown = Some((state.world_line, surviving));
            } else if acting > self.version {
                let point = if in_op { self.serial - 1 } else { self.serial };
                if points.version < acting {
                    points.version = acting;
                    points.last_point = point;
                }
                self.version = acting;
            }
            drop(points);
            // Loaded after the state word: the range of a rollback is stored before its THROW.
            self.invalid = self.store.rollback.invalid();
            self.phase = state.phase;
            self.state_word = GlobalState::word_of(state);
            self.ops_since_refresh = 0;
            return;
        }
    }

    /// The `blocking` barrier: record the CPR point, adopt v+1, leave the epoch and wait.
    fn pause(&mut self, in_op: bool) {
        let shared = self.store.clone();
        let state = shared.state.load();
        let point = if in_op { self.serial - 1 } else { self.serial };
        {
            let mut points = self.shared.points.lock();
            // A session that has not adopted a rollback yet counts in the discarded numbering.
            let point = SessionShared::idle_serial_of(&points, self.world_line, point);
            if points.version <= state.version {
                points.version = state.version + 1;
                points.last_point = point;
            }
            points.idle_serial = Some(point);
        }
        self.version = state.version + 1;
        shared.epoch.suspend(self.slot);
        shared.pause.wait_while(
            || shared.state.load().phase == Phase::Pause,
            Duration::from_millis(100),
        );
        shared.epoch.protect(self.slot);
    }

    /// Starts an operation: refreshes if due, then takes the next serial. Fails with
    /// `RolledBack` (once) if the session adopted a new world-line.
    #[inline]
    fn begin_op(&mut self) -> Result<(), EngineError> {
        if self.store.log.is_tiered() {
            // The previous operation's records read from the storage tier (`log::cold`).
            crate::log::release_cold_copies();
        }
        if !self.protected {
            self.store.epoch.protect(self.slot);
            self.protected = true;
            self.adopt(false);
        } else {
            self.ops_since_refresh += 1;
            if self.ops_since_refresh >= REFRESH_INTERVAL
                || self.store.state.load_relaxed_word() != self.state_word
            {
                self.store.epoch.protect(self.slot);
                self.adopt(false);
            }
        }
        self.check_thrown()?;
        self.serial += 1;
        Ok(())
    }

    /// Returns `RolledBack` once after adopting a new world-line. The hot path reads one field
    /// of the session (no shared memory, no write).
    #[inline(always)]
    fn check_thrown(&mut self) -> Result<(), EngineError> {
        if self.thrown.is_none() {
            return Ok(());
        }
        self.take_thrown()
    }

    #[cold]
    fn take_thrown(&mut self) -> Result<(), EngineError> {
        match self.thrown.take() {
            None => Ok(()),
            Some((world_line, surviving_serial)) => Err(EngineError::RolledBack {
                world_line,
                surviving_serial,
            }),
        }
    }

    /// Records `serial` as the last one completed while the session holds no protection.
    fn set_idle(&self, serial: u64) {
        let mut points = self.shared.points.lock();
        points.idle_serial = Some(SessionShared::idle_serial_of(
            &points,
            self.world_line,
            serial,
        ));
    }

    fn refresh_in_op(&mut self) {
        self.store.epoch.protect(self.slot);
        self.adopt(true);
    }

    /// Leaves the epoch until compaction frees memory (bounded), then re-enters.
    fn wait_for_memory(&mut self, deadline: &mut Option<Instant>) -> Result<(), EngineError> {
        let shared = self.store.clone();
        let limit = shared.config.memory_wait_limit;
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + limit);
        if Instant::now() >= deadline {
            if let Some(failure) = shared.log.tier_failure() {
                return Err(EngineError::OutOfMemory {
                    detail: format!(
                        "the log is at its budget of {} bytes and the storage tier cannot take \
                         its old pages: {failure}",
                        shared.config.log_memory_bytes
                    ),
                });
            }
            return Err(EngineError::OutOfMemory {
                detail: format!(
                    "the log is at its budget of {} bytes and compaction freed nothing for {:.3} s (memory_wait_limit){}",
                    shared.config.log_memory_bytes,
                    limit.as_secs_f64(),
                    if shared.config.rollback_ready {
                        "; with rollback_ready compaction keeps every version a rollback may \
                         return to: raise Store::set_rollback_floor, or checkpoint so that older \
                         checkpoints are pruned (keep_checkpoints)"
                    } else {
                        ""
                    }
                ),
            });
        }
        let generation = shared.memory.generation();
        self.set_idle(self.serial - 1);
        shared.epoch.suspend(self.slot);
        shared.compaction.want_memory();
        shared.request_compaction();
        shared
            .memory
            .wait_past(generation, Duration::from_millis(20));
        self.refresh_in_op();
        Ok(())
    }

    #[inline]
    fn run<T>(
        &mut self,
        attempt: impl FnMut(&mut Session) -> Result<Step<T>, EngineError>,
    ) -> Result<T, EngineError> {
        debug_assert!(
            !self.pend_walks,
            "synchronous operations read cold records themselves"
        );
        match self.run_or_pend(attempt)? {
            Ran::Done(value) => Ok(value),
            Ran::Cold(_) => unreachable!("a walk that does not pend never stops at a cold record"),
        }
    }

    /// Runs `attempt` until it is done, or (only with `pend_walks`) until it stops at a record
    /// below the head that is not read ahead.
    fn run_or_pend<T>(
        &mut self,
        mut attempt: impl FnMut(&mut Session) -> Result<Step<T>, EngineError>,
    ) -> Result<Ran<T>, EngineError> {
        let mut deadline = None;
        loop {
            match attempt(self)? {
                Step::Done(value) => return Ok(Ran::Done(value)),
                Step::Cold(address) => return Ok(Ran::Cold(address)),
                Step::Again => {}
                Step::Shift => self.refresh_in_op(),
                Step::RetryLater => {
                    self.refresh_in_op();
                    std::thread::yield_now();
                }
                Step::NeedMemory => self.wait_for_memory(&mut deadline)?,
            }
            // The operation had not taken effect; if the refresh adopted a new world-line it
            // must not take effect in it either.
            self.check_thrown()?;
        }
    }

    fn check_sizes(&self, key: &[u8], value_len: usize) -> Result<(), EngineError> {
        let max_value_bytes = self.store.max_value_bytes(key.len());
        if max_value_bytes.is_none_or(|max_value_bytes| value_len > max_value_bytes) {
            return Err(EngineError::RecordTooLarge {
                key_bytes: key.len(),
                value_bytes: value_len,
                max_value_bytes: max_value_bytes.unwrap_or(0),
            });
        }
        debug_assert!(
            HybridLog::record_size(key.len(), words_for(value_len), true)
                <= self.store.log.max_record_bytes()
        );
        Ok(())
    }

    /// Reads `key` into `value_out`. Returns whether it was found.
    pub fn read(&mut self, key: &[u8], value_out: &mut Vec<u8>) -> Result<bool, EngineError> {
        self.begin_op()?;
        let hash = KeyHash::of(key);
        self.run(|session| Ok(session.try_read(hash, key, Some(&mut *value_out), |_| {})))
    }

    /// [`Session::read`], and if the key is live, stores `touch(old)` into the access word of its
    /// newest record (`old` is the word it held). The access word is the caller's (an LRU clock,
    /// an LFU counter): not logged, not checkpointed, written with a relaxed store outside the
    /// record's seqlock, so a touch racing with another touch or with a write that copies the
    /// record may be lost. `touch` runs at most once, only for a live key.
    pub fn read_touch(
        &mut self,
        key: &[u8],
        value_out: &mut Vec<u8>,
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.read_and_touch(key, Some(value_out), touch)
    }

    /// Only the touch of [`Session::read_touch`]: `false` (and `touch` not run) if `key` is
    /// absent.
    pub fn touch(
        &mut self,
        key: &[u8],
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.read_and_touch(key, None, touch)
    }

    /// [`Session::read_touch`] and [`Session::touch`]: the read (copying the value only when
    /// `value_out` is given) with the touch of the newest live record, at most once.
    fn read_and_touch(
        &mut self,
        key: &[u8],
        mut value_out: Option<&mut Vec<u8>>,
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.begin_op()?;
        let hash = KeyHash::of(key);
        let mut touch = Some(touch);
        self.run(|session| {
            Ok(
                session.try_read(hash, key, value_out.as_deref_mut(), |record| {
                    if let Some(touch) = touch.take() {
                        record.set_access(touch(record.access()));
                    }
                }),
            )
        })
    }

    /// The access word of `key`'s newest record (see [`Session::read_touch`]), unchanged;
    /// `None` if the key is absent.
    pub fn access_of(&mut self, key: &[u8]) -> Result<Option<u32>, EngineError> {
        self.begin_op()?;
        let hash = KeyHash::of(key);
        let mut access = None;
        let found = self.run(|session| {
            Ok(session.try_read(hash, key, None, |record| {
                access = Some(record.access());
            }))
        })?;
        Ok(access.filter(|_| found))
    }

    /// A hint for a batch of operations: starts loading the index bucket of `key`, so that an
    /// operation on it a few operations later does not wait for memory. No effect on results,
    /// no serial, no lock; call it some 8 to 16 operations ahead (and
    /// [`Session::prefetch_record`] about half as far ahead).
    #[inline]
    pub fn prefetch_index(&self, key: &[u8]) {
        self.store.index.prefetch(KeyHash::of(key));
    }

    /// A hint for a batch of operations: reads the index entry of `key` (its bucket should be
    /// loaded by an earlier [`Session::prefetch_index`]) and starts loading the record it points
    /// to. No effect on results, no serial, no lock.
    #[inline]
    pub fn prefetch_record(&self, key: &[u8]) {
        let shared = &self.store;
        if let Some(entry) = shared.index.find(KeyHash::of(key)) {
            let address = entry.address();
            if address >= shared.log.begin_address() {
                shared.log.prefetch(address);
            }
        }
    }

    /// Inserts or replaces `key`.
    pub fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        self.check_sizes(key, value.len())?;
        self.begin_op()?;
        let hash = KeyHash::of(key);
        let write = Write::Put(value, words_for(value.len()));
        self.run(|session| {
            session
                .try_write(hash, key, write)
                .map(|step| map_step(step, |_| ()))
        })
    }

    /// [`Session::upsert`], returning whether `key` existed (held a live value) before: what an
    /// application counting keys needs, known to the write at no extra cost.
    pub fn upsert_existed(&mut self, key: &[u8], value: &[u8]) -> Result<bool, EngineError> {
        self.upsert_existed_with_capacity(key, value, 0)
    }

    /// [`Session::upsert_existed`] with a capacity hint: when the write creates a record (a new
    /// key, or a value that does not fit the key's record, or any write the checkpoint rules
    /// make a copy), the record gets room for a value of `capacity_bytes` (rounded up to whole
    /// words), so that later writes of values up to that size go in place instead of leaving a
    /// dead record behind. A write that fits the key's current record goes in place whatever the
    /// hint. The hint never shrinks a record below the value, and is cut to the largest value the
    /// store takes for this key ([`Store::max_value_bytes`](crate::Store::max_value_bytes)). The slack is allocated log space:
    /// [`Store::live_record_bytes`](crate::Store::live_record_bytes) counts the record with its capacity.
    pub fn upsert_existed_with_capacity(
        &mut self,
        key: &[u8],
        value: &[u8],
        capacity_bytes: usize,
    ) -> Result<bool, EngineError> {
        self.check_sizes(key, value.len())?;
        let capacity_words = self.capacity_words(key, value.len(), capacity_bytes);
        self.begin_op()?;
        let hash = KeyHash::of(key);
        self.run(|session| session.try_write(hash, key, Write::Put(value, capacity_words)))
    }

    /// The capacity in words a record for a value of `value_len` bytes gets under the hint
    /// `capacity_bytes`: at least the value's words, at most the store's largest value for the
    /// key (`check_sizes` passed, so the value itself is within that bound).
    fn capacity_words(&self, key: &[u8], value_len: usize, capacity_bytes: usize) -> usize {
        let max_words = self.store.max_value_bytes(key.len()).unwrap_or(0) / 8;
        words_for(capacity_bytes)
            .min(max_words)
            .max(words_for(value_len))
    }

    /// Deletes `key`. Returns whether it existed.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, EngineError> {
        self.begin_op()?;
        let hash = KeyHash::of(key);
        self.run(|session| session.try_write(hash, key, Write::Delete))
    }

    /// Read-modify-write: `update(current, new_value)` writes the new value of `key` into
    /// `new_value` (given empty). Runs exactly once, atomically with respect to other writers.
    pub fn rmw(
        &mut self,
        key: &[u8],
        update: impl FnOnce(Option<&[u8]>, &mut Vec<u8>),
    ) -> Result<(), EngineError> {
        self.check_sizes(key, 0)?;
        self.begin_op()?;
        let hash = KeyHash::of(key);
        let mut update = Some(update);
        self.run(|session| session.try_rmw(hash, key, &mut update))
    }

    /// One attempt at a read: copies the value into `out` (if given; else only checks that the
    /// key is live), and calls `live` with the key's newest record if the key is live.
    #[inline(always)]
    fn try_read(
        &self,
        hash: KeyHash,
        key: &[u8],
        out: Option<&mut Vec<u8>>,
        live: impl FnOnce(Record<'_>),
    ) -> Step<bool> {
        let shared = &self.store;
        let Some(located) = shared.locate_in(hash, key, self.invalid, self.pend_walks) else {
            if let Some(out) = out {
                out.clear();
            }
            return Step::Done(false);
        };
        if located.cold != 0 {
            return Step::Cold(located.cold);
        }
        let Some(record) = located.record else {
            if let Some(out) = out {
                out.clear();
            }
            return Step::Done(false);
        };
        if self.observes_newer(&record) {
            return Step::Shift;
        }
        let found = match out {
            Some(out) => record.read_value(out),
            None => !record.is_tombstone(),
        };
        if found {
            live(record);
            // Cheapest first: a store without a tier never reads the head address here.
            if shared.log.is_tiered()
                && shared.config.copy_cold_reads_to_tail
                && self.phase == Phase::Rest
                && record.address < shared.log.head_address()
            {
                crate::shared::relocate::copy_read_to_tail(shared, record, self.invalid);
            }
        }
        Step::Done(found)
    }

    /// Whether reading `record` would show this session state of a version newer than its own:
    /// then it must shift first. In REST no session runs ahead (v+1 exists only after every
    /// session saw PREPARE).
    #[inline(always)]
    fn observes_newer(&self, record: &Record<'_>) -> bool {
        matches!(self.phase, Phase::Prepare | Phase::Pause) && record.version() > self.version
    }

    /// Adds `delta` to the live-bytes count (this session's slot: `accounting` module).
    #[inline]
    fn account(&self, delta: i64) {
        self.store.live.add(self.slot, delta);
    }

    /// The access word a new key starts with ([`Store::set_access_stamp`](crate::Store::set_access_stamp)).
    #[inline]
    fn access_stamp(&self) -> u32 {
        self.store.access_stamp.load(Ordering::Relaxed)
    }

    /// Applies the latch rules of the session's phase. `None`: proceed.
    fn take_latches<'a>(
        &self,
        hold: &mut LatchHold<'a>,
        record_version: Option<u64>,
    ) -> Option<Step<()>> {
        match self.phase {
            Phase::Prepare if !hold.old => {
                if !try_lock_old(hold.word) {
                    return Some(Step::Shift);
                }
                hold.old = true;
            }
            Phase::InProgress
                if record_version.is_some_and(|rv| rv < self.version) && !hold.new =>
            {
                if !try_lock_new(hold.word) {
                    return Some(Step::RetryLater);
                }
                hold.new = true;
            }
            Phase::WaitPending
                if record_version.is_some_and(|rv| rv < self.version) && old_held(hold.word) =>
            {
                return Some(Step::RetryLater);
            }
            _ => {}
        }
        None
    }
}

fn map_step<A, B>(step: Step<A>, map: impl FnOnce(A) -> B) -> Step<B> {
    match step {
        Step::Done(value) => Step::Done(map(value)),
        Step::Again => Step::Again,
        Step::Shift => Step::Shift,
        Step::RetryLater => Step::RetryLater,
        Step::NeedMemory => Step::NeedMemory,
        Step::Cold(address) => Step::Cold(address),
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        {
            let mut points = self.shared.points.lock();
            points.idle_serial = Some(SessionShared::idle_serial_of(
                &points,
                self.world_line,
                self.serial,
            ));
            points.active = false;
            points.ended = true;
        }
        self.store.release_session_slot(self.slot);
    }
}

/// Reads one session's committed serial (see [`Session::commit_watch`]); cheap to clone.
#[derive(Clone)]
pub struct CommitWatch(Arc<SessionShared>);

impl CommitWatch {
    /// The serial covered by the newest durable checkpoint, of the session it watches.
    pub fn committed_serial(&self) -> u64 {
        self.0.committed.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for CommitWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommitWatch({:?})", self.0.id)
    }
}
