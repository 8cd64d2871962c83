//! Moving a record to the log's tail: the one mechanism behind compaction's copies (in memory
//! and from the page file) and a session's copy of a read-hot cold record
//! (`StoreConfig::copy_cold_reads_to_tail`).
//!
//! Invariant: a record is moved only while it is its key's newest valid record, decided under the
//! lock that every writer superseding it holds (its record lock in memory; its key's tier stripe
//! for a copy read from the page file), and published by a CAS of the key's index entry, so a
//! concurrent writer either sees the copy or makes the move fail. The copy is the same record
//! moved: same version, value, capacity, flags and access word, so neither the live-byte count
//! nor any checkpoint's view of the key changes.

use crate::index::{EntrySlot, KeyHash};
use crate::log::{
    AllocError, NewRecord, Record, RecordGuard, FLAG_INVALID, FLAG_SEALED, FLAG_STABLE,
    FLAG_STABLE_SLOT, FLAG_TOMBSTONE,
};
use crate::state::InvalidVersions;

use super::Shared;

/// What [`copy_if_live`] did with a record.
pub(crate) enum Copied {
    /// It was its key's newest record and now lives at the tail.
    Yes,
    /// It was garbage (or a tombstone with nothing older, unlinked instead of copied).
    No,
    /// The compaction reserve is exhausted.
    OutOfReserve,
    /// Not its key's newest, but a rollback may need it (`rollback_ready`): it must stay where it
    /// is, and so must everything after it.
    Keep,
}

/// Copies `record` to the tail if it is still its key's newest record. Decided under the lock
/// that writers superseding the record hold: the record's own lock for a record in memory (such
/// a writer seals it before it unlocks); for a record read from the page file (`from_file`: the
/// scan's copy, whose lock excludes nobody) its key's tier stripe (`log::cold` module).
pub(crate) fn copy_if_live(
    shared: &Shared,
    record: Record<'_>,
    begin: u64,
    invalid: InvalidVersions,
    (key, value): (&mut Vec<u8>, &mut Vec<u8>),
    from_file: bool,
    reserve: bool,
) -> Copied {
    let word0 = record.word0();
    if word0 & (FLAG_INVALID | FLAG_STABLE | FLAG_SEALED) != 0 {
        return Copied::No;
    }
    key.clear();
    record.copy_key(key);
    let hash = KeyHash::of(key);
    let _stripe = from_file.then(|| shared.tier_stripe(hash).lock());
    let Some(entry) = shared.index.find(hash) else {
        return Copied::No;
    };
    match shared.find_record(key, entry.address(), begin, invalid) {
        Some(newest) if newest.address == record.address => {}
        _ => return Copied::No,
    }
    let guard = record.lock();
    if record.is_sealed() {
        return Copied::No;
    }
    copy_locked(
        shared,
        record,
        guard,
        entry,
        (begin, invalid),
        (key, value),
        reserve,
    )
}

/// Copies `record`, read from the page file by a session, to the tail if it is still its key's
/// newest (`StoreConfig::copy_cold_reads_to_tail`): the same move page-file compaction makes,
/// decided under the key's tier stripe, but without the compaction reserve (a copy for reads
/// never takes memory writers are waiting for). Returns whether it copied.
pub(crate) fn copy_read_to_tail(
    shared: &Shared,
    record: Record<'_>,
    invalid: InvalidVersions,
) -> bool {
    let begin = shared.log.begin_address();
    let (mut key, mut value) = (Vec::new(), Vec::new());
    matches!(
        copy_if_live(
            shared,
            record,
            begin,
            invalid,
            (&mut key, &mut value),
            true,
            false
        ),
        Copied::Yes
    )
}

/// Copies the locked `record`, its key's newest, to the tail and re-points the entry at the copy
/// (or unlinks it: a tombstone with nothing older). `reserve`: the copy may use the compaction
/// reserve of the page budget.
pub(crate) fn copy_locked(
    shared: &Shared,
    record: Record<'_>,
    guard: RecordGuard<'_>,
    mut entry: EntrySlot<'_>,
    (begin, invalid): (u64, InvalidVersions),
    (key, value): (&[u8], &mut Vec<u8>),
    reserve: bool,
) -> Copied {
    let tombstone = record.is_tombstone();
    if tombstone
        && entry.address() == record.address
        && shared
            .find_record(key, record.previous(), begin, invalid)
            .is_none()
    {
        // A deleted key with no older version left: unlink the tombstone instead of copying it.
        if entry.compare_exchange(record.previous()).is_ok() {
            record.set_flags(FLAG_SEALED);
            return Copied::No;
        }
    }
    value.clear();
    if !tombstone {
        guard.copy_value(value);
    }
    let write = |previous: u64| {
        shared.log.write_new(
            &NewRecord {
                previous,
                // The copy keeps the record's capacity, slot and access word: it is the same
                // record, moved.
                flags: (if tombstone { FLAG_TOMBSTONE } else { 0 })
                    | (record.word0() & FLAG_STABLE_SLOT),
                version: record.version(),
                key,
                value,
                capacity_words: record.capacity_words(),
                // The copy is the same record moved: its recency and frequency go with it.
                access: record.access(),
            },
            reserve,
        )
    };
    let mut address = match write(entry.address()) {
        Ok(address) => address,
        Err(AllocError::NeedMemory) => return Copied::OutOfReserve,
    };
    loop {
        debug_assert!(entry.address() < address, "chains point down the log");
        match entry.compare_exchange(address) {
            Ok(()) => {
                record.set_flags(FLAG_SEALED);
                return Copied::Yes;
            }
            // Another key of this chain moved the head; relink below the copy or copy again.
            Err(current) if entry.retarget(current) => {
                match shared
                    .log
                    .relink_or_rewrite(address, entry.address(), write)
                {
                    Ok(relinked) => address = relinked,
                    Err(AllocError::NeedMemory) => return Copied::OutOfReserve,
                }
            }
            Err(_) => {
                shared.log.record(address).set_flags(FLAG_INVALID);
                return Copied::No;
            }
        }
    }
}
