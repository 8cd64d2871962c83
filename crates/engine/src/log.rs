//! The hybrid log: records `[header | key | value]` in fixed-size in-memory pages addressed by a
//! monotonically growing logical address.
//!
//! Record layout (all words are `AtomicU64`, little-endian byte packing for key and value):
//! ```text
//! word 0  previous address (bits 0..48) | PRESENT 60 | STABLE 59 | SEALED 61 | INVALID 62 | TOMBSTONE 63
//! word 1  version (bits 0..32)          | key length in bytes (bits 32..64)
//! word 2  seqlock (bits 0..32, bit 0 = writer holds it) | value length in bytes (bits 32..64)
//! word 3  stable-copy address (bits 0..48, cpr-copy only) | record size in 64-byte lines (bits 48..64)
//! word 4  access word (bits 0..32): the caller's recency/frequency stamp, relaxed, outside the seqlock
//! word 5… key bytes padded to 8, then the value words: capacity = size/8 - 5 - key words
//! ```
//! Invariants:
//! - Address 0 is null; page 0 is never used, so every record address is > 0.
//! - Allocation is a `fetch_add` on the packed tail; records on one page are contiguous from offset
//!   0 and the unused rest of a page stays zero, so a page scan stops at the first word 0 without
//!   PRESENT. Scans only run below a tail value captured before an epoch bump completed, so every
//!   record they meet was fully written (allocation and writing happen in one protected operation).
//! - Key, version-at-creation and capacity never change after publication. Value bytes, value length,
//!   the tombstone bit and the version change only under the record's seqlock; readers copy the
//!   value through atomic word loads and retry if the sequence moved, so reads are never torn.
//! - A page is freed only by an epoch action after `begin_address` moved past it, so a protected
//!   thread that read `begin_address` and then follows an address `>= begin_address` never touches
//!   freed memory. Chain walks stop at addresses below `begin_address`.
//! - Memory budget: `writer_page_limit` pages for user writes, the remaining reserve for compaction
//!   (which must be able to copy live records forward to free old pages).

use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};

pub(crate) const ADDRESS_MASK: u64 = (1 << 48) - 1;
pub(crate) const FLAG_STABLE: u64 = 1 << 59;
pub(crate) const FLAG_PRESENT: u64 = 1 << 60;
pub(crate) const FLAG_SEALED: u64 = 1 << 61;
pub(crate) const FLAG_INVALID: u64 = 1 << 62;
pub(crate) const FLAG_TOMBSTONE: u64 = 1 << 63;
/// Header size in 8-byte words.
pub(crate) const HEADER_WORDS: usize = 5;
/// The header word holding the access word (see [`Record::access`]).
const ACCESS_WORD: usize = 4;
/// Largest record size in 64-byte lines (16 bits in the header).
const MAX_RECORD_LINES: usize = (1 << 16) - 1;
/// Largest record in bytes, header and key included (a little under 4 MiB).
pub(crate) const MAX_RECORD_BYTES: usize = MAX_RECORD_LINES * 64;

/// Words needed for `bytes` bytes.
#[inline]
pub(crate) fn words_for(bytes: usize) -> usize {
    bytes.div_ceil(8)
}

/// Packs up to 8 bytes of `bytes` starting at `word_index * 8` into a little-endian word
/// (zero-padded past the end).
#[inline(always)]
pub(crate) fn pack_word(bytes: &[u8], word_index: usize) -> u64 {
    let start = word_index * 8;
    if let Some(chunk) = bytes.get(start..start + 8) {
        return u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    }
    let mut word = 0u64;
    for (shift, byte) in bytes[start..].iter().enumerate() {
        word |= (*byte as u64) << (8 * shift);
    }
    word
}

/// Bytes a record occupies: header, key and value capacity, rounded up to a cache line so that
/// records of up to 64 bytes never straddle two lines (pages are 4 KiB-aligned). The padding is
/// value capacity: in-place updates may grow into it.
#[inline]
pub(crate) fn record_footprint(key_len: usize, capacity_words: usize) -> usize {
    ((HEADER_WORDS + words_for(key_len) + capacity_words) * 8).next_multiple_of(64)
}

