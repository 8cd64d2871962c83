//! The io_uring engine of the fast backfill: WAL reads on a ring, in flight while the
//! checkpointer writes the database with `pwritev` from its own thread
//! ([`super::write_batch_now`]).
//!
//! Why the writes are not on the ring: buffered io_uring writes to ext4 are handed to io_uring's
//! worker threads, and on this project's 2-core machines every hand-off waited for a CPU. In a
//! quiet full run (docs/results/wal.md) io_uring `writev`s made the copy 1.5x slower than the
//! naive loop (backfill_speedup_warm 0.88); the same loop writing with `pwritev` reached 1.02.
//!
//! Invariants: a buffer (read buffer, header scratch, iovec array) handed to the kernel stays
//! owned by this engine, unmoved on the heap, until its completion is reaped; `in_flight` counts
//! the entries pushed and not yet reaped, and never reaches [`RING_ENTRIES`] (the caller's
//! held-page limit is below it and every read holds at least one page), so the submission queue
//! cannot overflow and the completion queue (twice as large) never drops a completion. If
//! waiting for completions fails, the buffers still in flight are leaked, never freed, and the
//! ring is dropped by [`with_engine`] so the next checkpoint starts afresh.

use super::{check_transfer, Engine, Event, ReadRun, WriteBatch};
use crate::error::{io_error, Result};
use crate::format::{frame_offset, FRAME_HEADER_BYTES};
use crate::store::PageStore;
use io_uring::{opcode, squeue, types, IoUring};
use std::path::Path;

/// Submission queue entries of the checkpointer's ring (the completion queue has twice this).
pub(crate) const RING_ENTRIES: u32 = 1024;

/// The checkpointer's cached io_uring (`Some(Err)` once it proved unavailable).
pub(crate) struct RingSlot(pub Option<std::result::Result<IoUring, ()>>);

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

/// Runs `f` with an io_uring engine; `None` when the files have no descriptor (simulated disk)
/// or io_uring is unavailable (EPERM under seccomp, ENOSYS, `kernel.io_uring_disabled`), which
/// is remembered so later checkpoints go straight to the pool.
pub(super) fn with_engine<R>(
    store: &PageStore,
    f: impl FnOnce(&mut UringEngine<'_>) -> Result<R>,
) -> Option<Result<R>> {
    let inner = &store.inner;
    let wal_fd = inner.wal_file.raw_fd()?;
    let mut slot = inner.ring.lock();
    let ring = slot
        .0
        .get_or_insert_with(|| IoUring::new(RING_ENTRIES).map_err(|_| ()));
    let Ok(ring) = ring else {
        return None;
    };
    let mut engine = UringEngine::new(store, ring, wal_fd);
    let result = f(&mut engine);
    let drained = engine.drain();
    drop(engine);
    if result.is_err() || !drained {
        // The ring may hold entries whose buffers were leaked: start afresh next time.
        slot.0 = None;
    }
    Some(result)
}

/// A read in flight: the run (buffers the kernel fills with pages), the frame headers between
/// them (read and ignored), and the iovecs pointing at both.
struct ReadSlot {
    run: ReadRun,
    _headers: Vec<u8>,
    _iovecs: Vec<libc::iovec>,
}

/// See the module doc.
pub(super) struct UringEngine<'a> {
    store: &'a PageStore,
    /// Batches written since the last reap, reported by it.
    written: Vec<Event>,
    ring: &'a mut IoUring,
    wal_fd: types::Fd,
    page_size: usize,
    wal_path: &'a Path,
    reads: Vec<Option<ReadSlot>>,
    free_reads: Vec<usize>,
    in_flight: usize,
    unsubmitted: usize,
    completed: Vec<(u64, i32)>,
}

