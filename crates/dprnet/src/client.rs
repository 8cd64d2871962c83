//! [`DprRedisClient`]: the Rust client of a DPR cluster (D-Redis proxies or prefixkv cluster workers).
//!
//! A client knows the shards' proxy addresses (shard `i` is DPR worker `i`) and the metadata
//! store (the SQLite file the cluster publishes its DPR cut into, or its PostgreSQL server).
//! Every connection to a proxy starts with [`FRAMED_PREAMBLE`] (see [`crate::wire`]), so the
//! proxy serves it with the framed protocol. Each [`DprRedisSession`]:
//! - routes every command by its key (the first argument) to a shard: by the key's Redis
//!   Cluster hash slot if the cluster publishes slot ownership in the metadata store (a prefixkv
//!   cluster does; re-read on a `-MOVED` reply), else by its CRC32C ([`shard_for_key`], D-Redis);
//!   see `client/routing.rs`. It buffers per shard and sends a batch once `max_batch_commands`
//!   are buffered or on [`DprRedisSession::flush`];
//! - keeps at most `window_batches` batches in flight (receiving the oldest one to make room);
//!   responses on one connection come back in order, so the oldest in-flight batch is always the
//!   next response on its shard's connection;
//! - numbers operations through libDPR's [`DprSession`] (sequence numbers follow issue order),
//!   and reports each completed operation with its sequence number, the caller's tag and the
//!   decoded reply;
//! - learns what is committed from the published cut, as read by the client's one watcher
//!   thread every `cut_poll_ms` (sessions never block on the metadata store for it) ([`DprRedisSession::commit_point`],
//!   [`DprRedisSession::wait_for_commit`], callbacks registered with
//!   [`DprRedisSession::on_commit`]);
//! - on a failure (a `Rollback` header, an error frame or a broken connection), waits (bounded)
//!   for the cluster to move to a new world-line, computes exactly what survived, and returns
//!   [`ClientError::Rollback`] with a [`RollbackReport`] naming the fate of every operation it
//!   was still tracking. The session has then moved to the new world-line: keep using it.
//!
//! A client made with [`DprRedisClient::with_local_shard`] (a co-located client, `client/local.rs`)
//! hands the batches of one shard to a [`LocalShard`] in its own process instead of a socket;
//! everything else above holds unchanged for them.

mod local;
mod routing;

pub use local::LocalShard;

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use bytes::BytesMut;
use prefixkv_dpr::metadata::{MetadataError, MetadataStore};
use prefixkv_dpr::session::{
    BatchTicket, CommitPoint, Completion, SequenceRange, SessionError, SurvivingPrefix,
};
use prefixkv_dpr::{ClusterState, DprSession, HeaderKind, WorkerId, WorldLine};
use prefixkv_resp::{Command, Limits, Reply, ReplyParser};

use crate::connection::encode_command;
use crate::options::MetadataLocation;
use crate::wire::{encode_request, FrameLimits, FrameReader, ResponseFrame, FRAMED_PREAMBLE};

/// Longest wait for the cut watcher's next read before re-checking a deadline.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The shard a key belongs to among `shards` shards.
pub fn shard_for_key(key: &[u8], shards: usize) -> usize {
    assert!(shards > 0, "a cluster has at least one shard");
    (crc32c::crc32c(key) as usize) % shards
}

/// Connects to `address`, retrying while the connection is refused (a worker being restarted
/// after a failure is not listening yet) until `timeout`. Retrying is safe: nothing was sent.
fn connect_retrying(address: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&address, left.max(Duration::from_millis(1))) {
            Err(error)
                if error.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() + Duration::from_millis(5) < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            result => return result,
        }
    }
}

/// Client configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Proxy address of each shard; shard `i` is DPR worker `i`.
    pub shards: Vec<SocketAddr>,
    /// The cluster's SQLite metadata file.
    pub metadata_path: PathBuf,
    /// If set, the metadata store to use instead of `metadata_path` (a `postgres://…` URL or a
    /// `host=… port=…` conninfo; see [`MetadataLocation::parse`]).
    pub metadata_url: Option<String>,
    /// Batches in flight per session.
    pub window_batches: usize,
    /// Commands per batch before it is sent without waiting for `flush`.
    pub max_batch_commands: usize,
    /// Socket timeout for each read and write.
    pub io_timeout_ms: u64,
    /// How long to wait for the cluster to start a new world-line after a shard failed.
    pub recovery_timeout_ms: u64,
    /// How often the client's watcher thread reads the published cut.
    pub cut_poll_ms: u64,
}

