//! The client side of DPR: a session issues batches of operations to workers and learns which of
//! them are committed, or, after a failure, exactly which survived.
//!
//! Each operation gets a sequence number (0, 1, 2, ...); a batch is a run of consecutive sequence
//! numbers sent to one worker. The session keeps:
//! - `Vs`, the largest version it has seen, sent on every batch (the Lamport rule of §3.2);
//! - its dependencies: per worker, the largest version a *completed* batch ran in. A new batch
//!   depends on every batch that completed before it was issued, never on one still pending
//!   (relaxed DPR, §5.4);
//! - a window: at most `window_batches` batches pending at once;
//! - the batches not yet known committed, in sequence order.
//!
//! Commit point ([`DprSession::commit_point`]): walking batches in order, a completed batch is
//! committed iff its version is inside the cut for its worker; the prefix ends at the first
//! completed batch that is not. Pending batches before that point are excluded and listed (their
//! fate is not yet known), exactly like FASTER's `CommitPoint { until, excluded }`.
//!
//! Rollback ([`DprSession::handle_rollback`]): against the recovery cut, completed batches inside
//! it survived, completed batches outside it are lost, and pending batches are uncertain (they may
//! or may not have run inside the cut). The session then moves to the new world-line keeping only
//! the dependencies that survived, and continues numbering after the last issued sequence number.

mod batcher;

pub use batcher::{ReadyBatch, SessionBatcher};

use std::collections::{BTreeMap, VecDeque};

use crate::header::{DprHeader, HeaderKind};
use crate::{ClusterState, Version, WorkerId, WorkerVersion, WorldLine};

/// Session errors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    /// The window is full; complete a batch first.
    #[error("session {session}: {pending} batches pending, the window allows {window}")]
    WindowFull {
        /// Session id.
        session: u64,
        /// Pending batches.
        pending: usize,
        /// Window size.
        window: usize,
    },
    /// A response that does not answer a pending batch of this session.
    #[error("session {session}: response for unknown batch starting at sequence {sequence}")]
    UnknownBatch {
        /// Session id.
        session: u64,
        /// The sequence number in the response.
        sequence: u64,
    },
    /// The response header names another batch or another worker than the ticket.
    #[error("session {session}: response from worker {response_worker} for sequence {response_sequence} does not answer the batch starting at {sequence}")]
    MismatchedResponse {
        /// Session id.
        session: u64,
        /// The ticket's first sequence number.
        sequence: u64,
        /// The response's batch sequence.
        response_sequence: u64,
        /// The response's sender.
        response_worker: u64,
    },
    /// The cluster is on a newer world-line: call [`DprSession::handle_rollback`].
    #[error("session {session} is on world-line {session_world_line}, the cluster on {cluster_world_line}: handle the rollback first")]
    RollbackPending {
        /// Session id.
        session: u64,
        /// The session's world-line.
        session_world_line: WorldLine,
        /// The newer world-line.
        cluster_world_line: WorldLine,
    },
    /// `handle_rollback` was given a state that is not newer than the session's.
    #[error("session {session}: no rollback to handle (cluster world-line {cluster_world_line} is not above {session_world_line})")]
    NoRollback {
        /// Session id.
        session: u64,
        /// The session's world-line.
        session_world_line: WorldLine,
        /// The given world-line.
        cluster_world_line: WorldLine,
    },
    /// A batch must contain at least one operation.
    #[error("session {session}: empty batch")]
    EmptyBatch {
        /// Session id.
        session: u64,
    },
}

/// Sequence numbers `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceRange {
    /// First sequence number.
    pub start: u64,
    /// One past the last.
    pub end: u64,
}

/// Identifies an issued batch; hand it back with the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchTicket {
    /// The worker the batch went to.
    pub worker: WorkerId,
    /// Its operations' sequence numbers.
    pub sequences: SequenceRange,
    /// The world-line it was issued in.
    pub world_line: WorldLine,
}

/// What a response meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The batch ran in `version`.
    Executed {
        /// Version it ran in.
        version: Version,
    },
    /// The worker is on a newer world-line: fetch the cluster state and call
    /// [`DprSession::handle_rollback`].
    RollbackRequired {
        /// The worker's world-line.
        world_line: WorldLine,
    },
    /// The response belongs to a world-line the session already left; nothing to do.
    Ignored,
}

/// Which operations are durable.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CommitPoint {
    /// Every operation below this sequence number is committed, except those in `excluded`.
    pub until_sequence: u64,
    /// Operations below `until_sequence` still pending (relaxed DPR): not part of the guarantee.
    pub excluded: Vec<SequenceRange>,
}

