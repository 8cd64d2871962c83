//! The asynchronous writer: a thread that turns each checkpoint the mutator starts into a
//! durable image file, while the mutator keeps running.
//!
//! Hand-off (no locks, the mutator never blocks): the mutator owns `job_seq`, the writer owns
//! `done_seq`. The writer is idle when `done_seq == job_seq`. At a point of consistency the
//! mutator checks that with an Acquire load (so everything the writer did to the algorithm's
//! arrays happens-before `prepare`), runs `prepare`, stores the job's tick and marker LSN, bumps
//! `job_seq` with Release (so `prepare`'s effects happen-before the captures) and unparks the
//! writer. If the writer is busy, the mutator does not wait: that checkpoint is deferred, as in
//! the paper. The writer finishes a job by storing `done_seq` with Release.
//!
//! A job that fails stores `failed` *before* `done_seq`, and the writer thread exits. So the
//! mutator, having seen the writer idle, checks `failed` once more before it hands over a job:
//! a job given to an exited writer would never be done. (Checking only before the idle check
//! left a window: the writer could fail between the two loads, and the next
//! `wait_writer_idle` waited out its whole timeout.)
//!
//! Before the footer that makes an image complete, the writer makes the log durable through the
//! image's marker record: otherwise a crash could leave an image whose tick the log does not
//! reach, and a reopened log would reuse LSNs the image claims to cover. After an image is
//! complete, log segments wholly before the *previous* image's marker are deleted (two images'
//! worth of log stay, so that either image can be recovered from).
//!
//! Every byte goes through the storage layer's `Disk` (`Config::disk`); the crash-safety
//! argument of the double-backup files is in the `image` module, that of the WAL-backed store in
//! `wal_store`. Any I/O error stops the writer for good (a failed sync is never retried).

use crate::algo::Algorithm;
use crate::image::{
    encode_footer, image_path, words_as_bytes, words_as_bytes_mut, Footer, FOOTER_BYTES,
};
use prefixkv_storage::log::Log;
use prefixkv_storage::{durable, io as disk_io, Disk, DiskFile, OpenMode};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Cells per chunk the writer captures and writes at a time (512 KiB).
const CHUNK_WORDS: usize = 64 * 1024;

/// State shared by the mutator handle and the writer thread.
pub(crate) struct Shared<A> {
    pub(crate) algorithm: A,
    pub(crate) job_seq: AtomicU64,
    pub(crate) done_seq: AtomicU64,
    pub(crate) job_tick: AtomicU64,
    pub(crate) job_marker_lsn: AtomicU64,
    pub(crate) shutdown: AtomicBool,
    pub(crate) failed: AtomicBool,
    pub(crate) failure: Mutex<Option<String>>,
    /// Tick of the newest complete (durable) image; `u64::MAX` if none yet.
    pub(crate) completed_tick: AtomicU64,
    pub(crate) images_completed: AtomicU64,
    pub(crate) image_bytes_written: AtomicU64,
    pub(crate) base_bytes_read: AtomicU64,
    pub(crate) wal_frame_bytes_written: AtomicU64,
    pub(crate) backfill_bytes_written: AtomicU64,
}

impl<A> Shared<A> {
    pub(crate) fn new(algorithm: A, completed_tick: Option<u64>) -> Shared<A> {
        Shared {
            algorithm,
            job_seq: AtomicU64::new(0),
            done_seq: AtomicU64::new(0),
            job_tick: AtomicU64::new(0),
            job_marker_lsn: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            completed_tick: AtomicU64::new(completed_tick.unwrap_or(u64::MAX)),
            images_completed: AtomicU64::new(0),
            image_bytes_written: AtomicU64::new(0),
            base_bytes_read: AtomicU64::new(0),
            wal_frame_bytes_written: AtomicU64::new(0),
            backfill_bytes_written: AtomicU64::new(0),
        }
    }
}

/// The two image files and which one holds the newest complete image.
pub(crate) struct ImageFiles {
    dir: PathBuf,
    words: usize,
    files: [Arc<dyn DiskFile>; 2],
    /// Slot of the newest complete image, if any.
    newest: Option<usize>,
    /// Marker LSN of the newest complete image.
    newest_marker_lsn: u64,
    chunk: Vec<u64>,
    /// With [`ImageBase::MergeInMemory`]: the newest image, updated in place by each capture.
    merged: Option<Vec<u64>>,
}

