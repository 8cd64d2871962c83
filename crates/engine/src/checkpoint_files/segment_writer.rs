//! The segment writer: streams one segment's entries to its file through two 4 KiB-aligned
//! buffers and makes the file durable in [`SegmentWriter::finish`].
//!
//! The segment thread fills one buffer while the segment's I/O thread writes the other, so the
//! scan's CPU work and the device's time overlap instead of adding up.
//!
//! Writes bypass the page cache (`O_DIRECT`) where the file system allows it and the store asks
//! for it (`StoreConfig::checkpoint_direct_io`). Through the page cache, `pwrite` of a checkpoint
//! is a kernel copy of every byte into freshly allocated cache pages: on the 2-core VM that copy
//! was the largest part of the server's save, and it grew from save to save as the cache filled
//! (plain `dd` of successive 2 GB files showed the same growth: 1.3 s, 3.5 s, 4.0 s of system
//! time; with `oflag=direct`, 0.5–0.6 s each). Direct writes cost no copy and leave the cache to
//! the requests.
//!
//! Invariants:
//! - The running CRC32C equals the CRC32C of every body byte handed to the buffers so far, and
//!   `body_bytes` equals their count; the footer records both. The CRC is computed on the
//!   segment thread, in file order, before a buffer is handed over.
//! - Every write before the last is one full buffer of [`WRITE_BUFFER_BYTES`] (a whole number of
//!   [`DIRECT_IO_ALIGNMENT`] blocks) at an offset that is a multiple of it, so it is valid under
//!   `O_DIRECT`. The I/O thread writes in the order buffers were handed over.
//! - The last write (the tail and the footer, usually not a whole block) is made with direct I/O
//!   turned off, then the file is fdatasynced after the I/O thread has finished: durability never
//!   depends on the mode.
//! - After a failed write the file's content is unknown: the I/O thread drops every later write,
//!   the writer refuses more, and `finish` returns the error.
//! - At most two buffers exist per writer (bounded memory: 2 × (`WRITE_BUFFER_BYTES` + 4 KiB)).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use prefixkv_storage::{DiskFile, DIRECT_IO_ALIGNMENT};

use super::pacer::WritePacer;
use super::segment::{
    encode_footer, encode_header, segment_file_name, DecodeLimits, SegmentFooter, SegmentHeader,
    SegmentSummary, WriteTimes, ENTRY_HEADER_BYTES, KIND_PUT, KIND_TOMBSTONE, SEGMENT_FOOTER_BYTES,
};
use crate::checkpoint_priority::ThreadPriority;
use crate::error::EngineError;

/// Bytes per write: large enough that one write per device round trip keeps a virtio disk
/// busy, small enough that two per segment writer cost little memory.
const WRITE_BUFFER_BYTES: usize = 4 << 20;

/// A fixed-capacity byte buffer whose start is aligned for direct I/O.
struct AlignedBuffer {
    pointer: *mut u8,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer owns its bytes like a `Vec<u8>`.
unsafe impl Send for AlignedBuffer {}

impl std::fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuffer")
            .field("len", &self.len)
            .field("capacity", &self.layout.size())
            .finish()
    }
}

impl AlignedBuffer {
    /// Room for a full write plus the footer (`finish` appends it to a possibly full buffer).
    fn new() -> AlignedBuffer {
        let layout = crate::memory::region_layout(
            WRITE_BUFFER_BYTES + DIRECT_IO_ALIGNMENT,
            DIRECT_IO_ALIGNMENT,
        );
        AlignedBuffer {
            pointer: crate::memory::allocate_zeroed(layout),
            len: 0,
            layout,
        }
    }

    fn capacity(&self) -> usize {
        self.layout.size()
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are initialised (the region starts zeroed).
        unsafe { std::slice::from_raw_parts(self.pointer, self.len) }
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) {
        assert!(self.len + bytes.len() <= self.capacity(), "buffer overflow");
        // SAFETY: in bounds (asserted); `bytes` cannot alias a buffer we exclusively borrow.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.pointer.add(self.len), bytes.len())
        };
        self.len += bytes.len();
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with `self.layout`; no borrow outlives `self`.
        unsafe { crate::memory::free_region(self.pointer, self.layout) };
    }
}

/// A buffer on its way to the file.
struct Job {
    buffer: AlignedBuffer,
    offset: u64,
    /// The last write: made with direct I/O turned off.
    last: bool,
}

