//! Plain RESP on cluster workers, as a Redis Cluster: a 3-worker local cluster (processes)
//! publishes hash slot ownership; a raw RESP connection gets `-MOVED` for a foreign key (which
//! does not run) and runs an owned one, `-CROSSSLOT` for keys spanning slots, `CLUSTER SLOTS` in
//! Redis's shape, and `PREFIXKV.COMMITPOINT` reaching `all_committed`; framed batches get the
//! same redirection per command; `DprRedisClient` routes by slot; `redis-cli` works plainly and
//! follows redirections with `-c`; redis-py's `RedisCluster` and go-redis's `ClusterClient`
//! route SET/GET across the workers;
//! and after another worker is SIGKILLed, a plain connection's next command gets `-ROLLBACK`
//! naming a prefix that covers what it was told was committed, which is exactly what is left.
//!
//! The redis-py and go-redis tests fail (never skip) when python3 with its `redis` module
//! (`python3 -m pip install 'redis>=5'`) or Go 1.26 is missing, as `crates/server/tests` do.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use prefixkv_cluster::topology::node_id;
use prefixkv_cluster::LocalCluster;
use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_dprnet::slots::key_slot;
use prefixkv_dprnet::{ClientConfig, DprRedisClient};
use prefixkv_resp::Reply;

fn start(directory: &Path) -> LocalCluster {
    common::small_cluster(directory, 3)
}

/// The worker owning `key` under the launcher's even split of 3.
fn owner(key: &str) -> usize {
    let slot = key_slot(key.as_bytes());
    prefixkv_dprnet::slots::even_split(3)
        .iter()
        .position(|&(first, last)| (first..=last).contains(&slot))
        .unwrap()
}

/// A key owned by worker `worker`.
fn key_of(worker: usize, salt: &str) -> String {
    (0..)
        .map(|i| format!("{salt}:{i}"))
        .find(|key| owner(key) == worker)
        .unwrap()
}

fn connect(address: SocketAddr) -> RedisConnection {
    RedisConnection::connect(address, Duration::from_secs(30)).unwrap()
}

