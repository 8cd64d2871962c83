//! The checkpointing algorithms of Cao et al. behind one trait.
//!
//! Every algorithm splits its work between two threads, exactly as in the paper's framework:
//!
//! * the **mutator** (the one application thread that owns the state) calls [`Algorithm::read`],
//!   [`Algorithm::write`] and, at a point of consistency when the writer is idle,
//!   [`Algorithm::prepare`];
//! * the **asynchronous writer** then calls [`Algorithm::capture`] on consecutive chunks covering
//!   the whole state once, while the mutator keeps running.
//!
//! Invariant shared by all of them (checked by the trace tests and loom tests): the words handed
//! out by the captures that follow a `prepare` equal the state as it was at that `prepare`,
//! whatever the mutator writes meanwhile. The mutator never waits for the writer; only the
//! Copy-on-Update writer may wait, and only for the mutator to finish copying one word.

pub mod copy_on_update;
pub mod naive_snapshot;
pub mod ping_pong;
pub mod zigzag;

pub use copy_on_update::{BitArrayCopyOnUpdate, CopyOnUpdate};
pub use naive_snapshot::NaiveSnapshot;
pub use ping_pong::{InterleavedPingPong, NaivePingPong};
pub use zigzag::{BitArrayZigzag, InterleavedZigzag, NaiveZigzag, PackedZigzag};

/// The algorithms and layouts, with the paper's abbreviations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlgorithmKind {
    /// NS: bulk copy at the point of consistency.
    NaiveSnapshot,
    /// COU: copy a word to a shadow the first time it is written in a period.
    CopyOnUpdate,
    /// BACOU: COU with packed flags and the live/shadow words of a cell side by side.
    BitArrayCopyOnUpdate,
    /// NZZ: Wait-Free Zigzag with one byte per flag.
    NaiveZigzag,
    /// IZZ: Wait-Free Zigzag with the two copies of a word side by side, one byte per flag.
    InterleavedZigzag,
    /// PZZ: IZZ with both flags of a word packed into one byte.
    PackedZigzag,
    /// BAZZ: Wait-Free Zigzag with flags packed 64 to a word.
    BitArrayZigzag,
    /// NPP: Wait-Free Ping-Pong with separate arrays.
    NaivePingPong,
    /// IPP: Wait-Free Ping-Pong with the live word, both copies and both flags of a cell together.
    InterleavedPingPong,
}

impl AlgorithmKind {
    /// Every algorithm, in the order the experiment reports them.
    pub const ALL: [AlgorithmKind; 9] = [
        AlgorithmKind::NaiveSnapshot,
        AlgorithmKind::CopyOnUpdate,
        AlgorithmKind::BitArrayCopyOnUpdate,
        AlgorithmKind::NaiveZigzag,
        AlgorithmKind::InterleavedZigzag,
        AlgorithmKind::PackedZigzag,
        AlgorithmKind::BitArrayZigzag,
        AlgorithmKind::NaivePingPong,
        AlgorithmKind::InterleavedPingPong,
    ];

    /// The paper's abbreviation ("NS", "COU", "BACOU", "NZZ", "IZZ", "PZZ", "BAZZ", "NPP", "IPP").
    pub fn short_name(self) -> &'static str {
        match self {
            AlgorithmKind::NaiveSnapshot => "NS",
            AlgorithmKind::CopyOnUpdate => "COU",
            AlgorithmKind::BitArrayCopyOnUpdate => "BACOU",
            AlgorithmKind::NaiveZigzag => "NZZ",
            AlgorithmKind::InterleavedZigzag => "IZZ",
            AlgorithmKind::PackedZigzag => "PZZ",
            AlgorithmKind::BitArrayZigzag => "BAZZ",
            AlgorithmKind::NaivePingPong => "NPP",
            AlgorithmKind::InterleavedPingPong => "IPP",
        }
    }

    /// Parse an abbreviation (case-insensitive).
    pub fn parse(name: &str) -> Option<AlgorithmKind> {
        AlgorithmKind::ALL
            .into_iter()
            .find(|kind| kind.short_name().eq_ignore_ascii_case(name))
    }
}

