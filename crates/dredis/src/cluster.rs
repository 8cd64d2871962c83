//! [`LocalCluster`]: N Redis shards, N proxies, the DPR finder and the cluster manager, in one
//! process (the Redis servers are child processes).
//!
//! Layout under the cluster directory:
//! - `metadata.sqlite`: the DPR metadata store (clients open it too);
//! - `shard-<i>/redis/`: Redis's working directory (its log, the RDB being written);
//! - `shard-<i>/versions/`: committed versions, a `prefixkv_storage::Catalog`: `v<version>/`
//!   holding `dump.rdb` and `MANIFEST` (see [`crate::manifest`]).
//!
//! The manager thread runs every `check_interval_ms`: the finder (exact by default, see
//! `prefixkv_dprnet::options`) recomputes and publishes the cut, and the cluster manager checks leases.
//! A proxy reports its Redis's exit at once (`Proxy::on_failure` → `ClusterManager::report_failure`
//! and a wake-up of the manager thread), so a dead Redis starts a rollback within milliseconds; a
//! proxy also renews its lease only while its Redis answers PING, so a hung one is detected within
//! `lease_ms`. The manager then advances the world-line and wakes every proxy, each of which
//! restores its Redis to the cut.
//!
//! The metadata store is `metadata.sqlite` in the cluster directory unless `metadata_url` names
//! another (a PostgreSQL server: clients get the same URL from [`LocalCluster::client_config`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use prefixkv_dpr::cluster::{CheckOutcome, ClusterManager, SystemClock};
use prefixkv_dpr::finder::DprFinder;
use prefixkv_dpr::metadata::{MetadataError, MetadataStore};
use prefixkv_dpr::ClusterState;

use prefixkv_dprnet::client::ClientConfig;
use prefixkv_dprnet::free_port;
use prefixkv_dprnet::options::{FinderKind, MetadataLocation};
use prefixkv_dprnet::wire::FrameLimits;

use crate::proxy::{Proxy, ProxyConfig, ProxyError, Wakeup};
use crate::redis::RedisServerConfig;
use crate::state_object::RedisStateConfig;

/// Configuration of a local cluster.
#[derive(Clone, Debug)]
pub struct LocalClusterConfig {
    /// Number of shards.
    pub shards: usize,
    /// The cluster directory.
    pub directory: PathBuf,
    /// The `redis-server` executable.
    pub redis_server: PathBuf,
    /// First proxy port (shard `i` gets `first + i`); 0 picks free ports.
    pub first_proxy_port: u16,
    /// First Redis port; 0 picks free ports.
    pub first_redis_port: u16,
    /// Commit (BGSAVE) interval per shard.
    pub commit_interval_ms: u64,
    /// Proxy maintenance tick (heartbeat, health check).
    pub tick_ms: u64,
    /// Lease length: a shard not heard from for this long has failed. Heartbeats are durable
    /// SQLite transactions; on a busy disk an fsync can stall for hundreds of milliseconds, so
    /// a short lease turns I/O stalls into (correctly handled, but needless) rollbacks.
    pub lease_ms: u64,
    /// How often the finder and manager run (each run is a few durable SQLite transactions).
    pub check_interval_ms: u64,
    /// Bound on one BGSAVE.
    pub save_timeout_ms: u64,
    /// Bound on a Redis start.
    pub start_timeout_ms: u64,
    /// The DPR finder.
    pub finder: FinderKind,
    /// The metadata store, if not `metadata.sqlite` in `directory` (see
    /// [`MetadataLocation::parse`]).
    pub metadata_url: Option<String>,
}

impl LocalClusterConfig {
    /// Defaults for `shards` shards under `directory`.
    pub fn new(shards: usize, directory: PathBuf) -> Self {
        Self {
            shards,
            directory,
            redis_server: PathBuf::from("redis-server"),
            first_proxy_port: 0,
            first_redis_port: 0,
            commit_interval_ms: 100,
            tick_ms: 10,
            lease_ms: 1000,
            check_interval_ms: 25,
            save_timeout_ms: 30_000,
            start_timeout_ms: 10_000,
            finder: FinderKind::Exact,
            metadata_url: None,
        }
    }

    /// Where the metadata store lives.
    pub fn metadata_location(&self) -> MetadataLocation {
        match &self.metadata_url {
            Some(url) => MetadataLocation::parse(url),
            None => MetadataLocation::Sqlite(self.directory.join("metadata.sqlite")),
        }
    }
}

/// Errors starting a cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The metadata store failed.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// A proxy failed to start.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    /// No free port.
    #[error("finding a free loopback port: {0}")]
    Port(std::io::Error),
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
}

/// A running local cluster. Dropping it stops the manager, the proxies and the Redis servers.
pub struct LocalCluster {
    config: LocalClusterConfig,
    proxies: Vec<Proxy>,
    finder: Arc<dyn DprFinder>,
    stop: Arc<AtomicBool>,
    manager: Option<JoinHandle<()>>,
}

