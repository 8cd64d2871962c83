//! One replica: the log store, the state machine, openraft, the Raft listener and the client
//! listener, wired together.
//!
//! Directory layout under `--dir`: `log/` (see `log_store.rs`) and `checkpoints/` (see
//! `checkpoint.rs`), both on `prefixkv-storage` and through the disk of [`NodeConfig::disk`]. Two background tasks connect the state machine to openraft: one asks
//! openraft to take a pending checkpoint as its snapshot, the other purges the Raft log up to the
//! oldest retained checkpoint once a newer one is durable.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use openraft::{BasicNode, Config, SnapshotPolicy};
use prefixkv_storage::{real_disk, Disk};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::log_store::{LogStore, LogStoreConfig, LogSync};
use crate::network::Network;
use crate::state_machine::{Shared, StateMachine, StateMachineConfig};
use crate::store::StateModel;
use crate::types::{NodeId, Raft};

/// Everything a replica needs to start.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This replica's id.
    pub id: NodeId,
    /// Raft addresses of all replicas, this one included.
    pub peers: BTreeMap<NodeId, SocketAddr>,
    /// Data directory.
    pub dir: PathBuf,
    /// State model.
    pub model: StateModel,
    /// Checkpoint every this many applied commands (0: never on our own).
    pub checkpoint_every_commands: u64,
    /// Start empty even if no checkpoint verifies (see `StateMachineConfig`).
    pub allow_missing_checkpoint: bool,
    /// Raft heartbeat interval.
    pub heartbeat_ms: u64,
    /// Lower bound of the randomised election timeout.
    pub election_timeout_min_ms: u64,
    /// Raft log segment size (at least 4096).
    pub log_segment_bytes: u64,
    /// Whether the Raft log is synced before entries count as durable (`--log-sync`; what
    /// `Off` may lose is in `log_store.rs`, "Crash safety").
    pub log_sync: LogSync,
    /// The longest one client command may take at this replica before it answers
    /// `-CLUSTERDOWN` (no leader) or `-TIMEOUT` (write outcome unknown); see `forward.rs`.
    pub request_timeout_ms: u64,
    /// Where the log and the checkpoints are written (the real disk; openraft's snapshot
    /// transfer needs it, see `state_machine.rs`).
    pub disk: Arc<dyn Disk>,
}

impl NodeConfig {
    /// Defaults for loopback clusters.
    pub fn new(id: NodeId, peers: BTreeMap<NodeId, SocketAddr>, dir: PathBuf) -> Self {
        NodeConfig {
            id,
            peers,
            dir,
            model: StateModel::Concurrent,
            checkpoint_every_commands: 100_000,
            allow_missing_checkpoint: false,
            heartbeat_ms: 100,
            election_timeout_min_ms: 500,
            log_segment_bytes: crate::log_store::SEGMENT_BYTES,
            request_timeout_ms: 5_000,
            log_sync: LogSync::On,
            disk: real_disk(),
        }
    }
}