/// What survived a rollback.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SurvivingPrefix {
    /// The new world-line the session continues on.
    pub world_line: WorldLine,
    /// Every operation below this survived, except those listed in `uncertain`; the batch
    /// starting here (if any) was lost or refused.
    pub until_sequence: u64,
    /// Completed batches that survived (including any after `until_sequence`, which ran
    /// concurrently with a lost batch and so do not depend on it).
    pub survived: Vec<SequenceRange>,
    /// Completed batches that were lost.
    pub lost: Vec<SequenceRange>,
    /// Batches pending at the failure: they may or may not be in the recovered state.
    pub uncertain: Vec<SequenceRange>,
    /// Batches a worker refused because they came from the old world-line: they did not run
    /// anywhere; resubmit them (with new sequence numbers) if still wanted.
    pub rejected: Vec<SequenceRange>,
}

#[derive(Clone, Copy, Debug)]
enum BatchStatus {
    Pending,
    Completed(Version),
}

#[derive(Clone, Copy, Debug)]
struct BatchRecord {
    worker: WorkerId,
    sequences: SequenceRange,
    status: BatchStatus,
}

/// A DPR client session. Pure bookkeeping: it does no I/O, so any transport can carry it.
pub struct DprSession {
    id: u64,
    window_batches: usize,
    world_line: WorldLine,
    seen_version: Version,
    next_sequence: u64,
    dependencies: BTreeMap<WorkerId, Version>,
    /// Batches not yet known committed, in sequence order.
    batches: VecDeque<BatchRecord>,
    pending: usize,
    /// Batches refused with a `Rollback` header since the last handled rollback.
    rejected: Vec<SequenceRange>,
    /// Everything below this is committed or excluded-and-committed-later; monotonic.
    committed_until: u64,
}

impl DprSession {
    /// A session with id `id` (unique among sessions) joining at `world_line`, allowing
    /// `window_batches` (at least 1) batches in flight.
    pub fn new(id: u64, world_line: WorldLine, window_batches: usize) -> Self {
        Self {
            id,
            window_batches: window_batches.max(1),
            world_line,
            seen_version: 0,
            next_sequence: 0,
            dependencies: BTreeMap::new(),
            batches: VecDeque::new(),
            pending: 0,
            rejected: Vec::new(),
            committed_until: 0,
        }
    }

