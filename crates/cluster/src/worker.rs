//! A cluster worker: one engine behind libDPR's worker, serving DPR batches of RESP commands.
//!
//! **Two protocols on one port**, told apart by the first byte exactly as on a D-Redis proxy
//! (the connection loops are `prefixkv_dprnet::serve`, shared): framed DPR batches from the
//! client library, and plain RESP from any Redis client, each connection a DPR session the
//! worker keeps (`PREFIXKV.COMMITPOINT`, `-ROLLBACK …`; see `worker/host.rs`). Keys are checked
//! against the hash slots this worker owns ([`crate::topology`]): a foreign key gets `-MOVED`,
//! keys spanning slots `-CROSSSLOT`, and neither runs. Client sessions in the worker's own
//! process can skip the network for its keys (`worker/colocated.rs`, [`Worker::local_client`]):
//! their batches enter the same path below, minus the frame decoding.
//!
//! Per request frame (the framed protocol of `prefixkv_dprnet::wire`, shared with D-Redis so the
//! same client library drives both):
//! 1. The payload is parsed into RESP commands; their number must match the frame's.
//! 2. **Admission** under the DPR worker's mutex, with no engine session held: world-line check,
//!    `Vs` fast-forward (the paper's rule, [`prefixkv_dpr::worker::FastForward::Seal`]: the
//!    current version is sealed under its own number and the worker moves on to `Vs`),
//!    dependency set. A batch from a newer world-line (which makes the worker restore first) or
//!    with a `Vs` or dependency above the worker's version (which seals) is admitted under the
//!    exclusive latch: no batch runs across a version switch.
//! 3. **Execution** on an engine session lent at admission, concurrently with other batches and
//!    with a checkpoint being written (CPR), under the latch held shared: the response names the
//!    version the batch was admitted in, and the whole batch ran in that version.
//!
//! **Maintenance thread.** Commits at wall-clock slots (`slot = now_ms / interval`: every worker
//! seals at about the same time under the same numbers) unless
//! [`crate::state_object::MAX_BACKLOG`] sealed versions still wait for their checkpoints; polls
//! the metadata store for a new world-line and restores to the cut; prunes versions below the
//! cut. **Heartbeat thread.** Renews the lease unless a checkpoint failed.
//!
//! **Restart rule** (the incarnation marker). A worker that served in world-line `w` and starts
//! again (after a crash, a kill or even a clean stop: its in-memory versions above the cut are
//! gone, and other workers may depend on them) must not rejoin world-line `w`. The file
//! `INCARNATION` in its directory records the world-line it serves in; at start, if the file says
//! `w` and the cluster is still at `w`, the worker waits, without renewing its lease, until the
//! cluster manager has rolled the cluster back to a newer world-line, then restores to the cut.
//!
//! Locks, in order: latch (shared by batches while they are admitted and run; exclusive for a
//! commit's version switch and for a blocking restore), then the DPR worker's mutex, then the
//! engine's session pool. A commit takes the latch exclusively, so no batch is running while the
//! engine switches versions: every batch runs wholly in one version (see `state_object`), and the
//! switch waits for no session (all are suspended between batches).

mod colocated;
mod config;
mod host;
pub mod shard;
mod slots;

pub use colocated::LocalHandle;
pub use config::{Recoverability, StartError, WorkerConfig};

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use prefixkv_dpr::cluster::{Clock, SystemClock};
use prefixkv_dpr::finder::DprFinder;
use prefixkv_dpr::worker::{BatchOutcome, FastForward, WorkerError};
use prefixkv_dpr::{ClusterState, DprHeader, DprWorker, WorkerId, WorldLine};
use prefixkv_dprnet::serve::accept_connections;
use prefixkv_dprnet::wire::{FrameLimits, ResponseFrame};
use prefixkv_resp::Command;

use crate::state_object::{Engine, EngineStateObject, Lent};
use crate::topology::Topology;

/// The file recording the world-line a worker serves in (see the module docs).
pub const INCARNATION_FILE: &str = "INCARNATION";

/// The operation log of [`Recoverability::Synchronous`] and, per sealed version, the log
/// position it covers.
type SyncLog = (
    prefixkv_storage::log::Log,
    Mutex<std::collections::VecDeque<(u64, u64)>>,
);

