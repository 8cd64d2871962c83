//! The write paths of a session: upsert / upsert_existed / delete (`try_write`) and rmw
//! (`try_rmw`), with the v/v+1 rules of the module above (in place, read-copy-update, cpr-copy's
//! stable copy) and, with `rollback_ready`, the rollback rules: `must_copy` (never change an older
//! version in place), `stale_seal` (a seal set by a discarded operation means nothing) and
//! `link_target` (new records link past discarded ones).

use super::{map_step, LatchHold, Session, Step, Write};
use crate::index::{EntrySlot, KeyHash};
use crate::log::{
    words_for, AllocError, HybridLog, NewRecord, Record, RecordGuard, FLAG_INVALID, FLAG_SEALED,
    FLAG_STABLE, FLAG_TOMBSTONE,
};
use crate::shared::Located;
use crate::{EngineError, Strategy};

/// What a read-copy-update writes: the value, the record's value capacity in words (at least
/// the value's: the writer's capacity hint) and the flags (a tombstone has no value).
#[derive(Clone, Copy)]
struct NewValue<'v> {
    value: &'v [u8],
    capacity_words: usize,
    flags: u64,
}

impl Session {
    pub(super) fn try_write(
        &self,
        hash: KeyHash,
        key: &[u8],
        write: Write<'_>,
    ) -> Result<Step<bool>, EngineError> {
        let shared = &self.store;
        let mut hold = LatchHold {
            word: shared.latches.word(hash.0),
            old: false,
            new: false,
        };
        if let Some(step) = self.take_latches(&mut hold, None) {
            return Ok(map_step(step, |_| false));
        }
        let Located {
            mut entry,
            record,
            cold,
        } = shared.locate_or_create(hash, key, self.invalid, self.pend_walks)?;
        if cold != 0 {
            // The pending path reads the record first (`pending` module).
            return Ok(Step::Cold(cold));
        }
        let Some(record) = record else {
            return Ok(match write {
                Write::Delete => Step::Done(false),
                Write::Put(value, capacity_words) => {
                    let step = self.insert(&shared.log, &mut entry, key, value, 0, capacity_words);
                    if let Step::Done(bytes) = step {
                        self.account(bytes as i64);
                    }
                    map_step(step, |_| false)
                }
            });
        };
        let record_version = record.version();
        if record_version > self.version {
            return Ok(Step::Shift);
        }
        let existed = !record.is_tombstone();
        if let (Write::Delete, false) = (write, existed) {
            return Ok(Step::Done(false));
        }
        if let Some(step) = self.take_latches(&mut hold, Some(record_version)) {
            return Ok(map_step(step, |_| false));
        }
        let copy_to_new_version = self.must_copy(hash, record_version);
        let mutable = record.address >= shared.log.read_only_address();
        // A record without the stable-copy word is copied (read-copy-update below) instead.
        if copy_to_new_version
            && mutable
            && !self.rollback_ready
            && record.has_stable_slot()
            && shared.strategy_in_flight() == Strategy::CprCopy
        {
            return Ok(self.cpr_copy_write(&shared.log, record, &mut entry, hash, key, write));
        }
        let mut guard = record.lock();
        if let Some(step) = self.recheck_locked(&guard, hash, key) {
            return Ok(map_step(step, |_| false));
        }
        let _stripe = match self.hold_tier_stripe(mutable, hash, key, record.address, &mut entry) {
            Ok(stripe) => stripe,
            Err(step) => return Ok(map_step(step, |_| false)),
        };
        // Decided under the lock: a concurrent writer may have deleted or revived the key.
        let existed = !guard.record.is_tombstone();
        if !copy_to_new_version && mutable {
            match write {
                Write::Put(value, _) if guard.fits(value.len()) => {
                    guard.write_value(value);
                    guard.set_tombstone(false);
                    guard.set_version(self.version);
                    self.revived_in_place(&guard, existed);
                    return Ok(Step::Done(existed));
                }
                Write::Delete => {
                    guard.set_tombstone(true);
                    guard.set_version(self.version);
                    if existed {
                        self.account(-(guard.record.size_bytes() as i64));
                    }
                    return Ok(Step::Done(existed));
                }
                Write::Put(..) => {}
            }
        }
        Ok(map_step(
            self.replace_locked(&shared.log, guard, &mut entry, key, write, existed),
            |_| existed,
        ))
    }

