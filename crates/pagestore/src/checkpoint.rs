//! Checkpoint (backfill) of WAL frames into the database file, with SQLite's four modes.
//!
//! Steps and their order (each is what makes the next one safe):
//! 1. Locks for the mode: the checkpointer lock; for `Full` and above also the writer lock.
//! 2. Under the mark table: `safe = mxSafeFrame` and slot 0 held exclusively (so no reader uses
//!    the database file alone while it changes). Blocking modes wait (busy timeout) until no
//!    reader pins an older frame (`safe == max_frame`) and slot 0 is free.
//! 3. Worklist: the newest frame `<= safe` of every page with a frame above `backfilled_frames`.
//! 4. **WAL fsync** before the first database write: under `Normal` the frames may not be
//!    durable yet, and a database page newer than the durable log would match no committed
//!    prefix after a crash.
//! 5. Copy (the private `backfill` module). A crash here leaves torn or partial database pages, but every
//!    such page has a durable frame that recovery replays over it.
//! 6. **Database truncation**, only when the copy covers every frame of the log (`safe` was the
//!    newest frame when the worklist was taken): the database file is cut to the database size
//!    of that newest commit if it is longer (the database shrank, see
//!    [`crate::WriteTransaction::truncate`]), as SQLite does, in every mode.
//! 7. **Database fsync** (data and length), then publish `backfilled_frames = safe`. Publishing
//!    first would let a later restart drop frames whose copies are not durable.
//! 8. `Restart`/`Truncate`, only if everything was backfilled: wait for slots 1..=4 to drain,
//!    start a new log generation in memory (the next writer fsyncs its header before any
//!    frame); `Truncate` then truncates the WAL file to 0 bytes and fsyncs it. Last, because
//!    the log is the only copy of frames until step 7 is durable.
//!
//! Why the database truncation is crash-safe (a crash at any point of steps 5–8):
//! - Recovery takes the database size from the newest commit frame in the WAL when there is one,
//!   and from the file's length only when the WAL has none. Truncation happens only after the
//!   WAL fsync of step 4, so while the WAL holds the frames, a crash before, during, or after the
//!   truncation (durable or not) recovers the size of the newest commit, and every page at or
//!   below it has a durable frame or a durable database image it did not touch: the truncation
//!   only removes bytes above that size, which no state from `safe` on can read.
//! - A crash between the database fsync and the WAL reset: the file's length is durable (the
//!   fsync covers it), the WAL still replays to the same size; nothing changes.
//! - The WAL is reset (step 8, or the next writer's lazy restart) only after the database fsync
//!   of step 7, so once the WAL has no commit, the file's durable length is the size already.
//!   A WAL header rewritten for a new generation with no commit yet also leaves the file as the
//!   only source of the size, for the same reason.
//! - A passive checkpoint racing a writer: the size is the one of `safe`'s commit; a later
//!   commit's pages above it live in the WAL (pages a growth brings back get zero frames), so
//!   cutting the file below them loses nothing.
//!
//! Readers never see a torn or future page: a reader with mark `m >= safe` reads every page
//! that has a frame `<= safe` from the WAL, not from the database file; no reader has a mark
//! below `safe`; and slot-0 readers are excluded for the duration of the copy.

use crate::backfill::{self, BackfillCounts, WorkItem};
use crate::error::{io_error, Error, Result};
use crate::marks::{READ_MARK_SLOTS, UNUSED_MARK};
use crate::store::{restart_shared, BackfillStrategy, PageStore};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Checkpoint modes, with SQLite's semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Copy what can be copied now (up to the safe frame) without waiting for anyone.
    Passive,
    /// Wait (busy timeout) for the writer and for readers of older snapshots, then copy every
    /// frame; `Busy` if that was not possible.
    Full,
    /// `Full`, then wait for all WAL readers to finish so the next writer restarts the log at
    /// frame 1.
    Restart,
    /// `Restart`, and truncate the WAL file to 0 bytes (the database file is cut to its page
    /// count, as by every checkpoint that backfills every frame).
    Truncate,
}

