//! The messages replicas exchange on the Raft port and how they are framed, shared by the Raft
//! network (`network.rs`: openraft's RPCs) and client forwarding (`forward.rs`: a follower's
//! commands to the leader), so that neither of those imports the other.
//!
//! # Wire format
//! Every message is a frame `len u32 (little-endian) | postcard payload` with
//! `len ≤` [`MAX_FRAME_BYTES`]; a larger claimed length closes the connection before anything is
//! allocated (on both sides: a writer refuses to send one). A connection carries one
//! [`RaftRequest`] frame, then its [`RaftReply`] frame, then the next request.

use std::io;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::types::{Command, CommandResponse, NodeId, TypeConfig};

/// Largest accepted frame (an AppendEntries of up to `max_payload_entries` bounded entries, or a
/// snapshot chunk).
pub const MAX_FRAME_BYTES: u32 = 256 << 20;

/// A Raft RPC.
#[derive(Serialize, Deserialize)]
pub enum RaftRequest {
    /// AppendEntries.
    Append(AppendEntriesRequest<TypeConfig>),
    /// RequestVote.
    Vote(VoteRequest<NodeId>),
    /// One chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A client command a follower forwards to the leader (`forward.rs`).
    Forward(ForwardRequest),
}

/// The answer to a [`RaftRequest`].
#[derive(Serialize, Deserialize)]
pub enum RaftReply {
    /// AppendEntries.
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// RequestVote.
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// InstallSnapshot.
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// The answer to a forwarded client command.
    Forward(ForwardReply),
}

/// Writes one frame.
pub async fn write_frame<T: Serialize>(stream: &mut TcpStream, message: &T) -> io::Result<()> {
    let payload = postcard::to_allocvec(message).map_err(io::Error::other)?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|len| *len <= MAX_FRAME_BYTES)
        .ok_or_else(|| {
            io::Error::other(format!(
                "frame of {} bytes exceeds the limit",
                payload.len()
            ))
        })?;
    let mut buffer = Vec::with_capacity(4 + payload.len());
    buffer.extend_from_slice(&len.to_le_bytes());
    buffer.extend_from_slice(&payload);
    stream.write_all(&buffer).await
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame<T: for<'de> Deserialize<'de>>(
    stream: &mut TcpStream,
) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("peer sent a frame of {len} bytes, over the {MAX_FRAME_BYTES}-byte limit"),
        ));
    }
    let mut payload = vec![0u8; len as usize];
    stream.read_exact(&mut payload).await?;
    postcard::from_bytes(&payload)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {e}")))
}
/// What a follower asks the leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ForwardOp {
    /// Replicate and apply this command.
    Write(Command),
    /// Confirm leadership and return the read index.
    ReadIndex,
}

/// A command forwarded from a follower to the leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ForwardRequest {
    /// Milliseconds the follower still waits for the answer; the leader stops working on the
    /// request after that.
    pub deadline_ms: u64,
    /// The command.
    pub op: ForwardOp,
}

/// The leader's answer to a [`ForwardRequest`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ForwardReply {
    /// The write was committed and applied; this is what applying returned.
    Applied(CommandResponse),
    /// Leadership confirmed; a read must see the state applied through this index (`None`: the
    /// log is empty).
    ReadIndex(Option<u64>),
    /// The receiver is not the leader (the hint names the one it knows); nothing was executed.
    NotLeader(Option<NodeId>),
    /// No outcome within the deadline (a write may still commit).
    TimedOut,
    /// Any other failure (a write's outcome is unknown).
    Failed(String),
}