/// The value capacity (in words) a record of this key gets when it must hold `value_len` bytes:
/// all of the cache-line padding.
#[inline]
pub(crate) fn padded_capacity_words(key_len: usize, value_len: usize) -> usize {
    let footprint = record_footprint(key_len, words_for(value_len));
    footprint / 8 - HEADER_WORDS - words_for(key_len)
}

fn page_layout(page_bytes: usize) -> std::alloc::Layout {
    crate::memory::region_layout(page_bytes, 4096)
}

/// A zeroed, at least 4 KiB-aligned page (huge-page advised from 2 MiB up).
fn allocate_page(page_bytes: usize) -> *mut AtomicU64 {
    crate::memory::allocate_zeroed(page_layout(page_bytes)) as *mut AtomicU64
}

/// # Safety
/// `pointer` came from `allocate_page(page_bytes)` and no reference to the page remains.
unsafe fn free_page(pointer: *mut AtomicU64, page_bytes: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe { crate::memory::free_region(pointer as *mut u8, page_layout(page_bytes)) };
}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllocError {
    /// The page budget is exhausted: wait for compaction or fail with OutOfMemory.
    NeedMemory,
}

/// A view of one record in a live page. Valid while the holder's epoch protection lasts.
#[derive(Clone, Copy)]
pub(crate) struct Record<'a> {
    pub(crate) address: u64,
    words: &'a [AtomicU64],
}

impl<'a> Record<'a> {
    #[inline]
    pub(crate) fn word0(&self) -> u64 {
        self.words[0].load(Ordering::Acquire)
    }
    #[inline]
    pub(crate) fn previous(&self) -> u64 {
        self.word0() & ADDRESS_MASK
    }
    #[inline]
    pub(crate) fn is_tombstone(&self) -> bool {
        self.word0() & FLAG_TOMBSTONE != 0
    }
    #[inline]
    pub(crate) fn is_sealed(&self) -> bool {
        self.word0() & FLAG_SEALED != 0
    }
    #[inline]
    pub(crate) fn version(&self) -> u64 {
        self.words[1].load(Ordering::Acquire) & 0xFFFF_FFFF
    }
    #[inline]
    pub(crate) fn key_len(&self) -> usize {
        (self.words[1].load(Ordering::Relaxed) >> 32) as usize
    }
    #[inline]
    fn key_words(&self) -> usize {
        words_for(self.key_len())
    }
    #[inline]
    pub(crate) fn capacity_words(&self) -> usize {
        // The size never changes after publication, so a relaxed load sees the value written
        // before the record became reachable.
        let lines = (self.words[3].load(Ordering::Relaxed) >> 48) as usize;
        lines * 8 - HEADER_WORDS - self.key_words()
    }
    #[inline]
    pub(crate) fn stable_address(&self) -> u64 {
        self.words[3].load(Ordering::Acquire) & ADDRESS_MASK
    }
    /// The access word: the caller's stamp (an LRU clock or LFU counter), not logged, not
    /// checkpointed and not under the seqlock: a lost update in a race is acceptable.
    #[inline]
    pub(crate) fn access(&self) -> u32 {
        self.words[ACCESS_WORD].load(Ordering::Relaxed) as u32
    }
    /// Stores the access word (relaxed; see [`Record::access`]).
    #[inline]
    pub(crate) fn set_access(&self, stamp: u32) {
        self.words[ACCESS_WORD].store(u64::from(stamp), Ordering::Relaxed);
    }
    /// Size of the whole record in bytes.
    pub(crate) fn size_bytes(&self) -> usize {
        record_footprint(self.key_len(), self.capacity_words())
    }

    /// Whether the record's key equals `key` (keys are immutable: no seqlock needed).
    #[inline]
    pub(crate) fn key_equals(&self, key: &[u8]) -> bool {
        if self.key_len() != key.len() {
            return false;
        }
        let key_words = words_for(key.len());
        let stored = &self.words[HEADER_WORDS..HEADER_WORDS + key_words];
        for (index, word) in stored.iter().enumerate() {
            if word.load(Ordering::Relaxed) != pack_word(key, index) {
                return false;
            }
        }
        true
    }

