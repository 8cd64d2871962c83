//! The copy step of a checkpoint: naive (the Turso document's "before") and fast.
//!
//! # Fast backfill
//!
//! After Turso's "Making checkpointing fast": the worklist (newest frame per page, in **frame
//! order**) is consumed by one loop that keeps reads and writes in flight together:
//!
//! 1. **Issue.** Walk the worklist in frame order. A page whose cache entry is clean and tagged
//!    exactly `(frame, epoch)` goes straight into the pending write batch; any other page gets a
//!    WAL read, and misses of consecutive frames (contiguous in the WAL) share one vectored read
//!    of up to [`MAX_READ_RUN_FRAMES`] frames on io_uring. Issuing stops when [`Limits::held_pages`] pages are between issue and written
//!    (bounded memory, and a bound on operations in flight), or when the pending batch is full.
//! 2. **Drain.** Completed reads move into the pending batch, a map sorted by page that counts
//!    its runs of consecutive pages as pages arrive.
//! 3. **Flush when good enough** ([`flush_now`]): the pending batch becomes one vectored write
//!    per run and is submitted (io_uring: asynchronously, several batches may be in flight) when
//!    - it is full ([`Limits::batch_pages`], 512 pages of 4 KiB, Turso's batch), or
//!    - nothing more can arrive (every read issued and completed), or
//!    - it is "good enough" by run length: at least [`EARLY_FLUSH_MIN_PAGES`] pages whose mean
//!      run is at least [`GOOD_RUN_PAGES`] pages. Why: a vectored write costs a fixed part (a
//!      syscall or SQE, the file-system lock, block mapping) plus a part per page; at 8 pages per
//!      call the fixed part is amortised over 32 KiB and waiting for more pages would mostly add
//!      latency, while writing now lets the write overlap the reads still coming. The 64-page
//!      floor keeps a few lucky early runs from producing many small batches (each batch also
//!      costs a submit and a completion pass). Scattered pages (short runs) wait for the batch
//!      to fill, because more pages can only merge runs, never split them.
//! 4. **Reap** completions, blocking only when nothing can be issued.
//!
//! Engines: [`uring`] (io_uring reads *and* `writev`s on one ring, created on first use and
//! kept) when the WAL has a file descriptor and io_uring works; [`pool`] otherwise (two reader
//! threads fed by a channel; the checkpointer writes with the trait's `write_at`, i.e. `pwritev`
//! on a real disk, while the threads keep reading), which also serves the simulated disk.
//!
//! In debug builds every reused cache page is cross-checked against a WAL read.
//!
//! # Invariants
//!
//! - Every page of the worklist is written exactly once, with the image of exactly the worklist's
//!   frame: the worklist has one item per page (asserted), an item enters the pending batch once
//!   (asserted on insert), a batch leaves the pending map when submitted, and the total written is
//!   checked against the worklist length at the end. No two writes in flight touch the same page,
//!   so their completion order does not matter.
//! - Any read or write error, short read or short write aborts the copy with an error before the
//!   database fsync, so nothing is published; the engine waits for (or, if waiting fails, leaks
//!   the buffers of) every operation still in flight before any buffer is freed.
//! - At most [`Limits::held_pages`] page buffers are held, whatever the worklist's length.

mod pool;
mod uring;

use crate::cache::FrameTag;
use crate::error::{io_error, Result};
use crate::store::{BackfillStrategy, PageStore};
use crate::wal::read_frame_page;
use std::collections::BTreeMap;
use std::io::IoSlice;
use std::sync::Arc;

pub(crate) use uring::RingSlot;

/// Pages per write batch (Turso's `CKPT_BATCH_PAGES`) for 4 KiB pages; smaller for larger pages
/// (see [`Limits`]).
pub const BATCH_PAGES: usize = 512;

/// Page buffers held at most (issued, pending, or being written): two full batches, so one
/// batch can fill while the previous one is written. Also bounds operations in flight.
const MAX_HELD_PAGES: usize = 2 * BATCH_PAGES;

/// Bytes of page buffers held at most (bounds memory for large page sizes).
const MAX_HELD_BYTES: usize = 8 << 20;

/// A pending batch this large may be flushed early when its runs are long (see the module doc).
pub const EARLY_FLUSH_MIN_PAGES: usize = 64;

/// Mean run length, in pages, at which a pending batch is "good enough" to flush early.
pub const GOOD_RUN_PAGES: usize = 8;

/// Longest run written by one vectored write: `IOV_MAX` on Linux.
const MAX_RUN_PAGES: usize = 1024;

