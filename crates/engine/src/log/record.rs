//! Views of one record: [`Record`] (lock-free reads, flag and link updates) and [`RecordGuard`]
//! (the seqlock's writer side). The layout and its invariants are in the parent module's top
//! comment; this file is the only code that knows where a field lives.
//!
//! Key and value bytes move only through [`store_bytes`] and [`copy_words`]: one relaxed atomic
//! store or load per word (never a plain access: readers copy values that writers change in place
//! under the seqlock), ordered by the seqlock's acquire/release and fence or by the publishing
//! release store of word 0. They work on whole 8-byte chunks with one bounds check per copy, so
//! a copy costs about a memcpy of the same bytes.

use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::{
    key_len_field, words_for, ADDRESS_MASK, FLAG_SEALED, FLAG_STABLE_SLOT, FLAG_TOMBSTONE,
    HEADER_WORDS, KEY_LEN_ESCAPE, KEY_LEN_SHIFT,
};

/// Word 2: bit 0 = a writer holds the seqlock, bits 1..23 = the write counter.
pub(super) const SEQUENCE_BITS: u32 = 23;
pub(super) const SEQUENCE_MASK: u64 = (1 << SEQUENCE_BITS) - 1;
/// Word 2: the value length in bytes (22 bits: every value of a record under 4 MiB).
pub(super) const VALUE_LEN_SHIFT: u32 = SEQUENCE_BITS;
pub(super) const VALUE_LEN_MASK: u64 = (1 << 22) - 1;
/// Word 2: the value capacity in words (19 bits), fixed at creation.
pub(super) const CAPACITY_SHIFT: u32 = VALUE_LEN_SHIFT + 22;

/// The lengths half of word 2 (everything but the sequence) for a value of `value_len` bytes.
#[inline]
pub(super) fn lengths_word(value_len: usize, capacity_words: usize) -> u64 {
    ((capacity_words as u64) << CAPACITY_SHIFT) | ((value_len as u64) << VALUE_LEN_SHIFT)
}

/// Words before the key: the header plus the optional stable-copy and key-length words that
/// `word0` announces.
#[inline(always)]
pub(super) fn key_start(word0: u64) -> usize {
    HEADER_WORDS
        + usize::from(word0 & FLAG_STABLE_SLOT != 0)
        + usize::from((word0 >> KEY_LEN_SHIFT) & KEY_LEN_ESCAPE == KEY_LEN_ESCAPE)
}