    /// After an in-place put under `guard`: a key that was not live (`existed` false: the record
    /// was a tombstone) is a new key: it starts with the store's access stamp and adds its
    /// record's bytes to the live count.
    fn revived_in_place(&self, guard: &RecordGuard<'_>, existed: bool) {
        if !existed {
            guard.record.set_access(self.access_stamp());
            self.account(guard.record.size_bytes() as i64);
        }
    }

    /// Read-copy-update of the locked record with `write` (a put or a tombstone), accounting the
    /// live bytes and carrying the access word forward (a key that was not live starts with the
    /// stamp).
    fn replace_locked(
        &self,
        log: &HybridLog,
        guard: RecordGuard<'_>,
        entry: &mut EntrySlot<'_>,
        key: &[u8],
        write: Write<'_>,
        existed: bool,
    ) -> Step<()> {
        let (value, capacity_words, flags) = match write {
            Write::Put(value, capacity_words) => (value, capacity_words, 0),
            Write::Delete => (&[][..], 0, FLAG_TOMBSTONE),
        };
        let new = NewValue {
            value,
            capacity_words,
            flags,
        };
        self.rcu_accounted(log, guard, entry, key, new, existed, false)
    }

    /// [`Session::rcu_locked`] with the live-bytes delta and the access word (see
    /// `replace_locked`). `existed`: the locked record is live.
    #[allow(clippy::too_many_arguments)]
    fn rcu_accounted(
        &self,
        log: &HybridLog,
        guard: RecordGuard<'_>,
        entry: &mut EntrySlot<'_>,
        key: &[u8],
        new: NewValue<'_>,
        existed: bool,
        use_reserve: bool,
    ) -> Step<()> {
        let old_bytes = if existed {
            guard.record.size_bytes() as i64
        } else {
            0
        };
        let access = if existed {
            guard.record.access()
        } else {
            self.access_stamp()
        };
        let tombstone = new.flags & FLAG_TOMBSTONE != 0;
        let step = self.rcu_locked(log, guard, entry, key, new, access, use_reserve);
        if let Step::Done(new_bytes) = step {
            // A tombstone is never live: only the old record's bytes leave the count.
            let new_bytes = if !tombstone { new_bytes as i64 } else { 0 };
            self.account(new_bytes - old_bytes);
        }
        map_step(step, |_| ())
    }

    /// Whether a write acting as this session's version must leave the key's newest record (of
    /// `record_version`) unchanged and write a new version: it acts as v+1 on a record of v or
    /// older, and the checkpoint of v may still read that record. A Persian scan that already
    /// emitted the key's bucket will not (`scan_progress` module), so the write may go in place.
    ///
    /// With `rollback_ready`, every write to a record of an older version copies, in every phase:
    /// that record is the key's state as of its version, which a rollback may return to. This is
    /// the one decision every write path takes (upsert, upsert_existed, delete and its tombstone
    /// through `try_write`; rmw through `try_rmw_with`; both also skip the cpr-copy path, which
    /// would mark the record v+1 and write it in place). Inserts (no record) and rmw's placeholder
    /// create records of the writer's own version. The engine's other writers of records: recovery
    /// (before any session exists), compaction (copies a record with its version and seals the
    /// original; it never changes a value) and PURGE (flags and links of discarded records only).
    #[inline]
    fn must_copy(&self, hash: KeyHash, record_version: u64) -> bool {
        if record_version >= self.version {
            return false;
        }
        if self.rollback_ready {
            return true;
        }
        if !self.phase.is_new_version() {
            return false;
        }
        let shared = &self.store;
        !shared
            .scan_progress
            .emitted(self.version - 1, shared.index.bucket_of(hash))
    }

    /// Under the record lock: the record may have been superseded or moved to v+1 meanwhile.
    fn recheck_locked(
        &self,
        guard: &RecordGuard<'_>,
        hash: KeyHash,
        key: &[u8],
    ) -> Option<Step<()>> {
        if guard.record.is_sealed() && !self.stale_seal(guard, hash, key) {
            return Some(Step::Again);
        }
        let version = guard.record.version();
        if version > self.version {
            return Some(if self.phase.is_new_version() {
                Step::Again
            } else {
                Step::Shift
            });
        }
        None
    }

