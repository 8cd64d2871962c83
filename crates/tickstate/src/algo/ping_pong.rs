//! Wait-Free Ping-Pong (§3.3): the live state `AS`, two update copies `C[0]`, `C[1]` and two
//! dirty flags per word `D[0]`, `D[1]`; `current` says which pair the mutator fills.
//!
//! ```text
//! write(i, v):  AS[i] := v; C[current][i] := v; D[current][i] := 1
//! prepare():    current := 1 - current                       (O(1): no bulk work at all)
//! capture(i):   p = 1 - current; out := D[p][i] ? C[p][i] : previous image[i]; D[p][i] := 0
//! ```
//! Invariants: the mutator touches only `AS`, `C[current]`, `D[current]`; the writer only
//! `C[p]`, `D[p]` with `p ≠ current`, so they never share a cell. `D[p]` is all clear when `p`
//! becomes current again, because the writer clears it while capturing and a swap happens only
//! after the writer finished: no bulk reset ever. `C[p][i]` for a dirty `i` is the last value
//! written in the period, i.e. the value at the point of consistency; a clean word did not change
//! since the previous checkpoint, so it comes from the previous image (the *base*, see
//! [`Algorithm::needs_base`]). After [`Algorithm::load`] (and at creation) `C[1]` holds the whole
//! state with `D[1]` all set and `current = 1`, so the first checkpoint is complete by itself.
//! Memory 3·|AS| + 2 flags per word; two stores (three with the flag) per write.
//!
//! NPP keeps five separate arrays; IPP keeps, per word, one 32-byte record holding the live word,
//! both copies and both flags (`[AS, C0, C1, D0 D1, padding]`), so a write touches one cache line.
//! The padding makes IPP's memory 4·|AS|.

use super::{Algorithm, AlgorithmKind};
use crate::region::{Region, ZeroValid};
use crate::sync::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// Which pair the mutator fills, and whether the next capture needs a base image.
struct Phase {
    current: AtomicU8,
    /// 1 until the first `prepare` after a load: that checkpoint is complete without a base.
    first_pending: AtomicU8,
    /// Whether the captures of the current checkpoint need the previous image.
    base_needed: AtomicU8,
}

impl Phase {
    fn loaded() -> Phase {
        Phase {
            current: AtomicU8::new(1),
            first_pending: AtomicU8::new(1),
            base_needed: AtomicU8::new(0),
        }
    }

    fn swap(&self) {
        let current = self.current.load(Relaxed);
        self.current.store(1 - current, Relaxed);
        let first = self.first_pending.load(Relaxed);
        self.base_needed.store(1 - first, Relaxed);
        self.first_pending.store(0, Relaxed);
    }
}

/// Wait-Free Ping-Pong with separate arrays.
pub struct NaivePingPong {
    live: Region<AtomicU64>,
    copies: [Region<AtomicU64>; 2],
    dirty: [Region<AtomicU8>; 2],
    phase: Phase,
}

impl NaivePingPong {
    fn reset(&mut self, image: Option<&[u64]>) {
        for index in 0..self.words() {
            let value = image.map_or(0, |image| image[index]);
            self.live.cells()[index].store(value, Relaxed);
            self.copies[1].cells()[index].store(value, Relaxed);
            self.dirty[0].cells()[index].store(0, Relaxed);
            self.dirty[1].cells()[index].store(1, Relaxed);
        }
        self.phase = Phase::loaded();
    }
}