    /// Whether `other` holds the same key (keys are immutable: no seqlock needed).
    #[inline]
    pub(crate) fn same_key(&self, other: &Record<'_>) -> bool {
        let len = self.key_len();
        if len != other.key_len() {
            return false;
        }
        let words = words_for(len);
        self.words[HEADER_WORDS..HEADER_WORDS + words]
            .iter()
            .zip(&other.words[HEADER_WORDS..HEADER_WORDS + words])
            .all(|(a, b)| a.load(Ordering::Relaxed) == b.load(Ordering::Relaxed))
    }

    /// Appends the key bytes to `out`.
    pub(crate) fn copy_key(&self, out: &mut Vec<u8>) {
        let len = self.key_len();
        copy_words(&self.words[HEADER_WORDS..], len, out);
    }

    /// Copies the value (and reports the tombstone bit) consistently under the seqlock.
    /// Returns `false` (leaving `out` empty) if the record is a tombstone.
    #[inline]
    pub(crate) fn read_value(&self, out: &mut Vec<u8>) -> bool {
        let value_start = HEADER_WORDS + self.key_words();
        loop {
            let before = self.words[2].load(Ordering::Acquire);
            if before & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            out.clear();
            let tombstone = self.is_tombstone();
            if !tombstone {
                copy_words(&self.words[value_start..], (before >> 32) as usize, out);
            }
            fence(Ordering::Acquire);
            if self.words[2].load(Ordering::Relaxed) == before {
                return !tombstone;
            }
        }
    }

    /// Takes the record's writer lock (spinning; holders keep it for one value copy).
    #[inline]
    pub(crate) fn lock(&self) -> RecordGuard<'a> {
        loop {
            let current = self.words[2].load(Ordering::Relaxed);
            if current & 1 == 0
                && self.words[2]
                    .compare_exchange_weak(
                        current,
                        current | 1,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                return RecordGuard {
                    record: *self,
                    locked_word: current | 1,
                    new_len: (current >> 32) as usize,
                };
            }
            std::hint::spin_loop();
        }
    }

    /// Re-links a record that is not yet reachable (its publishing CAS failed).
    pub(crate) fn set_previous_unpublished(&self, previous: u64) {
        let word0 = self.words[0].load(Ordering::Relaxed);
        self.words[0].store((word0 & !ADDRESS_MASK) | previous, Ordering::Release);
    }

    /// Re-links a published record whose previous address is `expected` to `previous` (PURGE
    /// only: `previous` is below `expected` and everything between is flagged invalid, so the
    /// chain keeps pointing down and loses nothing). Keeps the flags; `false` if the link moved.
    pub(crate) fn replace_previous(&self, expected: u64, previous: u64) -> bool {
        debug_assert!(previous < expected);
        let mut word0 = self.words[0].load(Ordering::Acquire);
        loop {
            if word0 & ADDRESS_MASK != expected {
                return false;
            }
            match self.words[0].compare_exchange_weak(
                word0,
                (word0 & !ADDRESS_MASK) | previous,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(current) => word0 = current,
            }
        }
    }

    pub(crate) fn set_flags(&self, flags: u64) {
        self.words[0].fetch_or(flags, Ordering::AcqRel);
    }
}

/// Exclusive access to a record's mutable parts. Dropping publishes the new length and sequence.
pub(crate) struct RecordGuard<'a> {
    pub(crate) record: Record<'a>,
    locked_word: u64,
    new_len: usize,
}

