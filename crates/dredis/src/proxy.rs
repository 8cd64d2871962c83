//! The D-Redis proxy: one per shard, in front of its own `redis-server`.
//!
//! Per request frame (see `prefixkv_dprnet::wire`):
//! 1. The payload is parsed as RESP commands and must hold exactly `command_count` of them (a
//!    mismatch would desynchronise the pooled Redis connection, so it is refused).
//! 2. **Shared latch.** The DPR worker admits the batch (`process_batch` with no operations:
//!    world-line check, `Vs` fast-forward, dependency set) under a short mutex, and the batch is
//!    forwarded to Redis on a pooled connection while the latch is still held shared. If the
//!    batch needs the worker to seal a version (fast-forward) or restore (newer world-line), the
//!    latch is taken exclusively for that step first and then downgraded, so the BGSAVE/restore
//!    never overlaps a running batch.
//! 3. The reply is the DPR response header (the version the batch ran in) and Redis's raw replies.
//!
//! **Exclusive latch.** A commit (every `commit_interval_ms`) takes the latch exclusively while it
//! starts `BGSAVE`: every batch admitted in version `v` has finished at Redis, and none of `v+1`
//! has started, so Redis's fork captures exactly the batches of versions ≤ `v`. The RDB is then
//! written and kept in the background (see [`crate::state_object`]) while batches run again.
//!
//! **Two protocols on one port** (see `prefixkv_dprnet::wire` for the detection rule, `prefixkv_dprnet::serve`
//! for the connection loops shared with prefixkv's cluster workers): framed connections as
//! above; plain RESP connections, each a DPR session the proxy keeps for the client
//! (`prefixkv_dpr::connection`), whose commands run as DPR batches through the same shared-latch
//! path (`prefixkv_dprnet::serve::DprHost`; the proxy refuses the commands listed in
//! `proxy/refusals.rs`).
//!
//! **Failure detection** (`proxy/health.rs`): a watcher thread reaps the Redis child the moment
//! it exits (and is woken at once when a pooled connection resets) and reports the failure to the
//! cluster manager through the reporter installed with [`Proxy::on_failure`], so recovery does
//! not wait for the lease. The restore's own SIGKILL is never reported: the restore takes the
//! child out of the shared process handle before killing it.
//!
//! **Heartbeat thread.** PING Redis, and renew the worker's lease in the metadata store only if
//! Redis answered (a hung Redis lets the lease expire: the fallback when no exit is seen).
//!
//! **Maintenance thread.** Every tick: if the store's world-line moved past the worker's,
//! restore to the cut (exclusive latch; Redis is restarted from the committed RDB); commit when
//! due; prune versions below the cut.

mod health;
mod passthrough;
mod pool;
mod refusals;

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock, RwLockWriteGuard};
use prefixkv_dpr::cluster::{Clock, RestoreCommand, SystemClock, WorkerControl};
use prefixkv_dpr::finder::DprFinder;
use prefixkv_dpr::worker::BatchOutcome;
use prefixkv_dpr::{ClusterState, DprHeader, DprWorker, HeaderKind, Version, WorkerId, WorldLine};

use crate::redis::RedisProcess;
use crate::state_object::{RedisStateConfig, RedisStateObject, SaveTracker};
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_dprnet::serve::{accept_connections, BatchResult, ConnectionHandler, DprHost};
use prefixkv_dprnet::wire::{frame_commands, FrameLimits, RequestFrame, ResponseFrame};

pub use health::FailureReporter;
pub use passthrough::PassThroughProxy;

use pool::Pool;

/// Timeout of one Redis read or write on a pooled connection.
const REDIS_IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors starting a proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Binding or socket setup failed.
    #[error("proxy socket {address}: {source}")]
    Socket {
        /// The address.
        address: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The DPR worker (or its Redis) failed to start.
    #[error("proxy worker {worker}: {source}")]
    Worker {
        /// The worker id.
        worker: WorkerId,
        /// The error.
        source: prefixkv_dpr::worker::WorkerError,
    },
}

