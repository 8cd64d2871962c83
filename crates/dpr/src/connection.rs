//! A plain client connection (for example a RESP connection from `redis-cli`) served as a DPR
//! session **kept by the worker** it is connected to.
//!
//! A DPR client library keeps its [`DprSession`] itself. A client that speaks only its store's
//! native protocol cannot: the worker keeps the session for it, one per connection. Every request
//! (or every run of pipelined requests) on the connection becomes one DPR batch of the local
//! worker, numbered by the connection's session, so it gets the same world-line check,
//! `Vs` and dependency tracking as a batch of a DPR-aware client. This module is that bookkeeping,
//! independent of any store and of any transport: the host (a proxy, a server's connection loop)
//! parses requests, hands the header from [`ConnectionSession::begin`] to its
//! [`DprWorker`](crate::DprWorker) with the operations, and reports the outcome back.
//!
//! What the connection learns, and how the host tells the client:
//! - [`ConnectionSession::commit_point`] → [`ConnectionCommitPoint`], the reply of a
//!   `PREFIXKV.COMMITPOINT` command ([`is_commit_point_command`]), encoded by
//!   [`ConnectionCommitPoint::encode_resp`] as a RESP2 array of field/value pairs.
//! - After a failure, [`ConnectionSession::handle_rollback`] (with
//!   [`DprFinder::rollback_target`](crate::DprFinder::rollback_target) of the session's
//!   world-line) → [`RollbackNotice`], whose [`RollbackNotice::error_line`] is the error the
//!   connection's next request receives (instead of running, or, if the failure cut that request
//!   off, saying so); the session then continues on the new world-line.
//!
//! Invariants:
//! - Batches of one connection run one at a time through the local worker, so the session's
//!   window only ever holds batches whose outcome is unknown (the store failed during them) plus
//!   the one running: such batches stay pending and become `uncertain` at the next rollback.
//! - Sequence numbers count the connection's requests that were handed to the worker, from 0, in
//!   order, and never restart (not even after a rollback), so every number in an error or a
//!   commit point names exactly one request.
//! - Session ids of worker-kept sessions have [`CONNECTION_SESSION_BIT`] set and carry the
//!   worker id, so they never collide with each other or with ids below 2^63 chosen by clients.

use crate::header::DprHeader;
use crate::session::{BatchTicket, CommitPoint, Completion, SequenceRange, SurvivingPrefix};
use crate::session::{DprSession, SessionError};
use crate::{ClusterState, WorkerId, WorldLine};

/// The bit set in every worker-kept session id (see [`connection_session_id`]).
pub const CONNECTION_SESSION_BIT: u64 = 1 << 63;

/// Largest number of batches whose outcome is unknown that one connection may accumulate before
/// it must wait for a rollback (or for them to be committed).
pub const MAX_UNKNOWN_BATCHES: usize = 64;

/// The command a client sends to ask for its connection's commit point (case-insensitive).
pub const COMMIT_POINT_COMMAND: &str = "PREFIXKV.COMMITPOINT";

/// A cluster-unique session id for the `connection`-th connection accepted by `worker`:
/// [`CONNECTION_SESSION_BIT`] | worker id (31 bits) << 32 | connection counter (32 bits).
/// Worker ids above 2^31 - 1 and counters above 2^32 - 1 wrap (they are truncated); a worker
/// would need four billion connections in one run for two of its sessions to share an id, and
/// session ids only label headers and diagnostics (no DPR rule depends on their uniqueness).
pub fn connection_session_id(worker: WorkerId, connection: u64) -> u64 {
    CONNECTION_SESSION_BIT | ((worker & 0x7FFF_FFFF) << 32) | (connection & 0xFFFF_FFFF)
}

/// Whether a request's command name is [`COMMIT_POINT_COMMAND`].
pub fn is_commit_point_command(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(COMMIT_POINT_COMMAND.as_bytes())
}

