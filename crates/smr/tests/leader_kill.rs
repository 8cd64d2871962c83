//! Real processes: three `prefixkv-smr replica` processes on loopback, clients writing unique
//! keys and recording every acknowledgement, the leader SIGKILLed under load at a random point.
//! A new leader must be elected and every acknowledged write must be readable there; the killed
//! replica restarts from its newest checkpoint plus its log and converges to the same state.
//!
//! `SMR_KILL_ROUNDS` (default 1) repeats the kill-and-restart cycle.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{leader_of, status_field, status_of, wait_for, Layout, Replica};
use prefixkv_resp::Reply;
use prefixkv_smr::client::ClusterClient;
use prefixkv_smr::types::NodeId;

const REPLICA_ARGS: &[&str] = &["--checkpoint-every", "150", "--model", "concurrent"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_leader_under_load_loses_no_acknowledged_write() {
    let rounds: usize = std::env::var("SMR_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let root = tempfile::tempdir().unwrap();
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let layout = Layout::new(&ids);
    let clients: BTreeMap<NodeId, SocketAddr> = layout.clients.clone();
    let dir = |id: NodeId| root.path().join(format!("replica-{id}"));
    let mut replicas: BTreeMap<NodeId, Replica> = ids
        .iter()
        .map(|id| (*id, layout.spawn(*id, &dir(*id), REPLICA_ARGS)))
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
        let leader = leader_of(&clients).await.expect("a leader");
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
        replicas.insert(leader, layout.spawn(leader, &dir(leader), REPLICA_ARGS));
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
    let leader_status = status_of(leader_address).await.unwrap();
    let checkpoints: u64 = status_field(&leader_status, "checkpoints_completed")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        checkpoints >= 1,
        "checkpoints ran on the leader during the test: {leader_status:?}"
    );
    drop(replicas);
}
