//! What the cluster's process tests share: a small local cluster (the launcher's worker
//! processes on loopback, a SQLite metadata file in the test's directory), sized for tests on a
//! 2-core machine: commits every 40 ms, a 1 s lease, small index and log.

use std::path::Path;

use prefixkv_cluster::{LocalCluster, LocalClusterConfig};

/// Starts `workers` workers under `directory/cluster`; they stop when the value is dropped.
pub fn small_cluster(directory: &Path, workers: usize) -> LocalCluster {
    let mut config = LocalClusterConfig::new(
        env!("CARGO_BIN_EXE_prefixkv-cluster").into(),
        workers,
        directory.join("cluster"),
    );
    config.checkpoint_interval_ms = 40;
    config.lease_ms = 1000;
    config.index_buckets = 1 << 12;
    config.log_memory_bytes = 32 << 20;
    LocalCluster::start(config).expect("start the cluster")
}
