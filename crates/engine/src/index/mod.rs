//! The latch-free hash index: cache-line buckets of tagged 8-byte entries.
//!
//! A bucket is 64 bytes: seven entries and one overflow link. An entry packs
//! `address (bits 0..48) | tag (bits 48..62) | TENTATIVE (bit 62)`; 0 is an empty slot. The tag is
//! 14 bits of the key hash that the bucket index does not use (0 maps to 1: a created entry with a
//! null address must differ from an empty slot); all keys of one bucket with one tag
//! share a record chain in the log (linked by each record's previous address), newest first.
//!
//! Invariants:
//! - At most one non-tentative entry per (bucket chain, tag). Inserting a new tag is two-phase
//!   (FASTER's scheme): CAS a free slot to a TENTATIVE entry, rescan the chain, and back off if any
//!   other entry with the same tag exists; otherwise clear TENTATIVE.
//! - An entry's address only moves by CAS from the value the writer read, so a writer that lost a
//!   race retries with the new chain head and no update is lost.
//! - Entries whose address fell below the log's begin address hold no live record (compaction moved
//!   every live record up) and may be reused for another tag.
//! - Overflow buckets come from a bounded pool; when it is exhausted inserts fail with
//!   `EngineError::OutOfMemory` naming `index_buckets`, never silently.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::log::ADDRESS_MASK;
use crate::memory::ZeroedArray;

// The incremental checkpoint (issue 33) wires the index checkpoint in; until then only its tests
// call it.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod checkpoint;
#[cfg(test)]
mod checkpoint_tests;

const ENTRIES_PER_BUCKET: usize = 7;
const TAG_SHIFT: u32 = 48;
const TAG_MASK: u64 = 0x3FFF;
const TENTATIVE: u64 = 1 << 62;

/// One cache line of entries.
#[repr(align(64))]
pub(crate) struct Bucket {
    entries: [AtomicU64; ENTRIES_PER_BUCKET],
    /// Overflow bucket number + 1, or 0.
    overflow: AtomicU64,
}

/// `count` empty buckets from zeroed memory (the allocator's fresh zero pages are not touched, so
/// an unused overflow pool costs address space, not resident memory).
fn zeroed_buckets(count: usize) -> ZeroedArray<Bucket> {
    // SAFETY: an all-zero `Bucket` is valid: empty entries, no overflow link.
    unsafe { ZeroedArray::new(count) }
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

/// Where a key's chain head lives.
#[derive(Clone, Copy)]
pub(crate) struct EntrySlot<'a> {
    slot: &'a AtomicU64,
    /// The entry word as read.
    pub(crate) word: u64,
}

impl EntrySlot<'_> {
    /// The chain head address in the entry as read.
    #[inline]
    pub(crate) fn address(&self) -> u64 {
        self.word & ADDRESS_MASK
    }

    /// After a failed CAS: adopts `current` as the expected word if it still belongs to the same
    /// tag (only the head moved). Returns `false` if the slot was reused or reset.
    #[inline]
    pub(crate) fn retarget(&mut self, current: u64) -> bool {
        if current & !ADDRESS_MASK == self.word & !ADDRESS_MASK {
            self.word = current;
            true
        } else {
            false
        }
    }

    /// Replaces the chain head if the entry is unchanged. On failure returns the current word.
    #[inline]
    pub(crate) fn compare_exchange(&mut self, new_address: u64) -> Result<(), u64> {
        let new_word = (self.word & !ADDRESS_MASK) | new_address;
        match self
            .slot
            .compare_exchange(self.word, new_word, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                self.word = new_word;
                Ok(())
            }
            Err(current) => Err(current),
        }
    }
}

/// The hash of a key, split into bucket index and tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHash(pub(crate) u64);

impl KeyHash {
    #[inline]
    pub(crate) fn of(key: &[u8]) -> Self {
        KeyHash(xxhash_rust::xxh3::xxh3_64(key))
    }

    /// Never 0, so that a created entry (tag, null address) is never mistaken for an empty slot.
    #[inline]
    fn tag(self) -> u64 {
        ((self.0 >> TAG_SHIFT) & TAG_MASK).max(1)
    }
}

/// Error: the overflow pool is exhausted.
#[derive(Debug)]
pub(crate) struct IndexFull;

struct OverflowPool {
    next: usize,
    free: Vec<usize>,
}