/// Errors of a worker-kept session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConnectionError {
    /// The DPR session refused (a host bug, or [`MAX_UNKNOWN_BATCHES`] batches of unknown
    /// outcome are outstanding).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The cluster moved to a newer world-line: call [`ConnectionSession::handle_rollback`].
    #[error("connection session {session}: the cluster moved from world-line {session_world_line} to {cluster_world_line}; handle the rollback first")]
    RollbackPending {
        /// The session id.
        session: u64,
        /// The session's world-line.
        session_world_line: WorldLine,
        /// The newer world-line.
        cluster_world_line: WorldLine,
    },
}

/// The reply to `PREFIXKV.COMMITPOINT`: what of the connection's requests is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionCommitPoint {
    /// The world-line the connection is on.
    pub world_line: WorldLine,
    /// Every request with a sequence number below this is committed (survives any failure),
    /// except those in `excluded`.
    pub until_sequence: u64,
    /// The sequence number of the last request handed to the worker (`None`: none yet).
    pub last_sequence: Option<u64>,
    /// Requests below `until_sequence` whose outcome is not known yet (the store failed during
    /// them); they are not covered by the guarantee.
    pub excluded: Vec<SequenceRange>,
}

impl ConnectionCommitPoint {
    /// Whether every request sent so far is committed.
    pub fn all_committed(&self) -> bool {
        self.excluded.is_empty() && self.last_sequence.is_none_or(|l| l < self.until_sequence)
    }

    /// Appends the RESP2 encoding: an array of 10 elements, field names (bulk strings) each
    /// followed by its value: `until_sequence` (integer), `world_line` (integer),
    /// `last_sequence` (integer, -1 before the first request), `all_committed` (integer 1/0),
    /// `excluded` (array of `[start, end)` pairs, each an array of two integers). RESP2 so that
    /// every client (and `redis-cli`) reads it; a RESP3 client may build a map from the pairs.
    pub fn encode_resp(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"*10\r\n");
        resp_bulk(out, b"until_sequence");
        resp_integer(out, saturating_i64(self.until_sequence));
        resp_bulk(out, b"world_line");
        resp_integer(out, saturating_i64(self.world_line));
        resp_bulk(out, b"last_sequence");
        resp_integer(out, self.last_sequence.map_or(-1, saturating_i64));
        resp_bulk(out, b"all_committed");
        resp_integer(out, i64::from(self.all_committed()));
        resp_bulk(out, b"excluded");
        out.extend_from_slice(format!("*{}\r\n", self.excluded.len()).as_bytes());
        for range in &self.excluded {
            out.extend_from_slice(b"*2\r\n");
            resp_integer(out, saturating_i64(range.start));
            resp_integer(out, saturating_i64(range.end));
        }
    }
}

/// What a rollback left of a connection's requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackNotice {
    /// The world-line the connection was on.
    pub from_world_line: WorldLine,
    /// libDPR's account (ranges of sequence numbers); `prefix.world_line` is the new world-line.
    pub prefix: SurvivingPrefix,
    /// The last sequence number handed to the worker before the rollback (`None`: none).
    pub last_sequence: Option<u64>,
}

fn count(ranges: &[SequenceRange]) -> u64 {
    ranges.iter().map(|r| r.end - r.start).sum()
}

impl RollbackNotice {
    /// Requests that had completed but are not in the restored state.
    pub fn lost_requests(&self) -> u64 {
        count(&self.prefix.lost)
    }

    /// Requests whose outcome was unknown at the failure: they may or may not be in the restored
    /// state.
    pub fn uncertain_requests(&self) -> u64 {
        count(&self.prefix.uncertain)
    }

    /// Requests the worker refused because they came from the old world-line (they never ran).
    pub fn refused_requests(&self) -> u64 {
        count(&self.prefix.rejected)
    }