/// The state shared by a worker's threads.
struct Core {
    id: WorkerId,
    recoverability: Recoverability,
    /// The per-batch log of [`Recoverability::Synchronous`], with the log position each sealed
    /// version covers (truncated once that version is persisted).
    oplog: Option<SyncLog>,
    latch: RwLock<()>,
    worker: Mutex<DprWorker<EngineStateObject>>,
    engine: Arc<Engine>,
    finder: Arc<dyn DprFinder>,
    incarnation: PathBuf,
    /// Frame and RESP limits.
    limits: FrameLimits,
    /// The address clients reach this worker at (named in its own ownership view).
    address: String,
    /// Hash slot ownership: the view commands are checked against, migrations, the lease.
    slots: slots::Slots,
    /// Plain RESP connections accepted so far (numbers their DPR sessions).
    resp_connections: AtomicU64,
    /// The published cluster state as last read by the maintenance thread (plain RESP sessions
    /// trim their committed batches against it).
    published: Mutex<Arc<ClusterState>>,
    /// See [`WorkerConfig::recovery_wait_ms`].
    recovery_wait: Duration,
    /// The command layer over the engine, and the plain RESP connections' state.
    shards: shard::Shards,
}

/// What admission decided. A batch to run carries the session it runs on, lent under the DPR
/// worker's mutex: a rollback (which also runs under that mutex) therefore always finds the
/// session already lent, and the engine throws the batch out (`EngineError::RolledBack`) instead
/// of letting a batch admitted in the old world-line run in the new one.
enum Admission {
    /// Boxed: a lent engine session is over 300 bytes (it grew with issue 31's sampling and
    /// accounting state), a reply under 100.
    Run(DprHeader, Box<Lent>),
    Reply(ResponseFrame),
}

impl Core {
    fn admit(&self, worker: &mut DprWorker<EngineStateObject>, header: &DprHeader) -> Admission {
        let world_line_before = worker.world_line();
        let outcome = worker.process_batch(header, &[]);
        self.engine.set_current_label(worker.version());
        if worker.world_line() != world_line_before {
            self.record_incarnation(worker.world_line());
        }
        match outcome {
            Ok(BatchOutcome::Executed { response, .. }) => match self.engine.lend() {
                Ok(lent) => Admission::Run(response, Box::new(lent)),
                Err(error) => {
                    Admission::Reply(ResponseFrame::Error(format!("worker {}: {error}", self.id)))
                }
            },
            Ok(BatchOutcome::Rejected { response }) => Admission::Reply(ResponseFrame::Header {
                header: response,
                replies: Vec::new(),
            }),
            Err(error) => {
                Admission::Reply(ResponseFrame::Error(format!("worker {}: {error}", self.id)))
            }
        }
    }

    fn record_incarnation(&self, world_line: WorldLine) {
        if let Err(error) = write_incarnation(&self.incarnation, world_line) {
            tracing::error!(worker = self.id, %error, "writing the incarnation file failed");
        }
    }

    /// Runs one DPR batch of parsed `commands` (`payload`: their RESP encoding, for the
    /// operation log), from a frame or a plain RESP connection.
    /// `connection`: the plain RESP connection's session id, whose state (an open MULTI, its
    /// WATCHes) the command layer keeps between its batches; `None` for a framed batch.
    fn run_commands(
        &self,
        request: &DprHeader,
        payload: &[u8],
        commands: &[Command],
        connection: Option<u64>,
    ) -> ResponseFrame {
        if matches!(
            self.recoverability,
            Recoverability::None | Recoverability::Eventual
        ) {
            return self.run_unadmitted(request, commands, connection);
        }
        let shared = self.latch.read();
        let worker = self.worker.lock();
        let (admission, _latch) = if request.world_line > worker.world_line()
            || request.version_floor() > worker.version()
        {
            // A restore replaces the engine, and a seal switches its version: no batch may hold
            // a session meanwhile.
            let restores = request.world_line > worker.world_line();
            drop(worker);
            drop(shared);
            let exclusive = self.latch.write();
            if restores {
                // No `Server` may hold the store the restore replaces (`worker/shard.rs`).
                self.shards.forget();
            }
            let admission = self.admit(&mut self.worker.lock(), request);
            (admission, RwLockWriteGuard::downgrade(exclusive))
        } else {
            let mut worker = worker;
            let admission = self.admit(&mut worker, request);
            drop(worker);
            (admission, shared)
        };
        let (header, lent) = match admission {
            Admission::Reply(reply) => return reply,
            Admission::Run(header, lent) => (header, *lent),
        };
        let (replies, newest_engine_version) = match self.execute(lent, commands, connection) {
            Ok(done) => done,
            Err(reply) => return reply,
        };
        if let Some((log, _)) = &self.oplog {
            let logged = log
                .append(payload)
                .and_then(|ticket| ticket.wait().map(|_| ()));
            if let Err(error) = logged {
                return ResponseFrame::Error(format!(
                    "worker {}: the operation log failed (the batch ran; its durability is \
                     unknown): {error}",
                    self.id
                ));
            }
        }
        // The batch ran wholly in the engine version current at its admission (commits and
        // restores take the latch exclusively), so the admitted version is its version: the
        // label that engine version had then: its seal's label if it was sealed since, else the
        // worker's current version, which only grew; either way at least the admitted one.
        debug_assert!(
            newest_engine_version == 0
                || self.engine.label_of(newest_engine_version) >= header.version,
            "a batch admitted in version {} ran in engine version {newest_engine_version}",
            header.version
        );
        ResponseFrame::Header {
            header,
            replies: replies.to_vec(),
        }
    }

