//! The public handle, [`Log`]: open (recover), append, flush, truncate (either end), replay, close.
//!
//! Appenders only touch memory: under the state lock they take the next LSN and encode their
//! frame at the end of the shared queue, so LSN order and queue order are the same by
//! construction. All file writes happen on the I/O thread (`io_thread.rs`).

use super::backend::{self, BackendKind};
use super::error::{LogError, Result};
use super::format::{frame_bytes, SEGMENT_HEADER_BYTES};
use super::io_thread::{ActiveSegment, IoThread};
use super::recovery::{self, sync_dir, Repair, TornTail};
use super::replay::Replay;
use super::shared::{Callback, Shared, State};
use super::sync::{AtomicU64, Condvar, JoinHandle, Mutex};
use super::ticket::AppendTicket;
use super::LogConfig;
use crate::io::Disk;
use crate::lock::{DirLock, LockError};
use crate::real::real_disk;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// What opening the log found and did.
#[derive(Debug, Clone)]
pub struct OpenReport {
    /// A torn record at the end of the last segment that was dropped (the file was truncated
    /// there before any new append).
    pub torn_tail: Option<TornTail>,
    /// What `repair: true` cut away, if it had to.
    pub repair: Option<Repair>,
    /// Segment files after recovery.
    pub segments: usize,
    /// Valid records found.
    pub records: u64,
    /// The oldest LSN still in the log (equal to `next_lsn` when the log holds no record).
    pub oldest_lsn: u64,
    /// The LSN the next append gets.
    pub next_lsn: u64,
    /// The backend in use.
    pub backend: BackendKind,
}

/// What [`Log::truncate_through`] or [`Log::truncate_after`] deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TruncateReport {
    /// Segment files deleted.
    pub segments_deleted: usize,
    /// Their total size.
    pub bytes_deleted: u64,
    /// The oldest LSN still in the log afterwards.
    pub oldest_lsn: u64,
    /// Records removed from the end ([`Log::truncate_after`] only).
    pub records_removed: u64,
}

/// Counters since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Group writes (each one vectored write).
    pub groups_written: u64,
    /// Data syncs (`fdatasync` or io_uring `Fsync(DATASYNC)`), roll syncs included.
    pub syncs: u64,
    /// Time spent in the calls that made data durable: the sync, or the write that carried it
    /// (io_uring links them); divided by `syncs`, the mean sync latency.
    pub sync_time: std::time::Duration,
    /// Records written.
    pub records_written: u64,
}

/// An open log. Cheap to share between threads by reference (`&Log` is `Sync`).
pub struct Log {
    shared: Arc<Shared>,
    io_thread: Option<JoinHandle<()>>,
    backend: BackendKind,
    /// The directory lock for the life of the handle (released after the I/O thread stopped,
    /// since fields drop after `Drop::drop`).
    _lock: DirLock,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.shared.dir)
            .field("backend", &self.backend)
            .finish()
    }
}