/// Configuration of a D-Redis proxy.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// This shard's DPR worker id.
    pub worker_id: WorkerId,
    /// Where clients connect (port 0: any free port).
    pub listen: SocketAddr,
    /// Frame limits.
    pub limits: FrameLimits,
    /// How often a version is committed (BGSAVE).
    pub commit_interval_ms: u64,
    /// How often the maintenance thread runs (commit slots; a restore command wakes it early).
    pub tick_ms: u64,
    /// How often the lease is renewed (while Redis answers PING) and the metadata store is
    /// checked for a new world-line. Every metadata access is a durable SQLite transaction, so
    /// keep this well below the lease but not needlessly small (the lease over 5 is plenty).
    pub heartbeat_interval_ms: u64,
    /// The Redis and where versions are kept.
    pub redis: RedisStateConfig,
    /// Commit with `Vmax` catch-up (`DprWorker::commit_with_catch_up`): needed by the
    /// approximate and hybrid finders (see `prefixkv_dprnet::options::FinderKind`).
    pub commit_catch_up: bool,
    /// How long a plain RESP connection whose command was cut off by a Redis failure waits for
    /// the rollback (to answer with its `ROLLBACK` error) before answering that the command's
    /// effect is unknown.
    pub recovery_wait_ms: u64,
}

/// Exclusive-latch holds longer than this are logged: every batch of the shard waits for them.
const SLOW_LATCH: Duration = Duration::from_millis(20);

fn slow_latch(worker: WorkerId, what: &str, waited: Instant, held: Instant) {
    let wait_ms = held.duration_since(waited).as_millis() as u64;
    let hold_ms = held.elapsed().as_millis() as u64;
    if held.elapsed() > SLOW_LATCH || held.duration_since(waited) > SLOW_LATCH {
        tracing::warn!(worker, what, wait_ms, hold_ms, "slow exclusive latch");
    }
}

/// Runs a closure when dropped.
struct Defer<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for Defer<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// The DPR side of a proxy.
struct DprCore {
    id: WorkerId,
    /// Waits for the state object's outstanding BGSAVE without holding the worker.
    saves: SaveTracker,
    /// Bound on that wait.
    save_timeout: Duration,
    /// Whether Redis answered the last PING (set by the heartbeat thread).
    healthy: AtomicBool,
    latch: RwLock<()>,
    worker: Mutex<DprWorker<RedisStateObject>>,
    finder: Arc<dyn DprFinder>,
    pool: Pool,
    process: Arc<Mutex<RedisProcess>>,
    /// Frame and RESP limits.
    limits: FrameLimits,
    /// Plain RESP connections accepted so far (numbers their DPR sessions).
    resp_connections: AtomicU64,
    /// The published cluster state as last read by the maintenance thread (RESP sessions trim
    /// their committed batches against it).
    published: Mutex<Arc<ClusterState>>,
    /// See [`ProxyConfig::commit_catch_up`].
    commit_catch_up: bool,
    /// See [`ProxyConfig::recovery_wait_ms`].
    recovery_wait: Duration,
    /// Failure detection state (the exit watcher and the reporter).
    health: health::Health,
}

/// Admission result under the shared latch.
enum Admission {
    Run(DprHeader),
    Reply(ResponseFrame),
}

impl DprCore {
    fn admit(&self, worker: &mut DprWorker<RedisStateObject>, header: &DprHeader) -> Admission {
        let world_line_before = worker.world_line();
        let outcome = worker.process_batch(header, &[]);
        if worker.world_line() != world_line_before {
            self.pool.reset();
        }
        match outcome {
            Ok(BatchOutcome::Executed { response, .. }) => Admission::Run(response),
            Ok(BatchOutcome::Rejected { response }) => Admission::Reply(ResponseFrame::Header {
                header: response,
                replies: Vec::new(),
            }),
            Err(error) => {
                Admission::Reply(ResponseFrame::Error(format!("worker {}: {error}", self.id)))
            }
        }
    }

    /// Whether admitting `header` needs the exclusive latch (seal or restore).
    fn needs_exclusive(worker: &DprWorker<RedisStateObject>, header: &DprHeader) -> bool {
        let floor = header
            .dependencies
            .iter()
            .map(|d| d.version)
            .fold(header.version, u64::max);
        header.world_line > worker.world_line() || floor > worker.version()
    }

    fn restore_if_behind(&self) {
        let Some(state) = self.read_cluster_state() else {
            return;
        };
        if state.world_line <= self.worker.lock().world_line() {
            return;
        }
        let _exclusive = self.latch.write();
        let mut worker = self.worker.lock();
        let started = Instant::now();
        match worker.restore_to(&state) {
            Ok(()) => tracing::info!(
                worker = self.id,
                world_line = state.world_line,
                version = state.cut_version(self.id),
                restore_ms = started.elapsed().as_millis() as u64,
                "restored Redis to the DPR cut"
            ),
            Err(error) => {
                tracing::warn!(worker = self.id, %error, "restore failed; will retry")
            }
        }
        self.pool.reset();
    }

