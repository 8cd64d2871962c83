//! The real `redis-cli -c` against a 3-worker `prefixkv-cluster` (the launcher's processes): the
//! command layer's data types, MULTI/EXEC, a script and a stream on keys of one slot (a hash
//! tag), `-CROSSSLOT` for keys of several slots, and a blocking command refused with its
//! non-blocking form named. Fails (never skips) without `redis-cli` on PATH.

mod common;

use std::path::Path;

use prefixkv_cluster::LocalCluster;
use prefixkv_dprnet::slots::key_slot;

fn start(directory: &Path) -> LocalCluster {
    common::small_cluster(directory, 3)
}

/// Runs `lines` (one command each) through one `redis-cli -c` connection to `port`; its output
/// lines, without redis-cli's redirection notices and the blank line it prints after an error.
fn redis_cli(port: u16, lines: &[&str]) -> Vec<String> {
    use std::io::Write;
    let mut child = std::process::Command::new("redis-cli")
        .args(["-c", "-p", &port.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli on PATH");
    let mut input = child.stdin.take().unwrap();
    for line in lines {
        writeln!(input, "{line}").unwrap();
    }
    drop(input);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with("-> Redirected"))
        .map(str::to_string)
        .collect()
}

#[test]
fn redis_cli_runs_every_type_on_one_slot_and_gets_crossslot_otherwise() {
    let directory = tempfile::tempdir().unwrap();
    let cluster = start(directory.path());
    let addresses = cluster.addresses();
    let slot = key_slot(b"{t}");
    let owner = prefixkv_dprnet::slots::even_split(3)
        .iter()
        .position(|&(first, last)| (first..=last).contains(&slot))
        .unwrap();
    let other = addresses[(owner + 1) % 3].port();
    // From a worker that does not own the slot: redis-cli follows -MOVED for each command.
    let out = redis_cli(
        other,
        &[
            "RPUSH {t}list a b c",
            "LRANGE {t}list 0 -1",
            "SADD {t}set x y",
            "SCARD {t}set",
            "ZADD {t}z 1 one 2 two",
            "ZRANGE {t}z 0 -1 WITHSCORES",
            "HSET {t}h f v g w",
            "HGET {t}h g",
            "XADD {t}s 1-1 k v",
            "XLEN {t}s",
            "EVAL \"return redis.call('LLEN', KEYS[1])\" 1 {t}list",
            "MSET {t}a 1 {t}b 2",
            "MGET {t}a {t}b",
            "MGET {t}a other",
            "LPUSH {t}list d",
            "BLPOP {t}empty 1",
        ],
    );
    assert_eq!(
        out,
        [
            "3",
            "a",
            "b",
            "c",
            "2",
            "2",
            "2",
            "one",
            "1",
            "two",
            "2",
            "2",
            "w",
            "1-1",
            "1",
            "3",
            "OK",
            "1",
            "2",
            "CROSSSLOT Keys in request don't hash to the same slot",
            "4",
            "ERR BLPOP would block, and a cluster worker cannot wait inside a DPR batch (it would \
             hold up the worker's commits): use LPOP",
        ]
    );
    // MULTI/EXEC on one connection to the slot's owner; then a transaction across slots.
    let owner_port = addresses[owner].port();
    let out = redis_cli(
        owner_port,
        &["MULTI", "INCR {t}n", "INCR {t}n", "EXEC", "GET {t}n"],
    );
    assert_eq!(out, ["OK", "QUEUED", "QUEUED", "1", "2", "2"]);
    let mut spanning = "other".to_string();
    let mut i = 0;
    while prefixkv_dprnet::slots::even_split(3)
        .iter()
        .position(|&(f, l)| (f..=l).contains(&key_slot(spanning.as_bytes())))
        != Some(owner)
        || key_slot(spanning.as_bytes()) == slot
    {
        i += 1;
        spanning = format!("other{i}");
    }
    let out = redis_cli(
        owner_port,
        &[
            "MULTI",
            "SET {t}x 1",
            &format!("SET {spanning} 1"),
            "EXEC",
            "EXISTS {t}x",
            "SELECT 1",
        ],
    );
    assert_eq!(
        out,
        [
            "OK",
            "QUEUED",
            "QUEUED",
            "CROSSSLOT Keys in request don't hash to the same slot",
            "0",
            "ERR SELECT is not allowed in cluster mode",
        ]
    );
}