/// The index.
pub(crate) struct HashIndex {
    buckets: ZeroedArray<Bucket>,
    overflow: ZeroedArray<Bucket>,
    pool: Mutex<OverflowPool>,
    mask: u64,
}

impl HashIndex {
    /// `buckets` main buckets (power of two) and as many overflow buckets.
    pub(crate) fn new(buckets: usize) -> Self {
        assert!(buckets.is_power_of_two());
        HashIndex {
            buckets: zeroed_buckets(buckets),
            overflow: zeroed_buckets(buckets),
            pool: Mutex::new(OverflowPool {
                next: 0,
                free: Vec::new(),
            }),
            mask: buckets as u64 - 1,
        }
    }

    pub(crate) fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Bytes of the main buckets and of the overflow buckets taken from the pool.
    pub(crate) fn bytes_in_use(&self) -> u64 {
        let overflow = {
            let pool = self.pool.lock();
            pool.next - pool.free.len()
        };
        ((self.buckets.len() + overflow) * std::mem::size_of::<Bucket>()) as u64
    }

    /// The main bucket a key of `hash` lives in (its chain's bucket, whichever overflow bucket
    /// holds the entry): the numbering of `for_each_entry`'s range.
    #[inline]
    pub(crate) fn bucket_of(&self, hash: KeyHash) -> usize {
        (hash.0 & self.mask) as usize
    }

    #[inline]
    fn next_bucket(&self, bucket: &Bucket) -> Option<&Bucket> {
        let link = bucket.overflow.load(Ordering::Acquire);
        (link != 0).then(|| &self.overflow[link as usize - 1])
    }

    /// Hints the CPU to load this hash's main bucket (see `Session::prefetch_index`).
    #[inline]
    pub(crate) fn prefetch(&self, hash: KeyHash) {
        let bucket = &self.buckets[(hash.0 & self.mask) as usize];
        crate::memory::prefetch(bucket as *const Bucket as *const u8);
    }

