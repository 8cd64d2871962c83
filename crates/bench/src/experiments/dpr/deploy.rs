//! One local cluster for one cell or run: worker processes (`prefixkv-cluster worker`) on
//! loopback plus the cluster manager ([`prefixkv_cluster::LocalCluster`]), in a fresh directory on
//! the local disk or on the tmpfs standing in for the paper's null device, preloaded with the key
//! space.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use prefixkv_cluster::worker::Recoverability;
use prefixkv_cluster::{LocalCluster, LocalClusterConfig};
use prefixkv_dprnet::DprRedisClient;

use super::Plan;
use crate::workload::operations::{encode_key, key};

/// Where a cluster keeps its checkpoints, metadata and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Device {
    /// The local disk (`--data-dir`, default the system temp directory).
    Disk,
    /// A tmpfs directory (`--null-dir`, default `/dev/shm`): writes and fsyncs cost no device
    /// time, the paper's "null device" as closely as this machine gets.
    Null,
}

impl Device {
    /// Its name in rows and labels.
    pub fn name(self) -> &'static str {
        match self {
            Device::Disk => "disk",
            Device::Null => "null",
        }
    }
}

/// What to start.
#[derive(Clone, Copy, Debug)]
pub(super) struct ClusterSpec {
    /// Worker processes.
    pub workers: usize,
    /// What every worker guarantees.
    pub level: Recoverability,
    /// Commit (checkpoint) interval.
    pub interval_ms: u64,
    /// Where its files go.
    pub device: Device,
}

/// The session id the preload uses (sessions of a run use ids from 1).
const LOADER_SESSION: u64 = 0;

/// The `prefixkv-cluster` executable: `flag`, or the one next to this executable.
pub(super) fn cluster_executable(flag: Option<&Path>) -> Result<PathBuf> {
    let path = match flag {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()
            .context("locating prefixkv-bench's own executable")?
            .with_file_name("prefixkv-cluster"),
    };
    if !path.is_file() {
        bail!(
            "the worker executable {} does not exist: build it with \
             `cargo build --release -p prefixkv-bench -p prefixkv-cluster` \
             (or pass --cluster-binary)",
            path.display()
        );
    }
    Ok(path)
}

/// A running cluster in its own directory (removed when dropped, kept if the start failed or
/// with `--keep-dirs`).
pub(super) struct Deployment {
    /// The cluster.
    pub cluster: LocalCluster,
    directory: tempfile::TempDir,
    keep: bool,
}

impl Deployment {
    /// Starts `spec`'s cluster; returns once every worker accepts connections.
    pub fn start(plan: &Plan, spec: &ClusterSpec) -> Result<Deployment> {
        Self::start_with(plan, spec, |_| {})
    }

    /// Like [`Deployment::start`], with `configure` applied to the launcher's configuration last
    /// (the colocation part starts its workers from this bench binary).
    pub fn start_with(
        plan: &Plan,
        spec: &ClusterSpec,
        configure: impl FnOnce(&mut LocalClusterConfig),
    ) -> Result<Deployment> {
        let parent = match spec.device {
            Device::Disk => &plan.data_dir,
            Device::Null => plan
                .null_dir
                .as_ref()
                .context("a null-device cell without a null directory")?,
        };
        let directory = tempfile::Builder::new()
            .prefix("prefixkv-dpr-")
            .tempdir_in(parent)
            .with_context(|| format!("creating a cluster directory in {}", parent.display()))?;
        let mut config = LocalClusterConfig::new(
            plan.executable.clone(),
            spec.workers,
            directory.path().join("cluster"),
        );
        config.checkpoint_interval_ms = spec.interval_ms;
        config.recoverability = spec.level;
        config.lease_ms = plan.lease_ms;
        config.index_buckets = plan.index_buckets;
        config.log_memory_bytes = plan.log_memory_bytes;
        config.start_timeout_ms = 30_000;
        configure(&mut config);
        match LocalCluster::start(config) {
            Ok(cluster) => {
                if plan.keep_dirs {
                    eprintln!("dpr: cluster directory {}", directory.path().display());
                }
                Ok(Deployment {
                    cluster,
                    directory,
                    keep: plan.keep_dirs,
                })
            }
            Err(error) => {
                let kept = directory.keep();
                bail!(
                    "starting {} {} worker(s) failed: {error} (cluster directory kept: {})",
                    spec.workers,
                    spec.level.name(),
                    kept.display()
                )
            }
        }
    }

    /// A client of this cluster with `batch` commands per batch and `window` batches in flight.
    pub fn client(&self, batch: usize, window: usize) -> Result<DprRedisClient> {
        let mut config = self.cluster.client_config();
        config.max_batch_commands = batch.max(1);
        config.window_batches = window.max(1);
        config.io_timeout_ms = 30_000;
        config.recovery_timeout_ms = 30_000;
        DprRedisClient::new(config).context("connecting a client to the cluster")
    }

    /// Writes every key of `0..keys` once (8-byte keys, 8-byte values).
    pub fn preload(&self, keys: u64) -> Result<()> {
        let client = self.client(256, 16)?;
        let mut session = client.session(LOADER_SESSION)?;
        for index in 0..keys {
            let key = encode_key(key(index));
            session.push(&[b"SET", &key, &index.to_le_bytes()])?;
        }
        session.drain().context("preloading the key space")?;
        let completed = session.take_completed().len() as u64;
        if completed != keys {
            bail!("preload: {completed} of {keys} writes acknowledged");
        }
        Ok(())
    }

    /// Stops the manager and the workers, and removes the directory (unless `--keep-dirs`).
    pub fn shutdown(self) {
        self.cluster.shutdown();
        if self.keep {
            let _ = self.directory.keep();
        }
    }
}