impl<'a> UringEngine<'a> {
    /// An engine with nothing in flight, reading the WAL through `wal_fd`.
    fn new(store: &'a PageStore, ring: &'a mut IoUring, wal_fd: std::os::fd::RawFd) -> Self {
        let inner = &store.inner;
        UringEngine {
            store,
            written: Vec::new(),
            ring,
            wal_fd: types::Fd(wal_fd),
            page_size: inner.options.page_size_bytes as usize,
            wal_path: &inner.wal_path,
            reads: Vec::new(),
            free_reads: Vec::new(),
            in_flight: 0,
            unsubmitted: 0,
            completed: Vec::new(),
        }
    }

    fn push(&mut self, entry: &squeue::Entry) -> Result<()> {
        assert!(
            self.in_flight < RING_ENTRIES as usize,
            "more operations in flight than the ring holds"
        );
        loop {
            // SAFETY: every buffer the entry points at is owned by `self.reads` until its completion is reaped (or leaked by `drain`), see the module doc.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                break;
            }
            // The queue holds unsubmitted entries: hand them to the kernel to make room.
            self.submit()?;
        }
        self.in_flight += 1;
        self.unsubmitted += 1;
        Ok(())
    }

    /// Waits for every operation in flight; false if waiting failed and buffers were leaked.
    fn drain(&mut self) -> bool {
        while self.in_flight > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // The kernel may still write into these buffers: never free them.
                    std::mem::forget(std::mem::take(&mut self.reads));
                    self.in_flight = 0;
                    return false;
                }
            }
            for completion in self.ring.completion() {
                self.in_flight -= 1;
                self.reads[completion.user_data() as usize] = None;
            }
        }
        self.unsubmitted = 0;
        true
    }

    fn complete_read(&mut self, index: usize, result: i32, events: &mut Vec<Event>) -> Result<()> {
        let ReadSlot { run, .. } = self.reads[index]
            .take()
            .expect("a completion for a read in flight");
        self.free_reads.push(index);
        let frames = run.buffers.len();
        check_transfer(
            result,
            read_bytes(frames, self.page_size),
            || {
                format!(
                    "io_uring read of frames {}..={} of",
                    run.first_frame,
                    run.first_frame + frames as u64 - 1
                )
            },
            self.wal_path,
        )?;
        for (i, buffer) in run.buffers.into_iter().enumerate() {
            events.push(Event::Read {
                token: run.first_token + i,
                buffer,
            });
        }
        Ok(())
    }
}

impl Engine for UringEngine<'_> {
    fn read(&mut self, mut run: ReadRun) -> Result<u64> {
        let frames = run.buffers.len();
        assert!((1..=super::MAX_READ_RUN_FRAMES).contains(&frames));
        assert!(run.buffers.iter().all(|b| b.len() == self.page_size));
        let offset =
            frame_offset(run.first_frame, self.page_size as u32) + FRAME_HEADER_BYTES as u64;
        let index = self.free_reads.pop().unwrap_or_else(|| {
            self.reads.push(None);
            self.reads.len() - 1
        });
        // Page of the first frame, then (header, page) for each next frame: the frames are
        // contiguous in the WAL, so one read covers them; headers land in scratch space.
        let mut headers = vec![0u8; FRAME_HEADER_BYTES * (frames - 1)];
        let mut iovecs: Vec<libc::iovec> = Vec::with_capacity(2 * frames - 1);
        for (i, buffer) in run.buffers.iter_mut().enumerate() {
            if i > 0 {
                let header = &mut headers[(i - 1) * FRAME_HEADER_BYTES..i * FRAME_HEADER_BYTES];
                iovecs.push(libc::iovec {
                    iov_base: header.as_mut_ptr() as *mut libc::c_void,
                    iov_len: FRAME_HEADER_BYTES,
                });
            }
            iovecs.push(libc::iovec {
                iov_base: buffer.as_mut_ptr() as *mut libc::c_void,
                iov_len: self.page_size,
            });
        }
        let entry = opcode::Readv::new(self.wal_fd, iovecs.as_ptr(), iovecs.len() as u32)
            .offset(offset)
            .build()
            .user_data(index as u64);
        // The Vecs move into the slot; their heap contents, which the entry points at, do not.
        self.reads[index] = Some(ReadSlot {
            run,
            _headers: headers,
            _iovecs: iovecs,
        });
        self.push(&entry)?;
        Ok(1)
    }

    fn write(&mut self, batch: WriteBatch) -> Result<()> {
        let calls = super::write_batch_now(self.store, &batch)?;
        self.written.push(Event::Written { batch, calls });
        Ok(())
    }

    fn submit(&mut self) -> Result<()> {
        while self.unsubmitted > 0 {
            match self.ring.submit() {
                Ok(_) => self.unsubmitted = 0,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(io_error("io_uring submit for", self.wal_path, error)),
            }
        }
        Ok(())
    }

    fn reap(&mut self, block: bool, events: &mut Vec<Event>) -> Result<()> {
        events.append(&mut self.written);
        if block && events.is_empty() && self.in_flight > 0 {
            loop {
                match self.ring.submit_and_wait(1) {
                    Ok(_) => break,
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(error) => {
                        return Err(io_error("io_uring wait for", self.wal_path, error));
                    }
                }
            }
            self.unsubmitted = 0;
        }
        let mut completed = std::mem::take(&mut self.completed);
        completed.extend(
            self.ring
                .completion()
                .map(|entry| (entry.user_data(), entry.result())),
        );
        self.in_flight -= completed.len();
        // Handle every completion before failing, so no slot is left behind.
        let mut first_error = None;
        for &(data, result) in &completed {
            if let Err(error) = self.complete_read(data as usize, result, events) {
                first_error.get_or_insert(error);
            }
        }
        completed.clear();
        self.completed = completed;
        first_error.map_or(Ok(()), Err)
    }
}

