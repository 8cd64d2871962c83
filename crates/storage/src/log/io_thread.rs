//! The single I/O thread: takes everything queued as one group, writes it with one vectored
//! write, and (policy permitting) makes it durable with one data sync: group commit.
//!
//! Ordering, and why it is safe:
//! 1. A group's bytes are written at the end of the active segment, then synced (linked on
//!    io_uring, so the sync starts only after the write completed). Only after the sync returns
//!    does `durable_lsn` move, and only then do `always` completions fire. A crash before that
//!    point loses at most records whose completion never fired.
//! 2. Rolling to a new segment first syncs the old one, then creates the new file, writes and
//!    syncs its header, and syncs the directory, before any record is written to it. Hence at
//!    any instant every segment but the last is complete and durable, which is what lets
//!    recovery treat damage in earlier segments as corruption rather than a torn write.
//! 3. Groups are written in LSN order, one at a time, so the bytes on disk are always a prefix
//!    of the LSN sequence plus at most one partially written group at the end.
//! 4. A failed write or sync fails the log for good (no retry: see `backend.rs`).

use super::backend::Backend;
use super::error::{LogError, Result};
use super::format::{
    encode_segment_header, segment_file_name, FrameReader, NextFrame, SEGMENT_HEADER_BYTES,
};
use super::recovery::{sync_dir, SegmentMeta};
use super::shared::Shared;
use super::SyncPolicy;
use crate::io::{Disk, DiskFile, FileReader, OpenMode};
use std::io::BufReader;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the `everysec` policy syncs written data.
pub(crate) const EVERYSEC_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) struct ActiveSegment {
    pub file: Arc<dyn DiskFile>,
    pub first_lsn: u64,
    /// Bytes of the file that hold header and complete frames (where the next write goes).
    pub length_bytes: u64,
}

impl ActiveSegment {
    pub(crate) fn open(
        disk: &dyn Disk,
        meta: &SegmentMeta,
        length_bytes: u64,
    ) -> Result<ActiveSegment> {
        let file = disk.open(&meta.path, OpenMode::ReadWrite).map_err(|e| {
            LogError::io(
                format!("opening log segment {} for appends", meta.path.display()),
                e,
            )
        })?;
        // Records a previous process wrote without syncing (policies `everysec`/`none`) are
        // about to be reported as durable: make that true.
        file.sync_data()
            .map_err(|e| LogError::io(format!("syncing log segment {}", meta.path.display()), e))?;
        Ok(ActiveSegment {
            file,
            first_lsn: meta.first_lsn,
            length_bytes,
        })
    }

    fn has_records(&self) -> bool {
        self.length_bytes > SEGMENT_HEADER_BYTES as u64
    }
}

pub(crate) struct IoThread {
    pub shared: Arc<Shared>,
    pub backend: Backend,
    pub active: ActiveSegment,
    pub last_sync: Instant,
    /// Swapped with the shared queue each group, so neither side reallocates in steady state.
    pub spare_queue: Vec<u8>,
    pub spare_ends: Vec<usize>,
}

/// What the I/O thread does next.
enum Work {
    Group(Group),
    /// Remove the records above this LSN (the queue is empty and appends are paused).
    TruncateAfter(u64),
}

/// One group taken from the queue.
struct Group {
    bytes: Vec<u8>,
    record_ends: Vec<usize>,
    first_lsn: u64,
    sync: bool,
    last: bool,
}

impl IoThread {
    pub(crate) fn run(mut self) {
        loop {
            let group = match self.take_work() {
                None => return,
                Some(Work::TruncateAfter(lsn)) => {
                    if !self.run_truncation(lsn) {
                        return;
                    }
                    continue;
                }
                Some(Work::Group(group)) => group,
            };
            let last = group.last;
            match self.write_group(&group) {
                Ok((written_lsn, durable_lsn)) => {
                    self.shared.groups_written.fetch_add(1, Ordering::Relaxed);
                    self.shared
                        .records_written
                        .fetch_add(group.record_ends.len() as u64, Ordering::Relaxed);
                    self.shared
                        .publish(written_lsn, durable_lsn, group.bytes.len());
                }
                Err(error) => {
                    self.shared.fail(error.to_string());
                    return;
                }
            }
            self.spare_queue = group.bytes;
            self.spare_queue.clear();
            self.spare_ends = group.record_ends;
            self.spare_ends.clear();
            if last {
                return;
            }
        }
    }