impl ClientConfig {
    /// Defaults for `shards` and `metadata_path`.
    pub fn new(shards: Vec<SocketAddr>, metadata_path: PathBuf) -> Self {
        Self {
            shards,
            metadata_path,
            metadata_url: None,
            window_batches: 16,
            max_batch_commands: 64,
            io_timeout_ms: 30_000,
            recovery_timeout_ms: 30_000,
            cut_poll_ms: 10,
        }
    }
}

/// What happened to one operation the session was tracking when a rollback hit it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// In the restored state.
    Survived,
    /// Completed, but not in the restored state.
    Lost,
    /// In flight at the failure: it may or may not be in the restored state.
    Uncertain,
    /// Refused by a shard (it was on the new world-line already); it never ran.
    Rejected,
    /// Still buffered in the session; never sent.
    NotSent,
}

/// One operation's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperationFate {
    /// The tag [`DprRedisSession::push`] returned.
    pub tag: u64,
    /// Its sequence number (None if never sent).
    pub sequence: Option<u64>,
    /// What happened.
    pub fate: Fate,
}

/// What a rollback left of the session. Operations not listed were committed before the
/// failure (they survived).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackReport {
    /// libDPR's surviving prefix (sequence ranges).
    pub prefix: SurvivingPrefix,
    /// Per tracked operation, its fate.
    pub operations: Vec<OperationFate>,
}

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The metadata store failed.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// The DPR session refused something.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The cluster rolled back; the session continues on the new world-line.
    #[error("the cluster rolled back to world-line {}; operations from sequence {} on were not all kept", .0.prefix.world_line, .0.prefix.until_sequence)]
    Rollback(Box<RollbackReport>),
    /// A shard failed and the cluster did not start a new world-line in time.
    #[error("shard {shard} failed ({cause}) and no rollback started within {waited_ms} ms; is the cluster manager running?")]
    ShardFailed {
        /// The shard.
        shard: usize,
        /// What failed.
        cause: String,
        /// How long the session waited.
        waited_ms: u64,
    },
    /// A command without a key, or a reply the client could not decode.
    #[error("{0}")]
    Protocol(String),
    /// `wait_for_commit` ran out of time.
    #[error("sequence {sequence} not committed within {waited_ms} ms (committed until {until})")]
    CommitTimeout {
        /// Awaited.
        sequence: u64,
        /// Committed prefix at the end.
        until: u64,
        /// Time waited.
        waited_ms: u64,
    },
}

/// A completed operation.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletedOperation {
    /// The tag [`DprRedisSession::push`] returned.
    pub tag: u64,
    /// Its DPR sequence number.
    pub sequence: u64,
    /// The shard it ran on.
    pub shard: usize,
    /// Redis's reply.
    pub reply: Reply,
}

/// The latest cluster state, read by one background thread for all of a client's sessions, so
/// sessions never wait on the metadata store to learn the cut (every read of libDPR's store is a
/// durable transaction).
struct CutWatcher {
    state: Mutex<Result<ClusterState, String>>,
    changed: Condvar,
}

impl CutWatcher {
    fn latest(&self) -> Result<ClusterState, ClientError> {
        self.state.lock().clone().map_err(ClientError::Protocol)
    }

    /// Waits up to `timeout` for the next state read.
    fn wait_next(&self, timeout: Duration) {
        let mut state = self.state.lock();
        self.changed.wait_for(&mut state, timeout);
    }
}

/// Runs until the client and all its sessions are gone (only this thread holds the watcher).
fn watch(store: Arc<dyn MetadataStore>, watcher: Arc<CutWatcher>, interval: Duration) {
    while Arc::strong_count(&watcher) > 1 {
        let state = store
            .cluster_state()
            .map_err(|e| format!("reading the DPR cut: {e}"));
        *watcher.state.lock() = state;
        watcher.changed.notify_all();
        std::thread::sleep(interval);
    }
}

/// The shard a co-located client serves in-process, and its handle.
type Local = Option<(usize, Arc<dyn LocalShard>)>;

/// The client: configuration, the metadata store connection and the cut watcher thread.
pub struct DprRedisClient {
    config: ClientConfig,
    store: Arc<dyn MetadataStore>,
    watcher: Arc<CutWatcher>,
    router: Arc<routing::Router>,
    local: Local,
}

