//! Crash tests of the WAL-backed image store: a child process (this test binary re-executed in
//! child mode) runs a logged game loop whose images go to the page store as WAL frames, with a
//! backfill every few images, and reports each durable tick on its stdout pipe. It is SIGKILLed
//! either by the parent after a random number of reports, or by itself at the n-th occurrence
//! of a named step of the page store's commit / checkpoint protocol (frame write, WAL fsync,
//! each backfill write, database fsync, publish, log restart): so kills land during frame writes
//! and during the backfill. After every kill the parent recovers and checks the state equals the
//! reference at the recovered tick, which must be at least the last tick reported durable. The
//! directory is reused across kills. `TICKSTATE_WAL_CRASH_KILLS` sets the number of kills
//! (default 32, half per algorithm; every step is killed at twice: IPP, which writes changed pages, and NS, which writes all).

mod common;

use common::{decode, Inputs};
use prefixkv_tickstate::algo::{InterleavedPingPong, NaiveSnapshot};
use prefixkv_tickstate::{recover, Algorithm, AlgorithmKind, Config, ImageStore, TickState};
use rand::{RngExt, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

const CHILD_ENV: &str = "TICKSTATE_WAL_CRASH_CHILD_DIR";
const WORDS: usize = 40 * 512 + 100;
const ACTIONS_PER_TICK: u64 = 30;

/// Steps of `prefixkv-pagestore` at which a child may kill itself.
const STEPS: [&str; 8] = [
    "commit:before_frames_write",
    "commit:before_wal_fsync",
    "checkpoint:before_wal_fsync",
    "backfill:write",
    "checkpoint:before_db_fsync",
    "checkpoint:before_publish",
    "restart:before_header_write",
    "restart:after_header_fsync",
];

/// The application's deterministic inputs: the actions of `tick` (same in every process).
fn actions(tick: u64) -> Vec<[u8; 16]> {
    Inputs {
        words: WORDS,
        actions_per_tick: ACTIONS_PER_TICK,
        hot_probability: 0.8,
        hot_words: 1500,
        seed: 0x2545_f491_4f6c_dd1d,
    }
    .actions(tick)
}

fn apply(state: &mut [u64], _tick: u64, action: &[u8]) {
    let (index, value) = decode(action);
    state[index] = step(state[index], value);
}

/// One cell's new value (order-dependent, so a reordered or duplicated replay shows).
fn step(old: u64, value: u64) -> u64 {
    old.rotate_left(5) ^ value
}

static KILL_STEP: OnceLock<(&'static str, u64)> = OnceLock::new();
static STEP_COUNT: AtomicU64 = AtomicU64::new(0);

fn kill_at_step(name: &'static str) {
    if let Some((step, at)) = KILL_STEP.get() {
        if *step == name && STEP_COUNT.fetch_add(1, Ordering::Relaxed) + 1 == *at {
            // SAFETY: plain syscalls; the process ends here, as in a crash.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

fn child_loop<A: Algorithm>(dir: &str) {
    if let (Ok(step), Ok(at)) = (
        std::env::var("TICKSTATE_WAL_CRASH_STEP"),
        std::env::var("TICKSTATE_WAL_CRASH_AT"),
    ) {
        let step = STEPS.into_iter().find(|s| *s == step).expect("known step");
        KILL_STEP.set((step, at.parse().unwrap())).unwrap();
        assert!(prefixkv_pagestore::fail_point::install_step_hook(
            kill_at_step
        ));
    }
    let mut config = Config::new(WORDS);
    config.image_store = ImageStore::PageStoreWal {
        backfill_after_frames: 24,
    };
    let (mut state, _report) = TickState::<A>::open(dir, config, apply).expect("child open");
    let mut out = std::io::stdout().lock();
    for _ in 0..100_000 {
        let tick = state.tick() + 1;
        for action in actions(tick) {
            state.log_action(&action).unwrap();
            let (index, value) = decode(&action);
            state.write(index, step(state.read(index), value));
        }
        state.point_of_consistency(tick).unwrap();
        let durable = state.wait_durable().unwrap();
        writeln!(out, "durable {durable}").unwrap();
        out.flush().unwrap();
    }
}

/// Child mode entry: does nothing unless the parent set the environment.
#[test]
fn wal_crash_child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    match AlgorithmKind::parse(&std::env::var("TICKSTATE_WAL_CRASH_ALGORITHM").unwrap()).unwrap() {
        AlgorithmKind::NaiveSnapshot => child_loop::<NaiveSnapshot>(&dir),
        AlgorithmKind::InterleavedPingPong => child_loop::<InterleavedPingPong>(&dir),
        other => panic!("{other:?} is not used by this test"),
    }
}

#[test]
fn sigkill_during_wal_frames_and_backfill_recovers_last_durable_tick() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let kills: usize = std::env::var("TICKSTATE_WAL_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x3a1_c4a5);
    let executable = std::env::current_exe().unwrap();
    let kinds = [
        AlgorithmKind::InterleavedPingPong,
        AlgorithmKind::NaiveSnapshot,
    ];
    let mut step_kills = 0;
    let mut step_rounds = 0;
    for kind in kinds {
        let directory = tempfile::tempdir().unwrap();
        let mut reference = vec![0u64; WORDS];
        let mut reference_tick = 0u64;
        for round in 0..kills.div_ceil(kinds.len()) {
            let mut command = Command::new(&executable);
            command
                .args([
                    "--exact",
                    "wal_crash_child_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, directory.path())
                .env("TICKSTATE_WAL_CRASH_ALGORITHM", kind.short_name())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            // Odd rounds: the child kills itself at a protocol step; even rounds: the parent
            // kills it after a random number of durable ticks.
            let step = (round % 2 == 1).then(|| {
                step_rounds += 1;
                STEPS[(step_rounds - 1) % STEPS.len()]
            });
            if let Some(step) = step {
                command.env("TICKSTATE_WAL_CRASH_STEP", step).env(
                    "TICKSTATE_WAL_CRASH_AT",
                    rng.random_range(1..5u32).to_string(),
                );
            }
            let mut child = command.spawn().unwrap();
            let stdout = child.stdout.take().unwrap();
            let (lines, receiver) = mpsc::channel();
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(tick) = line.strip_prefix("durable ") {
                        if lines.send(tick.parse::<u64>().unwrap()).is_err() {
                            break;
                        }
                    }
                }
            });
            // A step kill ends the child by itself (the reader then hangs up); bound it by a
            // number of reports in case the step is not reached.
            let reports = if step.is_some() {
                400
            } else {
                rng.random_range(1..60)
            };
            let mut last_durable = reference_tick;
            let mut died = false;
            for _ in 0..reports {
                match receiver.recv_timeout(Duration::from_secs(60)) {
                    Ok(tick) => last_durable = tick,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        died = true;
                        break;
                    }
                    Err(error) => panic!("{kind:?} round {round}: no report within 60 s: {error}"),
                }
            }
            if !died {
                child.kill().unwrap();
            }
            let status = child.wait().unwrap();
            reader.join().unwrap();
            while let Ok(tick) = receiver.try_recv() {
                last_durable = tick;
            }
            if died {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(
                    status.signal(),
                    Some(libc::SIGKILL),
                    "{kind:?} round {round}: child ended without the kill: {status:?}"
                );
                step_kills += 1;
            }
            let (state, tick, report) = recover(directory.path(), WORDS, apply).unwrap();
            assert!(tick >= last_durable, "{kind:?} round {round}: recovered tick {tick} < last durable {last_durable} ({report:?})");
            assert!(
                tick >= reference_tick,
                "{kind:?} round {round}: recovered tick went back"
            );
            while reference_tick < tick {
                reference_tick += 1;
                for action in actions(reference_tick) {
                    apply(&mut reference, reference_tick, &action);
                }
            }
            assert!(state == reference, "{kind:?} round {round}: recovered state at tick {tick} differs from the reference ({report:?})");
            eprintln!(
                "wal crash {kind:?}/{round} ({}{}): reported {last_durable}, recovered {tick} (image {:?} from WAL store {}, {} ticks replayed, skipped {:?})",
                step.unwrap_or("parent kill"),
                if died { ", killed itself" } else { "" },
                report.image_tick,
                report.image_from_wal_store,
                report.ticks_replayed,
                report.skipped_images
            );
        }
    }
    assert!(
        step_kills > 0,
        "no child reached a protocol step to kill itself at"
    );
}
