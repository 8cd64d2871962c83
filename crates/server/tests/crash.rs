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

/// Keys one EXEC of the group crash tests sets.
const EXEC_KEYS: u64 = 8;

/// What one EXEC client was told: EXEC `n` (from 1) sets `exec:{client}:{0..EXEC_KEYS}` to `n`.
#[derive(Clone, Copy, Debug, Default)]
struct ExecLog {
    client: u64,
    /// EXECs sent (counted before sending).
    sent: u64,
    /// EXECs whose reply came back as every SET's OK.
    acknowledged: u64,
    /// EXECs acknowledged before the test waited for two more checkpoints to complete (what the
    /// `checkpoint` mode must keep).
    before_checkpoints: u64,
}

fn exec_key(client: u64, index: u64) -> String {
    format!("exec:{client}:{index}")
}

/// One client: `MULTI; SET x N times; EXEC`, pipelined, until its connection dies.
fn exec_client(port: u16, client: u64, progress: &std::sync::atomic::AtomicU64) -> ExecLog {
    let mut log = ExecLog {
        client,
        ..ExecLog::default()
    };
    let Ok(mut raw) = common::Raw::connect(port) else {
        return log;
    };
    loop {
        let n = log.sent + 1;
        let value = n.to_string();
        let mut request = Vec::new();
        common::encode_request(&mut request, &[b"MULTI"]);
        for index in 0..EXEC_KEYS {
            let key = exec_key(client, index);
            common::encode_request(&mut request, &[b"SET", key.as_bytes(), value.as_bytes()]);
        }
        common::encode_request(&mut request, &[b"EXEC"]);
        log.sent = n;
        if raw.send_bytes(&request).is_err() {
            return log;
        }
        // +OK, QUEUED per SET, then EXEC's array.
        for _ in 0..=EXEC_KEYS {
            if raw.read().is_none() {
                return log;
            }
        }
        match raw.read() {
            Some(prefixkv_resp::Reply::Array(items))
                if items.len() == EXEC_KEYS as usize
                    && items.iter().all(
                        |item| matches!(item, prefixkv_resp::Reply::SimpleString(s) if s == "OK"),
                    ) =>
            {
                log.acknowledged = n;
                progress.store(n, std::sync::atomic::Ordering::SeqCst);
            }
            _ => return log,
        }
    }
}

/// The oracle, from what the clients were told: each client's keys are all absent or all hold one
/// EXEC's value `v` (never part of an EXEC), `v <= sent`, and `v >= acknowledged` when
/// `lossless`, else `v >= before_checkpoints`. Returns each client's recovered EXEC.
fn check_execs(port: u16, logs: &[ExecLog], lossless: bool) -> Result<Vec<u64>, String> {
    let mut raw = common::Raw::connect(port).map_err(|e| e.to_string())?;
    let mut recovered = Vec::new();
    for log in logs {
        let keys: Vec<String> = (0..EXEC_KEYS).map(|i| exec_key(log.client, i)).collect();
        let mut args = vec!["MGET"];
        args.extend(keys.iter().map(String::as_str));
        let values: Vec<Option<u64>> = match raw.call(&args) {
            prefixkv_resp::Reply::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    prefixkv_resp::Reply::BulkString(v) => {
                        Some(String::from_utf8_lossy(&v).parse().unwrap())
                    }
                    _ => None,
                })
                .collect(),
            other => return Err(format!("MGET answered {other:?}")),
        };
        if values.iter().any(|v| *v != values[0]) {
            return Err(format!(
                "client {}: its keys hold {values:?}: part of an EXEC was recovered",
                log.client
            ));
        }
        let v = values[0].unwrap_or(0);
        if v > log.sent {
            return Err(format!(
                "client {}: EXEC {v} recovered, only {} sent",
                log.client, log.sent
            ));
        }
        let floor = if lossless {
            log.acknowledged
        } else {
            log.before_checkpoints
        };
        if v < floor {
            return Err(format!(
                "client {}: EXEC {floor} was acknowledged (and durable by the mode's promise), \
                 only {v} recovered",
                log.client
            ));
        }
        recovered.push(v);
    }
    Ok(recovered)
}