fn error_text(reply: &Reply) -> String {
    match reply {
        Reply::Error(text) => String::from_utf8_lossy(text).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn workers_redirect_foreign_keys_and_answer_cluster_queries() {
    let directory = tempfile::tempdir().unwrap();
    let cluster = start(directory.path());
    let addresses = cluster.addresses();
    let mut plain = connect(addresses[0]);

    // A foreign key: MOVED to its owner, and it did not run there (nor anywhere).
    let foreign = key_of(2, "foreign");
    let slot = key_slot(foreign.as_bytes());
    let reply = plain
        .command(&[b"SET", foreign.as_bytes(), b"nope"])
        .unwrap();
    assert_eq!(error_text(&reply), format!("MOVED {slot} {}", addresses[2]));
    let mut at_owner = connect(addresses[2]);
    assert_eq!(
        at_owner.command(&[b"GET", foreign.as_bytes()]).unwrap(),
        Reply::NullBulkString
    );
    // An owned key runs.
    let mine = key_of(0, "mine");
    assert_eq!(
        plain.command(&[b"SET", mine.as_bytes(), b"v"]).unwrap(),
        Reply::simple("OK")
    );
    assert_eq!(
        plain.command(&[b"GET", mine.as_bytes()]).unwrap(),
        Reply::bulk("v")
    );
    // Keys across slots: CROSSSLOT, even when this worker owns both.
    let other_mine = (0..)
        .map(|i| format!("again:{i}"))
        .find(|k| owner(k) == 0 && key_slot(k.as_bytes()) != key_slot(mine.as_bytes()))
        .unwrap();
    let reply = plain
        .command(&[b"MGET", mine.as_bytes(), other_mine.as_bytes()])
        .unwrap();
    assert_eq!(
        error_text(&reply),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    // Same hash tag: one slot.
    let tagged = |suffix: &str| format!("{{{mine}}}{suffix}");
    assert_eq!(
        plain
            .command(&[
                b"MSET",
                tagged("a").as_bytes(),
                b"1",
                tagged("b").as_bytes(),
                b"2"
            ])
            .unwrap(),
        Reply::simple("OK")
    );

    // CLUSTER SLOTS: [first, last, [host, port, id]] per range, in slot order.
    let Reply::Array(ranges) = plain.command(&[b"CLUSTER", b"SLOTS"]).unwrap() else {
        panic!("CLUSTER SLOTS is an array")
    };
    assert_eq!(ranges.len(), 3);
    for (worker, (range, &(first, last))) in ranges
        .iter()
        .zip(&prefixkv_dprnet::slots::even_split(3))
        .enumerate()
    {
        let expected = Reply::Array(vec![
            Reply::Integer(i64::from(first)),
            Reply::Integer(i64::from(last)),
            Reply::Array(vec![
                Reply::bulk("127.0.0.1"),
                Reply::Integer(i64::from(addresses[worker].port())),
                Reply::bulk(node_id(worker as u64)),
            ]),
        ]);
        assert_eq!(range, &expected);
    }
    assert_eq!(
        plain.command(&[b"CLUSTER", b"KEYSLOT", b"foo"]).unwrap(),
        Reply::Integer(12182)
    );
    assert_eq!(
        plain.command(&[b"CLUSTER", b"MYID"]).unwrap(),
        Reply::bulk(node_id(0))
    );

    // The connection is a DPR session: its commands become committed. The redirected ones and
    // the topology queries got no sequence numbers (SET, GET, MSET did: 3).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let Reply::Array(fields) = plain.command(&[b"PREFIXKV.COMMITPOINT"]).unwrap() else {
            panic!("PREFIXKV.COMMITPOINT is an array")
        };
        assert_eq!(fields[4], Reply::bulk("last_sequence"));
        assert_eq!(fields[5], Reply::Integer(2));
        if fields[7] == Reply::Integer(1) {
            assert_eq!(fields[1], Reply::Integer(3), "until_sequence");
            break;
        }
        assert!(Instant::now() < deadline, "never all committed: {fields:?}");
        std::thread::sleep(Duration::from_millis(10));
    }

    // The client library routes by slot (the cluster publishes ownership).
    let client = DprRedisClient::new(cluster.client_config()).unwrap();
    assert!(client.routes_by_slot());
    let mut session = client.session(1).unwrap();
    for i in 0..60 {
        session
            .push(&[b"SET", format!("routed:{i}").as_bytes(), b"x"])
            .unwrap();
    }
    session.drain().unwrap();
    let completed = session.take_completed();
    assert_eq!(completed.len(), 60);
    for op in &completed {
        assert_eq!(op.reply, Reply::simple("OK"), "{op:?}");
        assert_eq!(op.shard, owner(&format!("routed:{}", op.tag)));
    }

    // Framed batches sent to the wrong worker (a client routing by CRC32C, as it would without
    // ownership: an empty metadata store of its own) get MOVED per command; owned ones run.
    let stray = ClientConfig::new(addresses.clone(), directory.path().join("empty.sqlite"));
    let stray_client = DprRedisClient::new(stray).unwrap();
    assert!(!stray_client.routes_by_slot());
    let mut session = stray_client.session(2).unwrap();
    let keys: Vec<String> = (0..60).map(|i| format!("stray:{i}")).collect();
    for key in &keys {
        session.push(&[b"SET", key.as_bytes(), b"s"]).unwrap();
    }
    session.drain().unwrap();
    let (mut ran, mut moved) = (0, 0);
    for op in session.take_completed() {
        let key = &keys[op.tag as usize];
        if op.shard == owner(key) {
            assert_eq!(op.reply, Reply::simple("OK"), "{key}");
            ran += 1;
        } else {
            let slot = key_slot(key.as_bytes());
            assert_eq!(
                error_text(&op.reply),
                format!("MOVED {slot} {}", addresses[owner(key)])
            );
            moved += 1;
        }
    }
    assert!(ran > 0 && moved > 0, "ran {ran}, moved {moved}");
    // Only the owned ones ran: read every key at its owner.
    for key in &keys {
        let mut connection = connect(addresses[owner(key)]);
        let value = connection.command(&[b"GET", key.as_bytes()]).unwrap();
        let ran_here = shard_by_crc(key) == owner(key);
        let expected = if ran_here {
            Reply::bulk("s")
        } else {
            Reply::NullBulkString
        };
        assert_eq!(value, expected, "{key}");
    }
    cluster.shutdown();
}

fn shard_by_crc(key: &str) -> usize {
    prefixkv_dprnet::client::shard_for_key(key.as_bytes(), 3)
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli (install redis-tools)");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn redis_cli_and_redis_py_use_the_cluster() {
    let directory = tempfile::tempdir().unwrap();
    let cluster = start(directory.path());
    let addresses = cluster.addresses();
    let port = addresses[0].port();

    // Plain redis-cli against a worker: an owned key, PREFIXKV.COMMITPOINT.
    let mine = key_of(0, "cli");
    assert_eq!(redis_cli(port, &["SET", &mine, "v"]).trim(), "OK");
    assert_eq!(redis_cli(port, &["GET", &mine]).trim(), "v");
    let point = redis_cli(port, &["PREFIXKV.COMMITPOINT"]);
    assert!(point.starts_with("until_sequence\n"), "{point}");
    // A foreign key without -c: the redirection is the answer.
    let foreign = key_of(1, "cli");
    let moved = redis_cli(port, &["GET", &foreign]);
    assert!(moved.contains("MOVED"), "{moved}");
    // redis-cli -c follows MOVED to the owner.
    assert_eq!(redis_cli(port, &["-c", "SET", &foreign, "w"]).trim(), "OK");
    assert_eq!(redis_cli(port, &["-c", "GET", &foreign]).trim(), "w");
    assert_eq!(
        redis_cli(addresses[1].port(), &["GET", &foreign]).trim(),
        "w"
    );

    // redis-py's RedisCluster.
    let interpreter = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = std::process::Command::new(&interpreter)
        .args(["-c", "import redis"])
        .output()
        .unwrap_or_else(|error| panic!("cannot run {interpreter}: {error}"));
    assert!(
        probe.status.success(),
        "{interpreter} has no `redis` module ({}): python3 -m pip install 'redis>=5'",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/redis_cluster_check.py");
    let output = std::process::Command::new(&interpreter)
        .arg(&script)
        .arg(port.to_string())
        .output()
        .expect("run the redis-py script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}\n{}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("ok "), "unexpected output: {stdout}");
    eprintln!("redis-py: {}", stdout.trim());
    cluster.shutdown();
}

/// `PREFIXKV.COMMITPOINT`: (until_sequence, all_committed).
fn commit_point(connection: &mut RedisConnection) -> (i64, bool) {
    let Reply::Array(fields) = connection.command(&[b"PREFIXKV.COMMITPOINT"]).unwrap() else {
        panic!("PREFIXKV.COMMITPOINT is an array")
    };
    let Reply::Integer(until) = fields[1] else {
        panic!("until_sequence: {:?}", fields[1])
    };
    (until, fields[7] == Reply::Integer(1))
}

#[test]
fn a_plain_connection_learns_what_survived_a_worker_failure() {
    let directory = tempfile::tempdir().unwrap();
    let cluster = start(directory.path());
    let addresses = cluster.addresses();
    // Worker 1's keys, written on a plain connection to worker 1: sequence i writes keys[i].
    let keys: Vec<String> = (0..)
        .map(|i| format!("survive:{i}"))
        .filter(|k| owner(k) == 1)
        .take(400)
        .collect();
    let mut plain = connect(addresses[1]);
    for key in &keys[..100] {
        assert_eq!(
            plain.command(&[b"SET", key.as_bytes(), b"v"]).unwrap(),
            Reply::simple("OK")
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !commit_point(&mut plain).1 {
        assert!(Instant::now() < deadline, "never all committed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let committed = commit_point(&mut plain).0;
    assert_eq!(committed, 100);
    // More writes, then another worker fails: every worker rolls back to the cut, and this
    // connection's next command is refused with the surviving prefix.
    let world_line = cluster.cluster_state().unwrap().world_line;
    let mut sent = 100;
    let line = loop {
        if sent == 250 {
            cluster.kill(0).expect("SIGKILL worker 0");
        }
        assert!(sent < keys.len(), "no rollback reached the connection");
        let reply = plain
            .command(&[b"SET", keys[sent].as_bytes(), b"v"])
            .unwrap();
        match reply {
            Reply::SimpleString(_) => sent += 1,
            Reply::Error(text) => break String::from_utf8_lossy(&text).into_owned(),
            other => panic!("SET answered {other:?}"),
        }
        if sent > 250 {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    eprintln!("after {sent} SETs ({committed} committed before): {line}");
    assert!(
        line.starts_with(&format!("ROLLBACK world-line {}", world_line + 1)),
        "{line}"
    );
    assert!(
        line.ends_with("this command was not run, resend it"),
        "{line}"
    );
    let survived: usize = line
        .split_once("commands up to sequence ")
        .map(|(_, rest)| rest.split(' ').next().unwrap().parse::<usize>().unwrap() + 1)
        .unwrap_or(0);
    assert!(
        survived >= committed as usize && survived <= sent,
        "{line} (committed {committed}, sent {sent})"
    );
    // The data is exactly that prefix (one command at a time: nothing was uncertain).
    for (sequence, key) in keys[..sent].iter().enumerate() {
        let expected = if sequence < survived {
            Reply::bulk("v")
        } else {
            Reply::NullBulkString
        };
        let mut reader = connect(addresses[1]);
        assert_eq!(
            reader.command(&[b"GET", key.as_bytes()]).unwrap(),
            expected,
            "sequence {sequence} ({line})"
        );
    }
    // The connection continues on the new world-line and commits there.
    assert_eq!(
        plain
            .command(&[b"SET", keys[sent].as_bytes(), b"again"])
            .unwrap(),
        Reply::simple("OK")
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !commit_point(&mut plain).1 {
        assert!(
            Instant::now() < deadline,
            "never committed after the rollback"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster.shutdown();
}

#[test]
fn go_redis_cluster_client_routes_across_workers() {
    // `tests/go` pins go-redis v9.23.0 (its go.sum committed, as crates/server/tests/go); the
    // first build downloads the modules.
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go");
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-redis-cluster-check");
    let built = std::process::Command::new("go")
        .current_dir(&source)
        .args(["build", "-mod=readonly", "-buildvcs=false", "-o"])
        .arg(&binary)
        .arg(".")
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run go ({error}): the go-redis test needs Go 1.26 or newer on PATH")
        });
    assert!(
        built.status.success(),
        "go build {}: {}",
        source.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    let directory = tempfile::tempdir().unwrap();
    let cluster = start(directory.path());
    let output = std::process::Command::new(&binary)
        .arg(cluster.addresses()[0].to_string())
        .output()
        .expect("run the go-redis check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "go-redis check failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("ok "), "unexpected output: {stdout}");
    eprintln!("{}", stdout.trim());
    cluster.shutdown();
}