/// A running replica.
pub struct Node {
    /// The openraft handle.
    pub raft: Arc<Raft>,
    /// The state and checkpoint bookkeeping.
    pub shared: Arc<Shared>,
    /// Where clients connect.
    pub client_address: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Node {
    /// Starts a replica, binding its Raft address from `config.peers` and `client_address`.
    pub async fn start(config: NodeConfig, client_address: SocketAddr) -> anyhow::Result<Node> {
        let raft_address = *config
            .peers
            .get(&config.id)
            .context("--peers must include this replica's own id")?;
        let raft_listener = TcpListener::bind(raft_address)
            .await
            .with_context(|| format!("bind {raft_address}"))?;
        let client_listener = TcpListener::bind(client_address)
            .await
            .with_context(|| format!("bind {client_address}"))?;
        Self::start_with_listeners(config, raft_listener, client_listener).await
    }

    /// Starts a replica on listeners the caller already bound.
    pub async fn start_with_listeners(
        config: NodeConfig,
        raft_listener: TcpListener,
        client_listener: TcpListener,
    ) -> anyhow::Result<Node> {
        let client_address = client_listener.local_addr()?;
        let log_store = LogStore::open_with(
            &config.dir.join("log"),
            LogStoreConfig {
                disk: Arc::clone(&config.disk),
                segment_bytes: config.log_segment_bytes,
                sync: config.log_sync,
            },
        )?;
        let (snapshot_requests, mut snapshot_requested) = tokio::sync::mpsc::unbounded_channel();
        let state_machine = StateMachine::open(
            &config.dir.join("checkpoints"),
            StateMachineConfig {
                model: config.model,
                checkpoint_every_commands: config.checkpoint_every_commands,
                allow_missing_checkpoint: config.allow_missing_checkpoint,
                disk: Arc::clone(&config.disk),
            },
            snapshot_requests,
        )?;
        let shared = state_machine.shared();
        let raft_config = Config {
            cluster_name: "prefixkv-smr".into(),
            heartbeat_interval: config.heartbeat_ms,
            election_timeout_min: config.election_timeout_min_ms,
            election_timeout_max: config.election_timeout_min_ms * 2,
            // Our state machine decides when to checkpoint (every Δ commands) and asks openraft
            // to adopt the checkpoint as its snapshot.
            snapshot_policy: SnapshotPolicy::Never,
            // Purging is ours too: up to the older retained checkpoint, after the newer is durable.
            max_in_snapshot_log_to_keep: u64::MAX,
            purge_batch_size: 1,
            max_payload_entries: 256,
            replication_lag_threshold: config.checkpoint_every_commands.max(5000) * 2,
            install_snapshot_timeout: 10_000,
            ..Default::default()
        };
        let raft_config = Arc::new(raft_config.validate().context("raft config")?);
        let raft =
            Arc::new(Raft::new(config.id, raft_config, Network, log_store, state_machine).await?);
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(crate::network::serve(
            raft_listener,
            raft.clone(),
            |raft: Arc<Raft>, request| async move { crate::forward::answer(&raft, request).await },
        )));
        tasks.push(tokio::spawn(crate::client::serve(
            client_listener,
            config.id,
            raft.clone(),
            shared.clone(),
            crate::forward::ServeConfig {
                request_timeout: Duration::from_millis(config.request_timeout_ms),
            },
        )));
        {
            let raft = raft.clone();
            tasks.push(tokio::spawn(async move {
                while snapshot_requested.recv().await.is_some() {
                    while snapshot_requested.try_recv().is_ok() {}
                    if raft.trigger().snapshot().await.is_err() {
                        return;
                    }
                }
            }));
        }
        {
            let raft = raft.clone();
            let mut purge_upto = shared.purge_upto();
            tasks.push(tokio::spawn(async move {
                while purge_upto.changed().await.is_ok() {
                    let upto = *purge_upto.borrow_and_update();
                    if let Some(upto) = upto {
                        // openraft clamps this to its snapshot and delays it while a replication
                        // stream still needs the entries.
                        if raft.trigger().purge_log(upto).await.is_err() {
                            return;
                        }
                    }
                }
            }));
        }
        // Every replica initializes with the same membership; openraft accepts that, and it
        // means any majority can form the first leader.
        let members: BTreeMap<NodeId, BasicNode> = config
            .peers
            .iter()
            .map(|(id, address)| (*id, BasicNode::new(address.to_string())))
            .collect();
        if !raft.is_initialized().await? {
            if let Err(error) = raft.initialize(members).await {
                tracing::info!("initialize: {error}");
            }
        }
        Ok(Node {
            raft,
            shared,
            client_address,
            tasks,
        })
    }

    /// Waits until some replica is leader in this replica's view; returns its id.
    pub async fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<NodeId> {
        let metrics = self
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "a leader")
            .await
            .context("no leader elected")?;
        Ok(metrics.current_leader.expect("checked"))
    }

    /// Waits until this replica has applied at least `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> anyhow::Result<()> {
        self.raft
            .wait(Some(timeout))
            .metrics(
                |m| m.last_applied.is_some_and(|l| l.index >= index),
                "applied",
            )
            .await
            .with_context(|| format!("replica did not apply index {index} in {timeout:?}"))?;
        Ok(())
    }

    /// Asks openraft for a snapshot now (our checkpoint of the current state) and waits until
    /// it covers at least `index`.
    pub async fn checkpoint_now(&self, index: u64, timeout: Duration) -> anyhow::Result<()> {
        self.raft.trigger().snapshot().await?;
        self.raft
            .wait(Some(timeout))
            .metrics(|m| m.snapshot.is_some_and(|s| s.index >= index), "snapshot")
            .await
            .with_context(|| format!("no snapshot covering index {index} within {timeout:?}"))?;
        Ok(())
    }

    /// Stops the replica: openraft, listeners, background tasks. Waits for a checkpoint writer
    /// that is still running, so that the directory can be reopened at once.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        for task in &self.tasks {
            task.abort();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while self.shared.checkpoint_in_progress() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.raft
            .shutdown()
            .await
            .map_err(|e| anyhow::anyhow!("raft shutdown: {e}"))?;
        // The state machine (and with it the log store's writer) may still finish queued work
        // after openraft stops; wait until it is dropped, so that nothing writes into the
        // directory once this returns.
        while self.shared.state_machine_alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Ids of all voters.
    pub fn voters(&self) -> BTreeSet<NodeId> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }
}