/// One page to copy: the newest frame `<= safe` of `page_number`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkItem {
    pub page_number: u32,
    pub frame_id: u64,
}

/// Counters of one copy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BackfillCounts {
    pub pages_written: u64,
    pub cache_hits: u64,
    pub wal_reads: u64,
    pub wal_read_calls: u64,
    pub write_calls: u64,
}

/// Buffer and batch sizes for one page size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Page buffers held at most.
    pub held_pages: usize,
    /// A pending batch this large is flushed.
    pub batch_pages: usize,
}

impl Limits {
    pub fn for_page_size(page_size_bytes: usize) -> Limits {
        let held_pages = (MAX_HELD_BYTES / page_size_bytes).clamp(16, MAX_HELD_PAGES);
        let limits = Limits {
            held_pages,
            batch_pages: (held_pages / 2).min(BATCH_PAGES),
        };
        assert!(limits.batch_pages >= 1 && 2 * limits.batch_pages <= limits.held_pages);
        assert!(limits.held_pages <= uring::RING_ENTRIES as usize);
        limits
    }
}

/// The run-length heuristic: whether to write the pending batch (`pages` pages in `runs` runs of
/// consecutive pages) now. `more_coming`: reads are in flight or worklist items are unissued.
pub(crate) fn flush_now(pages: usize, runs: usize, more_coming: bool, limits: Limits) -> bool {
    debug_assert!(runs <= pages && (runs == 0) == (pages == 0));
    if pages == 0 {
        return false;
    }
    !more_coming
        || pages >= limits.batch_pages
        || (pages >= EARLY_FLUSH_MIN_PAGES && pages >= GOOD_RUN_PAGES * runs)
}

pub(crate) fn run(
    store: &PageStore,
    strategy: BackfillStrategy,
    worklist: &[WorkItem],
    epoch: u64,
) -> Result<BackfillCounts> {
    debug_assert!(
        {
            let mut pages: Vec<u32> = worklist.iter().map(|w| w.page_number).collect();
            pages.sort_unstable();
            pages.windows(2).all(|w| w[0] != w[1])
        },
        "the worklist holds one item per page"
    );
    match strategy {
        BackfillStrategy::Naive => naive(store, worklist),
        BackfillStrategy::Fast => {
            match uring::with_engine(store, |engine| fast(store, worklist, epoch, engine)) {
                Some(result) => result,
                // No descriptor (simulated disk) or io_uring unavailable: the pool does the I/O.
                None => pool::with_engine(store, |engine| fast(store, worklist, epoch, engine)),
            }
        }
        BackfillStrategy::FastThreadPool => {
            pool::with_engine(store, |engine| fast(store, worklist, epoch, engine))
        }
    }
}

fn naive(store: &PageStore, worklist: &[WorkItem]) -> Result<BackfillCounts> {
    let inner = &store.inner;
    let page_size = inner.options.page_size_bytes as usize;
    let mut page = vec![0u8; page_size];
    let mut counts = BackfillCounts::default();
    for item in worklist {
        read_frame_page(&*inner.wal_file, &inner.wal_path, item.frame_id, &mut page)?;
        let offset = db_offset(item.page_number, page_size);
        crate::fail_point::step("backfill:write");
        inner.db_file.write_all_at(&page, offset).map_err(|e| {
            io_error(
                format!("writing page {} (offset {offset}) of", item.page_number),
                &inner.db_path,
                e,
            )
        })?;
        counts.wal_reads += 1;
        counts.wal_read_calls += 1;
        counts.write_calls += 1;
        counts.pages_written += 1;
    }
    Ok(counts)
}

/// A page image ready to be written.
pub(crate) enum Image {
    /// Reused from the page cache.
    Cached(Arc<[u8]>),
    /// Read from the WAL into a buffer of the backfill.
    Read(Vec<u8>),
}

impl Image {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Cached(bytes) => bytes,
            Image::Read(bytes) => bytes,
        }
    }
}

/// A run of consecutive pages of a [`WriteBatch`]: `pages[first..first + len]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub first: usize,
    pub len: usize,
}

/// A flushed batch: images sorted by page, cut into runs (each at most `MAX_RUN_PAGES`).
pub(crate) struct WriteBatch {
    pub pages: Vec<(u32, Image)>,
    pub runs: Vec<Run>,
}

impl WriteBatch {
    /// Byte offset of `run` in the database file.
    pub fn run_offset(&self, run: Run, page_size: usize) -> u64 {
        db_offset(self.pages[run.first].0, page_size)
    }