    /// Runs `commands` on a lent session through the command layer (`worker/shard.rs`): the
    /// replies and the newest engine version they ran in.
    fn execute(
        &self,
        mut lent: Lent,
        commands: &[Command],
        connection: Option<u64>,
    ) -> Result<(BytesMut, u64), ResponseFrame> {
        let shard = match self.shards.get(lent.session.store()) {
            Ok(shard) => shard,
            Err(error) => {
                self.engine.give_back(lent);
                return Err(ResponseFrame::Error(format!("worker {}: {error}", self.id)));
            }
        };
        let mut client = self.shards.take_client(connection, &shard);
        let mut replies = BytesMut::with_capacity(64 * commands.len());
        let mut newest_engine_version = 0;
        // Read once per batch, under the latch: a freeze (at a version switch, exclusive) is
        // either wholly before this batch or wholly after it.
        let view = self.slots.view();
        for command in commands {
            // A key of a slot this worker does not own, or frozen, or an expired ownership
            // lease: the command does not run (framed batches get the refusal as its reply;
            // plain RESP connections get it before the batch, see `worker/host.rs`).
            let refusal = view.refusal(&command.args);
            if let Some(refusal) = refusal {
                replies.extend_from_slice(&refusal);
                continue;
            }
            let serial_before = lent.session.serial();
            shard.run(&mut client, &mut lent.session, &command.args, &mut replies);
            // A command that made no engine operation (PING, MULTI, a refusal) leaves the
            // session's version at that of its last operation, possibly in an earlier batch.
            if lent.session.serial() == serial_before {
                continue;
            }
            let version = lent.session.engine_version();
            debug_assert!(
                newest_engine_version == 0 || newest_engine_version == version,
                "a batch straddled an engine version switch"
            );
            newest_engine_version = version;
        }
        self.shards.put_client(connection, client);
        self.engine.give_back(lent);
        Ok((replies, newest_engine_version))
    }

    /// A batch of the `None` and `Eventual` levels: no admission, no dependency tracking.
    fn run_unadmitted(
        &self,
        request: &DprHeader,
        commands: &[Command],
        connection: Option<u64>,
    ) -> ResponseFrame {
        // Shared even without admission: a restore (exclusive) must find no session lent, and a
        // commit's version switch happens between batches here too, so that the uncoordinated
        // baseline differs from DPR only by DPR's own work (admission, dependencies, cuts).
        let _shared = self.latch.read();
        let lent = match self.engine.lend() {
            Ok(lent) => lent,
            Err(error) => return ResponseFrame::Error(format!("worker {}: {error}", self.id)),
        };
        let (replies, newest_engine_version) = match self.execute(lent, commands, connection) {
            Ok(done) => done,
            Err(reply) => return reply,
        };
        ResponseFrame::Header {
            header: DprHeader {
                kind: prefixkv_dpr::HeaderKind::Response,
                world_line: request.world_line,
                version: self.engine.label_of(newest_engine_version),
                sender: self.id,
                batch_sequence: request.batch_sequence,
                dependencies: Vec::new(),
            },
            replies: replies.to_vec(),
        }
    }

