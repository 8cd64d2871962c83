//! A local cluster of worker *processes* on loopback, plus the cluster manager: what
//! `prefixkv-cluster local`, the multi-process tests and `prefixkv-bench dpr` run.
//!
//! Each worker is a child process (`prefixkv-cluster worker ...`) with a fixed port, so clients
//! reconnect to the same address after a restart. The manager (finder refresh + lease checks)
//! runs on a thread of the launching process. A worker process that exits (killed, crashed) is
//! reported failed to the manager at once (no wait for its lease) and started again; by the restart rule (`worker` module docs) the new process waits until
//! the manager has rolled the cluster back past its previous incarnation, then restores to the cut.
//!
//! Before any worker starts, the launcher publishes hash slot ownership in the metadata store
//! (`dpr_ownership`): Redis Cluster's 16384 slots split evenly over the workers in id order,
//! each range with its worker's address ([`publish_ownership`]). Workers read it at start and
//! redirect foreign keys; clients route by it. It does not change while the cluster runs.
//!
//! The metadata store is `metadata.sqlite` in the cluster directory unless `metadata_url` names
//! another: a PostgreSQL server (`postgres://…` or a `host=… port=…` conninfo), which workers on
//! other machines can share. The launcher opens it (creating libDPR's tables) before any worker
//! starts, and passes the same location to every worker and client.

use std::ffi::OsString;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prefixkv_dpr::cluster::{CheckOutcome, ClusterManager, SystemClock};
use prefixkv_dpr::finder::DprFinder;
use prefixkv_dpr::metadata::{MetadataError, MetadataStore, PartitionRange};
use prefixkv_dpr::ClusterState;
use prefixkv_dprnet::free_port;
use prefixkv_dprnet::options::{FinderKind, MetadataLocation};
use prefixkv_dprnet::slots::{even_split, SLOT_COUNT};
use prefixkv_dprnet::ClientConfig;

use crate::worker::Recoverability;

/// Configuration of a local cluster.
#[derive(Clone, Debug)]
pub struct LocalClusterConfig {
    /// The `prefixkv-cluster` executable workers are started from.
    pub executable: PathBuf,
    /// Number of workers.
    pub workers: usize,
    /// Cluster directory: `metadata.sqlite`, `worker-<i>/` (engine data), `worker-<i>.log`.
    pub directory: PathBuf,
    /// If set, the metadata store instead of `metadata.sqlite` in `directory`: a PostgreSQL URL
    /// or conninfo string, or a SQLite path (read by [`MetadataLocation::parse`]).
    pub metadata_url: Option<String>,
    /// Commit interval of every worker.
    pub checkpoint_interval_ms: u64,
    /// What every worker guarantees (see [`Recoverability`]).
    pub recoverability: Recoverability,
    /// A worker silent this long has failed.
    pub lease_ms: u64,
    /// How often the manager refreshes the finder and checks leases.
    pub check_interval_ms: u64,
    /// Engine index buckets per worker (power of two).
    pub index_buckets: usize,
    /// Engine log memory per worker.
    pub log_memory_bytes: u64,
    /// Start workers that exit again at once (their exit is reported to the manager either way;
    /// without this, [`LocalCluster::restart`] starts them).
    pub restart_failed: bool,
    /// How long to wait for a worker to accept connections.
    pub start_timeout_ms: u64,
    /// The arguments that select the worker command, before its flags (default `worker`, i.e.
    /// `prefixkv-cluster worker`). Another program hosting a `Worker` of its own (a benchmark
    /// running co-located clients inside each worker process) accepts the same flags under its
    /// own subcommand.
    pub worker_command: Vec<OsString>,
    /// Arguments appended after the worker flags (for such a program; empty by default).
    pub worker_extra_args: Vec<OsString>,
}

