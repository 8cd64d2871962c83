//! Crash tests: a child process (this test binary re-executed in child mode by
//! `prefixkv_testkit::child`) runs a game loop with logging and checkpoints on, reporting each
//! durable tick; the parent SIGKILLs it after a random number of reports, i.e. at an arbitrary
//! point of its image writes and log group commits, and checks that recovery yields exactly the
//! reference state (the inputs applied to a plain vector) of a tick no older than the last one
//! reported durable. The same directory is reused across kills, so children also recover from
//! earlier crashes and continue (and crash again). `TICKSTATE_CRASH_KILLS` sets the number of kills
//! (default four per algorithm); `TICKSTATE_CRASH_SEED` replays the kill points of a run.

mod common;

use common::{apply, decode, durable_tick, step, Inputs, Reference};
use prefixkv_testkit::child::{self, ChildProcess};
use prefixkv_testkit::{env_count, rng::Rng};
use prefixkv_tickstate::algo::*;
use prefixkv_tickstate::{recover, Algorithm, AlgorithmKind, Config, TickState};
use std::ffi::OsStr;
use std::time::Duration;

const CHILD_ENV: &str = "TICKSTATE_CRASH_CHILD_DIR";
const ALGORITHM_ENV: &str = "TICKSTATE_CRASH_ALGORITHM";
const WORDS: usize = 96 * 1024;
const ACTIONS_PER_TICK: u64 = 40;

/// The application's deterministic inputs: the actions of `tick` (same in every process).
fn actions(tick: u64) -> Vec<[u8; 16]> {
    Inputs {
        words: WORDS,
        actions_per_tick: ACTIONS_PER_TICK,
        hot_percent: 70,
        hot_words: 256,
        seed: 0x9e37_79b9_7f4a_7c15,
    }
    .actions(tick)
}

fn child_loop<A: Algorithm>(dir: &str) {
    let (mut state, _report) =
        TickState::<A>::open(dir, Config::new(WORDS), apply).expect("child open");
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
fn crash_child_entry() {
    let Some(dir) = child::child_mode(CHILD_ENV) else {
        return;
    };
    let name = child::child_mode(ALGORITHM_ENV).expect("the parent names the algorithm");
    let kind = AlgorithmKind::parse(&name).expect("a known algorithm");
    match kind {
        AlgorithmKind::NaiveSnapshot => child_loop::<NaiveSnapshot>(&dir),
        AlgorithmKind::CopyOnUpdate => child_loop::<CopyOnUpdate>(&dir),
        AlgorithmKind::BitArrayCopyOnUpdate => child_loop::<BitArrayCopyOnUpdate>(&dir),
        AlgorithmKind::NaiveZigzag => child_loop::<NaiveZigzag>(&dir),
        AlgorithmKind::InterleavedZigzag => child_loop::<InterleavedZigzag>(&dir),
        AlgorithmKind::PackedZigzag => child_loop::<PackedZigzag>(&dir),
        AlgorithmKind::BitArrayZigzag => child_loop::<BitArrayZigzag>(&dir),
        AlgorithmKind::NaivePingPong => child_loop::<NaivePingPong>(&dir),
        AlgorithmKind::InterleavedPingPong => child_loop::<InterleavedPingPong>(&dir),
    }
}

#[test]
fn sigkill_at_random_points_recovers_last_durable_tick() {
    if child::child_mode(CHILD_ENV).is_some() {
        return;
    }
    let kills = env_count("TICKSTATE_CRASH_KILLS", 4 * AlgorithmKind::ALL.len() as u64) as usize;
    let mut rng = Rng::from_env("TICKSTATE_CRASH_SEED");
    let per_algorithm = kills.div_ceil(AlgorithmKind::ALL.len());
    for (number, kind) in AlgorithmKind::ALL.iter().enumerate() {
        let directory = tempfile::tempdir().unwrap();
        let mut reference = Reference::new(WORDS);
        for round in 0..per_algorithm {
            let mut child = ChildProcess::spawn_test(
                "crash_child_entry",
                &[
                    (CHILD_ENV, directory.path().as_os_str()),
                    (ALGORITHM_ENV, OsStr::new(kind.short_name())),
                ],
            )
            .unwrap();
            let reports = rng.in_range(1..60);
            let mut last_durable = reference.tick;
            for _ in 0..reports {
                match child.next_line(Duration::from_secs(60)) {
                    Ok(line) => last_durable = durable_tick(&line),
                    Err(error) => panic!("{kind:?} round {round}: {error}"),
                }
            }
            // Lines the child printed before it died were reports of durable ticks too.
            for line in child.kill() {
                last_durable = durable_tick(&line);
            }
            let (state, tick, report) = recover(directory.path(), WORDS, apply).unwrap();
            assert!(tick >= last_durable, "{kind:?} round {round}: recovered tick {tick} < last durable {last_durable} ({report:?})");
            reference.advance_to(tick, actions, apply);
            assert!(state == reference.state, "{kind:?} round {round}: recovered state at tick {tick} differs from the reference ({report:?})");
            eprintln!("crash {number}/{round} {kind:?}: reported {last_durable}, recovered {tick} (image {:?}, {} ticks replayed, {} discarded actions)", report.image_tick, report.ticks_replayed, report.actions_discarded);
        }
    }
}
