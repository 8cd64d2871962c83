//! The TCP network between replicas: openraft's RPCs sent to peers ([`Network`], [`PeerClient`])
//! and the listener that answers them ([`serve`]).
//!
//! Messages and their framing are in `wire.rs` (shared with `forward.rs`). A client connection
//! sends one [`RaftRequest`] frame and reads one [`RaftReply`] frame at a time (openraft sends at
//! most one RPC at a time per target). A connection that fails or times out is dropped and
//! re-opened on the next RPC. The listener answers forwarded client commands with the handler
//! its caller passes (`node.rs` passes `forward::answer`), so this module does not depend on
//! client forwarding.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use tokio::net::{TcpListener, TcpStream};

use crate::types::{NodeId, Raft, TypeConfig};
use crate::wire::{read_frame, write_frame, ForwardReply, ForwardRequest, RaftReply, RaftRequest};

/// Serves Raft RPCs arriving on `listener` until the task is dropped; a forwarded client command
/// is answered by `forward` (the leader side of client forwarding, `forward::answer`).
pub async fn serve<F, Fut>(listener: TcpListener, raft: Arc<Raft>, forward: F)
where
    F: Fn(Arc<Raft>, ForwardRequest) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ForwardReply> + Send,
{
    // Connection tasks live in this set, so that dropping (aborting) `serve` closes every
    // connection too: a stopped replica must not keep answering on old connections.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (mut stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!("raft listener accept failed: {error}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let raft = raft.clone();
        let forward = forward.clone();
        connections.spawn(async move {
            loop {
                let request: RaftRequest = match read_frame(&mut stream).await {
                    Ok(Some(request)) => request,
                    Ok(None) => return,
                    Err(error) => {
                        tracing::debug!("raft connection closed: {error}");
                        return;
                    }
                };
                let reply = match request {
                    RaftRequest::Append(rpc) => RaftReply::Append(raft.append_entries(rpc).await),
                    RaftRequest::Vote(rpc) => RaftReply::Vote(raft.vote(rpc).await),
                    RaftRequest::Snapshot(rpc) => {
                        RaftReply::Snapshot(raft.install_snapshot(rpc).await)
                    }
                    RaftRequest::Forward(request) => {
                        RaftReply::Forward(forward(raft.clone(), request).await)
                    }
                };
                if write_frame(&mut stream, &reply).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Creates one [`PeerClient`] per target.
#[derive(Clone, Default)]
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            address: node.addr.clone(),
            stream: None,
        }
    }
}

/// The connection to one peer.
pub struct PeerClient {
    target: NodeId,
    address: String,
    stream: Option<TcpStream>,
}

impl PeerClient {
    async fn call(&mut self, request: RaftRequest, option: &RPCOption) -> io::Result<RaftReply> {
        let deadline = option.hard_ttl();
        let exchange = async {
            if self.stream.is_none() {
                let address: SocketAddr = self.address.parse().map_err(|e| {
                    io::Error::other(format!(
                        "peer {} address {:?}: {e}",
                        self.target, self.address
                    ))
                })?;
                let stream = TcpStream::connect(address).await?;
                stream.set_nodelay(true)?;
                self.stream = Some(stream);
            }
            let stream = self.stream.as_mut().expect("connected above");
            write_frame(stream, &request).await?;
            read_frame(stream).await?.ok_or_else(|| {
                io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection")
            })
        };
        let result = match tokio::time::timeout(deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("RPC timed out after {deadline:?}"),
            )),
        };
        if result.is_err() {
            self.stream = None;
        }
        result
    }
}

fn unreachable<E: std::error::Error>(error: io::Error) -> RPCError<NodeId, BasicNode, E> {
    if error.kind() == io::ErrorKind::TimedOut {
        RPCError::Network(NetworkError::new(&error))
    } else {
        RPCError::Unreachable(Unreachable::new(&error))
    }
}

fn mismatched<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&io::Error::other(
        "peer answered a different RPC kind",
    )))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self
            .call(RaftRequest::Append(rpc), &option)
            .await
            .map_err(unreachable)?
        {
            RaftReply::Append(result) => result.map_err(|e| {
                RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e))
            }),
            _ => Err(mismatched()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self
            .call(RaftRequest::Snapshot(rpc), &option)
            .await
            .map_err(unreachable)?
        {
            RaftReply::Snapshot(result) => result.map_err(|e| {
                RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e))
            }),
            _ => Err(mismatched()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self
            .call(RaftRequest::Vote(rpc), &option)
            .await
            .map_err(unreachable)?
        {
            RaftReply::Vote(result) => result.map_err(|e| {
                RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e))
            }),
            _ => Err(mismatched()),
        }
    }
}
