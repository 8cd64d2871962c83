//! The `prefixkv-dredis cluster` command as a real process: it prints where everything listens,
//! serves a session, and on SIGINT stops and kills its redis-server children.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prefixkv_dredis::{ClientConfig, DprRedisClient};

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