    /// Waits until there is something to do and takes it; `None` once the log failed.
    fn take_work(&mut self) -> Option<Work> {
        let shared = Arc::clone(&self.shared);
        let mut state = shared.state.lock();
        let (sync_requested, everysec_due) = loop {
            if state.failure.is_some() {
                return None;
            }
            if let Some(lsn) = state
                .truncate_request
                .filter(|_| state.queue.is_empty() && state.truncate_done.is_none())
            {
                state.truncate_request = None;
                return Some(Work::TruncateAfter(lsn));
            }
            let unsynced = state.written_lsn > state.durable_lsn;
            let sync_requested = state.sync_wanted_through > state.durable_lsn;
            let everysec_due = self.shared.policy == SyncPolicy::EverySec
                && unsynced
                && self.last_sync.elapsed() >= EVERYSEC_INTERVAL;
            if !state.queue.is_empty() || sync_requested || everysec_due || state.shutdown {
                break (sync_requested, everysec_due);
            }
            if self.shared.policy == SyncPolicy::EverySec && unsynced {
                let deadline = self.last_sync + EVERYSEC_INTERVAL;
                state = shared.work_ready.wait_until(state, deadline).0;
            } else {
                state = shared.work_ready.wait(state);
            }
        };
        let first_lsn = state.queue_first_lsn;
        let bytes = std::mem::replace(&mut state.queue, std::mem::take(&mut self.spare_queue));
        let record_ends = std::mem::replace(
            &mut state.queue_record_ends,
            std::mem::take(&mut self.spare_ends),
        );
        state.queue_first_lsn = state.next_lsn;
        debug_assert_eq!(first_lsn + record_ends.len() as u64, state.next_lsn);
        // After shutdown no append is accepted, so this group is the last one.
        let last = state.shutdown;
        let sync =
            self.shared.policy == SyncPolicy::Always || sync_requested || everysec_due || last;
        Some(Work::Group(Group {
            bytes,
            record_ends,
            first_lsn,
            sync,
            last,
        }))
    }

    /// Writes `group` (rolling segments as needed); returns the new (written, durable) LSNs.
    fn write_group(&mut self, group: &Group) -> Result<(u64, u64)> {
        let (mut written_lsn, mut durable_lsn) = {
            let state = self.shared.state.lock();
            (state.written_lsn, state.durable_lsn)
        };
        debug_assert_eq!(written_lsn + 1, group.first_lsn);
        let ends = &group.record_ends;
        let mut start_index = 0;
        let mut start_offset = 0;
        while start_index < ends.len() {
            let room = self
                .shared
                .segment_bytes
                .saturating_sub(self.active.length_bytes);
            let mut end_index = start_index;
            while end_index < ends.len() && (ends[end_index] - start_offset) as u64 <= room {
                end_index += 1;
            }
            if end_index == start_index {
                if self.active.has_records() {
                    self.roll(written_lsn + 1)?;
                    durable_lsn = written_lsn;
                    continue;
                }
                // A record larger than a whole segment gets a segment of its own.
                end_index = start_index + 1;
            }
            let end_offset = ends[end_index - 1];
            let bytes = &group.bytes[start_offset..end_offset];
            let is_final_run = end_index == ends.len();
            // A run that is not final is followed by a roll, which syncs this segment anyway.
            let sync = group.sync && is_final_run;
            let started = Instant::now();
            self.backend
                .write_at(&*self.active.file, self.active.length_bytes, bytes, sync)
                .map_err(|e| {
                    LogError::io(
                        format!(
                            "writing {} bytes to log segment starting at LSN {}",
                            bytes.len(),
                            self.active.first_lsn
                        ),
                        e,
                    )
                })?;
            self.active.length_bytes += bytes.len() as u64;
            written_lsn += (end_index - start_index) as u64;
            if sync {
                self.note_sync(started);
                durable_lsn = written_lsn;
            }
            start_index = end_index;
            start_offset = end_offset;
        }
        if group.sync && durable_lsn < written_lsn {
            // Nothing new to write (a flush request, or the everysec timer): sync what is there.
            self.sync_active()?;
            durable_lsn = written_lsn;
        }
        Ok((written_lsn, durable_lsn))
    }

    /// Data sync of the active segment (never retried: a failure fails the log).
    fn sync_active(&mut self) -> Result<()> {
        let started = Instant::now();
        self.backend.sync(&*self.active.file).map_err(|e| {
            LogError::io(
                format!(
                    "syncing log segment starting at LSN {}",
                    self.active.first_lsn
                ),
                e,
            )
        })?;
        self.note_sync(started);
        Ok(())
    }

    /// Counts a completed data sync; `started` is when the call that made the data durable (the
    /// sync, or a write carrying its sync) began.
    fn note_sync(&mut self, started: Instant) {
        self.last_sync = Instant::now();
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        self.shared.sync_nanos.fetch_add(
            self.last_sync.duration_since(started).as_nanos() as u64,
            Ordering::Relaxed,
        );
    }

