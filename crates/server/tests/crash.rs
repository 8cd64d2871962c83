//! Crash and restart tests on the data directory: `checkpoint` mode under load (SIGKILL, then
//! each connection must recover a prefix of its writes, at least what PREFIXKV.COMMITPOINT
//! claimed durable), `none` (only SAVE survives), restarts across every mode's files, SHUTDOWN
//! SAVE and SIGTERM, and damaged files failing startup closed. The `always` and `everysec`
//! promises (no acknowledged write lost) are in `acknowledged.rs`.
//!
//! `CRASH_WRITERS` (default 3) and `CRASH_ROUNDS` (default 1) scale the `checkpoint` test.

mod common;

use std::time::Duration;

use common::load::{self, Writers};
use common::Server;
use prefixkv_testkit::env_count;

#[test]
fn checkpoint_recovers_a_prefix_per_connection() {
    let writers = env_count("CRASH_WRITERS", 3);
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--appendfsync",
        "checkpoint",
        "--checkpoint-interval",
        "100",
        "--engine-memory",
        "64mb",
    ];
    for round in 0..env_count("CRASH_ROUNDS", 1) {
        let mut server = Server::start(dir.path(), &flags);
        // New writer identities each round: earlier rounds' keys stay and are not re-checked.
        let running = Writers::start(server.port, round * writers..(round + 1) * writers, round);
        // A few checkpoints, so writers report commit points after one committed.
        server.wait_for_checkpoints(3);
        running.wait_acknowledged(300);
        let (logs, _) = load::kill_under_load(&mut server, running);
        let restarted = Server::start(dir.path(), &flags);
        // A prefix per connection, at least as long as its COMMITPOINT claim.
        let recoveries = load::check_writers(restarted.port, &logs)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        for (log, recovery) in logs.iter().zip(&recoveries) {
            eprintln!(
                "checkpoint round {round} writer {}: acknowledged {} writes, {} claimed durable, {} recovered",
                log.id, log.acknowledged, log.durable_claim, recovery.recovered
            );
        }
    }
}

/// `checkpoint` mode with writes to every type (`load::Shape::Mixed`): a SIGKILL recovers, per
/// connection, one prefix across its string, list, set, sorted set and hash writes (a checkpoint
/// holds each collection update whole, with its records).
#[test]
fn checkpoint_recovers_a_prefix_across_types() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--appendfsync",
        "checkpoint",
        "--checkpoint-interval",
        "50",
        "--engine-memory",
        "64mb",
    ];
    let mut server = Server::start(dir.path(), &flags);
    let running = Writers::start_shaped(
        server.port,
        0..env_count("CRASH_WRITERS", 3),
        7,
        load::Shape::Mixed,
    );
    server.wait_for_checkpoints(3);
    running.wait_acknowledged(800);
    let (logs, _) = load::kill_under_load(&mut server, running);
    let restarted = Server::start(dir.path(), &flags);
    let recoveries = load::check_writers(restarted.port, &logs).unwrap_or_else(|e| panic!("{e}"));
    for (log, recovery) in logs.iter().zip(&recoveries) {
        eprintln!(
            "checkpoint, every type, writer {}: acknowledged {} writes, {} claimed durable, {} recovered",
            log.id, log.acknowledged, log.durable_claim, recovery.recovered
        );
    }
}

#[test]
fn none_keeps_nothing_but_explicit_saves() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--appendfsync", "none", "--engine-memory", "64mb"];
    let mut server = Server::start(dir.path(), &flags);
    let mut con = server.connect(false);
    let _: () = redis::cmd("SET")
        .arg("saved")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    let _: () = redis::cmd("SET")
        .arg("unsaved")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let error = redis::cmd("WAITAOF")
        .arg(1)
        .arg(0)
        .arg(0)
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert!(
        error.to_string().contains("appendonly is disabled"),
        "{error}"
    );
    server.kill();
    let restarted = Server::start(dir.path(), &flags);
    let mut con = restarted.connect(false);
    assert_eq!(
        redis::cmd("GET")
            .arg("saved")
            .query::<Option<String>>(&mut con)
            .unwrap(),
        Some("1".into())
    );
    assert_eq!(
        redis::cmd("GET")
            .arg("unsaved")
            .query::<Option<String>>(&mut con)
            .unwrap(),
        None
    );
}

