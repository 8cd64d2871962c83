//! The hybrid log: records `[header | key | value]` in fixed-size in-memory pages addressed by a
//! monotonically growing logical address.
//!
//! Record layout: 8-byte words (`AtomicU64`), 8-byte aligned, packed back to back (no padding to
//! cache lines); key and value bytes are packed little-endian into words.
//! ```text
//! word 0  previous address (bits 0..48) | key length (bits 48..58, 1023 = "in an extra word")
//!         | STABLE_SLOT 58 | STABLE 59 | PRESENT 60 | SEALED 61 | INVALID 62 | TOMBSTONE 63
//! word 1  version (u32, bytes 0..4 of the word) | access (u32, bytes 4..8)
//! word 2  seqlock (bits 0..23: bit 0 = a writer holds it, 22-bit counter above)
//!         | value length in bytes (bits 23..45) | value capacity in words (bits 45..64)
//! [word]  stable-copy address (bits 0..48), only if STABLE_SLOT
//! [word]  key length in bytes, only if word 0's key length field is 1023
//! then    the key words, then `capacity` value words
//! ```
//! A record of `k` key bytes and capacity `c` words takes `8 * (3 + extras + ceil(k/8) + c)` bytes:
//! an 8-byte key and an 8-byte value take 40. Why each field is where it is:
//! - Word 0 is what chain walks and scans read first: the link, the flags they test, and the key
//!   length (immutable, so it shares the word that flags and links change by CAS / fetch_or
//!   without ever being rewritten). PRESENT makes every record's word 0 non-zero: a page scan
//!   stops at the first word 0 without it. STABLE_SLOT says the stable-copy word exists; it is
//!   fixed at creation (records get it while the store's default strategy or its newest
//!   checkpoint is cpr-copy: `Shared::stable_slots`). A record without the slot is never written
//!   in place by cpr-copy's v+1 writers: they copy it (read-copy-update), as the other
//!   strategies do.
//! - Word 1: the version (32 bits, as before: rollback and recovery compare full versions) and
//!   the access word. Word 1 is only ever accessed as two `AtomicU32`s, never as a `u64`, so the
//!   access word's relaxed stores cannot race a same-word store of the version.
//! - Word 2: everything the seqlock covers that is not a flag (the value length) is in the
//!   seqlock's own word, so one acquire load gives a consistent (sequence, length) pair, and one
//!   release store publishes both. The capacity is fixed at creation; it shares the word only
//!   because every unlock rewrites the word with the same capacity (so a scan reading the size
//!   without the lock always sees it).
//!
//! The access word: a 32-bit stamp per record for the layer above (the server's eviction clock).
//! Not covered by the seqlock, never logged, never checkpointed, written and read with relaxed
//! atomics. A new key's first record gets the store-wide stamp (`Store::set_access_stamp`;
//! recovered records `StoreConfig::access_stamp`), and the engine copies the old record's word
//! whenever it copies a record (read-copy-update of an existing key, cpr-copy's stable copy,
//! compaction), so a key keeps its stamp while it lives.
//!
//! The seqlock's counter: a reader copies a value between two loads of word 2 and accepts the copy
//! if both loads are equal. A torn copy can pass only if writers completed exactly a multiple of
//! 2^22 (4,194,304) writes of this one record between the two loads and left the same length:
//! every write is a lock CAS, a value copy and a release store on one cache line, serialised by
//! the lock, so that takes well over 10 ms of uninterrupted writes to one key while the reader
//! sits in a copy of at most a few KiB for small records. Only a reader descheduled mid-copy for
//! that long could miss it, by landing on an exact multiple; the previous 32-bit field had the
//! same argument with 2^31. (>= 16 bits is the floor; 22 is what the word has after the lengths.)
//!
//! Invariants:
//! - Address 0 is null; page 0 is never used, so every record address is > 0.
//! - Allocation is a `fetch_add` on the packed tail; records on one page are contiguous from offset
//!   0 and never straddle pages; the unused rest of a page stays zero, so a page scan stops at the
//!   first word 0 without PRESENT (or when fewer than a header's bytes remain). Scans only run
//!   below a tail value captured before an epoch bump completed, so every record they meet was
//!   fully written (allocation and writing happen in one protected operation).
//! - Key, key length, version-at-creation, capacity and STABLE_SLOT never change after
//!   publication. Value bytes, value length, the tombstone bit and the version change only under
//!   the record's seqlock; readers copy the value through atomic word loads and retry if the
//!   sequence moved, so reads are never torn. The access word changes at any time.
//! - A page is freed only by an epoch action after `begin_address` moved past it, so a protected
//!   thread that read `begin_address` and then follows an address `>= begin_address` never touches
//!   freed memory. Chain walks stop at addresses below `begin_address`.
//! - Memory budget: `writer_page_limit` pages for user writes, the remaining reserve for compaction
//!   (which must be able to copy live records forward to free old pages).
//! - With a storage tier (`cold` module), `begin <= head <= read_only <= tail`: pages in
//!   `[begin, head)` are on disk only (the page file), `[head, read_only)` in memory and
//!   immutable (and already written to the page file when below the head's next move), `[read_only,
//!   tail)` in memory and mutable. The head moves up only to a page boundary that is at most the
//!   read-only address (after the epoch bump that made those pages immutable) and whose pages are
//!   written and synced; pages below it are freed by the same epoch rule as pages below the begin:
//!   [`HybridLog::record`] loads the head after the caller protected, so an address at or above the
//!   head it read lies in a page no thread frees until the caller's protection ends. Without a tier
//!   the head stays equal to the first page's address and nothing is cold.
//! - Nothing persisted holds this layout: checkpoint segments store (version, key, value)
//!   entries, so checkpoint files do not depend on it.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