/// A view of one record in a live page. Valid while the holder's epoch protection lasts.
#[derive(Clone, Copy)]
pub(crate) struct Record<'a> {
    pub(crate) address: u64,
    pub(super) words: &'a [AtomicU64],
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
    /// Whether the record carries a stable-copy address word (cpr-copy may write it in place).
    #[inline]
    pub(crate) fn has_stable_slot(&self) -> bool {
        self.word0() & FLAG_STABLE_SLOT != 0
    }

    /// Word 1 as its two 32-bit halves. Word 1 is only ever accessed through these (never as a
    /// `u64`), so the access word's relaxed stores and the version's stores are atomics of one
    /// size on disjoint bytes: no mixed-size access, and no store of one can undo the other.
    #[inline(always)]
    fn halves(&self) -> &'a [AtomicU32; 2] {
        let word: &'a AtomicU64 = &self.words[1];
        // SAFETY: `AtomicU64` has the size and (stricter) alignment of `[AtomicU32; 2]`, both are
        // interior-mutable, and the page outlives `'a`. Word 1 is only accessed through this view
        // (see above), so no atomic access of another size ever touches these bytes.
        unsafe { &*(word as *const AtomicU64 as *const [AtomicU32; 2]) }
    }

    #[inline]
    pub(crate) fn version(&self) -> u64 {
        u64::from(self.halves()[0].load(Ordering::Acquire))
    }

    /// Writes the version of a record no other thread can reach yet (`HybridLog::write_new`).
    #[inline]
    pub(super) fn set_version_unpublished(&self, version: u64) {
        self.halves()[0].store(version as u32, Ordering::Relaxed);
    }

    /// The access word: a stamp the caller above the engine keeps per record (the server's
    /// eviction clock). Not covered by the seqlock, never logged or checkpointed.
    #[inline]
    pub(crate) fn access(&self) -> u32 {
        self.halves()[1].load(Ordering::Relaxed)
    }

    /// Stores the access word (relaxed: a stamp, no ordering with the value).
    #[inline]
    pub(crate) fn set_access(&self, stamp: u32) {
        self.halves()[1].store(stamp, Ordering::Relaxed);
    }

    /// The key length and the index of the first key word, from one load of word 0 (both are
    /// immutable after publication, so a relaxed load sees what the writer stored before).
    #[inline(always)]
    fn key_layout(&self) -> (usize, usize) {
        let word0 = self.words[0].load(Ordering::Relaxed);
        let start = HEADER_WORDS + usize::from(word0 & FLAG_STABLE_SLOT != 0);
        let field = key_len_field(word0);
        if field != KEY_LEN_ESCAPE {
            return (field as usize, start);
        }
        self.long_key_layout(start)
    }

    /// [`Self::key_layout`] of a key of 1023 bytes or more: its length is in the word at `start`.
    #[cold]
    fn long_key_layout(&self, start: usize) -> (usize, usize) {
        (
            self.words[start].load(Ordering::Relaxed) as usize,
            start + 1,
        )
    }

    #[cfg(test)]
    pub(crate) fn key_len(&self) -> usize {
        self.key_layout().0
    }

    /// Index of the first value word.
    #[inline]
    fn value_start(&self) -> usize {
        let (len, start) = self.key_layout();
        start + words_for(len)
    }

    #[inline]
    pub(crate) fn capacity_words(&self) -> usize {
        // Fixed at creation and rewritten unchanged by every unlock: a relaxed load suffices.
        (self.words[2].load(Ordering::Relaxed) >> CAPACITY_SHIFT) as usize
    }

    /// The stable copy's address (cpr-copy), or 0 if the record has none or no slot for one.
    #[inline]
    pub(crate) fn stable_address(&self) -> u64 {
        if !self.has_stable_slot() {
            return 0;
        }
        self.words[HEADER_WORDS].load(Ordering::Acquire) & ADDRESS_MASK
    }

    /// Size of the whole record in bytes.
    pub(crate) fn size_bytes(&self) -> usize {
        (self.value_start() + self.capacity_words()) * 8
    }

    /// Whether the record's key equals `key` (keys are immutable: no seqlock needed).
    #[inline]
    pub(crate) fn key_equals(&self, key: &[u8]) -> bool {
        let (len, start) = self.key_layout();
        if len != key.len() {
            return false;
        }
        let stored = &self.words[start..start + words_for(len)];
        let (chunks, tail) = key.as_chunks::<8>();
        for (word, chunk) in stored.iter().zip(chunks) {
            if word.load(Ordering::Relaxed) != u64::from_le_bytes(*chunk) {
                return false;
            }
        }
        tail.is_empty() || stored[chunks.len()].load(Ordering::Relaxed) == tail_word(tail)
    }

    /// Whether `other` holds the same key (keys are immutable: no seqlock needed).
    #[inline]
    pub(crate) fn same_key(&self, other: &Record<'_>) -> bool {
        let (len, mine) = self.key_layout();
        let (other_len, theirs) = other.key_layout();
        if len != other_len {
            return false;
        }
        let words = words_for(len);
        self.words[mine..mine + words]
            .iter()
            .zip(&other.words[theirs..theirs + words])
            .all(|(a, b)| a.load(Ordering::Relaxed) == b.load(Ordering::Relaxed))
    }

    /// Appends the key bytes to `out`.
    pub(crate) fn copy_key(&self, out: &mut Vec<u8>) {
        let (len, start) = self.key_layout();
        copy_words(&self.words[start..], len, out);
    }

    /// Copies the value (and reports the tombstone bit) consistently under the seqlock.
    /// Returns `false` (leaving `out` empty) if the record is a tombstone.
    #[inline]
    pub(crate) fn read_value(&self, out: &mut Vec<u8>) -> bool {
        let value_start = self.value_start();
        loop {
            let before = self.words[2].load(Ordering::Acquire);
            if before & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            out.clear();
            let tombstone = self.is_tombstone();
            if !tombstone {
                let len = ((before >> VALUE_LEN_SHIFT) & VALUE_LEN_MASK) as usize;
                copy_words(&self.words[value_start..], len, out);
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
                    new_len: ((current >> VALUE_LEN_SHIFT) & VALUE_LEN_MASK) as usize,
                    value_start: self.value_start(),
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

    /// Clears the seqlock's writer bit of a record *copy* read from the page file (`log::cold`):
    /// the page may have been copied while a writer held the lock, and the copy, which no writer
    /// will ever unlock, must not look locked. Never for a record in a live page.
    pub(super) fn unlock_copy(&self) {
        self.words[2].fetch_and(!1, Ordering::Relaxed);
    }

    pub(crate) fn set_flags(&self, flags: u64) {
        // Only the flag bits: links, the key length and the slot bit are not flags.
        debug_assert!(flags & ((1 << 59) - 1) == 0);
        self.words[0].fetch_or(flags, Ordering::AcqRel);
    }
}

/// Exclusive access to a record's mutable parts. Dropping publishes the new length and sequence.
pub(crate) struct RecordGuard<'a> {
    pub(crate) record: Record<'a>,
    locked_word: u64,
    new_len: usize,
    /// Index of the first value word (immutable: computed once per lock).
    value_start: usize,
}

impl RecordGuard<'_> {
    /// Appends the current value to `out` (the lock excludes writers, so no retry is needed).
    pub(crate) fn copy_value(&self, out: &mut Vec<u8>) {
        copy_words(&self.record.words[self.value_start..], self.new_len, out);
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
        store_bytes(&self.record.words[self.value_start..], value);
        self.new_len = value.len();
    }

    /// Sets the record version (in-place writes record the writer's version).
    pub(crate) fn set_version(&mut self, version: u64) {
        let half = &self.record.halves()[0];
        let version = version as u32;
        if half.load(Ordering::Relaxed) != version {
            half.store(version, Ordering::Release);
        }
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

    /// Records the address of a stable copy (cpr-copy). The record must have the slot.
    pub(crate) fn set_stable_address(&mut self, address: u64) {
        assert!(
            self.record.has_stable_slot(),
            "stable copy for a record without the slot"
        );
        self.record.words[HEADER_WORDS].store(address & ADDRESS_MASK, Ordering::Release);
    }
}

impl Drop for RecordGuard<'_> {
    fn drop(&mut self) {
        // +1 on the locked (odd) sequence clears the writer bit and carries into the counter;
        // the counter wraps inside its field and never touches the lengths.
        let sequence = (self.locked_word & SEQUENCE_MASK).wrapping_add(1) & SEQUENCE_MASK;
        debug_assert!(sequence & 1 == 0);
        // The capacity bits are the locked word's (fixed at creation).
        let capacity = self.locked_word & !((1 << CAPACITY_SHIFT) - 1);
        self.record.words[2].store(
            capacity | ((self.new_len as u64) << VALUE_LEN_SHIFT) | sequence,
            Ordering::Release,
        );
    }
}

