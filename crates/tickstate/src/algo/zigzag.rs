//! Wait-Free Zigzag (§3.2): two copies `AS[0]`, `AS[1]` of every word and two flags per word,
//! `MR` (which copy holds the current value) and `MW` (which copy the mutator writes this
//! period).
//!
//! ```text
//! read(i)     = AS[MR[i]][i]
//! write(i, v):  AS[MW[i]][i] := v; MR[i] := MW[i]
//! prepare():    MW := NOT MR          (the bulk negation: n flag flips)
//! capture(i)  = AS[NOT MW[i]][i]
//! ```
//! Invariant: during a period `MW` is constant and the mutator stores only into `AS[MW[i]][i]`;
//! at `prepare` `MW = NOT MR`, so `AS[NOT MW[i]] = AS[MR[i]]` held the current value at the
//! point of consistency and nobody writes it until the next `prepare`. No locks, no waiting, no
//! copies; the cost is a flag lookup per read and write, two stores per write, and the negation.
//! `MR` is touched only by the mutator; `MW` is written only in `prepare` (writer idle).
//! Memory: 2·|AS| + 2 flags per word.
//!
//! The four layouts of §4.2 of the paper. The seed names them (Naive, Interleaved, Packed,
//! Bit-Array Packed) without describing them; where the text is silent we chose, for each name,
//! the cheapest correct layout it can mean:
//!
//! | layout | copies | flags | a read / write touches | negation at `prepare` |
//! |---|---|---|---|---|
//! | NZZ | two separate arrays | `MR`, `MW`: one byte per word each, two arrays | flag byte(s) + a word of one of two arrays | n bytes read, n written |
//! | IZZ | interleaved: `AS[0][i]`, `AS[1][i]` side by side (16 bytes, one cache line) | as NZZ | flag byte(s) + one data line | as NZZ |
//! | PZZ | interleaved, as IZZ | packed: `MR` (bit 0) and `MW` (bit 1) of a word in one byte of one array | one flag byte + one data line | n bytes, rewritten in place |
//! | BAZZ | two separate arrays | bit arrays, 64 words per `u64` | a flag word + a word of one of two arrays | n/64 words |
//!
//! So IZZ trades NZZ's two data lines per word for one; PZZ also halves the flag traffic (both
//! flags of a word in one byte: a read loads it, a write loads and stores it) and the negation
//! becomes one pass over one byte array; BAZZ makes the negation 8·64 times smaller but keeps the
//! copies apart. (Packing the flags *into* the interleaved record as well — IPP's layout — would
//! make every `prepare` walk the whole 2·|AS| of data to reach the flags; we did not build it.)
//! In PZZ the writer reads `MW` from the same byte in which the mutator stores `MR`: the mutator
//! stores the whole byte with `MW` unchanged (it is constant during a period), both sides use
//! atomic byte accesses, so the writer always sees the period's `MW`.

use super::{Algorithm, AlgorithmKind};
use crate::region::{Region, ZeroValid};
use crate::sync::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// Wait-Free Zigzag with one byte per flag.
pub struct NaiveZigzag {
    copies: [Region<AtomicU64>; 2],
    read_from: Region<AtomicU8>,
    write_to: Region<AtomicU8>,
}