impl Algorithm for NaivePingPong {
    const KIND: AlgorithmKind = AlgorithmKind::NaivePingPong;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        let mut ping_pong = NaivePingPong {
            live: Region::new(words, huge_pages)?,
            copies: [
                Region::new(words, huge_pages)?,
                Region::new(words, huge_pages)?,
            ],
            dirty: [
                Region::new(words, huge_pages)?,
                Region::new(words, huge_pages)?,
            ],
            phase: Phase::loaded(),
        };
        ping_pong.reset(None);
        Ok(ping_pong)
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words());
        self.reset(Some(image));
    }

    fn words(&self) -> usize {
        self.live.cells().len()
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        self.live.cells()[index].load(Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        let current = self.phase.current.load(Relaxed) as usize;
        self.live.cells()[index].store(value, Relaxed);
        self.copies[current].cells()[index].store(value, Relaxed);
        self.dirty[current].cells()[index].store(1, Relaxed);
    }

    unsafe fn prepare(&self) {
        self.phase.swap();
    }

    fn needs_base(&self) -> bool {
        self.phase.base_needed.load(Relaxed) == 1
    }

    fn changed_since_base(&self, start: usize, length: usize) -> bool {
        // The writer owns D[captured] until the next prepare, so reading it here is race-free;
        // a clean flag means the word was not written in the period.
        let captured = 1 - self.phase.current.load(Relaxed) as usize;
        !self.needs_base()
            || self.dirty[captured].cells()[start..start + length]
                .iter()
                .any(|flag| flag.load(Relaxed) != 0)
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        let captured = 1 - self.phase.current.load(Relaxed) as usize;
        let copies = &self.copies[captured].cells()[start..start + out.len()];
        let dirty = &self.dirty[captured].cells()[start..start + out.len()];
        for ((word, copy), flag) in out.iter_mut().zip(copies).zip(dirty) {
            if flag.load(Relaxed) != 0 {
                *word = copy.load(Relaxed);
                flag.store(0, Relaxed);
            }
        }
    }

    fn memory_bytes(&self) -> usize {
        self.live.bytes()
            + self.copies.iter().map(Region::bytes).sum::<usize>()
            + self.dirty.iter().map(Region::bytes).sum::<usize>()
    }
}

/// One word of Interleaved Ping-Pong: everything a write touches, in one half cache line.
#[repr(C, align(32))]
pub(crate) struct InterleavedCell {
    live: AtomicU64,
    copies: [AtomicU64; 2],
    dirty: [AtomicU8; 2],
}

// SAFETY: a repr(C) record of integer atomics (and padding): all-zero is valid; no drop glue.
unsafe impl ZeroValid for InterleavedCell {
    #[cfg(loom)]
    fn zero() -> Self {
        InterleavedCell {
            live: AtomicU64::new(0),
            copies: [AtomicU64::new(0), AtomicU64::new(0)],
            dirty: [AtomicU8::new(0), AtomicU8::new(0)],
        }
    }
}

/// Wait-Free Ping-Pong with each word's live value, copies and flags in one 32-byte record.
pub struct InterleavedPingPong {
    cells: Region<InterleavedCell>,
    phase: Phase,
}

impl InterleavedPingPong {
    fn reset(&mut self, image: Option<&[u64]>) {
        for (index, cell) in self.cells.cells().iter().enumerate() {
            let value = image.map_or(0, |image| image[index]);
            cell.live.store(value, Relaxed);
            cell.copies[1].store(value, Relaxed);
            cell.dirty[0].store(0, Relaxed);
            cell.dirty[1].store(1, Relaxed);
        }
        self.phase = Phase::loaded();
    }
}

impl Algorithm for InterleavedPingPong {
    const KIND: AlgorithmKind = AlgorithmKind::InterleavedPingPong;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        let mut ping_pong = InterleavedPingPong {
            cells: Region::new(words, huge_pages)?,
            phase: Phase::loaded(),
        };
        ping_pong.reset(None);
        Ok(ping_pong)
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words());
        self.reset(Some(image));
    }

    fn words(&self) -> usize {
        self.cells.cells().len()
    }

    #[inline]
    fn read(&self, index: usize) -> u64 {
        self.cells.cells()[index].live.load(Relaxed)
    }

    #[inline]
    fn write(&self, index: usize, value: u64) {
        let current = self.phase.current.load(Relaxed) as usize;
        let cell = &self.cells.cells()[index];
        cell.live.store(value, Relaxed);
        cell.copies[current].store(value, Relaxed);
        cell.dirty[current].store(1, Relaxed);
    }

    unsafe fn prepare(&self) {
        self.phase.swap();
    }

    fn needs_base(&self) -> bool {
        self.phase.base_needed.load(Relaxed) == 1
    }

    fn changed_since_base(&self, start: usize, length: usize) -> bool {
        // As for NPP: the writer owns the `dirty[captured]` flags until the next prepare.
        let captured = 1 - self.phase.current.load(Relaxed) as usize;
        !self.needs_base()
            || self.cells.cells()[start..start + length]
                .iter()
                .any(|cell| cell.dirty[captured].load(Relaxed) != 0)
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        let captured = 1 - self.phase.current.load(Relaxed) as usize;
        let cells = &self.cells.cells()[start..start + out.len()];
        for (word, cell) in out.iter_mut().zip(cells) {
            if cell.dirty[captured].load(Relaxed) != 0 {
                *word = cell.copies[captured].load(Relaxed);
                cell.dirty[captured].store(0, Relaxed);
            }
        }
    }

    fn memory_bytes(&self) -> usize {
        self.cells.bytes()
    }
}