    /// The error line (without `-` and CRLF) a RESP host answers the request that found the
    /// rollback with, e.g. `ROLLBACK world-line 3: commands up to sequence 1233 survived; 17
    /// later commands were lost`. It names the surviving prefix (`until_sequence - 1`; "no command
    /// survived" when it is 0), the lost and uncertain counts (the uncertain ones by sequence
    /// number or range), and later commands that survived anyway (they ran concurrently with a
    /// lost one). The host appends what became of the request itself (not run, or cut off by the
    /// failure). Refused requests are not counted as lost: with one batch at a time, the only
    /// refused batch is the request carrying this error.
    pub fn error_line(&self) -> String {
        let until = self.prefix.until_sequence;
        let mut line = format!("ROLLBACK world-line {}: ", self.prefix.world_line);
        if until == 0 {
            line.push_str("no command survived");
        } else {
            line.push_str(&format!("commands up to sequence {} survived", until - 1));
        }
        let lost = self.lost_requests();
        let later = self
            .last_sequence
            .map_or(0, |last| (last + 1).saturating_sub(until));
        line.push_str(&format!("; {lost} later commands were lost"));
        let uncertain = self.uncertain_requests();
        if uncertain > 0 {
            let ranges: Vec<String> = self
                .prefix
                .uncertain
                .iter()
                .map(|r| {
                    if r.end == r.start + 1 {
                        r.start.to_string()
                    } else {
                        format!("{}..{}", r.start, r.end - 1)
                    }
                })
                .collect();
            let noun = if uncertain == 1 {
                "sequence"
            } else {
                "sequences"
            };
            line.push_str(&format!(
                "; {uncertain} may or may not have survived ({noun} {})",
                ranges.join(", ")
            ));
        }
        // Requests after the prefix that ran concurrently with a lost one and survived.
        let survived_after = later.saturating_sub(lost + uncertain + self.refused_requests());
        if survived_after > 0 {
            line.push_str(&format!("; {survived_after} later commands survived"));
        }
        line
    }
}

/// A DPR session kept by a worker for one client connection. See the module docs.
pub struct ConnectionSession {
    worker: WorkerId,
    session: DprSession,
    /// The batch handed to the worker whose response is awaited.
    running: Option<BatchTicket>,
}

impl ConnectionSession {
    /// A session `id` (see [`connection_session_id`]) for a connection to `worker`, joining at
    /// `world_line` (the worker's current one).
    pub fn new(id: u64, worker: WorkerId, world_line: WorldLine) -> Self {
        Self {
            worker,
            session: DprSession::new(id, world_line, MAX_UNKNOWN_BATCHES + 1),
            running: None,
        }
    }

    /// The session id.
    pub fn id(&self) -> u64 {
        self.session.id()
    }

    /// The world-line the connection is on.
    pub fn world_line(&self) -> WorldLine {
        self.session.world_line()
    }

    /// The sequence number the next request gets.
    pub fn next_sequence(&self) -> u64 {
        self.session.next_sequence()
    }

    /// The last sequence number handed to the worker.
    pub fn last_sequence(&self) -> Option<u64> {
        self.session.next_sequence().checked_sub(1)
    }

    /// Whether the cluster (or the local worker) on `world_line` is ahead of the connection, so
    /// [`handle_rollback`](Self::handle_rollback) is due before the next request runs.
    pub fn rollback_due(&self, world_line: WorldLine) -> bool {
        world_line > self.session.world_line()
    }

    /// Numbers the next `requests` requests (at least 1) as one batch and returns the header to
    /// hand to the local worker with them, and the ticket for [`finish`](Self::finish) or
    /// [`abandon`](Self::abandon).
    pub fn begin(&mut self, requests: u64) -> Result<(DprHeader, BatchTicket), ConnectionError> {
        if let Some(ticket) = self.running.take() {
            // The host lost a batch without saying how it ended: its outcome is unknown.
            tracing::warn!(
                session = self.id(),
                sequence = ticket.sequences.start,
                "batch neither finished nor abandoned; treating it as unknown"
            );
        }
        let (header, ticket) = self.session.issue_batch(self.worker, requests)?;
        self.running = Some(ticket);
        Ok((header, ticket))
    }

    /// Records the worker's response header for the batch `ticket`. A `Rollback` response (the
    /// worker is on a newer world-line) returns [`Completion::RollbackRequired`]: the batch did
    /// not run; call [`handle_rollback`](Self::handle_rollback).
    pub fn finish(
        &mut self,
        ticket: BatchTicket,
        response: &DprHeader,
    ) -> Result<Completion, ConnectionError> {
        if self.running == Some(ticket) {
            self.running = None;
        }
        Ok(self.session.complete_batch(ticket, response)?)
    }