    /// Session id.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Current world-line.
    pub fn world_line(&self) -> WorldLine {
        self.world_line
    }
    /// `Vs`.
    pub fn seen_version(&self) -> Version {
        self.seen_version
    }
    /// Batches in flight.
    pub fn pending_batches(&self) -> usize {
        self.pending
    }
    /// The next sequence number to be assigned.
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }
    /// Current dependencies (what the next batch will carry).
    pub fn dependencies(&self) -> Vec<WorkerVersion> {
        self.dependencies
            .iter()
            .map(|(&worker, &version)| WorkerVersion::new(worker, version))
            .collect()
    }

    /// Issues a batch of `operation_count` operations to `worker`: assigns sequence numbers and
    /// returns the header to send with it.
    pub fn issue_batch(
        &mut self,
        worker: WorkerId,
        operation_count: u64,
    ) -> Result<(DprHeader, BatchTicket), SessionError> {
        if operation_count == 0 {
            return Err(SessionError::EmptyBatch { session: self.id });
        }
        if self.pending >= self.window_batches {
            return Err(SessionError::WindowFull {
                session: self.id,
                pending: self.pending,
                window: self.window_batches,
            });
        }
        let sequences = SequenceRange {
            start: self.next_sequence,
            end: self.next_sequence + operation_count,
        };
        self.next_sequence = sequences.end;
        self.batches.push_back(BatchRecord {
            worker,
            sequences,
            status: BatchStatus::Pending,
        });
        self.pending += 1;
        let header = DprHeader {
            kind: HeaderKind::Request,
            world_line: self.world_line,
            version: self.seen_version,
            sender: self.id,
            batch_sequence: sequences.start,
            dependencies: self.dependencies(),
        };
        Ok((
            header,
            BatchTicket {
                worker,
                sequences,
                world_line: self.world_line,
            },
        ))
    }

    /// Records a worker's response to the batch `ticket`.
    pub fn complete_batch(
        &mut self,
        ticket: BatchTicket,
        response: &DprHeader,
    ) -> Result<Completion, SessionError> {
        if ticket.world_line < self.world_line {
            return Ok(Completion::Ignored);
        }
        if response.kind == HeaderKind::Rollback && response.world_line > self.world_line {
            // The worker refused the batch: it never ran, so it is neither lost nor uncertain.
            if let Some(position) = self.batches.iter().position(|b| {
                b.sequences == ticket.sequences && matches!(b.status, BatchStatus::Pending)
            }) {
                self.batches.remove(position);
                self.pending -= 1;
                self.rejected.push(ticket.sequences);
            }
        }
        if response.world_line > self.world_line {
            return Ok(Completion::RollbackRequired {
                world_line: response.world_line,
            });
        }
        if response.kind != HeaderKind::Response || response.world_line < self.world_line {
            // A rollback header from an old world-line, or a stale response: nothing to learn.
            return Ok(Completion::Ignored);
        }
        if response.batch_sequence != ticket.sequences.start || response.sender != ticket.worker {
            // A response that answers some other batch: refuse to record a version for this one.
            return Err(SessionError::MismatchedResponse {
                session: self.id,
                sequence: ticket.sequences.start,
                response_sequence: response.batch_sequence,
                response_worker: response.sender,
            });
        }
        let record = self
            .batches
            .iter_mut()
            .find(|b| b.sequences == ticket.sequences && matches!(b.status, BatchStatus::Pending))
            .ok_or(SessionError::UnknownBatch {
                session: self.id,
                sequence: ticket.sequences.start,
            })?;
        record.status = BatchStatus::Completed(response.version);
        self.pending -= 1;
        self.seen_version = self.seen_version.max(response.version);
        let entry = self.dependencies.entry(ticket.worker).or_insert(0);
        *entry = (*entry).max(response.version);
        Ok(Completion::Executed {
            version: response.version,
        })
    }

    /// Computes the commit point against the published `state` and forgets batches known committed.
    ///
    /// Rules (relaxed DPR): pending batches may be skipped over (a later batch issued while one was
    /// pending does not depend on it) and are listed as excluded. A completed batch that is not yet
    /// committed stops the prefix unless the prefix already passed it while it was pending; then
    /// it stays listed as excluded (every batch issued after it completed depends on it, so none
    /// of those can be committed before it).
    pub fn commit_point(&mut self, state: &ClusterState) -> Result<CommitPoint, SessionError> {
        if state.world_line > self.world_line {
            return Err(SessionError::RollbackPending {
                session: self.id,
                session_world_line: self.world_line,
                cluster_world_line: state.world_line,
            });
        }
        let committed = |batch: &BatchRecord| {
            state.world_line == self.world_line
                && matches!(batch.status, BatchStatus::Completed(v) if v <= state.cut_version(batch.worker))
        };
        let mut until = self.committed_until;
        for batch in &self.batches {
            match batch.status {
                BatchStatus::Pending => {}
                _ if committed(batch) => until = until.max(batch.sequences.end),
                BatchStatus::Completed(_) if batch.sequences.start >= until => break,
                BatchStatus::Completed(_) => {}
            }
        }
        let excluded: Vec<SequenceRange> = self
            .batches
            .iter()
            .filter(|b| b.sequences.end <= until && !committed(b))
            .map(|b| b.sequences)
            .collect();
        // Forget committed batches only from the front, so everything forgotten lies below every
        // batch still tracked (a rollback can then list survivors exactly).
        while self
            .batches
            .front()
            .is_some_and(|b| committed(b) && b.sequences.end <= until)
        {
            self.batches.pop_front();
        }
        debug_assert!(until >= self.committed_until);
        self.committed_until = until;
        Ok(CommitPoint {
            until_sequence: until,
            excluded,
        })
    }

    /// Handles a rollback: `state` must be [`DprFinder::rollback_target`](crate::DprFinder::rollback_target)
    /// of this session's world-line, i.e. the current world-line with the cut the session's
    /// world-line was rolled back to (not a later cut: later cuts hold versions of later
    /// world-lines). Returns exactly what survived and moves the session onto the current
    /// world-line, possibly skipping several.
    pub fn handle_rollback(
        &mut self,
        state: &ClusterState,
    ) -> Result<SurvivingPrefix, SessionError> {
        if state.world_line <= self.world_line {
            return Err(SessionError::NoRollback {
                session: self.id,
                session_world_line: self.world_line,
                cluster_world_line: state.world_line,
            });
        }
        let mut prefix = SurvivingPrefix {
            world_line: state.world_line,
            until_sequence: self.next_sequence,
            rejected: std::mem::take(&mut self.rejected),
            ..SurvivingPrefix::default()
        };
        for batch in &self.batches {
            match batch.status {
                BatchStatus::Pending => prefix.uncertain.push(batch.sequences),
                BatchStatus::Completed(version) if version <= state.cut_version(batch.worker) => {
                    prefix.survived.push(batch.sequences)
                }
                BatchStatus::Completed(_) => prefix.lost.push(batch.sequences),
            }
        }
        // Forgotten batches were committed and lie below every tracked one, so the prefix ends at
        // the first batch that did not run in the surviving state.
        prefix.until_sequence = prefix
            .lost
            .iter()
            .chain(&prefix.rejected)
            .map(|r| r.start)
            .min()
            .unwrap_or(self.next_sequence);
        self.world_line = state.world_line;
        self.dependencies
            .retain(|&worker, version| *version <= state.cut_version(worker));
        self.batches.clear();
        self.pending = 0;
        self.committed_until = self.next_sequence;
        Ok(prefix)
    }
}