    /// Seals the current version and moves to `version` (if not there yet), under the
    /// exclusive latch.
    fn commit_to(&self, version: Version) {
        let waited = Instant::now();
        let _exclusive = self.latch.write();
        let held = Instant::now();
        let _log = Defer(Some(move || slow_latch(self.id, "commit", waited, held)));
        let mut worker = self.worker.lock();
        if worker.version() >= version {
            return;
        }
        let request = DprHeader {
            kind: HeaderKind::Request,
            world_line: worker.world_line(),
            version,
            sender: u64::MAX,
            batch_sequence: 0,
            dependencies: Vec::new(),
        };
        if let Err(error) = worker.process_batch(&request, &[]) {
            tracing::warn!(worker = self.id, %error, "commit failed");
        }
    }

    /// Seals the current version labelled at least `Vmax` (`commit_with_catch_up`, one store read
    /// inside the latch) under the exclusive latch: the approximate finder's commit, so a lagging
    /// shard joins the others' version numbers in one commit (§3.4).
    fn commit_with_catch_up(&self) {
        let waited = Instant::now();
        let _exclusive = self.latch.write();
        let held = Instant::now();
        let _log = Defer(Some(move || slow_latch(self.id, "commit", waited, held)));
        if let Err(error) = self.worker.lock().commit_with_catch_up() {
            tracing::warn!(worker = self.id, %error, "commit with catch-up failed");
        }
    }

    fn prune(&self) {
        if let Some(state) = self.read_cluster_state() {
            let mut worker = self.worker.lock();
            if let Err(error) = worker.prune(&state) {
                tracing::warn!(worker = self.id, %error, "pruning old versions failed");
            }
        }
    }
}

impl DprCore {
    /// Runs one batch of `count` RESP commands under the DPR rules (module docs, steps 2–3).
    fn forward_batch(&self, request: &DprHeader, payload: &[u8], count: usize) -> BatchResult {
        let shared = self.latch.read();
        let mut worker = self.worker.lock();
        let (admission, _shared) = if Self::needs_exclusive(&worker, request) {
            drop(worker);
            drop(shared);
            // A seal must wait for Redis's previous BGSAVE child to exit; wait for that before
            // taking the latch, so the other batches keep running meanwhile. (If another commit
            // starts in between, the seal waits inside the latch: correct, only slower.)
            self.saves.wait_idle(self.save_timeout);
            let waited = Instant::now();
            let exclusive = self.latch.write();
            let held = Instant::now();
            let admission = self.admit(&mut self.worker.lock(), request);
            slow_latch(self.id, "fast-forward or restore", waited, held);
            (admission, RwLockWriteGuard::downgrade(exclusive))
        } else {
            let admission = self.admit(&mut worker, request);
            drop(worker);
            (admission, shared)
        };
        match admission {
            Admission::Reply(ResponseFrame::Header { header, .. }) => {
                BatchResult::Refused { header }
            }
            Admission::Reply(ResponseFrame::Error(text)) => BatchResult::NotRun(text),
            Admission::Run(header) => match self.pool.forward(payload, count) {
                Ok(replies) => BatchResult::Ran { header, replies },
                Err(error) => {
                    if health::is_connection_loss(&error) {
                        // Most likely Redis died: have the watcher look now.
                        self.health.suspect();
                    }
                    BatchResult::Unknown(format!(
                        "worker {}: redis failed during the batch (its effect is unknown): {error}",
                        self.id
                    ))
                }
            },
        }
    }

    /// The worker's world-line.
    fn world_line(&self) -> WorldLine {
        self.worker.lock().world_line()
    }

    /// Reads the published state and remembers it for the RESP sessions.
    fn read_cluster_state(&self) -> Option<ClusterState> {
        match self.finder.cluster_state() {
            Ok(state) => {
                let mut published = self.published.lock();
                if **published != state {
                    *published = Arc::new(state.clone());
                }
                Some(state)
            }
            Err(error) => {
                tracing::warn!(worker = self.id, %error, "reading the cluster state failed");
                None
            }
        }
    }
}

