//! Crash tests per durability mode: client threads write under load, the server gets SIGKILL,
//! restarts on the same directory, and the surviving data is checked against what each
//! connection had acknowledged.
//!
//! Each writer thread `t` sends `SET w{t}:{i} {i}` for i = 0, 1, 2, ... on its own connection,
//! one at a time, recording the highest acknowledged i; every 50 writes it also asks
//! `PREFIXKV.COMMITPOINT` and records how many of its writes were durable then.
//! `CRASH_WRITERS` (default 3) and `CRASH_ROUNDS` (default 1) scale the test.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Outcome {
    /// Highest acknowledged index per writer (-1 = none).
    acknowledged: Vec<i64>,
    /// Writes reported durable by COMMITPOINT per writer (the newest report).
    durable: Vec<u64>,
}

/// Runs writers against `server` until each acknowledged at least `min_writes` (bounded),
/// then SIGKILLs the server while they keep writing.
fn write_then_kill(
    server: &mut Server,
    writers: usize,
    min_writes: i64,
    before_kill: impl Fn(&Server),
) -> Outcome {
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged: Arc<Vec<AtomicI64>> =
        Arc::new((0..writers).map(|_| AtomicI64::new(-1)).collect());
    let durable: Arc<Vec<AtomicU64>> = Arc::new((0..writers).map(|_| AtomicU64::new(0)).collect());
    let handles: Vec<_> = (0..writers)
        .map(|t| {
            let mut con = server.connect(t % 2 == 1);
            let (stop, acknowledged, durable) =
                (stop.clone(), acknowledged.clone(), durable.clone());
            std::thread::spawn(move || {
                let mut i: i64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    let result: redis::RedisResult<()> = redis::cmd("SET")
                        .arg(format!("w{t}:{i}"))
                        .arg(i)
                        .query(&mut con);
                    if result.is_err() {
                        return;
                    }
                    acknowledged[t].store(i, Ordering::SeqCst);
                    if i % 50 == 0 {
                        match redis::cmd("PREFIXKV.COMMITPOINT").query::<Vec<u64>>(&mut con) {
                            Ok(point) => durable[t].store(point[1], Ordering::SeqCst),
                            Err(_) => return,
                        }
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged
        .iter()
        .any(|a| a.load(Ordering::SeqCst) < min_writes)
    {
        assert!(Instant::now() < deadline, "writers made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    before_kill(server);
    server.kill();
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().unwrap();
    }
    Outcome {
        acknowledged: acknowledged
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect(),
        durable: durable.iter().map(|d| d.load(Ordering::SeqCst)).collect(),
    }
}

/// Per writer: the surviving indexes, checked to be a prefix 0..n; returns n per writer.
fn surviving_prefixes(server: &Server, outcome: &Outcome) -> Vec<i64> {
    let mut con = server.connect(false);
    let mut prefixes = Vec::new();
    for (t, &acked) in outcome.acknowledged.iter().enumerate() {
        // Writes past the acknowledged one may or may not have happened (one can be in flight).
        let limit = acked + 2;
        let mut present = Vec::new();
        for i in 0..=limit {
            let value: Option<i64> = redis::cmd("GET")
                .arg(format!("w{t}:{i}"))
                .query(&mut con)
                .unwrap();
            if let Some(v) = value {
                assert_eq!(v, i);
                present.push(i);
            }
        }
        let n = present.len() as i64;
        assert_eq!(
            present,
            (0..n).collect::<Vec<i64>>(),
            "writer {t}: surviving writes are not a prefix"
        );
        prefixes.push(n);
    }
    prefixes
}

fn checkpoints_completed(server: &Server) -> u64 {
    let mut con = server.connect(false);
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query(&mut con)
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("checkpoints_completed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn wait_for_checkpoints(server: &Server, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while checkpoints_completed(server) < at_least {
        assert!(Instant::now() < deadline, "no checkpoint completed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn crash_mode(mode: &str, check_all_acknowledged: bool) {
    let writers = env_count("CRASH_WRITERS", 3);
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--appendfsync",
        mode,
        "--checkpoint-interval",
        "100",
        "--engine-memory",
        "64mb",
    ];
    for round in 0..env_count("CRASH_ROUNDS", 1) {
        let mut server = Server::start(dir.path(), &flags);
        // Start each round from an empty keyspace so indexes restart at 0.
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut server.connect(false))
            .unwrap();
        let outcome = write_then_kill(&mut server, writers, 300, |server| {
            if mode != "none" {
                // A few checkpoints, so writers report commit points after one committed.
                wait_for_checkpoints(server, 3);
            }
        });
        let restarted = Server::start(dir.path(), &flags);
        let prefixes = surviving_prefixes(&restarted, &outcome);
        for (t, &kept) in prefixes.iter().enumerate() {
            let (acked, durable) = (outcome.acknowledged[t], outcome.durable[t] as i64);
            eprintln!("{mode} round {round} writer {t}: acknowledged {} writes, {durable} known durable, {kept} recovered", acked + 1);
            assert!(
                kept >= durable,
                "writer {t}: {kept} recovered < {durable} reported durable"
            );
            if check_all_acknowledged {
                assert!(
                    kept > acked,
                    "writer {t}: acknowledged write {acked} lost ({kept} recovered)"
                );
            }
        }
        drop(restarted);
    }
}

#[test]
fn always_loses_no_acknowledged_write() {
    crash_mode("always", true);
}

#[test]
fn everysec_loses_no_acknowledged_write_on_process_crash() {
    crash_mode("everysec", true);
}

#[test]
fn checkpoint_recovers_a_prefix_per_connection() {
    crash_mode("checkpoint", false);
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
