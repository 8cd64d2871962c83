//! Crash tests of the units a client sends as one: MULTI/EXEC and scripts (EVAL). Clients each
//! send units that set `UNIT_KEYS` keys to the unit's number, the server is SIGKILLed under load,
//! and after the restart every client's keys must hold one unit's value (never part of one), at
//! least the last unit the mode promised durable and at most the last one sent. The oracle is
//! built from what the clients were told, and shown failing on a log edited to keep half a unit.

mod common;

use std::time::Duration;

use common::Server;

/// How a client sends its unit of `UNIT_KEYS` writes.
#[derive(Clone, Copy, Debug)]
enum Unit {
    /// `MULTI; SET ... ; EXEC`, pipelined: EXEC answers every SET's OK.
    Exec,
    /// One `EVAL` of [`SET_ALL`]: it answers the number of keys it set.
    Script,
}

/// The script of [`Unit::Script`]: sets every key to ARGV[1], answers how many.
const SET_ALL: &str = "for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[1]) end return #KEYS";

/// Keys one unit sets.
const UNIT_KEYS: u64 = 8;

/// What one client was told: its unit `n` (from 1) sets `unit:{client}:{0..UNIT_KEYS}` to `n`.
#[derive(Clone, Copy, Debug, Default)]
struct UnitLog {
    client: u64,
    /// Units sent (counted before sending).
    sent: u64,
    /// Units whose reply came back whole ([`unit_acknowledged`]).
    acknowledged: u64,
    /// Units acknowledged before the test waited for two more checkpoints to complete (what the
    /// `checkpoint` mode must keep).
    before_checkpoints: u64,
}

fn unit_key(client: u64, index: u64) -> String {
    format!("unit:{client}:{index}")
}

/// One client sending `unit`s (unit `n` sets its keys to `n`), one at a time, until its
/// connection dies.
fn unit_client(
    port: u16,
    unit: Unit,
    client: u64,
    progress: &std::sync::atomic::AtomicU64,
) -> UnitLog {
    let mut log = UnitLog {
        client,
        ..UnitLog::default()
    };
    let Ok(mut raw) = common::Raw::connect(port) else {
        return log;
    };
    let keys: Vec<String> = (0..UNIT_KEYS).map(|i| unit_key(client, i)).collect();
    loop {
        let n = log.sent + 1;
        let value = n.to_string();
        let mut request = Vec::new();
        match unit {
            Unit::Exec => {
                common::encode_request(&mut request, &[b"MULTI"]);
                for key in &keys {
                    common::encode_request(
                        &mut request,
                        &[b"SET", key.as_bytes(), value.as_bytes()],
                    );
                }
                common::encode_request(&mut request, &[b"EXEC"]);
            }
            Unit::Script => {
                let count = UNIT_KEYS.to_string();
                let mut args: Vec<&[u8]> = vec![b"EVAL", SET_ALL.as_bytes(), count.as_bytes()];
                args.extend(keys.iter().map(|key| key.as_bytes()));
                args.push(value.as_bytes());
                common::encode_request(&mut request, &args);
            }
        }
        log.sent = n;
        if raw.send_bytes(&request).is_err() {
            return log;
        }
        if unit_acknowledged(&mut raw, unit) != Some(true) {
            return log;
        }
        log.acknowledged = n;
        progress.store(n, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Reads one unit's replies: `Some(true)` when the unit was acknowledged whole (EXEC: `+OK`,
/// `+QUEUED` per SET, then an array of every SET's OK; a script: the number of keys it set).
fn unit_acknowledged(raw: &mut common::Raw, unit: Unit) -> Option<bool> {
    use prefixkv_resp::Reply;
    match unit {
        Unit::Exec => {
            for _ in 0..=UNIT_KEYS {
                raw.read()?;
            }
            Some(matches!(raw.read()?, Reply::Array(items)
                if items.len() == UNIT_KEYS as usize
                    && items.iter().all(|item| matches!(item, Reply::SimpleString(s) if s == "OK"))))
        }
        Unit::Script => Some(raw.read()? == Reply::Integer(UNIT_KEYS as i64)),
    }
}

/// The oracle, from what the clients were told: each client's keys are all absent or all hold one
/// unit's value `v` (never part of a unit), `v <= sent`, and `v >= acknowledged` when
/// `lossless`, else `v >= before_checkpoints`. Returns each client's recovered unit.
fn check_units(port: u16, logs: &[UnitLog], lossless: bool) -> Result<Vec<u64>, String> {
    let mut raw = common::Raw::connect(port).map_err(|e| e.to_string())?;
    let mut recovered = Vec::new();
    for log in logs {
        let keys: Vec<String> = (0..UNIT_KEYS).map(|i| unit_key(log.client, i)).collect();
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
                "client {}: its keys hold {values:?}: part of a unit was recovered",
                log.client
            ));
        }
        let v = values[0].unwrap_or(0);
        if v > log.sent {
            return Err(format!(
                "client {}: unit {v} recovered, only {} sent",
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
                "client {}: unit {floor} was acknowledged (and durable by the mode's promise), \
                 only {v} recovered",
                log.client
            ));
        }
        recovered.push(v);
    }
    Ok(recovered)
}