    /// With a storage tier, the lock a read-copy-update takes on the record it copies (below the
    /// read-only address) excludes nobody when the record came from the page file: each reader
    /// holds its own copy (`log::cold`). Such writers take the key's stripe lock instead, and
    /// under it check that the record is still the key's newest (`Step::Again` if not; the
    /// caller has run nothing yet). Every writer that copies a record of this key holds the same
    /// stripe until its new record is published, so, as with the record lock, no newer version
    /// of the key can appear meanwhile, and `entry` is refreshed to the current chain head.
    /// Nothing without a tier, or for a record written in place (`mutable`: in memory, where the
    /// record lock is the real one).
    #[inline]
    fn hold_tier_stripe<'s>(
        &'s self,
        mutable: bool,
        hash: KeyHash,
        key: &[u8],
        based_on: u64,
        entry: &mut EntrySlot<'s>,
    ) -> Result<Option<parking_lot::MutexGuard<'s, ()>>, Step<()>> {
        if mutable || !self.store.log.is_tiered() {
            return Ok(None);
        }
        let stripe = self.store.tier_stripe(hash).lock();
        let located = self
            .store
            .locate(hash, key, self.invalid)
            .ok_or(Step::Again)?;
        if located.record.map(|record| record.address) != Some(based_on) {
            return Err(Step::Again);
        }
        *entry = located.entry;
        Ok(Some(stripe))
    }

    /// Whether the locked, sealed record is still its key's newest valid record: then the record
    /// that sealed it belongs to versions a rollback discarded (an operation of the old world-line
    /// read-copy-updated it), and the seal means nothing. Only with `rollback_ready`. Under the
    /// lock this is exact: a valid writer publishes its new record before it seals and unlocks,
    /// and compaction re-points the entry at its copy before it seals.
    #[cold]
    fn stale_seal(&self, guard: &RecordGuard<'_>, hash: KeyHash, key: &[u8]) -> bool {
        self.rollback_ready
            && self
                .store
                .locate(hash, key, self.invalid)
                .and_then(|located| located.record)
                .is_some_and(|newest| newest.address == guard.record.address)
    }

    /// The address a new record links to when the chain head is `head`: past the records of
    /// discarded versions at the top of the chain (PURGE unlinks the rest). Links only move down,
    /// so the chain keeps pointing down the log.
    #[inline]
    fn link_target(&self, head: u64) -> u64 {
        if self.invalid.is_empty() {
            return head;
        }
        let log = &self.store.log;
        let begin = log.begin_address();
        let mut address = head;
        while address >= begin && address != 0 {
            let record = log.record(address);
            let word0 = record.word0();
            if word0 & FLAG_INVALID == 0 && !self.invalid.contains(record.version()) {
                break;
            }
            address = word0 & crate::log::ADDRESS_MASK;
        }
        address
    }

    /// Writes the first record of a key with no valid record (a new key: it starts with the
    /// store's access stamp). Done carries the new record's size in bytes (for live bytes).
    fn insert(
        &self,
        log: &HybridLog,
        entry: &mut EntrySlot<'_>,
        key: &[u8],
        value: &[u8],
        flags: u64,
        capacity_words: usize,
    ) -> Step<usize> {
        let address = match log.write_new(
            &NewRecord {
                previous: self.link_target(entry.address()),
                flags: flags | self.store.stable_slot_flag(),
                version: self.version,
                key,
                value,
                capacity_words,
                access: self.access_stamp(),
            },
            false,
        ) {
            Ok(address) => address,
            Err(AllocError::NeedMemory) => return Step::NeedMemory,
        };
        match entry.compare_exchange(address) {
            Ok(()) => Step::Done(log.record(address).size_bytes()),
            Err(_) => {
                log.record(address).set_flags(FLAG_INVALID);
                Step::Again
            }
        }
    }

    /// Publishes a new version of the locked record's key (starting with the access word
    /// `access`) and seals the old record. Done carries the new record's size in bytes.
    #[allow(clippy::too_many_arguments)]
    fn rcu_locked(
        &self,
        log: &HybridLog,
        guard: RecordGuard<'_>,
        entry: &mut EntrySlot<'_>,
        key: &[u8],
        new: NewValue<'_>,
        access: u32,
        use_reserve: bool,
    ) -> Step<usize> {
        let slot = self.store.stable_slot_flag();
        debug_assert!(new.capacity_words >= words_for(new.value.len()));
        let write = |previous: u64| {
            log.write_new(
                &NewRecord {
                    previous: self.link_target(previous),
                    flags: new.flags | slot,
                    version: self.version,
                    key,
                    value: new.value,
                    capacity_words: new.capacity_words,
                    access,
                },
                use_reserve,
            )
        };
        let mut address = match write(entry.address()) {
            Ok(address) => address,
            Err(AllocError::NeedMemory) => return Step::NeedMemory,
        };
        loop {
            debug_assert!(entry.address() < address, "chains point down the log");
            match entry.compare_exchange(address) {
                Ok(()) => {
                    guard.record.set_flags(FLAG_SEALED);
                    return Step::Done(log.record(address).size_bytes());
                }
                // Only the head moved (another key of this chain): we hold the key's newest record,
                // so no newer version of our key can have appeared. Re-link and retry — but only
                // below our record: see `HybridLog::relink_or_rewrite`. (With a storage tier the
                // record lock may be a copy's: `hold_tier_stripe` excludes the other writers.)
                Err(current) if entry.retarget(current) => {
                    match log.relink_or_rewrite(address, entry.address(), write) {
                        Ok(relinked) => address = relinked,
                        Err(AllocError::NeedMemory) => return Step::NeedMemory,
                    }
                }
                Err(_) => {
                    log.record(address).set_flags(FLAG_INVALID);
                    return Step::Again;
                }
            }
        }
    }

    /// cpr-copy's first v+1 write to a version <= v record: save a stable copy of the v value
    /// (a record outside every chain, pointed to by the live record), mark the record v+1, then
    /// write in place.
    fn cpr_copy_write(
        &self,
        log: &HybridLog,
        record: Record<'_>,
        entry: &mut EntrySlot<'_>,
        hash: KeyHash,
        key: &[u8],
        write: Write<'_>,
    ) -> Step<bool> {
        let mut guard = record.lock();
        if let Some(step) = self.recheck_locked(&guard, hash, key) {
            return map_step(step, |_| false);
        }
        let existed = !guard.record.is_tombstone();
        if guard.record.version() == self.version {
            // Another v+1 writer saved the stable copy between our checks: treat as same-version.
            drop(guard);
            return Step::Again;
        }
        let Some(stable) = self.save_stable_copy(log, &guard, key) else {
            return Step::NeedMemory;
        };
        guard.set_stable_address(stable);
        guard.set_version(self.version);
        match write {
            Write::Put(value, _) if guard.fits(value.len()) => {
                guard.write_value(value);
                guard.set_tombstone(false);
                self.revived_in_place(&guard, existed);
                Step::Done(existed)
            }
            Write::Put(..) => map_step(
                self.replace_locked(log, guard, entry, key, write, existed),
                |_| existed,
            ),
            Write::Delete => {
                guard.set_tombstone(true);
                if existed {
                    self.account(-(guard.record.size_bytes() as i64));
                }
                Step::Done(existed)
            }
        }
    }

    fn save_stable_copy(
        &self,
        log: &HybridLog,
        guard: &RecordGuard<'_>,
        key: &[u8],
    ) -> Option<u64> {
        let tombstone = guard.record.is_tombstone();
        let mut value = Vec::new();
        if !tombstone {
            guard.copy_value(&mut value);
        }
        let result = log.write_new(
            &NewRecord {
                previous: 0,
                flags: FLAG_STABLE | if tombstone { FLAG_TOMBSTONE } else { 0 },
                version: guard.record.version(),
                key,
                value: &value,
                capacity_words: words_for(value.len()),
                access: guard.record.access(),
            },
            false,
        );
        result.ok()
    }

    pub(super) fn try_rmw<F: FnOnce(Option<&[u8]>, &mut Vec<u8>)>(
        &mut self,
        hash: KeyHash,
        key: &[u8],
        update: &mut Option<F>,
    ) -> Result<Step<()>, EngineError> {
        let mut old_value = std::mem::take(&mut self.old_value);
        let mut new_value = std::mem::take(&mut self.new_value);
        let result = self.try_rmw_with(hash, key, update, &mut old_value, &mut new_value);
        self.old_value = old_value;
        self.new_value = new_value;
        result
    }

    fn try_rmw_with<F: FnOnce(Option<&[u8]>, &mut Vec<u8>)>(
        &self,
        hash: KeyHash,
        key: &[u8],
        update: &mut Option<F>,
        old_value: &mut Vec<u8>,
        new_value: &mut Vec<u8>,
    ) -> Result<Step<()>, EngineError> {
        let shared = &self.store;
        let log = &shared.log;
        let mut hold = LatchHold {
            word: shared.latches.word(hash.0),
            old: false,
            new: false,
        };
        if let Some(step) = self.take_latches(&mut hold, None) {
            return Ok(step);
        }
        let Located {
            mut entry, record, ..
        } = shared.locate_or_create(hash, key, self.invalid, false)?;
        let Some(record) = record else {
            // Insert a tombstone placeholder first, so the update runs exactly once under the
            // placeholder's record lock on the next attempt.
            return Ok(
                match self.insert(
                    log,
                    &mut entry,
                    key,
                    &[],
                    FLAG_TOMBSTONE,
                    // Capacity hint: room for an 8-byte value (a counter), which the update
                    // then writes in place instead of copying the placeholder.
                    1,
                ) {
                    Step::Done(_) => Step::Again,
                    other => map_step(other, |_| ()),
                },
            );
        };
        let record_version = record.version();
        if record_version > self.version {
            return Ok(Step::Shift);
        }
        if let Some(step) = self.take_latches(&mut hold, Some(record_version)) {
            return Ok(step);
        }
        let copy_to_new_version = self.must_copy(hash, record_version);
        let mutable = record.address >= log.read_only_address();
        let mut guard = record.lock();
        if let Some(step) = self.recheck_locked(&guard, hash, key) {
            return Ok(step);
        }
        let _stripe = match self.hold_tier_stripe(mutable, hash, key, record.address, &mut entry) {
            Ok(stripe) => stripe,
            Err(step) => return Ok(step),
        };
        // Never with `rollback_ready`: the stable copy would leave the older version's record
        // changed in place (see `must_copy`).
        let cpr_copy = copy_to_new_version
            && mutable
            && !self.rollback_ready
            && guard.record.has_stable_slot()
            && shared.strategy_in_flight() == Strategy::CprCopy;
        if cpr_copy {
            if guard.record.version() == self.version {
                return Ok(Step::Again);
            }
            let Some(stable) = self.save_stable_copy(log, &guard, key) else {
                return Ok(Step::NeedMemory);
            };
            guard.set_stable_address(stable);
            guard.set_version(self.version);
        }
        if (self.rollback_ready || log.is_tiered())
            && (copy_to_new_version || !mutable)
            && log.pages_in_use() >= log.writer_page_limit()
        {
            // With `rollback_ready` most read-modify-writes copy their record (a new version);
            // at the writer limit they wait for compaction like upserts instead of taking the
            // compaction reserve after their update ran, which would leave compaction nothing to
            // copy live records with (the update has not run: retrying is allowed). With a
            // storage tier, copies of old records wait the same way, for eviction: the reserve
            // only covers the copy of an update that already ran.
            return Ok(Step::NeedMemory);
        }
        // From here the update runs: no retry may call it again.
        old_value.clear();
        new_value.clear();
        let existed = !guard.record.is_tombstone();
        if existed {
            guard.copy_value(old_value);
        }
        let update = update.take().expect("the update runs once");
        update(existed.then_some(&old_value[..]), new_value);
        let result = if let Err(error) = self.check_sizes(key, new_value.len()) {
            Err(error)
        } else if (cpr_copy || (!copy_to_new_version && mutable)) && guard.fits(new_value.len()) {
            guard.write_value(new_value);
            guard.set_tombstone(false);
            guard.set_version(self.version);
            self.revived_in_place(&guard, existed);
            Ok(Step::Done(()))
        } else {
            let new = NewValue {
                value: new_value,
                capacity_words: words_for(new_value.len()),
                flags: 0,
            };
            match self.rcu_accounted(log, guard, &mut entry, key, new, existed, true) {
                Step::Done(()) => Ok(Step::Done(())),
                Step::NeedMemory => Err(EngineError::OutOfMemory {
                    detail: "read-modify-write could not allocate its new record even from the compaction reserve".into(),
                }),
                _ => unreachable!("rcu_locked of a held record cannot lose its chain"),
            }
        };
        result
    }
}