impl Log {
    /// Opens (creating if needed) the log in `dir` on the real disk: validates every segment,
    /// drops a torn tail, fails on corruption (or truncates there with `repair`), probes the
    /// backend and starts the I/O thread.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<(Log, OpenReport)> {
        Log::open_on(real_disk(), dir, config)
    }

    /// [`Log::open`] on `disk` (the simulated disk in power-cut tests).
    pub fn open_on(
        disk: Arc<dyn Disk>,
        dir: impl AsRef<Path>,
        config: LogConfig,
    ) -> Result<(Log, OpenReport)> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        crate::durable::create_dir_all_durably(&*disk, &dir)
            .map_err(|e| LogError::io(format!("creating log directory {}", dir.display()), e))?;
        let lock = DirLock::acquire(&*disk, &dir).map_err(|error| match error {
            LockError::Held { dir } => LogError::Locked { dir },
            LockError::Io { dir, source } => {
                LogError::io(format!("locking log directory {}", dir.display()), source)
            }
        })?;
        let backend =
            backend::select(config.backend, disk.kind()).map_err(LogError::BackendUnavailable)?;
        let recovered = recovery::recover(
            &*disk,
            &dir,
            config.max_record_bytes,
            config.repair,
            config.first_lsn,
        )?;
        let last = recovered
            .segments
            .last()
            .expect("recovery leaves at least one segment")
            .clone();
        let active = ActiveSegment::open(&*disk, &last, recovered.last_segment_bytes)?;
        let written = recovered.next_lsn - 1;
        let report = OpenReport {
            torn_tail: recovered.torn_tail,
            repair: recovered.repair,
            segments: recovered.segments.len(),
            records: recovered.records,
            oldest_lsn: recovered.segments[0].first_lsn,
            next_lsn: recovered.next_lsn,
            backend: backend.kind(),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_lsn: recovered.next_lsn,
                queue: Vec::new(),
                queue_record_ends: Vec::new(),
                queue_first_lsn: recovered.next_lsn,
                outstanding_bytes: 0,
                written_lsn: written,
                // Everything recovery found was read back from the file; recovery synced any
                // truncation, and the records themselves are treated as durable from here on.
                durable_lsn: written,
                completed_lsn: written,
                sync_wanted_through: 0,
                wakers: Vec::new(),
                callbacks: Vec::new(),
                failure: None,
                shutdown: false,
                paused: false,
                truncate_request: None,
                truncate_done: None,
            }),
            work_ready: Condvar::new(),
            space_freed: Condvar::new(),
            progress: Condvar::new(),
            failed: AtomicU64::new(0),
            segments: Mutex::new(recovered.segments),
            maintenance: Mutex::new(()),
            disk,
            dir,
            policy: config.policy,
            max_record_bytes: config.max_record_bytes,
            queue_capacity_bytes: config.queue_capacity_bytes,
            segment_bytes: config.segment_bytes,
            durable_lsn: AtomicU64::new(written),
            written_lsn: AtomicU64::new(written),
            groups_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            sync_nanos: AtomicU64::new(0),
            records_written: AtomicU64::new(0),
        });
        let kind = backend.kind();
        let io = IoThread {
            shared: Arc::clone(&shared),
            backend,
            active,
            last_sync: Instant::now(),
            spare_queue: Vec::new(),
            spare_ends: Vec::new(),
        };
        let io_thread = super::sync::spawn("log-io", move || io.run())
            .map_err(|e| LogError::io("spawning the log I/O thread", e))?;
        tracing::info!(dir = %shared.dir.display(), next_lsn = report.next_lsn, segments = report.segments,
            backend = kind.name(), policy = ?config.policy, disk = shared.disk.kind(), "log opened");
        Ok((
            Log {
                shared,
                io_thread: Some(io_thread),
                backend: kind,
                _lock: lock,
            },
            report,
        ))
    }

    /// Queues `payload` and returns its ticket; blocks while the queue is full.
    pub fn append(&self, payload: &[u8]) -> Result<AppendTicket> {
        let lsn = self.enqueue(payload)?;
        Ok(AppendTicket {
            lsn,
            shared: Arc::clone(&self.shared),
        })
    }

    /// Queues `payload` and calls `callback` with its LSN once it completes (or with the log's
    /// failure). The callback runs on the I/O thread (or right here if already complete), so it
    /// must be short and must not append to this log while the queue could be full.
    pub fn append_with_callback(&self, payload: &[u8], callback: Callback) -> Result<u64> {
        let lsn = self.enqueue(payload)?;
        let mut state = self.shared.state.lock();
        if state.completed_lsn >= lsn {
            drop(state);
            callback(Ok(lsn));
        } else if let Some(message) = state.failure.clone() {
            drop(state);
            callback(Err(Shared::failed(&message)));
        } else {
            state.callbacks.push((lsn, callback));
        }
        Ok(lsn)
    }

    fn enqueue(&self, payload: &[u8]) -> Result<u64> {
        if payload.len() > self.shared.max_record_bytes as usize {
            return Err(LogError::RecordTooLarge {
                bytes: payload.len(),
                max_record_bytes: self.shared.max_record_bytes,
            });
        }
        let frame = frame_bytes(payload.len());
        let mut state = self.shared.state.lock();
        loop {
            if let Some(message) = &state.failure {
                return Err(Shared::failed(message));
            }
            if state.shutdown {
                return Err(Shared::failed("the log is closing"));
            }
            if state.paused {
                state = self.shared.space_freed.wait(state);
                continue;
            }
            if state.outstanding_bytes == 0
                || state.outstanding_bytes + frame <= self.shared.queue_capacity_bytes
            {
                break;
            }
            state = self.shared.space_freed.wait(state);
        }
        let lsn = state.next_lsn;
        state.next_lsn += 1;
        let was_empty = state.queue.is_empty();
        super::format::encode_frame(lsn, payload, &mut state.queue);
        let end = state.queue.len();
        state.queue_record_ends.push(end);
        state.outstanding_bytes += frame;
        debug_assert_eq!(
            state.queue_first_lsn + state.queue_record_ends.len() as u64,
            state.next_lsn
        );
        drop(state);
        if was_empty {
            self.shared.work_ready.notify_one();
        }
        Ok(lsn)
    }

    /// Makes every record appended before this call durable, whatever the policy; returns the
    /// LSN it waited for (0 when the log is empty).
    pub fn flush_and_sync(&self) -> Result<u64> {
        let mut state = self.shared.state.lock();
        let target = state.next_lsn - 1;
        if state.sync_wanted_through < target {
            state.sync_wanted_through = target;
        }
        self.shared.work_ready.notify_one();
        loop {
            if state.durable_lsn >= target {
                return Ok(target);
            }
            if let Some(message) = &state.failure {
                return Err(Shared::failed(message));
            }
            state = self.shared.progress.wait(state);
        }
    }

    /// The highest LSN known to be durable (0: none).
    pub fn durable_lsn(&self) -> u64 {
        self.shared.durable_lsn.load(Ordering::Acquire)
    }

    /// The highest LSN written to the file (perhaps not yet durable).
    pub fn written_lsn(&self) -> u64 {
        self.shared.written_lsn.load(Ordering::Acquire)
    }

    /// The LSN the next append will get.
    pub fn next_lsn(&self) -> u64 {
        self.shared.state.lock().next_lsn
    }

    /// The oldest LSN still in the log.
    pub fn oldest_lsn(&self) -> u64 {
        self.shared.segments.lock()[0].first_lsn
    }

    /// The backend in use.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Counters since open.
    pub fn stats(&self) -> Stats {
        Stats {
            groups_written: self.shared.groups_written.load(Ordering::Relaxed),
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            sync_time: std::time::Duration::from_nanos(
                self.shared.sync_nanos.load(Ordering::Relaxed),
            ),
            records_written: self.shared.records_written.load(Ordering::Relaxed),
        }
    }

    /// Deletes every segment all of whose records have LSN `<= lsn` (call it once a checkpoint
    /// covers `lsn`). The segment being appended to is never deleted, so records of it below
    /// `lsn` remain until it is full. Oldest files go first, so a crash midway leaves a dense
    /// suffix of the log.
    pub fn truncate_through(&self, lsn: u64) -> Result<TruncateReport> {
        let _maintenance = self.shared.maintenance.lock();
        let disk = &*self.shared.disk;
        let mut segments = self.shared.segments.lock();
        let mut deletable = 0;
        while deletable + 1 < segments.len()
            && segments[deletable + 1].first_lsn <= lsn.saturating_add(1)
        {
            deletable += 1;
        }
        let mut bytes_deleted = 0;
        for segment in &segments[..deletable] {
            bytes_deleted += disk.metadata(&segment.path).map(|m| m.len).unwrap_or(0);
            disk.remove_file(&segment.path).map_err(|e| {
                LogError::io(
                    format!("deleting log segment {}", segment.path.display()),
                    e,
                )
            })?;
        }
        segments.drain(..deletable);
        let oldest_lsn = segments[0].first_lsn;
        drop(segments);
        if deletable > 0 {
            sync_dir(disk, &self.shared.dir)?;
        }
        Ok(TruncateReport {
            segments_deleted: deletable,
            bytes_deleted,
            oldest_lsn,
            records_removed: 0,
        })
    }

    /// Removes every record with LSN above `lsn` (a suffix: Raft's conflicting entries), durably,
    /// before it returns; the next append gets `lsn + 1`. Appends wait meanwhile; records queued
    /// before the call are written first and then removed if above `lsn`. `lsn` must be at least
    /// `oldest_lsn() - 1`. Tickets of removed records must not be waited on afterwards (their
    /// LSNs are reused). A failure fails the log (fail-stop), like a failed append.
    pub fn truncate_after(&self, lsn: u64) -> Result<TruncateReport> {
        let _maintenance = self.shared.maintenance.lock();
        let oldest = self.oldest_lsn();
        if lsn.saturating_add(1) < oldest {
            return Err(LogError::Truncated {
                requested: lsn.saturating_add(1),
                oldest_retained: oldest,
            });
        }
        let mut state = self.shared.state.lock();
        if let Some(message) = &state.failure {
            return Err(Shared::failed(message));
        }
        if lsn + 1 >= state.next_lsn {
            return Ok(TruncateReport {
                oldest_lsn: oldest,
                ..TruncateReport::default()
            });
        }
        let removed = state.next_lsn - 1 - lsn;
        state.paused = true;
        state.truncate_request = Some(lsn);
        state.truncate_done = None;
        self.shared.work_ready.notify_one();
        let outcome = loop {
            if let Some(outcome) = state.truncate_done.take() {
                break outcome;
            }
            if let Some(message) = &state.failure {
                break Err(message.clone());
            }
            state = self.shared.progress.wait(state);
        };
        state.paused = false;
        state.truncate_request = None;
        drop(state);
        self.shared.space_freed.notify_all();
        let (segments_deleted, bytes_deleted) =
            outcome.map_err(|message| Shared::failed(&message))?;
        Ok(TruncateReport {
            segments_deleted,
            bytes_deleted,
            oldest_lsn: self.oldest_lsn(),
            records_removed: removed,
        })
    }

    /// Replays records with LSN `>= from_lsn` that were written when this call was made, in LSN
    /// order. Fails with [`LogError::Truncated`] if `from_lsn` was truncated away.
    pub fn replay(&self, from_lsn: u64) -> Result<Replay> {
        let through = self.written_lsn();
        let segments = self.shared.segments.lock().clone();
        Replay::new(
            Arc::clone(&self.shared.disk),
            segments,
            from_lsn,
            through,
            self.shared.max_record_bytes,
        )
    }

    /// Writes and syncs everything queued, stops the I/O thread, and reports its failure if it
    /// had one.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(handle) = self.io_thread.take() else {
            return Ok(());
        };
        self.shared.state.lock().shutdown = true;
        self.shared.work_ready.notify_all();
        if handle.join().is_err() {
            return Err(LogError::Failed("the log I/O thread panicked".into()));
        }
        match &self.shared.state.lock().failure {
            Some(message) => Err(Shared::failed(message)),
            None => Ok(()),
        }
    }

    /// Why the log failed, if it did: the failure is sticky (no append is accepted after it, and
    /// no failed sync is ever retried), so an owner that wants to write again must make what the
    /// log held durable elsewhere (a checkpoint) and start a new log.
    pub fn failure(&self) -> Option<String> {
        self.shared.state.lock().failure.clone()
    }

    /// Whether the log has failed ([`Log::failure`] says why), without taking its lock: an owner
    /// can refuse a write before doing any of it.
    pub fn has_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire) != 0
    }

    /// Paths of the current segment files, oldest first.
    pub fn segment_paths(&self) -> Vec<PathBuf> {
        self.shared
            .segments
            .lock()
            .iter()
            .map(|s| s.path.clone())
            .collect()
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            tracing::warn!(%error, "log closed with an error");
        }
    }
}

const _: () = assert!(SEGMENT_HEADER_BYTES == 32);
