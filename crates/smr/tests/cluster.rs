//! In-process clusters: replication through the real TCP network and disk log, recovery from
//! checkpoint + log after a restart, a torn log tail, a corrupt older segment, and a lagging
//! follower brought up to date by openraft's snapshot install of our checkpoint file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prefixkv_resp::Reply;
use prefixkv_smr::client::ClusterClient;
use prefixkv_smr::log_store::LogSync;
use prefixkv_smr::types::NodeId;
use prefixkv_smr::{Node, NodeConfig, StateModel};
use prefixkv_storage::{CrashMode, SimDisk};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(60);

struct Cluster {
    peers: BTreeMap<NodeId, SocketAddr>,
    clients: BTreeMap<NodeId, SocketAddr>,
    root: PathBuf,
    model: StateModel,
    checkpoint_every: u64,
    segment_bytes: u64,
}

impl Cluster {
    async fn new(root: &Path, size: u64, model: StateModel, checkpoint_every: u64) -> Cluster {
        // RUST_LOG=openraft=info shows what the replicas do when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let mut peers = BTreeMap::new();
        let mut clients = BTreeMap::new();
        for id in 1..=size {
            // Reserve ports; the nodes bind them again (tokio sets SO_REUSEADDR).
            let raft = TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap()
                .local_addr()
                .unwrap();
            let client = TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap()
                .local_addr()
                .unwrap();
            peers.insert(id, raft);
            clients.insert(id, client);
        }
        Cluster {
            peers,
            clients,
            root: root.to_path_buf(),
            model,
            checkpoint_every,
            segment_bytes: 32 << 20,
        }
    }

    fn config(&self, id: NodeId) -> NodeConfig {
        let mut config = NodeConfig::new(
            id,
            self.peers.clone(),
            self.root.join(format!("replica-{id}")),
        );
        config.model = self.model;
        config.checkpoint_every_commands = self.checkpoint_every;
        config.heartbeat_ms = 50;
        config.election_timeout_min_ms = 300;
        config.log_segment_bytes = self.segment_bytes;
        config
    }

    async fn start(&self, id: NodeId) -> anyhow::Result<Node> {
        Node::start(self.config(id), self.clients[&id]).await
    }

    fn client(&self) -> ClusterClient {
        ClusterClient::new(self.clients.clone())
    }
}

/// The Raft log's segment files of replica 1, oldest first.
fn segment_files(root: &Path) -> Vec<PathBuf> {
    let log_dir = root
        .join("replica-1/log")
        .join(prefixkv_smr::log_store::SEGMENTS_DIR);
    let mut segments: Vec<_> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "oplog"))
        .collect();
    segments.sort();
    segments
}

async fn set(client: &mut ClusterClient, key: &str, value: &str) {
    let reply = client
        .call(&[b"SET", key.as_bytes(), value.as_bytes()])
        .await
        .unwrap();
    assert_eq!(reply, Reply::SimpleString("OK".into()), "SET {key}");
}