impl RecordGuard<'_> {
    /// Appends the current value to `out` (the lock excludes writers, so no retry is needed).
    pub(crate) fn copy_value(&self, out: &mut Vec<u8>) {
        let start = HEADER_WORDS + self.record.key_words();
        copy_words(&self.record.words[start..], self.new_len, out);
    }

    /// Whether `len` bytes fit in place.
    #[inline]
    pub(crate) fn fits(&self, len: usize) -> bool {
        words_for(len) <= self.record.capacity_words()
    }

    /// Overwrites the value in place. Caller checked `fits`.
    #[inline]
    pub(crate) fn write_value(&mut self, value: &[u8]) {
        debug_assert!(self.fits(value.len()));
        let start = HEADER_WORDS + self.record.key_words();
        for index in 0..words_for(value.len()) {
            self.record.words[start + index].store(pack_word(value, index), Ordering::Relaxed);
        }
        self.new_len = value.len();
    }

    /// Sets the record version (in-place writes record the writer's version).
    pub(crate) fn set_version(&mut self, version: u64) {
        let word = &self.record.words[1];
        let current = word.load(Ordering::Relaxed);
        if current & 0xFFFF_FFFF == version & 0xFFFF_FFFF {
            return;
        }
        word.store(
            (current & !0xFFFF_FFFF) | (version & 0xFFFF_FFFF),
            Ordering::Release,
        );
    }

    /// Sets or clears the tombstone bit.
    pub(crate) fn set_tombstone(&mut self, tombstone: bool) {
        let current = self.record.words[0].load(Ordering::Relaxed) & FLAG_TOMBSTONE != 0;
        if current == tombstone {
            return;
        }
        if tombstone {
            self.record.words[0].fetch_or(FLAG_TOMBSTONE, Ordering::AcqRel);
        } else {
            self.record.words[0].fetch_and(!FLAG_TOMBSTONE, Ordering::AcqRel);
        }
    }

    /// Records the address of a stable copy (cpr-copy).
    pub(crate) fn set_stable_address(&mut self, address: u64) {
        let word = &self.record.words[3];
        let current = word.load(Ordering::Relaxed);
        word.store((current & !ADDRESS_MASK) | address, Ordering::Release);
    }
}

impl Drop for RecordGuard<'_> {
    fn drop(&mut self) {
        let sequence = (self.locked_word & 0xFFFF_FFFF).wrapping_add(1) & 0xFFFF_FFFF;
        debug_assert!(sequence & 1 == 0);
        self.record.words[2].store(((self.new_len as u64) << 32) | sequence, Ordering::Release);
    }
}

#[inline]
fn copy_words(words: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    out.reserve(len);
    let full = len / 8;
    for word in &words[..full] {
        out.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
    let rest = len % 8;
    if rest != 0 {
        out.extend_from_slice(&words[full].load(Ordering::Relaxed).to_le_bytes()[..rest]);
    }
}

/// Description of a new record for [`HybridLog::write_new`].
pub(crate) struct NewRecord<'a> {
    pub(crate) previous: u64,
    pub(crate) flags: u64,
    pub(crate) version: u64,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    pub(crate) capacity_words: usize,
    /// The access word the record starts with (see [`Record::access`]).
    pub(crate) access: u32,
}

/// The in-memory log.
pub(crate) struct HybridLog {
    page_bits: u32,
    page_words: usize,
    ring_mask: u64,
    ring: Box<[AtomicPtr<AtomicU64>]>,
    /// Page number held by each ring slot (valid while the slot's pointer is non-null).
    ring_page: Box<[AtomicU64]>,
    /// Pages below this one have been freed.
    freed_until_page: AtomicU64,
    /// Packed tail: page number (high 32 bits) | offset in bytes (low 32 bits).
    tail: AtomicU64,
    begin_address: AtomicU64,
    read_only_address: AtomicU64,
    pages_in_use: AtomicU64,
    writer_page_limit: u64,
    total_page_limit: u64,
}

