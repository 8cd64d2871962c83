//! Real processes: three `prefixkv-smr replica` processes on loopback, clients writing unique
//! keys and recording every acknowledgement, the leader SIGKILLed under load at a random point.
//! A new leader must be elected and every acknowledged write must be readable there; the killed
//! replica restarts from its newest checkpoint plus its log and converges to the same state.
//!
//! `SMR_KILL_ROUNDS` (default 1) repeats the kill-and-restart cycle.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prefixkv_resp::Reply;
use prefixkv_smr::client::ClusterClient;
use prefixkv_smr::types::NodeId;

const DEADLINE: Duration = Duration::from_secs(60);

struct Replica {
    child: Child,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `count` distinct free loopback ports: all listeners stay open until every port is chosen, so
/// the kernel cannot hand the same port out twice.
fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().unwrap().port())
        .collect()
}

fn spawn_replica(id: NodeId, peers: &str, dir: &Path, client_port: u16) -> Replica {
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
        .args(["--checkpoint-every", "150", "--model", "concurrent"])
        .stdout(Stdio::piped())
        // Inherited: when a replica fails to start, its reason shows in the test output.
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn replica");
    // The replica prints READY once it listens; wait for that line (bounded by the pipe closing).
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(
        line.starts_with("READY"),
        "replica {id} did not start: {line:?}"
    );
    Replica { child }
}

fn status_field(reply: &Reply, field: &str) -> Option<String> {
    let Reply::BulkString(text) = reply else {
        return None;
    };
    let text = String::from_utf8_lossy(text).into_owned();
    text.lines().find_map(|line| {
        line.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

async fn status_of(address: SocketAddr) -> Option<Reply> {
    let mut connection = prefixkv_smr::client::Connection::connect(address)
        .await
        .ok()?;
    tokio::time::timeout(Duration::from_secs(2), connection.call(&[b"SMR.STATUS"]))
        .await
        .ok()?
        .ok()
}

async fn wait_for<F, Fut>(what: &str, mut condition: F)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_leader_under_load_loses_no_acknowledged_write() {
    let rounds: usize = std::env::var("SMR_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let root = tempfile::tempdir().unwrap();
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let ports = free_ports(2 * ids.len());
    let raft_ports: BTreeMap<NodeId, u16> = ids
        .iter()
        .copied()
        .zip(ports[..3].iter().copied())
        .collect();
    let client_ports: BTreeMap<NodeId, u16> = ids
        .iter()
        .copied()
        .zip(ports[3..].iter().copied())
        .collect();
    let peers = raft_ports
        .iter()
        .map(|(id, port)| format!("{id}=127.0.0.1:{port}"))
        .collect::<Vec<_>>()
        .join(",");
    let clients: BTreeMap<NodeId, SocketAddr> = client_ports
        .iter()
        .map(|(id, port)| (*id, format!("127.0.0.1:{port}").parse().unwrap()))
        .collect();
    let dir = |id: NodeId| root.path().join(format!("replica-{id}"));
    let mut replicas: BTreeMap<NodeId, Replica> = ids
        .iter()
        .map(|id| (*id, spawn_replica(*id, &peers, &dir(*id), client_ports[id])))
        .collect();

    // Writers: unique keys, every acknowledged one recorded.
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let ack_count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer in 0..4 {
        let (acked, ack_count, stop, clients) = (
            acked.clone(),
            ack_count.clone(),
            stop.clone(),
            clients.clone(),
        );
        writers.push(tokio::spawn(async move {
            let mut client = ClusterClient::new(clients);
            client.retry_for = Duration::from_secs(30);
            let mut sequence = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{writer}-{sequence}");
                let value = format!("value-{writer}-{sequence}");
                sequence += 1;
                // An error (for example the leader died mid-request) means "unknown outcome":
                // not acknowledged, so not checked.
                if let Ok(Reply::SimpleString(_)) = client
                    .call(&[b"SET", key.as_bytes(), value.as_bytes()])
                    .await
                {
                    acked.lock().unwrap().push((key, value));
                    ack_count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    for round in 0..rounds {
        // Kill at a random point under load.
        let kill_after = ack_count.load(Ordering::Relaxed) + 200 + rand::random_range(0..400u64);
        wait_for("acknowledged writes before the kill", || {
            let count = ack_count.load(Ordering::Relaxed);
            async move { count >= kill_after }
        })
        .await;
        let mut leader = None;
        for (id, address) in &clients {
            if let Some(reply) = status_of(*address).await {
                if status_field(&reply, "role").as_deref() == Some("Leader") {
                    leader = Some(*id);
                }
            }
        }
        let leader = leader.expect("a leader");
        let mut victim = replicas.remove(&leader).unwrap();
        victim.child.kill().unwrap(); // SIGKILL
        victim.child.wait().unwrap();
        let acked_at_kill = ack_count.load(Ordering::Relaxed);

        // A new leader among the survivors, and writes continue.
        wait_for("writes after the kill", || {
            let count = ack_count.load(Ordering::Relaxed);
            async move { count >= acked_at_kill + 300 }
        })
        .await;

        // Restart the killed replica: newest checkpoint + its log, then catch up.
        replicas.insert(
            leader,
            spawn_replica(leader, &peers, &dir(leader), client_ports[&leader]),
        );
        eprintln!("round {round}: killed leader {leader} after {acked_at_kill} acks");
    }

    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 500, "load ran: {} acks", acked.len());

    // Every acknowledged write is readable at the (new) leader, linearizably.
    let mut client = ClusterClient::new(clients.clone());
    for (key, value) in &acked {
        let reply = client.call(&[b"GET", key.as_bytes()]).await.unwrap();
        assert_eq!(
            reply,
            Reply::BulkString(value.clone().into()),
            "acknowledged {key} lost"
        );
    }

    // All replicas converge to the same state, the restarted ones included.
    let leader_address = clients[&client.leader().unwrap()];
    let leader_applied: u64 =
        status_field(&status_of(leader_address).await.unwrap(), "applied_index")
            .unwrap()
            .parse()
            .unwrap();
    let mut digests = Vec::new();
    for address in clients.values() {
        let address = *address;
        wait_for("a replica to catch up", || async move {
            status_of(address)
                .await
                .and_then(|r| status_field(&r, "applied_index"))
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|applied| applied >= leader_applied)
        })
        .await;
        let mut connection = prefixkv_smr::client::Connection::connect(address)
            .await
            .unwrap();
        digests.push(connection.call(&[b"SMR.DIGEST"]).await.unwrap());
    }
    assert!(
        digests.windows(2).all(|w| w[0] == w[1]),
        "replicas diverge: {digests:?}"
    );
    let checkpoints: u64 = status_field(
        &status_of(leader_address).await.unwrap(),
        "checkpoints_completed",
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!(
        checkpoints >= 1,
        "checkpoints ran on the leader during the test"
    );
    drop(replicas);
}
