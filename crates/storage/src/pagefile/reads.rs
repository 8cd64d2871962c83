//! Batched reads of the page file: many ranges in flight for one thread (the I/O layer under the
//! engine's pending path, issue 33). A [`PageReads`] is owned by one thread (`Send`, not `Sync`):
//! [`submit`](PageReads::submit) validates a range and starts its read,
//! [`complete`](PageReads::complete) hands finished reads to the caller, in the caller's loop.
//! [`submit_verified_page`](PageReads::submit_verified_page) reads a page's whole valid bytes and
//! checks its CRC at completion (faulting a cold page in).
//!
//! Two backends, same contract:
//! - **io_uring** (real disk): one ring per reader; each range is one `Read` on the segment's
//!   read handle, started at `submit` and reaped at `complete`. A short read is continued from
//!   where it stopped; a read that meets the end of the file is `DataMissing` (as
//!   [`PageFile::read`]); `EINTR`/`EAGAIN` completions are resubmitted.
//! - **sync** (no file descriptor, as on `SimDisk`, or io_uring unavailable or not wanted): the
//!   read is done at `submit` and its completion queued, so the caller's loop is the same.
//!
//! Both backends read direct when the segment's read handle is ([`PageFile::direct_reads`]):
//! the request is the aligned range around the read (aligned down at the start, up at the
//! end), into the slot's aligned buffer, and the requested bytes are handed out from inside
//! it; a short direct read continues from the aligned block holding its end, and one the file
//! system refuses as misaligned (`EINVAL`) turns the handle buffered and starts over buffered
//! (the rules in `pagefile/direct.rs`). Which way a read goes is decided per read at `submit`.
//!
//! Invariants:
//! 1. A buffer is never reused or freed while the kernel may write into it: a slot (buffer plus
//!    its read's state) returns to the free list only after its last completion was reaped and
//!    the caller's callback returned. Buffers are boxed slices allocated once (lazily, at most
//!    `depth`): growing the pool never moves a buffer. Each holds `max_read_bytes`, or, with
//!    direct I/O asked for, the largest aligned range around such a read (`align_up(
//!    max_read_bytes)` plus one block, aligned: at most three blocks more than
//!    `max_read_bytes` with the aligning slack), so a direct read never needs another buffer.
//! 2. The kernel's view of a slot is in flight iff `in_kernel` counts it; `Drop` reaps until
//!    `in_kernel` is zero before the buffers go. If the ring itself fails while reads are in
//!    kernel, the buffers are leaked rather than freed (memory the kernel might still write).
//! 3. Every in-flight read holds an `Arc` of its data file's read handle (the one it was
//!    submitted on, direct or buffered), so the descriptor stays open until its completion is
//!    reaped, even if [`PageFile::remove_before`] deleted the segment meanwhile: the read then
//!    returns the bytes the file held (an unlinked file keeps its data while open), which are
//!    the page's bytes as they were; the caller decides whether it still wants them.
//! 4. At most `depth` reads are in flight, and the ring's queues hold at least `depth` entries:
//!    a submission never finds the queue full and completions never overflow.
//!
//! Like [`PageFile::read`], reads check bounds against the page's newest entry at submit time,
//! not the CRC: callers verify a page when they fault it in whole.

use super::direct::{align_down, align_up, ReadHandle};
use super::{read_error, PageFile, PageFileError, ReadTarget, SumsEntry};
use crate::io::DIRECT_IO_ALIGNMENT;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::marker::PhantomData;
use std::sync::Arc;

/// Largest `depth` (reads in flight) a [`PageReads`] accepts.
pub const MAX_READ_DEPTH: u32 = 4096;
/// Largest buffer memory (`depth * max_read_bytes`) a [`PageReads`] accepts. With direct I/O
/// asked for, each buffer also has room for the aligned range around its read: at most three
/// 4 KiB blocks more per slot (48 MiB more at [`MAX_READ_DEPTH`]).
pub const MAX_READ_BUFFER_BYTES: u64 = 1 << 30;

