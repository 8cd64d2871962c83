//! Every replica serves clients (real `prefixkv-smr replica` processes on loopback, plain RESP
//! connections to one replica each, as `redis-cli -p <port>` would use):
//!
//! - writes sent to any replica are acknowledged, and a read sent to *another* replica right
//!   after the acknowledgement returns exactly the acknowledged value (linearizability from the
//!   client's side: one writer per key, so the last acknowledged value is the only correct
//!   answer; a follower answering from its own state before it has applied the leader's read
//!   index would return the previous value);
//! - with no leader (two of three replicas SIGKILLed), commands at the survivor end with a
//!   `-CLUSTERDOWN` error within its request timeout, the write it refused is indeed absent once
//!   a leader is back, and service resumes.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::{Layout, Replica};
use prefixkv_resp::Reply;
use prefixkv_smr::client::Connection;
use prefixkv_smr::types::NodeId;

/// Generous: a replica must answer at all (its own bound is `--request-timeout-ms`).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

async fn call(connection: &mut Connection, args: &[&[u8]]) -> Reply {
    tokio::time::timeout(ANSWER_WITHIN, connection.call(args))
        .await
        .expect("the replica answered")
        .expect("the connection works")
}

async fn connect_all(clients: &BTreeMap<NodeId, SocketAddr>) -> BTreeMap<NodeId, Connection> {
    let mut connections = BTreeMap::new();
    for (id, address) in clients {
        connections.insert(*id, Connection::connect(*address).await.unwrap());
    }
    connections
}

