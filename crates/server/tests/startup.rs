//! Startup: the default port moves to the next free one when taken, and says so.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn default_port_taken_moves_to_the_next_free_port() {
    // Hold 6379 ourselves; if something else already holds it, the server must move anyway.
    let _holder = std::net::TcpListener::bind("127.0.0.1:6379");
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_prefixkv-server"))
        .args(["--engine-memory", "64mb", "--threads", "1", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _guard = KillOnDrop(child);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    loop {
        let line = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("the server prints its port");
        let done = line.starts_with("PORT ");
        lines.push(line);
        if done {
            break;
        }
    }
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
    let first = Command::new(env!("CARGO_BIN_EXE_prefixkv-server"))
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
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = KillOnDrop(first);
    // Wait until the first one is serving (it prints PORT after recovery and the lock).
    let stdout = first.0.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    loop {
        let line = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("first server starts");
        if line.starts_with("PORT ") {
            break;
        }
    }
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
        .arg(dir.path());
    let output =
        prefixkv_testkit::child::output_within(command, std::time::Duration::from_secs(60))
            .unwrap();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        text.contains("LOCK") && text.contains("another prefixkv-server"),
        "{text}"
    );
}