/// The segment's I/O thread and the two channels that carry buffers to it and back.
#[derive(Debug)]
struct IoThread {
    jobs: Option<SyncSender<Job>>,
    free: Receiver<AlignedBuffer>,
    /// Set by the I/O thread when a write failed (the error itself comes back from `join`).
    failed: Arc<AtomicBool>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("offset", &self.offset)
            .field("bytes", &self.buffer.len)
            .finish()
    }
}

impl IoThread {
    fn spawn(
        file: Arc<dyn DiskFile>,
        direct: bool,
        priority: Option<Arc<ThreadPriority>>,
    ) -> std::io::Result<IoThread> {
        let (jobs, job_receiver) = sync_channel::<Job>(2);
        let (free_sender, free) = sync_channel::<AlignedBuffer>(2);
        free_sender
            .send(AlignedBuffer::new())
            .expect("the receiver is alive");
        let failed = Arc::new(AtomicBool::new(false));
        let thread_failed = Arc::clone(&failed);
        let handle = std::thread::Builder::new()
            .name("prefixkv-ckpt-io".into())
            .spawn(move || {
                // Scheduled like the checkpoint's segment threads (and raised with them).
                let _registered = priority.as_ref().map(|priority| priority.enter());
                let mut failure = None;
                for mut job in job_receiver {
                    if failure.is_none() {
                        let result = if job.last && direct {
                            file.set_direct_io(false).map(|_| ())
                        } else {
                            Ok(())
                        }
                        .and_then(|()| file.write_all_at(job.buffer.as_slice(), job.offset));
                        if let Err(error) = result {
                            thread_failed.store(true, Ordering::Release);
                            failure = Some(error);
                        }
                    }
                    job.buffer.len = 0;
                    // The writer may be gone (dropped after an error): nothing to hand back.
                    let _ = free_sender.send(job.buffer);
                }
                failure.map_or(Ok(()), Err)
            })?;
        Ok(IoThread {
            jobs: Some(jobs),
            free,
            failed,
            handle: Some(handle),
        })
    }