impl Algorithm for NaiveZigzag {
    const KIND: AlgorithmKind = AlgorithmKind::NaiveZigzag;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        let zigzag = NaiveZigzag {
            copies: [
                Region::new(words, huge_pages)?,
                Region::new(words, huge_pages)?,
            ],
            read_from: Region::new(words, huge_pages)?,
            write_to: Region::new(words, huge_pages)?,
        };
        for flag in zigzag.write_to.cells() {
            flag.store(1, Relaxed);
        }
        Ok(zigzag)
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words());
        for (index, value) in image.iter().enumerate() {
            self.copies[0].cells()[index].store(*value, Relaxed);
            self.copies[1].cells()[index].store(*value, Relaxed);
            self.read_from.cells()[index].store(0, Relaxed);
            self.write_to.cells()[index].store(1, Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.read_from.cells().len()
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        let copy = self.read_from.cells()[index].load(Relaxed) as usize;
        self.copies[copy].cells()[index].load(Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        let copy = self.write_to.cells()[index].load(Relaxed);
        self.copies[copy as usize].cells()[index].store(value, Relaxed);
        self.read_from.cells()[index].store(copy, Relaxed);
    }

    unsafe fn prepare(&self) {
        // SAFETY: the writer is idle (caller contract); only the mutator touches `MR`.
        unsafe { negate_byte_flags(self.read_from.cells(), self.write_to.cells()) };
    }

    fn needs_base(&self) -> bool {
        false
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        for (offset, word) in out.iter_mut().enumerate() {
            let index = start + offset;
            let stable = (self.write_to.cells()[index].load(Relaxed) ^ 1) as usize;
            *word = self.copies[stable].cells()[index].load(Relaxed);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.copies[0].bytes()
            + self.copies[1].bytes()
            + self.read_from.bytes()
            + self.write_to.bytes()
    }
}

/// Wait-Free Zigzag with flags packed 64 to a word.
pub struct BitArrayZigzag {
    copies: [Region<AtomicU64>; 2],
    read_from: Region<AtomicU64>,
    write_to: Region<AtomicU64>,
    words: usize,
}

impl Algorithm for BitArrayZigzag {
    const KIND: AlgorithmKind = AlgorithmKind::BitArrayZigzag;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        let zigzag = BitArrayZigzag {
            copies: [
                Region::new(words, huge_pages)?,
                Region::new(words, huge_pages)?,
            ],
            read_from: Region::new(words.div_ceil(64), huge_pages)?,
            write_to: Region::new(words.div_ceil(64), huge_pages)?,
            words,
        };
        for flags in zigzag.write_to.cells() {
            flags.store(u64::MAX, Relaxed);
        }
        Ok(zigzag)
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words);
        for (index, value) in image.iter().enumerate() {
            self.copies[0].cells()[index].store(*value, Relaxed);
            self.copies[1].cells()[index].store(*value, Relaxed);
        }
        for flags in self.read_from.cells() {
            flags.store(0, Relaxed);
        }
        for flags in self.write_to.cells() {
            flags.store(u64::MAX, Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.words
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        let copy = (self.read_from.cells()[index / 64].load(Relaxed) >> (index % 64)) & 1;
        self.copies[copy as usize].cells()[index].load(Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        let bit = 1u64 << (index % 64);
        let copy = self.write_to.cells()[index / 64].load(Relaxed) & bit;
        self.copies[(copy != 0) as usize].cells()[index].store(value, Relaxed);
        // Only the mutator writes MR, so load + store (no RMW) is enough.
        let read_from = &self.read_from.cells()[index / 64];
        let flags = read_from.load(Relaxed);
        read_from.store((flags & !bit) | copy, Relaxed);
    }

    unsafe fn prepare(&self) {
        for (to, from) in self.write_to.cells().iter().zip(self.read_from.cells()) {
            to.store(!from.load(Relaxed), Relaxed);
        }
    }

    fn needs_base(&self) -> bool {
        false
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        for (offset, word) in out.iter_mut().enumerate() {
            let index = start + offset;
            let write_to = (self.write_to.cells()[index / 64].load(Relaxed) >> (index % 64)) & 1;
            *word = self.copies[(write_to ^ 1) as usize].cells()[index].load(Relaxed);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.copies[0].bytes()
            + self.copies[1].bytes()
            + self.read_from.bytes()
            + self.write_to.bytes()
    }
}

/// `MW := NOT MR` over one byte per flag (NZZ, IZZ). Outside loom a plain byte loop the compiler
/// vectorises.
///
/// # Safety
/// No other thread accesses either array during the call (the writer is idle and only the mutator
/// touches `MR`).
unsafe fn negate_byte_flags(read_from: &[AtomicU8], write_to: &[AtomicU8]) {
    #[cfg(not(loom))]
    {
        // SAFETY: AtomicU8 has the layout of u8; the caller guarantees exclusive access.
        let (source, target) = unsafe {
            (
                std::slice::from_raw_parts(read_from.as_ptr().cast::<u8>(), read_from.len()),
                std::slice::from_raw_parts_mut(write_to.as_ptr() as *mut u8, write_to.len()),
            )
        };
        for (to, from) in target.iter_mut().zip(source) {
            *to = *from ^ 1;
        }
    }
    #[cfg(loom)]
    for (to, from) in write_to.iter().zip(read_from) {
        to.store(from.load(Relaxed) ^ 1, Relaxed);
    }
}

/// The two copies of one word, side by side (IZZ, PZZ): a read or write touches one cache line.
#[repr(C, align(16))]
pub(crate) struct ZigzagPair {
    copies: [AtomicU64; 2],
}

// SAFETY: a repr(C) pair of integer atomics: all-zero is valid; no drop glue.
unsafe impl ZeroValid for ZigzagPair {
    #[cfg(loom)]
    fn zero() -> Self {
        ZigzagPair {
            copies: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }
}

/// Wait-Free Zigzag with the two copies of each word interleaved and one byte per flag.
pub struct InterleavedZigzag {
    pairs: Region<ZigzagPair>,
    read_from: Region<AtomicU8>,
    write_to: Region<AtomicU8>,
}

impl Algorithm for InterleavedZigzag {
    const KIND: AlgorithmKind = AlgorithmKind::InterleavedZigzag;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        let zigzag = InterleavedZigzag {
            pairs: Region::new(words, huge_pages)?,
            read_from: Region::new(words, huge_pages)?,
            write_to: Region::new(words, huge_pages)?,
        };
        for flag in zigzag.write_to.cells() {
            flag.store(1, Relaxed);
        }
        Ok(zigzag)
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words());
        for (index, value) in image.iter().enumerate() {
            let pair = &self.pairs.cells()[index];
            pair.copies[0].store(*value, Relaxed);
            pair.copies[1].store(*value, Relaxed);
            self.read_from.cells()[index].store(0, Relaxed);
            self.write_to.cells()[index].store(1, Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.pairs.cells().len()
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        let copy = self.read_from.cells()[index].load(Relaxed) as usize;
        self.pairs.cells()[index].copies[copy].load(Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        let copy = self.write_to.cells()[index].load(Relaxed);
        self.pairs.cells()[index].copies[copy as usize].store(value, Relaxed);
        self.read_from.cells()[index].store(copy, Relaxed);
    }

    unsafe fn prepare(&self) {
        // SAFETY: the writer is idle (caller contract); only the mutator touches `MR`.
        unsafe { negate_byte_flags(self.read_from.cells(), self.write_to.cells()) };
    }

    fn needs_base(&self) -> bool {
        false
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        let pairs = &self.pairs.cells()[start..start + out.len()];
        let write_to = &self.write_to.cells()[start..start + out.len()];
        for ((word, pair), flag) in out.iter_mut().zip(pairs).zip(write_to) {
            let stable = (flag.load(Relaxed) ^ 1) as usize;
            *word = pair.copies[stable].load(Relaxed);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.pairs.bytes() + self.read_from.bytes() + self.write_to.bytes()
    }
}

/// `MR` of a PZZ flag byte.
const PACKED_READ: u8 = 1;
/// `MW` of a PZZ flag byte.
const PACKED_WRITE: u8 = 2;

/// Wait-Free Zigzag with interleaved copies and both flags of a word packed into one byte.
pub struct PackedZigzag {
    pairs: Region<ZigzagPair>,
    /// Bit 0: `MR` (the copy holding the current value); bit 1: `MW` (the copy written this
    /// period).
    flags: Region<AtomicU8>,
}

impl Algorithm for PackedZigzag {
    const KIND: AlgorithmKind = AlgorithmKind::PackedZigzag;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        let zigzag = PackedZigzag {
            pairs: Region::new(words, huge_pages)?,
            flags: Region::new(words, huge_pages)?,
        };
        for flag in zigzag.flags.cells() {
            flag.store(PACKED_WRITE, Relaxed);
        }
        Ok(zigzag)
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words());
        for (index, value) in image.iter().enumerate() {
            let pair = &self.pairs.cells()[index];
            pair.copies[0].store(*value, Relaxed);
            pair.copies[1].store(*value, Relaxed);
            self.flags.cells()[index].store(PACKED_WRITE, Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.pairs.cells().len()
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        let copy = (self.flags.cells()[index].load(Relaxed) & PACKED_READ) as usize;
        self.pairs.cells()[index].copies[copy].load(Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        let flag = &self.flags.cells()[index];
        let flags = flag.load(Relaxed);
        let copy = (flags & PACKED_WRITE) >> 1;
        self.pairs.cells()[index].copies[copy as usize].store(value, Relaxed);
        // MR := MW, with MW itself stored unchanged (the writer reads it concurrently).
        flag.store((flags & PACKED_WRITE) | copy, Relaxed);
    }

    unsafe fn prepare(&self) {
        let flags = self.flags.cells();
        // MW := NOT MR, in place: the new byte is MR | (NOT MR) << 1.
        #[cfg(not(loom))]
        {
            // SAFETY: the writer is idle (caller contract) and only the mutator touches the
            // flags now; AtomicU8 has the layout of u8. A plain loop the compiler vectorises.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(flags.as_ptr() as *mut u8, flags.len()) };
            for byte in bytes {
                let read = *byte & PACKED_READ;
                *byte = read | ((read ^ 1) << 1);
            }
        }
        #[cfg(loom)]
        for flag in flags {
            let read = flag.load(Relaxed) & PACKED_READ;
            flag.store(read | ((read ^ 1) << 1), Relaxed);
        }
    }

    fn needs_base(&self) -> bool {
        false
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        let pairs = &self.pairs.cells()[start..start + out.len()];
        let flags = &self.flags.cells()[start..start + out.len()];
        for ((word, pair), flag) in out.iter_mut().zip(pairs).zip(flags) {
            let stable = (((flag.load(Relaxed) & PACKED_WRITE) >> 1) ^ 1) as usize;
            *word = pair.copies[stable].load(Relaxed);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.pairs.bytes() + self.flags.bytes()
    }
}
