//! Crash test: a child process (this test binary, re-executed in child mode) appends under the
//! `always` policy from several threads and prints each LSN whose completion fired; the parent
//! SIGKILLs it at random points and checks, after each kill, that replay finds every
//! acknowledged record with the right content and no record half-present.
//!
//! `OPLOG_CRASH_ITERATIONS` sets the number of kills (default 30); `OPLOG_CRASH_SEED` replays a
//! failing run. The parent waits on the child's output with bounded timeouts (the testkit's
//! child harness), never sleeps. SIGKILL keeps the page cache; power cuts are in `power_cut.rs`.

use prefixkv_storage::log::{BackendChoice, Log, LogConfig, SyncPolicy};
use prefixkv_testkit::child::{self, ChildProcess};
use prefixkv_testkit::rng::{env_count, Rng};
use std::collections::BTreeMap;
use std::time::Duration;

const CHILD_DIR_ENV: &str = "OPLOG_CRASH_CHILD_DIR";
const CHILD_THREADS: u64 = 4;

/// Deterministic payload of (thread, seq): a header naming it, then filler bytes derived from it,
/// so a replayed record proves its own integrity and identity.
fn payload(thread: u64, seq: u64) -> Vec<u8> {
    let length = 20 + ((thread * 131 + seq * 17) % 400) as usize;
    let mut bytes = format!("T{thread}S{seq}:").into_bytes();
    let mut i = 0u64;
    while bytes.len() < length {
        bytes.push(((thread * 31 + seq * 7 + i) % 251) as u8);
        i += 1;
    }
    bytes
}

/// Parses the header of a replayed payload and checks the rest matches.
fn identify(bytes: &[u8]) -> Option<(u64, u64)> {
    let colon = bytes.iter().position(|&b| b == b':')?;
    let header = std::str::from_utf8(&bytes[..colon]).ok()?;
    let (thread, seq) = header.strip_prefix('T')?.split_once('S')?;
    let (thread, seq) = (thread.parse().ok()?, seq.parse().ok()?);
    (payload(thread, seq) == bytes).then_some((thread, seq))
}

fn child_config() -> LogConfig {
    LogConfig {
        policy: SyncPolicy::Always,
        segment_bytes: 16 << 10,
        backend: BackendChoice::Auto,
        ..LogConfig::default()
    }
}

/// Child mode: runs only when the parent re-executes this binary with `CHILD_DIR_ENV` set.
#[test]
fn crash_child() {
    let Some(dir) = child::child_mode(CHILD_DIR_ENV) else {
        return;
    };
    let (log, report) = Log::open(&dir, child_config()).expect("child opens the log");
    let start_seq = report.next_lsn; // distinct sequence numbers across child generations
    std::thread::scope(|scope| {
        for thread in 0..CHILD_THREADS {
            let log = &log;
            scope.spawn(move || {
                let mut seq = start_seq * 1000;
                loop {
                    let lsn = log.append(&payload(thread, seq)).unwrap().wait().unwrap();
                    child::report(format!("ACK {lsn} {thread} {seq}"));
                    seq += 1;
                    if thread == 0 && seq % 150 == 0 {
                        // Truncation under fire: announce first, so the parent knows records up
                        // to here may be gone.
                        let through = log.durable_lsn().saturating_sub(100);
                        child::report(format!("TRUNC {through}"));
                        log.truncate_through(through).unwrap();
                    }
                }
            });
        }
    });
}

#[test]
fn sigkill_during_appends_loses_no_acknowledged_record() {
    if child::child_mode(CHILD_DIR_ENV).is_some() {
        return;
    }
    let iterations = env_count("OPLOG_CRASH_ITERATIONS", 30) as usize;
    let mut rng = Rng::from_env("OPLOG_CRASH_SEED");
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut truncated_through = 0u64;
    let mut torn_tails = 0;
    for iteration in 0..iterations {
        let mut child =
            ChildProcess::spawn_test("crash_child", &[(CHILD_DIR_ENV, dir.path().as_os_str())])
                .unwrap();
        // Kill after a random number of acknowledgements (0: during start-up and recovery).
        let kill_after = if rng.below(6) == 0 {
            0
        } else {
            1 + rng.below(300)
        };
        let mut seen = 0;
        let handle = |line: &str, acked: &mut BTreeMap<u64, (u64, u64)>, truncated: &mut u64| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["ACK", lsn, thread, seq] => {
                    let previous = acked.insert(
                        lsn.parse().unwrap(),
                        (thread.parse().unwrap(), seq.parse().unwrap()),
                    );
                    assert!(previous.is_none(), "LSN {lsn} acknowledged twice");
                    true
                }
                ["TRUNC", through] => {
                    *truncated = (*truncated).max(through.parse().unwrap());
                    false
                }
                _ => false,
            }
        };
        while seen < kill_after {
            let line = child
                .next_line(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("iteration {iteration}: {e}"));
            if handle(&line, &mut acked, &mut truncated_through) {
                seen += 1;
            }
        }
        // Lines the child printed before it died were acknowledged too.
        for line in child.kill() {
            handle(&line, &mut acked, &mut truncated_through);
        }

        let (log, report) = Log::open(
            dir.path(),
            LogConfig {
                backend: BackendChoice::Pwritev,
                ..child_config()
            },
        )
        .unwrap_or_else(|e| panic!("iteration {iteration}: recovery failed: {e}"));
        torn_tails += usize::from(report.torn_tail.is_some());
        let mut replayed = BTreeMap::new();
        let mut expected_lsn = report.oldest_lsn;
        for record in log.replay(report.oldest_lsn).unwrap() {
            let (lsn, bytes) = record.unwrap();
            assert_eq!(lsn, expected_lsn, "LSNs are dense");
            expected_lsn += 1;
            let identity = identify(&bytes).unwrap_or_else(|| {
                panic!("iteration {iteration}: LSN {lsn} is half-present or damaged")
            });
            replayed.insert(lsn, identity);
        }
        assert_eq!(expected_lsn, report.next_lsn);
        for (lsn, identity) in acked.range(truncated_through + 1..) {
            assert_eq!(
                replayed.get(lsn),
                Some(identity),
                "iteration {iteration}: acknowledged LSN {lsn} lost or changed after SIGKILL"
            );
        }
        log.close().unwrap();
    }
    eprintln!(
        "crash test: {iterations} kills, {} acknowledged records verified, {torn_tails} torn tails",
        acked.len()
    );
    assert!(!acked.is_empty());
}
