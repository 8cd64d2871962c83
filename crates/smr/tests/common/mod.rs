//! Harness shared by the tests that run real `prefixkv-smr replica` processes on loopback:
//! free ports, spawning a replica and waiting for its `READY` line, stopping it by PID (drop =
//! SIGKILL + reap), reading `SMR.STATUS`, and bounded waits on conditions.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use prefixkv_resp::Reply;
use prefixkv_smr::client::Connection;
use prefixkv_smr::types::NodeId;

/// The longest any condition is waited for.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A replica process; dropping it SIGKILLs and reaps it.
pub struct Replica {
    /// The process.
    pub child: Child,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `count` distinct free loopback ports, outside the kernel's ephemeral range (see
/// `prefixkv_testkit::net`).
pub fn free_ports(count: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::with_capacity(count);
    while ports.len() < count {
        let port = prefixkv_testkit::net::free_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// The addresses of a loopback cluster of `ids`.
pub struct Layout {
    /// `--peers` (Raft addresses).
    pub peers: String,
    /// Client port of each replica.
    pub client_ports: BTreeMap<NodeId, u16>,
    /// Client address of each replica.
    pub clients: BTreeMap<NodeId, SocketAddr>,
}

impl Layout {
    /// Free ports for every replica's Raft and client listeners.
    pub fn new(ids: &[NodeId]) -> Layout {
        let ports = free_ports(2 * ids.len());
        let (raft_ports, client_ports) = ports.split_at(ids.len());
        let peers = ids
            .iter()
            .zip(raft_ports)
            .map(|(id, port)| format!("{id}=127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let client_ports: BTreeMap<NodeId, u16> = ids
            .iter()
            .copied()
            .zip(client_ports.iter().copied())
            .collect();
        let clients = client_ports
            .iter()
            .map(|(id, port)| (*id, format!("127.0.0.1:{port}").parse().unwrap()))
            .collect();
        Layout {
            peers,
            client_ports,
            clients,
        }
    }

    /// Starts replica `id` with its data in `dir` and `extra` arguments.
    pub fn spawn(&self, id: NodeId, dir: &Path, extra: &[&str]) -> Replica {
        spawn_replica(id, &self.peers, dir, self.client_ports[&id], extra)
    }
}

/// Starts `prefixkv-smr replica` and waits for its `READY` line (bounded by the pipe closing).
pub fn spawn_replica(
    id: NodeId,
    peers: &str,
    dir: &Path,
    client_port: u16,
    extra: &[&str],
) -> Replica {
    let mut child = Command::new(env!("CARGO_BIN_EXE_prefixkv-smr"))
        .args([
            "replica",
            "--id",
            &id.to_string(),
            "--peers",
            peers,
            "--client-port",
            &client_port.to_string(),
        ])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        // Inherited: when a replica fails to start, its reason shows in the test output.
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn replica");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(
        line.starts_with("READY"),
        "replica {id} did not start: {line:?}"
    );
    Replica { child }
}

/// One `name:value` line of an `SMR.STATUS` reply.
pub fn status_field(reply: &Reply, field: &str) -> Option<String> {
    let Reply::BulkString(text) = reply else {
        return None;
    };
    let text = String::from_utf8_lossy(text).into_owned();
    text.lines().find_map(|line| {
        line.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// `SMR.STATUS` of the replica at `address`, or `None` if it does not answer within 2 s.
pub async fn status_of(address: SocketAddr) -> Option<Reply> {
    let mut connection = Connection::connect(address).await.ok()?;
    tokio::time::timeout(Duration::from_secs(2), connection.call(&[b"SMR.STATUS"]))
        .await
        .ok()?
        .ok()
}

/// The replica that says it is the leader, if one does; of several, the one with the highest
/// term (a restarted old leader may claim its old term for a moment).
pub async fn leader_of(clients: &BTreeMap<NodeId, SocketAddr>) -> Option<NodeId> {
    let mut best: Option<(u64, NodeId)> = None;
    for (id, address) in clients {
        if let Some(reply) = status_of(*address).await {
            let term = status_field(&reply, "term").and_then(|t| t.parse::<u64>().ok());
            if let (Some("Leader"), Some(term)) = (status_field(&reply, "role").as_deref(), term) {
                if best.is_none_or(|(best_term, _)| term > best_term) {
                    best = Some((term, *id));
                }
            }
        }
    }
    best.map(|(_, id)| id)
}

/// Polls `condition` until it holds; fails the test after [`DEADLINE`].
pub async fn wait_for<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until one replica says it is the leader and every replica of `clients` names it as
/// its leader (so a follower's first command does not wait for a leader); returns it.
pub async fn settled_leader(clients: &BTreeMap<NodeId, SocketAddr>) -> NodeId {
    let mut settled = None;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while settled.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for every replica to know one leader"
        );
        if let Some(leader) = leader_of(clients).await {
            let mut all_know = true;
            for address in clients.values() {
                let known = status_of(*address)
                    .await
                    .and_then(|status| status_field(&status, "leader"));
                all_know &= known == Some(leader.to_string());
            }
            if all_know {
                settled = Some(leader);
            }
        }
        if settled.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    settled.expect("loop ends when settled")
}