impl DprRedisClient {
    /// A co-located client: like [`DprRedisClient::new`], but the batches of shard `shard` go to
    /// `local` (a worker in this process) instead of over TCP. `config.shards` still lists every
    /// shard (its entry for `shard` is not connected to). Sessions, commit points and rollback
    /// reports are the same as over the network (`client/local.rs`).
    pub fn with_local_shard(
        config: ClientConfig,
        shard: usize,
        local: Arc<dyn LocalShard>,
    ) -> Result<Self, ClientError> {
        if shard >= config.shards.len() {
            return Err(ClientError::Protocol(format!(
                "local shard {shard} is not among the client's {} shards",
                config.shards.len()
            )));
        }
        let mut client = Self::new(config)?;
        client.local = Some((shard, local));
        Ok(client)
    }

    /// The shard this client serves in-process, if it is co-located.
    pub fn local_shard(&self) -> Option<usize> {
        self.local.as_ref().map(|(shard, _)| *shard)
    }

    /// Opens the metadata store.
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        let location = match &config.metadata_url {
            Some(url) => MetadataLocation::parse(url),
            None => MetadataLocation::Sqlite(config.metadata_path.clone()),
        };
        let store = location.open()?;
        let router = Arc::new(routing::Router::new(
            Arc::clone(&store),
            config.shards.len(),
        )?);
        let watcher = Arc::new(CutWatcher {
            state: Mutex::new(Ok(store.cluster_state()?)),
            changed: Condvar::new(),
        });
        {
            let (store, watcher) = (Arc::clone(&store), Arc::clone(&watcher));
            let interval = Duration::from_millis(config.cut_poll_ms.max(1));
            std::thread::Builder::new()
                .name("dredis-cut-watch".into())
                .spawn(move || watch(store, watcher, interval))
                .map_err(|e| ClientError::Protocol(format!("cut watcher thread: {e}")))?;
        }
        Ok(Self {
            config,
            store,
            watcher,
            router,
            local: None,
        })
    }

    /// Whether keys are routed by hash slot (the cluster publishes slot ownership) rather
    /// than by CRC32C.
    pub fn routes_by_slot(&self) -> bool {
        self.router.by_slot()
    }

    /// The published cluster state.
    pub fn cluster_state(&self) -> Result<ClusterState, ClientError> {
        Ok(self.store.cluster_state()?)
    }

    /// The cluster state as last read by the watcher (at most `cut_poll_ms` old).
    pub fn latest_cluster_state(&self) -> Result<ClusterState, ClientError> {
        self.watcher.latest()
    }

    /// A new session; `id` must be unique among the cluster's sessions.
    pub fn session(&self, id: u64) -> Result<DprRedisSession, ClientError> {
        let state = self.store.cluster_state()?;
        Ok(DprRedisSession {
            config: self.config.clone(),
            store: Arc::clone(&self.store),
            watcher: Arc::clone(&self.watcher),
            router: Arc::clone(&self.router),
            local: self.local.clone(),
            local_batches: 0,
            dpr: DprSession::new(id, state.world_line, self.config.window_batches),
            links: self.config.shards.iter().map(|_| None).collect(),
            buffered: self.config.shards.iter().map(|_| Vec::new()).collect(),
            next_tag: 0,
            in_flight: VecDeque::new(),
            tracked: VecDeque::new(),
            completed: Vec::new(),
            callbacks: Vec::new(),
            commit_point: CommitPoint::default(),
            frame: Vec::new(),
        })
    }
}

struct Link {
    writer: TcpStream,
    reader: FrameReader<TcpStream>,
}

struct InFlight {
    shard: usize,
    ticket: BatchTicket,
    tags: Vec<u64>,
    /// A local batch's response, held until the batches issued before it completed (network
    /// responses wait in their sockets instead).
    ready: Option<ResponseFrame>,
}

/// A command waiting for its batch: RESP-encoded for a network shard, parsed for the local one
/// (which runs it without decoding anything).
enum Queued {
    Wire(Vec<u8>),
    Local(Command),
}

/// Commit callback.
pub type CommitCallback = Box<dyn FnMut(&CommitPoint) + Send>;

