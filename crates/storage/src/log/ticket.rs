//! Append tickets: the handle an appender waits on (blocking or as a future) until its record is
//! complete under the log's policy (durable for `always`, written for `everysec` and `none`).

use super::error::Result;
use super::shared::Shared;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The handle of one append. Completion fires in LSN order; dropping a ticket does not cancel
/// the append.
#[must_use = "an append is only acknowledged once its ticket completes"]
pub struct AppendTicket {
    pub(crate) lsn: u64,
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for AppendTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendTicket")
            .field("lsn", &self.lsn)
            .finish()
    }
}

impl AppendTicket {
    /// The record's log sequence number (assigned at append time).
    pub fn lsn(&self) -> u64 {
        self.lsn
    }

    /// Has the record completed? (Does not report failure; `wait` does.)
    pub fn is_complete(&self) -> bool {
        self.shared.state.lock().completed_lsn >= self.lsn
    }

    /// Blocks until the record completes; returns its LSN, or the log's failure.
    pub fn wait(&self) -> Result<u64> {
        let mut state = self.shared.state.lock();
        loop {
            if state.completed_lsn >= self.lsn {
                return Ok(self.lsn);
            }
            if let Some(message) = &state.failure {
                return Err(Shared::failed(message));
            }
            state = self.shared.progress.wait(state);
        }
    }

    /// Like [`AppendTicket::wait`], but gives up after `timeout` and returns `Ok(None)`.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<Option<u64>> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock();
        loop {
            if state.completed_lsn >= self.lsn {
                return Ok(Some(self.lsn));
            }
            if let Some(message) = &state.failure {
                return Err(Shared::failed(message));
            }
            let (guard, timed_out) = self.shared.progress.wait_until(state, deadline);
            state = guard;
            if timed_out {
                return Ok((state.completed_lsn >= self.lsn).then_some(self.lsn));
            }
        }
    }
}

/// Resolves to the LSN once the record completes (any executor; the I/O thread wakes it).
impl Future for AppendTicket {
    type Output = Result<u64>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.state.lock();
        if state.completed_lsn >= self.lsn {
            return Poll::Ready(Ok(self.lsn));
        }
        if let Some(message) = &state.failure {
            return Poll::Ready(Err(Shared::failed(message)));
        }
        // Replace this ticket's earlier waker rather than piling up one per poll.
        let lsn = self.lsn;
        match state
            .wakers
            .iter_mut()
            .find(|(l, w)| *l == lsn && w.will_wake(context.waker()))
        {
            Some(_) => {}
            None => state.wakers.push((lsn, context.waker().clone())),
        }
        Poll::Pending
    }
}