/// Which backend a [`PageReads`] should use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadBackendChoice {
    /// io_uring when the page file is on a disk with file descriptors and a ring can be set up;
    /// the synchronous fallback otherwise (logged once per process).
    #[default]
    Auto,
    /// io_uring, or an error from the constructor.
    IoUring,
    /// The synchronous fallback even where io_uring works (tests compare the two).
    Sync,
}

/// The backend a [`PageReads`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBackend {
    /// `Read` operations on an io_uring ring owned by the reader.
    IoUring,
    /// Reads done at `submit` with the disk trait's positioned read, completions queued.
    Sync,
}

/// An error of [`PageReads`]. Errors of single reads (I/O errors, `DataMissing`) are handed to
/// the caller's callback by [`PageReads::complete`] instead.
#[derive(Debug, thiserror::Error)]
pub enum ReadsError {
    /// `depth` reads are in flight: complete some, then submit again.
    #[error("{depth} reads are in flight (the reader's depth): complete some before submitting")]
    Full {
        /// The reader's depth.
        depth: u32,
    },
    /// A read longer than the reader's buffers, or empty.
    #[error("read of {len} bytes: reads must be 1..={max_read_bytes} bytes (the reader's max_read_bytes)")]
    BadLength {
        /// The requested length.
        len: u32,
        /// The reader's largest read.
        max_read_bytes: u32,
    },
    /// The range cannot be read: `NotWritten`, `OutOfRange` (checked at submit).
    #[error(transparent)]
    PageFile(#[from] PageFileError),
    /// `depth` or `max_read_bytes` out of range.
    #[error("invalid page reader configuration: {0}")]
    InvalidConfig(String),
    /// io_uring was required ([`ReadBackendChoice::IoUring`]) but cannot be used.
    #[error("io_uring is unavailable for page reads: {0}")]
    IoUringUnavailable(String),
    /// The ring failed (`io_uring_enter` returned an error other than `EINTR`/`EAGAIN`/`EBUSY`).
    /// Reads in flight stay in flight (from `submit`, the read was queued and counts as in
    /// flight); the reader may be dropped (it waits for them, or leaks their buffers).
    #[error("io_uring failed during page reads: {0}")]
    Ring(io::Error),
}

/// One read's state; lives in the slot of the buffer it reads into.
///
/// A buffered read fills the buffer's first `len` bytes from `file_offset`. A direct read asks
/// for the aligned range around it (`read_start` aligned down, `span` aligned up) and the
/// requested bytes are at `skip` in the buffer; a short read is continued from the aligned block
/// holding `done` ([`super::direct`], invariants 1 and 2).
#[derive(Debug)]
struct Slot {
    token: u64,
    page: u64,
    entry: SumsEntry,
    /// Keeps the data file open until the read's last completion is reaped (invariant 3).
    reader: Arc<ReadHandle>,
    /// Absolute offset in the data file of the first requested byte.
    file_offset: u64,
    /// Requested bytes.
    len: u32,
    /// Whether the read goes out with `O_DIRECT` (aligned requests only).
    direct: bool,
    /// File offset of the buffer's first byte: `file_offset`, aligned down when direct.
    read_start: u64,
    /// Where the requested bytes start in the buffer (`file_offset - read_start`).
    skip: u32,
    /// Bytes asked of the kernel from `read_start`: `len`, or the aligned range when direct.
    span: u32,
    /// Bytes of the buffer filled so far (a short read continues from here).
    done: u32,
    /// `None` while the kernel owns the buffer; the outcome once the read is finished.
    outcome: Option<Result<(), PageFileError>>,
    /// A whole-page read: check the bytes against the entry's CRC before handing them out.
    verify: bool,
}

impl Slot {
    /// A read of `len` bytes at `target`, not started yet; direct if its handle is now.
    fn new(token: u64, page: u64, target: ReadTarget, len: u32, verify: bool) -> Slot {
        let mut slot = Slot {
            token,
            page,
            entry: target.entry,
            direct: target.reader.direct(),
            reader: target.reader,
            file_offset: target.file_offset,
            len,
            read_start: target.file_offset,
            skip: 0,
            span: len,
            done: 0,
            outcome: None,
            verify,
        };
        if slot.direct {
            slot.read_start = align_down(slot.file_offset);
            slot.skip = (slot.file_offset - slot.read_start) as u32;
            slot.span = (align_up(slot.file_offset + u64::from(len)) - slot.read_start) as u32;
        }
        slot
    }

