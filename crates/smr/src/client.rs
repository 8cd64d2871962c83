//! The client protocol: RESP (so `redis-cli` works), served by every replica.
//!
//! Commands (case-insensitive):
//! - `PING` → `+PONG`
//! - `SET key value` → `+OK` once the write is committed by a majority and applied on the leader
//!   (that is the acknowledgement: an acknowledged write survives the loss of any minority)
//! - `GET key` → bulk string or null; linearizable (the leader confirms its leadership with a
//!   quorum first)
//! - `DEL key` → `:1` if the key existed, else `:0`
//! - `SMR.STATUS` → a bulk string of `name:value` lines (id, role, leader, applied index,
//!   checkpoints, keys)
//! - `SMR.DIGEST` → `keys sum` of this replica's local state (not linearizable; for tests)
//!
//! A follower answers writes and reads with `-NOTLEADER <leader id>` (or `-NOTLEADER ?` while no
//! leader is known); clients retry at the leader's client address. Oversized keys or values get
//! `-ERR` and the connection stays usable; a malformed stream gets `-ERR` and is closed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::BytesMut;
use openraft::error::{ClientWriteError, RaftError};
use prefixkv_resp::{Encoder, Limits, Protocol, Reply, ReplyParser, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::state_machine::Shared;
use crate::types::{Command, CommandResponse, NodeId, Raft, MAX_KEY_BYTES, MAX_VALUE_BYTES};

fn request_limits() -> Limits {
    Limits {
        proto_max_bulk_len: MAX_VALUE_BYTES + 1024,
        max_multibulk_len: 16,
        ..Limits::default()
    }
}

/// Serves clients on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, id: NodeId, raft: Arc<Raft>, shared: Arc<Shared>) {
    // Dropping (aborting) `serve` closes every connection, as for the Raft listener.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!("client listener accept failed: {error}");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(serve_connection(stream, id, raft.clone(), shared.clone()));
    }
}

async fn serve_connection(mut stream: TcpStream, id: NodeId, raft: Arc<Raft>, shared: Arc<Shared>) {
    let mut parser = RequestParser::new(request_limits());
    let encoder = Encoder::new(Protocol::Resp2);
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::with_capacity(16 * 1024);
    loop {
        match stream.read_buf(&mut input).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            match parser.parse(&mut input) {
                Ok(Some(command)) => {
                    let args: Vec<&[u8]> = command.args.iter().map(|a| &a[..]).collect();
                    handle(&args, id, &raft, &shared, &encoder, &mut output).await;
                }
                Ok(None) => break,
                Err(error) => {
                    encoder.error(&mut output, format!("ERR {error}").as_bytes());
                    let _ = stream.write_all(&output).await;
                    return;
                }
            }
        }
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
    }
}

fn not_leader(leader: Option<NodeId>) -> String {
    match leader {
        Some(leader) => format!("NOTLEADER {leader}"),
        None => "NOTLEADER ?".to_string(),
    }
}

async fn write(raft: &Raft, command: Command) -> Result<CommandResponse, String> {
    command.validate().map_err(|e| format!("ERR {e}"))?;
    match raft.client_write(command).await {
        Ok(response) => Ok(response.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
            Err(not_leader(forward.leader_id))
        }
        Err(error) => Err(format!("ERR {error}")),
    }
}

async fn handle(
    args: &[&[u8]],
    id: NodeId,
    raft: &Raft,
    shared: &Shared,
    encoder: &Encoder,
    out: &mut BytesMut,
) {
    let name = args[0].to_ascii_uppercase();
    match (&name[..], args.len()) {
        (b"PING", 1) => encoder.simple_string(out, b"PONG"),
        (b"SET", 3) => match write(
            raft,
            Command::Set {
                key: args[1].to_vec(),
                value: args[2].to_vec(),
            },
        )
        .await
        {
            Ok(_) => encoder.simple_string(out, b"OK"),
            Err(error) => encoder.error(out, error.as_bytes()),
        },
        (b"DEL", 2) => match write(
            raft,
            Command::Del {
                key: args[1].to_vec(),
            },
        )
        .await
        {
            Ok(CommandResponse::Removed(existed)) => encoder.integer(out, i64::from(existed)),
            Ok(other) => {
                encoder.error(out, format!("ERR unexpected response {other:?}").as_bytes())
            }
            Err(error) => encoder.error(out, error.as_bytes()),
        },
        (b"GET", 2) => {
            if args[1].len() > MAX_KEY_BYTES {
                encoder.error(out, b"ERR key exceeds the size limit");
                return;
            }
            match raft.ensure_linearizable().await {
                Ok(_) => match shared.store.get(args[1]) {
                    Some(value) => encoder.bulk_string(out, &value),
                    None => encoder.null_bulk_string(out),
                },
                Err(error) => match error.forward_to_leader() {
                    Some(forward) => encoder.error(out, not_leader(forward.leader_id).as_bytes()),
                    None => encoder.error(out, format!("ERR {error}").as_bytes()),
                },
            }
        }
        (b"SMR.STATUS", 1) => {
            let metrics = raft.metrics().borrow().clone();
            let text = format!(
                "id:{id}\r\nrole:{:?}\r\nleader:{}\r\nterm:{}\r\napplied_index:{}\r\nmodel:{}\r\nkeys:{}\r\n\
                 checkpoints_completed:{}\r\ncheckpoints_skipped:{}\r\ncheckpoint_index:{}\r\n",
                metrics.state,
                metrics.current_leader.map_or("?".to_string(), |l| l.to_string()),
                metrics.current_term,
                shared.applied_index(),
                shared.store.model().name(),
                shared.store.len(),
                shared.stats.completed.load(std::sync::atomic::Ordering::Relaxed),
                shared.stats.skipped.load(std::sync::atomic::Ordering::Relaxed),
                shared.current_checkpoint().and_then(|m| m.last_log_id).map_or(0, |l| l.index),
            );
            encoder.bulk_string(out, text.as_bytes());
        }
        (b"SMR.DIGEST", 1) => {
            let digest = shared.store.digest();
            encoder.bulk_string(out, format!("{} {}", digest.keys, digest.sum).as_bytes());
        }
        _ => encoder.error(
            out,
            format!(
                "ERR unknown command or wrong number of arguments for '{}'",
                String::from_utf8_lossy(args[0])
            )
            .as_bytes(),
        ),
    }
}