mod cold;
mod record;
#[cfg(test)]
mod tests;

pub(crate) use cold::{
    install_read_ahead, read_ahead, release_cold_copies, take_back_read_ahead, ColdBytes,
    ReadAheadCopies, Tier,
};

use record::{key_start, lengths_word, store_bytes};
pub(crate) use record::{Record, RecordGuard};

pub(crate) const ADDRESS_MASK: u64 = (1 << 48) - 1;
/// Word 0: where the key length field starts (10 bits).
const KEY_LEN_SHIFT: u32 = 48;
/// Key length field value meaning "the length is in an extra word"; shorter keys are inline.
const KEY_LEN_ESCAPE: u64 = (1 << 10) - 1;
/// The record has the stable-copy address word (fixed at creation).
pub(crate) const FLAG_STABLE_SLOT: u64 = 1 << 58;
pub(crate) const FLAG_STABLE: u64 = 1 << 59;
pub(crate) const FLAG_PRESENT: u64 = 1 << 60;
pub(crate) const FLAG_SEALED: u64 = 1 << 61;
pub(crate) const FLAG_INVALID: u64 = 1 << 62;
pub(crate) const FLAG_TOMBSTONE: u64 = 1 << 63;
/// Header size in 8-byte words, without the optional stable-copy and key-length words.
pub(crate) const HEADER_WORDS: usize = 3;
/// Largest record in bytes, header and key included (a little under 4 MiB: the limit the
/// previous format had, kept so that no caller's limits change). The capacity field's 19 bits
/// and the value length's 22 bits cover it.
pub(crate) const MAX_RECORD_BYTES: usize = ((1 << 16) - 1) * 64;
const _: () = assert!(MAX_RECORD_BYTES / 8 < 1 << 19 && MAX_RECORD_BYTES < 1 << 22);

/// Bytes of a record with an 8-byte key and an 8-byte value: what `HybridLog::prefetch` makes
/// sure is loaded.
const SMALL_RECORD_BYTES: u64 = ((HEADER_WORDS + 2) * 8) as u64;

/// Words needed for `bytes` bytes.
#[inline]
pub(crate) fn words_for(bytes: usize) -> usize {
    bytes.div_ceil(8)
}