impl LocalClusterConfig {
    /// Defaults: 100 ms commits, a 2 s lease (a worker's exit is reported at once; the lease only
    /// catches a hung worker, and heartbeats are fsynced SQLite transactions that a loaded
    /// machine can delay by hundreds of milliseconds), 20 ms checks, 64 Ki buckets and 256 MiB of log
    /// per worker, restarts on.
    pub fn new(executable: PathBuf, workers: usize, directory: PathBuf) -> Self {
        Self {
            executable,
            workers,
            directory,
            metadata_url: None,
            checkpoint_interval_ms: 100,
            recoverability: Recoverability::Dpr,
            lease_ms: 2000,
            check_interval_ms: 20,
            index_buckets: 1 << 16,
            log_memory_bytes: 256 << 20,
            restart_failed: true,
            start_timeout_ms: 30_000,
            worker_command: vec!["worker".into()],
            worker_extra_args: Vec::new(),
        }
    }

    /// Where the metadata store is: `metadata_url` if set, else `metadata.sqlite` in the
    /// cluster directory.
    pub fn metadata_location(&self) -> MetadataLocation {
        match &self.metadata_url {
            Some(url) => MetadataLocation::parse(url),
            None => MetadataLocation::Sqlite(self.directory.join("metadata.sqlite")),
        }
    }
}

/// Errors starting a local cluster.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Bad configuration or a file-system problem.
    #[error("local cluster: {0}")]
    Config(String),
    /// The metadata store.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// A worker process did not start or never accepted connections.
    #[error("worker {worker}: {reason} (see {log})")]
    Worker {
        /// Which.
        worker: usize,
        /// Why.
        reason: String,
        /// Its log file.
        log: PathBuf,
    },
}

struct WorkerProcess {
    address: SocketAddr,
    child: Option<Child>,
    restarts: u32,
}