/// What a checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointOutcome {
    /// The mode run.
    pub mode: CheckpointMode,
    /// Committed frames in the log when the copy started.
    pub max_frame: u64,
    /// Frames backfilled (and durable in the database file) after the checkpoint.
    pub backfilled_frames: u64,
    /// Pages written to the database file.
    pub pages_written: u64,
    /// Pages taken from the page cache instead of a WAL read.
    pub cache_hits: u64,
    /// Pages read from the WAL.
    pub wal_reads: u64,
    /// Read calls (or io_uring reads) those pages took: the fast backfill reads consecutive
    /// frames with one vectored read.
    pub wal_read_calls: u64,
    /// `pwritev`/`pwrite` calls issued.
    pub write_calls: u64,
    /// Whether the log was restarted (Restart/Truncate).
    pub log_restarted: bool,
    /// The database size in pages the database file was cut to, if it was longer (the
    /// database shrank and this checkpoint backfilled every frame).
    pub db_file_truncated_to_pages: Option<u32>,
    /// Wall time of the whole checkpoint.
    pub duration: Duration,
    /// Wall time of the copy alone (reads + writes, without the two fsyncs).
    pub copy_duration: Duration,
    /// Wall time of the WAL fsync before the copy.
    pub wal_sync_duration: Duration,
    /// Wall time of the database fsync after the copy.
    pub db_sync_duration: Duration,
}

impl PageStore {
    /// Runs a checkpoint in `mode` with the store's backfill strategy.
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<CheckpointOutcome> {
        self.checkpoint_with(mode, self.inner.options.backfill)
    }

    /// Runs a checkpoint in `mode` with an explicit backfill strategy (for experiments).
    pub fn checkpoint_with(
        &self,
        mode: CheckpointMode,
        strategy: BackfillStrategy,
    ) -> Result<CheckpointOutcome> {
        let started = Instant::now();
        let inner = &self.inner;
        let timeout = inner.options.busy_timeout;
        let deadline = started + timeout;
        let blocking = mode != CheckpointMode::Passive;
        let _checkpointer = if blocking {
            inner.checkpointer.try_lock_for(timeout)
        } else {
            inner.checkpointer.try_lock()
        }
        .ok_or_else(|| Error::Busy("another checkpoint is running".into()))?;
        let _writer = if blocking {
            Some(inner.writer.try_lock_for(timeout).ok_or_else(|| {
                Error::Busy("the writer did not finish within the busy timeout".into())
            })?)
        } else {
            None
        };

        // Step 2: safe frame and slot 0.
        let (safe, max_frame) = {
            let mut table = inner.marks.lock();
            loop {
                let max_frame = inner.shared.read().max_frame;
                let safe = table.safe_frame(max_frame);
                let readers_done = !blocking || safe == max_frame;
                if readers_done && table.try_exclusive(0) {
                    break (safe, max_frame);
                }
                if !blocking {
                    return Err(Error::Busy(
                        "a reader holds read-mark slot 0 (database-only snapshot)".into(),
                    ));
                }
                if !inner.marks.wait(&mut table, deadline) {
                    return Err(Error::Busy(format!(
                        "readers of older snapshots (safe frame {safe} < max frame {max_frame}) or of slot 0 did not finish within {timeout:?}"
                    )));
                }
            }
        };
        let result = self.copy_and_publish(mode, strategy, safe, max_frame, deadline);
        {
            let mut table = inner.marks.lock();
            table.release_exclusive(0);
        }
        inner.marks.notify();
        let mut outcome = result?;
        outcome.duration = started.elapsed();
        Ok(outcome)
    }

