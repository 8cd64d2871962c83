//! [`SessionBatcher`]: groups a session's operations per worker into batches.
//!
//! Operations wait in a per-worker buffer; a buffer becomes a batch when it holds
//! `max_batch_operations` or on [`SessionBatcher::flush`]. Sequence numbers are assigned when a
//! batch is issued (so they follow issue order, which is the order that matters for dependencies).
//! While the session's window is full, buffers stay buffered; callers apply back-pressure with
//! [`SessionBatcher::buffered_operations`].

use std::collections::BTreeMap;

use super::{BatchTicket, DprSession, SessionError};
use crate::header::DprHeader;
use crate::WorkerId;

/// A batch ready to send: header, ticket (hand it back with the response) and the operations.
#[derive(Debug)]
pub struct ReadyBatch<Operation> {
    /// Header to send with the batch.
    pub header: DprHeader,
    /// The session's ticket for it.
    pub ticket: BatchTicket,
    /// The operations, in sequence order.
    pub operations: Vec<Operation>,
}

/// Per-worker operation buffers for one session.
pub struct SessionBatcher<Operation> {
    max_batch_operations: usize,
    buffers: BTreeMap<WorkerId, Vec<Operation>>,
}

impl<Operation> SessionBatcher<Operation> {
    /// Batches of at most `max_batch_operations` (at least 1) operations.
    pub fn new(max_batch_operations: usize) -> Self {
        Self {
            max_batch_operations: max_batch_operations.max(1),
            buffers: BTreeMap::new(),
        }
    }

    /// Operations buffered and not yet issued.
    pub fn buffered_operations(&self) -> usize {
        self.buffers.values().map(Vec::len).sum()
    }

    /// Buffers `operation` for `worker`; returns the batch if the buffer filled up and the window
    /// had room.
    pub fn push(
        &mut self,
        session: &mut DprSession,
        worker: WorkerId,
        operation: Operation,
    ) -> Option<ReadyBatch<Operation>> {
        let buffer = self.buffers.entry(worker).or_default();
        buffer.push(operation);
        if buffer.len() < self.max_batch_operations {
            return None;
        }
        self.issue(session, worker)
    }

    /// Issues every non-empty buffer the window has room for, lowest worker id first.
    pub fn flush(&mut self, session: &mut DprSession) -> Vec<ReadyBatch<Operation>> {
        let workers: Vec<WorkerId> = self
            .buffers
            .iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(w, _)| *w)
            .collect();
        workers
            .into_iter()
            .map_while(|worker| self.issue(session, worker))
            .collect()
    }

    fn issue(
        &mut self,
        session: &mut DprSession,
        worker: WorkerId,
    ) -> Option<ReadyBatch<Operation>> {
        let buffer = self.buffers.get_mut(&worker)?;
        let take = buffer.len().min(self.max_batch_operations);
        match session.issue_batch(worker, take as u64) {
            Ok((header, ticket)) => {
                let operations: Vec<Operation> = buffer.drain(..take).collect();
                debug_assert_eq!(
                    operations.len() as u64,
                    ticket.sequences.end - ticket.sequences.start
                );
                Some(ReadyBatch {
                    header,
                    ticket,
                    operations,
                })
            }
            Err(SessionError::WindowFull { .. }) => None,
            Err(error) => unreachable!("issue_batch with {take} > 0 operations failed: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_fill_per_worker_and_respect_the_window() {
        let mut session = DprSession::new(1, 0, 2);
        let mut batcher = SessionBatcher::new(3);
        assert!(batcher.push(&mut session, 7, "a").is_none());
        assert!(batcher.push(&mut session, 8, "x").is_none());
        assert!(batcher.push(&mut session, 7, "b").is_none());
        let first = batcher
            .push(&mut session, 7, "c")
            .expect("full buffer issues");
        assert_eq!(first.operations, vec!["a", "b", "c"]);
        assert_eq!(
            (first.ticket.sequences.start, first.ticket.sequences.end),
            (0, 3)
        );
        let flushed = batcher.flush(&mut session);
        assert_eq!(flushed.len(), 1);
        assert_eq!(flushed[0].operations, vec!["x"]);
        // The window (2) is full now: further batches stay buffered.
        for op in ["d", "e", "f", "g"] {
            assert!(batcher.push(&mut session, 7, op).is_none());
        }
        assert_eq!(batcher.buffered_operations(), 4);
        assert!(batcher.flush(&mut session).is_empty());
    }
}
