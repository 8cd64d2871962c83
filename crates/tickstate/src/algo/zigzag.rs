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
//! NZZ keeps one byte per flag (the negation is a byte loop over n bytes); BAZZ packs the flags
//! 64 to a word (the negation is n/64 word operations), as §4.2 of the paper.

use super::{Algorithm, AlgorithmKind};
use crate::region::Region;
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
        let read_from = self.read_from.cells();
        let write_to = self.write_to.cells();
        #[cfg(not(loom))]
        {
            // SAFETY: the writer is idle (caller contract) and only the mutator touches `MR`,
            // so plain byte access cannot race; it lets the loop vectorise.
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
