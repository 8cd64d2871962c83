//! The public handle, [`Oplog`]: open (recover), append, flush, truncate, replay, close.
//!
//! Appenders only touch memory: under the state lock they take the next LSN and encode their
//! frame at the end of the shared queue, so LSN order and queue order are the same by
//! construction. All file writes happen on the I/O thread (`io_thread.rs`).

use crate::backend::{self, BackendKind};
use crate::error::{OplogError, Result};
use crate::format::{frame_bytes, SEGMENT_HEADER_BYTES};
use crate::io_thread::{ActiveSegment, IoThread};
use crate::recovery::{self, sync_dir, Repair, TornTail};
use crate::replay::Replay;
use crate::shared::{Callback, Shared, State};
use crate::sync::{AtomicU64, Condvar, JoinHandle, Mutex};
use crate::ticket::AppendTicket;
use crate::Config;
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

/// What [`Oplog::truncate_through`] deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TruncateReport {
    /// Segment files deleted.
    pub segments_deleted: usize,
    /// Their total size.
    pub bytes_deleted: u64,
    /// The oldest LSN still in the log afterwards.
    pub oldest_lsn: u64,
}

/// Counters since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Group writes (each one vectored write).
    pub groups_written: u64,
    /// Data syncs (`fdatasync` or io_uring `Fsync(DATASYNC)`), roll syncs included.
    pub syncs: u64,
    /// Records written.
    pub records_written: u64,
}

/// An open operation log. Cheap to share between threads by reference (`&Oplog` is `Sync`).
pub struct Oplog {
    shared: Arc<Shared>,
    io_thread: Option<JoinHandle<()>>,
    backend: BackendKind,
    /// Holds an exclusive `flock` on `<dir>/LOCK` for the life of the handle (released after the
    /// I/O thread stopped, since fields drop after `Drop::drop`).
    _lock_file: std::fs::File,
}

impl std::fmt::Debug for Oplog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oplog")
            .field("dir", &self.shared.dir)
            .field("backend", &self.backend)
            .finish()
    }
}

impl Oplog {
    /// Opens (creating if needed) the log in `dir`: validates every segment, drops a torn tail,
    /// fails on corruption (or truncates there with `repair`), probes the backend and starts the
    /// I/O thread.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<(Oplog, OpenReport)> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let created = !dir.exists();
        std::fs::create_dir_all(&dir).map_err(|e| {
            OplogError::io(format!("creating oplog directory {}", dir.display()), e)
        })?;
        if created {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        let lock_file = lock_directory(&dir)?;
        let backend = backend::select(config.backend).map_err(OplogError::BackendUnavailable)?;
        let recovered = recovery::recover(&dir, config.max_record_bytes, config.repair)?;
        let last = recovered
            .segments
            .last()
            .expect("recovery leaves at least one segment")
            .clone();
        let active = ActiveSegment::open(&last, recovered.last_segment_bytes)?;
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
            }),
            work_ready: Condvar::new(),
            space_freed: Condvar::new(),
            progress: Condvar::new(),
            segments: Mutex::new(recovered.segments),
            dir,
            policy: config.policy,
            max_record_bytes: config.max_record_bytes,
            queue_capacity_bytes: config.queue_capacity_bytes,
            segment_bytes: config.segment_bytes,
            durable_lsn: AtomicU64::new(written),
            written_lsn: AtomicU64::new(written),
            groups_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
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
        let io_thread = crate::sync::spawn("oplog-io", move || io.run())
            .map_err(|e| OplogError::io("spawning the oplog I/O thread", e))?;
        tracing::info!(dir = %shared.dir.display(), next_lsn = report.next_lsn, segments = report.segments,
            backend = kind.name(), policy = ?config.policy, "oplog opened");
        Ok((
            Oplog {
                shared,
                io_thread: Some(io_thread),
                backend: kind,
                _lock_file: lock_file,
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
            return Err(OplogError::RecordTooLarge {
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
        crate::format::encode_frame(lsn, payload, &mut state.queue);
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
            records_written: self.shared.records_written.load(Ordering::Relaxed),
        }
    }

    /// Deletes every segment all of whose records have LSN `<= lsn` (call it once a checkpoint
    /// covers `lsn`). The segment being appended to is never deleted, so records of it below
    /// `lsn` remain until it is full. Oldest files go first, so a crash midway leaves a dense
    /// suffix of the log.
    pub fn truncate_through(&self, lsn: u64) -> Result<TruncateReport> {
        let mut segments = self.shared.segments.lock();
        let mut deletable = 0;
        while deletable + 1 < segments.len()
            && segments[deletable + 1].first_lsn <= lsn.saturating_add(1)
        {
            deletable += 1;
        }
        let mut bytes_deleted = 0;
        for segment in &segments[..deletable] {
            bytes_deleted += std::fs::metadata(&segment.path)
                .map(|m| m.len())
                .unwrap_or(0);
            std::fs::remove_file(&segment.path).map_err(|e| {
                OplogError::io(
                    format!("deleting oplog segment {}", segment.path.display()),
                    e,
                )
            })?;
        }
        segments.drain(..deletable);
        let oldest_lsn = segments[0].first_lsn;
        drop(segments);
        if deletable > 0 {
            sync_dir(&self.shared.dir)?;
        }
        Ok(TruncateReport {
            segments_deleted: deletable,
            bytes_deleted,
            oldest_lsn,
        })
    }

    /// Replays records with LSN `>= from_lsn` that were written when this call was made, in LSN
    /// order. Fails with [`OplogError::Truncated`] if `from_lsn` was truncated away.
    pub fn replay(&self, from_lsn: u64) -> Result<Replay> {
        let through = self.written_lsn();
        let segments = self.shared.segments.lock().clone();
        Replay::new(segments, from_lsn, through, self.shared.max_record_bytes)
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
            return Err(OplogError::Failed("the oplog I/O thread panicked".into()));
        }
        match &self.shared.state.lock().failure {
            Some(message) => Err(Shared::failed(message)),
            None => Ok(()),
        }
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

/// Takes an exclusive advisory lock on `<dir>/LOCK`, so that two handles (in this process or
/// another) never append to the same log. The kernel drops the lock when the holder dies.
fn lock_directory(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| OplogError::io(format!("opening the lock file {}", path.display()), e))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(OplogError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(e) => Err(OplogError::io(
            format!("locking {}", path.display()),
            e.into(),
        )),
    }
}

impl Drop for Oplog {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            tracing::warn!(%error, "oplog closed with an error");
        }
    }
}

const _: () = assert!(SEGMENT_HEADER_BYTES == 32);