    /// Gives the read buffers back for reuse.
    fn recycle(self, spare: &mut Vec<Vec<u8>>) {
        for (_, image) in self.pages {
            if let Image::Read(buffer) = image {
                spare.push(buffer);
            }
        }
    }
}

/// The batch being filled: images by page, with its number of runs kept up to date.
#[derive(Default)]
struct Pending {
    pages: BTreeMap<u32, Image>,
    runs: usize,
}

impl Pending {
    fn insert(&mut self, page_number: u32, image: Image) {
        let before = page_number
            .checked_sub(1)
            .is_some_and(|p| self.pages.contains_key(&p));
        let after = self.pages.contains_key(&(page_number + 1));
        let previous = self.pages.insert(page_number, image);
        assert!(
            previous.is_none(),
            "page {page_number} entered a backfill batch twice"
        );
        // A new page starts a run, extends one, or joins two.
        self.runs = self.runs + 1 - usize::from(before) - usize::from(after);
    }

    fn take(&mut self) -> WriteBatch {
        let pages: Vec<(u32, Image)> = std::mem::take(&mut self.pages).into_iter().collect();
        let mut runs: Vec<Run> = Vec::with_capacity(self.runs);
        for (index, &(page_number, _)) in pages.iter().enumerate() {
            let extends = index > 0
                && pages[index - 1].0 + 1 == page_number
                && runs.last().is_some_and(|r| r.len < MAX_RUN_PAGES);
            match runs.last_mut() {
                Some(run) if extends => run.len += 1,
                _ => runs.push(Run {
                    first: index,
                    len: 1,
                }),
            }
        }
        debug_assert!(runs.len() >= self.runs, "run count out of date");
        self.runs = 0;
        WriteBatch { pages, runs }
    }
}

/// Longest run of consecutive frames read by one vectored read: 32 frames of 4 KiB are 128 KiB,
/// the kernel's default readahead window; `2 * 32 - 1` iovecs stay far below `IOV_MAX`.
pub const MAX_READ_RUN_FRAMES: usize = 32;

/// Reads of consecutive frames `first_frame..` for worklist items `first_token..` (one buffer
/// each, one page long), issued as one operation.
pub(crate) struct ReadRun {
    pub first_token: usize,
    pub first_frame: u64,
    pub buffers: Vec<Vec<u8>>,
}

impl ReadRun {
    /// Whether frame `frame_id` continues the run (and the run has room).
    fn extends_to(&self, frame_id: u64) -> bool {
        self.buffers.len() < MAX_READ_RUN_FRAMES
            && self.first_frame + self.buffers.len() as u64 == frame_id
    }
}

/// What an engine reports back.
pub(crate) enum Event {
    /// The read of worklist item `token` completed into `buffer`.
    Read { token: usize, buffer: Vec<u8> },
    /// Every run of `batch` was written in full, with `calls` write calls.
    Written { batch: WriteBatch, calls: u64 },
}

