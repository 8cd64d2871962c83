//! Crash test: a child process (this test binary re-executed with `PREFIXKV_CRASH_CHILD` set) runs
//! writer sessions and back-to-back checkpoints of every strategy; the parent SIGKILLs it at a
//! varying point and verifies that the recovered store is prefix-consistent for the recovered
//! per-session commit points. `PREFIXKV_CRASH_ITERATIONS` (default 3) kills.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{encode_value, env_count, op_at, small_config, verify_recovered, Op};
use prefixkv_engine::{SessionId, Store, Strategy};

const KEYS: u64 = 2000;
const WORKERS: u32 = 2;
const OPS_PER_WORKER: u64 = 150_000;

/// The child's body; a no-op unless re-executed by the parent.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("PREFIXKV_CRASH_CHILD") else {
        return;
    };
    let store = Store::open(small_config(std::path::Path::new(&dir))).unwrap();
    let stdout = std::sync::Mutex::new(std::io::stdout());
    let say = |line: String| {
        let mut out = stdout.lock().unwrap();
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    };
    let mut loader = store.start_session();
    say(format!("session {} 0", loader.id().0));
    for serial in 1..=KEYS {
        let Op::Upsert(key) = op_at(KEYS, 0, serial) else {
            unreachable!()
        };
        loader
            .upsert(&key.to_be_bytes(), &encode_value(0, serial))
            .unwrap();
    }
    loader.suspend();
    std::thread::scope(|scope| {
        for index in 1..=WORKERS {
            let mut session = store.start_session();
            say(format!("session {} {index}", session.id().0));
            scope.spawn(move || {
                let mut out = Vec::new();
                for serial in 1..=OPS_PER_WORKER {
                    match op_at(KEYS, index, serial) {
                        Op::Read(key) => {
                            session.read(&key.to_be_bytes(), &mut out).unwrap();
                        }
                        Op::Upsert(key) => session
                            .upsert(&key.to_be_bytes(), &encode_value(index, serial))
                            .unwrap(),
                        Op::Delete(key) => {
                            session.delete(&key.to_be_bytes()).unwrap();
                        }
                    }
                }
                session.suspend();
                // Stay alive (idle) until killed.
                std::thread::park();
            });
        }
        for round in 0u64.. {
            let strategy = Strategy::ALL[round as usize % 5];
            let token = store.checkpoint(strategy).unwrap();
            let report = store
                .wait_for_commit(token, Duration::from_secs(60))
                .unwrap();
            say(format!("published {} {strategy}", report.version));
        }
    });
}

#[test]
fn recovery_after_sigkill_is_prefix_consistent() {
    if std::env::var("PREFIXKV_CRASH_CHILD").is_ok() {
        return;
    }
    let iterations = env_count("PREFIXKV_CRASH_ITERATIONS", 3);
    for iteration in 0..iterations {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("PREFIXKV_CRASH_CHILD", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (sender, receiver) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut indices: BTreeMap<SessionId, u32> = BTreeMap::new();
        // Kill after a varying number of published checkpoints (1..=6).
        let kill_after = 1 + (iteration * 7 + std::process::id() as u64) % 6;
        let mut published = 0;
        while published < kill_after {
            let line = receiver
                .recv_timeout(Duration::from_secs(120))
                .expect("child made no progress within 120 s");
            // libtest may print "test crash_child ... " on the same line before our output.
            let start = ["session ", "published "]
                .iter()
                .filter_map(|keyword| line.find(keyword))
                .min()
                .unwrap_or(0);
            let fields: Vec<&str> = line[start..].split(' ').collect();
            match fields[0] {
                "session" => {
                    indices.insert(
                        SessionId(fields[1].parse().unwrap()),
                        fields[2].parse().unwrap(),
                    );
                }
                "published" => published += 1,
                _ => {}
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let store = Store::open(small_config(dir.path())).unwrap();
        let info = store
            .recovery_info()
            .expect("at least one checkpoint was published")
            .clone();
        assert!(
            info.version >= kill_after,
            "recovered v{} but v{kill_after} was published",
            info.version
        );
        if let Err(problem) = verify_recovered(&store, KEYS, &indices, &info.session_commit_points)
        {
            panic!(
                "iteration {iteration}: recovered v{}: {problem}",
                info.version
            );
        }
    }
}
