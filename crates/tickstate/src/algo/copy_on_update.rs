//! Copy-on-Update (COU) and its bit-array-packed form (BACOU), lock-free.
//!
//! The paper's COU locks each word so that the writer's read of a live word cannot race with
//! the mutator's copy-then-update. We replace the lock by two flag bits per word, both only ever
//! *set* during a period (`fetch_or`), and reset in bulk by `prepare`:
//!
//! * `CLAIMED`: someone decided who provides the checkpoint value of the word;
//! * `READY`: the mutator's copy of the old value is in `shadow`.
//!
//! Mutator `write(i, v)`: if `CLAIMED` is clear, `fetch_or(CLAIMED)`; if that set it, copy
//! `live[i]` to `shadow[i]` and set `READY` (Release). Then store `live[i] = v`.
//! Writer, per word: load `live[i]`, then `fetch_or(CLAIMED)` (AcqRel). If the writer set it,
//! the loaded value is the value at the point of consistency: the mutator had not claimed the
//! word, so had not written it this period, and any later write happens after the writer's
//! RMW, which is ordered after its load. If the mutator had claimed it, the writer waits for
//! `READY` (a copy of one word in progress: bounded) and emits `shadow[i]`.
//! The mutator never waits; it pays one or two atomic RMWs on the first write of a word per
//! period, plus the bulk flag reset at the point of consistency.
//!
//! COU keeps one flag byte per word and separate live/shadow arrays (memory 2·|AS| + n bytes).
//! BACOU packs the flags, two bits per word, 32 words to a `u64` (so the reset is a memset of
//! n/4 bytes), and interleaves each word with its shadow (`data[2i]`, `data[2i + 1]`) so both are
//! on one cache line, as the paper describes for BACOU (§4.1). Packed flags share a word with
//! their neighbours', hence the `fetch_or` for `READY` too.

use super::{fill_bytes, Algorithm, AlgorithmKind};
use crate::region::Region;
use crate::sync::{spin_hint, AtomicU64, AtomicU8, Ordering};

const CLAIMED: u8 = 1;
const READY: u8 = 2;

/// Copy-on-Update with one flag byte per word.
pub struct CopyOnUpdate {
    live: Region<AtomicU64>,
    shadow: Region<AtomicU64>,
    flags: Region<AtomicU8>,
}

impl Algorithm for CopyOnUpdate {
    const KIND: AlgorithmKind = AlgorithmKind::CopyOnUpdate;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        Ok(CopyOnUpdate {
            live: Region::new(words, huge_pages)?,
            shadow: Region::new(words, huge_pages)?,
            flags: Region::new(words, huge_pages)?,
        })
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words());
        for (cell, value) in self.live.cells().iter().zip(image) {
            cell.store(*value, Ordering::Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.live.cells().len()
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        self.live.cells()[index].load(Ordering::Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        let flag = &self.flags.cells()[index];
        let live = &self.live.cells()[index];
        if flag.load(Ordering::Acquire) & CLAIMED == 0 {
            let before = flag.fetch_or(CLAIMED, Ordering::AcqRel);
            if before & CLAIMED == 0 {
                self.shadow.cells()[index].store(live.load(Ordering::Relaxed), Ordering::Relaxed);
                flag.fetch_or(READY, Ordering::Release);
            }
        }
        live.store(value, Ordering::Relaxed);
    }

    unsafe fn prepare(&self) {
        // SAFETY: the writer is idle (caller contract); nobody else touches the flags.
        unsafe { fill_bytes(self.flags.cells(), 0) };
    }

    fn needs_base(&self) -> bool {
        false
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        for (offset, word) in out.iter_mut().enumerate() {
            let index = start + offset;
            let flag = &self.flags.cells()[index];
            let mut flags = flag.load(Ordering::Acquire);
            if flags & CLAIMED == 0 {
                let value = self.live.cells()[index].load(Ordering::Relaxed);
                flags = flag.fetch_or(CLAIMED, Ordering::AcqRel);
                if flags & CLAIMED == 0 {
                    *word = value;
                    continue;
                }
            }
            while flags & READY == 0 {
                spin_hint();
                flags = flag.load(Ordering::Acquire);
            }
            *word = self.shadow.cells()[index].load(Ordering::Relaxed);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.live.bytes() + self.shadow.bytes() + self.flags.bytes()
    }
}

/// Copy-on-Update with flags packed two bits per word and each word beside its shadow.
pub struct BitArrayCopyOnUpdate {
    /// `data[2i]` is word i, `data[2i + 1]` its shadow.
    data: Region<AtomicU64>,
    /// Word i's flags are bits `2(i % 32)` (CLAIMED) and `2(i % 32) + 1` (READY) of `flags[i / 32]`.
    flags: Region<AtomicU64>,
    words: usize,
}

#[inline]
fn packed_claimed_bit(index: usize) -> u64 {
    1u64 << ((index % 32) * 2)
}

impl Algorithm for BitArrayCopyOnUpdate {
    const KIND: AlgorithmKind = AlgorithmKind::BitArrayCopyOnUpdate;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        let data_words = words
            .checked_mul(2)
            .ok_or_else(|| std::io::Error::other("state too large"))?;
        Ok(BitArrayCopyOnUpdate {
            data: Region::new(data_words, huge_pages)?,
            flags: Region::new(words.div_ceil(32), huge_pages)?,
            words,
        })
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words);
        for (index, value) in image.iter().enumerate() {
            self.data.cells()[2 * index].store(*value, Ordering::Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.words
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        debug_assert!(index < self.words);
        self.data.cells()[2 * index].load(Ordering::Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        assert!(index < self.words, "cell {index} out of range");
        let flag = &self.flags.cells()[index / 32];
        let claimed = packed_claimed_bit(index);
        let live = &self.data.cells()[2 * index];
        if flag.load(Ordering::Acquire) & claimed == 0 {
            let before = flag.fetch_or(claimed, Ordering::AcqRel);
            if before & claimed == 0 {
                self.data.cells()[2 * index + 1]
                    .store(live.load(Ordering::Relaxed), Ordering::Relaxed);
                flag.fetch_or(claimed << 1, Ordering::Release);
            }
        }
        live.store(value, Ordering::Relaxed);
    }

    unsafe fn prepare(&self) {
        for word in self.flags.cells() {
            word.store(0, Ordering::Relaxed);
        }
    }

    fn needs_base(&self) -> bool {
        false
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        for (offset, word) in out.iter_mut().enumerate() {
            let index = start + offset;
            let flag = &self.flags.cells()[index / 32];
            let claimed = packed_claimed_bit(index);
            let mut flags = flag.load(Ordering::Acquire);
            if flags & claimed == 0 {
                let value = self.data.cells()[2 * index].load(Ordering::Relaxed);
                flags = flag.fetch_or(claimed, Ordering::AcqRel);
                if flags & claimed == 0 {
                    *word = value;
                    continue;
                }
            }
            while flags & (claimed << 1) == 0 {
                spin_hint();
                flags = flag.load(Ordering::Acquire);
            }
            *word = self.data.cells()[2 * index + 1].load(Ordering::Relaxed);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.data.bytes() + self.flags.bytes()
    }
}