/// Runs `CLIENTS` clients sending `unit`s against a server started with `flags`, waits (when `checkpoints`)
/// for two checkpoints (BGSAVE or periodic) to complete after every client had 200 units
/// acknowledged, SIGKILLs it under load, and returns the clients' logs.
fn units_then_kill(
    dir: &std::path::Path,
    flags: &[&str],
    unit: Unit,
    checkpoints: bool,
) -> Vec<UnitLog> {
    const CLIENTS: u64 = 3;
    let mut server = Server::start(dir, flags);
    let port = server.port;
    let progress: Vec<std::sync::atomic::AtomicU64> =
        (0..CLIENTS).map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let progress = &progress[client as usize];
                scope.spawn(move || unit_client(port, unit, client, progress))
            })
            .collect();
        // Kill once every client has had units acknowledged (bounded wait).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while progress
            .iter()
            .any(|p| p.load(std::sync::atomic::Ordering::SeqCst) < 200)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the clients made no progress"
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
            .map(|(handle, before_checkpoints)| UnitLog {
                before_checkpoints,
                ..handle.join().unwrap()
            })
            .collect()
    })
}

/// SIGKILL under concurrent clients sending `unit`s in `always`, `everysec`, `checkpoint` and
/// `none` (the modes without a log, with BGSAVEs): after the restart every client's unit is whole
/// (its keys all hold one unit's value), in the logging modes every acknowledged unit is there,
/// and in the others every unit acknowledged before the last two checkpoints.
fn recovered_whole_after_sigkill_in_every_mode(unit: Unit) {
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
        let logs = units_then_kill(dir.path(), &flags, unit, true);
        let restarted = Server::start(dir.path(), &flags);
        let recovered = check_units(restarted.port, &logs, lossless)
            .unwrap_or_else(|problem| panic!("{unit:?} {mode}: {problem}"));
        for (log, v) in logs.iter().zip(&recovered) {
            eprintln!(
                "{unit:?} {mode}: client {} sent {} units, {} acknowledged, unit {v} recovered",
                log.client, log.sent, log.acknowledged
            );
        }
    }
}

#[test]
fn exec_is_recovered_whole_after_sigkill_in_every_mode() {
    recovered_whole_after_sigkill_in_every_mode(Unit::Exec);
}

#[test]
fn script_is_recovered_whole_after_sigkill_in_every_mode() {
    recovered_whole_after_sigkill_in_every_mode(Unit::Script);
}

/// The oracle above is not vacuous: after a SIGKILL in `always`, the oplog is edited so that the
/// last unit's record keeps only half its SETs (a log without groups, or a recovery applying
/// part of one, would leave this); the restarted server then holds half a unit, and the oracle
/// reports it.
fn oracle_catches_a_log_edited_to_keep_half_a_unit(unit: Unit) {
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
    let logs = units_then_kill(dir.path(), &flags, unit, false);
    let log_dir = dir.path().join("oplog");
    let config = prefixkv_storage::log::LogConfig::default();
    let (log, _) = prefixkv_storage::log::Log::open(&log_dir, config.clone()).unwrap();
    let first = log.oldest_lsn();
    let mut records: Vec<Vec<u8>> = log
        .replay(first)
        .unwrap()
        .map(|item| item.unwrap().1)
        .collect();
    log.close().unwrap();
    let last_unit = records
        .iter()
        .rposition(|payload| decode_record(payload).unwrap().operations.len() > 1)
        .expect("a unit's record");
    let decoded = decode_record(&records[last_unit]).unwrap();
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
    records[last_unit] = half;
    std::fs::remove_dir_all(&log_dir).unwrap();
    let (log, _) = prefixkv_storage::log::Log::open(
        &log_dir,
        prefixkv_storage::log::LogConfig {
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
    let problem = check_units(restarted.port, &logs, true).unwrap_err();
    assert!(problem.contains("part of a unit"), "{unit:?}: {problem}");
}

#[test]
fn exec_oracle_catches_a_log_edited_to_keep_half_an_exec() {
    oracle_catches_a_log_edited_to_keep_half_a_unit(Unit::Exec);
}

#[test]
fn script_oracle_catches_a_log_edited_to_keep_half_a_script() {
    oracle_catches_a_log_edited_to_keep_half_a_unit(Unit::Script);
}