/// A DPR session over the cluster. See the module docs.
pub struct DprRedisSession {
    config: ClientConfig,
    store: Arc<dyn MetadataStore>,
    watcher: Arc<CutWatcher>,
    router: Arc<routing::Router>,
    local: Local,
    /// Batches run on the local shard so far.
    local_batches: u64,
    dpr: DprSession,
    links: Vec<Option<Link>>,
    buffered: Vec<Vec<(u64, Queued)>>,
    next_tag: u64,
    in_flight: VecDeque<InFlight>,
    /// Sent batches with a response, not yet known committed: (sequences, tags).
    tracked: VecDeque<(SequenceRange, Vec<u64>)>,
    completed: Vec<CompletedOperation>,
    callbacks: Vec<CommitCallback>,
    commit_point: CommitPoint,
    frame: Vec<u8>,
}

impl DprRedisSession {
    /// The session id.
    pub fn id(&self) -> u64 {
        self.dpr.id()
    }

    /// The world-line the session is on.
    pub fn world_line(&self) -> WorldLine {
        self.dpr.world_line()
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.config.shards.len()
    }

    /// The last commit point computed.
    pub fn last_commit_point(&self) -> &CommitPoint {
        &self.commit_point
    }

    /// Batches in flight.
    pub fn in_flight_batches(&self) -> usize {
        self.in_flight.len()
    }

    /// Batches this session ran on its client's local shard (0 unless the client is
    /// co-located: [`DprRedisClient::with_local_shard`]).
    pub fn local_batches(&self) -> u64 {
        self.local_batches
    }

    fn is_local(&self, shard: usize) -> bool {
        self.local
            .as_ref()
            .is_some_and(|(local, _)| *local == shard)
    }

    /// Registers a callback run whenever the commit point advances.
    pub fn on_commit(&mut self, callback: impl FnMut(&CommitPoint) + Send + 'static) {
        self.callbacks.push(Box::new(callback));
    }

    /// The shard (worker) `key` is routed to now: by the published slot ownership, or by
    /// CRC32C when none is published (see [`DprRedisClient::routes_by_slot`]).
    pub fn shard_of(&self, key: &[u8]) -> Result<usize, ClientError> {
        self.router.shard_for(key)
    }

    /// Queues one command (`args[0]` the name, `args[1]` the key that routes it) and returns its
    /// tag. A full batch is sent at once (which may first wait for the oldest in-flight batch).
    pub fn push(&mut self, args: &[&[u8]]) -> Result<u64, ClientError> {
        let key = args.get(1).ok_or_else(|| {
            ClientError::Protocol("a D-Redis command needs a key as its first argument".into())
        })?;
        let shard = self.router.shard_for(key)?;
        let queued = if self.is_local(shard) {
            Queued::Local(Command {
                args: args
                    .iter()
                    .map(|a| bytes::Bytes::copy_from_slice(a))
                    .collect(),
            })
        } else {
            let mut encoded =
                Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
            encode_command(&mut encoded, args);
            Queued::Wire(encoded)
        };
        let tag = self.next_tag;
        self.next_tag += 1;
        self.buffered[shard].push((tag, queued));
        if self.buffered[shard].len() >= self.config.max_batch_commands {
            self.send_batch(shard)?;
        }
        Ok(tag)
    }