    fn copy_and_publish(
        &self,
        mode: CheckpointMode,
        strategy: BackfillStrategy,
        safe: u64,
        max_frame: u64,
        deadline: Instant,
    ) -> Result<CheckpointOutcome> {
        let inner = &self.inner;
        // Step 3: worklist in frame order, newest frame per page only.
        let (worklist, epoch, backfilled_before, size_if_complete) = {
            let shared = inner.shared.read();
            let start = shared.backfilled_frames;
            let mut seen = HashSet::new();
            let mut worklist = Vec::new();
            for frame_id in (start + 1..=safe).rev() {
                let page_number = shared.frame_pages[(frame_id - 1) as usize];
                if seen.insert(page_number) {
                    worklist.push(WorkItem {
                        page_number,
                        frame_id,
                    });
                }
            }
            worklist.reverse();
            let size_if_complete = (safe == shared.max_frame).then_some(shared.db_size_pages);
            (worklist, shared.epoch, start, size_if_complete)
        };
        let mut db_file_truncated_to_pages = None;
        let mut counts = BackfillCounts::default();
        let mut copy_duration = Duration::ZERO;
        let mut wal_sync_duration = Duration::ZERO;
        let mut db_sync_duration = Duration::ZERO;
        if !worklist.is_empty() {
            let wal_sync_started = Instant::now();
            // Step 4.
            crate::fail_point::step("checkpoint:before_wal_fsync");
            inner
                .wal_file
                .sync_data()
                .map_err(|e| io_error("fsync (before backfill) of", &inner.wal_path, e))?;
            wal_sync_duration = wal_sync_started.elapsed();
            if inner.options.evict_wal_from_os_cache_before_backfill {
                if let Some(fd) = inner.wal_file.raw_fd() {
                    // SAFETY: the descriptor belongs to `wal_file`, which outlives this call.
                    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                    rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::DontNeed).map_err(
                        |e| io_error("posix_fadvise(DONTNEED) of", &inner.wal_path, e.into()),
                    )?;
                }
            }
            let copy_started = Instant::now();
            counts = backfill::run(self, strategy, &worklist, epoch)?;
            copy_duration = copy_started.elapsed();
            // Step 6.
            if let Some(size_pages) = size_if_complete {
                db_file_truncated_to_pages = self.truncate_db_file(size_pages)?;
            }
            // Step 7.
            crate::fail_point::step("checkpoint:before_db_fsync");
            let db_sync_started = Instant::now();
            inner
                .db_file
                .sync_data()
                .map_err(|e| io_error("fsync (after backfill) of", &inner.db_path, e))?;
            db_sync_duration = db_sync_started.elapsed();
        }
        crate::fail_point::step("checkpoint:before_publish");
        {
            let mut shared = inner.shared.write();
            debug_assert!(safe >= backfilled_before && safe <= shared.max_frame);
            shared.backfilled_frames = safe.max(shared.backfilled_frames);
        }
        let complete = safe == max_frame;
        if mode != CheckpointMode::Passive && !complete {
            return Err(Error::Busy(format!(
                "only {safe} of {max_frame} frames could be backfilled"
            )));
        }
        let mut log_restarted = false;
        if matches!(mode, CheckpointMode::Restart | CheckpointMode::Truncate) {
            self.restart_after_checkpoint(mode, deadline)?;
            log_restarted = true;
        }
        Ok(CheckpointOutcome {
            mode,
            max_frame,
            backfilled_frames: safe,
            pages_written: counts.pages_written,
            cache_hits: counts.cache_hits,
            wal_reads: counts.wal_reads,
            wal_read_calls: counts.wal_read_calls,
            write_calls: counts.write_calls,
            log_restarted,
            db_file_truncated_to_pages,
            duration: Duration::ZERO,
            copy_duration,
            wal_sync_duration,
            db_sync_duration,
        })
    }

    /// Step 6: cuts the database file to `size_pages` pages if it is longer; returns the size
    /// if it cut. Not durable until the database fsync that follows.
    fn truncate_db_file(&self, size_pages: u32) -> Result<Option<u32>> {
        let inner = &self.inner;
        let size_bytes = u64::from(size_pages) * u64::from(inner.options.page_size_bytes);
        let length_bytes = inner
            .db_file
            .len()
            .map_err(|e| io_error("reading the size of", &inner.db_path, e))?;
        if length_bytes <= size_bytes {
            return Ok(None);
        }
        crate::fail_point::step("checkpoint:before_db_truncate");
        inner.db_file.set_len(size_bytes).map_err(|e| {
            io_error(
                format!("truncating to {size_pages} pages"),
                &inner.db_path,
                e,
            )
        })?;
        Ok(Some(size_pages))
    }

    /// Step 8: waits for WAL readers to leave, starts a new log generation, and for Truncate
    /// truncates the file. Runs with the writer lock held (blocking modes only).
    fn restart_after_checkpoint(&self, mode: CheckpointMode, deadline: Instant) -> Result<()> {
        let inner = &self.inner;
        let mut table = inner.marks.lock();
        let mut taken: Vec<usize> = Vec::new();
        loop {
            for i in 1..READ_MARK_SLOTS {
                if !taken.contains(&i) && table.try_exclusive(i) {
                    taken.push(i);
                }
            }
            if taken.len() == READ_MARK_SLOTS - 1 {
                break;
            }
            if !inner.marks.wait(&mut table, deadline) {
                for &i in &taken {
                    table.release_exclusive(i);
                }
                drop(table);
                inner.marks.notify();
                return Err(Error::Busy(
                    "readers of the WAL did not finish; the log was not restarted".into(),
                ));
            }
        }
        let result = (|| {
            let mut shared = inner.shared.write();
            restart_shared(&mut shared);
            crate::fail_point::step("checkpoint:before_restart");
            if mode == CheckpointMode::Truncate {
                inner
                    .wal_file
                    .set_len(0)
                    .map_err(|e| io_error("truncating", &inner.wal_path, e))?;
                crate::fail_point::step("checkpoint:after_truncate");
                inner
                    .wal_file
                    .sync_all()
                    .map_err(|e| io_error("fsync (after truncate) of", &inner.wal_path, e))?;
            }
            Ok(())
        })();
        for &i in &taken {
            table.slots[i].mark = UNUSED_MARK;
            table.release_exclusive(i);
        }
        drop(table);
        inner.marks.notify();
        result
    }
}