    /// Waits for every write handed over so far and returns the first error.
    fn join(&mut self) -> std::io::Result<()> {
        drop(self.jobs.take());
        match self.handle.take() {
            Some(handle) => handle.join().expect("checkpoint I/O thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        // An abandoned writer: let the thread finish what it has and end (its error, if any, is
        // moot: the unpublished checkpoint is removed).
        let _ = self.join();
    }
}

/// Streams the entries of one segment to its file. `Send`: each flusher thread owns one.
///
/// Dropping a writer without [`finish`](Self::finish) leaves an incomplete file inside the
/// unpublished `.tmp` directory, which is never read and is removed with that directory.
#[derive(Debug)]
pub struct SegmentWriter {
    path: PathBuf,
    file: Arc<dyn DiskFile>,
    io: IoThread,
    /// Bytes handed to the I/O thread so far (where the next write goes); a multiple of
    /// `WRITE_BUFFER_BYTES` until the last write.
    written: u64,
    index: u32,
    /// The buffer being filled.
    buffer: AlignedBuffer,
    /// How many bytes at the start of `buffer` are already folded into `crc`.
    buffer_checksummed: usize,
    /// CRC32C of the body bytes folded in so far (in file order).
    crc: u32,
    entries: u64,
    body_bytes: u64,
    limits: DecodeLimits,
    /// Whether the file is open for direct I/O.
    direct: bool,
    /// Set after a failed write: the file content is then unknown, so the writer refuses more.
    failed: bool,
    /// The checkpoint's shared rate limit, if any.
    pacer: Option<Arc<WritePacer>>,
    /// The checkpoint's thread priority control, told of every buffer handed over.
    priority: Option<Arc<ThreadPriority>>,
    times: WriteTimes,
}

impl SegmentWriter {
    /// Starts segment `index` of checkpoint `checkpoint_version` in the new, empty `file` (at
    /// `path`) and writes its header into the buffer. With `direct_io`, asks for `O_DIRECT`
    /// (where the file system has none, the writer goes through the page cache). `pacer` and
    /// `priority` are the checkpoint's, shared by all its writers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        file: Arc<dyn DiskFile>,
        path: PathBuf,
        index: u32,
        checkpoint_version: u64,
        limits: DecodeLimits,
        pacer: Option<Arc<WritePacer>>,
        direct_io: bool,
        priority: Option<Arc<ThreadPriority>>,
    ) -> Result<SegmentWriter, EngineError> {
        let direct = direct_io
            && file.set_direct_io(true).map_err(|source| {
                EngineError::io("open segment file for direct I/O", &path, source)
            })?;
        let io = IoThread::spawn(Arc::clone(&file), direct, priority.clone())
            .map_err(|source| EngineError::io("start segment I/O thread", &path, source))?;
        let mut writer = SegmentWriter {
            path,
            file,
            io,
            written: 0,
            index,
            buffer: AlignedBuffer::new(),
            buffer_checksummed: 0,
            crc: 0,
            entries: 0,
            body_bytes: 0,
            limits,
            direct,
            failed: false,
            pacer,
            priority,
            times: WriteTimes::default(),
        };
        let header = encode_header(SegmentHeader {
            checkpoint_version,
            segment_index: index,
        });
        writer.append_bytes(&header)?;
        Ok(writer)
    }

    /// Whether appending an entry with a key and value of these lengths may block: it does not
    /// fit the buffer, so a full buffer goes to the I/O thread (paced, and waiting for the other
    /// buffer). A caller under epoch protection suspends it around such an append
    /// (`shared::ThreadEpoch`); an entry that fits is a copy and never blocks.
    pub fn append_may_block(&self, key_bytes: usize, value_bytes: usize) -> bool {
        self.buffer.len + ENTRY_HEADER_BYTES as usize + key_bytes + value_bytes > WRITE_BUFFER_BYTES
    }

    /// Appends a live record.
    pub fn put(
        &mut self,
        record_version: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), EngineError> {
        self.append(KIND_PUT, record_version, key, value)
    }

    /// Appends a deletion marker.
    pub fn tombstone(&mut self, record_version: u64, key: &[u8]) -> Result<(), EngineError> {
        self.append(KIND_TOMBSTONE, record_version, key, &[])
    }

    /// Entries appended so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Where this writer's time went so far.
    pub fn times(&self) -> WriteTimes {
        self.times
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this writer's file bypasses the page cache.
    pub fn direct_io(&self) -> bool {
        self.direct
    }

    fn append(
        &mut self,
        kind: u8,
        record_version: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), EngineError> {
        if key.len() > self.limits.max_key_bytes as usize {
            return Err(EngineError::InvalidArgument(format!(
                "key of {} bytes exceeds the checkpoint limit of {} bytes; use shorter keys",
                key.len(),
                self.limits.max_key_bytes
            )));
        }
        if value.len() > self.limits.max_value_bytes as usize {
            return Err(EngineError::InvalidArgument(format!(
                "value of {} bytes exceeds the checkpoint limit of {} bytes; split the value",
                value.len(),
                self.limits.max_value_bytes
            )));
        }
        let mut header = [0u8; ENTRY_HEADER_BYTES as usize];
        header[0] = kind;
        header[1..9].copy_from_slice(&record_version.to_le_bytes());
        header[9..13].copy_from_slice(&(key.len() as u32).to_le_bytes());
        header[13..17].copy_from_slice(&(value.len() as u32).to_le_bytes());
        let total = header.len() + key.len() + value.len();
        if self.buffer.len + total <= WRITE_BUFFER_BYTES {
            // The common case, one entry into the buffer at once (the CRC runs over whole
            // buffers when they are handed over, not over each small piece).
            self.check_not_failed()?;
            self.buffer.extend_from_slice(&header);
            self.buffer.extend_from_slice(key);
            self.buffer.extend_from_slice(value);
            self.body_bytes += total as u64;
        } else {
            self.append_bytes(&header)?;
            self.append_bytes(key)?;
            self.append_bytes(value)?;
        }
        self.entries += 1;
        Ok(())
    }

    fn check_not_failed(&self) -> Result<(), EngineError> {
        if self.failed {
            return Err(EngineError::InvalidArgument(format!(
                "segment {} had a failed write earlier; abandon this checkpoint",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Appends body bytes of any length, handing over each buffer as it fills (a value larger
    /// than the buffer passes through it in pieces, so every write stays aligned).
    fn append_bytes(&mut self, mut bytes: &[u8]) -> Result<(), EngineError> {
        self.check_not_failed()?;
        self.body_bytes += bytes.len() as u64;
        while !bytes.is_empty() {
            if self.buffer.len == WRITE_BUFFER_BYTES {
                self.hand_over(false)?;
            }
            let room = WRITE_BUFFER_BYTES - self.buffer.len;
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.buffer.extend_from_slice(now);
            bytes = later;
        }
        Ok(())
    }

    /// Folds the buffered, not yet folded body bytes into the CRC (in file order).
    fn checksum_buffer(&mut self) {
        let started = Instant::now();
        self.crc =
            crc32c::crc32c_append(self.crc, &self.buffer.as_slice()[self.buffer_checksummed..]);
        self.buffer_checksummed = self.buffer.len;
        self.times.crc += started.elapsed();
    }

    /// Hands the buffer to the I/O thread (a full one, or with `last` the final one) and takes
    /// the other, waiting while both are in flight.
    fn hand_over(&mut self, last: bool) -> Result<(), EngineError> {
        self.checksum_buffer();
        let count = self.buffer.len;
        assert!(last || count == WRITE_BUFFER_BYTES);
        debug_assert!(self.written.is_multiple_of(WRITE_BUFFER_BYTES as u64));
        if let Some(pacer) = &self.pacer {
            let started = Instant::now();
            pacer.pace(count as u64);
            self.times.pacing += started.elapsed();
        }
        let started = Instant::now();
        let refused = self.io.failed.load(Ordering::Acquire) || {
            match self.io.free.recv() {
                Ok(next) => {
                    let full = std::mem::replace(&mut self.buffer, next);
                    let job = Job {
                        buffer: full,
                        offset: self.written,
                        last,
                    };
                    let jobs = self.io.jobs.as_ref().expect("open until finish");
                    jobs.send(job).is_err()
                }
                Err(_) => true,
            }
        };
        self.times.write += started.elapsed();
        if refused {
            return Err(self.io_failure());
        }
        self.written += count as u64;
        self.buffer_checksummed = 0;
        if let Some(priority) = &self.priority {
            priority.add_progress(count as u64);
        }
        Ok(())
    }

    /// The I/O thread's error, after it has stopped (the writer is then failed for good).
    fn io_failure(&mut self) -> EngineError {
        self.failed = true;
        let error = match self.io.join() {
            Err(error) => error,
            Ok(()) => std::io::Error::other("the segment's I/O thread stopped"),
        };
        EngineError::io("write segment file", &self.path, error)
    }

    /// Writes the footer, waits for the I/O thread and fdatasyncs the file; returns its summary
    /// for the MANIFEST and where the writer's time went.
    pub fn finish(mut self) -> Result<(SegmentSummary, WriteTimes), EngineError> {
        self.check_not_failed()?;
        // The body's CRC must cover every body byte and no footer byte.
        self.checksum_buffer();
        let footer = SegmentFooter {
            entries: self.entries,
            body_bytes: self.body_bytes,
            crc32c: self.crc,
        };
        // The buffer holds at most WRITE_BUFFER_BYTES, and has one more block of room.
        self.buffer.extend_from_slice(&encode_footer(footer));
        // The footer is not body: mark it folded so the hand-over leaves the CRC alone.
        self.buffer_checksummed = self.buffer.len;
        self.hand_over(true)?;
        debug_assert_eq!(self.crc, footer.crc32c);
        debug_assert_eq!(self.written, self.body_bytes + SEGMENT_FOOTER_BYTES);
        let started = Instant::now();
        let written = self.io.join();
        self.times.write += started.elapsed();
        written.map_err(|error| EngineError::io("write segment file", &self.path, error))?;
        // fdatasync also persists the file size, which a later read needs; the directory entry is
        // made durable by the fsync of the checkpoint directory in `publish`.
        let started = Instant::now();
        self.file
            .sync_data()
            .map_err(|source| EngineError::io("fdatasync segment file", &self.path, source))?;
        self.times.sync += started.elapsed();
        let summary = SegmentSummary {
            index: self.index,
            file_name: segment_file_name(self.index),
            entries: self.entries,
            bytes: self.body_bytes + SEGMENT_FOOTER_BYTES,
            crc32c: self.crc,
        };
        Ok((summary, self.times))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint_files::decode_segment_bytes;
    use prefixkv_storage::{Disk, OpenMode, SimDisk};

    /// Entries around every boundary the writer cares about: a block, the buffer, values larger
    /// than the buffer.
    fn entries() -> Vec<(u64, Vec<u8>, Vec<u8>)> {
        let sizes = [
            0,
            1,
            4078,
            4079,
            4096,
            4097,
            (1 << 20) - 17,
            (1 << 20) + 5,
            3 << 20,
        ];
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                let value = (0..size).map(|b| (b * 7 + i) as u8).collect();
                (i as u64 + 1, format!("key-{i}").into_bytes(), value)
            })
            .collect()
    }

    fn round_trip(disk: &dyn Disk, path: &Path, direct_io: bool) -> bool {
        let file = disk.open(path, OpenMode::CreateNew).unwrap();
        let limits = DecodeLimits::default();
        let mut writer = SegmentWriter::create(
            file,
            path.to_path_buf(),
            3,
            9,
            limits,
            None,
            direct_io,
            None,
        )
        .unwrap();
        let direct = writer.direct_io();
        for (version, key, value) in entries() {
            writer.put(version, &key, &value).unwrap();
        }
        writer.tombstone(99, b"gone").unwrap();
        let (summary, _) = writer.finish().unwrap();
        let file = disk.open(path, OpenMode::Read).unwrap();
        let bytes = file.read_to_end_bounded(64 << 20).unwrap();
        assert_eq!(bytes.len() as u64, summary.bytes);
        let (header, decoded, footer) = decode_segment_bytes(&bytes, limits).unwrap();
        assert_eq!((header.checkpoint_version, header.segment_index), (9, 3));
        assert_eq!(footer.crc32c, summary.crc32c);
        let expected = entries();
        assert_eq!(decoded.len(), expected.len() + 1);
        for (entry, (version, key, value)) in decoded.iter().zip(&expected) {
            assert_eq!(
                (entry.record_version, &entry.key, &entry.value),
                (*version, key, value)
            );
        }
        assert!(decoded.last().unwrap().tombstone);
        direct
    }

    #[test]
    fn direct_writes_stay_aligned_and_read_back_exactly() {
        // The simulated disk refuses a misaligned write while direct I/O is on, like Linux.
        let sim = SimDisk::new(7);
        assert!(round_trip(
            sim.as_disk().as_ref(),
            Path::new("/segment-direct"),
            true
        ));
        assert!(!round_trip(
            sim.as_disk().as_ref(),
            Path::new("/segment-cached"),
            false
        ));
        // A real file system: direct where it has it (not on tmpfs), the same bytes either way.
        let dir = tempfile::tempdir().unwrap();
        let real = prefixkv_storage::real_disk();
        round_trip(real.as_ref(), &dir.path().join("segment-direct"), true);
        round_trip(real.as_ref(), &dir.path().join("segment-cached"), false);
    }

    #[test]
    fn a_failed_write_on_the_io_thread_fails_the_segment_and_names_the_error() {
        use prefixkv_storage::{Fault, FaultError, FaultOp};
        for skip in [0, 1, 2] {
            let sim = SimDisk::new(11);
            let disk = sim.as_disk();
            let path = Path::new("/segment-failing");
            let file = disk.open(path, OpenMode::CreateNew).unwrap();
            let mut writer = SegmentWriter::create(
                file,
                path.to_path_buf(),
                0,
                1,
                DecodeLimits::default(),
                None,
                true,
                None,
            )
            .unwrap();
            // The (skip+1)-th write fails: a middle buffer or, with skip 2, the last one.
            sim.inject(Fault {
                skip,
                ..Fault::once(FaultOp::Write, "segment-failing", FaultError::NoSpace)
            });
            let value = vec![7u8; 1000];
            let mut outcome = Ok(());
            for key in 0..(2 * WRITE_BUFFER_BYTES / 1000) as u64 {
                outcome = writer.put(1, &key.to_le_bytes(), &value);
                if outcome.is_err() {
                    break;
                }
            }
            let error = match outcome {
                Err(error) => error,
                Ok(()) => writer.finish().unwrap_err(),
            };
            let text = format!("{error:#}");
            assert!(
                text.contains("No space left") || text.contains("ENOSPC") || text.contains("space"),
                "skip {skip}: {text}"
            );
            assert_eq!(sim.faults_hit(), 1, "skip {skip}");
        }
    }
}