/// The key length field of word 0.
#[inline(always)]
fn key_len_field(word0: u64) -> u64 {
    (word0 >> KEY_LEN_SHIFT) & KEY_LEN_ESCAPE
}

/// Header words (with the optional ones) of a record with this key length and slot choice.
#[inline]
pub(crate) fn header_words(key_len: usize, stable_slot: bool) -> usize {
    HEADER_WORDS + usize::from(stable_slot) + usize::from(key_len as u64 >= KEY_LEN_ESCAPE)
}

/// Bytes a record occupies: header (with its optional words), key and value capacity, in words.
/// No padding: growth room exists only where a writer asked for it through the capacity.
#[inline]
pub(crate) fn record_footprint(key_len: usize, capacity_words: usize, stable_slot: bool) -> usize {
    (header_words(key_len, stable_slot) + words_for(key_len) + capacity_words) * 8
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

/// Description of a new record for [`HybridLog::write_new`].
pub(crate) struct NewRecord<'a> {
    pub(crate) previous: u64,
    /// Flags of word 0 (PRESENT is added); `FLAG_STABLE_SLOT` gives the record the stable-copy
    /// address word.
    pub(crate) flags: u64,
    pub(crate) version: u64,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    /// Value capacity in words, at least the value's: `words_for(value.len())` unless the writer
    /// wants in-place growth room (rmw's placeholder, compaction keeping a record's capacity).
    pub(crate) capacity_words: usize,
    /// The access word's initial value (0 for new data, the old record's when copying one).
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
    /// Pages below this address are on disk only (see the module invariants); the first page's
    /// address while nothing was evicted.
    head_address: AtomicU64,
    /// The page file that holds evicted pages, if the store has a storage tier.
    tier: Option<Tier>,
    pages_in_use: AtomicU64,
    writer_page_limit: u64,
    total_page_limit: u64,
}

impl HybridLog {
    /// A log of `page_bytes` pages within `memory_bytes`, evicting into `tier` if given.
    pub(crate) fn new(page_bytes: usize, memory_bytes: u64, tier: Option<Tier>) -> Self {
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
            head_address: AtomicU64::new(page_bytes as u64),
            tier,
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

    /// The lowest address whose page is in memory (see the module invariants).
    #[inline]
    pub(crate) fn head_address(&self) -> u64 {
        self.head_address.load(Ordering::SeqCst)
    }

    /// Whether the log evicts into a page file (a storage tier).
    #[inline]
    pub(crate) fn is_tiered(&self) -> bool {
        self.tier.is_some()
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
        // A page opened from the reserve (beyond the writers' limit) is for the allocation that
        // asked for it and its kind, not for every writer that finds it at the tail: otherwise
        // writers fill each reserve page the moment it opens, and the reserve is gone before
        // eviction or compaction can free anything (found with a slow read-modify-write beside
        // fast writers in a tiered store, `tests/tier_incremental.rs`).
        if !compaction && self.pages_in_use.load(Ordering::Relaxed) > self.writer_page_limit {
            return Err(AllocError::NeedMemory);
        }
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
        // `wrapping_add`: only an address is formed, never dereferenced (a prefetch never faults).
        crate::memory::prefetch(pointer.wrapping_add(word_index) as *const u8);
        // Records are packed at 8-byte alignment, so a small record (40 bytes: header, one key
        // word, one value word) starting in its line's last 32 bytes continues in the next line,
        // which the read then needs too: ask for it now as well.
        if address % 64 > 64 - SMALL_RECORD_BYTES {
            crate::memory::prefetch(pointer.wrapping_add(word_index + 4) as *const u8);
        }
    }

    /// The record at `address` (which must hold a published or being-written record). Below the
    /// head address it is a copy read from the page file (`cold` module: valid until the thread's
    /// next operation or [`release_cold_copies`]).
    #[inline]
    pub(crate) fn record(&self, address: u64) -> Record<'_> {
        if address < self.head_address() {
            return self.cold_record(address);
        }
        Record {
            address,
            words: self.words_at(address),
        }
    }