/// One RESP connection to one replica.
pub struct Connection {
    stream: TcpStream,
    input: BytesMut,
    parser: ReplyParser,
}

impl Connection {
    /// Connects to `address`.
    pub async fn connect(address: SocketAddr) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            input: BytesMut::with_capacity(4096),
            parser: ReplyParser::new(Limits::default()),
        })
    }

    /// Sends one command and reads its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Reply> {
        let encoder = Encoder::new(Protocol::Resp2);
        let mut request = BytesMut::new();
        encoder.array_header(&mut request, args.len());
        for arg in args {
            encoder.bulk_string(&mut request, arg);
        }
        self.stream.write_all(&request).await?;
        loop {
            if let Some(reply) = self
                .parser
                .parse(&mut self.input)
                .map_err(std::io::Error::other)?
            {
                return Ok(reply);
            }
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "replica closed the connection",
                ));
            }
        }
    }
}

/// A client of the whole cluster: finds the leader and retries there.
pub struct ClusterClient {
    addresses: BTreeMap<NodeId, SocketAddr>,
    leader: Option<NodeId>,
    connection: Option<(NodeId, Connection)>,
    /// How long one command may keep retrying (leader election, reconnects).
    pub retry_for: Duration,
}

/// Parses `1=127.0.0.1:7001,2=...` into a map.
pub fn parse_address_map(text: &str) -> anyhow::Result<BTreeMap<NodeId, SocketAddr>> {
    let mut map = BTreeMap::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (id, address) = part
            .split_once('=')
            .with_context(|| format!("{part:?} is not ID=HOST:PORT"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .with_context(|| format!("bad replica id in {part:?}"))?;
        let address: SocketAddr = address
            .trim()
            .parse()
            .with_context(|| format!("bad address in {part:?}"))?;
        if map.insert(id, address).is_some() {
            anyhow::bail!("replica {id} is listed twice");
        }
    }
    anyhow::ensure!(!map.is_empty(), "no replicas given");
    Ok(map)
}

impl ClusterClient {
    /// A client of the replicas whose client addresses are `addresses`.
    pub fn new(addresses: BTreeMap<NodeId, SocketAddr>) -> Self {
        ClusterClient {
            addresses,
            leader: None,
            connection: None,
            retry_for: Duration::from_secs(30),
        }
    }

    /// The replica this client last found to be the leader.
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    /// Runs a command at the leader, following `NOTLEADER` redirects and retrying through
    /// elections and dead replicas for up to `retry_for`. Returns the reply (which may be a RESP
    /// error other than NOTLEADER).
    pub async fn call(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let deadline = tokio::time::Instant::now() + self.retry_for;
        let ids: Vec<NodeId> = self.addresses.keys().copied().collect();
        let mut attempt = 0usize;
        loop {
            let target = self.leader.unwrap_or(ids[attempt % ids.len()]);
            attempt += 1;
            let outcome = self.call_on(target, args).await;
            match outcome {
                Ok(Reply::Error(text)) if text.starts_with(b"NOTLEADER") => {
                    let hint = std::str::from_utf8(&text)
                        .ok()
                        .and_then(|t| t.split_whitespace().nth(1))
                        .and_then(|id| id.parse::<NodeId>().ok());
                    self.leader =
                        hint.filter(|id| self.addresses.contains_key(id) && *id != target);
                    if self.leader.is_none() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                Ok(reply) => {
                    self.leader = Some(target);
                    return Ok(reply);
                }
                Err(error) => {
                    tracing::debug!("replica {target}: {error}");
                    self.connection = None;
                    self.leader = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!("no leader answered within {:?}", self.retry_for);
            }
        }
    }

    async fn call_on(&mut self, target: NodeId, args: &[&[u8]]) -> std::io::Result<Reply> {
        if self.connection.as_ref().is_none_or(|(id, _)| *id != target) {
            let connection = tokio::time::timeout(
                Duration::from_secs(2),
                Connection::connect(self.addresses[&target]),
            )
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
            self.connection = Some((target, connection));
        }
        let (_, connection) = self.connection.as_mut().expect("connected above");
        match tokio::time::timeout(Duration::from_secs(10), connection.call(args)).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "reply timed out",
            )),
        }
    }
}
