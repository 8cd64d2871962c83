//! How every replica serves clients: a command arriving at a follower is forwarded to the leader
//! over the Raft network, and a read at a follower is made linearizable with the leader's read
//! index.
//!
//! # Writes
//! The replica that received the command runs it through openraft if it is the leader, and
//! otherwise sends it to the leader's Raft address as a [`ForwardRequest`] (its own TCP
//! connection, one per client connection, so a slow write never delays Raft's own RPCs). The
//! leader runs `client_write` and answers with the result.
//!
//! # Reads (read index, Raft §6.4)
//! A read asks the leader for its *read log id* (`Raft::get_read_log_id`: the leader confirms it
//! is still leader with a quorum of heartbeats and returns the highest log id it must have
//! applied for a read to see every write acknowledged before the read began). The replica that
//! serves the read then waits until its own state machine has applied up to that index and reads
//! its local state. A write acknowledged to any client before the read started was committed at
//! or below the leader's read index, so the read sees it (or a newer value).
//!
//! # Invariants
//! - Every command finishes within its deadline ([`ServeConfig::request_timeout`]): with no
//!   reachable leader it ends with `-CLUSTERDOWN` (not executed), a write handed to a leader that
//!   gives no answer in time ends with `-TIMEOUT` (outcome unknown: it may still commit).
//! - A write is retried elsewhere only when it certainly did not execute: it was never sent, or
//!   the receiver answered that it is not the leader (openraft refuses before appending). Once a
//!   write has been sent and its answer lost, it is never sent again (a replay could overwrite a
//!   newer acknowledged value).
//! - Reads are retried freely until the deadline (they change nothing).
//! - The leader bounds its own work on a forwarded command by the deadline the follower sent, so
//!   no task waits on a command nobody will read the answer of for longer than that.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::types::{Command, CommandResponse, NodeId, Raft};
use crate::wire::{read_frame, write_frame, RaftReply, RaftRequest};
pub use crate::wire::{ForwardOp, ForwardReply, ForwardRequest};

/// How long to wait between looks for a leader while none is known or reachable.
const LEADER_POLL: Duration = Duration::from_millis(20);

/// Per-replica settings of client service.
#[derive(Clone, Copy, Debug)]
pub struct ServeConfig {
    /// The longest one client command may take, forwarding and waiting for a leader included.
    pub request_timeout: Duration,
}

/// How a command ended when it did not succeed, as the client is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeError {
    /// No leader answered before the deadline; the command was not executed.
    NoLeader(Duration),
    /// The leader named a read index but this replica did not apply it before the deadline.
    Lagging(Duration),
    /// A write was handed to a leader but no outcome arrived in time; it may still commit.
    Unknown(String),
    /// The command is invalid (size limits); it was not executed.
    Invalid(String),
}

impl ServeError {
    /// The RESP error text (without the leading `-`).
    pub fn resp_text(&self) -> String {
        match self {
            ServeError::NoLeader(waited) => format!(
                "CLUSTERDOWN no leader answered within {} ms; the command was not executed",
                waited.as_millis()
            ),
            ServeError::Lagging(waited) => format!(
                "CLUSTERDOWN this replica did not apply the leader's read index within {} ms",
                waited.as_millis()
            ),
            ServeError::Unknown(why) => format!(
                "TIMEOUT the write's outcome is unknown ({why}); it may or may not be applied"
            ),
            ServeError::Invalid(why) => format!("ERR {why}"),
        }
    }
}

