//! Naive Snapshot (NS): at the point of consistency the mutator copies the whole state into a
//! shadow array; the writer streams the shadow. Memory 2·|AS|; one bulk copy of |AS| per
//! checkpoint, on the mutator (the latency spike the paper measures); no per-write cost.
//! The writer reads only `shadow`, which the mutator touches only in `prepare` (writer idle).

use super::{copy_cells, Algorithm, AlgorithmKind};
use crate::region::Region;
use crate::sync::{AtomicU64, Ordering::Relaxed};

/// Naive Snapshot.
pub struct NaiveSnapshot {
    live: Region<AtomicU64>,
    shadow: Region<AtomicU64>,
}

impl Algorithm for NaiveSnapshot {
    const KIND: AlgorithmKind = AlgorithmKind::NaiveSnapshot;

    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self> {
        Ok(NaiveSnapshot {
            live: Region::new(words, huge_pages)?,
            shadow: Region::new(words, huge_pages)?,
        })
    }

    fn load(&mut self, image: &[u64]) {
        assert_eq!(image.len(), self.words());
        for (cell, value) in self.live.cells().iter().zip(image) {
            cell.store(*value, Relaxed);
        }
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
        self.live.cells()[index].store(value, Relaxed);
    }

    unsafe fn prepare(&self) {
        // SAFETY: the writer is idle (caller contract) and only the mutator touches `live`.
        unsafe { copy_cells(self.live.cells(), self.shadow.cells()) };
    }

    fn needs_base(&self) -> bool {
        false
    }

    fn capture(&self, start: usize, out: &mut [u64]) {
        let shadow = &self.shadow.cells()[start..start + out.len()];
        for (word, cell) in out.iter_mut().zip(shadow) {
            *word = cell.load(Relaxed);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.live.bytes() + self.shadow.bytes()
    }
}
