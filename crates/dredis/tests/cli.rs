//! The `prefixkv-dredis cluster` command as a real process: it prints where everything listens,
//! serves a session, and on SIGINT stops and kills its redis-server children; and it honours
//! `--finder` and `--metadata-url` (a hybrid-finder cluster with its store elsewhere commits a
//! plain RESP write).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prefixkv_dprnet::{ClientConfig, DprRedisClient};

const WAIT: Duration = Duration::from_secs(60);

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn cluster_command_serves_and_shuts_down_on_ctrl_c() {
    let directory = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_prefixkv-dredis"))
        .args(["cluster", "--shards", "2", "--dir"])
        .arg(directory.path().join("cluster"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut metadata = None;
    let mut proxies = Vec::new();
    let mut redis_pids = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["metadata", path] => metadata = Some(path.to_string()),
            ["shard", _, "proxy", proxy, "redis", _, "redis_pid", pid] => {
                proxies.push(proxy.parse().unwrap());
                redis_pids.push(pid.parse::<i32>().unwrap());
            }
            ["finder", "exact"] => {}
            ["ready", ..] => break,
            _ => panic!("unexpected output line {line:?}"),
        }
    }
    assert_eq!(proxies.len(), 2);
    let client = DprRedisClient::new(ClientConfig::new(proxies, metadata.unwrap().into())).unwrap();
    let mut session = client.session(1).unwrap();
    for i in 0..100u64 {
        session
            .push(&[b"SET", format!("k{i}").as_bytes(), b"v"])
            .unwrap();
    }
    session.drain().unwrap();
    session
        .wait_for_commit(session.next_sequence(), WAIT)
        .unwrap();
    assert!(redis_pids.iter().all(|&pid| alive(pid)));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "cluster did not exit after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    // Its redis-servers were reaped by the cluster process, so they no longer exist.
    for pid in redis_pids {
        assert!(!alive(pid), "redis-server {pid} survived the shutdown");
    }
}

#[test]
fn cluster_command_takes_the_finder_and_the_metadata_store() {
    let directory = tempfile::tempdir().unwrap();
    let metadata = directory.path().join("elsewhere.sqlite");
    let mut child = Command::new(env!("CARGO_BIN_EXE_prefixkv-dredis"))
        .args(["cluster", "--shards", "1", "--finder", "hybrid", "--dir"])
        .arg(directory.path().join("cluster"))
        .arg("--metadata-url")
        .arg(format!("sqlite:{}", metadata.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let mut proxy = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let ["shard", "0", "proxy", address, ..] =
            line.split_whitespace().collect::<Vec<_>>()[..]
        {
            proxy = Some(address.parse::<std::net::SocketAddr>().unwrap());
        }
        if line.starts_with("ready") {
            break;
        }
        printed.push(line);
    }
    assert_eq!(printed[0], format!("metadata {}", metadata.display()));
    assert_eq!(printed[1], "finder hybrid");
    assert!(metadata.is_file(), "the store is where --metadata-url says");
    // A plain RESP write through the proxy gets committed: the hybrid finder publishes cuts.
    let mut connection =
        prefixkv_dprnet::connection::RedisConnection::connect(proxy.unwrap(), WAIT).unwrap();
    assert_eq!(
        connection.command(&[b"SET", b"k", b"v"]).unwrap(),
        prefixkv_resp::Reply::simple("OK")
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let point = connection.command(&[b"PREFIXKV.COMMITPOINT"]).unwrap();
        let prefixkv_resp::Reply::Array(fields) = point else {
            panic!("{point:?}")
        };
        if fields[7] == prefixkv_resp::Reply::Integer(1) {
            break;
        }
        assert!(Instant::now() < deadline, "never committed: {fields:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