    /// Bytes a record with these sizes occupies.
    pub(crate) fn record_size(key_len: usize, capacity_words: usize, stable_slot: bool) -> usize {
        record_footprint(key_len, capacity_words, stable_slot)
    }

    /// Allocates and fills a record (not yet reachable: the caller publishes it by CAS).
    pub(crate) fn write_new(
        &self,
        record: &NewRecord<'_>,
        compaction: bool,
    ) -> Result<u64, AllocError> {
        debug_assert!(record.capacity_words >= words_for(record.value.len()));
        debug_assert!(record.flags & ((1 << 58) - 1) == 0, "flags only");
        let stable_slot = record.flags & FLAG_STABLE_SLOT != 0;
        let key_len = record.key.len();
        let size = Self::record_size(key_len, record.capacity_words, stable_slot);
        assert!(
            size <= MAX_RECORD_BYTES,
            "record of {size} bytes exceeds the header's limit; callers check sizes first"
        );
        let address = self.allocate(size, compaction)?;
        let words = self.words_at(address);
        let key_field = (key_len as u64).min(KEY_LEN_ESCAPE);
        let word0 = record.previous | (key_field << KEY_LEN_SHIFT) | record.flags | FLAG_PRESENT;
        let key_start = key_start(word0);
        // The optional words: a fresh page is zeroed, so the stable slot already reads "none".
        if key_field == KEY_LEN_ESCAPE {
            words[key_start - 1].store(key_len as u64, Ordering::Relaxed);
        }
        store_bytes(&words[key_start..], record.key);
        let value_start = key_start + words_for(key_len);
        store_bytes(&words[value_start..], record.value);
        words[2].store(
            lengths_word(record.value.len(), record.capacity_words),
            Ordering::Relaxed,
        );
        let fresh = Record { address, words };
        fresh.set_access(record.access);
        fresh.set_version_unpublished(record.version);
        // Release: everything above is visible to whoever reads word 0 (scans) or follows the
        // address published by the caller's CAS.
        words[0].store(word0, Ordering::Release);
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
    ///
    /// Pages below the head address are read whole from the page file (checksum verified) into
    /// a buffer of this call. Eviction may move the head while a scan runs: the caller then holds
    /// epoch protection while `visit` uses a record, and may refresh or suspend it between
    /// records (each address is resolved, in memory or in the file, when the scan reaches it).
    pub(crate) fn scan(&self, from: u64, until: u64, mut visit: impl FnMut(Record<'_>) -> bool) {
        let page_bytes = self.page_bytes() as u64;
        let mut cold_page: Option<cold::ColdPage> = None;
        let mut address = from;
        while address < until {
            let page_end = (address | (page_bytes - 1)) + 1;
            // Fewer bytes than the smallest record's header: the page's unused, zeroed end.
            if page_end - address < (HEADER_WORDS * 8) as u64 {
                address = page_end;
                continue;
            }
            let record = if address < self.head_address() {
                let page = address >> self.page_bits;
                if cold_page.as_ref().is_none_or(|loaded| loaded.page != page) {
                    cold_page = Some(self.load_cold_page(page));
                }
                cold_page
                    .as_ref()
                    .expect("loaded above")
                    .record(self, address)
            } else {
                self.record(address)
            };
            if record.word0() & FLAG_PRESENT == 0 {
                address = page_end;
                continue;
            }
            let size_bytes = record.size_bytes() as u64;
            if !visit(record) {
                return;
            }
            address += size_bytes;
        }
    }

    /// Frees pages entirely below `address`. Only call from an epoch action (or when no other
    /// thread can hold log pointers) after `begin_address` moved to at least `address`.
    pub(crate) fn free_pages_below(&self, address: u64) {
        debug_assert!(address <= self.begin_address().max(self.head_address()));
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