async fn get(client: &mut ClusterClient, key: &str) -> Option<Vec<u8>> {
    match client.call(&[b"GET", key.as_bytes()]).await.unwrap() {
        Reply::BulkString(bytes) => Some(bytes.to_vec()),
        Reply::NullBulkString | Reply::Null => None,
        other => panic!("GET {key}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_recovers_after_torn_log_tail() {
    let root = tempfile::tempdir().unwrap();
    let cluster = Cluster::new(root.path(), 1, StateModel::Concurrent, 40).await;
    let node = cluster.start(1).await.unwrap();
    node.wait_for_leader(WAIT).await.unwrap();
    let mut client = cluster.client();
    for i in 0..100 {
        set(&mut client, &format!("k{i}"), &format!("v{i}")).await;
    }
    node.shutdown().await.unwrap();
    drop(client);
    // A torn append: part of a frame header and some bytes at the end of the newest segment.
    let segments = segment_files(root.path());
    let newest = segments.last().unwrap();
    let mut bytes = std::fs::read(newest).unwrap();
    bytes.extend_from_slice(&[0x40, 0x00, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
    std::fs::write(newest, &bytes).unwrap();

    let node = cluster.start(1).await.unwrap();
    node.wait_for_leader(WAIT).await.unwrap();
    let mut client = cluster.client();
    for i in 0..100 {
        assert_eq!(
            get(&mut client, &format!("k{i}")).await,
            Some(format!("v{i}").into_bytes()),
            "k{i}"
        );
    }
    set(&mut client, "after", "restart").await;
    assert_eq!(get(&mut client, "after").await, Some(b"restart".to_vec()));
    assert!(
        node.shared.current_checkpoint().is_some(),
        "checkpoints every 40 commands ran"
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_older_log_segment_refuses_to_start_with_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::new(root.path(), 1, StateModel::Blocking, 0).await;
    cluster.segment_bytes = 4096;
    let node = cluster.start(1).await.unwrap();
    node.wait_for_leader(WAIT).await.unwrap();
    let mut client = cluster.client();
    let value = "a value long enough to fill small segments quickly ".repeat(4);
    for i in 0..100 {
        set(&mut client, &format!("k{i}"), &value).await;
    }
    node.shutdown().await.unwrap();
    drop(client);
    let segments = segment_files(root.path());
    assert!(segments.len() >= 3, "small segments: {segments:?}");
    // One flipped byte in the middle of a record of an older segment.
    let older = &segments[1];
    let mut bytes = std::fs::read(older).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(older, &bytes).unwrap();
    let error = cluster
        .start(1)
        .await
        .err()
        .expect("must refuse")
        .to_string();
    assert!(
        error.contains("corrupt log segment") && error.contains(&older.display().to_string()),
        "{error}"
    );
    assert_eq!(
        std::fs::read(older).unwrap(),
        bytes,
        "refusing must not modify the file"
    );
}

async fn lagging_follower_catches_up_by_snapshot(model: StateModel) {
    let root = tempfile::tempdir().unwrap();
    let cluster = Cluster::new(root.path(), 3, model, 50).await;
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, cluster.start(id).await.unwrap());
    }
    let leader = nodes[&1].wait_for_leader(WAIT).await.unwrap();
    let mut client = cluster.client();
    set(&mut client, "first", "1").await;
    // Stop a follower, then write enough for several checkpoints and log purges.
    let lagging = (1..=3).find(|id| *id != leader).unwrap();
    nodes.remove(&lagging).unwrap().shutdown().await.unwrap();
    for i in 0..400 {
        set(&mut client, &format!("k{}", i % 150), &format!("v{i}")).await;
    }
    let leader_node = &nodes[&client.leader().unwrap()];
    let leader_applied = leader_node.shared.applied_index();
    // Purging is asynchronous (after the checkpoint is durable, and delayed by replication).
    leader_node
        .raft
        .wait(Some(WAIT))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index > 10),
            "the leader purged its log behind its checkpoints",
        )
        .await
        .unwrap();
    // Restart: the follower's log ends long before the leader's purge point, so it must take
    // the snapshot (our checkpoint file) through openraft's install.
    let restarted = cluster.start(lagging).await.unwrap();
    restarted.wait_applied(leader_applied, WAIT).await.unwrap();
    assert!(
        restarted
            .shared
            .current_checkpoint()
            .and_then(|m| m.last_log_id)
            .is_some_and(|l| l.index > 10),
        "installed a snapshot"
    );
    let leader_node = &nodes[&client.leader().unwrap()];
    assert_eq!(
        restarted.shared.store.digest(),
        leader_node.shared.store.digest()
    );
    nodes.insert(lagging, restarted);
    for (_, node) in nodes {
        node.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_follower_catches_up_by_snapshot_concurrent() {
    lagging_follower_catches_up_by_snapshot(StateModel::Concurrent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_follower_catches_up_by_snapshot_blocking() {
    lagging_follower_catches_up_by_snapshot(StateModel::Blocking).await;
}

/// Writes `count` keys through a single in-process replica whose files are on `disk` (the
/// simulated one), then cuts the power (only synced bytes survive) and restarts it: returns how
/// many of the acknowledged keys the restarted replica still holds.
async fn acknowledged_keys_after_power_cut(log_sync: LogSync, count: usize) -> usize {
    let disk = SimDisk::new(7);
    let cluster = Cluster::new(Path::new("/sim"), 1, StateModel::Concurrent, 0).await;
    let config = || {
        let mut config = cluster.config(1);
        config.disk = disk.as_disk();
        config.log_sync = log_sync;
        config
    };
    let node = Node::start(config(), cluster.clients[&1]).await.unwrap();
    node.wait_for_leader(WAIT).await.unwrap();
    let mut client = cluster.client();
    for i in 0..count {
        set(&mut client, &format!("k{i}"), "v").await;
    }
    drop(client);
    // The power cut: the disk dies first, so shutting down syncs nothing more.
    disk.kill();
    node.shutdown().await.unwrap();
    disk.crash(CrashMode::DropAll);
    let node = Node::start(config(), cluster.clients[&1]).await.unwrap();
    node.wait_for_leader(WAIT).await.unwrap();
    let mut client = cluster.client();
    let mut kept = 0;
    for i in 0..count {
        kept += usize::from(get(&mut client, &format!("k{i}")).await.is_some());
    }
    node.shutdown().await.unwrap();
    kept
}

/// `NodeConfig::log_sync` reaches the replica's log: with `Off`, writes acknowledged to a
/// client are lost to a power cut (nothing synced them); with `On`, none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_sync_setting_reaches_the_replicas_log() {
    assert_eq!(acknowledged_keys_after_power_cut(LogSync::On, 30).await, 30);
    assert_eq!(acknowledged_keys_after_power_cut(LogSync::Off, 30).await, 0);
}