    /// The batch `ticket` ended without a response (the store failed during it): whether it ran
    /// is unknown. It stays pending: excluded from commit points, and `uncertain` at the next
    /// rollback.
    pub fn abandon(&mut self, ticket: BatchTicket) {
        if self.running == Some(ticket) {
            self.running = None;
        }
    }

    /// The connection's commit point against the published `state` (also forgets the batches
    /// known committed, which bounds the session's memory: hosts call it, or
    /// [`trim`](Self::trim), whenever the published cut changes).
    pub fn commit_point(
        &mut self,
        state: &ClusterState,
    ) -> Result<ConnectionCommitPoint, ConnectionError> {
        if self.rollback_due(state.world_line) {
            return Err(ConnectionError::RollbackPending {
                session: self.id(),
                session_world_line: self.world_line(),
                cluster_world_line: state.world_line,
            });
        }
        let CommitPoint {
            until_sequence,
            excluded,
        } = self.session.commit_point(state)?;
        Ok(ConnectionCommitPoint {
            world_line: self.world_line(),
            until_sequence,
            last_sequence: self.last_sequence(),
            excluded,
        })
    }

    /// Forgets batches committed in `state` (no-op if `state` is on another world-line).
    pub fn trim(&mut self, state: &ClusterState) {
        if state.world_line == self.world_line() {
            let _ = self.session.commit_point(state);
        }
    }