impl HybridLog {
    pub(crate) fn new(page_bytes: usize, memory_bytes: u64) -> Self {
        let total_page_limit = memory_bytes / page_bytes as u64;
        assert!(total_page_limit >= 8);
        // A reserve for compaction: it copies at most this many pages of live data forward.
        let reserve = (total_page_limit / 8).max(2);
        // A power of two, so that address -> slot is a mask, not a division.
        let ring_len = (total_page_limit as usize + 2).next_power_of_two();
        let log = HybridLog {
            page_bits: page_bytes.trailing_zeros(),
            page_words: page_bytes / 8,
            ring_mask: ring_len as u64 - 1,
            ring: (0..ring_len)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            ring_page: (0..ring_len).map(|_| AtomicU64::new(0)).collect(),
            freed_until_page: AtomicU64::new(1),
            tail: AtomicU64::new(1 << 32),
            begin_address: AtomicU64::new(page_bytes as u64),
            read_only_address: AtomicU64::new(page_bytes as u64),
            pages_in_use: AtomicU64::new(0),
            writer_page_limit: total_page_limit - reserve,
            total_page_limit,
        };
        log.ensure_page(1, true)
            .expect("first page fits any valid budget");
        log
    }

    #[inline]
    pub(crate) fn page_bytes(&self) -> usize {
        self.page_words * 8
    }

    pub(crate) fn begin_address(&self) -> u64 {
        self.begin_address.load(Ordering::SeqCst)
    }

    pub(crate) fn read_only_address(&self) -> u64 {
        self.read_only_address.load(Ordering::Acquire)
    }

    /// Moves the read-only boundary up (never down). Callers bump the epoch afterwards before
    /// relying on it: in-place writers that read the old boundary may still be running.
    pub(crate) fn shift_read_only(&self, address: u64) {
        self.read_only_address.fetch_max(address, Ordering::SeqCst);
    }

    /// Moves the begin address up. Pages below it are freed later by [`Self::free_pages_below`].
    pub(crate) fn shift_begin(&self, address: u64) {
        self.begin_address.fetch_max(address, Ordering::SeqCst);
    }

    /// The address the next allocation would get (an upper bound of every allocated address).
    pub(crate) fn tail_address(&self) -> u64 {
        let packed = self.tail.load(Ordering::SeqCst);
        let page = packed >> 32;
        let offset = (packed & 0xFFFF_FFFF).min(self.page_bytes() as u64);
        (page << self.page_bits) + offset
    }

    pub(crate) fn pages_in_use(&self) -> u64 {
        self.pages_in_use.load(Ordering::SeqCst)
    }

    pub(crate) fn memory_in_use_bytes(&self) -> u64 {
        self.pages_in_use() * self.page_bytes() as u64
    }

    pub(crate) fn writer_page_limit(&self) -> u64 {
        self.writer_page_limit
    }

    pub(crate) fn total_page_limit(&self) -> u64 {
        self.total_page_limit
    }

    /// Largest record (header + key + value) that fits a page.
    pub(crate) fn max_record_bytes(&self) -> usize {
        self.page_bytes().min(MAX_RECORD_BYTES)
    }