    /// Bytes of the buffer that must be filled: through the requested range's end.
    fn need(&self) -> u32 {
        self.skip + self.len
    }

    /// Where the next request starts in the buffer: at `done`, or (direct) at the aligned
    /// block holding it, as the kernel wants aligned offsets.
    fn from(&self) -> u32 {
        if self.direct {
            align_down(u64::from(self.done)) as u32
        } else {
            self.done
        }
    }

    /// The requested bytes in the slot's buffer.
    fn bytes<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.skip as usize..self.need() as usize]
    }

    /// Takes the result of the request that started at [`from`](Self::from): `None` while more
    /// must be read (a short, interrupted or refused request: the caller issues the next one),
    /// the read's outcome once it is finished. A request that ends no further than `done` met
    /// the end of the file (`DataMissing`). A direct request the file system refuses as
    /// misaligned turns the handle buffered and starts the read again, buffered.
    fn advance(&mut self, result: io::Result<usize>) -> Option<Result<(), PageFileError>> {
        let error = match result {
            Ok(n) => {
                let end = u64::from(self.from()) + n as u64;
                if end <= u64::from(self.done) {
                    io::Error::from(io::ErrorKind::UnexpectedEof)
                } else {
                    self.done = end.min(u64::from(self.span)) as u32;
                    return (self.done >= self.need()).then_some(Ok(()));
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => return None,
            Err(error) if self.direct && error.kind() == io::ErrorKind::InvalidInput => {
                match self.reader.refused(&error) {
                    Ok(()) => {
                        self.direct = false;
                        (self.read_start, self.skip, self.span) = (self.file_offset, 0, self.len);
                        self.done = 0;
                        return None;
                    }
                    Err(error) => error,
                }
            }
            Err(error) => error,
        };
        Some(Err(read_error(
            self.page,
            &self.entry,
            self.reader.file().path(),
            error,
        )))
    }
}

/// A slot's buffer: boxed once and never moved or freed while the kernel may write it
/// (invariant 1); its usable part starts at `base`, aligned to [`DIRECT_IO_ALIGNMENT`].
struct Buffer {
    bytes: Box<[u8]>,
    base: usize,
    len: usize,
}

impl Buffer {
    /// `len` usable bytes, aligned if `aligned`.
    fn new(len: usize, aligned: bool) -> Buffer {
        let slack = if aligned { DIRECT_IO_ALIGNMENT } else { 0 };
        let bytes = vec![0u8; len + slack].into_boxed_slice();
        let base = if aligned {
            bytes.as_ptr().align_offset(DIRECT_IO_ALIGNMENT)
        } else {
            0
        };
        Buffer { bytes, base, len }
    }

    fn view(&mut self) -> &mut [u8] {
        &mut self.bytes[self.base..self.base + self.len]
    }
}

enum Engine {
    // Boxed: the ring is a few hundred bytes.
    IoUring(Box<io_uring::IoUring>),
    Sync,
}

/// Many page-file reads in flight for one thread (module docs). Not `Sync`: one thread submits
/// and completes; moving it to another thread between calls is fine.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<prefixkv_storage::pagefile::PageReads>();
/// ```
pub struct PageReads {
    file: Arc<PageFile>,
    depth: u32,
    max_read_bytes: u32,
    engine: Engine,
    fallback_reason: Option<String>,
    /// The pool: slot i's buffer; grows lazily up to `depth`, each `buffer_bytes`.
    buffers: Vec<Buffer>,
    /// Usable bytes of each buffer: `max_read_bytes`, or with direct I/O asked for the largest
    /// aligned range around such a read (`align_up(max_read_bytes)` plus a block), aligned.
    buffer_bytes: usize,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Finished reads (in completion order), not yet handed to the caller.
    ready: VecDeque<usize>,
    /// Occupied slots (submitted, not yet handed to the caller).
    in_flight: usize,
    /// Slots whose buffer the kernel may write (a `Read` submitted, its completion not reaped).
    in_kernel: usize,
    /// Completions copied out of the ring (reused; at most `depth` at a time).
    reaped: Vec<(u64, i32)>,
    _not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for PageReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageReads")
            .field("dir", &self.file.dir())
            .field("backend", &self.backend())
            .field("depth", &self.depth)
            .field("max_read_bytes", &self.max_read_bytes)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

static FALLBACK_LOGGED: std::sync::Once = std::sync::Once::new();

impl PageReads {
    /// A reader of `file` with at most `depth` reads in flight (`1..=`[`MAX_READ_DEPTH`]), each
    /// at most `max_read_bytes` (`1..=page_bytes`; `depth * max_read_bytes` at most
    /// [`MAX_READ_BUFFER_BYTES`]). Picks io_uring where it works ([`ReadBackendChoice::Auto`]).
    pub fn new(file: Arc<PageFile>, depth: u32, max_read_bytes: u32) -> Result<Self, ReadsError> {
        Self::with_backend(file, depth, max_read_bytes, ReadBackendChoice::Auto)
    }

    /// Like [`new`](Self::new) with an explicit backend choice.
    pub fn with_backend(
        file: Arc<PageFile>,
        depth: u32,
        max_read_bytes: u32,
        choice: ReadBackendChoice,
    ) -> Result<Self, ReadsError> {
        let page_bytes = file.config().page_bytes;
        if !(1..=MAX_READ_DEPTH).contains(&depth) {
            return Err(ReadsError::InvalidConfig(format!(
                "depth {depth} must be in 1..={MAX_READ_DEPTH}"
            )));
        }
        if !(1..=page_bytes).contains(&max_read_bytes) {
            return Err(ReadsError::InvalidConfig(format!(
                "max_read_bytes {max_read_bytes} must be in 1..={page_bytes} (the page size)"
            )));
        }
        let memory = u64::from(depth) * u64::from(max_read_bytes);
        if memory > MAX_READ_BUFFER_BYTES {
            return Err(ReadsError::InvalidConfig(format!(
                "depth {depth} * max_read_bytes {max_read_bytes} = {memory} bytes of buffers, \
                 more than {MAX_READ_BUFFER_BYTES}"
            )));
        }
        let ring = match choice {
            ReadBackendChoice::Sync => Err("the synchronous backend was asked for".to_string()),
            _ if file.disk.kind() != "real" => Err(format!(
                "the {} disk has no file descriptors",
                file.disk.kind()
            )),
            _ => setup_ring(depth),
        };
        let (engine, fallback_reason) = match (ring, choice) {
            (Ok(ring), _) => (Engine::IoUring(Box::new(ring)), None),
            (Err(why), ReadBackendChoice::IoUring) => {
                return Err(ReadsError::IoUringUnavailable(why))
            }
            (Err(why), choice) => {
                if choice == ReadBackendChoice::Auto && file.disk.kind() == "real" {
                    FALLBACK_LOGGED.call_once(|| {
                        tracing::warn!(reason = %why, "page file reads: io_uring unavailable, \
                            reading synchronously at submit");
                    });
                }
                (Engine::Sync, Some(why))
            }
        };
        // With direct I/O asked for, any read may go direct (its handle decides at submit).
        let buffer_bytes = if file.config().direct_io {
            align_up(u64::from(max_read_bytes)) as usize + DIRECT_IO_ALIGNMENT
        } else {
            max_read_bytes as usize
        };
        Ok(PageReads {
            file,
            depth,
            max_read_bytes,
            buffer_bytes,
            engine,
            fallback_reason,
            buffers: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            ready: VecDeque::new(),
            in_flight: 0,
            in_kernel: 0,
            reaped: Vec::new(),
            _not_sync: PhantomData,
        })
    }

    /// The backend in use.
    pub fn backend(&self) -> ReadBackend {
        match self.engine {
            Engine::IoUring(_) => ReadBackend::IoUring,
            Engine::Sync => ReadBackend::Sync,
        }
    }

    /// Why the synchronous backend is used (`None` with io_uring).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// The most reads in flight at once.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The longest read.
    pub fn max_read_bytes(&self) -> u32 {
        self.max_read_bytes
    }

    /// Reads submitted and not yet handed to a [`complete`](Self::complete) callback.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Starts a read of `len` bytes of page `page` from `offset`; its completion carries `token`
    /// (opaque; duplicates allowed). Errors at once for a bad length (`BadLength`), a full
    /// reader (`Full`: complete some first), a page without an entry (`NotWritten`) or a range
    /// past its valid bytes (`OutOfRange`); nothing is in flight then. I/O errors and a file
    /// that ends early (`DataMissing`) come with the completion.
    pub fn submit(
        &mut self,
        page: u64,
        offset: u32,
        len: u32,
        token: u64,
    ) -> Result<(), ReadsError> {
        if len == 0 || len > self.max_read_bytes {
            return Err(ReadsError::BadLength {
                len,
                max_read_bytes: self.max_read_bytes,
            });
        }
        if self.in_flight >= self.depth as usize {
            return Err(ReadsError::Full { depth: self.depth });
        }
        let target = self.file.locate_range(page, offset, u64::from(len))?;
        self.start(Slot::new(token, page, target, len, false))
    }

    /// Starts a read of page `page`'s whole valid bytes (its newest entry's), checked against
    /// the entry's CRC at completion (`Corrupt` on a mismatch), like
    /// [`PageFile::read_verified_page`]: for faulting a cold page in whole. The page's valid
    /// bytes must fit `max_read_bytes` (`BadLength` otherwise; a reader whose `max_read_bytes`
    /// is `page_bytes` fits every page). A page with no valid bytes completes with an empty
    /// slice. Other errors as [`submit`](Self::submit).
    pub fn submit_verified_page(&mut self, page: u64, token: u64) -> Result<(), ReadsError> {
        if self.in_flight >= self.depth as usize {
            return Err(ReadsError::Full { depth: self.depth });
        }
        let target = self.file.locate_range(page, 0, 0)?;
        let len = target.entry.valid_bytes;
        if len > self.max_read_bytes {
            return Err(ReadsError::BadLength {
                len,
                max_read_bytes: self.max_read_bytes,
            });
        }
        self.start(Slot::new(token, page, target, len, true))
    }

    /// Puts a validated read (`in_flight < depth` checked) into a free slot and starts it.
    fn start(&mut self, mut slot: Slot) -> Result<(), ReadsError> {
        // A direct read's aligned range fits (`buffer_bytes`), and its handle is direct only
        // if direct I/O was asked for (so the buffer is aligned).
        assert!(
            slot.span as usize <= self.buffer_bytes,
            "a read's range fits its buffer"
        );
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                // Every slot is occupied, and fewer than `depth` exist (`in_flight < depth`).
                let aligned = self.file.config().direct_io;
                self.buffers.push(Buffer::new(self.buffer_bytes, aligned));
                self.slots.push(None);
                self.buffers.len() - 1
            }
        };
        let fd = slot.reader.file().raw_fd();
        match (&mut self.engine, fd) {
            // Nothing to read (a page with no valid bytes): finished already.
            _ if slot.len == 0 => {
                slot.outcome = Some(Ok(()));
                self.slots[index] = Some(slot);
                self.ready.push_back(index);
                self.in_flight += 1;
            }
            (Engine::IoUring(ring), Some(fd)) => {
                // SAFETY: the buffer is this slot's, owned by `self` and not touched until the
                // completion is reaped (invariants 1, 2); `slot.reader` keeps `fd` open.
                if let Err(error) =
                    unsafe { push_read(ring, fd, self.buffers[index].view(), &slot, index) }
                {
                    self.free.push(index);
                    return Err(ReadsError::Ring(error));
                }
                self.slots[index] = Some(slot);
                self.in_kernel += 1;
                self.in_flight += 1;
                // Start it now (the pending path wants the read under way while it serves
                // other work). A transient refusal leaves it queued for the next call.
                flush(ring).map_err(ReadsError::Ring)?;
            }
            _ => {
                let buf = self.buffers[index].view();
                // Terminates: each request either makes progress, finishes, or (once) turns
                // the read buffered (`Slot::advance`).
                let outcome = loop {
                    let from = slot.from();
                    let result = slot.reader.file().read_at(
                        &mut buf[from as usize..slot.span as usize],
                        slot.read_start + u64::from(from),
                    );
                    if let Some(outcome) = slot.advance(result) {
                        break outcome;
                    }
                };
                slot.outcome = Some(outcome);
                self.slots[index] = Some(slot);
                self.ready.push_back(index);
                self.in_flight += 1;
            }
        }
        Ok(())
    }

    /// Hands every finished read to `each` (its token, then its bytes or its error: an I/O
    /// error, or `DataMissing` when the file ends inside the range) and returns how many. With
    /// `wait`, blocks until at least one finishes if any is in flight; with nothing in flight
    /// it returns 0 at once. A buffer goes back to the pool after `each` returns. An `Err` is a
    /// failure of the ring itself; reads in flight stay in flight.
    pub fn complete(
        &mut self,
        wait: bool,
        mut each: impl FnMut(u64, Result<&[u8], PageFileError>),
    ) -> Result<usize, ReadsError> {
        let mut handed = 0;
        let mut block = false;
        loop {
            self.reap(block)?;
            while let Some(index) = self.ready.pop_front() {
                let mut slot = self.slots[index].take().expect("a ready slot holds a read");
                // Bookkeeping first, so a panicking callback loses no slot. The buffer is not
                // reused before `each` returns: it stays borrowed, and `each` cannot reach
                // `self`.
                self.free.push(index);
                self.in_flight -= 1;
                handed += 1;
                let bytes = slot.bytes(self.buffers[index].view());
                let outcome = match slot.outcome.take().expect("a ready slot has an outcome") {
                    Ok(()) if slot.verify => verify(&slot, bytes),
                    outcome => outcome,
                };
                each(slot.token, outcome.map(|()| bytes));
            }
            // Only reads in the kernel can finish later; without them waiting would hang.
            if handed > 0 || !wait || self.in_kernel == 0 {
                return Ok(handed);
            }
            block = true;
        }
    }

    /// Copies completions out of the ring (after blocking for one if `block`) and turns each
    /// into a finished slot or a resubmission of the rest of its range.
    fn reap(&mut self, block: bool) -> Result<(), ReadsError> {
        let Engine::IoUring(ring) = &mut self.engine else {
            return Ok(());
        };
        if self.in_kernel == 0 {
            return Ok(());
        }
        if block {
            wait_one(ring).map_err(ReadsError::Ring)?;
        } else if !ring.submission().is_empty() {
            // Only entries a transient refusal left queued; a poll with none makes no system
            // call (completions are read from shared memory).
            flush(ring).map_err(ReadsError::Ring)?;
        }
        self.reaped.clear();
        self.reaped
            .extend(ring.completion().map(|c| (c.user_data(), c.result())));
        let mut resubmitted = false;
        for &(user_data, result) in &self.reaped {
            let index = user_data as usize;
            let slot = self.slots[index]
                .as_mut()
                .expect("a completion names an occupied slot");
            // A result at or before `done` is the end of the file inside the trusted range
            // (synced bytes are gone); `EAGAIN` is resubmitted, the rest as the sync backend.
            let outcome = match result {
                _ if result == -libc::EAGAIN => None,
                _ if result < 0 => slot.advance(Err(io::Error::from_raw_os_error(-result))),
                _ => slot.advance(Ok(result as usize)),
            };
            match outcome {
                Some(outcome) => {
                    slot.outcome = Some(outcome);
                    self.in_kernel -= 1;
                    self.ready.push_back(index);
                }
                None => {
                    // Interrupted, short or refused: read the rest (from the aligned block
                    // holding it, if direct; all of it, if it just turned buffered) into the
                    // same buffer.
                    let fd = slot.reader.file().raw_fd().expect("submitted with an fd");
                    // SAFETY: as in `start`; the slot stays in kernel.
                    match unsafe { push_read(ring, fd, self.buffers[index].view(), slot, index) } {
                        Ok(()) => resubmitted = true,
                        // Never lose a reaped completion (`Drop` counts on `in_kernel`): the
                        // read fails instead.
                        Err(error) => {
                            slot.outcome = Some(Err(PageFileError::io(
                                format!("continuing a read of page {}", slot.page),
                                error,
                            )));
                            self.in_kernel -= 1;
                            self.ready.push_back(index);
                        }
                    }
                }
            }
        }
        if resubmitted {
            flush(ring).map_err(ReadsError::Ring)?;
        }
        Ok(())
    }
}