/// Writes every run of `batch` now, one `pwritev` per run (more if the kernel writes less);
/// returns the write calls. Both engines write this way: buffered io_uring writes to ext4 are
/// handed to io_uring's worker threads, and on a machine whose cores are busy each hand-off waits
/// for a CPU, which measured slower than writing from the checkpointer's own thread
/// (docs/results/wal.md). The reads stay asynchronous, so they still overlap these writes.
pub(crate) fn write_batch_now(store: &PageStore, batch: &WriteBatch) -> Result<u64> {
    let inner = &store.inner;
    let page_size = inner.options.page_size_bytes as usize;
    let mut calls = 0u64;
    for run in &batch.runs {
        let mut slices: Vec<IoSlice<'_>> = batch.pages[run.first..run.first + run.len]
            .iter()
            .map(|(_, image)| IoSlice::new(image.bytes()))
            .collect();
        let mut slices: &mut [IoSlice<'_>] = &mut slices;
        let mut offset = batch.run_offset(*run, page_size);
        while !slices.is_empty() {
            crate::fail_point::step("backfill:write");
            let written = inner.db_file.write_at(slices, offset).map_err(|e| {
                io_error(
                    format!("pwritev of {} pages at offset {offset} to", run.len),
                    &inner.db_path,
                    e,
                )
            })?;
            calls += 1;
            if written == 0 {
                return Err(io_error(
                    "pwritev wrote 0 bytes to",
                    &inner.db_path,
                    std::io::ErrorKind::WriteZero.into(),
                ));
            }
            offset += written as u64;
            IoSlice::advance_slices(&mut slices, written);
        }
    }
    Ok(calls)
}

/// The I/O under the fast backfill's loop. Dropping an engine waits for whatever it still has
/// in flight (or leaks those buffers if it cannot), so an error can be returned at any point.
pub(crate) trait Engine {
    /// Starts reading the pages of the run's frames into its buffers; each completes as one
    /// [`Event::Read`] (token `first_token + i` for buffer `i`). Returns the read calls used.
    fn read(&mut self, run: ReadRun) -> Result<u64>;
    /// Starts writing every run of `batch`.
    fn write(&mut self, batch: WriteBatch) -> Result<()>;
    /// Hands queued operations to the kernel (or workers).
    fn submit(&mut self) -> Result<()>;
    /// Appends completions to `events`; with `block`, waits for at least one if anything is in
    /// flight. A failed operation is returned as the error.
    fn reap(&mut self, block: bool, events: &mut Vec<Event>) -> Result<()>;
}

fn fast(
    store: &PageStore,
    worklist: &[WorkItem],
    epoch: u64,
    engine: &mut impl Engine,
) -> Result<BackfillCounts> {
    let page_size = store.inner.options.page_size_bytes as usize;
    let limits = Limits::for_page_size(page_size);
    let mut counts = BackfillCounts::default();
    let mut pending = Pending::default();
    let mut next = 0usize;
    let mut reads_in_flight = 0usize;
    let mut held_pages = 0usize;
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    loop {
        // Misses of consecutive frames are read together, as one vectored read.
        let mut run: Option<ReadRun> = None;
        while next < worklist.len()
            && held_pages < limits.held_pages
            && pending.pages.len() < limits.batch_pages
        {
            let item = worklist[next];
            match cached_image(store, item, epoch)? {
                Some(cached) => {
                    counts.cache_hits += 1;
                    pending.insert(item.page_number, Image::Cached(cached));
                    if let Some(done) = run.take() {
                        counts.wal_read_calls += engine.read(done)?;
                    }
                }
                None => {
                    counts.wal_reads += 1;
                    reads_in_flight += 1;
                    let buffer = spare.pop().unwrap_or_else(|| vec![0u8; page_size]);
                    match &mut run {
                        Some(open) if open.extends_to(item.frame_id) => open.buffers.push(buffer),
                        _ => {
                            if let Some(done) = run.replace(ReadRun {
                                first_token: next,
                                first_frame: item.frame_id,
                                buffers: vec![buffer],
                            }) {
                                counts.wal_read_calls += engine.read(done)?;
                            }
                        }
                    }
                }
            }
            next += 1;
            held_pages += 1;
        }
        if let Some(done) = run.take() {
            counts.wal_read_calls += engine.read(done)?;
        }
        let more_coming = reads_in_flight > 0 || next < worklist.len();
        if flush_now(pending.pages.len(), pending.runs, more_coming, limits) {
            engine.write(pending.take())?;
        }
        engine.submit()?;
        if held_pages == 0 && next == worklist.len() {
            break;
        }
        let can_issue = next < worklist.len()
            && held_pages < limits.held_pages
            && pending.pages.len() < limits.batch_pages;
        engine.reap(!can_issue, &mut events)?;
        for event in events.drain(..) {
            match event {
                Event::Read { token, buffer } => {
                    reads_in_flight -= 1;
                    debug_assert_eq!(buffer.len(), page_size);
                    pending.insert(worklist[token].page_number, Image::Read(buffer));
                }
                Event::Written { batch, calls } => {
                    held_pages -= batch.pages.len();
                    counts.pages_written += batch.pages.len() as u64;
                    counts.write_calls += calls;
                    batch.recycle(&mut spare);
                }
            }
        }
    }
    assert_eq!(reads_in_flight, 0);
    assert!(pending.pages.is_empty());
    assert_eq!(
        counts.pages_written,
        worklist.len() as u64,
        "every worklist page is written exactly once"
    );
    assert_eq!(counts.cache_hits + counts.wal_reads, counts.pages_written);
    Ok(counts)
}

/// The cached image of `item`, if the cache holds exactly its frame (cross-checked against the
/// WAL in debug builds).
fn cached_image(store: &PageStore, item: WorkItem, epoch: u64) -> Result<Option<Arc<[u8]>>> {
    let inner = &store.inner;
    let tag = FrameTag {
        frame_id: item.frame_id,
        epoch,
    };
    let Some(cached) = inner.cache.get_clean(item.page_number, tag) else {
        return Ok(None);
    };
    if cfg!(debug_assertions) {
        let mut from_wal = vec![0u8; cached.len()];
        read_frame_page(
            &*inner.wal_file,
            &inner.wal_path,
            item.frame_id,
            &mut from_wal,
        )?;
        assert!(
            from_wal[..] == cached[..],
            "page cache entry for page {} tagged {tag:?} differs from the WAL frame",
            item.page_number
        );
    }
    Ok(Some(cached))
}

/// The error for a read or write that moved `got` bytes (or failed with `-got`) of `want`.
pub(crate) fn check_transfer(
    got: i32,
    want: usize,
    what: impl FnOnce() -> String,
    path: &std::path::Path,
) -> Result<()> {
    if got >= 0 && got as usize == want {
        return Ok(());
    }
    let source = if got < 0 {
        std::io::Error::from_raw_os_error(-got)
    } else {
        std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("short transfer: {got} of {want} bytes"),
        )
    };
    Err(io_error(what(), path, source))
}