/// A running local cluster. Dropping it stops the manager and kills the workers.
pub struct LocalCluster {
    config: LocalClusterConfig,
    manager: Arc<ClusterManager>,
    workers: Arc<Mutex<Vec<WorkerProcess>>>,
    finder: Arc<dyn DprFinder>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn spawn_worker(
    config: &LocalClusterConfig,
    id: usize,
    address: SocketAddr,
) -> std::io::Result<Child> {
    let log_path = config.directory.join(format!("worker-{id}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    Command::new(&config.executable)
        .args(&config.worker_command)
        .args(["--id", &id.to_string()])
        .args(["--listen", &address.to_string()])
        .arg("--dir")
        .arg(config.directory.join(format!("worker-{id}")))
        .arg("--metadata")
        .arg(config.metadata_location().argument())
        .args([
            "--checkpoint-interval-ms",
            &config.checkpoint_interval_ms.to_string(),
        ])
        .args(["--recoverability", config.recoverability.name()])
        .args([
            "--heartbeat-interval-ms",
            &(config.lease_ms / 5).max(1).to_string(),
        ])
        .args(["--index-buckets", &config.index_buckets.to_string()])
        .args(["--log-memory-bytes", &config.log_memory_bytes.to_string()])
        .args(&config.worker_extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
}

/// Publishes an even split of the hash slots over `addresses` (worker `i` at `addresses[i]`)
/// as the cluster's ownership table, replacing any earlier one. At most 16384 workers.
pub fn publish_ownership(
    store: &dyn MetadataStore,
    addresses: &[SocketAddr],
) -> Result<(), LaunchError> {
    if addresses.is_empty() || addresses.len() > usize::from(SLOT_COUNT) {
        return Err(LaunchError::Config(format!(
            "{} workers: a cluster has 1..={SLOT_COUNT} workers (one hash slot at least each)",
            addresses.len()
        )));
    }
    let ranges: Vec<PartitionRange> = even_split(addresses.len())
        .into_iter()
        .zip(addresses)
        .enumerate()
        .map(|(worker, ((first, last), address))| PartitionRange {
            first: u64::from(first),
            last: u64::from(last),
            worker: worker as u64,
            address: address.to_string(),
        })
        .collect();
    store.set_ownership(&ranges)?;
    Ok(())
}

/// Waits until `address` accepts a connection, or `child` exits, or the timeout.
fn wait_listening(address: SocketAddr, child: &mut Child, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited with {status} before listening"));
        }
        if Instant::now() >= deadline {
            return Err(format!("not listening on {address} after {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl LocalCluster {
    /// Starts the metadata store, the workers and the manager; returns once every worker serves.
    pub fn start(config: LocalClusterConfig) -> Result<Self, LaunchError> {
        if config.workers == 0 {
            return Err(LaunchError::Config(
                "a cluster needs at least one worker".into(),
            ));
        }
        prefixkv_storage::durable::create_dir_all_durably(
            &*prefixkv_storage::real_disk(),
            &config.directory,
        )
        .map_err(|e| LaunchError::Config(format!("{}: {e}", config.directory.display())))?;
        let store = config.metadata_location().open()?;
        let finder = FinderKind::Exact.open(Arc::clone(&store))?;
        let mut addresses = Vec::with_capacity(config.workers);
        for _ in 0..config.workers {
            let port = free_port().map_err(|e| LaunchError::Config(format!("free port: {e}")))?;
            addresses.push(SocketAddr::from(([127, 0, 0, 1], port)));
        }
        publish_ownership(store.as_ref(), &addresses)?;
        let mut workers = Vec::with_capacity(config.workers);
        for (id, address) in addresses.into_iter().enumerate() {
            let child = spawn_worker(&config, id, address).map_err(|e| LaunchError::Worker {
                worker: id,
                reason: format!("spawn {}: {e}", config.executable.display()),
                log: config.directory.join(format!("worker-{id}.log")),
            })?;
            workers.push(WorkerProcess {
                address,
                child: Some(child),
                restarts: 0,
            });
        }
        let timeout = Duration::from_millis(config.start_timeout_ms);
        for (id, worker) in workers.iter_mut().enumerate() {
            let child = worker.child.as_mut().expect("just spawned");
            wait_listening(worker.address, child, timeout).map_err(|reason| {
                LaunchError::Worker {
                    worker: id,
                    reason,
                    log: config.directory.join(format!("worker-{id}.log")),
                }
            })?;
        }
        let manager = Arc::new(ClusterManager::new(
            Arc::clone(&store),
            Arc::new(SystemClock),
            config.lease_ms,
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = Arc::new(Mutex::new(workers));
        let mut threads = Vec::new();
        {
            let (stop, finder, manager) =
                (Arc::clone(&stop), Arc::clone(&finder), Arc::clone(&manager));
            let interval = Duration::from_millis(config.check_interval_ms.max(1));
            threads.push(
                std::thread::Builder::new()
                    .name("cluster-manager".into())
                    .spawn(move || manage(manager, finder, stop, interval))
                    .map_err(|e| LaunchError::Config(format!("manager thread: {e}")))?,
            );
        }
        {
            let (stop, workers, config, manager) = (
                Arc::clone(&stop),
                Arc::clone(&workers),
                config.clone(),
                Arc::clone(&manager),
            );
            threads.push(
                std::thread::Builder::new()
                    .name("cluster-restarter".into())
                    .spawn(move || restart_exited(config, workers, manager, stop))
                    .map_err(|e| LaunchError::Config(format!("restarter thread: {e}")))?,
            );
        }
        Ok(Self {
            manager,
            config,
            workers,
            finder,
            stop,
            threads,
        })
    }

    /// Worker addresses, by worker id.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.workers.lock().iter().map(|w| w.address).collect()
    }

    /// Process id of each worker (None while it is being restarted).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.workers
            .lock()
            .iter()
            .map(|w| w.child.as_ref().map(Child::id))
            .collect()
    }

    /// How often each worker was restarted.
    pub fn restarts(&self) -> Vec<u32> {
        self.workers.lock().iter().map(|w| w.restarts).collect()
    }

    /// Kills worker `id` with SIGKILL (the restarter, if on, starts it again).
    pub fn kill(&self, id: usize) -> std::io::Result<()> {
        let workers = self.workers.lock();
        let child = workers[id]
            .child
            .as_ref()
            .ok_or_else(|| std::io::Error::other(format!("worker {id} is not running")))?;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped (we hold the
        // lock the restarter reaps under), so the pid cannot have been reused.
        let result = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        if result == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Reports worker `id` failed to the cluster manager without crashing it (the DPR paper's
    /// failure experiment, §7.4): the manager advances the world-line and every worker, this one
    /// included, rolls back to the cut in memory.
    pub fn report_failure(&self, id: usize) {
        self.manager.report_failure(id as u64);
    }

    /// Starts worker `id` again (for clusters without `restart_failed`). Its process must have
    /// exited; if the launcher had not noticed yet, the exit is reported to the manager first,
    /// as it would have been. An error if the worker is still running.
    pub fn restart(&self, id: usize) -> std::io::Result<()> {
        let mut workers = self.workers.lock();
        let worker = &mut workers[id];
        if !reap(id, worker, &self.manager) {
            return Err(std::io::Error::other(format!(
                "worker {id} is still running: stop or kill it first"
            )));
        }
        worker.child = Some(spawn_worker(&self.config, id, worker.address)?);
        worker.restarts += 1;
        Ok(())
    }

    /// The SQLite metadata file in the cluster directory (the store unless `metadata_url` names
    /// another: see [`LocalCluster::metadata_location`]).
    pub fn metadata_path(&self) -> PathBuf {
        self.config.directory.join("metadata.sqlite")
    }

    /// Where the metadata store is (what workers and clients use).
    pub fn metadata_location(&self) -> MetadataLocation {
        self.config.metadata_location()
    }

    /// The cluster directory.
    pub fn directory(&self) -> &Path {
        &self.config.directory
    }

    /// A client configuration for this cluster (worker `i` is shard `i`).
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(self.addresses(), self.metadata_path());
        config.metadata_url = self.config.metadata_url.clone();
        config
    }

    /// The published cluster state.
    pub fn cluster_state(&self) -> Result<ClusterState, MetadataError> {
        self.finder.cluster_state()
    }

    /// Stops the manager and kills every worker.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        for worker in self.workers.lock().iter_mut() {
            if let Some(mut child) = worker.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn manage(
    manager: Arc<ClusterManager>,
    finder: Arc<dyn DprFinder>,
    stop: Arc<AtomicBool>,
    interval: Duration,
) {
    run_manager(&manager, finder.as_ref(), &stop, interval);
}

/// The manager loop: refresh the finder (publish the cut), check leases and drive rollbacks,
/// every `interval`, until `stop`.
pub fn run_manager(
    manager: &ClusterManager,
    finder: &dyn DprFinder,
    stop: &AtomicBool,
    interval: Duration,
) {
    while !stop.load(Ordering::SeqCst) {
        if let Err(error) = finder.refresh() {
            tracing::warn!(%error, "DPR finder refresh failed");
        }
        match manager.check() {
            Ok(CheckOutcome::RollbackStarted {
                failed, world_line, ..
            }) => tracing::warn!(
                ?failed,
                world_line,
                "workers failed: rolling back to the DPR cut"
            ),
            Ok(CheckOutcome::RecoveryFinished { world_line }) => {
                tracing::info!(world_line, "recovery finished")
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cluster manager check failed"),
        }
        std::thread::sleep(interval);
    }
}

/// If worker `id` has no running process: reaps an exited one and reports it failed to the
/// manager (once: the process is forgotten), then returns true. False while it runs.
fn reap(id: usize, worker: &mut WorkerProcess, manager: &ClusterManager) -> bool {
    if let Some(child) = worker.child.as_mut() {
        let status = match child.try_wait() {
            Ok(Some(status)) => status.to_string(),
            Ok(None) => return false,
            Err(error) => error.to_string(),
        };
        tracing::warn!(worker = id, %status, "worker exited");
        worker.child = None;
        manager.report_failure(id as u64);
    }
    true
}

/// Reaps exited workers, reports them failed to the manager at once (recovery need not wait for
/// the lease), and, with `restart_failed`, starts them again (same id, directory and port).
fn restart_exited(
    config: LocalClusterConfig,
    workers: Arc<Mutex<Vec<WorkerProcess>>>,
    manager: Arc<ClusterManager>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        {
            let mut workers = workers.lock();
            for (id, worker) in workers.iter_mut().enumerate() {
                if !reap(id, worker, &manager) {
                    continue;
                }
                if !config.restart_failed {
                    continue;
                }
                match spawn_worker(&config, id, worker.address) {
                    Ok(child) => {
                        worker.child = Some(child);
                        worker.restarts += 1;
                    }
                    Err(error) => tracing::error!(worker = id, %error, "restart failed"),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