impl Drop for PageReads {
    /// Waits for reads the kernel still owns (local disk reads: bounded), so no buffer is freed
    /// while it may be written. Finished reads not handed out are dropped.
    fn drop(&mut self) {
        let Engine::IoUring(ring) = &mut self.engine else {
            return;
        };
        while self.in_kernel > 0 {
            if let Err(error) = wait_one(ring) {
                tracing::error!(%error, in_kernel = self.in_kernel,
                    "page reads: io_uring failed while waiting for reads at drop; leaking their buffers");
                std::mem::forget(std::mem::take(&mut self.buffers));
                return;
            }
            // Every completion ends the kernel's use of its buffer (no resubmission here).
            self.in_kernel = self.in_kernel.saturating_sub(ring.completion().count());
        }
    }
}

/// Checks a whole-page read against its entry's CRC.
fn verify(slot: &Slot, bytes: &[u8]) -> Result<(), PageFileError> {
    let computed = crc32c::crc32c(bytes);
    if computed == slot.entry.crc {
        return Ok(());
    }
    Err(PageFileError::Corrupt {
        page: slot.page,
        path: slot.reader.file().path().to_path_buf(),
        valid_bytes: slot.entry.valid_bytes,
        stored: slot.entry.crc,
        computed,
    })
}

/// A ring for `depth` reads: both queues hold at least `depth` entries (the completion queue is
/// twice the submission queue), and the kernel supports `IORING_OP_READ` (5.6+).
fn setup_ring(depth: u32) -> Result<io_uring::IoUring, String> {
    let ring = io_uring::IoUring::new(depth.next_power_of_two())
        .map_err(|e| format!("io_uring_setup failed: {e}"))?;
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_ok()
        && !probe.is_supported(io_uring::opcode::Read::CODE)
    {
        return Err("the kernel's io_uring has no Read opcode (needs Linux 5.6)".to_string());
    }
    Ok(ring)
}

