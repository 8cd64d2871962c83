//! Redis's own tools, unchanged, against the real server: `redis-cli` (commands, RESP3, `--pipe`,
//! `--scan`) and a `redis-benchmark` smoke run whose INCR count is checked exactly.
//!
//! These fail (never skip) when the tools are missing: `./scripts/test` installs Debian's
//! `redis-tools`.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::Server;
use prefixkv_resp::Reply;

fn tool(name: &str, args: &[&str], input: Option<&[u8]>) -> Output {
    let mut child = Command::new(name)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("cannot run {name} ({error}): ./scripts/test installs Debian's redis-tools")
        });
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{name} {args:?} failed ({}): {} {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn cli(server: &Server, args: &[&str]) -> String {
    let port = server.port.to_string();
    let mut full = vec!["-h", "127.0.0.1", "-p", port.as_str()];
    full.extend_from_slice(args);
    String::from_utf8(tool("redis-cli", &full, None).stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn redis_cli_commands_resp3_pipe_and_scan() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--appendfsync", "none", "--engine-memory", "64mb"],
    );
    assert_eq!(cli(&server, &["PING"]), "PONG");
    assert_eq!(cli(&server, &["SET", "greeting", "hello world"]), "OK");
    assert_eq!(cli(&server, &["GET", "greeting"]), "hello world");
    assert_eq!(cli(&server, &["INCR", "counter"]), "1");
    assert_eq!(cli(&server, &["INCRBY", "counter", "41"]), "42");
    assert_eq!(cli(&server, &["GET", "missing"]), "");
    assert_eq!(cli(&server, &["HSET", "h", "f", "v"]), "1");
    // Not a terminal, so redis-cli prints raw replies: a map as one `key value` line per entry.
    assert_eq!(cli(&server, &["-3", "HGETALL", "h"]), "f v");
    let hello = cli(&server, &["-3", "HELLO", "3"]);
    assert!(hello.starts_with("server redis\n"), "{hello}");
    assert!(hello.contains("\nproto 3\n"), "{hello}");
    assert!(cli(&server, &["INFO", "server"]).contains("redis_version:"));
    assert_eq!(
        cli(&server, &["GET", "h"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );

    // Mass insertion: --pipe sends raw RESP and checks every reply (it ends with an ECHO).
    let mut input = Vec::new();
    for i in 0..1000 {
        let (key, value) = (format!("piped:{i}"), format!("v{i}"));
        input.extend_from_slice(
            format!(
                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
                key.len(),
                value.len()
            )
            .as_bytes(),
        );
    }
    let port = server.port.to_string();
    let piped = tool(
        "redis-cli",
        &["-h", "127.0.0.1", "-p", &port, "--pipe"],
        Some(&input),
    );
    let report = String::from_utf8_lossy(&piped.stdout);
    assert!(
        report.contains("errors: 0, replies: 1000"),
        "redis-cli --pipe said: {report}"
    );
    assert_eq!(cli(&server, &["GET", "piped:999"]), "v999");

    // --scan iterates SCAN to the end.
    let scanned = cli(&server, &["--scan", "--pattern", "piped:*"]);
    let mut keys: Vec<&str> = scanned.lines().collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 1000);
    assert_eq!(cli(&server, &["DBSIZE"]), "1003");
}

/// Checks that redis-benchmark's `--csv` output has a positive rate for every one of `tests`.
fn require_rates(output: &Output, tests: &[&str]) {
    let csv = String::from_utf8_lossy(&output.stdout);
    for test in tests {
        let line = csv
            .lines()
            .find(|line| line.starts_with(&format!("\"{test}\"")))
            .unwrap_or_else(|| panic!("no {test} line in redis-benchmark output: {csv}"));
        let requests_per_s: f64 = line
            .split(',')
            .nth(1)
            .unwrap()
            .trim_matches('"')
            .parse()
            .unwrap();
        assert!(requests_per_s > 0.0, "{line}");
    }
}

#[test]
fn redis_benchmark_smoke_run_counts_every_incr() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--appendfsync", "always", "--engine-memory", "64mb"],
    );
    let port = server.port.to_string();
    let requests = 2000;
    let output = tool(
        "redis-benchmark",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "set,get,incr,mset",
            "-n",
            &requests.to_string(),
            "-c",
            "10",
            "-P",
            "4",
            "--csv",
        ],
        None,
    );
    require_rates(&output, &["SET", "GET", "INCR", "MSET (10 keys)"]);
    // Without -r every INCR hits the one key `counter:__rand_int__`: exactly `requests` of them.
    let mut raw = server.raw();
    match raw.call(&["GET", "counter:__rand_int__"]) {
        Reply::BulkString(value) => assert_eq!(value.as_ref(), requests.to_string().as_bytes()),
        other => panic!("GET counter:__rand_int__: {other:?}"),
    }
}

/// `redis-benchmark` on the collection tests: every test reports a rate, and what they leave is
/// exact (each pops as many times as the pushes before it added, on one key each).
#[test]
fn redis_benchmark_runs_the_collection_tests() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let port = server.port.to_string();
    let output = tool(
        "redis-benchmark",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin",
            "-n",
            "2000",
            "-c",
            "10",
            "-P",
            "4",
            "--csv",
        ],
        None,
    );
    require_rates(
        &output,
        &[
            "LPUSH", "RPUSH", "LPOP", "RPOP", "SADD", "HSET", "SPOP", "ZADD", "ZPOPMIN",
        ],
    );
    // 2,000 pushes at each end, then 2,000 pops at each: the list is gone. SADD and ZADD add the
    // one member `element:__rand_int__`, which SPOP and ZPOPMIN take.
    for (command, key) in [("LLEN", "mylist"), ("SCARD", "myset"), ("ZCARD", "myzset")] {
        assert_eq!(cli(&server, &[command, key]), "0", "{command} {key}");
    }
    assert_eq!(cli(&server, &["HLEN", "myhash"]), "1");
}
