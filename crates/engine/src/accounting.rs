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
//! - Recovery and rollback set the count from [`recount`], a walk of the index: it is exact when
//!   no session writes during the walk (always true for recovery); a rollback recounts once every
//!   session adopted its world-line, so only writes racing with the walk may be counted twice or
//!   missed, until the next recount.

use std::sync::atomic::{AtomicI64, Ordering};

use crossbeam_utils::CachePadded;

use crate::log::{Record, FLAG_INVALID, FLAG_STABLE};
use crate::rollback::InvalidVersions;
use crate::store::Shared;

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

impl Shared {
    /// Calls `visit` with the newest valid record of every key of the chain starting at `head`
    /// (tombstones included), newest key first, until `visit` returns `false`; returns whether it
    /// ran to the end. Skips records flagged invalid or stable (cpr-copy's copies are outside
    /// every chain's meaning) and versions in `invalid`. `settled` is scratch space. Caller holds
    /// epoch protection (or is alone) and read `begin` no later than `head` (see `Located`).
    ///
    /// The one walk behind `Session::scan`, `Session::sample` and [`recount`].
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
}

/// Walks the whole index and sums the sizes of the records that are their key's newest valid
/// record and not tombstones: what the live-bytes count must equal when no write is in flight.
/// Caller holds the maintenance lock (compaction, the only thing that frees log pages, is then
/// excluded and the begin address fixed) or is the only thread (recovery).
pub(crate) fn recount(shared: &Shared, invalid: InvalidVersions) -> u64 {
    const BATCH: usize = 4096;
    let buckets = shared.index.bucket_count();
    let mut heads = Vec::new();
    let mut settled = Vec::new();
    let mut total = 0u64;
    let mut start = 0;
    while start < buckets {
        let end = (start + BATCH).min(buckets);
        let begin = shared.log.begin_address();
        heads.clear();
        shared
            .index
            .for_each_entry(start..end, |head| heads.push(head));
        for &head in &heads {
            shared.for_each_newest(head, begin, invalid, &mut settled, |record| {
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