pub(crate) fn db_offset(page_number: u32, page_size: usize) -> u64 {
    debug_assert!(page_number >= 1);
    (page_number as u64 - 1) * page_size as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        held_pages: 1024,
        batch_pages: 512,
    };

    #[test]
    fn limits_bound_memory_for_every_page_size() {
        for shift in 9..=16 {
            let page_size = 1usize << shift;
            let limits = Limits::for_page_size(page_size);
            assert!(limits.held_pages * page_size <= MAX_HELD_BYTES.max(16 * page_size));
        }
        assert_eq!(Limits::for_page_size(4096), LIMITS);
    }

    #[test]
    fn the_heuristic_flushes_full_batches_long_runs_and_the_tail() {
        // Full.
        assert!(flush_now(512, 512, true, LIMITS));
        // Long runs: 64 pages in 8 runs of 8.
        assert!(flush_now(64, 8, true, LIMITS));
        // Scattered pages wait for more.
        assert!(!flush_now(64, 9, true, LIMITS));
        assert!(!flush_now(300, 290, true, LIMITS));
        // A few long runs are not enough alone.
        assert!(!flush_now(63, 1, true, LIMITS));
        // The tail goes out whatever it looks like.
        assert!(flush_now(1, 1, false, LIMITS));
        assert!(!flush_now(0, 0, false, LIMITS));
    }

    fn image(page: u32) -> Image {
        Image::Read(page.to_le_bytes().to_vec())
    }

    #[test]
    fn pending_counts_runs_as_pages_arrive_and_cuts_them() {
        let mut pending = Pending::default();
        for (page, runs) in [(5, 1), (7, 2), (6, 1), (1, 2), (3, 3), (2, 2), (4, 1)] {
            pending.insert(page, image(page));
            assert_eq!(pending.runs, runs, "after page {page}");
        }
        pending.insert(9, image(9));
        let batch = pending.take();
        assert_eq!(pending.runs, 0);
        let runs: Vec<(usize, usize)> = batch.runs.iter().map(|r| (r.first, r.len)).collect();
        assert_eq!(runs, [(0, 7), (7, 1)]);
        assert_eq!(batch.run_offset(batch.runs[1], 4096), 8 * 4096);
    }

    #[test]
    fn a_run_longer_than_iov_max_is_split() {
        let mut pending = Pending::default();
        for page in 1..=(MAX_RUN_PAGES as u32 + 10) {
            pending.insert(page, image(page));
        }
        assert_eq!(pending.runs, 1);
        let batch = pending.take();
        let lens: Vec<usize> = batch.runs.iter().map(|r| r.len).collect();
        assert_eq!(lens, [MAX_RUN_PAGES, 10]);
    }

    #[test]
    #[should_panic(expected = "entered a backfill batch twice")]
    fn a_page_cannot_enter_a_batch_twice() {
        let mut pending = Pending::default();
        pending.insert(3, image(3));
        pending.insert(3, image(3));
    }

    #[test]
    fn short_and_failed_transfers_are_errors() {
        let path = std::path::Path::new("db");
        assert!(check_transfer(4096, 4096, || "w".into(), path).is_ok());
        assert!(check_transfer(4095, 4096, || "w".into(), path).is_err());
        assert!(check_transfer(0, 4096, || "w".into(), path).is_err());
        assert!(check_transfer(-libc::EIO, 4096, || "w".into(), path).is_err());
    }
}