    fn ensure_page(&self, page: u64, compaction: bool) -> Result<(), AllocError> {
        let slot_index = (page & self.ring_mask) as usize;
        let slot = &self.ring[slot_index];
        if !slot.load(Ordering::Acquire).is_null() {
            return if self.ring_page[slot_index].load(Ordering::Acquire) == page {
                Ok(())
            } else {
                // The slot still holds an old page that compaction has not freed yet.
                Err(AllocError::NeedMemory)
            };
        }
        let limit = if compaction {
            self.total_page_limit
        } else {
            self.writer_page_limit
        };
        let in_use = self.pages_in_use.fetch_add(1, Ordering::SeqCst);
        if in_use >= limit {
            self.pages_in_use.fetch_sub(1, Ordering::SeqCst);
            return Err(AllocError::NeedMemory);
        }
        let pointer = allocate_page(self.page_bytes());
        self.ring_page[slot_index].store(page, Ordering::Release);
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                pointer,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // Another thread opened it (or the old occupant is not freed yet; the budget check
            // makes that impossible because the ring has room for every budgeted page).
            // SAFETY: `pointer` came from `allocate_page` above and was never shared.
            unsafe { free_page(pointer, self.page_bytes()) };
            self.pages_in_use.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Reserves `size_bytes` (a multiple of 8, at most a page) at the tail.
    pub(crate) fn allocate(&self, size_bytes: usize, compaction: bool) -> Result<u64, AllocError> {
        debug_assert!(size_bytes.is_multiple_of(8) && size_bytes <= self.page_bytes());
        let page_bytes = self.page_bytes() as u64;
        loop {
            let packed = self.tail.fetch_add(size_bytes as u64, Ordering::AcqRel);
            let page = packed >> 32;
            let offset = packed & 0xFFFF_FFFF;
            if offset + size_bytes as u64 <= page_bytes {
                return Ok((page << self.page_bits) + offset);
            }
            // This page is full: open the next one (idempotent) and move the tail there.
            self.ensure_page(page + 1, compaction)?;
            loop {
                let current = self.tail.load(Ordering::Acquire);
                if current >> 32 != page {
                    break;
                }
                if self
                    .tail
                    .compare_exchange(
                        current,
                        (page + 1) << 32,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    break;
                }
            }
        }
    }

    /// The words of the page holding `address`, from the address to the page end.
    ///
    /// Callers hold epoch protection and checked `address >= begin_address` after protecting.
    #[inline]
    fn words_at(&self, address: u64) -> &[AtomicU64] {
        let page = address >> self.page_bits;
        let pointer = self.ring[(page & self.ring_mask) as usize].load(Ordering::Acquire);
        assert!(!pointer.is_null(), "log address {address} is not in memory");
        let word_index = ((address & ((1u64 << self.page_bits) - 1)) / 8) as usize;
        // SAFETY: the page is live (non-null, freed only after an epoch bump that every protected
        // reader must pass first) and has `page_words` words.
        unsafe { std::slice::from_raw_parts(pointer.add(word_index), self.page_words - word_index) }
    }

    /// Hints the CPU to start loading the cache line at `address` (a record header), so that a
    /// scan can overlap the misses of many records instead of paying one memory latency each.
    /// Callers hold epoch protection and checked `address >= begin_address`; a hint never faults.
    #[inline]
    pub(crate) fn prefetch(&self, address: u64) {
        let page = address >> self.page_bits;
        let pointer = self.ring[(page & self.ring_mask) as usize].load(Ordering::Relaxed);
        if pointer.is_null() {
            return;
        }
        let word_index = ((address & ((1u64 << self.page_bits) - 1)) / 8) as usize;
        // `wrapping_add`: only an address is formed, never dereferenced.
        crate::memory::prefetch(pointer.wrapping_add(word_index) as *const u8);
    }

    /// The record at `address` (which must hold a published or being-written record).
    #[inline]
    pub(crate) fn record(&self, address: u64) -> Record<'_> {
        Record {
            address,
            words: self.words_at(address),
        }
    }

    /// Bytes a record with these sizes occupies.
    pub(crate) fn record_size(key_len: usize, capacity_words: usize) -> usize {
        record_footprint(key_len, capacity_words)
    }

    /// Allocates and fills a record (not yet reachable: the caller publishes it by CAS).
    pub(crate) fn write_new(
        &self,
        record: &NewRecord<'_>,
        compaction: bool,
    ) -> Result<u64, AllocError> {
        debug_assert!(record.capacity_words >= words_for(record.value.len()));
        let size = Self::record_size(record.key.len(), record.capacity_words);
        let address = self.allocate(size, compaction)?;
        let words = self.words_at(address);
        let key_words = words_for(record.key.len());
        for index in 0..key_words {
            words[HEADER_WORDS + index].store(pack_word(record.key, index), Ordering::Relaxed);
        }
        for index in 0..words_for(record.value.len()) {
            words[HEADER_WORDS + key_words + index]
                .store(pack_word(record.value, index), Ordering::Relaxed);
        }
        assert!(
            size <= MAX_RECORD_BYTES,
            "record of {size} bytes exceeds the header's limit; callers check sizes first"
        );
        debug_assert!(size.is_multiple_of(64));
        words[3].store(((size / 64) as u64) << 48, Ordering::Relaxed);
        words[ACCESS_WORD].store(u64::from(record.access), Ordering::Relaxed);
        words[2].store((record.value.len() as u64) << 32, Ordering::Relaxed);
        words[1].store(
            ((record.key.len() as u64) << 32) | (record.version & 0xFFFF_FFFF),
            Ordering::Relaxed,
        );
        words[0].store(
            record.previous | record.flags | FLAG_PRESENT,
            Ordering::Release,
        );
        Ok(address)
    }