/// Where the writer takes the clean words of an image from, for algorithms whose captures need a
/// base (Ping-Pong): the paper's two ways to build a full image from the dirty words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageBase {
    /// *Copy*: read the previous image back from the other backup file, chunk by chunk, and
    /// overlay the dirty words (one sequential read of |AS| per checkpoint, no extra memory).
    #[default]
    CopyFromFile,
    /// *Merge*: keep the previous image in writer memory (|AS| more memory) and overlay the
    /// dirty words into it in place (no read).
    MergeInMemory,
}

impl ImageFiles {
    /// Open (creating) both files in `dir` on `disk`, sized for `words` cells. `newest` is the
    /// slot recovery found holding the newest valid image, which the next write must not touch.
    /// Returns only once both files exist at their full size and their names are durable.
    pub(crate) fn open(
        disk: &dyn Disk,
        dir: &Path,
        words: usize,
        newest: Option<(usize, u64)>,
        newest_marker_lsn: u64,
        base: ImageBase,
    ) -> io::Result<ImageFiles> {
        let length = words as u64 * 8 + FOOTER_BYTES as u64;
        let mut created = false;
        let mut open = |slot: usize| -> io::Result<Arc<dyn DiskFile>> {
            let path = image_path(dir, slot);
            let context = |what: &'static str| {
                let path = path.clone();
                move |error| disk_io::context(error, what, &path)
            };
            created |= !disk_io::exists(disk, &path).map_err(context("looking for"))?;
            let file = disk
                .open(&path, OpenMode::Create)
                .map_err(context("opening"))?;
            if file.len().map_err(context("reading the size of"))? != length {
                if newest.map(|(newest, _)| newest) == Some(slot) {
                    return Err(io::Error::other(format!(
                        "{}: newest image has the wrong size",
                        path.display()
                    )));
                }
                file.set_len(length).map_err(context("sizing"))?;
                file.sync_all().map_err(context("fsync of"))?;
            }
            Ok(file)
        };
        let files = [open(0)?, open(1)?];
        if created {
            // Image writes only sync the files' data: their names must be durable before.
            durable::sync_dir(disk, dir)?;
        }
        Ok(ImageFiles {
            dir: dir.to_path_buf(),
            words,
            files,
            newest: newest.map(|(slot, _)| slot),
            newest_marker_lsn,
            chunk: vec![0; CHUNK_WORDS.min(words.max(1))],
            // Every algorithm's first capture after open writes every word, so zeros are fine.
            merged: (base == ImageBase::MergeInMemory).then(|| vec![0; words]),
        })
    }

    /// Write the checkpoint the last `prepare` started as an image of `tick`, into the slot not
    /// holding the newest image. See the module comment of `image` for the crash argument.
    pub(crate) fn write_image<A: Algorithm>(
        &mut self,
        shared: &Shared<A>,
        tick: u64,
        marker_lsn: u64,
        log: Option<&Log>,
    ) -> io::Result<()> {
        let slot = self.newest.map_or(0, |newest| 1 - newest);
        let data_bytes = self.words as u64 * 8;
        let context = |what: &str, error: io::Error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{} ({what}): {error}",
                    image_path(&self.dir, slot).display()
                ),
            )
        };
        let mut footer = Footer {
            complete: false,
            tick,
            marker_lsn,
            words: self.words as u64,
            data_crc: 0,
        };
        let file = &self.files[slot];
        file.write_all_at(&encode_footer(&footer), data_bytes)
            .map_err(|e| context("invalidating footer", e))?;
        file.sync_data()
            .map_err(|e| context("syncing invalidated footer", e))?;
        let algorithm = &shared.algorithm;
        let needs_base = algorithm.needs_base();
        assert!(
            !needs_base || self.newest.is_some(),
            "an algorithm asked for a base image before any image was written"
        );
        let merging = self.merged.is_some();
        let mut crc = 0u32;
        let mut start = 0;
        while start < self.words {
            let length = CHUNK_WORDS.min(self.words - start);
            let chunk = match &mut self.merged {
                Some(merged) => &mut merged[start..start + length],
                None => &mut self.chunk[..length],
            };
            if needs_base && !merging {
                self.files[1 - slot]
                    .read_exact_at(words_as_bytes_mut(chunk), start as u64 * 8)
                    .map_err(|e| context("reading the previous image as base", e))?;
                shared
                    .base_bytes_read
                    .fetch_add(length as u64 * 8, Ordering::Relaxed);
            }
            algorithm.capture(start, chunk);
            let bytes = words_as_bytes(chunk);
            crc = crc32c::crc32c_append(crc, bytes);
            file.write_all_at(bytes, start as u64 * 8)
                .map_err(|e| context("writing cells", e))?;
            start += length;
        }
        file.sync_data().map_err(|e| context("syncing cells", e))?;
        if let Some(log) = log {
            if log.durable_lsn() < marker_lsn {
                log.flush_and_sync().map_err(|e| {
                    io::Error::other(format!("syncing the log before an image footer: {e}"))
                })?;
            }
            debug_assert!(log.durable_lsn() >= marker_lsn);
        }
        footer.complete = true;
        footer.data_crc = crc;
        file.write_all_at(&encode_footer(&footer), data_bytes)
            .map_err(|e| context("writing footer", e))?;
        file.sync_data().map_err(|e| context("syncing footer", e))?;
        let previous_marker_lsn = self.newest_marker_lsn;
        self.newest = Some(slot);
        self.newest_marker_lsn = marker_lsn;
        shared
            .image_bytes_written
            .fetch_add(data_bytes + 2 * FOOTER_BYTES as u64, Ordering::Relaxed);
        shared.completed_tick.store(tick, Ordering::Release);
        shared.images_completed.fetch_add(1, Ordering::Relaxed);
        if let (Some(log), true) = (log, previous_marker_lsn > 0) {
            log.truncate_through(previous_marker_lsn)
                .map_err(|e| io::Error::other(format!("truncating the log after an image: {e}")))?;
        }
        Ok(())
    }
}

