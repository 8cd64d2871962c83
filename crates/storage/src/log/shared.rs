//! State shared between appenders, waiters and the I/O thread.
//!
//! Invariants (all under `Shared::state`):
//! - `queue` holds the frames of LSNs `queue_first_lsn .. next_lsn`, back to back, and
//!   `queue_record_ends[i]` is the end offset of the frame of `queue_first_lsn + i`.
//! - `durable_lsn <= written_lsn < next_lsn`, and `completed_lsn` is `durable_lsn` under the
//!   `always` policy and `written_lsn` otherwise. All three only grow.
//! - `outstanding_bytes` counts the frames in `queue` plus the group the I/O thread is writing;
//!   appenders block while adding a frame would exceed `queue_capacity_bytes` (unless nothing is
//!   outstanding, so that one record larger than the capacity can still pass alone).
//! - Completion is a watermark: LSNs complete in order, so a ticket is complete exactly when
//!   `completed_lsn >= lsn`. Wakers and callbacks are kept only for incomplete LSNs.
//! - `failure` is sticky: once set, no append is accepted and every waiter gets the error.
//! - While `paused` (a suffix truncation is running) no append is accepted; the I/O thread runs
//!   `truncate_request` only once the queue is empty, and answers in `truncate_done`.

use super::error::{LogError, Result};
use super::recovery::SegmentMeta;
use super::sync::{AtomicU64, Condvar, Mutex};
use super::SyncPolicy;
use crate::io::Disk;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Waker;

/// A completion callback: called once with the record's LSN, or the log's failure.
pub type Callback = Box<dyn FnOnce(Result<u64>) + Send + 'static>;

pub(crate) struct State {
    pub next_lsn: u64,
    pub queue: Vec<u8>,
    pub queue_record_ends: Vec<usize>,
    pub queue_first_lsn: u64,
    pub outstanding_bytes: usize,
    pub written_lsn: u64,
    pub durable_lsn: u64,
    pub completed_lsn: u64,
    /// `flush_and_sync` callers want everything up to here durable.
    pub sync_wanted_through: u64,
    pub wakers: Vec<(u64, Waker)>,
    pub callbacks: Vec<(u64, Callback)>,
    pub failure: Option<String>,
    pub shutdown: bool,
    pub paused: bool,
    /// `truncate_after(lsn)` asked the I/O thread to remove records above this LSN.
    pub truncate_request: Option<u64>,
    /// The I/O thread's answer: (segments deleted, bytes deleted) or the failure.
    pub truncate_done: Option<std::result::Result<(usize, u64), String>>,
}

pub(crate) struct Shared {
    pub state: Mutex<State>,
    /// The I/O thread waits here for work.
    pub work_ready: Condvar,
    /// Appenders wait here for queue space.
    pub space_freed: Condvar,
    /// Ticket and flush waiters wait here for the watermarks to move.
    pub progress: Condvar,
    /// Segments in LSN order; the last is the one being appended to.
    pub segments: Mutex<Vec<SegmentMeta>>,
    /// Serialises the two truncations (prefix and suffix) against each other.
    pub maintenance: Mutex<()>,
    pub disk: Arc<dyn Disk>,
    pub dir: PathBuf,
    pub policy: SyncPolicy,
    pub max_record_bytes: u32,
    pub queue_capacity_bytes: usize,
    pub segment_bytes: u64,
    /// Mirrors of the state's watermarks, readable without the lock.
    pub durable_lsn: AtomicU64,
    pub written_lsn: AtomicU64,
    /// Counters for reports: group writes, data syncs, records written.
    pub groups_written: AtomicU64,
    pub syncs: AtomicU64,
    /// Nanoseconds spent in the calls that made data durable (see `Stats::sync_time`).
    pub sync_nanos: AtomicU64,
    pub records_written: AtomicU64,
    /// 1 once `state.failure` is set (never cleared): a check without the state lock.
    pub failed: AtomicU64,
}

impl Shared {
    pub(crate) fn failed(message: &str) -> LogError {
        LogError::Failed(message.to_string())
    }

    /// Moves the watermarks forward after a successful group write and wakes whoever waits for
    /// them. Wakers and callbacks run after the lock is released.
    pub(crate) fn publish(&self, written_lsn: u64, durable_lsn: u64, freed_bytes: usize) {
        let (wakers, callbacks, completed) = {
            let mut state = self.state.lock();
            debug_assert!(written_lsn >= state.written_lsn && durable_lsn >= state.durable_lsn);
            debug_assert!(durable_lsn <= written_lsn && written_lsn < state.next_lsn);
            state.written_lsn = written_lsn;
            state.durable_lsn = durable_lsn;
            state.completed_lsn = match self.policy {
                SyncPolicy::Always => durable_lsn,
                SyncPolicy::EverySec | SyncPolicy::None => written_lsn,
            };
            debug_assert!(state.outstanding_bytes >= freed_bytes);
            state.outstanding_bytes -= freed_bytes;
            self.written_lsn.store(written_lsn, Ordering::Release);
            self.durable_lsn.store(durable_lsn, Ordering::Release);
            let completed = state.completed_lsn;
            let wakers = drain_completed(&mut state.wakers, completed);
            let callbacks = drain_completed(&mut state.callbacks, completed);
            (wakers, callbacks, completed)
        };
        self.progress.notify_all();
        self.space_freed.notify_all();
        for (_, waker) in wakers {
            waker.wake();
        }
        for (lsn, callback) in callbacks {
            debug_assert!(lsn <= completed);
            callback(Ok(lsn));
        }
    }

    /// Marks the log failed and fails every waiter.
    pub(crate) fn fail(&self, message: String) {
        tracing::error!(dir = %self.dir.display(), error = %message, "log I/O thread failed; the log accepts no more appends");
        let (wakers, callbacks) = {
            let mut state = self.state.lock();
            state.failure.get_or_insert(message.clone());
            self.failed.store(1, Ordering::Release);
            (
                std::mem::take(&mut state.wakers),
                std::mem::take(&mut state.callbacks),
            )
        };
        self.progress.notify_all();
        self.space_freed.notify_all();
        self.work_ready.notify_all();
        for (_, waker) in wakers {
            waker.wake();
        }
        for (_, callback) in callbacks {
            callback(Err(Shared::failed(&message)));
        }
    }
}

fn drain_completed<T>(items: &mut Vec<(u64, T)>, completed: u64) -> Vec<(u64, T)> {
    let mut done = Vec::new();
    let mut index = 0;
    while index < items.len() {
        if items[index].0 <= completed {
            done.push(items.swap_remove(index));
        } else {
            index += 1;
        }
    }
    done
}