    /// Sends every buffered command.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        for shard in 0..self.buffered.len() {
            if !self.buffered[shard].is_empty() {
                self.send_batch(shard)?;
            }
        }
        Ok(())
    }

    /// Flushes and waits for every in-flight batch.
    pub fn drain(&mut self) -> Result<(), ClientError> {
        self.flush()?;
        while !self.in_flight.is_empty() {
            self.receive_one()?;
        }
        Ok(())
    }

    /// Takes the operations completed so far.
    pub fn take_completed(&mut self) -> Vec<CompletedOperation> {
        std::mem::take(&mut self.completed)
    }

    fn link(&mut self, shard: usize) -> std::io::Result<&mut Link> {
        if self.links[shard].is_none() {
            let timeout = Duration::from_millis(self.config.io_timeout_ms);
            let stream = connect_retrying(self.config.shards[shard], timeout)?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            // Tells the proxy this connection speaks the framed protocol, not plain RESP.
            (&stream).write_all(&FRAMED_PREAMBLE)?;
            self.links[shard] = Some(Link {
                writer: stream.try_clone()?,
                reader: FrameReader::new(stream, FrameLimits::default()),
            });
        }
        Ok(self.links[shard].as_mut().expect("set above"))
    }

    fn send_batch(&mut self, shard: usize) -> Result<(), ClientError> {
        while self.dpr.pending_batches() >= self.config.window_batches {
            self.receive_one()?;
        }
        let commands = std::mem::take(&mut self.buffered[shard]);
        let (header, ticket) = self
            .dpr
            .issue_batch(shard as WorkerId, commands.len() as u64)?;
        if let Some((_, local)) = self.local.as_ref().filter(|(l, _)| *l == shard) {
            let local = Arc::clone(local);
            let (tags, parsed): (Vec<u64>, Vec<Command>) = commands
                .into_iter()
                .map(|(tag, queued)| match queued {
                    Queued::Local(command) => (tag, command),
                    Queued::Wire(_) => unreachable!("the local shard's commands are parsed"),
                })
                .unzip();
            // Runs now, on this thread; completed in issue order by `receive_one`, like a reply.
            let response = local.run_local(&header, &parsed);
            self.local_batches += 1;
            self.in_flight.push_back(InFlight {
                shard,
                ticket,
                tags,
                ready: Some(response),
            });
            return Ok(());
        }
        self.frame.clear();
        let mut payload = Vec::new();
        for (_, queued) in &commands {
            match queued {
                Queued::Wire(encoded) => payload.extend_from_slice(encoded),
                Queued::Local(_) => unreachable!("only the local shard's commands are parsed"),
            }
        }
        encode_request(&mut self.frame, &header, commands.len() as u32, &payload)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.in_flight.push_back(InFlight {
            shard,
            ticket,
            tags: commands.into_iter().map(|(tag, _)| tag).collect(),
            ready: None,
        });
        let frame = std::mem::take(&mut self.frame);
        let sent = self.link(shard).and_then(|l| l.writer.write_all(&frame));
        self.frame = frame;
        if let Err(error) = sent {
            return Err(self.recover(shard, format!("sending to shard {shard}: {error}")));
        }
        Ok(())
    }

    /// Receives the response of the oldest in-flight batch.
    fn receive_one(&mut self) -> Result<(), ClientError> {
        let Some(shard) = self.in_flight.front().map(|f| f.shard) else {
            return Ok(());
        };
        let ready = self.in_flight.front_mut().and_then(|f| f.ready.take());
        let response = match ready {
            Some(local) => Ok(Some(local)),
            None => match self.link(shard) {
                Ok(link) => link.reader.read_response(),
                Err(error) => Err(error.into()),
            },
        };
        let in_flight = self.in_flight.pop_front().expect("front exists");
        let (header, replies) = match response {
            Ok(Some(ResponseFrame::Header { header, replies })) => (header, replies),
            Ok(Some(ResponseFrame::Error(text))) => {
                self.in_flight.push_front(in_flight);
                return Err(self.recover(shard, text));
            }
            Ok(None) => {
                self.in_flight.push_front(in_flight);
                return Err(self.recover(shard, "the proxy closed the connection".into()));
            }
            Err(error) => {
                self.in_flight.push_front(in_flight);
                return Err(self.recover(shard, error.to_string()));
            }
        };
        let completion = self.dpr.complete_batch(in_flight.ticket, &header)?;
        self.tracked
            .push_back((in_flight.ticket.sequences, in_flight.tags.clone()));
        match completion {
            Completion::Executed { .. } if header.kind == HeaderKind::Response => {
                let mut buffer = BytesMut::from(&replies[..]);
                let mut parser = ReplyParser::new(Limits::default());
                let mut moved = false;
                for (index, tag) in in_flight.tags.iter().enumerate() {
                    let reply = parser
                        .parse(&mut buffer)
                        .map_err(|e| ClientError::Protocol(format!("shard {shard} reply: {e}")))?
                        .ok_or_else(|| {
                            ClientError::Protocol(format!(
                                "shard {shard} sent {index} replies for {} commands",
                                in_flight.tags.len()
                            ))
                        })?;
                    moved |= matches!(&reply, Reply::Error(text) if text.starts_with(b"MOVED "));
                    self.completed.push(CompletedOperation {
                        tag: *tag,
                        sequence: in_flight.ticket.sequences.start + index as u64,
                        shard,
                        reply,
                    });
                }
                if moved {
                    // Ownership changed since it was read: route later keys by the new table.
                    // (The redirected operations ran nowhere; their callers see the replies.)
                    self.router.refresh()?;
                }
                Ok(())
            }
            Completion::Executed { .. } | Completion::Ignored => Ok(()),
            Completion::RollbackRequired { .. } => {
                Err(self.recover(shard, "the shard is on a newer world-line".into()))
            }
        }
    }

    /// After a failure: waits for the new world-line, then computes what survived.
    fn recover(&mut self, shard: usize, cause: String) -> ClientError {
        // The connection's state is unknown (a partial frame may be in it).
        self.links[shard] = None;
        let started = Instant::now();
        let deadline = started + Duration::from_millis(self.config.recovery_timeout_ms);
        loop {
            match self.watcher.latest() {
                Ok(state) if state.world_line > self.dpr.world_line() => break,
                Ok(_) => {}
                Err(error) => return error,
            }
            if Instant::now() >= deadline {
                return ClientError::ShardFailed {
                    shard,
                    cause,
                    waited_ms: started.elapsed().as_millis() as u64,
                };
            }
            self.watcher.wait_next(POLL_INTERVAL);
        }
        match self.roll_back() {
            Ok(report) => ClientError::Rollback(Box::new(report)),
            Err(error) => error,
        }
    }

    fn roll_back(&mut self) -> Result<RollbackReport, ClientError> {
        let target = self.store.rollback_target(self.dpr.world_line())?;
        let prefix = self.dpr.handle_rollback(&target)?;
        let fate_of = |range: &SequenceRange| {
            if prefix.lost.contains(range) {
                Fate::Lost
            } else if prefix.uncertain.contains(range) {
                Fate::Uncertain
            } else if prefix.rejected.contains(range) {
                Fate::Rejected
            } else {
                Fate::Survived
            }
        };
        let mut operations = Vec::new();
        let batches = self.tracked.drain(..).chain(
            self.in_flight
                .drain(..)
                .map(|f| (f.ticket.sequences, f.tags)),
        );
        for (range, tags) in batches {
            let fate = fate_of(&range);
            for (index, tag) in tags.into_iter().enumerate() {
                operations.push(OperationFate {
                    tag,
                    sequence: Some(range.start + index as u64),
                    fate,
                });
            }
        }
        for buffer in &mut self.buffered {
            for (tag, _) in buffer.drain(..) {
                operations.push(OperationFate {
                    tag,
                    sequence: None,
                    fate: Fate::NotSent,
                });
            }
        }
        // Responses still on the connections belong to the old world-line.
        for link in &mut self.links {
            *link = None;
        }
        self.commit_point = CommitPoint {
            until_sequence: prefix.until_sequence,
            excluded: Vec::new(),
        };
        tracing::info!(
            session = self.dpr.id(),
            world_line = prefix.world_line,
            until = prefix.until_sequence,
            "session rolled back"
        );
        Ok(RollbackReport { prefix, operations })
    }

    /// Reads the published cut and returns the commit point (running callbacks if it
    /// advanced). A rollback observed here is returned as [`ClientError::Rollback`].
    pub fn commit_point(&mut self) -> Result<CommitPoint, ClientError> {
        let state = self.watcher.latest()?;
        if state.world_line > self.dpr.world_line() {
            // Outstanding batches cannot complete on this world-line any more.
            return Err(match self.roll_back() {
                Ok(report) => ClientError::Rollback(Box::new(report)),
                Err(error) => error,
            });
        }
        let point = self.dpr.commit_point(&state)?;
        while self.tracked.front().is_some_and(|(range, _)| {
            range.end <= point.until_sequence && !point.excluded.contains(range)
        }) {
            self.tracked.pop_front();
        }
        if point != self.commit_point {
            self.commit_point = point.clone();
            for callback in &mut self.callbacks {
                callback(&point);
            }
        }
        Ok(point)
    }

    /// Waits (bounded) until every operation below `sequence` is committed (none excluded).
    pub fn wait_for_commit(
        &mut self,
        sequence: u64,
        timeout: Duration,
    ) -> Result<CommitPoint, ClientError> {
        let started = Instant::now();
        loop {
            let point = self.commit_point()?;
            if point.until_sequence >= sequence
                && point.excluded.iter().all(|r| r.start >= sequence)
            {
                return Ok(point);
            }
            if started.elapsed() >= timeout {
                return Err(ClientError::CommitTimeout {
                    sequence,
                    until: point.until_sequence,
                    waited_ms: started.elapsed().as_millis() as u64,
                });
            }
            self.watcher.wait_next(POLL_INTERVAL);
        }
    }

    /// The next sequence number the session will assign.
    pub fn next_sequence(&self) -> u64 {
        self.dpr.next_sequence()
    }
}