impl LocalCluster {
    /// Starts everything; returns once every proxy serves.
    pub fn start(config: LocalClusterConfig) -> Result<Self, ClusterError> {
        if config.shards == 0 {
            return Err(ClusterError::Config(
                "a cluster needs at least one shard".into(),
            ));
        }
        prefixkv_storage::durable::create_dir_all_durably(
            &*prefixkv_storage::real_disk(),
            &config.directory,
        )
        .map_err(|e| ClusterError::Config(format!("{}: {e}", config.directory.display())))?;
        let store: Arc<dyn MetadataStore> = config.metadata_location().open()?;
        let finder: Arc<dyn DprFinder> = config.finder.open(Arc::clone(&store))?;
        let mut proxies = Vec::with_capacity(config.shards);
        for shard in 0..config.shards {
            let port = |first: u16| -> Result<u16, ClusterError> {
                if first == 0 {
                    free_port().map_err(ClusterError::Port)
                } else {
                    Ok(first + shard as u16)
                }
            };
            let shard_directory = config.directory.join(format!("shard-{shard}"));
            let proxy_config = ProxyConfig {
                worker_id: shard as u64,
                // Port 0 lets the proxy's own bind pick a free port (`Proxy::local_address`
                // reports it): a port picked here and bound later could be taken in between,
                // by this shard's Redis (picked next) or by anything else on the machine.
                listen: SocketAddr::from((
                    [127, 0, 0, 1],
                    match config.first_proxy_port {
                        0 => 0,
                        first => first + shard as u16,
                    },
                )),
                limits: FrameLimits::default(),
                commit_interval_ms: config.commit_interval_ms,
                tick_ms: config.tick_ms,
                heartbeat_interval_ms: (config.lease_ms / 5).max(1),
                redis: RedisStateConfig {
                    server: RedisServerConfig {
                        executable: config.redis_server.clone(),
                        port: port(config.first_redis_port)?,
                        directory: shard_directory.join("redis"),
                        start_timeout_ms: config.start_timeout_ms,
                    },
                    versions_directory: shard_directory.join("versions"),
                    save_timeout_ms: config.save_timeout_ms,
                },
                commit_catch_up: config.finder.commits_with_catch_up(),
                recovery_wait_ms: 30_000,
            };
            proxies.push(Proxy::start(proxy_config, Arc::clone(&finder))?);
        }
        let manager = Arc::new(ClusterManager::new(
            Arc::clone(&store),
            Arc::new(SystemClock),
            config.lease_ms,
        ));
        let wakeup = Arc::new(Wakeup::default());
        for proxy in &proxies {
            manager.attach(proxy.worker_id(), proxy.control());
            let (manager, wakeup) = (Arc::clone(&manager), Arc::clone(&wakeup));
            proxy.on_failure(Arc::new(move |worker, _description: &str| {
                manager.report_failure(worker);
                wakeup.wake();
            }));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, finder, wakeup) = (Arc::clone(&stop), Arc::clone(&finder), wakeup);
            let interval = Duration::from_millis(config.check_interval_ms.max(1));
            std::thread::Builder::new()
                .name("dredis-manager".into())
                .spawn(move || manage(manager, finder, stop, interval, wakeup))
                .map_err(|e| ClusterError::Config(format!("manager thread: {e}")))?
        };
        Ok(Self {
            config,
            proxies,
            finder,
            stop,
            manager: Some(thread),
        })
    }

    /// Proxy addresses, by shard.
    pub fn proxy_addresses(&self) -> Vec<SocketAddr> {
        self.proxies.iter().map(Proxy::local_address).collect()
    }

    /// Redis addresses, by shard.
    pub fn redis_addresses(&self) -> Vec<SocketAddr> {
        self.proxies.iter().map(Proxy::redis_address).collect()
    }

    /// Redis process ids, by shard (None while restarting).
    pub fn redis_pids(&self) -> Vec<Option<u32>> {
        self.proxies.iter().map(Proxy::redis_pid).collect()
    }

    /// Each proxy's world-line.
    pub fn proxy_world_lines(&self) -> Vec<u64> {
        self.proxies.iter().map(Proxy::world_line).collect()
    }

    /// The metadata file (meaningful when the store is SQLite; see
    /// [`metadata_location`](Self::metadata_location)).
    pub fn metadata_path(&self) -> PathBuf {
        self.config.directory.join("metadata.sqlite")
    }

    /// Where the metadata store lives.
    pub fn metadata_location(&self) -> MetadataLocation {
        self.config.metadata_location()
    }

    /// The cluster directory.
    pub fn directory(&self) -> &Path {
        &self.config.directory
    }

    /// A client configuration for this cluster.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(self.proxy_addresses(), self.metadata_path());
        config.metadata_url = self.config.metadata_url.clone();
        config
    }

    /// The published cluster state.
    pub fn cluster_state(&self) -> Result<ClusterState, MetadataError> {
        self.finder.cluster_state()
    }

    /// Stops the manager, the proxies and their Redis servers.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(manager) = self.manager.take() {
            let _ = manager.join();
        }
        for proxy in self.proxies.drain(..) {
            proxy.shutdown();
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
    wakeup: Arc<Wakeup>,
) {
    while !stop.load(Ordering::SeqCst) {
        if let Err(error) = finder.refresh() {
            tracing::warn!(%error, "DPR finder refresh failed");
        }
        match manager.check() {
            Ok(CheckOutcome::RollbackStarted {
                failed, world_line, ..
            }) => {
                tracing::warn!(
                    ?failed,
                    world_line,
                    "shards failed: rolling back to the DPR cut"
                )
            }
            Ok(CheckOutcome::RecoveryFinished { world_line }) => {
                tracing::info!(world_line, "recovery finished")
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cluster manager check failed"),
        }
        // A proxy that reports a failure wakes this thread: the rollback starts at once.
        wakeup.wait(interval);
    }
}