impl ConnectionHandler for DprCore {
    fn handle(&self, frame: RequestFrame) -> ResponseFrame {
        if let Err(error) = frame_commands(&frame) {
            return ResponseFrame::Error(error);
        }
        match self.forward_batch(&frame.header, &frame.payload, frame.command_count as usize) {
            BatchResult::Ran { header, replies } => ResponseFrame::Header { header, replies },
            BatchResult::Refused { header } => ResponseFrame::Header {
                header,
                replies: Vec::new(),
            },
            BatchResult::NotRun(text) | BatchResult::Unknown(text) => ResponseFrame::Error(text),
        }
    }

    fn serve_resp(&self, stream: TcpStream, first_byte: u8) {
        prefixkv_dprnet::serve::serve_resp(self, stream, first_byte);
    }
}

impl DprHost for DprCore {
    fn worker_id(&self) -> WorkerId {
        self.id
    }

    fn limits(&self) -> FrameLimits {
        self.limits
    }

    fn label(&self) -> &'static str {
        "D-Redis"
    }

    fn world_line(&self) -> WorldLine {
        DprCore::world_line(self)
    }

    fn finder(&self) -> &dyn DprFinder {
        self.finder.as_ref()
    }

    fn published(&self) -> Arc<ClusterState> {
        Arc::clone(&self.published.lock())
    }

    fn read_published(&self) -> Option<ClusterState> {
        self.read_cluster_state()
    }

    fn next_connection(&self) -> u64 {
        self.resp_connections.fetch_add(1, Ordering::SeqCst)
    }

    fn recovery_wait(&self) -> Duration {
        self.recovery_wait
    }

    fn run_batch(
        &self,
        request: &DprHeader,
        payload: &[u8],
        commands: &[prefixkv_resp::Command],
    ) -> BatchResult {
        self.forward_batch(request, payload, commands.len())
    }

    fn local_reply(&self, command: &prefixkv_resp::Command) -> Option<Vec<u8>> {
        refusals::refusal_reply(command)
    }
}

/// Wakes the maintenance thread early (used as the cluster manager's [`WorkerControl`]).
#[derive(Default)]
pub struct Wakeup {
    pending: Mutex<bool>,
    signal: Condvar,
}

impl Wakeup {
    /// Wakes the waiter (or makes its next wait return at once).
    pub(crate) fn wake(&self) {
        *self.pending.lock() = true;
        self.signal.notify_all();
    }

    /// Waits up to `timeout`; returns whether a wake-up arrived.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let mut pending = self.pending.lock();
        if !*pending {
            self.signal.wait_for(&mut pending, timeout);
        }
        std::mem::replace(&mut *pending, false)
    }
}

/// The cluster manager's handle on an in-process proxy: a restore command wakes its maintenance
/// thread, which reads the new world-line and cut from the metadata store and restores.
pub struct ProxyControl {
    wakeup: Arc<Wakeup>,
}

impl WorkerControl for ProxyControl {
    fn restore(&self, command: RestoreCommand) {
        tracing::info!(
            world_line = command.world_line,
            failed = command.failed,
            "restore command received"
        );
        self.wakeup.wake();
    }
}

struct Running {
    stop: Arc<AtomicBool>,
    local_address: SocketAddr,
    clients: Arc<Mutex<Vec<TcpStream>>>,
    threads: Vec<JoinHandle<()>>,
    wakeup: Arc<Wakeup>,
}