    /// Restores to `state`'s cut if the cluster moved to a newer world-line.
    fn restore_if_behind(&self, state: &ClusterState) {
        if state.world_line <= self.worker.lock().world_line() {
            return;
        }
        let _exclusive = self.latch.write();
        // No `Server` may hold the store the restore replaces (`worker/shard.rs`).
        self.shards.forget();
        let mut worker = self.worker.lock();
        let started = Instant::now();
        match worker.restore_to(state) {
            Ok(()) => {
                self.engine.set_current_label(worker.version());
                self.record_incarnation(worker.world_line());
                tracing::info!(
                    worker = self.id,
                    world_line = state.world_line,
                    version = state.cut_version(self.id),
                    restore_ms = started.elapsed().as_millis() as u64,
                    "restored the engine to the DPR cut"
                );
            }
            Err(error) => tracing::warn!(worker = self.id, %error, "restore failed; will retry"),
        }
    }

    /// Seals the current version and moves to `slot`, unless the sealed versions' checkpoints
    /// are too far behind (see [`crate::state_object::MAX_BACKLOG`]).
    fn commit_to(&self, slot: u64) {
        let due = |worker: &DprWorker<EngineStateObject>| {
            worker.version() < slot && !worker.state_object().backlog_full()
        };
        if !due(&self.worker.lock()) {
            return;
        }
        // Exclusive: every batch admitted so far has finished, none starts until the engine's
        // version switch is done, so each batch runs wholly in one version (the one it was
        // admitted in). With no batch running, every session is suspended and the switch takes
        // no longer than an epoch drain.
        let _exclusive = self.latch.write();
        let mut worker = self.worker.lock();
        if !due(&worker) {
            return;
        }
        // Everything logged before the commit starts ran before it, hence in a version it seals.
        let logged_through = self
            .oplog
            .as_ref()
            .map(|(log, _)| log.next_lsn().saturating_sub(1));
        match worker.commit_to(slot) {
            Ok(sealed) => {
                self.engine.set_current_label(worker.version());
                // Still exclusive: freezes take effect between versions (`worker/slots.rs`).
                self.slots.at_commit_boundary(sealed);
                if let (Some((_, marks)), Some(lsn)) = (&self.oplog, logged_through) {
                    marks.lock().push_back((sealed, lsn));
                }
            }
            Err(WorkerError::StateObject(
                prefixkv_dpr::state_object::StateObjectError::CommitInProgress,
            )) => {}
            Err(error) => tracing::warn!(worker = self.id, %error, "commit failed"),
        }
    }

    fn prune(&self, state: &ClusterState) {
        let mut worker = self.worker.lock();
        if let Err(error) = worker.prune(state) {
            tracing::warn!(worker = self.id, %error, "pruning old versions failed");
        }
        let persisted = worker.persisted_version();
        drop(worker);
        if let Some((log, marks)) = &self.oplog {
            let mut through = None;
            {
                let mut marks = marks.lock();
                while marks
                    .front()
                    .is_some_and(|&(sealed, _)| sealed <= persisted)
                {
                    through = marks.pop_front().map(|(_, lsn)| lsn);
                }
            }
            if let Some(lsn) = through.filter(|&lsn| lsn > 0) {
                if let Err(error) = log.truncate_through(lsn) {
                    tracing::warn!(worker = self.id, %error, "truncating the operation log failed");
                }
            }
        }
    }
}

fn read_incarnation(path: &Path) -> Result<Option<WorldLine>, StartError> {
    let error = |source| StartError::Incarnation {
        path: path.to_path_buf(),
        source,
    };
    let disk = prefixkv_storage::real_disk();
    match prefixkv_storage::durable::read_file(&*disk, path, 64).map_err(error)? {
        None => Ok(None),
        Some(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            text.trim().parse().map(Some).map_err(|_| {
                error(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("expected a world-line number, found {text:?}"),
                ))
            })
        }
    }
}

fn write_incarnation(path: &Path, world_line: WorldLine) -> std::io::Result<()> {
    let disk = prefixkv_storage::real_disk();
    prefixkv_storage::durable::write_file_durably(
        &*disk,
        path,
        format!("{world_line}\n").as_bytes(),
    )
}

/// Waits until the cluster is past `previous`, without renewing this worker's lease.
fn wait_for_rollback(
    config: &WorkerConfig,
    finder: &dyn DprFinder,
    previous: WorldLine,
) -> Result<(), StartError> {
    let started = Instant::now();
    loop {
        match finder.cluster_state() {
            Ok(state) if state.world_line > previous => return Ok(()),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reading the cluster state failed"),
        }
        if started.elapsed() > Duration::from_millis(config.rejoin_timeout_ms) {
            return Err(StartError::RollbackWait {
                worker: config.worker_id,
                world_line: previous,
                waited_ms: started.elapsed().as_millis() as u64,
            });
        }
        std::thread::sleep(Duration::from_millis(config.poll_interval_ms.clamp(1, 50)));
    }
}

