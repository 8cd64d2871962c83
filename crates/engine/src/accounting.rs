//! Memory accounting for callers that evict: the bytes of live records, kept without a shared
//! atomic read-modify-write per operation.
//!
//! Live bytes are the bytes (as the log allocated them, `Record::size_bytes`) of every record
//! that is its key's newest valid record and not a tombstone. The log frees memory only when
//! compaction moves its begin address, so a cache evicting on the log's pages would evict long
//! after the data it removed was dead; live bytes drop at the delete.
//!
//! Invariants:
//! - The count is `base + Σ slots[..high_water]`: each session owns the slot of its epoch slot
//!   and adds its own deltas with a relaxed load and store (only the owner writes a slot, and a
//!   slot passes between sessions through the epoch table's mutex, so no update is lost). A
//!   slot is never reset: a released slot keeps its sum for the next owner to continue.
//! - Every write that changes which record is a key's newest live one adds its delta once it
//!   has taken effect (new key: +size; a new record replacing a live one: +new −old; a delete:
//!   −old; reviving a tombstone in place: +size). Compaction copies a record with its size, so
//!   it changes nothing; cpr-copy's stable copies are never a key's newest.
//! - Recovery and rollback set the count from `Shared::recount_live_bytes`, a walk of the index: it is exact when
//!   no session writes during the walk (always true for recovery); a rollback recounts once every
//!   session adopted its world-line, so only writes racing with the walk may be counted twice or
//!   missed, until the next recount.

use std::sync::atomic::{AtomicI64, Ordering};

use crossbeam_utils::CachePadded;

/// The live-bytes counter: a base plus one padded slot per epoch slot.
pub(crate) struct LiveBytes {
    base: AtomicI64,
    slots: Box<[CachePadded<AtomicI64>]>,
}

impl LiveBytes {
    /// A zero count with one slot per epoch slot.
    pub(crate) fn new(slots: usize) -> Self {
        LiveBytes {
            base: AtomicI64::new(0),
            slots: (0..slots)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
        }
    }

    /// Adds `delta` to `slot`. Only the owner of the epoch slot calls this: a load and a store,
    /// no read-modify-write.
    #[inline]
    pub(crate) fn add(&self, slot: usize, delta: i64) {
        if delta != 0 {
            let cell = &self.slots[slot];
            cell.store(cell.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
        }
    }

    fn sum(&self, high_water: usize) -> i64 {
        let slots: i64 = self.slots[..high_water.min(self.slots.len())]
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .sum();
        self.base.load(Ordering::Relaxed) + slots
    }

    /// The count (slots `[0, high_water)` may hold deltas: the epoch table's high-water mark).
    pub(crate) fn total(&self, high_water: usize) -> u64 {
        self.sum(high_water).max(0) as u64
    }

    /// Makes the count `value` (after a recount).
    pub(crate) fn set(&self, high_water: usize, value: u64) {
        let slots = self.sum(high_water) - self.base.load(Ordering::Relaxed);
        self.base.store(value as i64 - slots, Ordering::Relaxed);
    }

    /// Test-only sabotage: shifts the count by `delta`.
    pub(crate) fn tamper(&self, delta: i64) {
        self.base.fetch_add(delta, Ordering::Relaxed);
    }
}