#[test]
fn restart_from_each_mode_files_in_another_mode() {
    let dir = tempfile::tempdir().unwrap();
    let modes = ["everysec", "always", "checkpoint", "everysec", "none"];
    for (step, mode) in modes.iter().enumerate() {
        let flags = [
            "--appendfsync",
            *mode,
            "--checkpoint-interval",
            "100",
            "--engine-memory",
            "64mb",
        ];
        let mut server = Server::start(dir.path(), &flags);
        let mut con = server.connect(step % 2 == 0);
        for (earlier, earlier_mode) in modes.iter().enumerate().take(step) {
            let value: Option<String> = redis::cmd("GET")
                .arg(format!("step{earlier}"))
                .query(&mut con)
                .unwrap();
            assert_eq!(
                value.as_deref(),
                Some(*earlier_mode),
                "after restart in {mode}: step{earlier} lost"
            );
        }
        let _: () = redis::cmd("SET")
            .arg(format!("step{step}"))
            .arg(*mode)
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("hash{step}"))
            .arg("f")
            .arg(*mode)
            .query(&mut con)
            .unwrap();
        if *mode == "none" {
            let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
        } else {
            let _: Vec<i64> = redis::cmd("WAITAOF")
                .arg(1)
                .arg(0)
                .arg(0)
                .query(&mut con)
                .unwrap();
        }
        server.kill();
    }
    let server = Server::start(
        dir.path(),
        &["--appendfsync", "everysec", "--engine-memory", "64mb"],
    );
    let mut con = server.connect(false);
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 2 * modes.len() as i64);
}

#[test]
fn shutdown_save_exits_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--appendfsync",
        "checkpoint",
        "--checkpoint-interval",
        "100000",
        "--engine-memory",
        "64mb",
    ];
    let mut server = Server::start(dir.path(), &flags);
    let mut raw = server.raw();
    raw.call(&["SET", "k", "v"]);
    raw.send(&[b"SHUTDOWN", b"SAVE"]);
    assert!(raw.read().is_none(), "SHUTDOWN closes the connection");
    let status = server
        .wait_exit(Duration::from_secs(60))
        .expect("server exits after SHUTDOWN");
    assert!(status.success());
    let restarted = Server::start(dir.path(), &flags);
    assert_eq!(
        restarted.raw().call(&["GET", "k"]),
        prefixkv_resp::Reply::bulk("v")
    );
}

/// Starts a server in `mode` on `dir`, writes `keys` keys of `value_bytes` bytes (then SAVE if
/// asked), and kills it with SIGKILL.
fn write_keys_then_kill(
    dir: &std::path::Path,
    mode: &str,
    keys: usize,
    value_bytes: usize,
    save: bool,
) {
    let flags = [
        "--appendfsync",
        mode,
        "--checkpoint-interval",
        "1000000",
        "--engine-memory",
        "64mb",
    ];
    let mut server = Server::start(dir, &flags);
    let mut con = server.connect(false);
    for i in 0..keys {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg("v".repeat(value_bytes))
            .query(&mut con)
            .unwrap();
    }
    if save {
        let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    }
    server.kill();
}

/// Starts the server in `mode` on `dir`, expects it to refuse, and returns what it printed.
fn startup_failure(dir: &std::path::Path, mode: &str) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_prefixkv-server"));
    command
        .args(["--port", "0", "--appendfsync", mode, "--dir"])
        .arg(dir);
    let output = prefixkv_testkit::child::output_within(command, Duration::from_secs(60))
        .expect("a server over damaged files exits instead of serving");
    assert!(
        !output.status.success(),
        "startup over damaged files must fail closed"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn corrupt_oplog_fails_closed_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write_keys_then_kill(dir.path(), "always", 20, 100, false);
    // Flip a byte in the middle of the first segment (not a torn tail: valid frames follow).
    let oplog = dir.path().join("oplog");
    let segment = std::fs::read_dir(&oplog)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "oplog"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = 32 + 200;
    bytes[middle] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    let text = startup_failure(dir.path(), "always");
    assert!(
        text.contains(&segment.file_name().unwrap().to_string_lossy().to_string()),
        "{text}"
    );
}

#[test]
fn corrupt_checkpoint_fails_closed_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write_keys_then_kill(dir.path(), "checkpoint", 50, 50, true);
    // Damage the largest file of the only checkpoint.
    let checkpoints = dir.path().join("checkpoints");
    let version = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a checkpoint directory");
    let victim = std::fs::read_dir(&version)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&victim, &bytes).unwrap();
    let text = startup_failure(dir.path(), "checkpoint");
    let name = victim.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        text.contains(&name)
            || text.contains(&version.file_name().unwrap().to_string_lossy().to_string()),
        "{text}"
    );
}

#[test]
fn sigterm_stops_cleanly_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--appendfsync",
        "checkpoint",
        "--checkpoint-interval",
        "1000000",
        "--engine-memory",
        "64mb",
    ];
    let mut server = Server::start(dir.path(), &flags);
    let mut raw = server.raw();
    raw.call(&["SET", "k", "v"]);
    server.signal(libc::SIGTERM);
    let status = server
        .wait_exit(Duration::from_secs(60))
        .expect("server exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    let restarted = Server::start(dir.path(), &flags);
    assert_eq!(
        restarted.raw().call(&["GET", "k"]),
        prefixkv_resp::Reply::bulk("v")
    );
}
