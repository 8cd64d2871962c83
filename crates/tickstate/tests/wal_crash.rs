//! Crash tests of the WAL-backed image store: a child process (this test binary re-executed in
//! child mode by `prefixkv_testkit::child`) runs a logged game loop whose images go to the page store as WAL frames, with a
//! backfill every few images, and reports each durable tick on its stdout pipe. It is SIGKILLed
//! either by the parent after a random number of reports, or by itself at the n-th occurrence
//! of a named step of the page store's commit / checkpoint protocol (frame write, WAL fsync,
//! each backfill write, database fsync, publish, log restart): so kills land during frame writes
//! and during the backfill. After every kill the parent recovers and checks the state equals the
//! reference at the recovered tick, which must be at least the last tick reported durable. The
//! directory is reused across kills. `TICKSTATE_WAL_CRASH_KILLS` sets the number of kills
//! (default 32, half per algorithm; every step is killed at twice: IPP, which writes changed pages,
//! and NS, which writes all); `TICKSTATE_WAL_CRASH_SEED` replays the kill points of a run.

mod common;

use common::{decode, durable_tick, Inputs, Reference};
use prefixkv_testkit::child::{self, ChildError, ChildProcess};
use prefixkv_testkit::{env_count, rng::Rng};
use prefixkv_tickstate::algo::{InterleavedPingPong, NaiveSnapshot};
use prefixkv_tickstate::{recover, Algorithm, AlgorithmKind, Config, ImageStore, TickState};
use std::ffi::{OsStr, OsString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

const CHILD_ENV: &str = "TICKSTATE_WAL_CRASH_CHILD_DIR";
const ALGORITHM_ENV: &str = "TICKSTATE_WAL_CRASH_ALGORITHM";
const STEP_ENV: &str = "TICKSTATE_WAL_CRASH_STEP";
const AT_ENV: &str = "TICKSTATE_WAL_CRASH_AT";
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
        hot_percent: 80,
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
    if let (Some(step), Some(at)) = (child::child_mode(STEP_ENV), child::child_mode(AT_ENV)) {
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
    for _ in 0..100_000 {
        let tick = state.tick() + 1;
        for action in actions(tick) {
            state.log_action(&action).unwrap();
            let (index, value) = decode(&action);
            state.write(index, step(state.read(index), value));
        }
        state.point_of_consistency(tick).unwrap();
        let durable = state.wait_durable().unwrap();
        child::report(format!("durable {durable}"));
    }
}

/// Child mode entry: does nothing unless the parent set the environment.
#[test]
fn wal_crash_child_entry() {
    let Some(dir) = child::child_mode(CHILD_ENV) else {
        return;
    };
    let name = child::child_mode(ALGORITHM_ENV).expect("the parent names the algorithm");
    match AlgorithmKind::parse(&name).expect("a known algorithm") {
        AlgorithmKind::NaiveSnapshot => child_loop::<NaiveSnapshot>(&dir),
        AlgorithmKind::InterleavedPingPong => child_loop::<InterleavedPingPong>(&dir),
        other => panic!("{other:?} is not used by this test"),
    }
}

#[test]
fn sigkill_during_wal_frames_and_backfill_recovers_last_durable_tick() {
    if child::child_mode(CHILD_ENV).is_some() {
        return;
    }
    let kills = env_count("TICKSTATE_WAL_CRASH_KILLS", 32) as usize;
    let mut rng = Rng::from_env("TICKSTATE_WAL_CRASH_SEED");
    let kinds = [
        AlgorithmKind::InterleavedPingPong,
        AlgorithmKind::NaiveSnapshot,
    ];
    let mut step_kills = 0;
    let mut step_rounds = 0;
    for kind in kinds {
        let directory = tempfile::tempdir().unwrap();
        let mut reference = Reference::new(WORDS);
        for round in 0..kills.div_ceil(kinds.len()) {
            // Odd rounds: the child kills itself at a protocol step; even rounds: the parent
            // kills it after a random number of durable ticks.
            let step = (round % 2 == 1).then(|| {
                step_rounds += 1;
                STEPS[(step_rounds - 1) % STEPS.len()]
            });
            let at = OsString::from(rng.in_range(1..5).to_string());
            let mut envs: Vec<(&str, &OsStr)> = vec![
                (CHILD_ENV, directory.path().as_os_str()),
                (ALGORITHM_ENV, OsStr::new(kind.short_name())),
            ];
            if let Some(step) = step {
                envs.push((STEP_ENV, OsStr::new(step)));
                envs.push((AT_ENV, &at));
            }
            let mut child = ChildProcess::spawn_test("wal_crash_child_entry", &envs).unwrap();
            // A step kill ends the child by itself; bound it by a number of reports in case the
            // step is not reached.
            let reports = if step.is_some() {
                400
            } else {
                rng.in_range(1..60)
            };
            let mut last_durable = reference.tick;
            let mut died = None;
            for _ in 0..reports {
                match child.next_line(Duration::from_secs(60)) {
                    Ok(line) => last_durable = durable_tick(&line),
                    Err(ChildError::Exited(status)) => {
                        died = Some(status);
                        break;
                    }
                    Err(error) => panic!("{kind:?} round {round}: {error}"),
                }
            }
            for line in child.kill() {
                last_durable = durable_tick(&line);
            }
            if let Some(status) = died {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(
                    status.and_then(|status| status.signal()),
                    Some(libc::SIGKILL),
                    "{kind:?} round {round}: child ended without the kill: {status:?}"
                );
                step_kills += 1;
            }
            let (state, tick, report) = recover(directory.path(), WORDS, apply).unwrap();
            assert!(tick >= last_durable, "{kind:?} round {round}: recovered tick {tick} < last durable {last_durable} ({report:?})");
            reference.advance_to(tick, actions, apply);
            assert!(state == reference.state, "{kind:?} round {round}: recovered state at tick {tick} differs from the reference ({report:?})");
            eprintln!(
                "wal crash {kind:?}/{round} ({}{}): reported {last_durable}, recovered {tick} (image {:?} from WAL store {}, {} ticks replayed, skipped {:?})",
                step.unwrap_or("parent kill"),
                if died.is_some() { ", killed itself" } else { "" },
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