    /// Handles a rollback: `target` must be
    /// [`DprFinder::rollback_target`](crate::DprFinder::rollback_target) of
    /// [`world_line`](Self::world_line). Returns what survived; the session is then on the
    /// target's world-line.
    pub fn handle_rollback(
        &mut self,
        target: &ClusterState,
    ) -> Result<RollbackNotice, ConnectionError> {
        let from_world_line = self.world_line();
        let last_sequence = self.last_sequence();
        self.running = None;
        let prefix = self.session.handle_rollback(target)?;
        Ok(RollbackNotice {
            from_world_line,
            prefix,
            last_sequence,
        })
    }
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn resp_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

fn resp_integer(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(format!(":{value}\r\n").as_bytes());
}

/// Appends `-line\r\n`, with CR and LF in `line` replaced by spaces (they would end the error).
pub fn encode_resp_error(out: &mut Vec<u8>, line: &str) {
    out.push(b'-');
    out.extend(
        line.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::HeaderKind;
    use crate::Cut;

    fn response(worker: WorkerId, request: &DprHeader, version: u64) -> DprHeader {
        DprHeader {
            kind: HeaderKind::Response,
            world_line: request.world_line,
            version,
            sender: worker,
            batch_sequence: request.batch_sequence,
            dependencies: Vec::new(),
        }
    }

    fn state(world_line: WorldLine, cut: &[(WorkerId, u64)]) -> ClusterState {
        ClusterState {
            world_line,
            cut: cut.iter().copied().collect::<Cut>(),
            recovering: false,
        }
    }

    #[test]
    fn session_ids_carry_the_worker_and_never_collide_with_client_ids() {
        let a = connection_session_id(3, 1);
        let b = connection_session_id(4, 1);
        assert_ne!(a, b);
        assert!(a & CONNECTION_SESSION_BIT != 0);
        assert_eq!((a >> 32) & 0x7FFF_FFFF, 3);
        assert_eq!(a & 0xFFFF_FFFF, 1);
        assert!(is_commit_point_command(b"prefixkv.commitpoint"));
        assert!(!is_commit_point_command(b"PREFIXKV.COMMIT"));
    }

    #[test]
    fn commit_point_follows_the_cut_and_is_encoded_as_pairs() {
        let mut connection = ConnectionSession::new(connection_session_id(0, 0), 0, 0);
        let (header, ticket) = connection.begin(2).unwrap();
        assert_eq!(header.batch_sequence, 0);
        assert_eq!(header.kind, HeaderKind::Request);
        connection.finish(ticket, &response(0, &header, 5)).unwrap();
        let (header, ticket) = connection.begin(1).unwrap();
        connection.finish(ticket, &response(0, &header, 6)).unwrap();
        let point = connection.commit_point(&state(0, &[(0, 5)])).unwrap();
        assert_eq!(point.until_sequence, 2);
        assert_eq!(point.last_sequence, Some(2));
        assert!(!point.all_committed());
        let point = connection.commit_point(&state(0, &[(0, 6)])).unwrap();
        assert!(point.all_committed());
        let mut out = Vec::new();
        point.encode_resp(&mut out);
        assert_eq!(
            out,
            b"*10\r\n$14\r\nuntil_sequence\r\n:3\r\n$10\r\nworld_line\r\n:0\r\n$13\r\nlast_sequence\r\n:2\r\n$13\r\nall_committed\r\n:1\r\n$8\r\nexcluded\r\n*0\r\n"
        );
        assert!(matches!(
            connection.commit_point(&state(1, &[])),
            Err(ConnectionError::RollbackPending { .. })
        ));
    }

    #[test]
    fn an_abandoned_batch_is_excluded_then_uncertain_and_the_rest_is_named() {
        let mut connection = ConnectionSession::new(7, 0, 0);
        // Sequence 0..3 committed at version 2.
        let (header, ticket) = connection.begin(3).unwrap();
        connection.finish(ticket, &response(0, &header, 2)).unwrap();
        // Sequence 3: the store failed during it.
        let (_, unknown) = connection.begin(1).unwrap();
        connection.abandon(unknown);
        // Sequence 4..6 ran in version 4, outside the recovery cut.
        let (header, ticket) = connection.begin(2).unwrap();
        connection.finish(ticket, &response(0, &header, 4)).unwrap();
        let point = connection.commit_point(&state(0, &[(0, 2)])).unwrap();
        assert_eq!(point.until_sequence, 3);
        assert!(connection.rollback_due(1));
        let notice = connection.handle_rollback(&state(1, &[(0, 3)])).unwrap();
        assert_eq!(notice.from_world_line, 0);
        assert_eq!(notice.prefix.until_sequence, 4);
        assert_eq!(notice.lost_requests(), 2);
        assert_eq!(notice.uncertain_requests(), 1);
        assert_eq!(
            notice.error_line(),
            "ROLLBACK world-line 1: commands up to sequence 3 survived; 2 later commands were lost; 1 may or may not have survived (sequence 3)"
        );
        // The connection continues on the new world-line, numbering after the old requests.
        assert_eq!(connection.world_line(), 1);
        let (header, _) = connection.begin(1).unwrap();
        assert_eq!((header.world_line, header.batch_sequence), (1, 6));
    }

    #[test]
    fn a_refused_batch_is_reported_lost_and_not_run() {
        let mut connection = ConnectionSession::new(7, 0, 0);
        let (header, ticket) = connection.begin(1).unwrap();
        let refused = DprHeader {
            kind: HeaderKind::Rollback,
            world_line: 2,
            ..response(0, &header, 9)
        };
        assert_eq!(
            connection.finish(ticket, &refused).unwrap(),
            Completion::RollbackRequired { world_line: 2 }
        );
        let notice = connection.handle_rollback(&state(2, &[])).unwrap();
        assert_eq!(notice.refused_requests(), 1);
        assert_eq!(
            notice.error_line(),
            "ROLLBACK world-line 2: no command survived; 0 later commands were lost"
        );
        let mut out = Vec::new();
        encode_resp_error(&mut out, "a\r\nb");
        assert_eq!(out, b"-a  b\r\n");
    }

    #[test]
    fn unknown_batches_are_bounded() {
        let mut connection = ConnectionSession::new(7, 0, 0);
        for _ in 0..MAX_UNKNOWN_BATCHES {
            let (_, ticket) = connection.begin(1).unwrap();
            connection.abandon(ticket);
        }
        // One more may run (the window holds the unknown ones plus the running one)...
        let (_, ticket) = connection.begin(1).unwrap();
        connection.abandon(ticket);
        // ...but not another.
        assert!(matches!(
            connection.begin(1),
            Err(ConnectionError::Session(SessionError::WindowFull { .. }))
        ));
    }
}