/// Bytes one read of `frames` consecutive frames' pages moves (the headers between them too).
fn read_bytes(frames: usize, page_size: usize) -> usize {
    frames * page_size + (frames - 1) * FRAME_HEADER_BYTES
}

impl Drop for UringEngine<'_> {
    fn drop(&mut self) {
        self.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Options, PageStore};

    fn engine<'a>(ring: &'a mut IoUring, store: &'a PageStore) -> UringEngine<'a> {
        UringEngine::new(store, ring, store.inner.wal_file.raw_fd().unwrap())
    }

    /// A run of frames that ends past the WAL's end is a short read: an error, no page reported.
    #[test]
    fn a_short_vectored_read_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = PageStore::open(dir.path().join("db"), Options::default()).unwrap();
        let mut txn = store.begin_write().unwrap();
        for page in 1..=3 {
            txn.write_page(page, &[page as u8; 4096]).unwrap();
        }
        txn.commit().unwrap();
        let mut ring = match IoUring::new(RING_ENTRIES) {
            Ok(ring) => ring,
            Err(error) => {
                // Fails unless PREFIXKV_TEST_ALLOW_SKIP lists io_uring.
                prefixkv_testkit::skip::unavailable("io_uring", &error.to_string());
                return;
            }
        };
        let mut engine = engine(&mut ring, &store);
        let mut events = Vec::new();
        // Frames 1..=3 exist: one read, three pages, each with its own image.
        let run = |frames: usize| ReadRun {
            first_token: 10,
            first_frame: 1,
            buffers: vec![vec![0u8; 4096]; frames],
        };
        assert_eq!(engine.read(run(3)).unwrap(), 1);
        while engine.in_flight > 0 {
            engine.reap(true, &mut events).unwrap();
        }
        assert_eq!(events.len(), 3);
        for (i, event) in events.drain(..).enumerate() {
            let Event::Read { token, buffer } = event else {
                panic!("a read event expected")
            };
            assert_eq!(token, 10 + i);
            assert!(buffer.iter().all(|&b| b == i as u8 + 1), "frame {}", i + 1);
        }
        // Frames 1..=4: the fourth is past the end.
        engine.read(run(4)).unwrap();
        let mut failed = false;
        while engine.in_flight > 0 {
            failed |= engine.reap(true, &mut events).is_err();
        }
        assert!(failed, "a short read must fail");
        assert!(events.is_empty());
    }
}