impl Running {
    fn shutdown(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        self.wakeup.wake();
        // Wake the acceptor.
        let _ = TcpStream::connect_timeout(&self.local_address, Duration::from_secs(1));
        for client in self.clients.lock().drain(..) {
            let _ = client.shutdown(Shutdown::Both);
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn serve(
    listen: SocketAddr,
    limits: FrameLimits,
    handler: Arc<dyn ConnectionHandler>,
    wakeup: Arc<Wakeup>,
) -> Result<Running, ProxyError> {
    let listener = TcpListener::bind(listen).map_err(|source| ProxyError::Socket {
        address: listen,
        source,
    })?;
    let local_address = listener.local_addr().map_err(|source| ProxyError::Socket {
        address: listen,
        source,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let acceptor = {
        let (stop, clients) = (Arc::clone(&stop), Arc::clone(&clients));
        std::thread::Builder::new()
            .name("dredis-accept".into())
            .spawn(move || {
                accept_connections(listener, limits, handler, &stop, &clients, "dredis-conn")
            })
            .map_err(|source| ProxyError::Socket {
                address: local_address,
                source,
            })?
    };
    Ok(Running {
        stop,
        local_address,
        clients,
        threads: vec![acceptor],
        wakeup,
    })
}

/// A running D-Redis proxy (DPR mode): its Redis, its DPR worker, its listener and its
/// maintenance thread. Dropping it stops everything, including its Redis.
pub struct Proxy {
    core: Arc<DprCore>,
    running: Running,
    redis_address: SocketAddr,
}

impl Proxy {
    /// Starts the Redis, restores it to this worker's entry in the published cut, and serves.
    pub fn start(config: ProxyConfig, finder: Arc<dyn DprFinder>) -> Result<Self, ProxyError> {
        let worker_error = |source| ProxyError::Worker {
            worker: config.worker_id,
            source,
        };
        let state_object =
            RedisStateObject::open(config.redis.clone()).map_err(|e| worker_error(e.into()))?;
        let redis_address = state_object.redis_address();
        let process = state_object.process();
        let worker = DprWorker::start(
            config.worker_id,
            state_object,
            Arc::clone(&finder),
            config.limits.max_dependencies,
            SystemClock.now_ms(),
        )
        .map_err(worker_error)?;
        let saves = worker.state_object().saves();
        let world_line = worker.world_line();
        let core = Arc::new(DprCore {
            id: config.worker_id,
            saves,
            save_timeout: Duration::from_millis(config.redis.save_timeout_ms),
            healthy: AtomicBool::new(true),
            latch: RwLock::new(()),
            worker: Mutex::new(worker),
            finder,
            pool: Pool::new(redis_address),
            process,
            limits: config.limits,
            resp_connections: AtomicU64::new(0),
            published: Mutex::new(Arc::new(ClusterState {
                world_line,
                ..ClusterState::default()
            })),
            commit_catch_up: config.commit_catch_up,
            recovery_wait: Duration::from_millis(config.recovery_wait_ms),
            health: health::Health::default(),
        });
        let wakeup = Arc::new(Wakeup::default());
        let config_heartbeat_ms = config.heartbeat_interval_ms;
        let mut running = serve(
            config.listen,
            config.limits,
            Arc::clone(&core) as Arc<dyn ConnectionHandler>,
            Arc::clone(&wakeup),
        )?;
        let maintenance = {
            let (core, stop, wakeup) = (
                Arc::clone(&core),
                Arc::clone(&running.stop),
                Arc::clone(&wakeup),
            );
            std::thread::Builder::new()
                .name("dredis-maintain".into())
                .spawn(move || maintain(core, config, stop, wakeup))
                .map_err(|source| ProxyError::Socket {
                    address: running.local_address,
                    source,
                })?
        };
        running.threads.push(maintenance);
        let heartbeat = {
            let (core, stop) = (Arc::clone(&core), Arc::clone(&running.stop));
            let tick = Duration::from_millis(config_heartbeat_ms.max(1));
            std::thread::Builder::new()
                .name("dredis-heartbeat".into())
                .spawn(move || heartbeat(core, tick, stop))
                .map_err(|source| ProxyError::Socket {
                    address: running.local_address,
                    source,
                })?
        };
        running.threads.push(heartbeat);
        let watcher = {
            let (core, stop) = (Arc::clone(&core), Arc::clone(&running.stop));
            std::thread::Builder::new()
                .name("dredis-exit-watch".into())
                .spawn(move || health::watch_exits(&core, &stop))
                .map_err(|source| ProxyError::Socket {
                    address: running.local_address,
                    source,
                })?
        };
        running.threads.push(watcher);
        Ok(Self {
            core,
            running,
            redis_address,
        })
    }

    /// Where clients connect.
    pub fn local_address(&self) -> SocketAddr {
        self.running.local_address
    }

    /// The Redis's address.
    pub fn redis_address(&self) -> SocketAddr {
        self.redis_address
    }

    /// The Redis's process id (None while it is restarting).
    pub fn redis_pid(&self) -> Option<u32> {
        self.core.process.lock().pid()
    }

    /// The worker id.
    pub fn worker_id(&self) -> WorkerId {
        self.core.id
    }

    /// The worker's world-line.
    pub fn world_line(&self) -> WorldLine {
        self.core.worker.lock().world_line()
    }

    /// Installs what to call when this proxy sees its Redis fail (its process exited): typically
    /// `ClusterManager::report_failure` plus a wake-up of the manager's thread. Without one, the
    /// failure is noticed only when the lease expires.
    pub fn on_failure(&self, reporter: FailureReporter) {
        self.core.health.set_reporter(reporter);
    }

    /// A control for the cluster manager.
    pub fn control(&self) -> Arc<dyn WorkerControl> {
        Arc::new(ProxyControl {
            wakeup: Arc::clone(&self.running.wakeup),
        })
    }

    /// Stops serving and stops the Redis.
    pub fn shutdown(mut self) {
        self.running.shutdown();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.running.shutdown();
    }
}

/// Renews the lease while Redis answers PING. A thread of its own, so a slow commit or restore
/// never makes a healthy shard look dead.
fn heartbeat(core: Arc<DprCore>, tick: Duration, stop: Arc<AtomicBool>) {
    let mut health: Option<RedisConnection> = None;
    let mut was_healthy = true;
    while !stop.load(Ordering::SeqCst) {
        let ping = |health: &mut Option<RedisConnection>| {
            if health.is_none() {
                *health = RedisConnection::connect(core.pool.address, Duration::from_secs(1)).ok();
            }
            let pong = health.as_mut().is_some_and(|c| {
                matches!(c.command(&[b"PING"]), Ok(prefixkv_resp::Reply::SimpleString(s)) if &s[..] == b"PONG")
            });
            if !pong {
                *health = None;
            }
            pong
        };
        // A restore restarts Redis, which breaks the kept connection: retry once on a fresh one
        // before calling the shard unhealthy (that would pause its commits for a whole tick).
        let healthy = ping(&mut health) || ping(&mut health);
        core.healthy.store(healthy, Ordering::SeqCst);
        if healthy != was_healthy {
            tracing::warn!(worker = core.id, healthy, "redis health changed");
            was_healthy = healthy;
        }
        if healthy {
            if let Err(error) = core.finder.store().heartbeat(core.id, SystemClock.now_ms()) {
                tracing::warn!(worker = core.id, %error, "heartbeat failed");
            }
        }
        std::thread::sleep(tick);
    }
}

/// Restores when the world-line moved, and commits once per commit interval.
///
/// Commits are aligned to wall-clock slots: at slot `k = now_ms / commit_interval_ms` the worker
/// is fast-forwarded to version `k` (through the same Lamport rule a session's `Vs` triggers,
/// which seals the current version). Every shard therefore uses the same version numbers at the
/// same time, so a session carrying another shard's version rarely forces an extra seal, and when
/// it does, that seal *is* this slot's commit (the version is already `k`).
///
/// With `commit_catch_up` (approximate and hybrid finders) the slot's commit seals with `Vmax`
/// catch-up instead (`commit_with_catch_up`: the sealed version is labelled at least `Vmax`, then
/// the worker moves one above it). In the steady state that is the same step (seal `k-1`, move
/// to `k`); a shard whose version lags behind the others' persisted ones (`Vmax`) catches up in
/// that one commit instead of holding the approximate cut (`Vmin`) back. If the label stays
/// below the slot, the next tick commits again.
fn maintain(core: Arc<DprCore>, config: ProxyConfig, stop: Arc<AtomicBool>, wakeup: Arc<Wakeup>) {
    let tick = Duration::from_millis(config.tick_ms.max(1));
    let interval_ms = config.commit_interval_ms.max(1);
    let (saves, save_timeout) = (&core.saves, core.save_timeout);
    let check_interval = Duration::from_millis(config.heartbeat_interval_ms.max(1));
    let mut next_check = Instant::now();
    let mut woken = false;
    while !stop.load(Ordering::SeqCst) {
        if woken || Instant::now() >= next_check {
            core.restore_if_behind();
            next_check = Instant::now() + check_interval;
        }
        let slot = SystemClock.now_ms() / interval_ms;
        // A dead Redis cannot commit; the cluster manager will have everyone restore.
        if core.healthy.load(Ordering::SeqCst) && core.worker.lock().version() < slot {
            // Wait for the previous BGSAVE before taking the latch, so batches keep running
            // meanwhile.
            if saves.wait_idle(save_timeout) {
                if core.commit_catch_up {
                    core.commit_with_catch_up();
                } else {
                    core.commit_to(slot);
                }
                core.prune();
            }
        }
        woken = wakeup.wait(tick);
    }
}