    /// The entry for this hash's tag, if any.
    #[inline]
    pub(crate) fn find(&self, hash: KeyHash) -> Option<EntrySlot<'_>> {
        let tag = hash.tag();
        let mut bucket = &self.buckets[(hash.0 & self.mask) as usize];
        loop {
            for slot in &bucket.entries {
                let word = slot.load(Ordering::Acquire);
                // Tags are never 0, so a match also means the slot is not empty.
                if word & ((TAG_MASK << TAG_SHIFT) | TENTATIVE) == tag << TAG_SHIFT {
                    return Some(EntrySlot { slot, word });
                }
            }
            bucket = self.next_bucket(bucket)?;
        }
    }

    /// The entry for this hash's tag, creating it (with a null address) if missing.
    /// Slots whose address is below `begin_address` are reusable.
    pub(crate) fn find_or_create(
        &self,
        hash: KeyHash,
        begin_address: u64,
    ) -> Result<EntrySlot<'_>, IndexFull> {
        let tag = hash.tag();
        loop {
            if let Some(found) = self.find(hash) {
                return Ok(found);
            }
            let slot = self.claim_free_slot(hash, tag, begin_address)?;
            if self.has_other_entry(hash, tag, slot) {
                // Someone else is inserting the same tag: back off and look again.
                slot.store(0, Ordering::Release);
                std::thread::yield_now();
                continue;
            }
            let word = tag << TAG_SHIFT;
            slot.store(word, Ordering::Release);
            return Ok(EntrySlot { slot, word });
        }
    }

    fn claim_free_slot(
        &self,
        hash: KeyHash,
        tag: u64,
        begin_address: u64,
    ) -> Result<&AtomicU64, IndexFull> {
        let tentative = (tag << TAG_SHIFT) | TENTATIVE;
        let mut bucket = &self.buckets[(hash.0 & self.mask) as usize];
        loop {
            for slot in &bucket.entries {
                let word = slot.load(Ordering::Acquire);
                let reusable =
                    word == 0 || (word & TENTATIVE == 0 && (word & ADDRESS_MASK) < begin_address);
                if reusable
                    && slot
                        .compare_exchange(word, tentative, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    return Ok(slot);
                }
            }
            bucket = match self.next_bucket(bucket) {
                Some(next) => next,
                None => self.append_overflow(bucket)?,
            };
        }
    }

    fn append_overflow<'a>(&'a self, bucket: &'a Bucket) -> Result<&'a Bucket, IndexFull> {
        let number = {
            let mut pool = self.pool.lock();
            match pool.free.pop() {
                Some(number) => number,
                None if pool.next < self.overflow.len() => {
                    pool.next += 1;
                    pool.next - 1
                }
                None => return Err(IndexFull),
            }
        };
        match bucket.overflow.compare_exchange(
            0,
            number as u64 + 1,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(&self.overflow[number]),
            Err(existing) => {
                self.pool.lock().free.push(number);
                Ok(&self.overflow[existing as usize - 1])
            }
        }
    }

    fn has_other_entry(&self, hash: KeyHash, tag: u64, mine: &AtomicU64) -> bool {
        let mut bucket = &self.buckets[(hash.0 & self.mask) as usize];
        loop {
            for slot in &bucket.entries {
                if std::ptr::eq(slot, mine) {
                    continue;
                }
                let word = slot.load(Ordering::Acquire);
                if word != 0 && (word >> TAG_SHIFT) & TAG_MASK == tag {
                    return true;
                }
            }
            match self.next_bucket(bucket) {
                Some(next) => bucket = next,
                None => return false,
            }
        }
    }

    /// Calls `visit` with every non-empty, non-tentative entry of main buckets `range` (and their
    /// overflow buckets), as a slot its caller may CAS (rollback's PURGE re-points entries).
    pub(crate) fn for_each_slot<'a>(
        &'a self,
        range: std::ops::Range<usize>,
        mut visit: impl FnMut(EntrySlot<'a>),
    ) {
        for index in range {
            let mut bucket = &self.buckets[index];
            loop {
                for slot in &bucket.entries {
                    let word = slot.load(Ordering::Acquire);
                    if word != 0 && word & TENTATIVE == 0 && word & ADDRESS_MASK != 0 {
                        visit(EntrySlot { slot, word });
                    }
                }
                match self.next_bucket(bucket) {
                    Some(next) => bucket = next,
                    None => break,
                }
            }
        }
    }

    /// Calls `visit` with the chain head of every non-empty entry of main buckets `range` (and their
    /// overflow buckets).
    pub(crate) fn for_each_entry(&self, range: std::ops::Range<usize>, mut visit: impl FnMut(u64)) {
        self.for_each_slot(range, |slot| visit(slot.address()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_pool_exhaustion_is_an_error_not_a_silent_drop() {
        let index = HashIndex::new(2);
        // Force every insert into bucket 0 with distinct tags.
        let mut created = 0;
        let mut failed = false;
        for tag in 1..TAG_MASK {
            let hash = KeyHash(tag << TAG_SHIFT);
            match index.find_or_create(hash, 1) {
                Ok(mut entry) => {
                    entry.compare_exchange(4096 + tag * 8).unwrap();
                    created += 1;
                }
                Err(IndexFull) => {
                    failed = true;
                    break;
                }
            }
        }
        // 1 main + 2 overflow buckets of 7 entries.
        assert_eq!(created, 21);
        assert!(failed);
        for tag in 1..22u64 {
            let entry = index.find(KeyHash(tag << TAG_SHIFT)).unwrap();
            assert_eq!(entry.address(), 4096 + tag * 8);
        }
    }

    #[test]
    fn a_created_entry_with_hash_tag_zero_is_not_an_empty_slot() {
        let index = HashIndex::new(2);
        let created = index.find_or_create(KeyHash(0), 1).unwrap();
        assert_ne!(created.word, 0);
        // A second creator of the same tag must find the first entry, not a second free slot.
        let again = index.find_or_create(KeyHash(0), 1).unwrap();
        assert!(std::ptr::eq(created.slot, again.slot));
    }

    #[test]
    fn stale_entries_are_reused() {
        let index = HashIndex::new(2);
        for tag in 1..22u64 {
            let mut entry = index.find_or_create(KeyHash(tag << TAG_SHIFT), 1).unwrap();
            entry.compare_exchange(100).unwrap();
        }
        // Begin moved past 100: all entries are reusable.
        for tag in 100..121u64 {
            let mut entry = index
                .find_or_create(KeyHash(tag << TAG_SHIFT), 200)
                .unwrap();
            entry.compare_exchange(300).unwrap();
        }
    }
}
