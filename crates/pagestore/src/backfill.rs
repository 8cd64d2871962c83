//! The copy step of a checkpoint: naive (the Turso document's "before") and fast.
//!
//! Fast backfill, after Turso's: the worklist (newest frame per page, in **frame order**) is cut
//! into batches of `BATCH_PAGES`. For each batch, pages whose cache entry is clean and tagged
//! exactly `(frame, epoch)` are reused; the others are read from the WAL, in frame order, through
//! io_uring (all reads of a batch in flight at once), or a small thread pool when io_uring is
//! unavailable. The next batch's reads are submitted before the current batch is written, so
//! reads and writes overlap. A batch is a map kept **sorted by page**, written with one
//! `pwritev` per run of consecutive pages.
//!
//! In debug builds every reused cache page is cross-checked against a WAL read.
//!
//! Invariant: every page of the worklist is written exactly once, with the image of exactly the
//! worklist's frame; any error aborts the copy before the database fsync, so nothing is published.

use crate::cache::FrameTag;
use crate::error::{io_error, Error, Result};
use crate::format::{frame_offset, FRAME_HEADER_BYTES};
use crate::store::{BackfillStrategy, PageStore};
use crate::wal::read_frame_page;
use std::collections::BTreeMap;
use std::io::IoSlice;
use std::sync::Arc;

/// Pages per write batch (Turso's `CKPT_BATCH_PAGES`); also bounds iovecs per `pwritev`
/// below `IOV_MAX` (1024).
pub const BATCH_PAGES: usize = 512;

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
    pub write_calls: u64,
}

pub(crate) fn run(
    store: &PageStore,
    strategy: BackfillStrategy,
    worklist: &[WorkItem],
    epoch: u64,
) -> Result<BackfillCounts> {
    match strategy {
        BackfillStrategy::Naive => naive(store, worklist),
        // A simulated WAL has no descriptor for io_uring: the thread pool reads it.
        BackfillStrategy::Fast if store.inner.wal_file.raw_fd().is_none() => {
            fast(store, worklist, epoch, &mut Reader::ThreadPool)
        }
        BackfillStrategy::Fast => {
            let mut slot = store.inner.ring.lock();
            // EPERM (seccomp), ENOSYS, or `kernel.io_uring_disabled`: fall back for good.
            let ring = slot
                .0
                .get_or_insert_with(|| io_uring::IoUring::new(BATCH_PAGES as u32).map_err(|_| ()));
            let result = match ring {
                Ok(ring) => fast(store, worklist, epoch, &mut Reader::Uring(ring)),
                Err(()) => return fast(store, worklist, epoch, &mut Reader::ThreadPool),
            };
            if result.is_err() {
                // After a failure the ring may still hold entries or completions whose buffers
                // were leaked by `abandon`: drop it, so the next checkpoint starts afresh.
                slot.0 = None;
            }
            result
        }
        BackfillStrategy::FastThreadPool => fast(store, worklist, epoch, &mut Reader::ThreadPool),
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
        counts.write_calls += 1;
        counts.pages_written += 1;
    }
    Ok(counts)
}

/// The checkpointer's cached io_uring (`Some(Err)` once it proved unavailable).
pub(crate) struct RingSlot(pub Option<std::result::Result<io_uring::IoUring, ()>>);

impl std::fmt::Debug for RingSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.0 {
            None => "not created",
            Some(Ok(_)) => "io_uring",
            Some(Err(())) => "unavailable (thread pool)",
        };
        f.write_str(state)
    }
}

enum Reader<'a> {
    Uring(&'a mut io_uring::IoUring),
    ThreadPool,
}

enum Image {
    Cached(Arc<[u8]>),
    Read(Vec<u8>),
}

impl Image {
    fn bytes(&self) -> &[u8] {
        match self {
            Image::Cached(bytes) => bytes,
            Image::Read(bytes) => bytes,
        }
    }
}

/// One batch: resolved images sorted by page, plus reads still outstanding.
struct Batch {
    pages: BTreeMap<u32, Image>,
    /// (page, frame, buffer) of reads; buffers stay put while io_uring fills them.
    reads: Vec<(u32, u64, Vec<u8>)>,
    /// Reads not yet pushed to the submission queue (from index `pushed`).
    pushed: usize,
    completed: usize,
}