/// Answers a forwarded request on the leader (called by the Raft listener).
pub async fn answer(raft: &Raft, request: ForwardRequest) -> ForwardReply {
    let limit = Duration::from_millis(request.deadline_ms);
    let work = async {
        match request.op {
            ForwardOp::Write(command) => match raft.client_write(command).await {
                Ok(response) => ForwardReply::Applied(response.data),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                    ForwardReply::NotLeader(forward.leader_id)
                }
                Err(error) => ForwardReply::Failed(error.to_string()),
            },
            ForwardOp::ReadIndex => match raft.get_read_log_id().await {
                Ok((read_log_id, _applied)) => {
                    ForwardReply::ReadIndex(read_log_id.map(|l| l.index))
                }
                Err(error) => match error.forward_to_leader() {
                    Some(forward) => ForwardReply::NotLeader(forward.leader_id),
                    None => ForwardReply::Failed(error.to_string()),
                },
            },
        }
    };
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or(ForwardReply::TimedOut)
}

/// One client connection's link to the leader: runs commands locally when this replica leads,
/// forwards them otherwise. Holds at most one connection, to the current leader.
pub struct Forwarder {
    id: NodeId,
    config: ServeConfig,
    connection: Option<(NodeId, TcpStream)>,
}

/// Where a command should go now.
enum Route {
    Local,
    Remote(NodeId, SocketAddr),
    Unknown,
}

impl Forwarder {
    /// A forwarder for replica `id`.
    pub fn new(id: NodeId, config: ServeConfig) -> Self {
        Forwarder {
            id,
            config,
            connection: None,
        }
    }

    fn route(&self, raft: &Raft) -> Route {
        let metrics = raft.metrics().borrow().clone();
        match metrics.current_leader {
            Some(leader) if leader == self.id => Route::Local,
            Some(leader) => metrics
                .membership_config
                .membership()
                .get_node(&leader)
                .and_then(|node| node.addr.parse().ok())
                .map_or(Route::Unknown, |address| Route::Remote(leader, address)),
            None => Route::Unknown,
        }
    }

    /// Runs a write at the leader. See the module docs for when it is retried.
    pub async fn write(
        &mut self,
        raft: &Raft,
        command: Command,
    ) -> Result<CommandResponse, ServeError> {
        command.validate().map_err(ServeError::Invalid)?;
        let deadline = Instant::now() + self.config.request_timeout;
        loop {
            if Instant::now() >= deadline {
                return Err(ServeError::NoLeader(self.config.request_timeout));
            }
            match self.route(raft) {
                Route::Local => {
                    let outcome =
                        tokio::time::timeout_at(deadline, raft.client_write(command.clone())).await;
                    match outcome {
                        Ok(Ok(response)) => return Ok(response.data),
                        // Refused before appending: safe to send again to the new leader.
                        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {}
                        Ok(Err(error)) => return Err(ServeError::Unknown(error.to_string())),
                        Err(_) => return Err(ServeError::Unknown("no commit in time".into())),
                    }
                }
                Route::Remote(leader, address) => {
                    let request = ForwardRequest {
                        deadline_ms: remaining_ms(deadline),
                        op: ForwardOp::Write(command.clone()),
                    };
                    match self.exchange(leader, address, &request, deadline).await {
                        Ok(ForwardReply::Applied(response)) => return Ok(response),
                        Ok(ForwardReply::NotLeader(_)) => {}
                        Ok(ForwardReply::TimedOut) => {
                            return Err(ServeError::Unknown(
                                "the leader did not commit in time".into(),
                            ))
                        }
                        Ok(ForwardReply::Failed(why)) => return Err(ServeError::Unknown(why)),
                        Ok(ForwardReply::ReadIndex(_)) => {
                            return Err(ServeError::Unknown("leader answered a read".into()))
                        }
                        Err(Exchange::NotSent(error)) => {
                            tracing::debug!("forwarding to leader {leader}: {error}");
                        }
                        Err(Exchange::Lost(error)) => {
                            return Err(ServeError::Unknown(format!(
                                "connection to leader {leader}: {error}"
                            )))
                        }
                    }
                }
                Route::Unknown => {}
            }
            back_off(deadline).await;
        }
    }