/// Queues a `Read` of the rest of `slot`'s range (from [`Slot::from`] to its `span`) into
/// `buf`, the slot's buffer (aligned when the read is direct).
///
/// # Safety
/// `buf` must stay allocated, unmoved and untouched until the completion is reaped, and `fd`
/// open until then.
unsafe fn push_read(
    ring: &mut io_uring::IoUring,
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    slot: &Slot,
    index: usize,
) -> io::Result<()> {
    let from = slot.from();
    let rest = &mut buf[from as usize..slot.span as usize];
    let read = io_uring::opcode::Read::new(
        io_uring::types::Fd(fd),
        rest.as_mut_ptr(),
        rest.len() as u32,
    )
    .offset(slot.read_start + u64::from(from))
    .build()
    .user_data(index as u64);
    // SAFETY: the caller's contract.
    if unsafe { ring.submission().push(&read) }.is_ok() {
        return Ok(());
    }
    // Unreachable by invariant 4; if it happens, make room and try once more.
    flush(ring)?;
    // SAFETY: the caller's contract.
    unsafe { ring.submission().push(&read) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))
}

/// Submits queued entries without waiting. `EINTR` retries; `EAGAIN`/`EBUSY` (the kernel is
/// short of resources) leave them queued for the next call, which is not an error.
fn flush(ring: &mut io_uring::IoUring) -> io::Result<()> {
    loop {
        match ring.submit() {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Submits queued entries and blocks until at least one completion is available. `EINTR`
/// retries; `EAGAIN`/`EBUSY` retry too (something is in the kernel, so it will finish).
fn wait_one(ring: &mut io_uring::IoUring) -> io::Result<()> {
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => return Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        }
    }
}