/// A running worker. Dropping it stops its threads and closes client connections (a stopped
/// worker is a failed worker to the cluster: see the restart rule in the module docs).
pub struct Worker {
    core: Arc<Core>,
    stop: Arc<AtomicBool>,
    local_address: SocketAddr,
    clients: Arc<Mutex<Vec<TcpStream>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Worker {
    /// Opens the engine, waits out the restart rule, joins the cluster (restoring to this
    /// worker's entry in the cut) and serves.
    pub fn start(config: WorkerConfig, finder: Arc<dyn DprFinder>) -> Result<Self, StartError> {
        let worker_error = |source| StartError::Worker {
            worker: config.worker_id,
            source,
        };
        let incarnation = config.engine.store.dir.join(INCARNATION_FILE);
        prefixkv_storage::durable::create_dir_all_durably(
            &*prefixkv_storage::real_disk(),
            &config.engine.store.dir,
        )
        .map_err(|source| StartError::Incarnation {
            path: config.engine.store.dir.clone(),
            source,
        })?;
        if let Some(previous) = read_incarnation(&incarnation)? {
            tracing::info!(
                worker = config.worker_id,
                previous,
                "restarted: waiting for the cluster to roll back past the previous incarnation"
            );
            wait_for_rollback(&config, finder.as_ref(), previous)?;
        }
        let state_object =
            EngineStateObject::open(config.engine.clone()).map_err(|e| worker_error(e.into()))?;
        let engine = state_object.engine();
        let mut worker = DprWorker::start(
            config.worker_id,
            state_object,
            Arc::clone(&finder),
            config.limits.max_dependencies,
            SystemClock.now_ms(),
        )
        .map_err(worker_error)?;
        worker.set_fast_forward(FastForward::Seal);
        engine.set_current_label(worker.version());
        write_incarnation(&incarnation, worker.world_line()).map_err(|source| {
            StartError::Incarnation {
                path: incarnation.clone(),
                source,
            }
        })?;
        let oplog = match config.recoverability {
            Recoverability::Synchronous => {
                let dir = config.engine.store.dir.join("oplog");
                let log_config = prefixkv_storage::log::LogConfig {
                    policy: prefixkv_storage::log::SyncPolicy::Always,
                    ..prefixkv_storage::log::LogConfig::default()
                };
                let (log, _) = prefixkv_storage::log::Log::open(&dir, log_config).map_err(|e| {
                    StartError::Incarnation {
                        path: dir.clone(),
                        source: std::io::Error::other(e.to_string()),
                    }
                })?;
                Some((log, Mutex::new(std::collections::VecDeque::new())))
            }
            _ => None,
        };
        let listener = TcpListener::bind(config.listen).map_err(|source| StartError::Socket {
            address: config.listen,
            source,
        })?;
        let local_address = listener.local_addr().map_err(|source| StartError::Socket {
            address: config.listen,
            source,
        })?;
        let topology = Topology::load(
            finder.store().as_ref(),
            config.worker_id,
            &local_address.to_string(),
        )
        .map_err(|source| StartError::Topology {
            worker: config.worker_id,
            source,
        })?;
        let core = Arc::new(Core {
            id: config.worker_id,
            recoverability: config.recoverability,
            oplog,
            latch: RwLock::new(()),
            worker: Mutex::new(worker),
            engine,
            finder,
            incarnation,
            limits: config.limits,
            address: local_address.to_string(),
            slots: slots::Slots::new(
                topology,
                Duration::from_millis(config.ownership_lease_ms.max(1)),
            ),
            resp_connections: AtomicU64::new(0),
            published: Mutex::new(Arc::new(ClusterState::default())),
            recovery_wait: Duration::from_millis(config.recovery_wait_ms),
            shards: shard::Shards::new(&config.engine.store.dir, local_address.port()).map_err(
                |reason| StartError::Incarnation {
                    path: config.engine.store.dir.clone(),
                    source: std::io::Error::other(reason),
                },
            )?,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let spawn_error = |source| StartError::Socket {
            address: local_address,
            source,
        };
        let mut threads = Vec::new();
        {
            let (core, stop, clients) =
                (Arc::clone(&core), Arc::clone(&stop), Arc::clone(&clients));
            let limits = config.limits;
            threads.push(
                std::thread::Builder::new()
                    .name("cluster-accept".into())
                    .spawn(move || {
                        accept_connections(listener, limits, core, &stop, &clients, "cluster-conn")
                    })
                    .map_err(spawn_error)?,
            );
        }
        {
            let (core, stop, config) = (Arc::clone(&core), Arc::clone(&stop), config.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("cluster-maintain".into())
                    .spawn(move || maintain(core, config, stop))
                    .map_err(spawn_error)?,
            );
        }
        {
            let (core, stop) = (Arc::clone(&core), Arc::clone(&stop));
            let tick = Duration::from_millis(config.heartbeat_interval_ms.max(1));
            threads.push(
                std::thread::Builder::new()
                    .name("cluster-heartbeat".into())
                    .spawn(move || heartbeat(core, tick, stop))
                    .map_err(spawn_error)?,
            );
        }
        Ok(Self {
            core,
            stop,
            local_address,
            clients,
            threads,
        })
    }

    /// Where clients connect.
    pub fn local_address(&self) -> SocketAddr {
        self.local_address
    }

    /// This worker's id.
    pub fn worker_id(&self) -> WorkerId {
        self.core.id
    }

    /// The world-line this worker serves in.
    pub fn world_line(&self) -> WorldLine {
        self.core.worker.lock().world_line()
    }

    /// The engine (tests read it directly).
    pub fn engine(&self) -> Arc<Engine> {
        Arc::clone(&self.core.engine)
    }

    /// Stops serving.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = TcpStream::connect_timeout(&self.local_address, Duration::from_secs(1));
        for client in self.clients.lock().drain(..) {
            let _ = client.shutdown(Shutdown::Both);
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Renews the lease while checkpoints succeed.
fn heartbeat(core: Arc<Core>, tick: Duration, stop: Arc<AtomicBool>) {
    // Read without the DPR worker's mutex: a long restore must not look like a dead worker.
    let failed = core.worker.lock().state_object().failed_flag();
    while !stop.load(Ordering::SeqCst) {
        if failed.load(Ordering::SeqCst) {
            tracing::error!(
                worker = core.id,
                "a checkpoint failed to persist: not renewing the lease"
            );
        } else if let Err(error) = core.finder.store().heartbeat(core.id, SystemClock.now_ms()) {
            tracing::warn!(worker = core.id, %error, "heartbeat failed");
        }
        std::thread::sleep(tick);
    }
}

/// Commits once per slot, restores when the world-line moved, prunes below the cut.
fn maintain(core: Arc<Core>, config: WorkerConfig, stop: Arc<AtomicBool>) {
    let interval_ms = config.checkpoint_interval_ms.max(1);
    let poll = Duration::from_millis(config.poll_interval_ms.max(1));
    let ownership_refresh = Duration::from_millis(config.ownership_refresh_ms.max(1));
    let mut next_poll = Instant::now();
    let mut next_ownership_read = Instant::now() + ownership_refresh;
    while !stop.load(Ordering::SeqCst) {
        if Instant::now() >= next_ownership_read {
            // Renews the ownership lease (`worker/slots.rs`) and learns of migrations.
            if let Err(error) = core.refresh_ownership() {
                tracing::warn!(worker = core.id, %error, "re-reading the ownership table failed");
            }
            next_ownership_read = Instant::now() + ownership_refresh;
        }
        if Instant::now() >= next_poll {
            match core.finder.cluster_state() {
                Ok(state) => {
                    core.restore_if_behind(&state);
                    core.prune(&state);
                    core.remember_published(state);
                }
                Err(error) => {
                    tracing::warn!(worker = core.id, %error, "reading the cluster state failed")
                }
            }
            next_poll = Instant::now() + poll;
        }
        let now_ms = SystemClock.now_ms();
        if core.recoverability != Recoverability::None {
            core.commit_to(now_ms / interval_ms);
        }
        // Sleep to the next slot boundary or poll, whichever comes first (at most 5 ms, so a
        // commit that was refused because the previous checkpoint was still being written is
        // retried soon after it is published).
        let to_slot_ms = interval_ms - now_ms % interval_ms;
        std::thread::sleep(Duration::from_millis(to_slot_ms.clamp(1, 5)));
    }
}
