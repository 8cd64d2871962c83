//! Crash tests: a child process (this test binary re-executed in "child mode") commits forever
//! with `SyncPolicy::Full`, reporting each durable commit number on its stdout pipe, and running
//! auto and explicit checkpoints of every mode. It is SIGKILLed either by the parent after a
//! random number of reports, or by itself at the 1st..4th occurrence of a protocol step (the
//! self-kill rounds cycle through every step of the commit/checkpoint fsync ordering). After each kill the parent reopens the
//! files and checks that the database is exactly a committed prefix, no older than the last
//! reported durable commit.
//!
//! Kills: `PAGESTORE_CRASH_KILLS` (default 30). Note: a process kill keeps the OS page cache, so
//! this checks the protocol's ordering against process death, not against power loss.

mod common;

use common::*;
use prefixkv_pagestore::{BackfillStrategy, CheckpointMode, Options, PageStore, SyncPolicy};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const CHILD_DIR_ENV: &str = "PAGESTORE_CRASH_CHILD_DIR";
const DB_PAGES: u32 = 64;
const SEED: u64 = 4242;
const CHILD_TIME_LIMIT: Duration = Duration::from_secs(120);

fn options(strategy: BackfillStrategy) -> Options {
    Options {
        page_size_bytes: 1024,
        sync: SyncPolicy::Full,
        auto_checkpoint_frames: 30,
        cache_capacity_pages: 48,
        busy_timeout: Duration::from_secs(5),
        backfill: strategy,
        evict_wal_from_os_cache_before_backfill: false,
    }
}

fn strategy_named(name: &str) -> BackfillStrategy {
    match name {
        "naive" => BackfillStrategy::Naive,
        "pool" => BackfillStrategy::FastThreadPool,
        _ => BackfillStrategy::Fast,
    }
}

/// Every step of the ordering the store announces; self-kill rounds cycle through them.
/// (`backfill:write` is each `pwrite` of the naive copy and each `pwritev` of the fast one, so
/// every strategy reaches every step.)
const STEPS: [&str; 10] = [
    "commit:before_frames_write",
    "commit:before_wal_fsync",
    "restart:before_header_write",
    "restart:after_header_fsync",
    "checkpoint:before_wal_fsync",
    "backfill:write",
    "checkpoint:before_db_fsync",
    "checkpoint:before_publish",
    "checkpoint:before_restart",
    "checkpoint:after_truncate",
];

