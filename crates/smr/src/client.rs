//! The client protocol: RESP (so `redis-cli` works), served by every replica, leader or not.
//!
//! Commands (case-insensitive):
//! - `PING` → `+PONG`
//! - `SET key value` → `+OK` once the write is committed by a majority and applied on the leader
//!   (that is the acknowledgement: an acknowledged write survives the loss of any minority)
//! - `GET key` → bulk string or null; linearizable on every replica: the leader confirms its
//!   leadership with a quorum and names its read index, and the serving replica answers only
//!   once it has applied up to that index (`forward.rs`)
//! - `DEL key` → `:1` if the key existed, else `:0`
//! - `SMR.STATUS` → a bulk string of `name:value` lines (id, role, leader, applied index,
//!   checkpoints, keys)
//! - `SMR.DIGEST` → `keys sum` of this replica's local state (not linearizable; for tests)
//! - `MGET key [key …]` (at most [`MAX_LOAD_PAIRS`] keys) → array; linearizable, one read index
//!   for all keys
//! - `SMR.LOAD key value [key value …]` (at most [`MAX_LOAD_PAIRS`] pairs) → `+OK`: one
//!   replicated entry setting every pair (bulk load; counts as one command for Δ)
//! - `SMR.CHECKPOINT` → `:index`: this replica checkpoints what it has applied, durable before
//!   the reply
//! - `SMR.CHECKPOINT-EVERY n` → `+OK`: this replica's Δ from now on (0: off)
//! - `SMR.CHECKPOINTS from` → bulk string, one line per checkpoint of this replica from the
//!   `from`-th on: `index started_unix_us finished_unix_us|- pairs file_bytes`
//!
//! A follower forwards `SET`/`DEL` to the leader over the Raft network and relays the answer,
//! rather than redirecting the client: plain `redis-cli -p <any replica>` works without cluster
//! mode, and the replicas need to know only each other's Raft addresses, not their client ports.
//!
//! # Invariants
//! - Every command is answered within the replica's request timeout (`--request-timeout-ms`):
//!   `-CLUSTERDOWN …` when no leader answered (the command was not executed; safe to retry),
//!   `-TIMEOUT …` when a write reached a leader but its outcome did not come back (unknown).
//! - Oversized keys or values get `-ERR` before reaching the log and the connection stays
//!   usable; a malformed stream gets `-ERR` and is closed. Request sizes are bounded by
//!   [`request_limits`] before anything is allocated for them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::BytesMut;
use prefixkv_resp::{Encoder, Limits, Protocol, Reply, ReplyParser, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::forward::{Forwarder, ServeConfig};
use crate::state_machine::Shared;
use crate::types::{Command, CommandResponse, NodeId, Raft, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Most pairs one `SMR.LOAD` carries (and most keys one `MGET` asks for): bounds one request
/// to about `2 × MAX_LOAD_PAIRS` arguments of at most [`MAX_VALUE_BYTES`] each.
pub const MAX_LOAD_PAIRS: usize = 256;

/// How long `SMR.CHECKPOINT` waits for the checkpoint to be durable (a blocking checkpoint of
/// several GB takes minutes on a slow disk).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(1800);

/// The RESP request limits of the client port (a value of up to [`MAX_VALUE_BYTES`] fits).
pub fn request_limits() -> Limits {
    Limits {
        proto_max_bulk_len: MAX_VALUE_BYTES + 1024,
        max_multibulk_len: 1 + 2 * MAX_LOAD_PAIRS,
        ..Limits::default()
    }
}

/// Serves clients on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    id: NodeId,
    raft: Arc<Raft>,
    shared: Arc<Shared>,
    config: ServeConfig,
) {
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
        let forwarder = Forwarder::new(id, config);
        connections.spawn(serve_connection(
            stream,
            forwarder,
            id,
            raft.clone(),
            shared.clone(),
        ));
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    mut forwarder: Forwarder,
    id: NodeId,
    raft: Arc<Raft>,
    shared: Arc<Shared>,
) {
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
                    let context = ReplicaRefs {
                        id,
                        raft: &raft,
                        shared: &shared,
                        encoder: &encoder,
                    };
                    handle(&args, &context, &mut forwarder, &mut output).await;
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

/// What a command handler needs besides the command.
struct ReplicaRefs<'a> {
    id: NodeId,
    raft: &'a Raft,
    shared: &'a Shared,
    encoder: &'a Encoder,
}

async fn handle(
    args: &[&[u8]],
    cx: &ReplicaRefs<'_>,
    forwarder: &mut Forwarder,
    out: &mut BytesMut,
) {
    let encoder = cx.encoder;
    let name = args[0].to_ascii_uppercase();
    match (&name[..], args.len()) {
        (b"PING", 1) => encoder.simple_string(out, b"PONG"),
        (b"SET", 3) => {
            let command = Command::Set {
                key: args[1].to_vec(),
                value: args[2].to_vec(),
            };
            match forwarder.write(cx.raft, command).await {
                Ok(_) => encoder.simple_string(out, b"OK"),
                Err(error) => encoder.error(out, error.resp_text().as_bytes()),
            }
        }
        (b"DEL", 2) => {
            let command = Command::Del {
                key: args[1].to_vec(),
            };
            match forwarder.write(cx.raft, command).await {
                Ok(CommandResponse::Removed(existed)) => encoder.integer(out, i64::from(existed)),
                Ok(other) => {
                    encoder.error(out, format!("ERR unexpected response {other:?}").as_bytes())
                }
                Err(error) => encoder.error(out, error.resp_text().as_bytes()),
            }
        }
        (b"GET", 2) => {
            if args[1].len() > MAX_KEY_BYTES {
                encoder.error(out, b"ERR key exceeds the size limit");
                return;
            }
            match forwarder.read_barrier(cx.raft).await {
                Ok(()) => match cx.shared.store.get(args[1]) {
                    Some(value) => encoder.bulk_string(out, &value),
                    None => encoder.null_bulk_string(out),
                },
                Err(error) => encoder.error(out, error.resp_text().as_bytes()),
            }
        }
        (b"MGET", n) if (2..=MAX_LOAD_PAIRS + 1).contains(&n) => {
            if args[1..].iter().any(|key| key.len() > MAX_KEY_BYTES) {
                encoder.error(out, b"ERR key exceeds the size limit");
                return;
            }
            // One read barrier covers every key: all are read at one linearization point.
            match forwarder.read_barrier(cx.raft).await {
                Ok(()) => {
                    encoder.array_header(out, args.len() - 1);
                    for key in &args[1..] {
                        match cx.shared.store.get(key) {
                            Some(value) => encoder.bulk_string(out, &value),
                            None => encoder.null_bulk_string(out),
                        }
                    }
                }
                Err(error) => encoder.error(out, error.resp_text().as_bytes()),
            }
        }
        (b"SMR.LOAD", n) if n >= 3 && n % 2 == 1 => {
            let pairs = args[1..]
                .chunks(2)
                .map(|pair| (pair[0].to_vec(), pair[1].to_vec()))
                .collect();
            match forwarder.write(cx.raft, Command::SetMany { pairs }).await {
                Ok(_) => encoder.simple_string(out, b"OK"),
                Err(error) => encoder.error(out, error.resp_text().as_bytes()),
            }
        }
        (b"SMR.STATUS", 1) => encoder.bulk_string(out, status_text(cx).as_bytes()),
        (b"SMR.DIGEST", 1) => {
            let digest = cx.shared.store.digest();
            encoder.bulk_string(out, format!("{} {}", digest.keys, digest.sum).as_bytes());
        }
        (name, _) if name.starts_with(b"SMR.") => handle_admin(args, cx, out).await,
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

/// The commands about this replica itself (not replicated): checkpoints and their timing.
async fn handle_admin(args: &[&[u8]], cx: &ReplicaRefs<'_>, out: &mut BytesMut) {
    let encoder = cx.encoder;
    let name = args[0].to_ascii_uppercase();
    match (&name[..], args.len()) {
        (b"SMR.CHECKPOINT", 1) => {
            // Everything applied so far, durable before the reply.
            let index = cx.shared.applied_index();
            let taken = async {
                cx.raft
                    .trigger()
                    .snapshot()
                    .await
                    .map_err(|e| e.to_string())?;
                cx.raft
                    .wait(Some(CHECKPOINT_WAIT))
                    .metrics(
                        |m| m.snapshot.is_some_and(|s| s.index >= index),
                        "checkpoint",
                    )
                    .await
                    .map_err(|e| e.to_string())
            };
            match taken.await {
                Ok(_) => encoder.integer(out, i64::try_from(index).unwrap_or(i64::MAX)),
                Err(error) => encoder.error(out, format!("ERR checkpoint: {error}").as_bytes()),
            }
        }
        (b"SMR.CHECKPOINT-EVERY", 2) => {
            match std::str::from_utf8(args[1])
                .ok()
                .and_then(|n| n.parse::<u64>().ok())
            {
                Some(every) => {
                    cx.shared.set_checkpoint_every(every);
                    encoder.simple_string(out, b"OK");
                }
                None => encoder.error(out, b"ERR the interval must be a non-negative integer"),
            }
        }
        (b"SMR.CHECKPOINTS", 2) => {
            match std::str::from_utf8(args[1])
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(from) => {
                    encoder.bulk_string(out, checkpoint_events(cx.shared, from).as_bytes())
                }
                None => encoder.error(out, b"ERR the first event must be a non-negative integer"),
            }
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

/// This replica's checkpoints from the `from`-th on, one line each:
/// `index started_unix_us finished_unix_us|- pairs file_bytes`. Wall-clock times, so that
/// another process on the same machine can place them on its own timeline.
fn checkpoint_events(shared: &Shared, from: usize) -> String {
    let (now_instant, now_system) = (std::time::Instant::now(), std::time::SystemTime::now());
    let unix_us = |at: std::time::Instant| {
        let wall = now_system - now_instant.saturating_duration_since(at);
        wall.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    };
    let events = shared.events.lock().expect("poisoned");
    let mut text = String::new();
    for event in events.iter().skip(from) {
        let finished = event
            .finished
            .map_or("-".to_string(), |f| unix_us(f).to_string());
        text.push_str(&format!(
            "{} {} {} {} {}\n",
            event.index,
            unix_us(event.started),
            finished,
            event.pairs,
            event.file_bytes
        ));
    }
    text
}

fn status_text(cx: &ReplicaRefs<'_>) -> String {
    let metrics = cx.raft.metrics().borrow().clone();
    let shared = cx.shared;
    format!(
        "id:{}\r\nrole:{:?}\r\nleader:{}\r\nterm:{}\r\napplied_index:{}\r\nmodel:{}\r\nkeys:{}\r\n\
         checkpoints_completed:{}\r\ncheckpoints_skipped:{}\r\ncheckpoint_index:{}\r\n",
        cx.id,
        metrics.state,
        metrics
            .current_leader
            .map_or("?".to_string(), |l| l.to_string()),
        metrics.current_term,
        shared.applied_index(),
        shared.store.model().name(),
        shared.store.len(),
        shared
            .stats
            .completed
            .load(std::sync::atomic::Ordering::Relaxed),
        shared
            .stats
            .skipped
            .load(std::sync::atomic::Ordering::Relaxed),
        shared
            .current_checkpoint()
            .and_then(|m| m.last_log_id)
            .map_or(0, |l| l.index),
    )
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

/// A client of the whole cluster: finds the leader (`SMR.STATUS`), sends there, and retries
/// commands that certainly did not execute.
pub struct ClusterClient {
    addresses: BTreeMap<NodeId, SocketAddr>,
    leader: Option<NodeId>,
    connection: Option<(NodeId, Connection)>,
    /// How long one command may keep retrying (leader election, reconnects).
    pub retry_for: Duration,
    /// How long to wait for one reply (longer than the replicas' `--request-timeout-ms`, so
    /// that their own `-CLUSTERDOWN`/`-TIMEOUT` answer arrives first).
    pub reply_timeout: Duration,
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
            reply_timeout: Duration::from_secs(30),
        }
    }

    /// The replica this client found to be the leader (it keeps sending there; if leadership
    /// moved since, that replica forwards).
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    /// Runs a command, preferably at the leader (any replica would serve it, but a follower
    /// forwards writes and asks the leader for a read index: one more hop). Retries through
    /// elections and dead replicas for up to `retry_for` when the command was certainly not
    /// executed (`-CLUSTERDOWN`, or no connection); returns any other reply, `-TIMEOUT` (outcome
    /// unknown) included.
    pub async fn call(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let deadline = tokio::time::Instant::now() + self.retry_for;
        let ids: Vec<NodeId> = self.addresses.keys().copied().collect();
        let mut attempt = 0usize;
        loop {
            if self.leader.is_none() {
                self.leader = self.find_leader().await;
            }
            let target = self.leader.unwrap_or(ids[attempt % ids.len()]);
            attempt += 1;
            match self.call_on(target, args).await {
                Ok(Reply::Error(text)) if text.starts_with(b"CLUSTERDOWN") => {
                    self.leader = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(reply) => return Ok(reply),
                Err(error) => {
                    // Only a reply proves anything about the command; a lost connection after
                    // sending a write is reported, not retried.
                    self.connection = None;
                    self.leader = None;
                    if error.kind() != std::io::ErrorKind::NotConnected {
                        return Err(anyhow::anyhow!("replica {target}: {error}"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!("no replica answered within {:?}", self.retry_for);
            }
        }
    }

    /// Asks each replica's `SMR.STATUS` whether it is the leader; of those that say so, the
    /// one with the highest term (a replica restarted from an old leadership may still claim its
    /// old term for a moment).
    async fn find_leader(&mut self) -> Option<NodeId> {
        let mut best: Option<(u64, NodeId, Connection)> = None;
        for (id, address) in self.addresses.clone() {
            let Ok(Ok(mut connection)) =
                tokio::time::timeout(Duration::from_secs(2), Connection::connect(address)).await
            else {
                continue;
            };
            let status =
                tokio::time::timeout(Duration::from_secs(2), connection.call(&[b"SMR.STATUS"]))
                    .await;
            let Ok(Ok(Reply::BulkString(text))) = status else {
                continue;
            };
            let text = String::from_utf8_lossy(&text);
            let field = |name: &str| {
                text.lines()
                    .find_map(|line| line.strip_prefix(name).map(str::trim))
            };
            let term = field("term:").and_then(|t| t.parse::<u64>().ok());
            if let (Some("Leader"), Some(term)) = (field("role:"), term) {
                if best
                    .as_ref()
                    .is_none_or(|(best_term, _, _)| term > *best_term)
                {
                    best = Some((term, id, connection));
                }
            }
        }
        let (_, id, connection) = best?;
        self.connection = Some((id, connection));
        Some(id)
    }

    async fn call_on(&mut self, target: NodeId, args: &[&[u8]]) -> std::io::Result<Reply> {
        if self.connection.as_ref().is_none_or(|(id, _)| *id != target) {
            let connection = tokio::time::timeout(
                Duration::from_secs(2),
                Connection::connect(self.addresses[&target]),
            )
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))
            .and_then(|connected| connected)
            // Nothing was sent: the caller may try another replica.
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::NotConnected, e))?;
            self.connection = Some((target, connection));
        }
        let (_, connection) = self.connection.as_mut().expect("connected above");
        match tokio::time::timeout(self.reply_timeout, connection.call(args)).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "reply timed out",
            )),
        }
    }
}