/// Where the writer puts images (see [`ImageStore`]).
pub(crate) enum ImageWriter {
    /// Two image files written alternately.
    DoubleBackup(ImageFiles),
    /// Changed pages as `prefixkv-pagestore` WAL frames, backfilled by its checkpoint.
    Wal(Box<crate::wal_store::WalImageWriter>),
}

impl ImageWriter {
    fn write_image<A: Algorithm>(
        &mut self,
        shared: &Shared<A>,
        tick: u64,
        marker_lsn: u64,
        log: Option<&Log>,
    ) -> io::Result<()> {
        match self {
            ImageWriter::DoubleBackup(files) => files.write_image(shared, tick, marker_lsn, log),
            ImageWriter::Wal(store) => store.write_image(shared, tick, marker_lsn, log),
        }
    }
}

/// Which image store the writer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageStore {
    /// Two image files (`image-0.tsimg`, `image-1.tsimg`) written alternately, each a full image
    /// with a footer; Ping-Pong's clean words come from [`ImageBase`].
    #[default]
    DoubleBackup,
    /// One `prefixkv-pagestore` database (`image.pkvpages` + WAL): each checkpoint writes the
    /// changed pages as WAL frames of one commit; the store's checkpoint backfills them into
    /// the database file once `backfill_after_frames` frames are pending (0: the image's page
    /// count). Only Ping-Pong knows which pages changed; the other algorithms write every page.
    /// See the `wal_store` module.
    PageStoreWal {
        /// Backfill when this many WAL frames are not yet in the database file (0: one image).
        backfill_after_frames: u64,
    },
}

/// The writer thread's loop: one image per job, until shutdown with no job pending.
pub(crate) fn run_writer<A: Algorithm>(
    shared: Arc<Shared<A>>,
    mut files: ImageWriter,
    log: Option<Arc<Log>>,
) {
    let mut done = shared.done_seq.load(Ordering::Relaxed);
    loop {
        let job = shared.job_seq.load(Ordering::Acquire);
        if job == done {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            std::thread::park();
            continue;
        }
        debug_assert_eq!(
            job,
            done + 1,
            "the mutator starts a job only when the writer is idle"
        );
        let tick = shared.job_tick.load(Ordering::Relaxed);
        let marker_lsn = shared.job_marker_lsn.load(Ordering::Relaxed);
        let result = files.write_image(&shared, tick, marker_lsn, log.as_deref());
        if let Err(error) = result {
            *shared
                .failure
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = Some(error.to_string());
            shared.failed.store(true, Ordering::Release);
            shared.done_seq.store(job, Ordering::Release);
            return;
        }
        done = job;
        shared.done_seq.store(job, Ordering::Release);
    }
}