fn start(
    layout: &Layout,
    root: &std::path::Path,
    ids: &[NodeId],
    request_timeout_ms: &str,
) -> BTreeMap<NodeId, Replica> {
    ids.iter()
        .map(|id| {
            let dir = root.join(format!("replica-{id}"));
            let replica = layout.spawn(*id, &dir, &["--request-timeout-ms", request_timeout_ms]);
            (*id, replica)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_writes_and_linearizable_reads() {
    let root = tempfile::tempdir().unwrap();
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let layout = Layout::new(&ids);
    let _replicas = start(&layout, root.path(), &ids, "10000");
    let clients = layout.clients.clone();
    let leader = common::settled_leader(&clients).await;
    let followers: Vec<NodeId> = ids.iter().copied().filter(|id| *id != leader).collect();
    let mut connections = connect_all(&clients).await;

    // The new user's session: SET on one follower, GET on the other.
    let reply = call(
        connections.get_mut(&followers[0]).unwrap(),
        &[b"SET", b"k", b"v"],
    )
    .await;
    assert_eq!(reply, Reply::SimpleString("OK".into()));
    let reply = call(connections.get_mut(&followers[1]).unwrap(), &[b"GET", b"k"]).await;
    assert_eq!(reply, Reply::BulkString("v".into()));
    let reply = call(connections.get_mut(&followers[1]).unwrap(), &[b"DEL", b"k"]).await;
    assert_eq!(reply, Reply::Integer(1));
    let reply = call(connections.get_mut(&followers[0]).unwrap(), &[b"GET", b"k"]).await;
    assert_eq!(reply, Reply::NullBulkString);

    // Write through each replica in turn; right after each acknowledgement, read the key back
    // from both other replicas. Each key has one writer, so the value last acknowledged to it
    // is the only correct answer.
    let keys = 4;
    let mut acknowledged: BTreeMap<usize, String> = BTreeMap::new();
    for round in 0..150usize {
        let writer = ids[round % ids.len()];
        let key = format!("key-{}", round % keys);
        let value = format!("value-{round}");
        let reply = call(
            connections.get_mut(&writer).unwrap(),
            &[b"SET", key.as_bytes(), value.as_bytes()],
        )
        .await;
        assert_eq!(reply, Reply::SimpleString("OK".into()), "SET at {writer}");
        acknowledged.insert(round % keys, value.clone());
        for reader in ids.iter().filter(|id| **id != writer) {
            let reply = call(
                connections.get_mut(reader).unwrap(),
                &[b"GET", key.as_bytes()],
            )
            .await;
            assert_eq!(
                reply,
                Reply::BulkString(value.clone().into()),
                "round {round}: GET {key} at replica {reader} after SET acknowledged by {writer}"
            );
        }
    }
    // Bulk load through one follower, MGET (one read index) on the other, then a checkpoint on
    // demand that the replica lists with its timing.
    let reply = call(
        connections.get_mut(&followers[0]).unwrap(),
        &[b"SMR.LOAD", b"l1", b"a", b"l2", b"b"],
    )
    .await;
    assert_eq!(reply, Reply::SimpleString("OK".into()));
    let reply = call(
        connections.get_mut(&followers[1]).unwrap(),
        &[b"MGET", b"l1", b"missing", b"l2"],
    )
    .await;
    assert_eq!(
        reply,
        Reply::Array(vec![
            Reply::BulkString("a".into()),
            Reply::NullBulkString,
            Reply::BulkString("b".into())
        ])
    );
    let checkpoint = call(
        connections.get_mut(&followers[1]).unwrap(),
        &[b"SMR.CHECKPOINT"],
    )
    .await;
    let Reply::Integer(index) = checkpoint else {
        panic!("SMR.CHECKPOINT: {checkpoint:?}")
    };
    let events = call(
        connections.get_mut(&followers[1]).unwrap(),
        &[b"SMR.CHECKPOINTS", b"0"],
    )
    .await;
    let Reply::BulkString(events) = events else {
        panic!("SMR.CHECKPOINTS: {events:?}")
    };
    let last = String::from_utf8_lossy(&events)
        .lines()
        .last()
        .unwrap()
        .to_string();
    let fields: Vec<&str> = last.split(' ').collect();
    assert_eq!(fields[0], index.to_string(), "{last}");
    assert!(
        fields[2] != "-" && fields[2] >= fields[1],
        "finished after started: {last}"
    );

    // And every key, from every replica.
    for (key, value) in &acknowledged {
        for id in &ids {
            let key = format!("key-{key}");
            let reply = call(connections.get_mut(id).unwrap(), &[b"GET", key.as_bytes()]).await;
            assert_eq!(
                reply,
                Reply::BulkString(value.clone().into()),
                "{key} at {id}"
            );
        }
    }
}

fn error_text(reply: &Reply) -> String {
    match reply {
        Reply::Error(text) => String::from_utf8_lossy(text).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_leader_commands_end_with_a_bounded_clusterdown_error() {
    let root = tempfile::tempdir().unwrap();
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let layout = Layout::new(&ids);
    let mut replicas = start(&layout, root.path(), &ids, "1000");
    let clients = layout.clients.clone();
    let leader = common::settled_leader(&clients).await;
    let survivor = *ids.iter().find(|id| **id != leader).unwrap();
    let mut connection = Connection::connect(clients[&survivor]).await.unwrap();
    assert_eq!(
        call(&mut connection, &[b"SET", b"before", b"1"]).await,
        Reply::SimpleString("OK".into())
    );

    // SIGKILL the leader and the other follower: the survivor can elect no one.
    for id in ids.iter().filter(|id| **id != survivor) {
        drop(replicas.remove(id));
    }
    let reply = call(&mut connection, &[b"SET", b"refused", b"1"]).await;
    let text = error_text(&reply);
    assert!(
        text.starts_with("CLUSTERDOWN") && text.contains("not executed"),
        "{text}"
    );
    let text = error_text(&call(&mut connection, &[b"GET", b"before"]).await);
    assert!(text.starts_with("CLUSTERDOWN"), "{text}");
    // The connection stays usable.
    assert_eq!(
        call(&mut connection, &[b"PING"]).await,
        Reply::SimpleString("PONG".into())
    );

    // One replica back: a majority again. The refused write was really not executed.
    let restarted = leader;
    replicas.extend(start(&layout, root.path(), &[restarted], "1000"));
    let mut fresh = Connection::connect(clients[&survivor]).await.unwrap();
    let deadline = tokio::time::Instant::now() + common::DEADLINE;
    let answer = loop {
        let answer = call(&mut fresh, &[b"GET", b"refused"]).await;
        if !matches!(&answer, Reply::Error(text) if text.starts_with(b"CLUSTERDOWN")) {
            break answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "service did not resume"
        );
    };
    assert_eq!(
        answer,
        Reply::NullBulkString,
        "a write answered CLUSTERDOWN was executed"
    );
    assert_eq!(
        call(&mut fresh, &[b"GET", b"before"]).await,
        Reply::BulkString("1".into())
    );
    assert_eq!(
        call(&mut fresh, &[b"SET", b"after", b"2"]).await,
        Reply::SimpleString("OK".into())
    );
}
