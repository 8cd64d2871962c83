//! Startup: the default port moves to the next free one when taken, and says so; a second server
//! on the same directory is refused. The servers run as `prefixkv_testkit::child::ChildProcess`
//! (stdout lines read with bounded waits, SIGKILLed by PID on drop).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use prefixkv_testkit::child::ChildProcess;

/// The lines a server prints up to and including `PORT <port>` (it prints that once serving).
fn lines_until_port(server: &mut ChildProcess) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let line = server
            .next_line(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("the server prints its port: {e}; so far {lines:?}"));
        let done = line.starts_with("PORT ");
        lines.push(line);
        if done {
            return lines;
        }
    }
}

#[test]
fn default_port_taken_moves_to_the_next_free_port() {
    // Hold 6379 ourselves; if something else already holds it, the server must move anyway.
    let _holder = std::net::TcpListener::bind("127.0.0.1:6379");
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_prefixkv-server"));
    command
        .args(["--engine-memory", "64mb", "--threads", "1", "--dir"])
        .arg(dir.path())
        .stderr(Stdio::null());
    let mut server = ChildProcess::spawn(command).unwrap();
    let lines = lines_until_port(&mut server);
    let port: u16 = lines.last().unwrap()[5..].trim().parse().unwrap();
    assert!(port > 6379 && port <= 6479, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("port 6379 is taken; using")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("redis-cli -p {port}"))),
        "{lines:?}"
    );
}

#[test]
fn a_second_server_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_prefixkv-server"));
    command
        .args([
            "--port",
            "0",
            "--engine-memory",
            "64mb",
            "--appendfsync",
            "checkpoint",
            "--dir",
        ])
        .arg(dir.path())
        .stderr(Stdio::null());
    let mut first = ChildProcess::spawn(command).unwrap();
    // Wait until the first one is serving (it prints PORT after recovery and the lock).
    lines_until_port(&mut first);
    let text = common::failed_start(
        &[
            "--port",
            "0",
            "--engine-memory",
            "64mb",
            "--appendfsync",
            "checkpoint",
        ],
        dir.path(),
    );
    assert!(
        text.contains("LOCK") && text.contains("another prefixkv-server"),
        "{text}"
    );
}

/// A loglevel that is not one of Redis's names stops the start with a message naming them.
#[test]
fn an_unknown_loglevel_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let text = common::failed_start(&["--port", "0", "--loglevel", "loud"], dir.path());
    assert!(
        text.contains("'loud'") && text.contains("debug, verbose, notice, warning, nothing"),
        "{text}"
    );
}