static STEPS_LEFT: AtomicU64 = AtomicU64::new(u64::MAX);
static TARGET_STEP: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn kill_self_at_step(step: &'static str) {
    if TARGET_STEP.get().is_some_and(|target| target == step)
        && STEPS_LEFT.fetch_sub(1, Ordering::SeqCst) == 1
    {
        eprintln!("KILLED AT {step}");
        // SAFETY: plain syscalls; the process ends here.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// The child: only does anything when re-executed with `PAGESTORE_CRASH_CHILD_DIR` set.
#[test]
fn crash_child_mode() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let strategy = strategy_named(&std::env::var("PAGESTORE_CRASH_STRATEGY").unwrap_or_default());
    let kill_at: u64 = std::env::var("PAGESTORE_CRASH_KILL_STEP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if kill_at > 0 {
        STEPS_LEFT.store(kill_at, Ordering::SeqCst);
        TARGET_STEP
            .set(std::env::var("PAGESTORE_CRASH_KILL_NAME").unwrap())
            .unwrap();
        assert!(prefixkv_pagestore::fail_point::install_step_hook(
            kill_self_at_step
        ));
    }
    let (store, _) =
        PageStore::open(std::path::Path::new(&dir).join("db"), options(strategy)).unwrap();
    let mut model = Model::new(SEED, DB_PAGES);
    let start = prefix_of(&mut model, &read_versions(&store, DB_PAGES).unwrap()).unwrap();
    let modes = [
        CheckpointMode::Passive,
        CheckpointMode::Full,
        CheckpointMode::Restart,
        CheckpointMode::Truncate,
    ];
    let mut out = std::io::stdout();
    writeln!(out, "START {start}").unwrap();
    for commit in start + 1..start + 100_000 {
        run_commit(&store, SEED, commit, DB_PAGES).unwrap();
        writeln!(out, "DURABLE {commit}").unwrap();
        out.flush().unwrap();
        if commit.is_multiple_of(5) {
            store
                .checkpoint(modes[(splitmix(commit as u64) % 4) as usize])
                .unwrap();
        }
    }
}

#[test]
fn database_is_a_committed_prefix_after_every_kill() {
    if std::env::var(CHILD_DIR_ENV).is_ok() {
        return;
    }
    let kills = env_count("PAGESTORE_CRASH_KILLS", 30);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut model = Model::new(SEED, DB_PAGES);
    let mut durable_floor = 0u32;
    let mut random = SEED;
    for round in 0..kills {
        random = splitmix(random);
        let self_kill = random.is_multiple_of(2);
        let kill_step = if self_kill { 1 + (random >> 8) % 4 } else { 0 };
        let kill_name = STEPS[(round as usize / 2) % STEPS.len()];
        let reports_before_kill = 1 + (random >> 20) % 40;
        let strategy = ["fast", "naive", "pool"][round as usize % 3];
        let mut child = Command::new(&exe)
            .args([
                "crash_child_mode",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR_ENV, dir.path())
            .env("PAGESTORE_CRASH_STRATEGY", strategy)
            .env("PAGESTORE_CRASH_KILL_STEP", kill_step.to_string())
            .env("PAGESTORE_CRASH_KILL_NAME", kill_name)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Watchdog: a bounded wait for the whole child; kills it if it hangs.
        let (finished, watchdog_rx) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if watchdog_rx.recv_timeout(CHILD_TIME_LIMIT).is_err() {
                // SAFETY: signalling our own child process.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                return true;
            }
            false
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr_reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut reported = 0u64;
        let mut transcript = String::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let Ok(line) = line else { break };
            transcript.push_str(&line);
            transcript.push('\n');
            if let Some(number) = line.strip_prefix("DURABLE ") {
                let commit: u32 = number.parse().unwrap();
                assert!(commit > durable_floor || reported > 0 || commit == durable_floor + 1);
                durable_floor = durable_floor.max(commit);
                reported += 1;
                if !self_kill && reported == reports_before_kill {
                    // Keep reading: reports already in the pipe still count as durable.
                    child.kill().unwrap();
                }
            }
        }
        let status = child.wait().unwrap();
        finished.send(()).ok();
        let hung = watchdog.join().unwrap();
        let stderr_text = stderr_reader.join().unwrap();
        assert!(
            !hung,
            "round {round}: child hung and was killed by the watchdog\n{stderr_text}"
        );
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "round {round}: child did not die by SIGKILL: {status:?}\n{stderr_text}"
        );

        let (store, report) =
            PageStore::open(dir.path().join("db"), options(BackfillStrategy::Fast)).unwrap();
        let versions = read_versions(&store, DB_PAGES)
            .unwrap_or_else(|defect| panic!("round {round}: {defect}; {report:?}"));
        let recovered = prefix_of(&mut model, &versions)
            .unwrap_or_else(|defect| panic!("round {round}: {defect}; {report:?}"));
        assert!(
            recovered >= durable_floor,
            "round {round}: recovered commit {recovered} < durable {durable_floor}; {report:?}"
        );
        assert!(recovered <= durable_floor + 1, "round {round}: recovered commit {recovered} was never attempted\n{transcript}\n{stderr_text}");
        eprintln!(
            "round {round}: {strategy} {} -> recovered commit {recovered} (durable {durable_floor}); replayed {} frames, dropped {} uncommitted{}",
            if self_kill {
                let at = stderr_text.lines().find_map(|l| l.strip_prefix("KILLED AT ")).unwrap_or("?");
                format!("self-kill at step {kill_step} ({at})")
            } else { format!("killed after {reports_before_kill} reports") },
            report.frames_replayed,
            report.uncommitted_frames_dropped,
            report.stopped_because.map(|r| format!(", stopped: {r}")).unwrap_or_default()
        );
        durable_floor = recovered;
    }
}