    /// Prepares an unpublished record at `address`, whose publishing CAS failed because the chain
    /// head moved to `head`, for the next CAS: returns the address to publish.
    ///
    /// Chains must point *down* the log (every record's previous address is below its own), because
    /// chain walks stop at the first address below `begin_address`: after compaction moved the
    /// begin past a record, anything it links to must be below the begin too. A record allocated
    /// before the new head was (possible when the head moved between our allocation and our CAS)
    /// must therefore not be re-linked to it: relinking would create an upward link, and once
    /// compaction moved the begin past our record but not past the head it points to, every record
    /// behind that link would become unreachable — silently lost from reads, compaction and every
    /// checkpoint. Such a record is invalidated and written again at the tail with `write`
    /// (allocation is monotonic, so the rewrite lies above `head`).
    pub(crate) fn relink_or_rewrite(
        &self,
        address: u64,
        head: u64,
        write: impl FnOnce(u64) -> Result<u64, AllocError>,
    ) -> Result<u64, AllocError> {
        let record = self.record(address);
        if head < address {
            record.set_previous_unpublished(head);
            return Ok(address);
        }
        record.set_flags(FLAG_INVALID);
        let rewritten = write(head)?;
        debug_assert!(head < rewritten, "allocation is monotonic");
        Ok(rewritten)
    }

    /// Iterates records in `[from, until)` in address order, page by page. Callers guarantee every
    /// record below `until` is completely written (see the module invariants).
    pub(crate) fn scan(&self, from: u64, until: u64, mut visit: impl FnMut(Record<'_>) -> bool) {
        let page_bytes = self.page_bytes() as u64;
        let mut address = from;
        while address < until {
            let page_end = (address | (page_bytes - 1)) + 1;
            if page_end - address < (HEADER_WORDS * 8) as u64 {
                address = page_end;
                continue;
            }
            let record = self.record(address);
            if record.word0() & FLAG_PRESENT == 0 {
                address = page_end;
                continue;
            }
            if !visit(record) {
                return;
            }
            address += record.size_bytes() as u64;
        }
    }

    /// Frees pages entirely below `address`. Only call from an epoch action (or when no other
    /// thread can hold log pointers) after `begin_address` moved to at least `address`.
    pub(crate) fn free_pages_below(&self, address: u64) {
        debug_assert!(address <= self.begin_address());
        let end_page = address >> self.page_bits;
        let start_page = self.freed_until_page.load(Ordering::Acquire);
        for page in start_page..end_page {
            let slot_index = (page & self.ring_mask) as usize;
            let slot = &self.ring[slot_index];
            let pointer = slot.load(Ordering::Acquire);
            if pointer.is_null() || self.ring_page[slot_index].load(Ordering::Acquire) != page {
                continue;
            }
            if slot
                .compare_exchange(
                    pointer,
                    std::ptr::null_mut(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                // SAFETY: the slot held page `page`, allocated by `ensure_page`; no protected thread
                // can reach it (begin moved past it before the epoch bump that led here).
                unsafe { free_page(pointer, self.page_bytes()) };
                self.pages_in_use.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.freed_until_page.fetch_max(end_page, Ordering::AcqRel);
    }
}

impl Drop for HybridLog {
    fn drop(&mut self) {
        for slot in self.ring.iter() {
            let pointer = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !pointer.is_null() {
                // SAFETY: pages are owned by the log; `&mut self` means no reader remains.
                unsafe { free_page(pointer, self.page_bytes()) };
            }
        }
    }
}