    /// Makes the active segment durable and starts a new one whose first record is `next_lsn`.
    fn roll(&mut self, next_lsn: u64) -> Result<()> {
        self.sync_active()?;
        let path = self.shared.dir.join(segment_file_name(next_lsn));
        let disk = &*self.shared.disk;
        let file = disk
            .open(&path, OpenMode::CreateNew)
            .map_err(|e| LogError::io(format!("creating log segment {}", path.display()), e))?;
        self.backend
            .write_at(&*file, 0, &encode_segment_header(next_lsn), true)
            .map_err(|e| {
                LogError::io(
                    format!("writing the header of log segment {}", path.display()),
                    e,
                )
            })?;
        sync_dir(disk, &self.shared.dir)?;
        self.shared.segments.lock().push(SegmentMeta {
            first_lsn: next_lsn,
            path,
        });
        self.active = ActiveSegment {
            file,
            first_lsn: next_lsn,
            length_bytes: SEGMENT_HEADER_BYTES as u64,
        };
        Ok(())
    }

    /// Runs a suffix truncation and answers the waiting caller; false if the log failed.
    fn run_truncation(&mut self, lsn: u64) -> bool {
        match self.truncate_after(lsn) {
            Ok(deleted) => {
                let mut state = self.shared.state.lock();
                state.next_lsn = lsn + 1;
                state.queue_first_lsn = lsn + 1;
                state.written_lsn = lsn;
                // The kept segment was synced with its cut, and earlier ones at their roll.
                state.durable_lsn = lsn;
                state.completed_lsn = lsn;
                state.sync_wanted_through = state.sync_wanted_through.min(lsn);
                self.shared.written_lsn.store(lsn, Ordering::Release);
                self.shared.durable_lsn.store(lsn, Ordering::Release);
                state.truncate_done = Some(Ok(deleted));
                drop(state);
                self.shared.progress.notify_all();
                true
            }
            Err(error) => {
                self.shared.fail(error.to_string());
                false
            }
        }
    }

    /// Deletes the segments wholly above `lsn` (newest first, then a directory sync), then cuts
    /// the segment holding `lsn + 1` before that record and syncs it; that segment becomes the
    /// active one. A crash midway leaves a dense log that is longer than asked, never a hole.
    fn truncate_after(&mut self, lsn: u64) -> Result<(usize, u64)> {
        let disk = Arc::clone(&self.shared.disk);
        let mut segments = self.shared.segments.lock();
        // Keep every segment holding a record <= lsn, and always the first one.
        let keep = segments
            .iter()
            .rposition(|segment| segment.first_lsn <= lsn)
            .map_or(1, |index| index + 1);
        let mut bytes_deleted = 0;
        for segment in segments[keep..].iter().rev() {
            bytes_deleted += disk.metadata(&segment.path).map(|m| m.len).unwrap_or(0);
            disk.remove_file(&segment.path).map_err(|e| {
                LogError::io(
                    format!("deleting log segment {}", segment.path.display()),
                    e,
                )
            })?;
        }
        let deleted = segments.len() - keep;
        segments.truncate(keep);
        if deleted > 0 {
            sync_dir(&*disk, &self.shared.dir)?;
        }
        let kept = segments
            .last()
            .expect("the first segment is always kept")
            .clone();
        drop(segments);
        let file = if kept.first_lsn == self.active.first_lsn {
            Arc::clone(&self.active.file)
        } else {
            disk.open(&kept.path, OpenMode::ReadWrite).map_err(|e| {
                LogError::io(format!("opening log segment {}", kept.path.display()), e)
            })?
        };
        let cut = self.offset_of(&file, &kept, lsn + 1)?;
        let old_bytes = file.len().unwrap_or(cut);
        let started = Instant::now();
        file.set_len(cut)
            .and_then(|()| file.sync_all())
            .map_err(|e| {
                LogError::io(
                    format!(
                        "truncating log segment {} to {cut} bytes",
                        kept.path.display()
                    ),
                    e,
                )
            })?;
        self.note_sync(started);
        self.active = ActiveSegment {
            file,
            first_lsn: kept.first_lsn,
            length_bytes: cut,
        };
        Ok((deleted, bytes_deleted + old_bytes.saturating_sub(cut)))
    }

    /// The byte offset where record `lsn` starts in `segment` (its end, for the next LSN).
    fn offset_of(&self, file: &Arc<dyn DiskFile>, segment: &SegmentMeta, lsn: u64) -> Result<u64> {
        let reader = BufReader::new(FileReader::new(
            Arc::clone(file),
            SEGMENT_HEADER_BYTES as u64,
        ));
        let mut frames = FrameReader::new(
            reader,
            SEGMENT_HEADER_BYTES as u64,
            segment.first_lsn,
            self.shared.max_record_bytes,
        );
        while frames.next_lsn() < lsn {
            let next = frames.next_frame().map_err(|e| {
                LogError::io(format!("reading log segment {}", segment.path.display()), e)
            })?;
            if !matches!(next, NextFrame::Record { .. }) {
                return Err(LogError::Corrupt {
                    path: segment.path.clone(),
                    offset: frames.offset(),
                    reason: format!("record {} is not where the log wrote it", frames.next_lsn()),
                });
            }
        }
        Ok(frames.offset())
    }
}