/// One checkpointing algorithm over a state of `words()` 64-bit cells.
///
/// Memory safety never depends on the callers (all shared cells are atomics); the *protocol*
/// does: one mutator thread calls `read`/`write`/`prepare`, and `prepare` and `capture` alternate
/// as documented. [`crate::TickState`] enforces that; direct users (the benchmark) must too.
pub trait Algorithm: Send + Sync + Sized + 'static {
    /// Which algorithm this is.
    const KIND: AlgorithmKind;

    /// A state of `words` zero cells. `huge_pages` advises the kernel to back the arrays with
    /// transparent huge pages (`madvise(MADV_HUGEPAGE)`).
    fn new(words: usize, huge_pages: bool) -> std::io::Result<Self>;

    /// Replace the whole state by `image` (length `words()`) and arrange that the next
    /// capture is a complete image that needs no base. Exclusive: no writer is running.
    fn load(&mut self, image: &[u64]);

    /// Number of cells.
    fn words(&self) -> usize;

    /// Mutator: the current value of cell `index`.
    fn read(&self, index: usize) -> u64;

    /// Mutator: set cell `index`.
    fn write(&self, index: usize, value: u64);

    /// Mutator, at a point of consistency: start a checkpoint period.
    ///
    /// # Safety
    /// Called by the mutator thread only, and only when no `capture` of the previous checkpoint
    /// is running or pending (the writer finished: its completion was observed with Acquire
    /// ordering, or it never started). Implementations bulk-copy or bulk-reset arrays the writer
    /// reads, without atomics.
    unsafe fn prepare(&self);

    /// Writer: whether the captures of the current checkpoint need the previous image as a
    /// base (Ping-Pong after its first checkpoint: clean words come from the previous image).
    fn needs_base(&self) -> bool;

    /// Writer: fill `out` with the checkpoint's cells `start..start + out.len()`. When
    /// `needs_base()`, `out` holds the previous image's cells on entry and only changed cells
    /// are overwritten. Chunks must be captured in order, each once, after one `prepare` (except
    /// chunks [`Algorithm::changed_since_base`] reports unchanged, which may be skipped).
    fn capture(&self, start: usize, out: &mut [u64]);

    /// Writer: whether any of cells `start..start + length` may differ from the previous image in
    /// the current checkpoint (a conservative `true` is always allowed). Only meaningful when
    /// [`Algorithm::needs_base`]; then a chunk reported unchanged may be skipped (not captured),
    /// which the WAL-backed image store uses to write only dirty pages. The default, for
    /// algorithms that track no changes, is `true`.
    fn changed_since_base(&self, start: usize, length: usize) -> bool {
        let _ = (start, length);
        true
    }

    /// Bytes of memory the algorithm's arrays reserve.
    fn memory_bytes(&self) -> usize;
}

/// Copy `source` into `target` cell by cell. Outside loom this is one `memcpy`.
///
/// # Safety
/// No other thread accesses `target` or writes `source` during the call.
#[inline]
pub(crate) unsafe fn copy_cells(
    source: &[crate::sync::AtomicU64],
    target: &[crate::sync::AtomicU64],
) {
    assert_eq!(source.len(), target.len());
    #[cfg(not(loom))]
    // SAFETY: AtomicU64 has the layout of u64; the caller guarantees no concurrent access.
    unsafe {
        std::ptr::copy_nonoverlapping(
            source.as_ptr().cast::<u64>(),
            target.as_ptr() as *mut u64,
            source.len(),
        )
    };
    #[cfg(loom)]
    for (from, to) in source.iter().zip(target) {
        to.store(
            from.load(crate::sync::Ordering::Relaxed),
            crate::sync::Ordering::Relaxed,
        );
    }
}

/// Set every byte of `cells` to `byte`. Outside loom this is one `memset`.
///
/// # Safety
/// No other thread accesses `cells` during the call.
#[inline]
pub(crate) unsafe fn fill_bytes(cells: &[crate::sync::AtomicU8], byte: u8) {
    #[cfg(not(loom))]
    // SAFETY: AtomicU8 has the layout of u8; the caller guarantees no concurrent access.
    unsafe {
        std::ptr::write_bytes(cells.as_ptr() as *mut u8, byte, cells.len())
    };
    #[cfg(loom)]
    for cell in cells {
        cell.store(byte, crate::sync::Ordering::Relaxed);
    }
}