/// Appends the first `len` bytes packed little-endian in `words` to `out`, one relaxed atomic
/// load per word (relaxed: the seqlock's acquire load and fence, or the record lock, order the
/// copy; on x86-64 and aarch64 each load is a plain move).
///
/// Reserves once and fills the spare capacity in whole words, with no per-word bounds checks,
/// conversions or growth checks: about a memcpy of the same bytes.
#[inline]
pub(super) fn copy_words(words: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    let words = &words[..words_for(len)];
    out.reserve(len);
    let spare = &mut out.spare_capacity_mut()[..len];
    let (chunks, tail) = spare.as_chunks_mut::<8>();
    for (chunk, word) in chunks.iter_mut().zip(words) {
        *chunk = word
            .load(Ordering::Relaxed)
            .to_le_bytes()
            .map(MaybeUninit::new);
    }
    if !tail.is_empty() {
        let last = words[chunks.len()].load(Ordering::Relaxed).to_le_bytes();
        for (byte, value) in tail.iter_mut().zip(last) {
            byte.write(value);
        }
    }
    let filled = out.len() + len;
    // SAFETY: `reserve(len)` made room for `len` more bytes, and the loops above initialised all
    // `len` of them (`words` holds `words_for(len)` words: one per 8-byte chunk, plus one for the
    // tail if there is one).
    unsafe { out.set_len(filled) };
}

/// Stores `bytes` packed little-endian into the first `words_for(bytes.len())` words, one relaxed
/// atomic store per word, the last word zero-padded (relaxed: the record lock's release unlock,
/// or the publishing release store of word 0, orders them before any reader's check).
///
/// No per-word bounds checks or conversions: about a memcpy of the same bytes.
#[inline]
pub(super) fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    let words = &words[..words_for(bytes.len())];
    let (chunks, tail) = bytes.as_chunks::<8>();
    for (word, chunk) in words.iter().zip(chunks) {
        word.store(u64::from_le_bytes(*chunk), Ordering::Relaxed);
    }
    if !tail.is_empty() {
        words[chunks.len()].store(tail_word(tail), Ordering::Relaxed);
    }
}

/// The word of a record holding the last `tail.len()` (< 8) bytes of a key or value: the bytes
/// little-endian, zero-padded.
#[inline(always)]
fn tail_word(tail: &[u8]) -> u64 {
    let mut last = [0u8; 8];
    last[..tail.len()].copy_from_slice(tail);
    u64::from_le_bytes(last)
}