/// Runs `CLIENTS` EXEC clients against a server started with `flags`, waits (when `checkpoints`)
/// for two checkpoints (BGSAVE or periodic) to complete after every client had 200 EXECs
/// acknowledged, SIGKILLs it under load, and returns the clients' logs.
fn execs_then_kill(dir: &std::path::Path, flags: &[&str], checkpoints: bool) -> Vec<ExecLog> {
    const CLIENTS: u64 = 3;
    let mut server = Server::start(dir, flags);
    let port = server.port;
    let progress: Vec<std::sync::atomic::AtomicU64> =
        (0..CLIENTS).map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let progress = &progress[client as usize];
                scope.spawn(move || exec_client(port, client, progress))
            })
            .collect();
        // Kill once every client has had EXECs acknowledged (bounded wait).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while progress
            .iter()
            .any(|p| p.load(std::sync::atomic::Ordering::SeqCst) < 200)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the EXEC clients made no progress"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let before_checkpoints: Vec<u64> = progress
            .iter()
            .map(|p| p.load(std::sync::atomic::Ordering::SeqCst))
            .collect();
        if checkpoints {
            let completed: u64 = server
                .raw()
                .info_field("persistence", "checkpoints_completed")
                .parse()
                .unwrap();
            // BGSAVE for `none` (no periodic checkpoint); in the other modes a periodic one may
            // be running, then BGSAVE answers an error and the periodic ones complete the count.
            let mut raw = server.raw();
            for more in 1..=2 {
                raw.call(&["BGSAVE"]);
                server.wait_for_checkpoints(completed + more);
            }
        }
        server.kill();
        handles
            .into_iter()
            .zip(before_checkpoints)
            .map(|(handle, before_checkpoints)| ExecLog {
                before_checkpoints,
                ..handle.join().unwrap()
            })
            .collect()
    })
}

/// SIGKILL under concurrent MULTI/EXEC clients in `always`, `everysec`, `checkpoint` and `none`
/// (the modes without a log, with BGSAVEs): after the restart every client's EXEC is whole (its
/// keys all hold one EXEC's value), in the logging modes every acknowledged EXEC is there, and in
/// the others every EXEC acknowledged before the last two checkpoints.
#[test]
fn exec_is_recovered_whole_after_sigkill_in_every_mode() {
    let modes = [
        ("always", true),
        ("everysec", true),
        ("checkpoint", false),
        ("none", false),
    ];
    for (mode, lossless) in modes {
        let dir = tempfile::tempdir().unwrap();
        let flags = [
            "--appendfsync",
            mode,
            "--checkpoint-interval",
            "50",
            "--engine-memory",
            "64mb",
        ];
        let logs = execs_then_kill(dir.path(), &flags, true);
        let restarted = Server::start(dir.path(), &flags);
        let recovered = check_execs(restarted.port, &logs, lossless)
            .unwrap_or_else(|problem| panic!("{mode}: {problem}"));
        for (log, v) in logs.iter().zip(&recovered) {
            eprintln!(
                "{mode}: client {} sent {} EXECs, {} acknowledged, EXEC {v} recovered",
                log.client, log.sent, log.acknowledged
            );
        }
    }
}

/// The oracle above is not vacuous: after a SIGKILL in `always`, the oplog is edited so that the
/// last EXEC's record keeps only half its SETs (a log without groups, or a recovery applying
/// part of one, would leave this); the restarted server then holds half an EXEC, and the oracle
/// reports it.
#[test]
fn exec_oracle_catches_a_log_edited_to_keep_half_an_exec() {
    use prefixkv_store::record::{decode_record, encode_operation, start_record, Operation};
    let dir = tempfile::tempdir().unwrap();
    // No periodic checkpoint: the whole log is replayed.
    let flags = [
        "--appendfsync",
        "always",
        "--checkpoint-interval",
        "3600000",
        "--engine-memory",
        "64mb",
    ];
    let logs = execs_then_kill(dir.path(), &flags, false);
    let log_dir = dir.path().join("oplog");
    let config = prefixkv_oplog::Config::default();
    let (log, _) = prefixkv_oplog::Oplog::open(&log_dir, config.clone()).unwrap();
    let first = log.oldest_lsn();
    let mut records: Vec<Vec<u8>> = log
        .replay(first)
        .unwrap()
        .map(|item| item.unwrap().1)
        .collect();
    log.close().unwrap();
    let last_exec = records
        .iter()
        .rposition(|payload| decode_record(payload).unwrap().operations.len() > 1)
        .expect("an EXEC's record");
    let decoded = decode_record(&records[last_exec]).unwrap();
    let mut half = Vec::new();
    start_record(&mut half, decoded.session_id);
    for operation in &decoded.operations[..decoded.operations.len() / 2] {
        encode_operation(
            &mut half,
            decoded.session_id,
            Operation {
                serial: operation.serial,
                key: operation.key,
                value: operation.value,
            },
        );
    }
    records[last_exec] = half;
    std::fs::remove_dir_all(&log_dir).unwrap();
    let (log, _) = prefixkv_oplog::Oplog::open(
        &log_dir,
        prefixkv_oplog::Config {
            first_lsn: first,
            ..config
        },
    )
    .unwrap();
    for payload in &records {
        let _appended = log.append(payload).unwrap();
    }
    log.flush_and_sync().unwrap();
    log.close().unwrap();
    let restarted = Server::start(dir.path(), &flags);
    let problem = check_execs(restarted.port, &logs, true).unwrap_err();
    assert!(problem.contains("part of an EXEC"), "{problem}");
}