fn fast(
    store: &PageStore,
    worklist: &[WorkItem],
    epoch: u64,
    reader: &mut Reader<'_>,
) -> Result<BackfillCounts> {
    let mut counts = BackfillCounts::default();
    let mut chunks = worklist.chunks(BATCH_PAGES);
    let Some(first) = chunks.next() else {
        return Ok(counts);
    };
    let mut current = start_batch(store, first, epoch, &mut counts, reader)?;
    loop {
        finish_reads(store, &mut current, reader)?;
        let next = match chunks.next() {
            Some(chunk) => Some(start_batch(store, chunk, epoch, &mut counts, reader)?),
            None => None,
        };
        // The next batch's reads are in flight while this one is written.
        let written = flush(store, &current.pages);
        let (pages, calls) = match written {
            Ok(counts) => counts,
            Err(error) => {
                if let Some(mut next) = next {
                    // Buffers must outlive the kernel's use of them: drain before unwinding.
                    let _ = finish_reads(store, &mut next, reader);
                }
                return Err(error);
            }
        };
        counts.pages_written += pages;
        counts.write_calls += calls;
        match next {
            Some(next) => current = next,
            None => return Ok(counts),
        }
    }
}

fn start_batch(
    store: &PageStore,
    chunk: &[WorkItem],
    epoch: u64,
    counts: &mut BackfillCounts,
    reader: &mut Reader<'_>,
) -> Result<Batch> {
    let inner = &store.inner;
    let page_size = inner.options.page_size_bytes as usize;
    let mut batch = Batch {
        pages: BTreeMap::new(),
        reads: Vec::new(),
        pushed: 0,
        completed: 0,
    };
    for item in chunk {
        let tag = FrameTag {
            frame_id: item.frame_id,
            epoch,
        };
        if let Some(cached) = inner.cache.get_clean(item.page_number, tag) {
            if cfg!(debug_assertions) {
                let mut from_wal = vec![0u8; page_size];
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
            counts.cache_hits += 1;
            batch.pages.insert(item.page_number, Image::Cached(cached));
        } else {
            counts.wal_reads += 1;
            batch
                .reads
                .push((item.page_number, item.frame_id, vec![0u8; page_size]));
        }
    }
    if let Reader::Uring(ring) = reader {
        push_reads(store, ring, &mut batch)?;
        if let Err(error) = ring.submit() {
            abandon(&mut batch);
            return Err(io_error(
                "io_uring submit (reads) for",
                &inner.wal_path,
                error,
            ));
        }
    }
    Ok(batch)
}

/// Leaks the batch's read buffers: after a failed io_uring call the kernel may still write into
/// them, so they must never be freed. A failure path only; the ring is dropped afterwards.
fn abandon(batch: &mut Batch) {
    std::mem::forget(std::mem::take(&mut batch.reads));
    batch.pushed = 0;
    batch.completed = 0;
}

/// Pushes as many of the batch's reads as the submission queue takes.
fn push_reads(store: &PageStore, ring: &mut io_uring::IoUring, batch: &mut Batch) -> Result<()> {
    let page_size = store.inner.options.page_size_bytes;
    let fd = io_uring::types::Fd(
        store
            .inner
            .wal_file
            .raw_fd()
            .expect("io_uring reads are chosen only for files with a descriptor"),
    );
    while batch.pushed < batch.reads.len() {
        let index = batch.pushed;
        let (_, frame_id, buffer) = &mut batch.reads[index];
        let offset = frame_offset(*frame_id, page_size) + FRAME_HEADER_BYTES as u64;
        let entry = io_uring::opcode::Read::new(fd, buffer.as_mut_ptr(), page_size)
            .offset(offset)
            .build()
            .user_data(index as u64);
        // SAFETY: the buffer lives in `batch.reads`, which is neither dropped nor resized until
        // every pushed read has completed (`finish_reads` drains them, also on error paths).
        if unsafe { ring.submission().push(&entry) }.is_err() {
            break;
        }
        batch.pushed += 1;
    }
    Ok(())
}

fn finish_reads(store: &PageStore, batch: &mut Batch, reader: &mut Reader<'_>) -> Result<()> {
    let inner = &store.inner;
    let page_size = inner.options.page_size_bytes as usize;
    match reader {
        Reader::Uring(ring) => {
            let mut first_error: Option<Error> = None;
            while batch.completed < batch.pushed || batch.pushed < batch.reads.len() {
                if first_error.is_none() {
                    push_reads(store, ring, batch)?;
                }
                let outstanding = batch.pushed - batch.completed;
                if outstanding == 0 {
                    break;
                }
                if let Err(error) = ring.submit_and_wait(1) {
                    abandon(batch);
                    return Err(io_error(
                        "io_uring wait (reads) for",
                        &inner.wal_path,
                        error,
                    ));
                }
                for completion in ring.completion() {
                    batch.completed += 1;
                    let index = completion.user_data() as usize;
                    let (page_number, frame_id, _) = &batch.reads[index];
                    let result = completion.result();
                    if result != page_size as i32 && first_error.is_none() {
                        let source = if result < 0 {
                            std::io::Error::from_raw_os_error(-result)
                        } else {
                            std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                format!("short read of {result} bytes"),
                            )
                        };
                        first_error = Some(io_error(
                            format!("reading frame {frame_id} (page {page_number}) of"),
                            &inner.wal_path,
                            source,
                        ));
                    }
                }
                if first_error.is_some() {
                    // Stop pushing; drain what is in flight, then fail.
                    batch.reads.truncate(batch.pushed);
                }
            }
            if let Some(error) = first_error {
                return Err(error);
            }
        }
        Reader::ThreadPool => {
            const THREADS: usize = 2;
            let per_thread = batch.reads.len().div_ceil(THREADS).max(1);
            let results: Vec<Result<()>> = std::thread::scope(|scope| {
                let handles: Vec<_> = batch
                    .reads
                    .chunks_mut(per_thread)
                    .map(|reads| {
                        scope.spawn(move || {
                            for (_, frame_id, buffer) in reads.iter_mut() {
                                read_frame_page(
                                    &*inner.wal_file,
                                    &inner.wal_path,
                                    *frame_id,
                                    buffer,
                                )?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("backfill reader thread panicked"))
                    .collect()
            });
            results.into_iter().collect::<Result<Vec<()>>>()?;
            batch.pushed = batch.reads.len();
            batch.completed = batch.reads.len();
        }
    }
    debug_assert_eq!(batch.page_size_check(page_size), Some(()));
    for (page_number, _, buffer) in batch.reads.drain(..) {
        batch.pages.insert(page_number, Image::Read(buffer));
    }
    Ok(())
}

impl Batch {
    fn page_size_check(&self, page_size: usize) -> Option<()> {
        self.reads
            .iter()
            .all(|(_, _, b)| b.len() == page_size)
            .then_some(())
    }
}

/// Writes a page-sorted batch with one `pwritev` per run of consecutive pages; returns
/// (pages written, calls issued).
fn flush(store: &PageStore, pages: &BTreeMap<u32, Image>) -> Result<(u64, u64)> {
    let inner = &store.inner;
    let page_size = inner.options.page_size_bytes as usize;
    let mut calls = 0u64;
    let mut run: Vec<IoSlice<'_>> = Vec::with_capacity(pages.len());
    let mut run_start = 0u32;
    let mut previous: Option<u32> = None;
    let mut write_run = |run: &mut Vec<IoSlice<'_>>, start: u32| -> Result<()> {
        let mut offset = db_offset(start, page_size);
        let mut slices: &mut [IoSlice<'_>] = run;
        while !slices.is_empty() {
            crate::fail_point::step("backfill:write");
            let written = inner.db_file.write_at(slices, offset).map_err(|e| {
                io_error(
                    format!("pwritev of pages from {start} (offset {offset}) to"),
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
        run.clear();
        Ok(())
    };
    for (&page_number, image) in pages {
        if previous.is_some_and(|p| p + 1 != page_number) {
            write_run(&mut run, run_start)?;
        }
        if run.is_empty() {
            run_start = page_number;
        }
        run.push(IoSlice::new(image.bytes()));
        previous = Some(page_number);
    }
    if !run.is_empty() {
        write_run(&mut run, run_start)?;
    }
    Ok((pages.len() as u64, calls))
}

fn db_offset(page_number: u32, page_size: usize) -> u64 {
    debug_assert!(page_number >= 1);
    (page_number as u64 - 1) * page_size as u64
}