    /// Waits until this replica may serve a linearizable read: the leader's read index is
    /// confirmed and applied here. Then the caller reads the local state.
    pub async fn read_barrier(&mut self, raft: &Raft) -> Result<(), ServeError> {
        let deadline = Instant::now() + self.config.request_timeout;
        loop {
            if Instant::now() >= deadline {
                return Err(ServeError::NoLeader(self.config.request_timeout));
            }
            let read_index = match self.route(raft) {
                Route::Local => tokio::time::timeout_at(deadline, raft.get_read_log_id())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|(read_log_id, _)| read_log_id.map(|l| l.index)),
                Route::Remote(leader, address) => {
                    let request = ForwardRequest {
                        deadline_ms: remaining_ms(deadline),
                        op: ForwardOp::ReadIndex,
                    };
                    match self.exchange(leader, address, &request, deadline).await {
                        Ok(ForwardReply::ReadIndex(index)) => Some(index),
                        _ => None,
                    }
                }
                Route::Unknown => None,
            };
            if let Some(read_index) = read_index {
                let Some(index) = read_index else {
                    return Ok(()); // an empty log: nothing to wait for
                };
                let remaining = deadline.saturating_duration_since(Instant::now());
                return raft
                    .wait(Some(remaining))
                    .applied_index_at_least(Some(index), "read index applied")
                    .await
                    .map(|_| ())
                    .map_err(|_| ServeError::Lagging(self.config.request_timeout));
            }
            back_off(deadline).await;
        }
    }

    /// Sends `request` to `leader` and reads the answer, reusing the connection when it still
    /// goes to that leader.
    async fn exchange(
        &mut self,
        leader: NodeId,
        address: SocketAddr,
        request: &ForwardRequest,
        deadline: Instant,
    ) -> Result<ForwardReply, Exchange> {
        // A cached connection the leader already closed (it restarted, or died) is replaced
        // before anything is sent on it: sending there would turn a write that certainly did not
        // execute into one of unknown outcome.
        let reusable = self
            .connection
            .as_ref()
            .is_some_and(|(id, stream)| *id == leader && still_open(stream));
        if !reusable {
            self.connection = None;
            let stream = tokio::time::timeout_at(deadline, TcpStream::connect(address))
                .await
                .map_err(|_| Exchange::NotSent(io::ErrorKind::TimedOut.into()))?
                .map_err(Exchange::NotSent)?;
            stream.set_nodelay(true).map_err(Exchange::NotSent)?;
            self.connection = Some((leader, stream));
        }
        let (_, stream) = self.connection.as_mut().expect("connected above");
        let message = RaftRequest::Forward(request.clone());
        let outcome = tokio::time::timeout_at(deadline, async {
            // A failed write of the frame may still have delivered it: treat it as sent.
            write_frame(stream, &message).await?;
            read_frame::<RaftReply>(stream).await
        })
        .await;
        let reply = match outcome {
            Ok(Ok(Some(RaftReply::Forward(reply)))) => return Ok(reply),
            Ok(Ok(Some(_))) => io::Error::other("the leader answered a different RPC kind"),
            Ok(Ok(None)) => io::ErrorKind::UnexpectedEof.into(),
            Ok(Err(error)) => error,
            Err(_) => io::ErrorKind::TimedOut.into(),
        };
        self.connection = None;
        Err(Exchange::Lost(reply))
    }
}

/// Why an exchange with the leader failed.
enum Exchange {
    /// The request never left this replica (connecting failed).
    NotSent(io::Error),
    /// The request may have reached the leader, but no answer came back.
    Lost(io::Error),
}

/// Whether the peer has not closed `stream`: nothing is readable (it sends only answers, and
/// every answer was read), so a readable stream is at its end or broken.
fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

fn remaining_ms(deadline: Instant) -> u64 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX)
}

/// Backs off before the next attempt (a new leader is being elected, or the known one is
/// unreachable), never past the deadline. This is a retry pause, not synchronisation: the next
/// attempt looks at openraft's current view again.
async fn back_off(deadline: Instant) {
    tokio::time::sleep_until(deadline.min(Instant::now() + LEADER_POLL)).await;
}
