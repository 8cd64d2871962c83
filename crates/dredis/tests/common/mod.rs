//! Shared helpers for the real-process D-Redis tests: a cluster in a temporary directory, and the
//! session oracle that prefixkv-cluster's tests share too (`crates/dprnet/tests/common`).

#![allow(dead_code)]

#[path = "../../../dprnet/tests/common/mod.rs"]
mod sessions;

pub use sessions::*;

use prefixkv_dredis::{LocalCluster, LocalClusterConfig};

/// A cluster of `shards` in a fresh temporary directory (kept alive by the returned guard).
pub fn start_cluster(shards: usize) -> (tempfile::TempDir, LocalCluster) {
    start_cluster_with(shards, |_| {})
}

/// Like [`start_cluster`], with `configure` applied to the configuration last.
pub fn start_cluster_with(
    shards: usize,
    configure: impl FnOnce(&mut LocalClusterConfig),
) -> (tempfile::TempDir, LocalCluster) {
    let directory = tempfile::tempdir().expect("tempdir");
    let mut config = LocalClusterConfig::new(shards, directory.path().join("cluster"));
    config.commit_interval_ms = 40;
    // Long enough that fsync stalls on a shared test machine do not fail healthy shards.
    config.lease_ms = 1000;
    configure(&mut config);
    let cluster = LocalCluster::start(config).expect("start the cluster");
    (directory, cluster)
}
